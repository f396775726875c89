// Real llama.cpp state files (tests/golden/llama_state/, written once by
// scripts/make-llama-state-fixtures.py with llama.cpp itself): sjkv's importer reads each, and
// its K/V equal what sjkv's own forward pass stores for the file's tokens. llama.cpp ran on F32
// copies of the models (the weights sjkv dequantizes), so the two differ only by binary32
// rounding order, sjkv's f16 weight copies and the f16 cache rounding: measured 4e-4 to 1.5e-3
// relative RMS per layer (f16 rounding alone is about 2.8e-4), against 0.46 or more for a row one
// position off. A change of llama.cpp's state layout (a field moved, V transposed or not,
// another section order) fails here. The forward pass needs the models scripts/setup
// installs (without them the comparison is skipped, the files are still read) or the test
// models of scripts/make-test-models.py (Gemma 2, Qwen 3, Phi-3: made by arch_test_models).
//
// The hybrid Qwen 3.5 test model's files (qwen35-*) hold its full-attention layers' cache (3
// and 7, with iM-RoPE cell records) and then its Gated DeltaNet layers' recurrent state. They
// are read with the model's layout; the sequence file (f16 cache, flash attention) and the full
// one (f32, no flash attention) of the same prompt must agree on both, and the first recurrent
// layer's conv state must be the last three inputs of its convolution, computed here from the
// model's weights (no forward pass needed: layer 0 sees only the token embeddings). Their K/V
// are also checked against sjkv's forward pass once it runs qwen35.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "sjkv/fp16.h"
#include "sjkv/io/llama_state.h"
#include "sjkv/io/load.h"
#include "sjkv/io/model_geometry.h"
#include "sjkv/replay/arms.h"
#include "sjkv/replay/model.h"
#include "sjkv/replay/run.h"

using namespace sjkv;
using namespace sjkv::replay;

namespace {

struct Fixture {
  const char* file;
  const char* model;         // under the models folder scripts/setup fills; "test:NAME": a test model
  uint32_t head_dim;
  uint32_t kv_sections;      // Gemma 3: the full-attention section only
  std::vector<uint32_t> layer_ids;
  uint32_t layers;
  uint32_t tokens;
  bool cell_ext = false;              // iM-RoPE cell records (Qwen 3.5)
  LlamaRecurrentLayout recurrent{};   // a hybrid's recurrent part
};

// The qwen35 test model (scripts/make-test-models.py): 8 main layers and an MTP block; layers 3
// and 7 full attention, the others Gated DeltaNet with Kc 4, S 64, 2 key and 4 value heads:
// conv rows of 3 x (2 x 2 x 64 + 256) values, delta rows of 64 x 256.
LlamaRecurrentLayout qwen35_layout() {
  LlamaRecurrentLayout r;
  r.n_layer = 8;
  r.layers = {0, 1, 2, 4, 5, 6};
  r.conv_values = 3 * 512;
  r.delta_values = 64 * 256;
  return r;
}

const std::vector<Fixture>& fixtures() {
  static const std::vector<Fixture> f = {
      {"gemma3-f16-fa.ggsq", "default.gguf", 256, 1, {5, 11, 17}, 3, 128},
      {"gemma3-f32-nofa.ggsn", "default.gguf", 256, 1, {5, 11, 17}, 3, 64},
      {"smollm2-f32-nofa.ggsq", "smollm2.gguf", 64, 0, {}, 30, 64},
      {"smollm2-f16-fa.ggsn", "smollm2.gguf", 64, 0, {}, 30, 64},
      {"gemma2-f16-nofa.ggsq", "test:gemma2", 128, 1, {1, 3}, 2, 64},
      {"qwen3-f32-fa.ggsn", "test:qwen3", 128, 0, {}, 4, 64},
      {"qwen35-f16-fa.ggsq", "test:qwen35", 256, 0, {3, 7}, 2, 64, true, qwen35_layout()},
      {"qwen35-f32-nofa.ggsn", "test:qwen35", 256, 0, {3, 7}, 2, 64, true, qwen35_layout()},
      // Gemma 4: the full layers' section (heads of 512) before the sliding one (128); gemma4-e's
      // shared-KV layers (5-7) store nothing, so its section holds layers 2 and 4 only.
      {"gemma4-f16-fa.ggsq", "test:gemma4", 512, 1, {2, 5}, 2, 64},
      {"gemma4-e-f32-nofa.ggsn", "test:gemma4-e", 512, 1, {2, 4}, 2, 64},
  };
  return f;
}

std::string fixture_path(const Fixture& f) { return std::string(SJKV_GOLDEN_DIR) + "/llama_state/" + f.file; }

std::string model_path(const std::string& name) {
  if (name.rfind("test:", 0) == 0) return std::string(SJKV_TEST_MODELS_DIR) + "/" + name.substr(5) + ".gguf";
  const std::string d = default_model_path();
  if (d.empty()) return "";
  const std::string p = d.substr(0, d.find_last_of('/') + 1) + name;
  if (FILE* f = std::fopen(p.c_str(), "rb")) {
    std::fclose(f);
    return p;
  }
  return "";
}

Capture import(const Fixture& f, LlamaRecurrentState* state = nullptr) {
  LlamaStateOptions o;
  o.head_dim = f.head_dim;
  o.kv_sections = f.kv_sections;
  o.layer_ids = f.layer_ids;
  o.cell_ext = f.cell_ext;
  o.recurrent = f.recurrent;
  return read_llama_state(fixture_path(f), o, state);
}

const Fixture& fixture_named(const std::string& file) {
  for (const Fixture& f : fixtures())
    if (file == f.file) return f;
  throw std::invalid_argument("no fixture " + file);
}

// Relative RMS difference of a[0, n - shift) against b[shift, n), over floats.
template <class A, class B>
double rel_rms(const A& a, const B& b, size_t n, size_t shift) {
  double err = 0, ref = 0;
  for (size_t i = 0; i + shift < n; ++i) {
    const double x = a(i), y = b(i + shift);
    err += (x - y) * (x - y);
    ref += x * x;
  }
  return std::sqrt(err / ref);
}

class LlamaStateFixture : public ::testing::TestWithParam<size_t> {};

}  // namespace

