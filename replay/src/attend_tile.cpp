// Blocked tile step of the fused attention (attend_tile.h): portable and AVX2 builds of the
// same operations in the same order.
#include "attend_tile.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

#include "dequant_avx2.h"
#include "sjkv/fp16.h"
#include "sjkv/replay/gemm.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace sjkv {
namespace replay {
namespace detail {
namespace {

constexpr float kExpFloor = -87.0f;               // e^-87 ~ 1.6e-38: below it the weight is 0
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kRound = 12582912.0f;             // 1.5 * 2^23: (t + kRound) - kRound rounds t
constexpr float kLn2Hi = 0.693145751953125f;      // ln 2 in 16 bits: nf * kLn2Hi is exact
constexpr float kLn2Lo = 1.42860682030941723e-6f; // ln 2 - kLn2Hi
constexpr float kC[8] = {1.0f, 1.0f, 0.5f, 1.0f / 6.0f, 1.0f / 24.0f, 1.0f / 120.0f, 1.0f / 720.0f, 1.0f / 5040.0f};

// The online-softmax step of one query once its tile scores are in sc[0, n): rescale the
// running state to the new maximum, turn the scores into weights (in place) and add them to
// s. The weights come from `weights` (exp_nonpos, or its eight-lane form).
template <class Weights>
void softmax_step(const TileBlock& b, uint32_t q, float* sc, uint32_t n, uint32_t D, Weights weights) {
  float mt = -std::numeric_limits<float>::infinity();
  for (uint32_t p = 0; p < n; ++p) mt = std::max(mt, sc[p]);
  if (mt > b.m[q]) {
    const float corr = std::isinf(b.m[q]) ? 0.0f : exp_nonpos(b.m[q] - mt);
    float* acc = b.acc + static_cast<size_t>(q) * D;
    for (uint32_t d = 0; d < D; ++d) acc[d] = acc[d] * corr;
    b.s[q] = b.s[q] * corr;
    b.m[q] = mt;
  }
  weights(sc, n, b.m[q]);
  float sw = b.s[q];
  for (uint32_t p = 0; p < n; ++p) sw = sw + sc[p];
  b.s[q] = sw;
}

// Value d of a row of `type` (attend_tile.h's TileRows types): the floats a decoded tile holds.
float row_value(uint32_t type, const uint8_t* row, uint32_t d) {
  if (type == kGgmlF16) return f16_to_f32(static_cast<uint16_t>(row[2 * d] | (row[2 * d + 1] << 8)));
  uint32_t u;
  if (type == kGgmlBF16) {
    u = static_cast<uint32_t>(row[2 * d] | (row[2 * d + 1] << 8)) << 16;
  } else {
    std::memcpy(&u, row + 4 * static_cast<size_t>(d), 4);
  }
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

void weights_portable(float* sc, uint32_t n, float m) {
  for (uint32_t p = 0; p < n; ++p) sc[p] = exp_nonpos(sc[p] - m);
}

#if defined(__x86_64__)

__attribute__((target("avx2"))) inline __m256 exp_nonpos8(__m256 x) {
  const __m256 keep = _mm256_cmp_ps(x, _mm256_set1_ps(kExpFloor), _CMP_GT_OQ);
  const __m256 round = _mm256_set1_ps(kRound);
  const __m256 nf = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(x, _mm256_set1_ps(kLog2e)), round), round);
  __m256 r = _mm256_sub_ps(x, _mm256_mul_ps(nf, _mm256_set1_ps(kLn2Hi)));
  r = _mm256_sub_ps(r, _mm256_mul_ps(nf, _mm256_set1_ps(kLn2Lo)));
  __m256 p = _mm256_set1_ps(kC[7]);
  for (int c = 6; c >= 0; --c) p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(kC[c]));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(nf), _mm256_set1_epi32(127)), 23);
  return _mm256_and_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(e)), keep);
}

__attribute__((target("avx2"))) void weights_avx2(float* sc, uint32_t n, float m) {
  const __m256 mv = _mm256_set1_ps(m);
  uint32_t p = 0;
  for (; p + 8 <= n; p += 8) _mm256_storeu_ps(sc + p, exp_nonpos8(_mm256_sub_ps(_mm256_loadu_ps(sc + p), mv)));
  for (; p < n; ++p) sc[p] = exp_nonpos(sc[p] - m);
}

