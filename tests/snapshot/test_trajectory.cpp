// Trajectory files and the reference encoding: self-KL on realistic rows, exact zero for an
// identical row, round trip, one rejected file per named defect, and version 3 (segments):
// its round trip, its rules, and the one-prompt case still written as version 2's bytes.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <utility>
#include <iterator>
#include <filesystem>
#include <cstdlib>
#include <random>
#include <string>

#include "../replay/fake_logits.h"
#include "sjkv/io/file_error.h"
#include "sjkv/io/zstd_filter.h"
#include "sjkv/replay/score.h"
#include "sjkv/replay/reference.h"

using namespace sjkv;
using namespace sjkv::replay;
using sjkv_test::kGemmaVocab;

namespace {

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "sjkv-traj-" + std::to_string(::getpid()) + "-" + name;
}

double entropy(const std::vector<float>& row) {
  const double lz = log_sum_exp(row.data(), static_cast<uint32_t>(row.size()));
  double h = 0;
  for (float x : row) {
    const double lp = x - lz;
    h -= std::exp(lp) * lp;
  }
  return h;
}

// A greedy trajectory of `G` realistic positions over the Gemma vocabulary.
Trajectory make_trajectory(uint32_t G, uint64_t seed, std::vector<std::vector<float>>* rows = nullptr) {
  Trajectory t;
  t.model_file = "model.gguf";
  t.model_sha256 = std::string(64, 'a');
  t.architecture = "gemma3";
  t.n_vocab = kGemmaVocab;
  t.prompt_tokens = 5;
  t.tokens = {2, 100, 7000, 262143, 42};
  t.settings.generate = G;
  t.settings.reference = "f32";
  t.encoding = RefEncoding::sparse;
  const auto shapes = sjkv_test::row_shapes();
  for (uint32_t j = 0; j < G; ++j) {
    const auto row = sjkv_test::lm_logits(kGemmaVocab, shapes[j % shapes.size()], seed + j);
    t.ref.push_back(encode_reference(row.data(), kGemmaVocab, t.settings.self_kl_target));
    t.self_kl_max = std::max(t.self_kl_max, self_kl(row.data(), kGemmaVocab, t.ref.back()));
    t.tokens.push_back(argmax(row.data(), kGemmaVocab));
    if (rows) rows->push_back(row);
  }
  return t;
}

void expect_same(const Trajectory& a, const Trajectory& b) {
  EXPECT_EQ(a.model_file, b.model_file);
  EXPECT_EQ(a.model_sha256, b.model_sha256);
  EXPECT_EQ(a.architecture, b.architecture);
  EXPECT_EQ(a.n_vocab, b.n_vocab);
  EXPECT_EQ(a.prompt_tokens, b.prompt_tokens);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.settings.generate, b.settings.generate);
  EXPECT_EQ(a.settings.sample, b.settings.sample);
  EXPECT_EQ(a.settings.seed, b.settings.seed);
  EXPECT_EQ(a.settings.temperature, b.settings.temperature);
  EXPECT_EQ(a.settings.top_k, b.settings.top_k);
  EXPECT_EQ(a.settings.top_p, b.settings.top_p);
  EXPECT_EQ(a.settings.reference, b.settings.reference);
  EXPECT_EQ(a.settings.ubatch, b.settings.ubatch);
  EXPECT_EQ(b.settings.threads, 0u);  // not stored: files recorded with any thread count are the same bytes
  EXPECT_EQ(a.self_kl_max, b.self_kl_max);
  ASSERT_EQ(a.ref.size(), b.ref.size());
  for (size_t j = 0; j < a.ref.size(); ++j) {
    EXPECT_EQ(a.ref[j].ids, b.ref[j].ids);
    ASSERT_EQ(a.ref[j].logits.size(), b.ref[j].logits.size());
    EXPECT_EQ(0, std::memcmp(a.ref[j].logits.data(), b.ref[j].logits.data(), 4 * a.ref[j].logits.size()));
    EXPECT_EQ(0, std::memcmp(&a.ref[j].log_z, &b.ref[j].log_z, 8));
    EXPECT_EQ(0, std::memcmp(&a.ref[j].rest_mass, &b.ref[j].rest_mass, 8));
  }
}

constexpr uint32_t kEmbd = 640;

// A greedy hidden-encoded trajectory: per position a hidden state and a realistic logits row
// (unrelated here: the file only records them; test_score checks the recomputation).
Trajectory make_hidden_trajectory(uint32_t G, uint64_t seed, std::vector<std::vector<float>>* rows = nullptr) {
  Trajectory t = make_trajectory(1, seed);
  t.encoding = RefEncoding::hidden;
  t.ref.clear();
  t.self_kl_max = 0.0;
  t.tokens.resize(t.prompt_tokens);
  t.n_embd = kEmbd;
  t.settings.generate = G;
  std::mt19937_64 g(seed);
  std::normal_distribution<float> z(0.0f, 1.0f);
  const auto shapes = sjkv_test::row_shapes();
  for (uint32_t j = 0; j < G; ++j) {
    std::vector<float> hidden(kEmbd);
    for (float& x : hidden) x = 3.0f * z(g);
    const auto row = sjkv_test::lm_logits(kGemmaVocab, shapes[j % shapes.size()], seed + 100 + j);
    t.hid.push_back(encode_hidden(hidden.data(), kEmbd, row.data(), kGemmaVocab));
    t.tokens.push_back(argmax(row.data(), kGemmaVocab));
    if (rows) rows->push_back(row);
  }
  return t;
}

void expect_same_hidden(const Trajectory& a, const Trajectory& b) {
  ASSERT_EQ(b.encoding, RefEncoding::hidden);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.n_embd, b.n_embd);
  EXPECT_EQ(a.settings.reference, b.settings.reference);
  ASSERT_EQ(a.hid.size(), b.hid.size());
  for (size_t j = 0; j < a.hid.size(); ++j) {
    const HiddenRef &x = a.hid[j], &y = b.hid[j];
    ASSERT_EQ(x.hidden.size(), y.hidden.size());
    EXPECT_EQ(0, std::memcmp(x.hidden.data(), y.hidden.data(), 4 * x.hidden.size()));
    EXPECT_EQ(0, std::memcmp(&x.log_z, &y.log_z, 8));
    EXPECT_EQ(x.logits_hash, y.logits_hash);
    EXPECT_EQ(x.top_ids, y.top_ids);
    ASSERT_EQ(x.top_logprobs.size(), y.top_logprobs.size());
    EXPECT_EQ(0, std::memcmp(x.top_logprobs.data(), y.top_logprobs.data(), 4 * x.top_logprobs.size()));
  }
}

