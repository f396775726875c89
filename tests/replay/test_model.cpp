// The forward pass: on small synthetic GGUF models written here (always run) and on the real
// model when scripts/setup installed one (default_model_path(); skipped otherwise).
#include <gtest/gtest.h>
#include <unistd.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "sjkv/fp16.h"
#include "sjkv/io/model_geometry.h"
#include "sjkv/replay/dequant.h"
#include "sjkv/replay/kv_f32.h"
#include "sjkv/replay/model.h"
#include "sjkv/replay/arms.h"
#include "sjkv/replay/run.h"

using namespace sjkv;
using namespace sjkv::replay;

namespace {

// ---- a minimal GGUF v3 writer for synthetic models ----------------------------------------
struct GgufWriter {
  std::vector<uint8_t> kv, ti, data;
  uint64_t n_kv = 0, n_t = 0;
  template <typename T>
  static void put(std::vector<uint8_t>& b, T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    b.insert(b.end(), p, p + sizeof v);
  }
  static void put_str(std::vector<uint8_t>& b, const std::string& s) {
    put<uint64_t>(b, s.size());
    b.insert(b.end(), s.begin(), s.end());
  }
  void key_u32(const std::string& k, uint32_t v) { put_str(kv, k); put<int32_t>(kv, 4); put(kv, v); ++n_kv; }
  void key_f32(const std::string& k, float v) { put_str(kv, k); put<int32_t>(kv, 6); put(kv, v); ++n_kv; }
  void key_str(const std::string& k, const std::string& v) { put_str(kv, k); put<int32_t>(kv, 8); put_str(kv, v); ++n_kv; }
  void key_strs(const std::string& k, const std::vector<std::string>& v) {
    put_str(kv, k);
    put<int32_t>(kv, 9);
    put<int32_t>(kv, 8);
    put<uint64_t>(kv, v.size());
    for (const std::string& x : v) put_str(kv, x);
    ++n_kv;
  }
  void tensor(const std::string& name, std::vector<uint64_t> dims, uint32_t type, const std::vector<uint8_t>& bytes) {
    while (data.size() % 32) data.push_back(0);
    put_str(ti, name);
    put<uint32_t>(ti, static_cast<uint32_t>(dims.size()));
    for (uint64_t d : dims) put<int64_t>(ti, static_cast<int64_t>(d));
    put<int32_t>(ti, static_cast<int32_t>(type));
    put<uint64_t>(ti, data.size());
    data.insert(data.end(), bytes.begin(), bytes.end());
    ++n_t;
  }
  void write(const std::string& path) const {
    std::vector<uint8_t> f = {'G', 'G', 'U', 'F'};
    put<uint32_t>(f, 3);
    put<int64_t>(f, static_cast<int64_t>(n_t));
    put<int64_t>(f, static_cast<int64_t>(n_kv));
    f.insert(f.end(), kv.begin(), kv.end());
    f.insert(f.end(), ti.begin(), ti.end());
    while (f.size() % 32) f.push_back(0);
    f.insert(f.end(), data.begin(), data.end());
    FILE* o = std::fopen(path.c_str(), "wb");
    ASSERT_NE(o, nullptr);
    ASSERT_EQ(std::fwrite(f.data(), 1, f.size(), o), f.size());
    std::fclose(o);
  }
};

struct Synth {
  std::string arch = "llama";
  uint32_t E = 32, H = 4, Hkv = 2, D = 8, F = 64, V = 50, L = 2;
  std::string drop;                  // tensor left out
  std::string bad_shape;             // tensor written one row short
  std::string q8_1;                  // tensor written as Q8_1 (not dequantized by replay)
  uint32_t matrix_type = kGgmlF16;   // F32, F16 or Q8_0 for the matrices
  uint32_t vocab_tokens = 0;         // > 0: a tokenizer.ggml.tokens array of that many pieces
  std::string rope_scaling;          // rope.scaling.type when not empty
  std::vector<std::pair<std::string, float>> f32_keys;     // more "<arch>." keys
  std::vector<std::pair<std::string, uint32_t>> u32_keys;  // more "<arch>." keys
  uint32_t experts = 0;              // > 0: expert_count
  bool untied = false;               // an output.weight of its own (else the embedding is the output)
  std::string nan_in;                // tensor with a NaN as its sixth value
  std::string huge;                  // tensor whose values are all 3e38 (finite, but the pass overflows)
};

std::vector<uint8_t> encode(const std::vector<float>& v, uint32_t type) {
  std::vector<uint8_t> b;
  if (type == kGgmlF32) {
    b.resize(v.size() * 4);
    std::memcpy(b.data(), v.data(), b.size());
  } else if (type == kGgmlF16) {
    for (float x : v) GgufWriter::put<uint16_t>(b, f32_to_f16(x));
  } else {  // Q8_0 (and Q8_1's size for the unsupported-type case)
    for (size_t i = 0; i < v.size(); i += 32) {
      float amax = 0.0f;
      for (size_t j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(v[i + j]));
      const float d = amax / 127.0f;
      GgufWriter::put<uint16_t>(b, f32_to_f16(d));
      if (type == 9) GgufWriter::put<uint16_t>(b, 0);
      for (size_t j = 0; j < 32; ++j)
        b.push_back(static_cast<uint8_t>(static_cast<int8_t>(d > 0 ? std::lround(v[i + j] / d) : 0)));
    }
  }
  return b;
}

// The synthetic files are removed when the test binary exits (a model may still map them).
struct TempFiles {
  std::vector<std::string> paths;
  ~TempFiles() {
    for (const std::string& p : paths) std::remove(p.c_str());
  }
};
TempFiles& temp_files() {
  static TempFiles t;
  return t;
}

std::string write_synth(const Synth& s, const std::string& name) {
  std::mt19937 rng(1234);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  GgufWriter w;
  const std::string a = s.arch + ".";
  w.key_str("general.architecture", s.arch);
  w.key_u32(a + "block_count", s.L);
  w.key_u32(a + "context_length", 256);
  w.key_u32(a + "embedding_length", s.E);
  w.key_u32(a + "feed_forward_length", s.F);
  w.key_u32(a + "attention.head_count", s.H);
  w.key_u32(a + "attention.head_count_kv", s.Hkv);
  w.key_u32(a + "attention.key_length", s.D);
  w.key_u32(a + "attention.value_length", s.D);
  w.key_f32(a + "attention.layer_norm_rms_epsilon", 1e-6f);
  w.key_f32(a + "rope.freq_base", s.arch == "gemma3" ? 1e6f : 1e4f);
  if (s.arch == "gemma3") w.key_u32(a + "attention.sliding_window", 4);
  if (!s.rope_scaling.empty()) w.key_str(a + "rope.scaling.type", s.rope_scaling);
  for (const auto& k : s.f32_keys) w.key_f32(a + k.first, k.second);
  for (const auto& k : s.u32_keys) w.key_u32(a + k.first, k.second);
  if (s.experts) {
    w.key_u32(a + "expert_count", s.experts);
    w.key_u32(a + "expert_used_count", 2);
  }
  if (s.vocab_tokens) {
    std::vector<std::string> pieces;
    for (uint32_t i = 0; i < s.vocab_tokens; ++i) pieces.push_back("t" + std::to_string(i));
    w.key_strs("tokenizer.ggml.tokens", pieces);
  }
  auto add = [&](const std::string& n, uint64_t cols, uint64_t rows, float scale, float offset) {
    if (n == s.drop) return;
    uint64_t r = n == s.bad_shape ? rows - 1 : rows;
    std::vector<float> v(cols * r);
    for (auto& x : v) x = offset + scale * nd(rng);
    if (n == s.nan_in) v[5] = std::numeric_limits<float>::quiet_NaN();
    if (n == s.huge) std::fill(v.begin(), v.end(), 3e38f);
    const uint32_t type = rows == 1 ? kGgmlF32 : (n == s.q8_1 ? 9u : s.matrix_type);
    if (rows == 1) w.tensor(n, {cols}, type, encode(v, type));
    else w.tensor(n, {cols, r}, type, encode(v, type));
  };
  add("token_embd.weight", s.E, s.V, 1.0f, 0.0f);
  add("output_norm.weight", s.E, 1, 0.1f, 1.0f);
  if (s.untied) add("output.weight", s.E, s.V, 0.3f, 0.0f);
  for (uint32_t l = 0; l < s.L; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    add(b + "attn_norm.weight", s.E, 1, 0.1f, 1.0f);
    add(b + "attn_q.weight", s.E, s.H * s.D, 0.3f, 0.0f);
    add(b + "attn_k.weight", s.E, s.Hkv * s.D, 0.3f, 0.0f);
    add(b + "attn_v.weight", s.E, s.Hkv * s.D, 0.3f, 0.0f);
    add(b + "attn_output.weight", s.H * s.D, s.E, 0.2f, 0.0f);
    add(b + "ffn_norm.weight", s.E, 1, 0.1f, 1.0f);
    add(b + "ffn_gate.weight", s.E, s.F, 0.2f, 0.0f);
    add(b + "ffn_up.weight", s.E, s.F, 0.2f, 0.0f);
    add(b + "ffn_down.weight", s.F, s.E, 0.2f, 0.0f);
    if (s.arch == "gemma3") {
      add(b + "attn_q_norm.weight", s.D, 1, 0.1f, 1.0f);
      add(b + "attn_k_norm.weight", s.D, 1, 0.1f, 1.0f);
      add(b + "post_attention_norm.weight", s.E, 1, 0.1f, 1.0f);
      add(b + "post_ffw_norm.weight", s.E, 1, 0.1f, 1.0f);
    }
  }
  // ctest runs the parametrised tests as separate processes in parallel: a name of their own.
  const std::string path = ::testing::TempDir() + "sjkv-" + std::to_string(getpid()) + "-" + s.arch + "-" + name;
  w.write(path);
  temp_files().paths.push_back(path);
  return path;
}

std::vector<std::unique_ptr<LayerKv>> f32_cache(const ModelInfo& info) {
  std::vector<std::unique_ptr<LayerKv>> kv;
  for (const auto& s : info.layers) kv.push_back(make_f32_layer(s));
  return kv;
}

std::vector<float> run(Model& m, const std::vector<int32_t>& ids, uint32_t n_ubatch) {
  auto kv = f32_cache(m.info());
  std::vector<float> out(ids.size() * m.info().n_vocab);
  m.eval(ids.data(), static_cast<uint32_t>(ids.size()), 0, n_ubatch, kv, out.data(), true);
  return out;
}

// Token by token: the cache carries over between one-token calls.
std::vector<float> run_stepwise(Model& m, const std::vector<int32_t>& ids) {
  auto kv = f32_cache(m.info());
  const size_t V = m.info().n_vocab;
  std::vector<float> out(ids.size() * V);
  for (uint32_t i = 0; i < ids.size(); ++i) m.eval(&ids[i], 1, i, 1, kv, out.data() + i * V, false);
  return out;
}

void expect_defect(const Synth& s, const std::string& name, const std::string& needle) {
  const std::string path = write_synth(s, name);
  try {
    Model::load(path);
    FAIL() << "loaded a model with a defect: " << needle;
  } catch (const FileError& e) {
    EXPECT_EQ(e.path(), path);
    EXPECT_NE(e.defect().find(needle), std::string::npos) << e.what();
  }
}

}  // namespace

