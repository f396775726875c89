// The sequence-state stream (docs/SPEC.md §11, docs/FORMAT.md §12): the reference's five
// golden streams of the 1,500-position build, exact round trips through Snapshot, the
// configurations state version 1 cannot express, and one refused stream per defect (built
// here from a small valid stream; committed under tests/reject/state/).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "sjkv/cache.h"
#include "sjkv/hash.h"
#include "sjkv/io/encode.h"
#include "sjkv/io/file_error.h"
#include "sjkv/io/snapshot_file.h"
#include "sjkv/io/state_stream.h"
#include "sjkv/io/text.h"

#include "file_fixtures.h"

using namespace sjkv;

namespace {

// ---- the golden build (docs/SPEC.md §11; CODEC-SPEC §10.5) ----------------------------------

uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

float golden_value(uint64_t pos, uint64_t i, uint64_t side) {
  const uint64_t h = mix((23ull << 40) ^ (0ull << 36) ^ (pos << 16) ^ (i << 1) ^ side);
  const int32_t g = static_cast<int32_t>(h & 1023) + static_cast<int32_t>((h >> 10) & 1023) - 1024;
  const int32_t factor = i % 41 == 0 ? 24 : 1 + static_cast<int32_t>((h >> 20) & 3);
  return static_cast<float>(g * factor) * 0x1p-12f;
}

CodecConfig golden_config(const std::string& name) {
  CodecConfig c;
  c.head_dim = 128;
  c.group = 128;
  c.sink = 128;
  c.tail = 256;
  c.tail_max = 512;
  c.iters = 16;
  if (name == "4/4") c.body = Body::scalar;
  if (name == "3/3") c.bits_k = c.bits_v = 3, c.body = Body::scalar;
  if (name == "3/3t") c.bits_k = c.bits_v = 3, c.body = Body::trellis, c.flush_chunk = 1;
  if (name == "3/2t") c.bits_k = 3, c.bits_v = 2, c.body = Body::trellis;
  if (name == "4/4f") c.body = Body::scalar, c.staging = StagingType::f16, c.sink_type = SinkType::inherit, c.flush_chunk = 1;
  return c;
}

// Growth pattern 4 over [0, n_pos): ubatch sizes 1 + (k + 4) mod 4, every fifth 1 + (28 + 13k) mod 64.
Snapshot golden_build(const CodecConfig& cfg, uint32_t n_pos = 1500) {
  CacheShape shape;
  shape.n_layers = 2;
  shape.n_head_kv = 2;
  shape.n_ctx = 2304;
  shape.n_ubatch = 64;
  SealOptions so;
  so.iters = cfg.iters;
  SequenceCache seq(cfg, shape, so);
  EXPECT_TRUE(seq.status().ok()) << seq.status().message();
  const uint32_t row = 2 * 2 * 128;  // [layer][head][channel]
  std::vector<float> k, v;
  uint32_t pos = 0;
  for (uint32_t step = 0; pos < n_pos; ++step) {
    uint32_t n = step % 5 == 4 ? 1 + (4 * 7 + 13 * step) % 64 : 1 + (step + 4) % 4;
    if (pos + n > n_pos) n = n_pos - pos;
    EXPECT_TRUE(seq.begin_ubatch(pos, n).ok());
    k.resize(static_cast<size_t>(n) * row);
    v.resize(k.size());
    for (uint32_t t = 0; t < n; ++t)
      for (uint32_t i = 0; i < row; ++i) {
        k[static_cast<size_t>(t) * row + i] = golden_value(pos + t, i, 0);
        v[static_cast<size_t>(t) * row + i] = golden_value(pos + t, i, 1);
      }
    const Status st = seq.store_ubatch(pos, n, k.data(), v.data());
    EXPECT_TRUE(st.ok()) << st.message();
    pos += n;
  }
  return snapshot_of_cache(seq);
}

std::map<std::string, std::string> golden_hashes() {
  std::ifstream in(std::string(SJKV_GOLDEN_DIR) + "/expected_state.txt");
  std::map<std::string, std::string> out;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string word, name, version, hash;
    if (!(ls >> word >> name >> version >> hash) || word != "state") continue;
    out[name] = hash.substr(hash.find('=') + 1);
  }
  return out;
}

