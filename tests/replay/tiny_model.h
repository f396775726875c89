// Test-only: a small deterministic model behind the Model interface and two plain cache
// arms (f32, f16), for the record/score loops and the command line without a GGUF model.
#pragma once

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <stdexcept>
#include <vector>

#include "sjkv/fp16.h"
#include "sjkv/replay/kv.h"
#include "sjkv/replay/model.h"

namespace sjkv_test {

using namespace sjkv;
using namespace sjkv::replay;

// One attention layer per LayerShape; the logits are a fixed random projection of the
// attention outputs, so that how the cache stores K/V changes the distribution.

class PlainKv : public LayerKv {
 public:
  PlainKv(const LayerShape& s, bool f16) : s_(s), f16_(f16) {}
  void begin_ubatch(uint32_t, uint32_t) override {}
  void store(uint32_t pos0, uint32_t n, const float* k, const float* v) override {
    const size_t row = static_cast<size_t>(s_.n_head_kv) * s_.head_dim;
    if (static_cast<size_t>(pos0) * row != k_.size()) throw std::logic_error("out of order");
    for (size_t i = 0; i < n * row; ++i) {
      k_.push_back(f16_ ? round_f16(k[i]) : k[i]);
      v_.push_back(f16_ ? round_f16(v[i]) : v[i]);
    }
  }
  void attend(uint32_t pos0, uint32_t n, const float* q, float scale, float* out) override {
    const uint32_t D = s_.head_dim, H = s_.n_head, G = s_.n_head / s_.n_head_kv;
    for (uint32_t i = 0; i < n; ++i)
      for (uint32_t h = 0; h < H; ++h) {
        const uint32_t last = pos0 + i, first = s_.window && last + 1 > s_.window ? last + 1 - s_.window : 0;
        std::vector<double> w;
        double mx = -INFINITY;
        for (uint32_t p = first; p <= last; ++p) {
          double dot = 0;
          for (uint32_t d = 0; d < D; ++d)
            dot += static_cast<double>(q[(static_cast<size_t>(i) * H + h) * D + d]) *
                   k_[(static_cast<size_t>(p) * s_.n_head_kv + h / G) * D + d];
          w.push_back(scale * dot);
          mx = std::max(mx, w.back());
        }
        double sum = 0;
        for (double& x : w) sum += x = std::exp(x - mx);
        for (uint32_t d = 0; d < D; ++d) {
          double acc = 0;
          for (uint32_t p = first; p <= last; ++p) acc += w[p - first] * v_[(static_cast<size_t>(p) * s_.n_head_kv + h / G) * D + d];
          out[(static_cast<size_t>(i) * H + h) * D + d] = static_cast<float>(acc / sum);
        }
      }
  }
  LayerBits bits() const override {
    const double b = f16_ ? 16.0 : 32.0;
    const double stored = static_cast<double>(k_.size()) / (static_cast<double>(s_.n_head_kv) * s_.head_dim);
    return {b, s_.n_ctx ? b * (stored > 0 ? 1.0 : 0.0) : 0.0};
  }
  LayerBits bits_at(uint32_t) const override { return bits(); }
  uint32_t decode_run(uint32_t, uint32_t limit) const override { return limit; }
  void idle(uint32_t) override {}

 private:
  LayerShape s_;
  bool f16_;
  std::vector<float> k_, v_;
};

class PlainArm : public KvArm {
 public:
  explicit PlainArm(bool f16) : f16_(f16) { spec_ = f16 ? "f16" : "f32"; }