TEST_P(LlamaStateFixture, ReadsWithTheModelsGeometry) {
  const Fixture& f = fixtures()[GetParam()];
  LlamaRecurrentState st;
  const Capture c = import(f, &st);
  EXPECT_EQ(c.head_dim, f.head_dim);
  EXPECT_EQ(c.layers.size(), f.layers);
  EXPECT_EQ(c.tokens, f.tokens);
  EXPECT_EQ(c.token_ids.size(), f.tokens);
  for (size_t l = 0; l < f.layer_ids.size() && l < c.layers.size(); ++l) EXPECT_EQ(c.layers[l].layer_id, f.layer_ids[l]);
  c.check_consistent();
  if (f.recurrent.empty()) return;
  // One recurrent cell, which took the last position; every state row non-zero.
  EXPECT_EQ(st.layers, f.recurrent.layers);
  EXPECT_EQ(st.cell_pos, std::vector<int32_t>{static_cast<int32_t>(f.tokens) - 1});
  ASSERT_EQ(st.conv.size(), f.recurrent.layers.size());
  for (size_t l = 0; l < st.conv.size(); ++l)
    for (const std::vector<float>* v : {&st.conv[l], &st.delta[l]}) {
      ASSERT_EQ(v->size(), v == &st.conv[l] ? f.recurrent.conv_values : f.recurrent.delta_values);
      float largest = 0;
      for (float x : *v) largest = std::max(largest, std::fabs(x));
      EXPECT_GT(largest, 0.0f) << "layer " << st.layers[l];
    }
  // Without the layout the recurrent part would be read as a second KV cache section: refused.
  LlamaStateOptions o;
  o.head_dim = f.head_dim;
  o.cell_ext = true;
  EXPECT_THROW((void)read_llama_state(fixture_path(f), o), FileError);
}