// A small trajectory from integer formulas only (no random draws, no libm), so that its file
// is the same bytes on every build with the same HDF5 and zstd: `prompt` given tokens; the
// caller appends the scored positions (add_scored_row).
Trajectory small_base(RefEncoding enc, uint32_t V, uint32_t E, uint32_t prompt) {
  Trajectory t;
  t.model_file = "small.gguf";
  t.model_sha256 = std::string(64, 'b');
  t.architecture = "llama";
  t.n_vocab = V;
  t.prompt_tokens = prompt;
  for (uint32_t i = 0; i < prompt; ++i) t.tokens.push_back(static_cast<int32_t>((i * 17 + 1) % V));
  t.settings.reference = "f32";
  t.settings.ubatch = 4;
  t.encoding = enc;
  t.n_embd = enc == RefEncoding::hidden ? E : 0;
  return t;
}

// The reference of scored position j (a permutation of 0 ... V-1 scaled: no tied logits; V
// coprime to 7919), appended to t; returns its top token.
int32_t add_scored_row(Trajectory& t, uint32_t j) {
  const uint32_t V = t.n_vocab, E = t.n_embd;
  std::vector<float> row(V), h(E);
  for (uint32_t i = 0; i < V; ++i) row[i] = static_cast<float>((i * 7919u + j * 104729u) % V) * 0.03125f - 6.0f;
  for (uint32_t i = 0; i < E; ++i) h[i] = static_cast<float>((i * 13u + j * 7u) % 17u) * 0.25f - 2.0f;
  if (t.encoding == RefEncoding::hidden) {
    t.hid.push_back(encode_hidden(h.data(), E, row.data(), V));
    return static_cast<int32_t>(t.hid.back().top_ids[0]);
  }
  t.ref.push_back(encode_reference(row.data(), V, t.settings.self_kl_target));
  t.self_kl_max = std::max(t.self_kl_max, self_kl(row.data(), V, t.ref.back()));
  return t.ref.back().top();
}

// The version-2 shape: a prompt of 6 tokens and G greedy generated positions (generate G + 2).
Trajectory small_v2(RefEncoding enc, uint32_t G) {
  Trajectory t = small_base(enc, 301, 16, 6);
  t.settings.generate = G + 2;
  for (uint32_t j = 0; j < G; ++j) t.tokens.push_back(add_scored_row(t, j));
  return t;
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Edits one file in place through HDF5 (the zstd filter is registered by the library).
struct H5Edit {
  hid_t f;
  explicit H5Edit(const std::string& path) {
    register_zstd_filter();
    f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    EXPECT_GE(f, 0);
  }
  ~H5Edit() { H5Fclose(f); }
  void set_u32_attr(const char* name, uint32_t v) {
    H5Adelete(f, name);
    const hid_t s = H5Screate(H5S_SCALAR);
    const hid_t a = H5Acreate2(f, name, H5T_STD_U32LE, s, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_UINT32, &v);
    H5Aclose(a);
    H5Sclose(s);
  }
  void set_string_attr(const char* name, const std::string& v) {
    H5Adelete(f, name);
    const hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, v.size());
    H5Tset_strpad(t, H5T_STR_NULLPAD);
    const hid_t s = H5Screate(H5S_SCALAR);
    const hid_t a = H5Acreate2(f, name, t, s, H5P_DEFAULT, H5P_DEFAULT);
    EXPECT_GE(H5Awrite(a, t, v.data()), 0);
    H5Aclose(a);
    H5Sclose(s);
    H5Tclose(t);
  }
  // Replaces a dataset by an unfiltered u32 one of the given shape.
  void replace_u32_dataset(const char* name, const std::vector<hsize_t>& dims, const std::vector<uint32_t>& v) {
    H5Ldelete(f, name, H5P_DEFAULT);
    const hid_t s = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
    const hid_t d = H5Dcreate2(f, name, H5T_STD_U32LE, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    EXPECT_GE(H5Dwrite(d, H5T_NATIVE_UINT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()), 0);
    H5Dclose(d);
    H5Sclose(s);
  }
  template <class T>
  void poke(const char* dataset, size_t index, T value, hid_t mem_type) {
    const hid_t d = H5Dopen2(f, dataset, H5P_DEFAULT);
    ASSERT_GE(d, 0);
    const hid_t s = H5Dget_space(d);
    const size_t n = static_cast<size_t>(H5Sget_simple_extent_npoints(s));
    std::vector<T> v(n);
    ASSERT_GE(H5Dread(d, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()), 0);
    v.at(index) = value;
    ASSERT_GE(H5Dwrite(d, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()), 0);
    H5Sclose(s);
    H5Dclose(d);
  }
};

void expect_rejected(const std::string& path, const std::string& defect_part) {
  try {
    (void)read_trajectory(path);
    ADD_FAILURE() << path << " was accepted; expected: " << defect_part;
  } catch (const FileError& e) {
    EXPECT_EQ(e.path(), path);
    EXPECT_NE(std::string(e.what()).find(defect_part), std::string::npos) << e.what();
  }
}

// The must-reject fixtures stored in tests/reject/trajectory/ (the default, hidden encoding;
// damaged sparse files are megabytes at a 262,144-token vocabulary, so those are made and
// checked in memory only): file name and a part of the defect the reader must name. The first
// kHiddenFixtures are the damaged files HiddenEncoding.RejectsDamagedFiles makes, the others
// those of TrajectoryV3.RejectsDamagedFiles (FORMAT.md 9.4);
// SJKV_REGENERATE_REJECT_DIR=tests/reject build/tests/snapshot/test_trajectory rewrites them.
const std::pair<const char*, const char*> kRejectFixtures[] = {
    {"hidden-inf-hidden-value.h5", "reference position 2: hidden state value 9 is not finite"},
    {"hidden-top-id-out-of-range.h5", "reference position 1: top token id 262145 is out of range"},
    {"hidden-top-unsorted.h5", "not in descending order"},
    {"hidden-top-logprob-positive.h5", "top log-probability 0 is not finite and <= 0"},
    {"hidden-top-id-twice.h5", "listed twice"},
    {"hidden-n-embd-mismatch.h5", "reference/hidden: shape [4, 640] does not match"},
    {"hidden-top-n-zero.h5", "top_n"},
    {"hidden-inf-log-z.h5", "reference position 1: log_z is not finite"},
    {"hidden-no-encoding.h5", "missing attribute encoding"},
    {"v3-no-segments.h5", "dataset segments is missing"},
    {"v3-segments-shape.h5", "dataset segments: shape [10, 2] does not match [n_segments, 3] = [10, 3]"},
    {"v3-kind-unknown.h5", "segment 4: kind code 7 is unknown"},
    {"v3-empty-segment.h5", "segment 3 (given) is empty"},
    {"v3-idle-has-tokens.h5", "segment 2 (idle) holds tokens (1); an idle step holds none"},
    {"v3-keep-recent-not-idle.h5", "segment 1 (generated) has keep_recent 5; only an idle segment has one"},
    {"v3-first-not-given.h5", "the first segment is generated; it must be given text"},
    {"v3-last-not-scored.h5", "the last segment is given; it must be generated or answer text"},
    {"v3-given-adjacent.h5", "segments 0 and 1 are both given"},
    {"v3-scored-not-after-given.h5", "segment 5 (generated) follows segment 4 (generated), not a given segment"},
    {"v3-idle-not-before-given.h5", "segment 7 (idle) is not followed by a given segment"},
    {"v3-lengths-sum.h5", "segment lengths sum to 24, not n_tokens = 25"},
    {"v3-generated-count.h5", "generated and answer segments hold 9 tokens, not generated = 10"},
    {"v3-prompt-tokens.h5", "prompt_tokens = 5 is not the first segment's length, 6"},
    {"v3-turn-over-cap.h5", "segment 1 (generated) holds 3 tokens, more than generate = 2"},
    {"v3-context-short.h5", "context = 23 is less than n_tokens = 24"},
    {"v3-greedy-turn-2.h5", "generated token 3 is not the reference's top token although greedy (position 13)"},
    {"v3-provenance-partial.h5", "provenance is partial: attribute jinja2_version is missing"},
    {"v3-provenance-hash.h5", "chat_template_sha256 is not 64 lower-case hexadecimal digits"},
    {"v3-provenance-date.h5", "template_date is not a date YYYY-MM-DD"},
    {"version-4.h5", "version 4 is newer than this build reads (3)"},
};
constexpr size_t kHiddenFixtures = 9;

// With SJKV_REGENERATE_REJECT_DIR set, a damaged file becomes the stored fixture `name`.
void keep_fixture(const std::string& path, const char* name) {
  const char* dir = std::getenv("SJKV_REGENERATE_REJECT_DIR");
  if (!dir || !*dir) return;
  const std::filesystem::path d = std::filesystem::path(dir) / "trajectory";
  std::filesystem::create_directories(d);
  std::filesystem::copy_file(path, d / name, std::filesystem::copy_options::overwrite_existing);
}

}  // namespace