// ---- the exact f32 cache ---------------------------------------------------------------------

TEST(KvF32, CausalSlidingGqaAttentionMatchesDirectSoftmax) {
  for (const bool sinks : {false, true}) {
  LayerShape s;
  s.n_head = 4;
  s.n_head_kv = 2;
  s.head_dim = 8;
  s.window = 3;
  if (sinks) s.sink_logits = {-1.0f, 0.0f, 0.7f, 3.0f};  // gpt-oss: a logit per query head, no value
  auto kv = make_f32_layer(s);
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const uint32_t T = 9, D = 8, H = 4, Hkv = 2;
  std::vector<float> k(T * Hkv * D), v(T * Hkv * D), q(T * H * D), out(T * H * D);
  for (auto* a : {&k, &v, &q})
    for (auto& x : *a) x = nd(rng);
  // Two ubatches: 5 tokens, then 4.
  for (uint32_t p0 : {0u, 5u}) {
    const uint32_t n = p0 == 0 ? 5 : 4;
    kv->begin_ubatch(p0, n);
    kv->store(p0, n, k.data() + p0 * Hkv * D, v.data() + p0 * Hkv * D);
    kv->attend(p0, n, q.data() + p0 * H * D, 0.5f, out.data() + p0 * H * D);
  }
  for (uint32_t p = 0; p < T; ++p)
    for (uint32_t h = 0; h < H; ++h) {
      const uint32_t kh = h / 2, lo = p + 1 > 3 ? p + 1 - 3 : 0;
      std::vector<double> w;
      for (uint32_t j = lo; j <= p; ++j) {
        double d = 0;
        for (uint32_t c = 0; c < D; ++c) d += double(q[(p * H + h) * D + c]) * k[(j * Hkv + kh) * D + c];
        w.push_back(std::exp(0.5 * d));
      }
      const double sum = std::accumulate(w.begin(), w.end(), 0.0) + (sinks ? std::exp(s.sink_logits[h]) : 0.0);
      for (uint32_t c = 0; c < D; ++c) {
        double e = 0;
        for (uint32_t j = lo; j <= p; ++j) e += w[j - lo] * v[(j * Hkv + kh) * D + c];
        EXPECT_NEAR(out[(p * H + h) * D + c], e / sum, 1e-5) << p << " " << h << " " << c << (sinks ? " sinks" : "");
      }
    }
  EXPECT_EQ(kv->bits().occupied, 32.0);
  }
}