TEST_P(LlamaStateFixture, KvEqualSjkvsForwardPass) {
  const Fixture& f = fixtures()[GetParam()];
  const std::string mp = model_path(f.model);
  if (mp.empty()) GTEST_SKIP() << f.model << " not installed (scripts/setup)";
  const Capture c = import(f);
  {
    const GgufFile g = GgufFile::open(mp);
    const std::vector<std::string> archs = sjkv::supported_architectures(ModelUse::forward);
    if (std::find(archs.begin(), archs.end(), g.get_string("general.architecture")) == archs.end())
      GTEST_SKIP() << g.get_string("general.architecture") << ": sjkv's forward pass does not run it yet";
  }
  auto m = Model::load(mp);
  // The options the model's own geometry gives (sjkv-encode --model) are the ones given here.
  const ImportOptions from_model = import_options_for(geometry_from_gguf(m->gguf()));
  EXPECT_EQ(from_model.head_dim, f.head_dim);
  EXPECT_EQ(from_model.kv_sections, f.kv_sections);
  EXPECT_EQ(from_model.layer_ids, f.layer_ids);
  EXPECT_TRUE(from_model.layers.empty());
  EXPECT_EQ(from_model.cell_ext, f.cell_ext);
  EXPECT_EQ(from_model.recurrent.n_layer, f.recurrent.n_layer);
  EXPECT_EQ(from_model.recurrent.layers, f.recurrent.layers);
  EXPECT_EQ(from_model.recurrent.conv_values, f.recurrent.conv_values);
  EXPECT_EQ(from_model.recurrent.delta_values, f.recurrent.delta_values);
  RecordInput in;
  in.prompt = c.token_ids;
  in.settings.generate = 1;
  in.settings.ubatch = 128;
  in.settings.reference = "f32";
  const auto f32 = make_arm("f32");
  Capture ours;
  (void)record_trajectory(*m, *f32, in, &ours);
  ASSERT_EQ(ours.layers.size(), c.layers.size());
  ASSERT_EQ(ours.head_dim, c.head_dim);
  ASSERT_EQ(ours.kv_heads, c.kv_heads);
  const size_t row = static_cast<size_t>(c.kv_heads) * c.head_dim;
  for (size_t l = 0; l < c.layers.size(); ++l) {
    EXPECT_EQ(ours.layers[l].layer_id, c.layers[l].layer_id);
    for (int side = 0; side < 2; ++side) {
      const std::vector<uint16_t>& a = side ? c.layers[l].v : c.layers[l].k;
      const std::vector<uint16_t>& b = side ? ours.layers[l].v : ours.layers[l].k;
      const size_t n = row * c.tokens;
      ASSERT_GE(b.size(), n);
      // Relative RMS difference of llama.cpp's rows [0, T - shift) against ours [shift, T).
      auto rel_diff = [&](size_t shift) {
        double err = 0, ref = 0;
        for (size_t i = 0; i + shift * row < n; ++i) {
          const double x = f16_to_f32(a[i]), y = f16_to_f32(b[i + shift * row]);
          err += (x - y) * (x - y);
          ref += x * x;
        }
        return std::sqrt(err / ref);
      };
      const double rel = rel_diff(0), off_by_one = rel_diff(1);
      std::printf("%s layer %u %s: relative RMS difference %.3g (one position off: %.3g)\n", f.file,
                  c.layers[l].layer_id, side ? "V" : "K", rel, off_by_one);
      EXPECT_LT(rel, 5e-3) << f.file << " layer " << c.layers[l].layer_id << (side ? " V" : " K");
      EXPECT_GT(off_by_one, 0.3) << "the tolerance must tell a misplaced row";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Files, LlamaStateFixture, ::testing::Range<size_t>(0, fixtures().size()),
                         [](const ::testing::TestParamInfo<size_t>& i) {
                           std::string n = fixtures()[i.param].file;
                           for (char& ch : n)
                             if (ch == '-' || ch == '.') ch = '_';
                           return n;
                         });

// Gemma 4's files as llama.cpp lays them out: the full layers' section (own-KV full layers,
// heads of 512), then the sliding layers' (heads of 128; gemma4: layers 0, 1, 3, 4 with 2 KV
// heads; gemma4-e: the own-KV sliding layers 0, 1, 3 with 1, the shared layers 5-7 absent from
// both), and nothing after. Read to the end at 128 values a head, the sliding section's rows
// are whole heads; at 512 they are refused, not misread.
TEST(LlamaStateGemma4Fixture, SlidingSectionFollowsTheFullOne) {
  struct Case {
    const char* file;
    std::vector<uint32_t> sliding;
    uint32_t kv_heads;
    uint32_t cells;
  };
  // The sequence file's sliding section holds the window's last 48 positions, the full state
  // file's all 64 (as llama.cpp wrote them).
  for (const Case& k : {Case{"gemma4-f16-fa.ggsq", {0, 1, 3, 4}, 2, 48}, Case{"gemma4-e-f32-nofa.ggsn", {0, 1, 3}, 1, 64}}) {
    const std::string path = std::string(SJKV_GOLDEN_DIR) + "/llama_state/" + k.file;
    LlamaStateOptions o;
    o.head_dim = 128;
    o.kv_sections = 0;  // to the end of the file
    for (uint32_t i = 0; i < k.sliding.size(); ++i) o.layers.push_back(2 + i);  // after the 2 full layers
    o.layer_ids = k.sliding;
    const Capture c = read_llama_state(path, o);
    ASSERT_EQ(c.layers.size(), k.sliding.size()) << k.file;
    EXPECT_EQ(c.kv_heads, k.kv_heads) << k.file;
    EXPECT_EQ(c.head_dim, 128u) << k.file;
    EXPECT_EQ(c.tokens, k.cells) << k.file;
    c.check_consistent();
    o.layers.push_back(2 + uint32_t(k.sliding.size()));  // one layer more than the file holds
    o.layer_ids.push_back(99);
    EXPECT_THROW((void)read_llama_state(path, o), FileError) << k.file;
    LlamaStateOptions all;
    all.head_dim = 512;
    EXPECT_THROW((void)read_llama_state(path, all), FileError) << k.file;
  }
}

// Phi-3's head size, 96, is no power of two: its state file is refused by name (the codec
// could not seal it), not misread.
TEST(LlamaStateFixtureRefusal, Phi3HeadSize96) {
  LlamaStateOptions o;
  o.head_dim = 96;
  try {
    (void)read_llama_state(std::string(SJKV_GOLDEN_DIR) + "/llama_state/phi3-f16-fa.ggsq", o);
    FAIL() << "read a head size of 96";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("head_dim 96 is not a power of two"), std::string::npos) << e.what();
  }
}

// The test model's own geometry gives the options used above (sjkv-encode encode --model).
TEST(LlamaStateHybridFixture, OptionsFromTheModel) {
  const std::string mp = model_path("test:qwen35");
  if (FILE* fp = std::fopen(mp.c_str(), "rb")) std::fclose(fp);
  else GTEST_SKIP() << mp << " not made (scripts/make-test-models.py)";
  const Fixture& f = fixture_named("qwen35-f16-fa.ggsq");
  const ImportOptions io = import_options_for(geometry_from_gguf(GgufFile::open(mp)));
  EXPECT_EQ(io.head_dim, f.head_dim);
  EXPECT_EQ(io.kv_sections, 0u);
  EXPECT_EQ(io.layer_ids, f.layer_ids);
  EXPECT_TRUE(io.cell_ext);
  EXPECT_EQ(io.recurrent.n_layer, f.recurrent.n_layer);
  EXPECT_EQ(io.recurrent.layers, f.recurrent.layers);
  EXPECT_EQ(io.recurrent.conv_values, f.recurrent.conv_values);
  EXPECT_EQ(io.recurrent.delta_values, f.recurrent.delta_values);
  const Capture c = load_capture_any(fixture_path(f), io);
  EXPECT_EQ(c.layers.size(), 2u);
  EXPECT_EQ(c.tokens, 64u);
}

// The sequence file (f16 cache, flash attention) and the full state (f32, none) of the same
// prompt hold the same K/V and recurrent state up to the f16 rounding of the cache and the
// attention's rounding order (layer 3's K/V, computed before any attention, only the f16
// rounding). A row or a state block read one place off is far from the other file's.
TEST(LlamaStateHybridFixture, SequenceAndFullStateAgree) {
  const Fixture& fs = fixture_named("qwen35-f16-fa.ggsq");
  const Fixture& ff = fixture_named("qwen35-f32-nofa.ggsn");
  LlamaRecurrentState ss, sf;
  const Capture cs = import(fs, &ss), cf = import(ff, &sf);
  ASSERT_EQ(cs.token_ids, cf.token_ids);
  ASSERT_EQ(cs.layers.size(), cf.layers.size());
  const size_t row = static_cast<size_t>(cs.kv_heads) * cs.head_dim, n = row * cs.tokens;
  for (size_t l = 0; l < cs.layers.size(); ++l)
    for (int side = 0; side < 2; ++side) {
      const std::vector<uint16_t>& a = side ? cs.layers[l].v : cs.layers[l].k;
      const std::vector<uint16_t>& b = side ? cf.layers[l].v : cf.layers[l].k;
      const auto fa = [&](size_t i) { return f16_to_f32(a[i]); };
      const auto fb = [&](size_t i) { return f16_to_f32(b[i]); };
      const double rel = rel_rms(fa, fb, n, 0), off = rel_rms(fa, fb, n, row);
      std::printf("qwen35 layer %u %s: sequence vs full state %.3g (one position off: %.3g)\n", cs.layers[l].layer_id,
                  side ? "V" : "K", rel, off);
      EXPECT_LT(rel, 5e-3);
      EXPECT_GT(off, 0.3);
    }
  ASSERT_EQ(ss.conv.size(), sf.conv.size());
  for (size_t l = 0; l < ss.conv.size(); ++l)
    for (int which = 0; which < 2; ++which) {
      const std::vector<float>& a = which ? ss.delta[l] : ss.conv[l];
      const std::vector<float>& b = which ? sf.delta[l] : sf.conv[l];
      ASSERT_EQ(a.size(), b.size());
      const auto fa = [&](size_t i) { return a[i]; };
      const auto fb = [&](size_t i) { return b[i]; };
      const double rel = rel_rms(fa, fb, a.size(), 0), off = rel_rms(fa, fb, a.size(), 1);
      std::printf("qwen35 layer %u %s state: sequence vs full state %.3g (one value off: %.3g)\n", ss.layers[l],
                  which ? "delta" : "conv", rel, off);
      EXPECT_LT(rel, 5e-3);
      EXPECT_GT(off, 0.3);
    }
}

// Layer 0's conv state is the last Kc - 1 = 3 inputs of its causal convolution: the attn_qkv
// projection of the RMS-normed embeddings of the last three tokens, stored {3, conv_dim} (the
// three times of a channel together, oldest first). Computed here in double from the model's
// weights; llama.cpp's f32 products differ by rounding only.
TEST(LlamaStateHybridFixture, FirstConvStateIsTheLastInputs) {
  const std::string mp = model_path("test:qwen35");
  if (FILE* fp = std::fopen(mp.c_str(), "rb")) std::fclose(fp);
  else GTEST_SKIP() << mp << " not made (scripts/make-test-models.py)";
  const GgufFile g = GgufFile::open(mp);
  const auto tensor = [&](const char* name, std::vector<uint64_t> dims) {
    const GgufTensorInfo* t = g.find_tensor(name);
    EXPECT_NE(t, nullptr) << name;
    EXPECT_EQ(t->type, 0u) << name;
    EXPECT_EQ(t->dims, dims) << name;
    return reinterpret_cast<const float*>(g.tensor_data(*t));
  };
  const uint32_t E = 256, C = 512, K = 3;
  const float* embd = tensor("token_embd.weight", {E, 500});
  const float* norm = tensor("blk.0.attn_norm.weight", {E});
  const float* qkv = tensor("blk.0.attn_qkv.weight", {E, C});
  const double eps = g.get_f32("qwen35.attention.layer_norm_rms_epsilon");
  for (const char* file : {"qwen35-f16-fa.ggsq", "qwen35-f32-nofa.ggsn"}) {
    LlamaRecurrentState st;
    const Capture c = import(fixture_named(file), &st);
    ASSERT_EQ(st.layers.front(), 0u);
    const std::vector<float>& conv = st.conv.front();
    double err = 0, ref = 0, err_swapped = 0;
    for (uint32_t k = 0; k < K; ++k) {
      const int32_t tok = c.token_ids[c.tokens - K + k];
      ASSERT_GE(tok, 0);
      ASSERT_LT(tok, 500);
      const float* x = embd + static_cast<size_t>(tok) * E;
      double ss = 0;
      for (uint32_t i = 0; i < E; ++i) ss += static_cast<double>(x[i]) * x[i];
      const double scale = 1.0 / std::sqrt(ss / E + eps);
      for (uint32_t ch = 0; ch < C; ++ch) {
        double y = 0;
        for (uint32_t i = 0; i < E; ++i) y += static_cast<double>(qkv[static_cast<size_t>(ch) * E + i]) * x[i] * scale * norm[i];
        const double got = conv[static_cast<size_t>(ch) * K + k], swapped = conv[static_cast<size_t>(k) * C + ch];
        err += (got - y) * (got - y);
        err_swapped += (swapped - y) * (swapped - y);
        ref += y * y;
      }
    }
    const double rel = std::sqrt(err / ref), rel_swapped = std::sqrt(err_swapped / ref);
    std::printf("%s layer 0 conv state against the model's last three inputs: %.3g (as [time][channel]: %.3g)\n", file,
                rel, rel_swapped);
    EXPECT_LT(rel, 1e-5) << file;
    EXPECT_GT(rel_swapped, 0.3) << file;
  }
}