void expect_same_regions(const Snapshot& a, const Snapshot& b) {
  EXPECT_EQ(a.config.name(), b.config.name());
  EXPECT_EQ(a.config.flush_chunk, b.config.flush_chunk);
  EXPECT_EQ(a.config.iters, b.config.iters);
  EXPECT_EQ(a.kv_heads, b.kv_heads);
  EXPECT_EQ(a.B, b.B);
  EXPECT_EQ(a.B_prev, b.B_prev);
  EXPECT_EQ(a.N, b.N);
  EXPECT_EQ(a.draining, b.draining);
  EXPECT_EQ(a.codebook_id, b.codebook_id);
  EXPECT_TRUE(a.codebook_k == b.codebook_k && a.codebook_v == b.codebook_v);
  filetest::expect_same_region_bytes(a, b);
}

}  // namespace

// The five streams of the reference build, byte for byte (their FNV-1a-64 and sizes), and
// each read back to the same snapshot and written again to the same bytes.
TEST(StateStreamGolden, FiveConfigsMatchTheReference) {
  const std::map<std::string, std::string> want = golden_hashes();
  ASSERT_EQ(want.size(), 5u) << "tests/golden/expected_state.txt";
  const std::map<std::string, size_t> sizes = {
      {"4/4", 1108552}, {"3/3", 977480}, {"3/3t", 977480}, {"3/2t", 911944}, {"4/4f", 1548424}};
  for (const auto& [name, hash] : want) {
    SCOPED_TRACE(name);
    const Snapshot s = golden_build(golden_config(name));
    EXPECT_EQ(s.N, 1500u);
    EXPECT_EQ(s.B, 1152u);
    EXPECT_EQ(s.B_prev, 1152u);
    EXPECT_EQ(s.draining, 0u);
    const std::vector<uint8_t> bytes = state_stream_bytes(s);
    EXPECT_EQ(bytes.size(), sizes.at(name));
    EXPECT_EQ(hex64(fnv1a(bytes.data(), bytes.size())), hash);
    const Snapshot r = parse_state_stream(bytes.data(), bytes.size(), "golden.sjkvseq", {64, {}});
    expect_same_regions(s, r);
    EXPECT_TRUE(state_stream_bytes(r) == bytes);
    // The same rows decode from either.
    const Capture a = decode_snapshot(s, true), b = decode_snapshot(r, true);
    ASSERT_EQ(a.layers.size(), b.layers.size());
    for (size_t l = 0; l < a.layers.size(); ++l) EXPECT_TRUE(a.layers[l].k == b.layers[l].k && a.layers[l].v == b.layers[l].v);
  }
}