// ---- synthetic models ------------------------------------------------------------------------

class SynthModel : public ::testing::TestWithParam<std::string> {};

TEST_P(SynthModel, UbatchesStepsAndThreadsGiveTheSameLogits) {
  Synth s;
  s.arch = GetParam();
  for (uint32_t type : {kGgmlF32, kGgmlF16, kGgmlQ8_0}) {
    s.matrix_type = type;
    const std::string path = write_synth(s, "synth-" + s.arch + "-" + std::to_string(type) + ".gguf");
    auto m = Model::load(path);
    const ModelInfo& info = m->info();
    EXPECT_EQ(info.architecture, s.arch);
    EXPECT_EQ(info.n_layer, s.L);
    EXPECT_EQ(info.n_vocab, s.V);
    EXPECT_EQ(info.head_dim, s.D);
    ASSERT_EQ(info.layers.size(), s.L);
    if (s.arch == "gemma3") {
      EXPECT_FALSE(info.layers[0].full_attention);
      EXPECT_EQ(info.layers[0].window, 4u);
    }
    const std::vector<int32_t> ids = {3, 17, 42, 0, 49, 8, 8, 21, 30, 11, 5};
    const auto one = run(*m, ids, 64);
    // The kernels compute every output element in an order independent of the batch, so
    // splitting the prompt or running it token by token gives the same bytes.
    EXPECT_EQ(0, std::memcmp(one.data(), run(*m, ids, 4).data(), one.size() * 4));
    EXPECT_EQ(0, std::memcmp(one.data(), run_stepwise(*m, ids).data(), one.size() * 4));
    double norm = 0.0;
    for (float x : one) {
      ASSERT_TRUE(std::isfinite(x));
      norm += std::fabs(x);
    }
    EXPECT_GT(norm, 1.0);
    const int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    const auto t1 = run(*m, ids, 64);
    omp_set_num_threads(2);
    const auto t2 = run(*m, ids, 64);
    omp_set_num_threads(saved);
    EXPECT_EQ(0, std::memcmp(t1.data(), t2.data(), t1.size() * 4));
    EXPECT_EQ(0, std::memcmp(t1.data(), one.data(), t1.size() * 4));
  }
}