// weight x V over rows [0, np) for M queries and N eight-float columns from d0: acc[j][d] =
// fma(w[j][p], v[p][d], acc[j][d]) in increasing p, the lanes never leaving the registers.
// Row p of V is at v + p * stride, of type T.
template <uint32_t T, int M, int N>
__attribute__((target("avx2,fma,f16c"))) void wv_avx2(float* const* acc, const float* const* w, const uint8_t* v,
                                                      size_t stride, uint32_t np, uint32_t d0) {
  __m256 a[M][N];
  for (int j = 0; j < M; ++j)
    for (int c = 0; c < N; ++c) a[j][c] = _mm256_loadu_ps(acc[j] + d0 + 8 * c);
  for (uint32_t p = 0; p < np; ++p) {
    const uint8_t* vr = v + p * stride;
    __m256 vv[N];
    for (int c = 0; c < N; ++c) vv[c] = blocks::load8<T>(vr + (d0 + 8 * c) * (blocks::avx2_plain<T>::kBytes / 8));
    for (int j = 0; j < M; ++j) {
      const __m256 wj = _mm256_broadcast_ss(w[j] + p);
      for (int c = 0; c < N; ++c) a[j][c] = _mm256_fmadd_ps(wj, vv[c], a[j][c]);
    }
  }
  for (int j = 0; j < M; ++j)
    for (int c = 0; c < N; ++c) _mm256_storeu_ps(acc[j] + d0 + 8 * c, a[j][c]);
}

using WvFn = void (*)(float* const*, const float* const*, const uint8_t*, size_t, uint32_t, uint32_t);
constexpr int kWvQueries = 4, kWvCols = 3;  // 12 accumulators, 3 rows of V and one weight in 16 registers

template <uint32_t T>
WvFn wv_of(int m, int n) {
  static const WvFn t[kWvQueries][kWvCols] = {{wv_avx2<T, 1, 1>, wv_avx2<T, 1, 2>, wv_avx2<T, 1, 3>},
                                              {wv_avx2<T, 2, 1>, wv_avx2<T, 2, 2>, wv_avx2<T, 2, 3>},
                                              {wv_avx2<T, 3, 1>, wv_avx2<T, 3, 2>, wv_avx2<T, 3, 3>},
                                              {wv_avx2<T, 4, 1>, wv_avx2<T, 4, 2>, wv_avx2<T, 4, 3>}};
  return t[m - 1][n - 1];
}
WvFn wv_table(uint32_t type, int m, int n) {
  return type == kGgmlF16 ? wv_of<kGgmlF16>(m, n) : type == kGgmlBF16 ? wv_of<kGgmlBF16>(m, n) : wv_of<kGgmlF32>(m, n);
}

// The AVX-512 form for sixteen columns a register: every (query, column) the same fused
// multiply-adds in the same order, so the AVX2 bits. (GCC 12's AVX-512 headers trip
// -Wmaybe-uninitialized on their own "undefined" operands: a known false positive.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
template <uint32_t T>
__attribute__((target("avx512f,avx2,f16c"), always_inline)) inline __m512 load16(const uint8_t* row, uint32_t d) {
  if (T == kGgmlF16) return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * size_t{d})));
  if (T == kGgmlBF16)
    return _mm512_castsi512_ps(_mm512_slli_epi32(
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * size_t{d}))), 16));
  return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + d);
}

template <uint32_t T, int M, int N>
__attribute__((target("avx512f,avx2,fma,f16c"))) void wv_avx512(float* const* acc, const float* const* w,
                                                                const uint8_t* v, size_t stride, uint32_t np,
                                                                uint32_t d0) {
  __m512 a[M][N];
  for (int j = 0; j < M; ++j)
    for (int c = 0; c < N; ++c) a[j][c] = _mm512_loadu_ps(acc[j] + d0 + 16 * c);
  for (uint32_t p = 0; p < np; ++p) {
    const uint8_t* vr = v + p * stride;
    __m512 vv[N];
    for (int c = 0; c < N; ++c) vv[c] = load16<T>(vr, d0 + 16 * c);
    for (int j = 0; j < M; ++j) {
      const __m512 wj = _mm512_set1_ps(w[j][p]);
      for (int c = 0; c < N; ++c) a[j][c] = _mm512_fmadd_ps(wj, vv[c], a[j][c]);
    }
  }
  for (int j = 0; j < M; ++j)
    for (int c = 0; c < N; ++c) _mm512_storeu_ps(acc[j] + d0 + 16 * c, a[j][c]);
}

