// Dequantizers (block layouts from ggml's ggml-common.h, see dequant.h) and the f16-weight
// matrix products. Written for sjkv; only the layouts and their formulas follow ggml.
#include "sjkv/replay/dequant.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "sjkv/fp16.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace sjkv {
namespace replay {
namespace {

constexpr uint32_t kQK = 32;    // values per block of the legacy formats
constexpr uint32_t kQKK = 256;  // values per K-quant super-block

float h2f(const uint8_t* p) { return f16_to_f32(static_cast<uint16_t>(p[0] | (p[1] << 8))); }

// The 6-bit scale and min of sub-block j (0..7) packed in a K-quant's 12 scale bytes.
void scale_min_k4(uint32_t j, const uint8_t* q, uint32_t& sc, uint32_t& m) {
  if (j < 4) {
    sc = q[j] & 63u;
    m = q[j + 4] & 63u;
  } else {
    sc = (q[j + 4] & 0xFu) | ((q[j - 4] >> 6) << 4);
    m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

void deq_q4_0(const uint8_t* b, float* y) {
  const float d = h2f(b);
  const uint8_t* qs = b + 2;
  for (uint32_t j = 0; j < 16; ++j) {
    y[j] = static_cast<float>(static_cast<int>(qs[j] & 0xF) - 8) * d;
    y[j + 16] = static_cast<float>(static_cast<int>(qs[j] >> 4) - 8) * d;
  }
}

void deq_q4_1(const uint8_t* b, float* y) {
  const float d = h2f(b), m = h2f(b + 2);
  const uint8_t* qs = b + 4;
  for (uint32_t j = 0; j < 16; ++j) {
    y[j] = static_cast<float>(qs[j] & 0xF) * d + m;
    y[j + 16] = static_cast<float>(qs[j] >> 4) * d + m;
  }
}

uint32_t le32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}

void deq_q5_0(const uint8_t* b, float* y) {
  const float d = h2f(b);
  const uint32_t qh = le32(b + 2);
  const uint8_t* qs = b + 6;
  for (uint32_t j = 0; j < 16; ++j) {
    const int lo = static_cast<int>((qs[j] & 0xF) | (((qh >> j) & 1u) << 4)) - 16;
    const int hi = static_cast<int>((qs[j] >> 4) | (((qh >> (j + 16)) & 1u) << 4)) - 16;
    y[j] = static_cast<float>(lo) * d;
    y[j + 16] = static_cast<float>(hi) * d;
  }
}

void deq_q5_1(const uint8_t* b, float* y) {
  const float d = h2f(b), m = h2f(b + 2);
  const uint32_t qh = le32(b + 4);
  const uint8_t* qs = b + 8;
  for (uint32_t j = 0; j < 16; ++j) {
    const uint32_t lo = (qs[j] & 0xF) | (((qh >> j) & 1u) << 4);
    const uint32_t hi = (qs[j] >> 4) | (((qh >> (j + 16)) & 1u) << 4);
    y[j] = static_cast<float>(lo) * d + m;
    y[j + 16] = static_cast<float>(hi) * d + m;
  }
}

void deq_q8_0(const uint8_t* b, float* y) {
  const float d = h2f(b);
  for (uint32_t j = 0; j < kQK; ++j) y[j] = static_cast<float>(static_cast<int8_t>(b[2 + j])) * d;
}

void deq_q4_k(const uint8_t* b, float* y) {
  const float d = h2f(b), dmin = h2f(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qs = b + 16;
  for (uint32_t j = 0; j < 4; ++j) {
    uint32_t sc0, m0, sc1, m1;
    scale_min_k4(2 * j, scales, sc0, m0);
    scale_min_k4(2 * j + 1, scales, sc1, m1);
    const float d0 = d * static_cast<float>(sc0), mm0 = dmin * static_cast<float>(m0);
    const float d1 = d * static_cast<float>(sc1), mm1 = dmin * static_cast<float>(m1);
    for (uint32_t l = 0; l < 32; ++l) {
      y[64 * j + l] = d0 * static_cast<float>(qs[32 * j + l] & 0xF) - mm0;
      y[64 * j + 32 + l] = d1 * static_cast<float>(qs[32 * j + l] >> 4) - mm1;
    }
  }
}

void deq_q5_k(const uint8_t* b, float* y) {
  const float d = h2f(b), dmin = h2f(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* qs = b + 48;
  for (uint32_t j = 0; j < 4; ++j) {
    uint32_t sc0, m0, sc1, m1;
    scale_min_k4(2 * j, scales, sc0, m0);
    scale_min_k4(2 * j + 1, scales, sc1, m1);
    const float d0 = d * static_cast<float>(sc0), mm0 = dmin * static_cast<float>(m0);
    const float d1 = d * static_cast<float>(sc1), mm1 = dmin * static_cast<float>(m1);
    const uint32_t u0 = 1u << (2 * j), u1 = 2u << (2 * j);
    for (uint32_t l = 0; l < 32; ++l) {
      const uint32_t q0 = (qs[32 * j + l] & 0xFu) + ((qh[l] & u0) ? 16u : 0u);
      const uint32_t q1 = (qs[32 * j + l] >> 4) + ((qh[l] & u1) ? 16u : 0u);
      y[64 * j + l] = d0 * static_cast<float>(q0) - mm0;
      y[64 * j + 32 + l] = d1 * static_cast<float>(q1) - mm1;
    }
  }
}

void deq_q6_k(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = h2f(b + 208);
  for (uint32_t half = 0; half < 2; ++half) {
    const uint8_t* l6 = ql + 64 * half;
    const uint8_t* h6 = qh + 32 * half;
    const int8_t* s = sc + 8 * half;
    float* o = y + 128 * half;
    for (uint32_t l = 0; l < 32; ++l) {
      const uint32_t is = l / 16;
      const int q1 = static_cast<int>((l6[l] & 0xF) | ((h6[l] & 3u) << 4)) - 32;
      const int q2 = static_cast<int>((l6[l + 32] & 0xF) | (((h6[l] >> 2) & 3u) << 4)) - 32;
      const int q3 = static_cast<int>((l6[l] >> 4) | (((h6[l] >> 4) & 3u) << 4)) - 32;
      const int q4 = static_cast<int>((l6[l + 32] >> 4) | (((h6[l] >> 6) & 3u) << 4)) - 32;
      o[l] = d * static_cast<float>(s[is]) * static_cast<float>(q1);
      o[l + 32] = d * static_cast<float>(s[is + 2]) * static_cast<float>(q2);
      o[l + 64] = d * static_cast<float>(s[is + 4]) * static_cast<float>(q3);
      o[l + 96] = d * static_cast<float>(s[is + 6]) * static_cast<float>(q4);
    }
  }
}

}  // namespace

bool dequant_supported(uint32_t type) { return dequant_block_bytes(type) != 0; }

uint32_t dequant_block_values(uint32_t type) {
  switch (type) {
    case kGgmlF32: case kGgmlF16: case kGgmlBF16: return 1;
    case kGgmlQ4_0: case kGgmlQ4_1: case kGgmlQ5_0: case kGgmlQ5_1: case kGgmlQ8_0: return kQK;
    case kGgmlQ4_K: case kGgmlQ5_K: case kGgmlQ6_K: return kQKK;
    default: return 0;
  }
}

uint32_t dequant_block_bytes(uint32_t type) {
  switch (type) {
    case kGgmlF32: return 4;
    case kGgmlF16: case kGgmlBF16: return 2;
    case kGgmlQ4_0: return 18;
    case kGgmlQ4_1: return 20;
    case kGgmlQ5_0: return 22;
    case kGgmlQ5_1: return 24;
    case kGgmlQ8_0: return 34;
    case kGgmlQ4_K: return 144;
    case kGgmlQ5_K: return 176;
    case kGgmlQ6_K: return 210;
    default: return 0;
  }
}

void dequantize_row(uint32_t type, const void* src, float* dst, size_t n) {
  const uint32_t bv = dequant_block_values(type);
  if (bv == 0) throw std::invalid_argument("dequantize_row: unsupported ggml type " + std::to_string(type));
  if (n % bv != 0)
    throw std::invalid_argument("dequantize_row: " + std::to_string(n) + " values is not a whole number of " +
                                std::to_string(bv) + "-value blocks");
  const uint8_t* s = static_cast<const uint8_t*>(src);
  const size_t bb = dequant_block_bytes(type);
  const size_t nb = n / bv;
  switch (type) {
    case kGgmlF32: std::memcpy(dst, s, n * 4); return;
    case kGgmlF16:
      for (size_t i = 0; i < n; ++i) dst[i] = h2f(s + 2 * i);
      return;
    case kGgmlBF16:
      for (size_t i = 0; i < n; ++i) {
        const uint32_t u = (static_cast<uint32_t>(s[2 * i]) | (static_cast<uint32_t>(s[2 * i + 1]) << 8)) << 16;
        std::memcpy(dst + i, &u, 4);
      }
      return;
    default: break;
  }
  void (*f)(const uint8_t*, float*) = nullptr;
  switch (type) {
    case kGgmlQ4_0: f = deq_q4_0; break;
    case kGgmlQ4_1: f = deq_q4_1; break;
    case kGgmlQ5_0: f = deq_q5_0; break;
    case kGgmlQ5_1: f = deq_q5_1; break;
    case kGgmlQ8_0: f = deq_q8_0; break;
    case kGgmlQ4_K: f = deq_q4_k; break;
    case kGgmlQ5_K: f = deq_q5_k; break;
    case kGgmlQ6_K: f = deq_q6_k; break;
    default: break;
  }
  for (size_t i = 0; i < nb; ++i) f(s + i * bb, dst + i * bv);
}

// ---- f16-weight products ----------------------------------------------------------------------
// Order of every output element: 16 lanes (two 8-lane accumulators for k blocks of 16),
// k in blocks of 16 from the start, then the lanes summed pairwise in a fixed tree, then the
// k % 16 tail in order. The scalar path follows the same order without FMA.

namespace {

constexpr size_t kRowBlock = 16;  // rows one thread handles at a time
constexpr size_t kTokTile = 4;    // tokens sharing one pass over a weight row

// The row-block x token-tile schedule shared by the matrix products: blocks of kRowBlock
// output rows over the threads, each block walked RowStep rows at a time; every output
// element is written by exactly one call of dot(row, rows in step, tokens in tile, token
// pointers, out[rows][tokens]), so results do not depend on the thread count.
template <size_t RowStep, class Dot>
void matmul_row_tiles(size_t rows, size_t k, const float* x, size_t n, float* y, size_t ldy, int n_threads,
                      Dot dot) {
  static_assert(kRowBlock % RowStep == 0, "a row step must divide the row block");
  const long n_blocks = static_cast<long>((rows + kRowBlock - 1) / kRowBlock);
  const int nt = n_threads > 0 ? n_threads : omp_get_max_threads();
#pragma omp parallel for schedule(static) num_threads(nt) if (rows * k * n > 65536)
  for (long rb = 0; rb < n_blocks; ++rb) {
    const size_t r0 = static_cast<size_t>(rb) * kRowBlock;
    const size_t r1 = std::min(rows, r0 + kRowBlock);
    for (size_t t0 = 0; t0 < n; t0 += kTokTile) {
      const size_t nt_ = std::min(kTokTile, n - t0);
      const float* xs[kTokTile];
      for (size_t t = 0; t < nt_; ++t) xs[t] = x + (t0 + t) * k;
      for (size_t r = r0; r < r1; r += RowStep) {
        const size_t nr = std::min(RowStep, r1 - r);
        float o[RowStep][kTokTile];
        dot(r, nr, nt_, xs, o);
        for (size_t i = 0; i < nr; ++i)
          for (size_t t = 0; t < nt_; ++t) y[(t0 + t) * ldy + r + i] = o[i][t];
      }
    }
  }
}

float reduce16(const float* l) {
  float a[8];
  for (int i = 0; i < 8; ++i) a[i] = l[i] + l[i + 8];
  float b[4];
  for (int i = 0; i < 4; ++i) b[i] = a[i] + a[i + 4];
  return (b[0] + b[2]) + (b[1] + b[3]);
}

template <size_t NT>
void dot_rows_scalar(const uint16_t* w, size_t k, const float* const* x, float* out) {
  float lanes[NT][16] = {};
  const size_t k16 = k / 16 * 16;
  for (size_t i = 0; i < k16; i += 16)
    for (size_t l = 0; l < 16; ++l) {
      const float wv = f16_to_f32(w[i + l]);
      for (size_t t = 0; t < NT; ++t) lanes[t][l] = lanes[t][l] + wv * x[t][i + l];
    }
  for (size_t t = 0; t < NT; ++t) {
    float s = reduce16(lanes[t]);
    for (size_t i = k16; i < k; ++i) s = s + f16_to_f32(w[i]) * x[t][i];
    out[t] = s;
  }
}

#if defined(__x86_64__)
template <size_t NT>
__attribute__((target("avx2,fma,f16c"))) void dot_rows_avx2(const uint16_t* w, size_t k,
                                                             const float* const* x, float* out) {
  __m256 a0[NT], a1[NT];
  for (size_t t = 0; t < NT; ++t) a0[t] = a1[t] = _mm256_setzero_ps();
  const size_t k16 = k / 16 * 16;
  for (size_t i = 0; i < k16; i += 16) {
    const __m256 w0 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + i)));
    const __m256 w1 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + i + 8)));
    for (size_t t = 0; t < NT; ++t) {
      a0[t] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x[t] + i), a0[t]);
      a1[t] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x[t] + i + 8), a1[t]);
    }
  }
  for (size_t t = 0; t < NT; ++t) {
    float l[16];
    _mm256_storeu_ps(l, a0[t]);
    _mm256_storeu_ps(l + 8, a1[t]);
    float s = reduce16(l);
    for (size_t i = k16; i < k; ++i) s = s + f16_to_f32(w[i]) * x[t][i];
    out[t] = s;
  }
}