// The measurement behind docs/FORMAT.md 9.2: per shape, kept tokens, self-KL and stored bytes.
TEST(Reference, SelfKlBelowTargetOnRealisticRows) {
  const auto shapes = sjkv_test::row_shapes();
  for (size_t i = 0; i < shapes.size(); ++i) {
    for (uint64_t seed = 1; seed <= 2; ++seed) {
      const auto row = sjkv_test::lm_logits(kGemmaVocab, shapes[i], 1000 * i + seed);
      const double target = 5e-7;
      const RefDist d = encode_reference(row.data(), kGemmaVocab, target);
      const double skl = self_kl(row.data(), kGemmaVocab, d);
      EXPECT_LE(skl, target) << "shape " << i;
      EXPECT_GE(skl, 0.0);
      EXPECT_EQ(d.top(), argmax(row.data(), kGemmaVocab));
      if (entropy(row) < 0.5) {
        EXPECT_LT(d.ids.size(), 1000u) << "shape " << i;
      }
      // The fewest are kept: dropping the kept token of the smallest logit breaks the target.
      if (d.ids.size() > 1) {
        RefDist fewer = d;
        size_t worst = 0;
        for (size_t k = 1; k < d.ids.size(); ++k)
          if (d.logits[k] < d.logits[worst] || (d.logits[k] == d.logits[worst] && d.ids[k] > d.ids[worst])) worst = k;
        fewer.ids.erase(fewer.ids.begin() + static_cast<std::ptrdiff_t>(worst));
        fewer.logits.erase(fewer.logits.begin() + static_cast<std::ptrdiff_t>(worst));
        fewer.rest_mass = rest_mass(row.data(), kGemmaVocab, d.log_z, fewer.ids);
        EXPECT_GT(self_kl(row.data(), kGemmaVocab, fewer), target) << "shape " << i;
      }
      if (seed == 1)
        std::printf("shape %zu: entropy %.3f nats, kept %zu, rest mass %.3g, self-KL %.3g\n", i, entropy(row),
                    d.ids.size(), d.rest_mass, skl);
    }
  }
}

TEST(Reference, IdenticalRowScoresExactlyZero) {
  for (const auto& shape : sjkv_test::row_shapes()) {
    const auto row = sjkv_test::lm_logits(kGemmaVocab, shape, 77);
    const RefDist d = encode_reference(row.data(), kGemmaVocab, 1e-7);
    EXPECT_EQ(kl_to_reference(d, row.data(), kGemmaVocab), 0.0);
  }
}

TEST(Reference, RejectsNonFiniteLogits) {
  std::vector<float> row(100, 1.0f);
  row[17] = NAN;
  EXPECT_THROW(encode_reference(row.data(), 100, 1e-7), std::invalid_argument);
}

TEST(Reference, TinyVocabularies) {
  const std::vector<float> row = {0.5f, 0.25f, -1.0f, 3.0f};
  // With one token left over, spreading the rest over it is exact: three are enough.
  const RefDist d = encode_reference(row.data(), 4, 1e-300);
  EXPECT_EQ(d.ids, (std::vector<uint32_t>{0, 1, 3}));
  EXPECT_EQ(self_kl(row.data(), 4, d), 0.0);
  EXPECT_EQ(kl_to_reference(d, row.data(), 4), 0.0);
  const RefDist one = encode_reference(row.data(), 1, 1e-300);
  EXPECT_EQ(one.ids, (std::vector<uint32_t>{0}));
  EXPECT_EQ(one.rest_mass, 0.0);
}

