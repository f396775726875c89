// Test-only: logits rows shaped like a language model's over a 262,144-token vocabulary
// (Gemma 3's): a bulk of implausible tokens with heavy-tailed (Student-t) logits, and a
// head of plausible tokens whose logits fall with rank as a power law above the bulk.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

namespace sjkv_test {

constexpr uint32_t kGemmaVocab = 262144;

struct RowShape {
  double bulk_scale;  // scale of the bulk's Student-t logits
  double bulk_dof;    // its degrees of freedom (smaller: heavier tail)
  double head_top;    // the top logit above the bulk's centre
  double head_slope;  // head logit = head_top - slope * log(rank + 1)
  uint32_t head;      // plausible tokens
};

inline std::vector<float> lm_logits(uint32_t n, const RowShape& s, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::normal_distribution<double> z(0.0, 1.0);
  std::chi_squared_distribution<double> chi(s.bulk_dof);
  std::vector<float> row(n);
  for (uint32_t i = 0; i < n; ++i) row[i] = static_cast<float>(s.bulk_scale * z(g) / std::sqrt(chi(g) / s.bulk_dof));
  std::vector<uint32_t> perm(n);
  std::iota(perm.begin(), perm.end(), 0u);
  std::shuffle(perm.begin(), perm.end(), g);
  for (uint32_t r = 0; r < s.head && r < n; ++r)
    row[perm[r]] = std::max(row[perm[r]], static_cast<float>(s.head_top - s.head_slope * std::log(r + 1.0) + 0.3 * z(g)));
  return row;
}

// The shapes the tests sweep: confident, typical, uncertain, and a heavier, wider bulk.
inline std::vector<RowShape> row_shapes() {
  return {{2.5, 30, 26, 3.0, 64}, {2.5, 30, 20, 1.5, 256}, {2.5, 10, 14, 0.8, 1024},
          {3.0, 5, 16, 1.2, 512}, {3.0, 3, 15, 1.0, 512}, {2.0, 30, 10, 0.5, 4096}};
}

// Full-vocabulary KL(p||q) in long double, the quantity the stored form approximates.
inline double full_kl(const std::vector<float>& p_logits, const std::vector<float>& q_logits) {
  auto lse = [](const std::vector<float>& v) {
    long double m = *std::max_element(v.begin(), v.end()), s = 0;
    for (float x : v) s += std::exp(static_cast<long double>(x) - m);
    return m + std::log(s);
  };
  const long double zp = lse(p_logits), zq = lse(q_logits);
  long double kl = 0;
  for (size_t i = 0; i < p_logits.size(); ++i) {
    const long double lp = p_logits[i] - zp, lq = q_logits[i] - zq;
    kl += std::exp(lp) * (lp - lq);
  }
  return static_cast<double>(kl);
}

}  // namespace sjkv_test