TEST_P(SynthModel, DefectsNameTheFileAndTensor) {
  Synth s;
  s.arch = GetParam();
  Synth d = s;
  d.drop = "blk.1.ffn_up.weight";
  expect_defect(d, "drop.gguf", "missing tensor 'blk.1.ffn_up.weight'");
  d = s;
  d.bad_shape = "blk.0.attn_k.weight";
  expect_defect(d, "shape.gguf", "tensor 'blk.0.attn_k.weight' has shape [32, 15], expected [32, 16]");
  d = s;
  d.q8_1 = "blk.0.attn_q.weight";
  expect_defect(d, "type.gguf", "tensor 'blk.0.attn_q.weight' has type");
  d = s;
  d.drop = "output_norm.weight";
  expect_defect(d, "norm.gguf", "missing tensor 'output_norm.weight'");
  // A non-finite embedding is refused at load, tied or not: an untied model's embedding rows
  // are read only on lookup, where the NaN surfaced as a cache arm's internal error.
  for (bool untied : {false, true}) {
    d = s;
    d.untied = untied;
    EXPECT_NO_THROW((void)Model::load(write_synth(d, "untied-ok.gguf")));
    d.nan_in = "token_embd.weight";
    expect_defect(d, untied ? "embd-nan-untied.gguf" : "embd-nan.gguf", "tensor 'token_embd.weight' holds a non-finite value");
    d.nan_in = "output.weight";
    if (untied) expect_defect(d, "output-nan.gguf", "tensor 'output.weight' holds a non-finite value");
  }
  // a vocabulary longer than the embedding table fails at load, not at the first such token
  d = s;
  d.vocab_tokens = s.V + 1;
  expect_defect(d, "vocab.gguf", "the vocabulary has 51 tokens but 'token_embd.weight' only 50 rows");
  d.vocab_tokens = s.V;
  EXPECT_NO_THROW((void)Model::load(write_synth(d, "vocab-ok.gguf")));
  // what the forward pass does not implement is refused by name
  d = s;
  d.rope_scaling = "yarn";  // qwen2 and qwen3 only (YarnIsCheckedKeyByKey)
  expect_defect(d, "yarn.gguf", "rope scaling 'yarn' is not supported for " + s.arch);
  d.rope_scaling = "dynamic";
  expect_defect(d, "dynamic.gguf", "rope scaling 'dynamic' is not supported (none, linear)");
  // experts: gemma3 has none; a llama file with expert_count (Mixtral) needs every layer's
  // router and experts, and has no dense FFN
  d = s;
  d.experts = 8;
  expect_defect(d, "moe.gguf",
                s.arch == "llama" ? "missing tensor 'blk.0.ffn_gate_inp.weight' (expert_count 8)"
                                  : "a mixture-of-experts model (" + s.arch + ".expert_count 8) is not supported");
  if (s.arch == "gemma3") {
    d = s;
    d.drop = "blk.0.attn_q_norm.weight";
    expect_defect(d, "qnorm.gguf", "missing tensor 'blk.0.attn_q_norm.weight'");
  }
}

TEST_P(SynthModel, RejectsBadCallsAndTokens) {
  Synth s;
  s.arch = GetParam();
  auto m = Model::load(write_synth(s, "calls.gguf"));
  auto kv = f32_cache(m->info());
  std::vector<float> out(m->info().n_vocab);
  const int32_t bad[2] = {1, 50};
  EXPECT_THROW(m->eval(bad, 2, 0, 8, kv, out.data(), false), std::invalid_argument);
  const int32_t neg = -1;
  EXPECT_THROW(m->eval(&neg, 1, 0, 8, kv, out.data(), false), std::invalid_argument);
  std::vector<std::unique_ptr<LayerKv>> few;
  const int32_t ok = 1;
  EXPECT_THROW(m->eval(&ok, 1, 0, 8, few, out.data(), false), std::invalid_argument);
}

// Finite weights whose products overflow binary32 are the model file's defect (exit 2 in the
// tools), found before a cache arm meets the non-finite rows and calls it an internal error.
TEST_P(SynthModel, OverflowingWeightsAreTheFilesDefect) {
  Synth s;
  s.arch = GetParam();
  for (const char* t : {"blk.0.attn_norm.weight", "output_norm.weight"}) {
    Synth d = s;
    d.huge = t;
    const std::string path = write_synth(d, std::string("huge-") + t + ".gguf");
    auto m = Model::load(path);  // every value is finite
    auto kv = f32_cache(m->info());
    std::vector<float> out(m->info().n_vocab);
    const int32_t ids[3] = {1, 2, 3};
    try {
      m->eval(ids, 3, 0, 8, kv, out.data(), false);
      ADD_FAILURE() << "no error with " << t << " at 3e38";
    } catch (const FileError& e) {
      EXPECT_EQ(e.path(), path);
      const std::string want = d.huge == "output_norm.weight" ? "the output layer computes a non-finite logit"
                                                             : "layer 0 computes a non-finite K value at position 0";
      EXPECT_NE(e.defect().find(want), std::string::npos) << e.what();
    }
  }
}