// AVX-512: one 16-lane accumulator per output holds exactly the lanes of the AVX2 pair (k % 16
// in 0..7 and 8..15), each updated by the same fused multiply-adds in the same order, so the
// results equal the AVX2 path's bit for bit; tiles of NR rows x NT tokens reuse every load.
template <size_t NR, size_t NT>
__attribute__((target("avx512f,fma,f16c"))) void dot_tile_avx512(const uint16_t* w, size_t k,
                                                                 const float* const* x, float (*out)[4]) {
  __m512 acc[NR][NT];
  for (size_t r = 0; r < NR; ++r)
    for (size_t t = 0; t < NT; ++t) acc[r][t] = _mm512_setzero_ps();
  const size_t k16 = k / 16 * 16;
  for (size_t i = 0; i < k16; i += 16) {
    __m512 wv[NR];
    for (size_t r = 0; r < NR; ++r)
      // The masked form: GCC 12 warns on the plain one's undefined pass-through operand.
      wv[r] = _mm512_mask_cvtph_ps(_mm512_setzero_ps(), 0xFFFF,
                                   _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + r * k + i)));
    for (size_t t = 0; t < NT; ++t) {
      const __m512 xv = _mm512_loadu_ps(x[t] + i);
      for (size_t r = 0; r < NR; ++r) acc[r][t] = _mm512_fmadd_ps(wv[r], xv, acc[r][t]);
    }
  }
  for (size_t r = 0; r < NR; ++r)
    for (size_t t = 0; t < NT; ++t) {
      float l[16];
      _mm512_storeu_ps(l, acc[r][t]);
      float s = reduce16(l);
      for (size_t i = k16; i < k; ++i) s = s + f16_to_f32(w[r * k + i]) * x[t][i];
      out[r][t] = s;
    }
}