TEST(TrajectoryFile, RoundTripIsBitExact) {
  std::vector<std::vector<float>> rows;
  Trajectory t = make_trajectory(8, 11, &rows);
  t.settings.seed = 1234567890123ull;
  t.settings.ubatch = 64;
  t.settings.threads = 2;
  const std::string path = temp_path("roundtrip.h5");
  write_trajectory(path, t);
  const Trajectory back = read_trajectory(path);
  expect_same(t, back);
  for (size_t j = 0; j < rows.size(); ++j) EXPECT_EQ(kl_to_reference(back.ref[j], rows[j].data(), kGemmaVocab), 0.0);
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  const double bytes = static_cast<double>(f.tellg());
  size_t kept = 0;
  for (const RefDist& d : t.ref) kept += d.ids.size();
  std::printf("file %.0f bytes for %zu positions: %.0f bytes per position, %.2f bytes per kept token\n", bytes,
              t.ref.size(), bytes / t.ref.size(), bytes / kept);
  std::remove(path.c_str());
}

TEST(TrajectoryFile, SamplingSettingsRoundTrip) {
  Trajectory t = make_trajectory(3, 5);
  t.settings.sample = true;
  t.settings.temperature = 0.7;
  t.settings.top_k = 40;
  t.settings.top_p = 0.95;
  t.tokens.back() = 9;  // sampled: need not be the top token
  const std::string path = temp_path("sample.h5");
  write_trajectory(path, t);
  expect_same(t, read_trajectory(path));
  std::remove(path.c_str());
}

TEST(TrajectoryFile, WriterRefusesInconsistentTrajectories) {
  Trajectory t = make_trajectory(2, 3);
  const std::string path = temp_path("refused.h5");
  Trajectory bad = t;
  bad.tokens.back() = static_cast<int32_t>(kGemmaVocab);
  EXPECT_THROW(write_trajectory(path, bad), std::invalid_argument);
  bad = t;
  bad.ref[1].logits[0] = NAN;
  EXPECT_THROW(write_trajectory(path, bad), std::invalid_argument);
  bad = t;
  bad.tokens.back() = bad.ref.back().top() + 1;  // greedy but not the top token
  EXPECT_THROW(write_trajectory(path, bad), std::invalid_argument);
  EXPECT_EQ(::access(path.c_str(), F_OK), -1);  // nothing created
}