 private:
  std::unique_ptr<LayerKv> make_attention_layer(const LayerShape& s) const override {
    return std::make_unique<PlainKv>(s, f16_);
  }
  bool f16_;
};

class TinyModel : public Model {
 public:
  explicit TinyModel(uint32_t n_vocab) {
    info_.architecture = "tiny";
    info_.file_name = "tiny.gguf";
    info_.n_layer = 2;
    info_.n_vocab = n_vocab;
    info_.n_head = 2;
    info_.n_head_kv = 1;
    info_.head_dim = 32;
    info_.n_embd = 64;
    LayerShape full, slide;
    full.layer = 0;
    full.n_head = 2;
    full.n_head_kv = 1;
    full.head_dim = 32;
    slide = full;
    slide.layer = 1;
    slide.full_attention = false;
    slide.window = 8;
    info_.layers = {slide, full};
    std::mt19937_64 g(99);
    std::normal_distribution<float> z(0.0f, 1.0f);
    emb_.resize(static_cast<size_t>(n_vocab) * 32);
    for (float& x : emb_) x = z(g);
    out_.resize(static_cast<size_t>(n_vocab) * 64);
    for (float& x : out_) x = 2.0f * z(g);
  }
  const ModelInfo& info() const override { return info_; }
  // An empty GGUF v3 file (no tensors, no metadata), for code that only passes it along.
  const GgufFile& gguf() const override {
    static const GgufFile empty = [] {
      std::vector<uint8_t> b = {'G', 'G', 'U', 'F', 3, 0, 0, 0};
      b.resize(32, 0);
      return GgufFile::parse(b, "tiny.gguf");
    }();
    return empty;
  }

  void eval_hidden(const int32_t* tokens, uint32_t n, uint32_t pos0, uint32_t n_ubatch,
                   std::vector<std::unique_ptr<LayerKv>>& kv, float* hidden_out, float* logits,
                   bool all_logits) override {
    for (uint32_t b0 = 0; b0 < n; b0 += n_ubatch) {
      const uint32_t nb = std::min(n_ubatch, n - b0);
      std::vector<float> x(static_cast<size_t>(nb) * 32), q(static_cast<size_t>(nb) * 64), o(q.size());
      for (uint32_t i = 0; i < nb; ++i)
        for (uint32_t d = 0; d < 32; ++d)
          x[i * 32 + d] = emb_[static_cast<size_t>(tokens[b0 + i]) * 32 + d] + 0.1f * std::sin(0.3f * (pos0 + b0 + i) + d);
      std::vector<float> hidden(static_cast<size_t>(nb) * 64, 0.0f);
      for (size_t l = 0; l < kv.size(); ++l) {
        for (uint32_t i = 0; i < nb; ++i)
          for (uint32_t d = 0; d < 32; ++d) {
            q[i * 64 + d] = x[i * 32 + d];
            q[i * 64 + 32 + d] = x[i * 32 + (d + 1 + l) % 32];
          }
        kv[l]->begin_ubatch(pos0 + b0, nb);
        kv[l]->store(pos0 + b0, nb, x.data(), x.data());
        kv[l]->attend(pos0 + b0, nb, q.data(), 0.5f, o.data());
        for (size_t i = 0; i < hidden.size(); ++i) hidden[i] += o[i];
      }
      const uint32_t V = info_.n_vocab;
      for (uint32_t i = 0; i < nb; ++i) {
        if (!all_logits && b0 + i != n - 1) continue;
        const size_t r = all_logits ? b0 + i : 0;
        if (hidden_out) std::copy(hidden.begin() + i * 64, hidden.begin() + (i + 1) * 64, hidden_out + r * 64);
        if (logits) project(hidden.data() + i * 64, 1, logits + r * V);
      }
    }
  }

  // Each row entry is one fixed-order dot product, so any thread count gives the same bits.
  void project(const float* hidden, uint32_t rows, float* logits) const override {
    const uint32_t V = info_.n_vocab;
    for (uint32_t i = 0; i < rows; ++i) {
      float* row = logits + static_cast<size_t>(i) * V;
#pragma omp parallel for schedule(static)
      for (int64_t t = 0; t < static_cast<int64_t>(V); ++t) {
        float acc = 0;
        for (uint32_t d = 0; d < 64; ++d) acc += out_[static_cast<size_t>(t) * 64 + d] * hidden[i * 64 + d];
        row[t] = acc;
      }
    }
  }

 private:
  ModelInfo info_;
  std::vector<float> emb_, out_;
};

}  // namespace sjkv_test
