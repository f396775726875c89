// Log-domain variance balancing and the per-row affine (docs/SPEC.md §6.3-6.5): the
// per-element formulas, once, for the scalar reference, the vectorised CPU path and CUDA.
#pragma once

#include <math.h>

#include "sjkv/hd.h"

namespace sjkv {

enum class BalanceMode : uint32_t {
  final_scales = 0,  // SJ-KVaRN: `iters` passes, keep the last scales (the format)
  best_of = 1,       // KVarN-faithful: keep the scales of the least imbalanced pass
};

namespace bal {

constexpr float kSdMin = 1e-3f;    // 0x3a83126f
constexpr float kSdMax = 1e3f;     // 0x447a0000
constexpr double kLogMin = -0.3;   // 0xbfd3333333333333
constexpr double kLogMax = 10.0;
constexpr float kStepMin = 1e-10f; // 0x2edbe6ff

// The fixed pairwise combine of the 8 chunk sums of the reduction contract.
SJKV_HD inline double combine8(const double* p) {
  using namespace op;
  return dadd(dadd(dadd(p[0], p[1]), dadd(p[2], p[3])), dadd(dadd(p[4], p[5]), dadd(p[6], p[7])));
}

SJKV_HD inline float sstd_finish(double m2, uint32_t n) {
  const double div = static_cast<double>(n > 1 ? n - 1 : 1);
  return static_cast<float>(op::sqrt64(op::ddiv(m2, div)));
}

// Sample std of x[0], x[stride], ... x[(n-1)*stride] by the reduction contract (n % 8 == 0).
SJKV_HD inline float sstd_strided(const float* x, uint32_t n, uint32_t stride) {
  using namespace op;
  const uint32_t k = n / 8;
  double p[8];
  for (uint32_t c = 0; c < 8; ++c) {
    double acc = 0.0;
    for (uint32_t i = c * k; i < c * k + k; ++i) acc = dadd(acc, static_cast<double>(x[i * stride]));
    p[c] = acc;
  }
  const double mean = ddiv(combine8(p), static_cast<double>(n));
  for (uint32_t c = 0; c < 8; ++c) {
    double acc = 0.0;
    for (uint32_t i = c * k; i < c * k + k; ++i) {
      const double d = dsub(static_cast<double>(x[i * stride]), mean);
      acc = fma64(d, d, acc);
    }
    p[c] = acc;
  }
  return sstd_finish(combine8(p), n);
}

// One column or row update: clamp the std, add its log, clamp the log.
SJKV_HD inline double update_log(double L, float sd) {
  using namespace op;
  sd = maxS(sd, kSdMin);
  sd = minS(sd, kSdMax);
  L = dadd(L, log(static_cast<double>(sd)));
  L = maxS(L, kLogMin);
  return minS(L, kLogMax);
}

SJKV_HD inline float scale_of_log(double L) { return static_cast<float>(exp(L)); }

// cur = (M / s_col) / s_row: column scale first, two roundings.
SJKV_HD inline float rescale(float m, float s_col, float s_row) {
  return op::fdiv(op::fdiv(m, s_col), s_row);
}

SJKV_HD inline float affine_step(float lo, float hi, uint32_t qmax) {
  return op::maxS(op::fdiv(op::fsub(hi, lo), static_cast<float>(qmax)), kStepMin);
}

SJKV_HD inline uint32_t rtn_code(float x, float lo, float step, uint32_t qmax) {
  float q = op::rne_int(op::fdiv(op::fsub(x, lo), step));
  if (q < 0.0f) q = 0.0f;
  if (q > static_cast<float>(qmax)) q = static_cast<float>(qmax);
  return static_cast<uint32_t>(q);
}

// KVarN imbalance of a set of stds: max/min (min floored at 1e-12), binary64.
SJKV_HD inline double spread_ratio(float sd_max, float sd_min) {
  const double lo = op::maxS(static_cast<double>(sd_min), 1e-12);
  return op::ddiv(static_cast<double>(sd_max), lo);
}

}  // namespace bal

// Scratch of one R x C balancing run (caller-owned: host vectors or device memory).
struct BalanceScratch {
  float* cur;     // [R][C]
  float* s_row;   // [R]
  float* s_col;   // [C]
  double* L_row;  // [R]
  double* L_col;  // [C]
  float* best_row;  // [R], best_of mode only
  float* best_col;  // [C], best_of mode only
};

// Imbalance of the current tile: (max/min column std) + (max/min row std).
SJKV_HD inline double tile_imbalance_ref(const float* cur, uint32_t R, uint32_t C) {
  float cmax = 0.0f, cmin = 0.0f, rmax = 0.0f, rmin = 0.0f;
  for (uint32_t c = 0; c < C; ++c) {
    const float sd = bal::sstd_strided(cur + c, R, C);
    cmax = c == 0 ? sd : op::maxS(cmax, sd);
    cmin = c == 0 ? sd : op::minS(cmin, sd);
  }
  for (uint32_t r = 0; r < R; ++r) {
    const float sd = bal::sstd_strided(cur + static_cast<size_t>(r) * C, C, 1);
    rmax = r == 0 ? sd : op::maxS(rmax, sd);
    rmin = r == 0 ? sd : op::minS(rmin, sd);
  }
  return op::dadd(bal::spread_ratio(cmax, cmin), bal::spread_ratio(rmax, rmin));
}

SJKV_HD inline void recompute_ref(const float* M, uint32_t R, uint32_t C, const float* s_row,
                                  const float* s_col, float* cur) {
  for (uint32_t r = 0; r < R; ++r)
    for (uint32_t c = 0; c < C; ++c) {
      const size_t i = static_cast<size_t>(r) * C + c;
      cur[i] = bal::rescale(M[i], s_col[c], s_row[r]);
    }
}

// Reference balancing of tile M [R][C], element by element in the spec's order. On return
// s.cur holds bal and s.s_row / s.s_col the scales that produced it.
SJKV_HD inline void balance_tile_ref(const float* M, uint32_t R, uint32_t C, uint32_t iters,
                                     BalanceMode mode, BalanceScratch s) {
  for (uint32_t r = 0; r < R; ++r) { s.s_row[r] = 1.0f; s.L_row[r] = 0.0; }
  for (uint32_t c = 0; c < C; ++c) { s.s_col[c] = 1.0f; s.L_col[c] = 0.0; }
  recompute_ref(M, R, C, s.s_row, s.s_col, s.cur);
  double best = 0.0;
  if (mode == BalanceMode::best_of) {
    best = tile_imbalance_ref(s.cur, R, C);
    for (uint32_t r = 0; r < R; ++r) s.best_row[r] = s.s_row[r];
    for (uint32_t c = 0; c < C; ++c) s.best_col[c] = s.s_col[c];
  }
  for (uint32_t it = 0; it < iters; ++it) {
    for (uint32_t c = 0; c < C; ++c) {
      s.L_col[c] = bal::update_log(s.L_col[c], bal::sstd_strided(s.cur + c, R, C));
      s.s_col[c] = bal::scale_of_log(s.L_col[c]);
    }
    recompute_ref(M, R, C, s.s_row, s.s_col, s.cur);
    for (uint32_t r = 0; r < R; ++r) {
      s.L_row[r] = bal::update_log(s.L_row[r], bal::sstd_strided(s.cur + static_cast<size_t>(r) * C, C, 1));
      s.s_row[r] = bal::scale_of_log(s.L_row[r]);
    }
    recompute_ref(M, R, C, s.s_row, s.s_col, s.cur);
    if (mode == BalanceMode::best_of) {
      const double imb = tile_imbalance_ref(s.cur, R, C);
      if (imb <= best) {  // ties go to the later pass
        best = imb;
        for (uint32_t r = 0; r < R; ++r) s.best_row[r] = s.s_row[r];
        for (uint32_t c = 0; c < C; ++c) s.best_col[c] = s.s_col[c];
      }
    }
  }
  if (mode == BalanceMode::best_of) {
    for (uint32_t r = 0; r < R; ++r) s.s_row[r] = s.best_row[r];
    for (uint32_t c = 0; c < C; ++c) s.s_col[c] = s.best_col[c];
    recompute_ref(M, R, C, s.s_row, s.s_col, s.cur);
  }
}

}  // namespace sjkv