// The forward pass split at any layer gives the bits of the whole one, in ubatches and token by token.
TEST_P(SynthModel, PrefixThenSuffixIsTheWholePass) {
  Synth s;
  s.arch = GetParam();
  auto m = Model::load(write_synth(s, "split-" + s.arch + ".gguf"));
  ASSERT_TRUE(m->splits());
  const ModelInfo& info = m->info();
  const std::vector<int32_t> ids = {3, 17, 42, 0, 49, 8, 8, 21, 30, 11, 5};
  const uint32_t n = static_cast<uint32_t>(ids.size()), V = info.n_vocab, E = info.n_embd;
  const auto whole = run(*m, ids, 4);
  for (uint32_t L = 0; L <= info.n_layer; ++L) {
    auto kv = f32_cache(info);
    std::vector<float> x(size_t(n) * E), out(size_t(n) * V);
    m->eval_prefix(ids.data(), 8, 0, 4, L, kv, x.data());
    m->eval_suffix(x.data(), 8, 0, 4, L, kv, nullptr, out.data(), true);
    for (uint32_t i = 8; i < n; ++i) {
      m->eval_prefix(&ids[i], 1, i, 4, L, kv, x.data() + size_t(i) * E);
      m->eval_suffix(x.data() + size_t(i) * E, 1, i, 4, L, kv, nullptr, out.data() + size_t(i) * V, false);
    }
    EXPECT_EQ(0, std::memcmp(whole.data(), out.data(), out.size() * 4)) << "split at layer " << L;
  }
  auto kv = f32_cache(info);
  std::vector<float> x(size_t(n) * E);
  EXPECT_THROW(m->eval_prefix(ids.data(), n, 0, 4, info.n_layer + 1, kv, x.data()), std::invalid_argument);
}

INSTANTIATE_TEST_SUITE_P(Arch, SynthModel, ::testing::Values("llama", "gemma3"));

// YaRN (qwen2, qwen3; docs/design/yarn.md): a well-formed declaration loads, and each key out of
// range is refused by name, including the yarn_* keys llama.cpp reads for no such file.
TEST(Model, YarnIsCheckedKeyByKey) {
  Synth s;
  s.arch = "qwen2";  // the llama tensors load as qwen2 (its q/k/v biases are optional)
  s.rope_scaling = "yarn";
  s.f32_keys = {{"rope.scaling.factor", 4.0f}, {"rope.scaling.yarn_beta_fast", 32.0f}};
  s.u32_keys = {{"rope.scaling.original_context_length", 64}};
  EXPECT_NO_THROW((void)Model::load(write_synth(s, "yarn-ok.gguf")));
  Synth d = s;
  d.f32_keys = {};
  expect_defect(d, "yarn-nofactor.gguf", "qwen2.rope.scaling.factor must be finite and at least 1 for YaRN (absent)");
  d.f32_keys = {{"rope.scaling.factor", 0.5f}};
  expect_defect(d, "yarn-factor.gguf", "qwen2.rope.scaling.factor must be finite and at least 1 for YaRN");
  d = s;
  d.u32_keys = {{"rope.scaling.original_context_length", 0}};
  expect_defect(d, "yarn-orig.gguf", "qwen2.rope.scaling.original_context_length 0 out of range");
  for (const char* key : {"rope.scaling.yarn_ext_factor", "rope.scaling.yarn_attn_factor", "rope.scaling.yarn_beta_fast",
                          "rope.scaling.yarn_beta_slow"}) {
    d = s;
    d.f32_keys = {{"rope.scaling.factor", 4.0f}, {key, -1.0f}};
    expect_defect(d, "yarn-key.gguf", std::string("qwen2.") + key + " -1.000000 out of range");
  }
  d = s;
  d.rope_scaling = "longrope";
  expect_defect(d, "longrope.gguf", "rope scaling 'longrope' is not supported for qwen2");
  d.rope_scaling = "dynamic";
  expect_defect(d, "dynamic.gguf", "rope scaling 'dynamic' is not supported (none, linear, yarn)");
}

TEST(Model, UnsupportedArchitectureIsAFileError) {
  Synth s;
  s.arch = "cohere2";  // a geometry sjkv-encode plans, no forward pass
  const std::string path = write_synth(s, "cohere2.gguf");
  try {
    Model::load(path);
    FAIL();
  } catch (const FileError& e) {
    EXPECT_NE(e.defect().find("architecture 'cohere2' is not supported (gemma2, gemma3, llama, phi3, qwen2, qwen3, "
                              "qwen3moe, qwen35, qwen35moe, gemma4, gpt-oss)"),
              std::string::npos)
        << e.what();
  }
}

// The forward pass's architectures are the ones the geometry rules list for it (one list:
// sjkv-encode and sjkv-train refuse by it too); the geometry alone serves more.
TEST(Model, SupportedArchitecturesAreTheGeometrysForwardList) {
  EXPECT_EQ(supported_architectures(), sjkv::supported_architectures(ModelUse::forward));
  const std::vector<std::string> g = sjkv::supported_architectures(ModelUse::geometry);
  EXPECT_NE(std::find(g.begin(), g.end(), "qwen35"), g.end());
  for (const std::string& a : supported_architectures()) EXPECT_NE(std::find(g.begin(), g.end(), a), g.end()) << a;
  // The hybrid Qwen 3.5 file runs (its geometry is one the forward pass takes); a Cohere 2 file
  // is a geometry to plan, not a model to run.
  const GgufFile f = GgufFile::open(std::string(SJKV_SOURCE_DIR) + "/tests/fuzz/corpus/gguf/valid-qwen35-hybrid-nextn.gguf");
  EXPECT_NO_THROW((void)supported_geometry(f, ModelUse::geometry));
  EXPECT_NO_THROW((void)supported_geometry(f, ModelUse::forward));
  Synth s;
  s.arch = "cohere2";
  const GgufFile c = GgufFile::open(write_synth(s, "cohere2-geometry.gguf"));
  EXPECT_NO_THROW((void)supported_geometry(c, ModelUse::geometry));
  EXPECT_THROW((void)supported_geometry(c, ModelUse::forward), FileError);
}