template <size_t NR>
void dot_tile_avx512_nt(size_t nt, const uint16_t* w, size_t k, const float* const* x, float (*out)[4]) {
  switch (nt) {
    case 4: return dot_tile_avx512<NR, 4>(w, k, x, out);
    case 3: return dot_tile_avx512<NR, 3>(w, k, x, out);
    case 2: return dot_tile_avx512<NR, 2>(w, k, x, out);
    default: return dot_tile_avx512<NR, 1>(w, k, x, out);
  }
}

// F16C from CPUID leaf 1 (ECX bit 29): clang 14's __builtin_cpu_supports has no "f16c".
bool cpu_has_f16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
}

bool cpu_has_avx512() {
  static const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma") && cpu_has_f16c();
  return ok;
}

bool cpu_has_avx2() {
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
  return ok;
}
#endif

template <size_t NT>
void dot_rows(bool simd, const uint16_t* w, size_t k, const float* const* x, float* out) {
#if defined(__x86_64__)
  if (simd) return dot_rows_avx2<NT>(w, k, x, out);
#endif
  (void)simd;
  dot_rows_scalar<NT>(w, k, x, out);
}


// Q8_0 rows used in place (the tied output matrix): per block, the 32 products summed as
// 8 lanes (q[0:8]*x, then q[8:16], q[16:24], q[24:32] added in), scaled by d into the 8-lane
// accumulator; the lanes summed in a fixed tree at the end.
float reduce8(const float* l) {
  return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
}