TEST(TrajectoryFile, RejectsDamagedFiles) {
  const Trajectory t = make_trajectory(4, 21);
  const std::string good = temp_path("good.h5");
  write_trajectory(good, t);
  std::ifstream in(good, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto copy = [&](const std::string& name, size_t n) {
    const std::string p = temp_path(name);
    std::ofstream(p, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(n));
    return p;
  };

  const std::string truncated = copy("truncated.h5", bytes.size() / 2);
  try {
    (void)read_trajectory(truncated);
    ADD_FAILURE() << "truncated file accepted";
  } catch (const FileError& e) {
    EXPECT_EQ(e.path(), truncated);
  }

  const std::string version = copy("version.h5", bytes.size());
  H5Edit(version).set_u32_attr("version", 4);
  expect_rejected(version, "version 4 is newer than this build reads");

  const std::string nan_logit = copy("nan.h5", bytes.size());
  H5Edit(nan_logit).poke<uint32_t>("reference/logits", 3, 0x7fc00000u, H5T_NATIVE_UINT32);
  expect_rejected(nan_logit, "is not finite");

  const std::string id_range = copy("id-range.h5", bytes.size());
  H5Edit(id_range).poke<uint32_t>("reference/ids", 0, kGemmaVocab, H5T_NATIVE_UINT32);
  expect_rejected(id_range, "out of range");

  const std::string token_range = copy("token-range.h5", bytes.size());
  H5Edit(token_range).poke<int32_t>("token_ids", 1, static_cast<int32_t>(kGemmaVocab) + 5, H5T_NATIVE_INT32);
  expect_rejected(token_range, "out of the vocabulary");

  const std::string mass = copy("mass.h5", bytes.size());
  H5Edit(mass).poke<uint64_t>("reference/rest_mass", 2, 0x3fe0000000000000ull, H5T_NATIVE_UINT64);  // 0.5
  expect_rejected(mass, "sum to");

  const std::string kept = copy("kept.h5", bytes.size());
  H5Edit(kept).poke<uint32_t>("reference/kept", 0, 0, H5T_NATIVE_UINT32);
  expect_rejected(kept, "reference/kept[0] = 0");

  const std::string magic = copy("magic.h5", bytes.size());
  {
    H5Edit e(magic);
    H5Adelete(e.f, "sjkv_format");
  }
  expect_rejected(magic, "no sjkv_format attribute");

  expect_rejected(temp_path("does-not-exist.h5"), "cannot open");
  for (const std::string& p : {good, truncated, version, nan_logit, id_range, token_range, mass, kept, magic})
    std::remove(p.c_str());
}

// ---- the hidden encoding ---------------------------------------------------------------------

TEST(HiddenEncoding, RecordsTheRowExactly) {
  const auto row = sjkv_test::lm_logits(kGemmaVocab, sjkv_test::row_shapes()[2], 5);
  std::vector<float> hidden(kEmbd, 0.25f);
  const HiddenRef h = encode_hidden(hidden.data(), kEmbd, row.data(), kGemmaVocab);
  ASSERT_EQ(h.top_ids.size(), kHiddenTopTokens);
  EXPECT_EQ(static_cast<int32_t>(h.top_ids[0]), argmax(row.data(), kGemmaVocab));
  const double lz = log_sum_exp(row.data(), kGemmaVocab);
  EXPECT_EQ(h.log_z, lz);
  for (size_t i = 0; i < h.top_ids.size(); ++i) {
    EXPECT_EQ(h.top_logprobs[i], static_cast<float>(row[h.top_ids[i]] - lz));
    if (i) {
      EXPECT_GE(row[h.top_ids[i - 1]], row[h.top_ids[i]]);
    }
  }
  size_t above = 0;  // nothing outside the list beats its last entry
  for (float x : row) above += x > row[h.top_ids.back()];
  EXPECT_LE(above, kHiddenTopTokens - 1);
  EXPECT_EQ(hidden_mismatch(h, row.data(), kGemmaVocab), "");
  // One ulp in one token far from the top: the hash sees it.
  std::vector<float> other(row);
  size_t low = 0;
  for (size_t i = 0; i < other.size(); ++i)
    if (other[i] < other[low]) low = i;
  other[low] = std::nextafter(other[low], 0.0f);
  EXPECT_NE(hidden_mismatch(h, other.data(), kGemmaVocab), "");
  // One ulp in the top token: log_z and its log-probability change too.
  other = row;
  other[h.top_ids[0]] = std::nextafter(other[h.top_ids[0]], 100.0f);
  EXPECT_NE(hidden_mismatch(h, other.data(), kGemmaVocab), "");
  std::vector<float> bad_hidden(hidden);
  bad_hidden[3] = INFINITY;
  EXPECT_THROW(encode_hidden(bad_hidden.data(), kEmbd, row.data(), kGemmaVocab), std::invalid_argument);
  // A vocabulary smaller than the list: every token, best first.
  const float tiny[] = {0.5f, 2.0f, 2.0f};
  const HiddenRef t3 = encode_hidden(hidden.data(), 4, tiny, 3);
  EXPECT_EQ(t3.top_ids, (std::vector<uint32_t>{1, 2, 0}));
}

TEST(HiddenEncoding, RoundTripIsBitExactAndSmall) {
  const Trajectory t = make_hidden_trajectory(16, 41);
  const std::string path = temp_path("hidden.h5");
  write_trajectory(path, t);
  const Trajectory back = read_trajectory(path);
  expect_same_hidden(t, back);
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  const double bytes = static_cast<double>(f.tellg());
  std::printf("hidden encoding: %.0f bytes for %zu positions (%u values each): %.0f bytes per position\n", bytes,
              t.hid.size(), kEmbd, bytes / t.hid.size());
  // 2,560 bytes of hidden state and 32 top tokens per position, plus the file's fixed part.
  EXPECT_LT(bytes, 16 * 3000.0 + 16384);
  std::remove(path.c_str());
}

TEST(HiddenEncoding, WriterRefusesInconsistentTrajectories) {
  const Trajectory t = make_hidden_trajectory(3, 43);
  const std::string path = temp_path("hidden-refused.h5");
  Trajectory bad = t;
  bad.hid[1].hidden[7] = NAN;
  EXPECT_THROW(write_trajectory(path, bad), std::invalid_argument);
  bad = t;
  bad.hid[0].hidden.pop_back();
  EXPECT_THROW(write_trajectory(path, bad), std::invalid_argument);
  bad = t;
  std::swap(bad.hid[2].top_logprobs[0], bad.hid[2].top_logprobs[5]);
  EXPECT_THROW(write_trajectory(path, bad), std::invalid_argument);
  bad = t;
  bad.hid[2].top_ids[3] = bad.hid[2].top_ids[1];
  EXPECT_THROW(write_trajectory(path, bad), std::invalid_argument);
  bad = t;
  bad.ref.push_back(make_trajectory(1, 3).ref[0]);  // both encodings at once
  EXPECT_THROW(write_trajectory(path, bad), std::invalid_argument);
  bad = t;
  bad.tokens.back() = static_cast<int32_t>(bad.hid.back().top_ids[1]);  // greedy but not the top token
  EXPECT_THROW(write_trajectory(path, bad), std::invalid_argument);
  EXPECT_EQ(::access(path.c_str(), F_OK), -1);
}

TEST(HiddenEncoding, RejectsDamagedFiles) {
  const Trajectory t = make_hidden_trajectory(4, 47);
  const std::string good = temp_path("hidden-good.h5");
  write_trajectory(good, t);
  std::ifstream in(good, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> made = {good};
  auto copy = [&](const std::string& name) {
    const std::string p = temp_path(name);
    std::ofstream(p, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    made.push_back(p);
    return p;
  };
  const std::string nan_hidden = copy("h-nan.h5");
  H5Edit(nan_hidden).poke<uint32_t>("reference/hidden", 2 * kEmbd + 9, 0x7f800000u, H5T_NATIVE_UINT32);
  expect_rejected(nan_hidden, "reference position 2: hidden state value 9 is not finite");

  const std::string id_range = copy("h-id.h5");
  H5Edit(id_range).poke<uint32_t>("reference/top_ids", 32 + 4, kGemmaVocab + 1, H5T_NATIVE_UINT32);
  expect_rejected(id_range, "reference position 1: top token id 262145 is out of range");

  const std::string unsorted = copy("h-unsorted.h5");
  H5Edit(unsorted).poke<uint32_t>("reference/top_logprobs", 3 * 32 + 31, 0x00000000u, H5T_NATIVE_UINT32);  // 0.0
  expect_rejected(unsorted, "not in descending order");

  const std::string positive = copy("h-positive.h5");
  H5Edit(positive).poke<uint32_t>("reference/top_logprobs", 0, 0x3f800000u, H5T_NATIVE_UINT32);  // +1.0
  expect_rejected(positive, "top log-probability 0 is not finite and <= 0");

  const std::string top = copy("h-greedy.h5");
  H5Edit(top).poke<uint32_t>("reference/top_ids", 0, t.hid[0].top_ids[1], H5T_NATIVE_UINT32);
  expect_rejected(top, "listed twice");

  const std::string embd = copy("h-embd.h5");
  H5Edit(embd).set_u32_attr("n_embd", kEmbd + 1);
  expect_rejected(embd, "reference/hidden: shape [4, 640] does not match");

  const std::string top_n = copy("h-topn.h5");
  H5Edit(top_n).set_u32_attr("top_n", 0);
  expect_rejected(top_n, "top_n");

  const std::string lz = copy("h-logz.h5");
  H5Edit(lz).poke<uint64_t>("reference/log_z", 1, 0x7ff0000000000000ull, H5T_NATIVE_UINT64);  // +inf
  expect_rejected(lz, "reference position 1: log_z is not finite");

  const std::string enc = copy("h-encoding.h5");
  {
    H5Edit e(enc);
    H5Adelete(e.f, "encoding");
  }
  expect_rejected(enc, "missing attribute encoding");
  // The damaged files, in order, are the stored fixtures of kRejectFixtures.
  ASSERT_EQ(made.size(), 1 + kHiddenFixtures);
  for (size_t i = 0; i < kHiddenFixtures; ++i) keep_fixture(made[i + 1], kRejectFixtures[i].first);
  for (const std::string& p : made) std::remove(p.c_str());
}

// Every stored fixture is refused by path with its defect, and nothing else is in the folder.
TEST(TrajectoryRejectFixtures, StoredFilesRefusedWithTheirDefect) {
  const std::filesystem::path dir = std::filesystem::path(SJKV_SOURCE_DIR) / "tests/reject/trajectory";
  for (const auto& [name, defect] : kRejectFixtures) {
    const std::string p = (dir / name).string();
    ASSERT_TRUE(std::filesystem::exists(p)) << p;
    expect_rejected(p, defect);
  }
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() != ".h5") continue;
    ++files;
    bool listed = false;
    for (const auto& f : kRejectFixtures) listed = listed || e.path().filename() == f.first;
    EXPECT_TRUE(listed) << e.path() << " is not in kRejectFixtures";
  }
  EXPECT_EQ(files, std::size(kRejectFixtures));
}

// Files written before the hidden encoding existed (version 1, no `encoding`) read as sparse.
TEST(TrajectoryFile, ReadsVersionOneAsSparse) {
  const Trajectory t = make_trajectory(3, 53);
  const std::string path = temp_path("v1.h5");
  write_trajectory(path, t);
  {
    H5Edit e(path);
    e.set_u32_attr("version", 1);
    H5Adelete(e.f, "encoding");
  }
  const Trajectory back = read_trajectory(path);
  EXPECT_EQ(back.encoding, RefEncoding::sparse);
  expect_same(t, back);
  EXPECT_TRUE(back.segments.empty());  // the pair [given P][generated G], as version 2
  EXPECT_EQ(back.context, 0u);
  EXPECT_EQ(back.scored_positions(), t.scored_positions());
  std::remove(path.c_str());
}

// A single-prompt trajectory is still written as version 2, byte for byte as the writer of
// version 2 wrote it: tests/golden/trajectory/ holds that writer's files of these two
// trajectories (tests/golden/README.md). A mismatch keeps the new file for comparison.
TEST(TrajectoryFile, VersionTwoIsTheSameBytes) {
  const std::filesystem::path dir = std::filesystem::path(SJKV_GOLDEN_DIR) / "trajectory";
  for (const auto& [enc, name] : {std::pair<RefEncoding, const char*>{RefEncoding::hidden, "v2-hidden.h5"},
                                  {RefEncoding::sparse, "v2-sparse.h5"}}) {
    const Trajectory t = small_v2(enc, 5);
    const std::string path = temp_path(name);
    write_trajectory(path, t);
    const std::string want = file_bytes((dir / name).string());
    ASSERT_FALSE(want.empty()) << (dir / name);
    const bool same = file_bytes(path) == want;
    EXPECT_TRUE(same) << name << ": the writer's bytes differ from the stored version-2 file; kept " << path;
    if (same) std::remove(path.c_str());
  }
}

// ---- version 3: segments ---------------------------------------------------------------------

namespace {

constexpr SegmentKind kGiven = SegmentKind::given, kGenerated = SegmentKind::generated,
                      kAnswer = SegmentKind::answer, kIdle = SegmentKind::idle;

// Three requests and a needle's answer over the small vocabulary, greedy:
//   0 given 6 | 1 generated 3 | 2 idle keep 4 | 3 given 4 | 4 generated 2 | 5 given 3 |
//   6 answer 2 | 7 idle keep 0 | 8 given 2 | 9 generated 2
// T = 24 tokens, G = 9 scored positions, a turn cap of 3, context 40. The answer tokens are not
// the reference's top (an answer is given text: the greedy check skips it).
Trajectory small_v3(RefEncoding enc, bool provenance) {
  Trajectory t = small_base(enc, 301, 16, 6);
  t.settings.generate = 3;
  t.context = 40;
  t.segments = {{kGiven, 6, 0},     {kGenerated, 3, 0}, {kIdle, 0, 4}, {kGiven, 4, 0}, {kGenerated, 2, 0},
                {kGiven, 3, 0},     {kAnswer, 2, 0},    {kIdle, 0, 0}, {kGiven, 2, 0}, {kGenerated, 2, 0}};
  uint32_t j = 0;
  for (size_t i = 1; i < t.segments.size(); ++i) {
    const Segment& g = t.segments[i];
    for (uint32_t k = 0; k < g.length; ++k) {
      if (g.kind == kGiven) {
        t.tokens.push_back(static_cast<int32_t>((t.tokens.size() * 29 + 3) % t.n_vocab));
      } else {
        const int32_t top = add_scored_row(t, j++);
        t.tokens.push_back(g.kind == kAnswer ? (top + 1) % static_cast<int32_t>(t.n_vocab) : top);
      }
    }
  }
  if (provenance)
    t.source = {std::string(64, '0'), "9f" + std::string(62, 'e'), "gemma3-turns.jinja", "2026-01-01", "3.1.6"};
  return t;
}

void expect_same_v3(const Trajectory& a, const Trajectory& b) {
  if (a.encoding == RefEncoding::sparse) expect_same(a, b);
  else expect_same_hidden(a, b);
  EXPECT_EQ(a.prompt_tokens, b.prompt_tokens);
  EXPECT_EQ(a.settings.generate, b.settings.generate);
  EXPECT_EQ(a.segments, b.segments);
  EXPECT_EQ(a.context, b.context);
  EXPECT_EQ(a.source.transcript_sha256, b.source.transcript_sha256);
  EXPECT_EQ(a.source.chat_template_sha256, b.source.chat_template_sha256);
  EXPECT_EQ(a.source.chat_template_source, b.source.chat_template_source);
  EXPECT_EQ(a.source.template_date, b.source.template_date);
  EXPECT_EQ(a.source.jinja2_version, b.source.jinja2_version);
}

uint32_t stored_version(const std::string& path) {
  H5Edit e(path);
  const hid_t a = H5Aopen(e.f, "version", H5P_DEFAULT);
  uint32_t v = 0;
  H5Aread(a, H5T_NATIVE_UINT32, &v);
  H5Aclose(a);
  return v;
}

// check_consistent's message for t, or "" when it passes.
std::string inconsistency(const Trajectory& t) {
  try {
    t.check_consistent();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return {};
}

}  // namespace

TEST(TrajectoryV3, HelpersOfBothVersions) {
  const Trajectory v2 = small_v2(RefEncoding::hidden, 5);
  EXPECT_TRUE(v2.segments.empty());
  EXPECT_TRUE(v2.is_version2());
  EXPECT_EQ(v2.schedule(), (std::vector<Segment>{{kGiven, 6, 0}, {kGenerated, 5, 0}}));
  EXPECT_EQ(v2.scored_positions(), (std::vector<uint32_t>{6, 7, 8, 9, 10}));
  EXPECT_EQ(v2.n_tokens(), 11u);
  EXPECT_EQ(v2.n_ctx(), 6u + 7u);  // prompt_tokens + generate, as score sets it for version 2

  const Trajectory t = small_v3(RefEncoding::hidden, false);
  EXPECT_FALSE(t.is_version2());
  EXPECT_EQ(t.schedule(), t.segments);
  EXPECT_EQ(t.scored_positions(), (std::vector<uint32_t>{6, 7, 8, 13, 14, 18, 19, 22, 23}));
  EXPECT_EQ(t.n_tokens(), 24u);
  EXPECT_EQ(t.n_ctx(), 40u);
  EXPECT_EQ(inconsistency(t), "");
  EXPECT_EQ(segment_kind_name(kAnswer), std::string("answer"));
  EXPECT_EQ(parse_segment_kind("idle"), kIdle);
  EXPECT_THROW(parse_segment_kind("sleep"), std::invalid_argument);
}

TEST(TrajectoryV3, RoundTripIsExact) {
  for (RefEncoding enc : {RefEncoding::hidden, RefEncoding::sparse})
    for (bool provenance : {false, true}) {
      const Trajectory t = small_v3(enc, provenance);
      const std::string path = temp_path("v3.h5");
      write_trajectory(path, t);
      EXPECT_EQ(stored_version(path), 3u);
      const Trajectory back = read_trajectory(path);
      expect_same_v3(t, back);
      EXPECT_EQ(back.scored_positions(), t.scored_positions());
      // What was read writes back to the same bytes.
      const std::string again = temp_path("v3-again.h5");
      write_trajectory(again, back);
      EXPECT_EQ(file_bytes(again), file_bytes(path));
      std::remove(path.c_str());
      std::remove(again.c_str());
    }
}

// [given][generated] with no provenance is version 2 however it is spelled; with a provenance
// or a context version 2 cannot imply, it is a two-segment version-3 file, read as the same pair.
TEST(TrajectoryV3, TheOnePromptCaseIsVersionTwo) {
  for (RefEncoding enc : {RefEncoding::hidden, RefEncoding::sparse}) {
    const Trajectory plain = small_v2(enc, 5);
    const std::string p0 = temp_path("pair-plain.h5");
    write_trajectory(p0, plain);
    EXPECT_EQ(stored_version(p0), 2u);

    Trajectory spelled = plain;
    spelled.segments = {{kGiven, 6, 0}, {kGenerated, 5, 0}};
    spelled.context = 6 + 7;  // prompt_tokens + generate
    EXPECT_TRUE(spelled.is_version2());
    const std::string p1 = temp_path("pair-spelled.h5");
    write_trajectory(p1, spelled);
    EXPECT_EQ(file_bytes(p1), file_bytes(p0));
    const Trajectory back = read_trajectory(p1);
    EXPECT_TRUE(back.segments.empty());  // version 2 reads as the implied pair
    EXPECT_EQ(back.context, 0u);
    EXPECT_EQ(back.schedule(), spelled.segments);
    EXPECT_EQ(back.n_ctx(), spelled.n_ctx());

    Trajectory wider = plain;
    wider.context = 64;
    Trajectory sourced = plain;
    sourced.context = 11;
    sourced.source = small_v3(enc, true).source;
    for (const Trajectory* t : {&wider, &sourced}) {
      EXPECT_FALSE(t->is_version2());
      const std::string p = temp_path("pair-v3.h5");
      write_trajectory(p, *t);
      EXPECT_EQ(stored_version(p), 3u);
      const Trajectory r = read_trajectory(p);
      EXPECT_EQ(r.segments, (std::vector<Segment>{{kGiven, 6, 0}, {kGenerated, 5, 0}}));
      EXPECT_EQ(r.context, t->context);
      EXPECT_EQ(r.n_ctx(), t->context);
      EXPECT_EQ(r.source.template_date, t->source.template_date);
      EXPECT_EQ(r.scored_positions(), plain.scored_positions());
      std::remove(p.c_str());
    }
    std::remove(p0.c_str());
    std::remove(p1.c_str());
  }
}

// Every rule of FORMAT.md 9.4 in memory: the writer refuses, naming it, and creates nothing.
TEST(TrajectoryV3, WriterRefusesEveryRule) {
  const Trajectory good = small_v3(RefEncoding::hidden, true);
  ASSERT_EQ(inconsistency(good), "");
  const std::vector<std::pair<std::function<void(Trajectory&)>, const char*>> cases = {
      {[](Trajectory& t) { t.segments.resize(1); }, "holds 1 segments, outside [2, 2^20]"},
      {[](Trajectory& t) { t.segments[4].kind = static_cast<SegmentKind>(9); }, "segment 4: kind code 9 is unknown"},
      {[](Trajectory& t) { t.segments[3].length = 0; }, "segment 3 (given) is empty"},
      {[](Trajectory& t) { t.segments[2].length = 1; }, "segment 2 (idle) holds tokens (1); an idle step holds none"},
      {[](Trajectory& t) { t.segments[1].keep_recent = 5; }, "segment 1 (generated) has keep_recent 5"},
      {[](Trajectory& t) { t.segments[0].kind = kGenerated; }, "the first segment is generated; it must be given text"},
      {[](Trajectory& t) { t.segments.pop_back(); }, "the last segment is given; it must be generated or answer text"},
      {[](Trajectory& t) { t.segments[1].kind = kGiven; }, "segments 0 and 1 are both given"},
      {[](Trajectory& t) { t.segments[5].kind = kGenerated; }, "segment 5 (generated) follows segment 4 (generated), not a given"},
      {[](Trajectory& t) { t.segments[8].kind = kAnswer; }, "segment 7 (idle) is not followed by a given segment"},
      {[](Trajectory& t) { t.tokens.push_back(1); }, "segment lengths sum to 24, not n_tokens = 25"},
      {[](Trajectory& t) {
         t.segments[5].length = 2;
         t.segments[6].length = 3;
       },
       "generated and answer segments hold 10 tokens, not generated = 9"},
      {[](Trajectory& t) { t.prompt_tokens = 5; }, "prompt_tokens = 5 is not the first segment's length, 6"},
      {[](Trajectory& t) { t.settings.generate = 2; }, "segment 1 (generated) holds 3 tokens, more than generate = 2"},
      {[](Trajectory& t) { t.context = 23; }, "context = 23 is less than n_tokens = 24"},
      {[](Trajectory& t) { t.context = 0; }, "context = 0 is less than n_tokens = 24"},
      {[](Trajectory& t) { t.tokens[13] = (t.tokens[13] + 1) % 301; },
       "generated token 3 is not the reference's top token (greedy; position 13)"},
      {[](Trajectory& t) { t.source.jinja2_version.clear(); }, "provenance is partial: jinja2_version is empty"},
      {[](Trajectory& t) { t.source.transcript_sha256[5] = 'A'; }, "transcript_sha256 is not 64 lower-case hexadecimal"},
      {[](Trajectory& t) { t.source.chat_template_sha256.pop_back(); }, "chat_template_sha256 is not 64 lower-case"},
      {[](Trajectory& t) { t.source.template_date = "2026-1-01"; }, "template_date is not a date YYYY-MM-DD"},
      {[](Trajectory& t) { t.source.template_date = "2026-00-10"; }, "template_date is not a date YYYY-MM-DD"},
      {[](Trajectory& t) { t.source.chat_template_source = "templates/x.jinja"; }, "chat_template_source is not 'gguf'"},
  };
  const std::string path = temp_path("v3-refused.h5");
  for (const auto& [edit, want] : cases) {
    Trajectory bad = good;
    edit(bad);
    const std::string got = inconsistency(bad);
    EXPECT_NE(got.find(want), std::string::npos) << "want '" << want << "', got '" << got << "'";
    EXPECT_THROW(write_trajectory(path, bad), std::invalid_argument) << want;
  }
  EXPECT_EQ(::access(path.c_str(), F_OK), -1);
  // Sampled: no token need be the reference's top; answers never need to be.
  Trajectory sampled = good;
  sampled.settings.sample = true;
  sampled.tokens[13] = (sampled.tokens[13] + 1) % 301;
  EXPECT_EQ(inconsistency(sampled), "");
}

TEST(TrajectoryV3, RejectsDamagedFiles) {
  const Trajectory t = small_v3(RefEncoding::hidden, true);
  const std::string good = temp_path("v3-good.h5");
  write_trajectory(good, t);
  const std::string bytes = file_bytes(good);
  std::vector<std::string> made;
  // Each edit makes one stored fixture (kRejectFixtures, after the hidden encoding's), in order.
  const std::vector<std::function<void(H5Edit&)>> edits = {
      [](H5Edit& e) { H5Ldelete(e.f, "segments", H5P_DEFAULT); },
      [](H5Edit& e) { e.replace_u32_dataset("segments", {10, 2}, std::vector<uint32_t>(20, 1)); },
      [](H5Edit& e) { e.poke<uint32_t>("segments", 3 * 4, 7, H5T_NATIVE_UINT32); },
      [](H5Edit& e) { e.poke<uint32_t>("segments", 3 * 3 + 1, 0, H5T_NATIVE_UINT32); },
      [](H5Edit& e) { e.poke<uint32_t>("segments", 3 * 2 + 1, 1, H5T_NATIVE_UINT32); },
      [](H5Edit& e) { e.poke<uint32_t>("segments", 3 * 1 + 2, 5, H5T_NATIVE_UINT32); },
      [](H5Edit& e) { e.poke<uint32_t>("segments", 0, 1, H5T_NATIVE_UINT32); },
      [&](H5Edit& e) {
        std::vector<uint32_t> rows;
        for (size_t i = 0; i + 1 < t.segments.size(); ++i)
          rows.insert(rows.end(), {static_cast<uint32_t>(t.segments[i].kind), t.segments[i].length, t.segments[i].keep_recent});
        e.replace_u32_dataset("segments", {t.segments.size() - 1, 3}, rows);
        e.set_u32_attr("n_segments", static_cast<uint32_t>(t.segments.size() - 1));
      },
      [](H5Edit& e) { e.poke<uint32_t>("segments", 3 * 1, 0, H5T_NATIVE_UINT32); },
      [](H5Edit& e) { e.poke<uint32_t>("segments", 3 * 5, 1, H5T_NATIVE_UINT32); },
      [](H5Edit& e) { e.poke<uint32_t>("segments", 3 * 8, 2, H5T_NATIVE_UINT32); },
      [](H5Edit& e) { e.set_u32_attr("n_tokens", 25); },
      [](H5Edit& e) { e.set_u32_attr("generated", 10); },
      [](H5Edit& e) { e.set_u32_attr("prompt_tokens", 5); },
      [](H5Edit& e) { e.set_u32_attr("generate", 2); },
      [](H5Edit& e) { e.set_u32_attr("context", 23); },
      [&](H5Edit& e) { e.poke<int32_t>("token_ids", 13, (t.tokens[13] + 1) % 301, H5T_NATIVE_INT32); },
      [](H5Edit& e) { H5Adelete(e.f, "jinja2_version"); },
      [](H5Edit& e) { e.set_string_attr("chat_template_sha256", std::string(64, 'E')); },
      [](H5Edit& e) { e.set_string_attr("template_date", "2026-13-01"); },
      [](H5Edit& e) { e.set_u32_attr("version", 4); },
  };
  ASSERT_EQ(kHiddenFixtures + edits.size(), std::size(kRejectFixtures));
  for (size_t i = 0; i < edits.size(); ++i) {
    const auto& [name, defect] = kRejectFixtures[kHiddenFixtures + i];
    const std::string p = temp_path(name);
    std::ofstream(p, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    made.push_back(p);
    {
      H5Edit e(p);
      edits[i](e);
    }
    expect_rejected(p, defect);
    keep_fixture(p, name);
  }
  // A version-3 file without n_segments (the fixture above lacks the dataset).
  const std::string no_count = temp_path("v3-no-count.h5");
  std::ofstream(no_count, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  made.push_back(no_count);
  {
    H5Edit e(no_count);
    H5Adelete(e.f, "n_segments");
  }
  expect_rejected(no_count, "missing attribute n_segments");
  made.push_back(good);
  for (const std::string& p : made) std::remove(p.c_str());
}

// A sparse version-3 file is checked alike (in memory only: see kRejectFixtures).
TEST(TrajectoryV3, SparseGreedyCheckSkipsAnswers) {
  const Trajectory t = small_v3(RefEncoding::sparse, false);
  const std::string good = temp_path("v3-sparse.h5");
  write_trajectory(good, t);
  EXPECT_NE(t.tokens[18], t.top_token(5));  // an answer token that is not the top: accepted
  EXPECT_EQ(read_trajectory(good).tokens, t.tokens);
  H5Edit(good).poke<int32_t>("token_ids", 22, (t.tokens[22] + 1) % 301, H5T_NATIVE_INT32);
  expect_rejected(good, "generated token 7 is not the reference's top token although greedy (position 22)");
  std::remove(good.c_str());
}
