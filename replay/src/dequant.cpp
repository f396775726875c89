// Dequantizers (block layouts from ggml's ggml-common.h, see dequant.h), portable and AVX2.
// Written for sjkv; only the layouts and their formulas follow ggml.
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

// ---- AVX2 dequantizers ------------------------------------------------------------------------
// Each computes exactly the scalar formula of its type above on eight values at a time
// (integer codes converted exactly, then the same multiplies and subtractions in the same
// order; nothing is contracted), so the floats are the scalar ones bit for bit.

namespace {

bool cpu_avx2() {
#if defined(__x86_64__)
  static const bool ok = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    const bool f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
    return f16c && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }();
  return ok;
#else
  return false;
#endif
}

#if defined(__x86_64__)
#define SJKV_AVX2 __attribute__((target("avx2,fma,f16c")))

// Eight unsigned bytes (the low 8 of v) to eight floats.
SJKV_AVX2 inline __m256 u8x8_f(__m128i v) { return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v)); }
// 32 byte codes minus `off` to 32 floats times d (the legacy types' (q - off) * d).
SJKV_AVX2 inline void codes32_mul(__m256i q, int off, float d, float* y) {
  const __m256 dv = _mm256_set1_ps(d);
  const __m256i o = _mm256_set1_epi32(off);
  const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
  const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
  for (int i = 0; i < 4; ++i) {
    const __m256 f = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_cvtepu8_epi32(parts[i]), o));
    _mm256_storeu_ps(y + 8 * i, _mm256_mul_ps(f, dv));
  }
}
// 32 byte codes to 32 floats as q * d + m (Q4_1, Q5_1).
SJKV_AVX2 inline void codes32_mul_add(__m256i q, float d, float m, float* y) {
  const __m256 dv = _mm256_set1_ps(d), mv = _mm256_set1_ps(m);
  const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
  const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
  for (int i = 0; i < 4; ++i) _mm256_storeu_ps(y + 8 * i, _mm256_add_ps(_mm256_mul_ps(u8x8_f(parts[i]), dv), mv));
}
// The 16 bytes of qs as 32 nibble codes in value order: low nibbles (values 0-15), then high.
SJKV_AVX2 inline __m256i nibbles32(const uint8_t* qs) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i m = _mm_set1_epi8(0x0F);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m), _mm_and_si128(q, m));
}
// Q5's fifth bits: bit j of qh, as 0x10 in byte j, for j in 0..31.
SJKV_AVX2 inline __m256i fifth_bits32(uint32_t qh) {
  const __m256i shuf = _mm256_set_epi64x(0x0303030303030303LL, 0x0202020202020202LL, 0x0101010101010101LL, 0);
  const __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(qh)), shuf);
  const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ULL));
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit);
  return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

SJKV_AVX2 void rows_q4_0(const uint8_t* b, float* y, size_t nb) {
  for (size_t i = 0; i < nb; ++i, b += 18, y += 32) codes32_mul(nibbles32(b + 2), 8, h2f(b), y);
}
SJKV_AVX2 void rows_q4_1(const uint8_t* b, float* y, size_t nb) {
  for (size_t i = 0; i < nb; ++i, b += 20, y += 32) codes32_mul_add(nibbles32(b + 4), h2f(b), h2f(b + 2), y);
}
SJKV_AVX2 void rows_q5_0(const uint8_t* b, float* y, size_t nb) {
  for (size_t i = 0; i < nb; ++i, b += 22, y += 32)
    codes32_mul(_mm256_or_si256(nibbles32(b + 6), fifth_bits32(le32(b + 2))), 16, h2f(b), y);
}
SJKV_AVX2 void rows_q5_1(const uint8_t* b, float* y, size_t nb) {
  for (size_t i = 0; i < nb; ++i, b += 24, y += 32)
    codes32_mul_add(_mm256_or_si256(nibbles32(b + 8), fifth_bits32(le32(b + 4))), h2f(b), h2f(b + 2), y);
}
SJKV_AVX2 void rows_q8_0(const uint8_t* b, float* y, size_t nb) {
  for (size_t i = 0; i < nb; ++i, b += 34, y += 32) {
    const __m256 d = _mm256_set1_ps(h2f(b));
    for (int j = 0; j < 4; ++j) {
      const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 2 + 8 * j));
      _mm256_storeu_ps(y + 8 * j, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), d));
    }
  }
}
// 32 unsigned byte codes q to d * q - m.
SJKV_AVX2 inline void codes32_k(__m256i q, float d, float m, float* y) {
  const __m256 dv = _mm256_set1_ps(d), mv = _mm256_set1_ps(m);
  const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
  const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
  for (int i = 0; i < 4; ++i) _mm256_storeu_ps(y + 8 * i, _mm256_sub_ps(_mm256_mul_ps(dv, u8x8_f(parts[i])), mv));
}
SJKV_AVX2 void rows_q4_k(const uint8_t* b, float* y, size_t nb) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  for (size_t i = 0; i < nb; ++i, b += 144, y += 256) {
    const float d = h2f(b), dmin = h2f(b + 2);
    for (uint32_t j = 0; j < 4; ++j) {
      uint32_t sc0, m0, sc1, m1;
      scale_min_k4(2 * j, b + 4, sc0, m0);
      scale_min_k4(2 * j + 1, b + 4, sc1, m1);
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 16 + 32 * j));
      codes32_k(_mm256_and_si256(q, m4), d * static_cast<float>(sc0), dmin * static_cast<float>(m0), y + 64 * j);
      codes32_k(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4), d * static_cast<float>(sc1), dmin * static_cast<float>(m1),
                y + 64 * j + 32);
    }
  }
}
// 32 six-bit codes (bytes) minus 32, times (d * s[0]) for the first 16 and (d * s[1]) for the rest.
SJKV_AVX2 inline void codes32_q6(__m256i q, float d, const int8_t* s, float* y) {
  const __m256i o = _mm256_set1_epi32(32);
  const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
  const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
  for (int i = 0; i < 4; ++i) {
    const __m256 sc = _mm256_set1_ps(d * static_cast<float>(s[i / 2]));
    const __m256 f = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_cvtepu8_epi32(parts[i]), o));
    _mm256_storeu_ps(y + 8 * i, _mm256_mul_ps(sc, f));
  }
}
SJKV_AVX2 void rows_q6_k(const uint8_t* b, float* y, size_t nb) {
  const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
  for (size_t i = 0; i < nb; ++i, b += 210, y += 256) {
    const float d = h2f(b + 208);
    const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
    for (uint32_t half = 0; half < 2; ++half) {
      const uint8_t* l6 = b + 64 * half;
      const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(l6));
      const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(l6 + 32));
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 128 + 32 * half));
      const __m256i q1 = _mm256_or_si256(_mm256_and_si256(a, m4), _mm256_and_si256(_mm256_slli_epi16(h, 4), m30));
      const __m256i q2 = _mm256_or_si256(_mm256_and_si256(c, m4), _mm256_and_si256(_mm256_slli_epi16(h, 2), m30));
      const __m256i q3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a, 4), m4), _mm256_and_si256(h, m30));
      const __m256i q4 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(c, 4), m4),
                                         _mm256_and_si256(_mm256_srli_epi16(h, 2), m30));
      const int8_t* s = sc + 8 * half;
      float* o = y + 128 * half;
      codes32_q6(q1, d, s, o);
      codes32_q6(q2, d, s + 2, o + 32);
      codes32_q6(q3, d, s + 4, o + 64);
      codes32_q6(q4, d, s + 6, o + 96);
    }
  }
}
SJKV_AVX2 void rows_f16(const uint8_t* s, float* y, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 2 * i))));
  for (; i < n; ++i) y[i] = h2f(s + 2 * i);
}
SJKV_AVX2 void rows_bf16(const uint8_t* s, float* y, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 2 * i)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), _mm256_slli_epi32(v, 16));
  }
  for (; i < n; ++i) {
    const uint32_t u = (static_cast<uint32_t>(s[2 * i]) | (static_cast<uint32_t>(s[2 * i + 1]) << 8)) << 16;
    std::memcpy(y + i, &u, 4);
  }
}
#undef SJKV_AVX2
#endif