template <size_t NT>
void dot_q8_scalar(const uint8_t* w, size_t k, const float* const* x, float* out) {
  float acc[NT][8] = {};
  for (size_t b = 0; b < k / 32; ++b) {
    const uint8_t* blk = w + b * 34;
    const float d = h2f(blk);
    const int8_t* q = reinterpret_cast<const int8_t*>(blk + 2);
    for (size_t t = 0; t < NT; ++t) {
      const float* xb = x[t] + b * 32;
      for (size_t l = 0; l < 8; ++l) {
        float p = static_cast<float>(q[l]) * xb[l];
        for (size_t g = 1; g < 4; ++g) p = p + static_cast<float>(q[8 * g + l]) * xb[8 * g + l];
        acc[t][l] = acc[t][l] + d * p;
      }
    }
  }
  for (size_t t = 0; t < NT; ++t) out[t] = reduce8(acc[t]);
}

#if defined(__x86_64__)
template <size_t NT>
__attribute__((target("avx2,fma,f16c"))) void dot_q8_avx2(const uint8_t* w, size_t k, const float* const* x,
                                                          float* out) {
  __m256 acc[NT];
  for (size_t t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
  for (size_t b = 0; b < k / 32; ++b) {
    const uint8_t* blk = w + b * 34;
    const __m256 d = _mm256_set1_ps(h2f(blk));
    const __m128i* q = reinterpret_cast<const __m128i*>(blk + 2);
    const __m128i lo = _mm_loadu_si128(q), hi = _mm_loadu_si128(q + 1);
    const __m256 q0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo));
    const __m256 q1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8)));
    const __m256 q2 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi));
    const __m256 q3 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8)));
    for (size_t t = 0; t < NT; ++t) {
      const float* xb = x[t] + b * 32;
      __m256 p = _mm256_mul_ps(q0, _mm256_loadu_ps(xb));
      p = _mm256_fmadd_ps(q1, _mm256_loadu_ps(xb + 8), p);
      p = _mm256_fmadd_ps(q2, _mm256_loadu_ps(xb + 16), p);
      p = _mm256_fmadd_ps(q3, _mm256_loadu_ps(xb + 24), p);
      acc[t] = _mm256_fmadd_ps(d, p, acc[t]);
    }
  }
  for (size_t t = 0; t < NT; ++t) {
    float l[8];
    _mm256_storeu_ps(l, acc[t]);
    out[t] = reduce8(l);
  }
}
#endif

