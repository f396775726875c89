// Blocked tile step of the fused attention (attend_tile.h): portable and AVX2 builds of the
// same operations in the same order.
#include "attend_tile.h"

#include <cmath>
#include <cstring>
#include <limits>

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
    float* acc = b.acc[q];
    for (uint32_t d = 0; d < D; ++d) acc[d] = acc[d] * corr;
    b.s[q] = b.s[q] * corr;
    b.m[q] = mt;
  }
  weights(sc, n, b.m[q]);
  float sw = b.s[q];
  for (uint32_t p = 0; p < n; ++p) sw = sw + sc[p];
  b.s[q] = sw;
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

// ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)), the portable build's tree.
__attribute__((target("avx2"))) inline float tree_sum(__m256 a) {
  const __m256 h = _mm256_hadd_ps(a, a);   // l0+l1, l2+l3, ., ., l4+l5, l6+l7, ., .
  const __m256 h2 = _mm256_hadd_ps(h, h);  // (l0+l1)+(l2+l3) in lane 0, (l4+l5)+(l6+l7) in lane 4
  return _mm_cvtss_f32(_mm_add_ss(_mm256_castps256_ps128(h2), _mm256_extractf128_ps(h2, 1)));
}

template <int NB>
__attribute__((target("avx2"))) void update_avx2(const TileBlock& b, const float* kt, const float* vt, uint32_t n,
                                                 uint32_t D, float scale, float* scratch) {
  const uint32_t D8 = D / 8 * 8;
  for (uint32_t p = 0; p < n; ++p) {  // scores: each K row read once for the block
    const float* kr = kt + static_cast<size_t>(p) * D;
    __m256 a[NB];
    for (int q = 0; q < NB; ++q) a[q] = _mm256_setzero_ps();
    for (uint32_t i = 0; i < D8; i += 8) {
      const __m256 k = _mm256_loadu_ps(kr + i);
      for (int q = 0; q < NB; ++q) a[q] = _mm256_add_ps(a[q], _mm256_mul_ps(_mm256_loadu_ps(b.q[q] + i), k));
    }
    for (int q = 0; q < NB; ++q) {
      float t = tree_sum(a[q]);
      for (uint32_t i = D8; i < D; ++i) t = t + b.q[q][i] * kr[i];
      scratch[static_cast<size_t>(q) * kTileRows + p] = t * scale;
    }
  }
  for (int q = 0; q < NB; ++q) softmax_step(b, static_cast<uint32_t>(q), scratch + static_cast<size_t>(q) * kTileRows, n, D, weights_avx2);
  for (uint32_t d = 0; d < D8; d += 8) {  // weight x V: each V row read once for the block
    __m256 a[NB];
    for (int q = 0; q < NB; ++q) a[q] = _mm256_loadu_ps(b.acc[q] + d);
    for (uint32_t p = 0; p < n; ++p) {
      const __m256 v = _mm256_loadu_ps(vt + static_cast<size_t>(p) * D + d);
      for (int q = 0; q < NB; ++q)
        a[q] = _mm256_add_ps(a[q], _mm256_mul_ps(_mm256_broadcast_ss(scratch + static_cast<size_t>(q) * kTileRows + p), v));
    }
    for (int q = 0; q < NB; ++q) _mm256_storeu_ps(b.acc[q] + d, a[q]);
  }
  for (uint32_t d = D8; d < D; ++d)
    for (int q = 0; q < NB; ++q) {
      const float* w = scratch + static_cast<size_t>(q) * kTileRows;
      float s = b.acc[q][d];
      for (uint32_t p = 0; p < n; ++p) s = s + w[p] * vt[static_cast<size_t>(p) * D + d];
      b.acc[q][d] = s;
    }
}

#endif

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

void tile_block_update_portable(const TileBlock& b, const float* kt, const float* vt, uint32_t n, uint32_t D,
                                float scale, float* scratch) {
  const uint32_t D8 = D / 8 * 8;
  for (uint32_t q = 0; q < b.nb; ++q) {
    float* sc = scratch + static_cast<size_t>(q) * kTileRows;
    const float* qv = b.q[q];
    for (uint32_t p = 0; p < n; ++p) {
      const float* kr = kt + static_cast<size_t>(p) * D;
      float l[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (uint32_t i = 0; i < D8; i += 8)
        for (uint32_t j = 0; j < 8; ++j) l[j] = l[j] + qv[i + j] * kr[i + j];
      float t = ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
      for (uint32_t i = D8; i < D; ++i) t = t + qv[i] * kr[i];
      sc[p] = t * scale;
    }
    softmax_step(b, q, sc, n, D, weights_portable);
  }
  for (uint32_t q = 0; q < b.nb; ++q) {
    const float* w = scratch + static_cast<size_t>(q) * kTileRows;
    float* acc = b.acc[q];
    for (uint32_t p = 0; p < n; ++p) {
      const float* vv = vt + static_cast<size_t>(p) * D;
      for (uint32_t d = 0; d < D; ++d) acc[d] = acc[d] + w[p] * vv[d];
    }
  }
}

bool tile_block_uses_avx2() {
#if defined(__x86_64__)
  static const bool ok = __builtin_cpu_supports("avx2");
  return ok;
#else
  return false;
#endif
}

void tile_block_update(const TileBlock& b, const float* kt, const float* vt, uint32_t n, uint32_t D, float scale,
                       float* scratch) {
#if defined(__x86_64__)
  if (tile_block_uses_avx2()) {
    switch (b.nb) {
      case 1: return update_avx2<1>(b, kt, vt, n, D, scale, scratch);
      case 2: return update_avx2<2>(b, kt, vt, n, D, scale, scratch);
      case 3: return update_avx2<3>(b, kt, vt, n, D, scale, scratch);
      case 4: return update_avx2<4>(b, kt, vt, n, D, scale, scratch);
      case 5: return update_avx2<5>(b, kt, vt, n, D, scale, scratch);
      case 6: return update_avx2<6>(b, kt, vt, n, D, scale, scratch);
      case 7: return update_avx2<7>(b, kt, vt, n, D, scale, scratch);
      default: return update_avx2<8>(b, kt, vt, n, D, scale, scratch);
    }
  }
#endif
  tile_block_update_portable(b, kt, vt, n, D, scale, scratch);
}

}  // namespace detail
}  // namespace replay
}  // namespace sjkv