// Attention shapes llama.cpp cannot run are the file's defect wherever the geometry is read
// (record, plan, encode --model, train --model): head_count 0, a head_count_kv that does not
// divide it, a layer without KV heads in an architecture without recurrent layers.
TEST_P(SynthModel, AttentionShapesAreChecked) {
  Synth s;
  s.arch = GetParam();
  Synth d = s;
  d.Hkv = 3;  // 4 query heads
  expect_defect(d, "gqa.gguf", "layer 0: head_count 4 is not a multiple of head_count_kv 3");
  d = s;
  d.H = 0;
  expect_defect(d, "h0.gguf", "layer 0: head_count is 0 (head_count_kv 2)");
  d = s;
  d.H = 0;
  d.Hkv = 0;
  expect_defect(d, "h0kv0.gguf", "layer 0 has no KV heads (head_count 0, head_count_kv 0); " + s.arch +
                                     " has no recurrent layers");
}

// ---- the real model --------------------------------------------------------------------------

namespace {

int32_t vocab_id(const GgufFile& f, const std::string& piece) {
  const auto& toks = f.get_array("tokenizer.ggml.tokens").strings();
  for (size_t i = 0; i < toks.size(); ++i)
    if (toks[i] == piece) return static_cast<int32_t>(i);
  return -1;
}

// "The capital of France is" as vocabulary pieces: SentencePiece marks a leading space with
// U+2581, byte-level BPE with U+0120.
std::vector<int32_t> france_prompt(const GgufFile& f, int32_t* paris) {
  const std::string model = f.get_string("tokenizer.ggml.model");
  const std::string sp = model == "gpt2" ? "\xC4\xA0" : "\xE2\x96\x81";
  std::vector<int32_t> ids;
  const bool bos = f.has("tokenizer.ggml.add_bos_token") ? f.get_bool("tokenizer.ggml.add_bos_token") : false;
  if (bos) ids.push_back(static_cast<int32_t>(f.get_uint("tokenizer.ggml.bos_token_id")));
  ids.push_back(vocab_id(f, "The"));
  for (const char* w : {"capital", "of", "France", "is"}) ids.push_back(vocab_id(f, sp + w));
  *paris = vocab_id(f, sp + "Paris");
  return ids;
}

}  // namespace

// The installed models: the default one and, beside it, scripts/setup's second architecture.
std::vector<std::string> installed_models() {
  std::vector<std::string> paths;
  const std::string d = default_model_path();
  if (d.empty()) return paths;
  paths.push_back(d);
  const size_t slash = d.find_last_of('/');
  const std::string second = (slash == std::string::npos ? std::string() : d.substr(0, slash + 1)) + "smollm2.gguf";
  if (second != d) {
    if (FILE* f = std::fopen(second.c_str(), "rb")) {
      std::fclose(f);
      paths.push_back(second);
    }
  }
  return paths;
}

class RealModel : public ::testing::TestWithParam<int> {
 protected:
  std::string path() {
    const auto paths = installed_models();
    if (static_cast<size_t>(GetParam()) >= paths.size()) return "";
    return paths[GetParam()];
  }
};

TEST_P(RealModel, LogitsAgreeAcrossUbatchesStepsAndThreads) {
  const std::string path = this->path();
  if (path.empty()) GTEST_SKIP() << "model not installed (scripts/setup, or SJKV_MODEL)";
  auto m = Model::load(path);
  const ModelInfo& info = m->info();
  const ModelGeometry g = geometry_from_gguf(m->gguf());
  EXPECT_EQ(info.n_layer, g.n_layers);
  ASSERT_EQ(info.layers.size(), g.n_layers);
  for (uint32_t l = 0; l < info.n_layer; ++l) {
    EXPECT_EQ(info.layers[l].full_attention, g.layers[l].kind == LayerKind::full_attention) << l;
    EXPECT_EQ(info.layers[l].window, info.layers[l].full_attention ? 0u : g.sliding_window) << l;
  }
  EXPECT_EQ(info.n_vocab, m->gguf().get_array("tokenizer.ggml.tokens").count());
  EXPECT_GT(info.weight_bytes, size_t(info.n_vocab) * info.n_embd);

  int32_t paris = -1;
  const std::vector<int32_t> ids = france_prompt(m->gguf(), &paris);
  for (int32_t id : ids) ASSERT_GE(id, 0) << "prompt word missing from the vocabulary";
  ASSERT_GE(paris, 0);

  const auto one = run(*m, ids, 512);
  const auto steps = run_stepwise(*m, ids);
  EXPECT_EQ(0, std::memcmp(one.data(), steps.data(), one.size() * 4)) << "one ubatch vs token by token";
  for (float x : one) ASSERT_TRUE(std::isfinite(x));

  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const auto t1 = run(*m, ids, 3);
  omp_set_num_threads(2);
  const auto t2 = run(*m, ids, 3);
  omp_set_num_threads(saved);
  EXPECT_EQ(0, std::memcmp(t1.data(), t2.data(), t1.size() * 4));
  EXPECT_EQ(0, std::memcmp(t1.data(), one.data(), t1.size() * 4));

  // Plausibility: after "The capital of France is", " Paris" ranks among the 10 likeliest.
  const float* last = one.data() + (ids.size() - 1) * info.n_vocab;
  uint32_t rank = 0;
  for (uint32_t v = 0; v < info.n_vocab; ++v) rank += last[v] > last[paris];
  EXPECT_LT(rank, 10u) << "rank of ' Paris' after 'The capital of France is'";
}