template <size_t NT>
void dot_q8(bool simd, const uint8_t* w, size_t k, const float* const* x, float* out) {
#if defined(__x86_64__)
  if (simd) return dot_q8_avx2<NT>(w, k, x, out);
#endif
  (void)simd;
  dot_q8_scalar<NT>(w, k, x, out);
}

}  // namespace

bool matmul_f16_simd() {
#if defined(__x86_64__)
  return cpu_has_avx2();
#else
  return false;
#endif
}

MatmulIsa matmul_f16_best() {
#if defined(__x86_64__)
  if (cpu_has_avx2()) return cpu_has_avx512() ? MatmulIsa::avx512 : MatmulIsa::avx2;
#endif
  return MatmulIsa::scalar;
}

void matmul_f16(const uint16_t* w, size_t rows, size_t k, const float* x, size_t n, float* y,
                size_t ldy, int n_threads) {
  matmul_f16_with(matmul_f16_best(), w, rows, k, x, n, y, ldy, n_threads);
}

void matmul_f16_with(MatmulIsa isa, const uint16_t* w, size_t rows, size_t k, const float* x, size_t n,
                     float* y, size_t ldy, int n_threads) {
  if (static_cast<int>(isa) > static_cast<int>(matmul_f16_best()))
    throw std::invalid_argument("matmul_f16_with: instruction set not available on this machine");
  const bool simd = isa != MatmulIsa::scalar;
#if defined(__x86_64__)
  if (isa == MatmulIsa::avx512) {
    matmul_row_tiles<4>(rows, k, x, n, y, ldy, n_threads,
                        [&](size_t r, size_t nr, size_t nt_, const float* const* xs, float (*o)[kTokTile]) {
                          const uint16_t* wr = w + r * k;
                          switch (nr) {
                            case 4: dot_tile_avx512_nt<4>(nt_, wr, k, xs, o); break;
                            case 3: dot_tile_avx512_nt<3>(nt_, wr, k, xs, o); break;
                            case 2: dot_tile_avx512_nt<2>(nt_, wr, k, xs, o); break;
                            default: dot_tile_avx512_nt<1>(nt_, wr, k, xs, o); break;
                          }
                        });
    return;
  }
#endif
  matmul_row_tiles<1>(rows, k, x, n, y, ldy, n_threads,
                      [&](size_t r, size_t, size_t nt_, const float* const* xs, float (*o)[kTokTile]) {
                        const uint16_t* wr = w + r * k;
                        switch (nt_) {
                          case 4: dot_rows<4>(simd, wr, k, xs, o[0]); break;
                          case 3: dot_rows<3>(simd, wr, k, xs, o[0]); break;
                          case 2: dot_rows<2>(simd, wr, k, xs, o[0]); break;
                          default: dot_rows<1>(simd, wr, k, xs, o[0]); break;
                        }
                      });
}