namespace {

// A small valid stream (one layer, one head, an inherited sink, one record, a few tail rows):
// the base of the defect cases. Low-entropy values so the committed fixtures stay small.
Snapshot small_snapshot(bool trellis = false) {
  CodecConfig c;
  c.head_dim = 128;
  c.group = 128;
  c.sink = 64;
  c.sink_type = SinkType::inherit;
  c.tail = 0;
  c.tail_max = 0;
  if (trellis) c.bits_k = 3, c.bits_v = 2;
  CacheShape shape;
  shape.n_layers = 1;
  shape.n_head_kv = 1;
  shape.n_ctx = 256;
  shape.n_ubatch = 16;
  SequenceCache seq(c, shape);
  std::vector<float> k(128), v(128);
  for (uint32_t p = 0; p < 200; ++p) {
    if (p % 16 == 0) {
      EXPECT_TRUE(seq.begin_ubatch(p, 16).ok());
    }
    for (uint32_t i = 0; i < 128; ++i) {
      k[i] = static_cast<float>(static_cast<int>((p + i) % 5) - 2) * 0.25f;
      v[i] = static_cast<float>(static_cast<int>((p * 3 + i) % 3) - 1) * 0.5f;
    }
    EXPECT_TRUE(seq.store(p, k.data(), v.data()).ok());
  }
  return snapshot_of_cache(seq);
}

std::vector<uint8_t> small_stream() { return state_stream_bytes(small_snapshot()); }

void put32(std::vector<uint8_t>& b, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) b[at + i] = static_cast<uint8_t>(v >> (8 * i));
}
void put64(std::vector<uint8_t>& b, size_t at, uint64_t v) {
  for (int i = 0; i < 8; ++i) b[at + i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t get32(const std::vector<uint8_t>& b, size_t at) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(b[at + i]) << (8 * i);
  return v;
}
// The checksum recomputed over the header and payload, so only the edited field is wrong.
void reseal(std::vector<uint8_t>& b) {
  const size_t end = b.size() - 8;
  put64(b, end, fnv1a(b.data(), end));
}
// Field at `at` set to `v`, checksum fixed.
std::function<std::vector<uint8_t>()> with_field(size_t at, uint32_t v) {
  return [at, v] {
    std::vector<uint8_t> b = small_stream();
    put32(b, at, v);
    reseal(b);
    return b;
  };
}

struct StreamReject {
  const char* name;    // file name under tests/reject/state/ (without .sjkvseq)
  const char* expect;  // a fragment the defect must contain
  std::function<std::vector<uint8_t>()> make;
};

const std::vector<StreamReject>& stream_rejects() {
  static const std::vector<StreamReject> cases = {
      {"empty", "truncated: 0 bytes", [] { return std::vector<uint8_t>(); }},
      {"short-magic", "truncated: 5 bytes", [] { return std::vector<uint8_t>{'S', 'J', 'K', 'V', 'S'}; }},
      {"bad-magic", "not a sequence-state stream",
       [] {
         std::vector<uint8_t> b = small_stream();
         b[3] = 'X';
         return b;
       }},
      {"truncated-version", "the state version ends at byte 16",
       [] {
         std::vector<uint8_t> b = small_stream();
         b.resize(12);
         return b;
       }},
      {"state-version-2", "state version 2, this reader knows 1", with_field(8, 2)},
      {"truncated-header", "the header and checksum need 136",
       [] {
         std::vector<uint8_t> b = small_stream();
         b.resize(100);
         return b;
       }},
      {"header-bytes", "header bytes = 64, expected 128", with_field(16, 64)},
      {"truncated-payload", "truncated: the header's payload of",
       [] {
         std::vector<uint8_t> b = small_stream();
         b.resize(b.size() - 100);
         return b;
       }},
      {"checksum", "checksum mismatch",
       [] {
         std::vector<uint8_t> b = small_stream();
         b[2000] ^= 1;
         return b;
       }},
      {"format-version", "record format version 3", with_field(12, 3)},
      {"reserved-bytes", "reserved header bytes 116-127 are not zero",
       [] {
         std::vector<uint8_t> b = small_stream();
         b[120] = 1;
         reseal(b);
         return b;
       }},
      {"sink-type", "sink_type = 2", with_field(36, 2)},
      {"body-code", "body = 7", with_field(48, 7)},
      {"staging-q8_0", "staging = 2 is not a state-version-1 staging type", with_field(56, 2)},
      {"rotation-id", "rotation id = 2", with_field(72, 2)},
      {"rotation-size", "rotation size = 64 differs from head_dim = 128", with_field(76, 64)},
      {"head-dim", "head_dim = 96 is not a power of two",
       [] {
         std::vector<uint8_t> b = small_stream();
         put32(b, 20, 96);
         put32(b, 76, 96);
         reseal(b);
         return b;
       }},
      {"kv-heads-zero", "kv_heads = 0", with_field(24, 0)},
      {"group", "group = 100", with_field(28, 100)},
      {"bits", "bits", with_field(40, 9)},
      {"trellis-4bit", "a 4/4 trellis is not in state version 1", with_field(48, 1)},
      {"iters", "iters", with_field(52, 65)},
      {"no-layers", "no layers", with_field(88, 0)},
      {"codebook-id-scalar", "must be 0 for a scalar body",
       [] {
         std::vector<uint8_t> b = small_stream();
         put64(b, 80, 0x1234);
         reseal(b);
         return b;
       }},
      {"codebook-id-trellis", "codebook identity 0000000000001234 is not that of the built-in reference tables",
       [] {
         std::vector<uint8_t> b = state_stream_bytes(small_snapshot(true));
         put64(b, 80, 0x1234);
         reseal(b);
         return b;
       }},
      {"b-below-sink", "B = 32 < sink = 64", with_field(96, 32)},
      {"b-unaligned", "is not group-aligned", with_field(96, 100)},
      {"b-prev-above-b", "B_prev = 320 > B = 192", with_field(100, 320)},
      {"draining", "draining = 2 is not 0 or 1", with_field(104, 2)},
      {"b-past-n", "sealed positions never stored",
       [] {
         std::vector<uint8_t> b = small_stream();
         put32(b, 92, 150);  // N below B = 192
         reseal(b);
         return b;
       }},
      {"payload-bytes", "the header's geometry needs",
       [] {
         std::vector<uint8_t> b = small_stream();
         put32(b, 92, get32(b, 92) - 1);  // one tail row fewer than the payload holds
         reseal(b);
         return b;
       }},
      {"trailing-bytes", "bytes after the checksum",
       [] {
         std::vector<uint8_t> b = small_stream();
         b.push_back(0);
         return b;
       }},
      {"nan-staging-scale", "non-finite tq6_0 block norm at position 0",
       [] {
         std::vector<uint8_t> b = small_stream();
         // The first sink entry's K row: a tq6_0 block starts with its fp16 norm.
         b[128] = 0x00;
         b[129] = 0x7e;
         reseal(b);
         return b;
       }},
  };
  return cases;
}

void expect_refused(const StreamReject& c, const std::vector<uint8_t>& bytes, const std::string& name) {
  try {
    (void)parse_state_stream(bytes.data(), bytes.size(), name, {16, {}});
    ADD_FAILURE() << c.name << ": accepted";
  } catch (const FileError& e) {
    EXPECT_EQ(e.path(), name);
    EXPECT_NE(e.defect().find(c.expect), std::string::npos) << c.name << "\n  got:      " << e.defect()
                                                          << "\n  expected: " << c.expect;
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
  }
}

std::string state_reject_dir() { return std::string(SJKV_GOLDEN_DIR) + "/../reject/state"; }

}  // namespace