#pragma GCC diagnostic pop

constexpr int kWv512Cols = 6;  // 4 queries x 6 registers: 24 accumulators, 6 of V, one weight
template <uint32_t T>
WvFn wv512_of(int m, int n) {
#define SJKV_ROW(M) {wv_avx512<T, M, 1>, wv_avx512<T, M, 2>, wv_avx512<T, M, 3>, wv_avx512<T, M, 4>, wv_avx512<T, M, 5>, wv_avx512<T, M, 6>}
  static const WvFn t[kWvQueries][kWv512Cols] = {SJKV_ROW(1), SJKV_ROW(2), SJKV_ROW(3), SJKV_ROW(4)};
#undef SJKV_ROW
  return t[m - 1][n - 1];
}
WvFn wv512_table(uint32_t type, int m, int n) {
  return type == kGgmlF16 ? wv512_of<kGgmlF16>(m, n) : type == kGgmlBF16 ? wv512_of<kGgmlBF16>(m, n)
                                                                          : wv512_of<kGgmlF32>(m, n);
}

void wv_simd(uint32_t nq, float* const* acc, const float* const* w, uint32_t type, const uint8_t* v, size_t stride,
             uint32_t np, uint32_t D) {
  const uint32_t D8 = D / 8 * 8, D16 = gemm_best() == GemmIsa::avx512 ? D / 16 * 16 : 0;
  for (uint32_t j = 0; j < nq; j += kWvQueries) {
    const int m = static_cast<int>(std::min<uint32_t>(kWvQueries, nq - j));
    for (uint32_t d = 0; d < D16; d += 16 * kWv512Cols) {
      const int n = static_cast<int>(std::min<uint32_t>(kWv512Cols, (D16 - d) / 16));
      wv512_table(type, m, n)(acc + j, w + j, v, stride, np, d);
    }
    for (uint32_t d = D16; d < D8; d += 8 * kWvCols) {
      const int n = static_cast<int>(std::min<uint32_t>(kWvCols, (D8 - d) / 8));
      wv_table(type, m, n)(acc + j, w + j, v, stride, np, d);
    }
  }
  for (uint32_t j = 0; j < nq; ++j)  // the D % 8 last columns
    for (uint32_t d = D8; d < D; ++d) {
      float s = acc[j][d];
      for (uint32_t p = 0; p < np; ++p) s = std::fma(w[j][p], row_value(type, v + p * stride, d), s);
      acc[j][d] = s;
    }
}

#endif

void wv_portable(uint32_t nq, float* const* acc, const float* const* w, uint32_t type, const uint8_t* v, size_t stride,
                 uint32_t np, uint32_t D) {
  for (uint32_t j = 0; j < nq; ++j)
    for (uint32_t p = 0; p < np; ++p) {
      const uint8_t* vr = v + p * stride;
      for (uint32_t d = 0; d < D; ++d) acc[j][d] = std::fma(w[j][p], row_value(type, vr, d), acc[j][d]);
    }
}

// weight x V for nq queries over V rows [r, r + np) of the tile.
void wv(bool simd, uint32_t nq, float* const* acc, const float* const* w, const TileRows& t, uint32_t r, uint32_t np,
        uint32_t D) {
  if (np == 0) return;
  const uint8_t* v = t.v + r * t.stride;
#if defined(__x86_64__)
  if (simd) return wv_simd(nq, acc, w, t.type, v, t.stride, np, D);
#endif
  wv_portable(nq, acc, w, t.type, v, t.stride, np, D);
}