// Past the sliding window (512 for Gemma 3): a long prompt in one ubatch, in ubatches of 200,
// and continued token by token all give the same last logits.
TEST_P(RealModel, LongPromptAcrossTheWindowInAnyUbatching) {
  const std::string path = this->path();
  if (path.empty()) GTEST_SKIP() << "model not installed (scripts/setup, or SJKV_MODEL)";
  auto m = Model::load(path);
  const ModelInfo& info = m->info();
  uint32_t window = 0;
  for (const auto& l : info.layers) window = std::max(window, l.window);
  const uint32_t n = (window ? window : 512) + 40;
  std::vector<int32_t> ids(n);
  std::mt19937 rng(3);
  std::uniform_int_distribution<int32_t> pick(100, static_cast<int32_t>(std::min<uint32_t>(info.n_vocab, 20000)) - 1);
  for (auto& id : ids) id = pick(rng);
  auto last = [&](uint32_t n_ubatch, uint32_t stepwise_tail) {
    auto kv = f32_cache(info);
    std::vector<float> out(info.n_vocab);
    const uint32_t head = n - stepwise_tail;
    m->eval(ids.data(), head, 0, n_ubatch, kv, out.data(), false);
    for (uint32_t i = head; i < n; ++i) m->eval(&ids[i], 1, i, 1, kv, out.data(), false);
    return out;
  };
  const auto a = last(1024, 0), b = last(200, 0), c = last(1024, 5);
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4));
  EXPECT_EQ(0, std::memcmp(a.data(), c.data(), a.size() * 4));
  for (float x : a) ASSERT_TRUE(std::isfinite(x));
}

// score_arms shares the layers before the first full-attention layer (and the reference rows)
// between the arms that store them as f16; every arm's rows are still score_trajectory's bits,
// including arms that cannot share (f32, swa=same) and a codec arm that seals records.
TEST_P(RealModel, ScoringArmsTogetherGivesEachArmsRows) {
  const std::string path = this->path();
  if (path.empty()) GTEST_SKIP() << "model not installed (scripts/setup, or SJKV_MODEL)";
  auto m = Model::load(path);
  const ModelInfo& info = m->info();
  std::vector<int32_t> ids(560);
  std::mt19937 rng(11);
  std::uniform_int_distribution<int32_t> pick(100, static_cast<int32_t>(std::min<uint32_t>(info.n_vocab, 20000)) - 1);
  for (auto& id : ids) id = pick(rng);
  RecordInput in;
  in.prompt = ids;
  in.settings.generate = 6;
  in.settings.ubatch = 256;
  in.settings.reference = "f32";
  const auto f32 = make_arm("f32");
  const Trajectory t = record_trajectory(*m, *f32, in);
  std::vector<std::unique_ptr<KvArm>> arms;
  for (const char* spec : {"f16", "sj:4/4:staging=q8_0:sink=128:tail=128", "q4_0:rot:swa=same", "f32"})
    arms.push_back(make_arm(spec));
  std::vector<const KvArm*> ptrs;
  for (const auto& a : arms) ptrs.push_back(a.get());
  std::vector<std::vector<ScoreRow>> together(arms.size());
  std::vector<size_t> order;
  score_arms(*m, ptrs, t, 256, [&](size_t a, std::vector<ScoreRow>&& rows, const ScoreDetail& d) {
    order.push_back(a);
    together[a] = std::move(rows);
    if (a == 1) {
      EXPECT_TRUE(d.codec && d.sealed);
    }
  });
  EXPECT_EQ(order, (std::vector<size_t>{0, 1, 2, 3}));
  for (size_t a = 0; a < arms.size(); ++a) {
    const auto alone = score_trajectory(*m, *arms[a], t, 256);
    ASSERT_EQ(alone.size(), together[a].size());
    for (size_t j = 0; j < alone.size(); ++j) {
      EXPECT_EQ(0, std::memcmp(&alone[j].kl, &together[a][j].kl, sizeof(double))) << arms[a]->spec() << " " << j;
      EXPECT_EQ(alone[j].same_top, together[a][j].same_top);
      EXPECT_EQ(alone[j].bits_occupied, together[a][j].bits_occupied);
    }
  }
  EXPECT_EQ(together[3][0].kl, 0.0);  // f32 replaying an f32 recording
}

// A version-2 recording [given P][generated G] cut into turns: each cut (offset into the
// generated tokens, length) turns those tokens into a given segment after an idle step, as if
// a user had typed what the model wrote. An f32 reference depends on the tokens alone, so the
// kept positions' reference rows stay valid.
Trajectory as_turns(const Trajectory& v2, const std::vector<std::pair<uint32_t, uint32_t>>& cuts,
                    const std::vector<uint32_t>& keep_recent) {
  Trajectory t = v2;
  t.hid.clear();
  t.segments = {Segment{SegmentKind::given, v2.prompt_tokens, 0}};
  uint32_t g = 0;  // next generated token of v2
  for (size_t c = 0; c <= cuts.size(); ++c) {
    const uint32_t until = c < cuts.size() ? cuts[c].first : v2.generated();
    t.segments.push_back(Segment{SegmentKind::generated, until - g, 0});
    for (uint32_t j = g; j < until; ++j) t.hid.push_back(v2.hid[j]);
    if (c == cuts.size()) break;
    t.segments.push_back(Segment{SegmentKind::idle, 0, keep_recent[c]});
    t.segments.push_back(Segment{SegmentKind::given, cuts[c].second, 0});
    g = until + cuts[c].second;
  }
  t.context = v2.prompt_tokens + v2.settings.generate;
  t.check_consistent();
  return t;
}