TEST(StateStream, SmallStreamRoundTripsAndIsAccepted) {
  const Snapshot s = small_snapshot();
  EXPECT_EQ(s.B, 192u);
  EXPECT_EQ(s.N, 200u);
  const std::vector<uint8_t> b = state_stream_bytes(s);
  const Snapshot r = parse_state_stream(b.data(), b.size(), "small.sjkvseq", {16, {}});
  expect_same_regions(s, r);
  EXPECT_EQ(r.source, "sequence-state stream small.sjkvseq");
  EXPECT_EQ(r.layers[0].layer_id, 0u);
  const Snapshot t = small_snapshot(true);
  const std::vector<uint8_t> bt = state_stream_bytes(t);
  expect_same_regions(t, parse_state_stream(bt.data(), bt.size(), "t.sjkvseq", {16, {}}));
}

TEST(StateStream, RefusedWithNamedDefect) {
  for (const StreamReject& c : stream_rejects()) {
    SCOPED_TRACE(c.name);
    expect_refused(c, c.make(), std::string(c.name) + ".sjkvseq");
  }
}

// Trellis tables other than the built-in ones: the header names them by identity only, so
// the reader needs them given, and then takes them.
TEST(StateStream, TrainedTablesAreFoundByIdentity) {
  Snapshot t = small_snapshot(true);
  RawCodebook k3, v2;
  k3.bits = 3;
  k3.k = t.codebook_k;
  k3.v = t.codebook_k;
  for (uint16_t& x : k3.k) x ^= 0x0001;  // another table, still finite
  // Re-encode the same records' identity with the other K table: the stream names it.
  t.codebook_k = k3.k;
  t.codebook_id = codebook_id_of(t.codebook_k, t.codebook_v);
  const std::vector<uint8_t> b = state_stream_bytes(t);
  try {
    (void)parse_state_stream(b.data(), b.size(), "t.sjkvseq", {16, {}});
    ADD_FAILURE() << "unknown tables accepted";
  } catch (const FileError& e) {
    EXPECT_NE(e.defect().find("give the tables it was sealed with"), std::string::npos) << e.what();
  }
  const Snapshot r = parse_state_stream(b.data(), b.size(), "t.sjkvseq", {16, {k3}});
  EXPECT_TRUE(r.codebook_k == k3.k);
  EXPECT_EQ(r.codebook_id, t.codebook_id);
}