bool h_finite(const uint8_t* p) { return (static_cast<uint16_t>(p[0] | (p[1] << 8)) & 0x7c00u) != 0x7c00u; }

}  // namespace

bool dequant_simd() { return cpu_avx2(); }

void dequantize_row_fast(uint32_t type, const void* src, float* dst, size_t n) {
  dequantize_row_with(cpu_avx2(), type, src, dst, n);
}

void dequantize_row_with(bool simd, uint32_t type, const void* src, float* dst, size_t n) {
#if defined(__x86_64__)
  if (simd && cpu_avx2()) {
    const uint32_t bv = dequant_block_values(type);
    if (bv != 0 && n % bv == 0) {
      const uint8_t* s = static_cast<const uint8_t*>(src);
      const size_t nb = n / bv;
      switch (type) {
        case kGgmlQ4_0: return rows_q4_0(s, dst, nb);
        case kGgmlQ4_1: return rows_q4_1(s, dst, nb);
        case kGgmlQ5_0: return rows_q5_0(s, dst, nb);
        case kGgmlQ5_1: return rows_q5_1(s, dst, nb);
        case kGgmlQ8_0: return rows_q8_0(s, dst, nb);
        case kGgmlQ4_K: return rows_q4_k(s, dst, nb);
        case kGgmlQ6_K: return rows_q6_k(s, dst, nb);
        case kGgmlF16: return rows_f16(s, dst, n);
        case kGgmlBF16: return rows_bf16(s, dst, n);
        default: break;
      }
    }
  }
#endif
  (void)simd;
  dequantize_row(type, src, dst, n);
}

bool dequant_finite(uint32_t type, const void* src, size_t n) {
  const uint32_t bv = dequant_block_values(type), bb = dequant_block_bytes(type);
  if (bv == 0 || n % bv != 0) throw std::invalid_argument("dequant_finite: unsupported type or partial block");
  const uint8_t* s = static_cast<const uint8_t*>(src);
  const size_t nb = n / bv;
  switch (type) {
    case kGgmlF32:
      for (size_t i = 0; i < n; ++i) {
        float x;
        std::memcpy(&x, s + 4 * i, 4);
        if (!std::isfinite(x)) return false;
      }
      return true;
    case kGgmlF16:
      for (size_t i = 0; i < n; ++i)
        if (!h_finite(s + 2 * i)) return false;
      return true;
    case kGgmlBF16:
      for (size_t i = 0; i < n; ++i)
        if ((s[2 * i + 1] & 0x7f) == 0x7f && (s[2 * i] & 0x80)) return false;  // exponent all ones
      return true;
    default: break;
  }
  // Offsets of the f16 scales in each block.
  uint32_t off[2] = {0, 0};
  int count = 1;
  switch (type) {
    case kGgmlQ4_1: case kGgmlQ5_1: case kGgmlQ4_K: case kGgmlQ5_K: off[1] = 2; count = 2; break;
    case kGgmlQ6_K: off[0] = 208; break;
    default: break;
  }
  for (size_t i = 0; i < nb; ++i)
    for (int c = 0; c < count; ++c)
      if (!h_finite(s + i * bb + off[c])) return false;
  return true;
}

}  // namespace replay
}  // namespace sjkv