// Blocked scoring (the default) runs the generated positions in ubatches that end before any
// journal event; every row must be the stepwise (one token per ubatch) bits, for each arm
// family and event kind: adaptive seals (many, with a small tail), fixed tails, chunked drains,
// edge tiering, kmean, exact sides, row formats and sliding layers, shared or compressed; on a
// trajectory of three turns whose idle steps seal back to the tail and keep 300 exact.
// Stepwise alone at 2 threads; blocked alone at 2 threads and through score_arms' shared
// prefix at 1 thread.
TEST_P(RealModel, BlockedScoringIsTheStepwiseBits) {
  const std::string path = this->path();
  if (path.empty()) GTEST_SKIP() << "model not installed (scripts/setup, or SJKV_MODEL)";
  auto m = Model::load(path);
  const ModelInfo& info = m->info();
  // Gemma's 262,144-entry vocabulary and 18 layers make each position several times SmolLM2's:
  // fewer positions and arms there (the other families' blocks are SmolLM2's and test_arms'
  // ArmJournal), its 512-position window still crossed.
  const bool big = info.n_vocab > 100000;
  std::vector<int32_t> ids(400);
  std::mt19937 rng(23);
  std::uniform_int_distribution<int32_t> pick(100, static_cast<int32_t>(std::min<uint32_t>(info.n_vocab, 20000)) - 1);
  for (auto& id : ids) id = pick(rng);
  RecordInput in;
  in.prompt = ids;
  in.settings.generate = big ? 170 : 260;
  in.settings.ubatch = 64;
  in.settings.reference = "f32";
  const auto f32 = make_arm("f32");
  const Trajectory v2 = record_trajectory(*m, *f32, in);
  ASSERT_EQ(v2.generated(), in.settings.generate);
  // Turns: scored, idle (seal to the tail), given, scored, idle (keep 300 exact), given, scored.
  const Trajectory t = big ? as_turns(v2, {{50, 15}, {110, 10}}, {0, 300}) : as_turns(v2, {{70, 20}, {180, 10}}, {0, 300});
  const uint32_t G = t.generated();
  ASSERT_EQ(G, big ? 145u : 230u);
  // q8_0 staging where SmolLM2's head size 64 rules out tq6_0's 128-value blocks.
  std::vector<std::string> specs = {"f16", "q4_0:rot:swa=same"};
  if (big) {
    specs.insert(specs.end(), {"sj:3/2t:tail=128", "sj:3/3t:tail=128/256:flush=1:tier=edge"});
  } else {
    specs.insert(specs.end(), {"q8_0", "kvarn:4/4:tail=0", "sj:4/4:staging=q8_0:G=16:sink=64:tail=32/128",
                               "sj:4/4:staging=q8_0:tail=128/256:flush=1", "sj:4/4:staging=q8_0:tail=128/256:tier=edge",
                               "sj:4/4:staging=q8_0:kmean=sink:exact=k:tail=128/256"});
  }
  std::vector<std::unique_ptr<KvArm>> arms;
  std::vector<const KvArm*> ptrs;
  for (const std::string& s : specs) {
    arms.push_back(make_arm(s));
    ptrs.push_back(arms.back().get());
  }
  const uint32_t ub = 48;  // blocks cut at the ubatch as well as at seals and turns
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  std::vector<std::vector<ScoreRow>> shared(arms.size());
  score_arms(*m, ptrs, t, ub, [&](size_t a, std::vector<ScoreRow>&& rows, const ScoreDetail&) { shared[a] = std::move(rows); });
  omp_set_num_threads(2);
  ScoreOptions stepwise;
  stepwise.stepwise = true;
  for (size_t a = 0; a < arms.size(); ++a) {
    ScoreDetail d;
    const auto step = score_trajectory(*m, *arms[a], t, ub, {}, nullptr, &d, stepwise);
    const auto block = score_trajectory(*m, *arms[a], t, ub);
    ASSERT_EQ(step.size(), G);
    ASSERT_EQ(block.size(), G);
    ASSERT_EQ(shared[a].size(), G);
    uint32_t commits = 0;  // codec arms: the bits fall when a seal lands within the scored rows
    for (size_t j = 0; j < step.size(); ++j) {
      const std::vector<ScoreRow>* others[] = {&block, &shared[a]};
      for (const std::vector<ScoreRow>* other : others) {
        const ScoreRow& b = (*other)[j];
        ASSERT_EQ(0, std::memcmp(&step[j].kl, &b.kl, sizeof(double))) << specs[a] << " position " << j;
        ASSERT_EQ(step[j].same_top, b.same_top) << specs[a] << " position " << j;
        ASSERT_EQ(0, std::memcmp(&step[j].bits_occupied, &b.bits_occupied, sizeof(double))) << specs[a] << " " << j;
        ASSERT_EQ(0, std::memcmp(&step[j].bits_allocated, &b.bits_allocated, sizeof(double))) << specs[a] << " " << j;
      }
      if (j > 0 && step[j].bits_occupied < step[j - 1].bits_occupied) ++commits;
    }
    if (d.codec) {  // seals within the scored rows (idle ones among them), several for the small tail
      EXPECT_GE(commits, specs[a].find("tail=32/") != std::string::npos ? 3u : 1u) << specs[a] << ": too few seals to test";
    }
  }
  omp_set_num_threads(saved);
}

INSTANTIATE_TEST_SUITE_P(Installed, RealModel, ::testing::Values(0, 1));