TEST(StateStream, ExtensionsAreRefusedWithAReason) {
  const Snapshot base = small_snapshot();
  struct Case {
    const char* expect;
    std::function<void(Snapshot&)> edit;
  };
  const std::vector<Case> cases = {
      {"q8_0 staging is an sjkv extension", [](Snapshot& s) { s.config.staging = StagingType::q8_0; }},
      {"best-of balancing (KVarN sealing) is an sjkv extension", [](Snapshot& s) { s.config.balance = BalanceMode::best_of; }},
      {"rotation block of 64 over head_dim 128", [](Snapshot& s) { s.config.rotation_block = 64; }},
      {"no layers", [](Snapshot& s) { s.layers.clear(); }},
  };
  for (const Case& c : cases) {
    Snapshot s = base;
    c.edit(s);
    EXPECT_NE(state_stream_refusal(s).find(c.expect), std::string::npos) << state_stream_refusal(s);
    EXPECT_THROW((void)state_stream_bytes(s), std::invalid_argument);
  }
  Snapshot t = small_snapshot(true);
  t.config.trellis_axis = TrellisAxis::channel;
  EXPECT_NE(state_stream_refusal(t).find("channel trellis axis"), std::string::npos);
  t = small_snapshot(true);
  t.config.bits_k = t.config.bits_v = 4;
  t.config.body = Body::trellis;
  EXPECT_NE(state_stream_refusal(t).find("4/4 trellis (4-bit trellis)"), std::string::npos);
  EXPECT_EQ(state_stream_refusal(base), "");
}

// The committed fixtures: each still refused with its defect.
TEST(StateStreamRejectFixtures, CommittedFilesRefused) {
  size_t n = 0;
  for (const StreamReject& c : stream_rejects()) {
    const std::string p = state_reject_dir() + "/" + c.name + ".sjkvseq";
    std::ifstream in(p, std::ios::binary);
    ASSERT_TRUE(in.good()) << p << " is missing; regenerate with SJKV_REGENERATE_REJECT_DIR";
    const std::vector<uint8_t> b((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    try {
      (void)read_state_stream(p, {16, {}});
      ADD_FAILURE() << c.name << ": accepted";
    } catch (const FileError& e) {
      EXPECT_EQ(e.path(), p);
      EXPECT_NE(e.defect().find(c.expect), std::string::npos) << c.name << ": " << e.defect();
    }
    ++n;
  }
  EXPECT_EQ(n, stream_rejects().size());
}

// SJKV_REGENERATE_REJECT_DIR=tests/reject build/tests/snapshot/test_state_stream --gtest_filter='StateStreamRejectFixtures.*'
TEST(StateStreamRejectFixtures, Regenerate) {
  const char* dir = std::getenv("SJKV_REGENERATE_REJECT_DIR");
  if (!dir || !*dir) GTEST_SKIP() << "set SJKV_REGENERATE_REJECT_DIR to rewrite tests/reject/state/";
  const std::string out = std::string(dir) + "/state";
  std::ofstream readme(out + "/README.md");
  readme << "# Must-reject sequence-state streams\n\n"
            "Each file is a small state-version-1 stream (docs/SPEC.md §11) with one defect; the checksum is\n"
            "recomputed after the edit, so only the named field is wrong. `sjkv::read_state_stream` must refuse\n"
            "it with a `FileError` whose defect contains the text in the last column (`sjkv-encode`: exit 2).\n"
            "`tests/snapshot/test_state_stream.cpp` checks them (`StateStreamRejectFixtures.CommittedFilesRefused`)\n"
            "and writes them:\n\n"
            "    SJKV_REGENERATE_REJECT_DIR=tests/reject build/tests/snapshot/test_state_stream "
            "--gtest_filter='StateStreamRejectFixtures.*'\n\n"
            "| file | message contains |\n|---|---|\n";
  for (const StreamReject& c : stream_rejects()) {
    const std::vector<uint8_t> b = c.make();
    std::ofstream f(out + "/" + c.name + ".sjkvseq", std::ios::binary);
    f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
    readme << "| `" << c.name << ".sjkvseq` | `" << c.expect << "` |\n";
  }
  // Two valid streams for the fuzz corpus.
  for (bool trellis : {false, true}) {
    const std::vector<uint8_t> b = state_stream_bytes(small_snapshot(trellis));
    std::ofstream f(out + "/../../fuzz/corpus/state_stream/valid-" + (trellis ? "3-2t" : "4-4") + ".sjkvseq",
                    std::ios::binary);
    f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  }
}