void update(const TileBlock& b, const TileRows& t, uint32_t D, float scale, float* scratch, bool simd) {
  if (t.type != kGgmlF32 && t.type != kGgmlF16 && t.type != kGgmlBF16)
    throw std::logic_error("tile_block_update: rows of ggml type " + std::to_string(t.type));
  if (b.nq == 0 || b.nq > kMaxBlock) throw std::logic_error("tile_block_update: block of " + std::to_string(b.nq) + " queries");
  uint32_t L = kTileRows, H = 0, A = 0, B = kTileRows;  // union [L, H) and common [A, B) of the rows
  for (uint32_t j = 0; j < b.nq; ++j) {
    if (!(b.lo[j] < b.hi[j] && b.hi[j] <= kTileRows)) throw std::logic_error("tile_block_update: empty or oversized row range");
    L = std::min(L, b.lo[j]);
    H = std::max(H, b.hi[j]);
    A = std::max(A, b.lo[j]);
    B = std::min(B, b.hi[j]);
  }
  // Scores of every query against the union's rows: scratch[j][p - L].
  gemm_with(simd ? gemm_best() : GemmIsa::portable, WeightMatrix::strided(t.type, H - L, D, t.k + L * t.stride, t.stride),
            b.q, b.nq, scratch, kTileRows, 1, D);
#if defined(__x86_64__)
  void (*const weights)(float*, uint32_t, float) = simd ? weights_avx2 : weights_portable;
#else
  void (*const weights)(float*, uint32_t, float) = weights_portable;
#endif
  float* acc[kMaxBlock];
  const float* w[kMaxBlock];
  for (uint32_t j = 0; j < b.nq; ++j) {
    float* sc = scratch + static_cast<size_t>(j) * kTileRows + (b.lo[j] - L);
    const uint32_t n = b.hi[j] - b.lo[j];
    for (uint32_t p = 0; p < n; ++p) sc[p] = sc[p] * scale;
    if (b.softcap > 0.0f) {  // scalar in both builds, as llama.cpp: tanh(s * (1 / cap)) * cap
      const float inv = 1.0f / b.softcap;
      for (uint32_t p = 0; p < n; ++p) sc[p] = std::tanh(sc[p] * inv) * b.softcap;
    }
    softmax_step(b, j, sc, n, D, weights);
    acc[j] = b.acc + static_cast<size_t>(j) * D;
    w[j] = sc;  // the weight of row lo[j]
  }
  // weight x V in increasing position per query: its rows before the common range [A, B) one
  // query at a time, the common range as one block, then its rows after it (with no common
  // range, the first part ends at min(A, hi) and the last takes the rest).
  for (uint32_t j = 0; j < b.nq; ++j) {
    const uint32_t e = std::min(A, b.hi[j]);
    wv(simd, 1, acc + j, w + j, t, b.lo[j], e - b.lo[j], D);
  }
  if (A < B) {
    const float* wc[kMaxBlock];
    for (uint32_t j = 0; j < b.nq; ++j) wc[j] = w[j] + (A - b.lo[j]);
    wv(simd, b.nq, acc, wc, t, A, B - A, D);
  }
  for (uint32_t j = 0; j < b.nq; ++j) {
    const uint32_t f = std::max(B, std::min(A, b.hi[j]));
    const float* wt = w[j] + (f - b.lo[j]);
    wv(simd, 1, acc + j, &wt, t, f, b.hi[j] - f, D);
  }
}

}  // namespace

float exp_nonpos(float x) {
  if (!(x > kExpFloor)) return 0.0f;
  const float nf = (x * kLog2e + kRound) - kRound;
  float r = x - nf * kLn2Hi;
  r = r - nf * kLn2Lo;
  float p = kC[7];
  for (int c = 6; c >= 0; --c) p = p * r + kC[c];
  const uint32_t bits = static_cast<uint32_t>(static_cast<int32_t>(nf) + 127) << 23;
  float two_n;
  std::memcpy(&two_n, &bits, sizeof two_n);
  return p * two_n;
}

void tile_block_update_portable(const TileBlock& b, const TileRows& t, uint32_t D, float scale, float* scratch) {
  update(b, t, D, scale, scratch, false);
}

bool tile_block_uses_avx2() {
#if defined(__x86_64__)
  return gemm_best() != GemmIsa::portable;  // AVX2, FMA and F16C
#else
  return false;
#endif
}

void tile_block_update(const TileBlock& b, const TileRows& t, uint32_t D, float scale, float* scratch) {
  update(b, t, D, scale, scratch, tile_block_uses_avx2());
}

}  // namespace detail
}  // namespace replay
}  // namespace sjkv