void matmul_q8_0(const uint8_t* w, size_t rows, size_t k, const float* x, size_t n, float* y,
                 size_t ldy, int n_threads) {
  if (k % 32 != 0) throw std::invalid_argument("matmul_q8_0: row length is not a multiple of 32");
  const bool simd = matmul_f16_simd();
  const size_t row_bytes = k / 32 * 34;
  matmul_row_tiles<1>(rows, k, x, n, y, ldy, n_threads,
                      [&](size_t r, size_t, size_t nt_, const float* const* xs, float (*o)[kTokTile]) {
                        const uint8_t* wr = w + r * row_bytes;
                        switch (nt_) {
                          case 4: dot_q8<4>(simd, wr, k, xs, o[0]); break;
                          case 3: dot_q8<3>(simd, wr, k, xs, o[0]); break;
                          case 2: dot_q8<2>(simd, wr, k, xs, o[0]); break;
                          default: dot_q8<1>(simd, wr, k, xs, o[0]); break;
                        }
                      });
}

void matmul_f16_reference(const uint16_t* w, size_t rows, size_t k, const float* x, size_t n,
                          float* y, size_t ldy) {
  for (size_t t = 0; t < n; ++t)
    for (size_t r = 0; r < rows; ++r) {
      double s = 0.0;
      for (size_t i = 0; i < k; ++i)
        s += static_cast<double>(f16_to_f32(w[r * k + i])) * static_cast<double>(x[t * k + i]);
      y[t * ldy + r] = static_cast<float>(s);
    }
}

}  // namespace replay
}  // namespace sjkv
