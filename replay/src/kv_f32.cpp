#include "sjkv/replay/kv_f32.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "sjkv/parallel.h"

namespace sjkv {
namespace replay {
namespace {

// q.k in 8 lanes (k in order within each lane), the lanes summed in a fixed tree: a fixed
// order the compiler can vectorise without reassociating.
// Compiled for AVX2 and for the baseline; without contraction or reassociation both clones
// give the same bits.
__attribute__((target_clones("avx2", "default"))) float dot(const float* a, const float* b, uint32_t n) {
  float l[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  const uint32_t n8 = n / 8 * 8;
  for (uint32_t i = 0; i < n8; i += 8)
    for (uint32_t j = 0; j < 8; ++j) l[j] = l[j] + a[i + j] * b[i + j];
  float s = ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
  for (uint32_t i = n8; i < n; ++i) s = s + a[i] * b[i];
  return s;
}

__attribute__((target_clones("avx2", "default"))) void axpy(double* acc, double w, const float* v, uint32_t n) {
  for (uint32_t d = 0; d < n; ++d) acc[d] += w * v[d];
}

class F32Layer final : public LayerKv {
 public:
  explicit F32Layer(const LayerShape& s) : s_(s) {
    if (s.n_head == 0 || s.n_head_kv == 0 || s.head_dim == 0 || s.n_head % s.n_head_kv != 0)
      throw std::invalid_argument("f32 cache: bad layer shape (heads " + std::to_string(s.n_head) + "/" +
                                  std::to_string(s.n_head_kv) + ", head_dim " + std::to_string(s.head_dim) + ")");
    row_ = static_cast<size_t>(s.n_head_kv) * s.head_dim;
    if (s.n_ctx) {
      k_.reserve(row_ * s.n_ctx);
      v_.reserve(row_ * s.n_ctx);
    }
  }

  void begin_ubatch(uint32_t pos0, uint32_t) override {
    if (pos0 != n_pos_)
      throw std::invalid_argument("f32 cache: ubatch at position " + std::to_string(pos0) + ", expected " +
                                  std::to_string(n_pos_));
  }

  void store(uint32_t pos0, uint32_t n, const float* k, const float* v) override {
    if (pos0 != n_pos_) throw std::invalid_argument("f32 cache: store out of order");
    k_.insert(k_.end(), k, k + row_ * n);
    v_.insert(v_.end(), v, v + row_ * n);
    n_pos_ += n;
  }

  void attend(uint32_t pos0, uint32_t n, const float* q, float scale, float* out) override {
    if (pos0 + n > n_pos_) throw std::invalid_argument("f32 cache: attend past the stored positions");
    const uint32_t H = s_.n_head, D = s_.head_dim, group = s_.n_head / s_.n_head_kv;
    const long items = static_cast<long>(n) * H;
    // Items to whichever thread is free (sjkv/parallel.h); an item's floats do not depend on it.
    parallel_for(items, 0, [&](long it) {
      thread_local std::vector<float> sc;
      thread_local std::vector<double> acc;
      acc.resize(s_.head_dim);
      const uint32_t i = static_cast<uint32_t>(it / H), h = static_cast<uint32_t>(it % H);
      const uint32_t p = pos0 + i;
      const uint32_t lo = (s_.window && p + 1 > s_.window) ? p + 1 - s_.window : 0;
      const float* qh = q + (static_cast<size_t>(i) * H + h) * D;
      const size_t kvo = static_cast<size_t>(h / group) * D;
      sc.resize(p + 1 - lo);
      float mx = -INFINITY;
      for (uint32_t j = lo; j <= p; ++j) {
        const float* kr = k_.data() + j * row_ + kvo;
        float s = dot(qh, kr, D) * scale;
        if (s_.softcap > 0.0f) s = std::tanh(s * (1.0f / s_.softcap)) * s_.softcap;
        sc[j - lo] = s;
        mx = std::max(mx, s);
      }
      // A learned sink joins the softmax with no value row (llama.cpp's soft_max with sinks).
      const bool sink = !s_.sink_logits.empty();
      if (sink) mx = std::max(mx, s_.sink_logits[h]);
      double den = sink ? std::exp(static_cast<double>(s_.sink_logits[h]) - mx) : 0.0;
      for (auto& s : sc) {
        s = std::exp(s - mx);
        den += s;
      }
      float* o = out + (static_cast<size_t>(i) * H + h) * D;
      std::fill(acc.begin(), acc.end(), 0.0);
      for (uint32_t j = lo; j <= p; ++j) {
        const float* vr = v_.data() + j * row_ + kvo;
        const double w = sc[j - lo];
        axpy(acc.data(), w, vr, D);
      }
      for (uint32_t d = 0; d < D; ++d) o[d] = static_cast<float>(acc[d] / den);
    });
  }

  LayerBits bits() const override {
    LayerBits b;
    b.occupied = 32.0;
    b.allocated = 32.0;
    return b;
  }
  LayerBits bits_at(uint32_t) const override { return bits(); }
  uint32_t decode_run(uint32_t, uint32_t limit) const override { return limit; }
  void idle(uint32_t) override {}

 private:
  LayerShape s_;
  size_t row_ = 0;
  uint32_t n_pos_ = 0;
  std::vector<float> k_, v_;
};

}  // namespace

std::unique_ptr<LayerKv> make_f32_layer(const LayerShape& s) {
  if (s.recurrent) return make_state_layer(s, StateFormat::f32);
  return std::make_unique<F32Layer>(s);
}

}  // namespace replay
}  // namespace sjkv
