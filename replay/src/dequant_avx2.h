// The AVX2 form of the block formats of dequant.h, one home for two users: dequant.cpp's
// row dequantizers store each group of eight values, and gemm.cpp's one-token products
// multiply-add them straight from the registers. A block is walked by `avx2_block<type>`,
// which hands `sink(g, w)` the values g*8 .. g*8+7 of the block in increasing g; each value is
// the scalar formula of its type (integer codes converted exactly, then the same multiplies
// and subtractions in the same order, nothing contracted), so both users see the portable
// floats bit for bit.
#pragma once

#include <cstddef>
#include <cstdint>

#include "sjkv/block_formats.h"
#include "sjkv/fp16.h"
#include "sjkv/replay/dequant.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace sjkv {
namespace replay {
namespace blocks {

inline float h2f(const uint8_t* p) { return f16_to_f32(static_cast<uint16_t>(p[0] | (p[1] << 8))); }

using blockfmt::le32;
using blockfmt::scale_min_k4;

#if defined(__x86_64__)
#define SJKV_AVX2_INLINE __attribute__((target("avx2,fma,f16c"), always_inline)) inline

// A block's f16 scale with F16C: exact for every pattern but a signalling NaN, which it quiets,
// as the multiply every scale goes into does anyway (so the values are the portable bits).
SJKV_AVX2_INLINE float scale_f16(const uint8_t* p) {
  return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(p[0] | (p[1] << 8))));
}

// Eight unsigned bytes (the low 8 of v) to eight floats.
SJKV_AVX2_INLINE __m256 u8x8_f(__m128i v) { return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v)); }

// The four 8-byte quarters of 32 byte codes, in value order.
struct Quarters {
  __m128i p[4];
};
SJKV_AVX2_INLINE Quarters quarters(__m256i q) {
  const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
  return {{lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)}};
}

// The 16 bytes of qs as 32 nibble codes in value order: low nibbles (values 0-15), then high.
SJKV_AVX2_INLINE __m256i nibbles32(const uint8_t* qs) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i m = _mm_set1_epi8(0x0F);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m), _mm_and_si128(q, m));
}
// Q5's fifth bits: bit j of qh, as 0x10 in byte j, for j in 0..31.
SJKV_AVX2_INLINE __m256i fifth_bits32(uint32_t qh) {
  const __m256i shuf = _mm256_set_epi64x(0x0303030303030303LL, 0x0202020202020202LL, 0x0101010101010101LL, 0);
  const __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(qh)), shuf);
  const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ULL));
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit);
  return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

// 32 byte codes as (q - off) * d: Q4_0, Q5_0.
template <class Sink>
SJKV_AVX2_INLINE void codes32_mul(__m256i q, int off, float d, Sink& sink, int g0) {
  const __m256 dv = _mm256_set1_ps(d);
  const __m256i o = _mm256_set1_epi32(off);
  const Quarters s = quarters(q);
  for (int i = 0; i < 4; ++i)
    sink(g0 + i, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_cvtepu8_epi32(s.p[i]), o)), dv));
}
// 32 byte codes as q * d + m: Q4_1, Q5_1.
template <class Sink>
SJKV_AVX2_INLINE void codes32_mul_add(__m256i q, float d, float m, Sink& sink, int g0) {
  const __m256 dv = _mm256_set1_ps(d), mv = _mm256_set1_ps(m);
  const Quarters s = quarters(q);
  for (int i = 0; i < 4; ++i) sink(g0 + i, _mm256_add_ps(_mm256_mul_ps(u8x8_f(s.p[i]), dv), mv));
}
// 32 byte codes as d * q - m: the K-quants' sub-blocks.
template <class Sink>
SJKV_AVX2_INLINE void codes32_k(__m256i q, float d, float m, Sink& sink, int g0) {
  const __m256 dv = _mm256_set1_ps(d), mv = _mm256_set1_ps(m);
  const Quarters s = quarters(q);
  for (int i = 0; i < 4; ++i) sink(g0 + i, _mm256_sub_ps(_mm256_mul_ps(dv, u8x8_f(s.p[i])), mv));
}
// 32 six-bit codes (bytes) minus 32, times (d * s[0]) for the first 16 and (d * s[1]) for the rest.
template <class Sink>
SJKV_AVX2_INLINE void codes32_q6(__m256i q, float d, const int8_t* sc, Sink& sink, int g0) {
  const __m256i o = _mm256_set1_epi32(32);
  const Quarters s = quarters(q);
  for (int i = 0; i < 4; ++i) {
    const __m256 m = _mm256_set1_ps(d * static_cast<float>(sc[i / 2]));
    sink(g0 + i, _mm256_mul_ps(m, _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_cvtepu8_epi32(s.p[i]), o))));
  }
}

// 32 byte codes as dl * q - ml with (dl, ml) per 16 values: Q2_K.
template <class Sink>
SJKV_AVX2_INLINE void codes32_k16(__m256i q, const float* dl, const float* ml, Sink& sink, int g0) {
  const Quarters s = quarters(q);
  for (int i = 0; i < 4; ++i)
    sink(g0 + i, _mm256_sub_ps(_mm256_mul_ps(_mm256_set1_ps(dl[i / 2]), u8x8_f(s.p[i])), _mm256_set1_ps(ml[i / 2])));
}
// 32 byte codes minus off, times dl per 16 values: Q3_K.
template <class Sink>
SJKV_AVX2_INLINE void codes32_signed16(__m256i q, int off, const float* dl, Sink& sink, int g0) {
  const __m256i o = _mm256_set1_epi32(off);
  const Quarters s = quarters(q);
  for (int i = 0; i < 4; ++i)
    sink(g0 + i,
         _mm256_mul_ps(_mm256_set1_ps(dl[i / 2]), _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_cvtepu8_epi32(s.p[i]), o))));
}
// 32 nibble codes (nibbles32's order) looked up in the IQ4_NL table, times dl: IQ4_NL, IQ4_XS.
template <class Sink>
SJKV_AVX2_INLINE void codes32_iq4(__m256i codes, float dl, Sink& sink, int g0) {
  const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blockfmt::kIq4nlValues));
  const __m256i v = _mm256_shuffle_epi8(_mm256_set_m128i(t, t), codes);  // in-lane lookup: the table in both lanes
  const __m256 dv = _mm256_set1_ps(dl);
  const Quarters s = quarters(v);
  for (int i = 0; i < 4; ++i) sink(g0 + i, _mm256_mul_ps(dv, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(s.p[i]))));
}
// Bytes of q whose bit `bit` is set in mask, as `value` (0 elsewhere).
SJKV_AVX2_INLINE __m256i bits_as(__m256i mask, uint8_t bit, uint8_t value) {
  const __m256i b = _mm256_set1_epi8(static_cast<char>(bit));
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(mask, b), b), _mm256_set1_epi8(static_cast<char>(value)));
}
// The 2-bit codes of 32 values of a Q2_K / Q3_K block: chunk c (values 32c ..) of qs.
SJKV_AVX2_INLINE __m256i two_bits32(const uint8_t* qs, uint32_t c) {
  const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * (c / 4)));
  return _mm256_and_si256(_mm256_srl_epi16(q, _mm_cvtsi32_si128(static_cast<int>(2 * (c % 4)))), _mm256_set1_epi8(3));
}

// avx2_block<type>::walk(b, sink): the block at b, eight values at a time. kValues and kBytes
// are the block's size; F16 and BF16 walk eight values as one "block".
template <uint32_t Type>
struct avx2_block;

template <>
struct avx2_block<kGgmlQ4_0> {
  static constexpr uint32_t kValues = 32, kBytes = 18;
  template <class Sink>
  SJKV_AVX2_INLINE static void walk(const uint8_t* b, Sink& sink) {
    codes32_mul(nibbles32(b + 2), 8, scale_f16(b), sink, 0);
  }
};
template <>
struct avx2_block<kGgmlQ4_1> {
  static constexpr uint32_t kValues = 32, kBytes = 20;
  template <class Sink>
  SJKV_AVX2_INLINE static void walk(const uint8_t* b, Sink& sink) {
    codes32_mul_add(nibbles32(b + 4), scale_f16(b), scale_f16(b + 2), sink, 0);
  }
};
template <>
struct avx2_block<kGgmlQ5_0> {
  static constexpr uint32_t kValues = 32, kBytes = 22;
  template <class Sink>
  SJKV_AVX2_INLINE static void walk(const uint8_t* b, Sink& sink) {
    codes32_mul(_mm256_or_si256(nibbles32(b + 6), fifth_bits32(le32(b + 2))), 16, scale_f16(b), sink, 0);
  }
};
template <>
struct avx2_block<kGgmlQ5_1> {
  static constexpr uint32_t kValues = 32, kBytes = 24;
  template <class Sink>
  SJKV_AVX2_INLINE static void walk(const uint8_t* b, Sink& sink) {
    codes32_mul_add(_mm256_or_si256(nibbles32(b + 8), fifth_bits32(le32(b + 4))), scale_f16(b), scale_f16(b + 2), sink, 0);
  }
};
template <>
struct avx2_block<kGgmlQ8_0> {
  static constexpr uint32_t kValues = 32, kBytes = 34;
  template <class Sink>
  SJKV_AVX2_INLINE static void walk(const uint8_t* b, Sink& sink) {
    const __m256 d = _mm256_set1_ps(scale_f16(b));
    for (int j = 0; j < 4; ++j) {
      const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 2 + 8 * j));
      sink(j, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), d));
    }
  }
};
// Q4_K and Q5_K: eight sub-blocks of 32 codes as d * sc * q - dmin * m (scale_min_k4); Q5_K's
// codes take their fifth bit from qh (bit 2j of qh[l] for the low nibbles of pair j, 2j + 1
// for the high ones), Q4_K's are the nibbles alone.
template <bool Fifth, class Sink>
SJKV_AVX2_INLINE void walk_k4_k5(const uint8_t* b, Sink& sink) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const float d = scale_f16(b), dmin = scale_f16(b + 2);
  const uint8_t* qs = b + (Fifth ? 48 : 16);
  const __m256i qh = Fifth ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 16)) : _mm256_setzero_si256();
  for (uint32_t j = 0; j < 4; ++j) {
    uint32_t sc0, m0, sc1, m1;
    scale_min_k4(2 * j, b + 4, sc0, m0);
    scale_min_k4(2 * j + 1, b + 4, sc1, m1);
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * j));
    __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
    if (Fifth) {
      lo = _mm256_or_si256(lo, bits_as(qh, static_cast<uint8_t>(1u << (2 * j)), 16));
      hi = _mm256_or_si256(hi, bits_as(qh, static_cast<uint8_t>(2u << (2 * j)), 16));
    }
    codes32_k(lo, d * static_cast<float>(sc0), dmin * static_cast<float>(m0), sink, static_cast<int>(8 * j));
    codes32_k(hi, d * static_cast<float>(sc1), dmin * static_cast<float>(m1), sink, static_cast<int>(8 * j + 4));
  }
}
template <>
struct avx2_block<kGgmlQ4_K> {
  static constexpr uint32_t kValues = 256, kBytes = 144;
  template <class Sink>
  SJKV_AVX2_INLINE static void walk(const uint8_t* b, Sink& sink) {
    walk_k4_k5<false>(b, sink);
  }
};
template <>
struct avx2_block<kGgmlQ6_K> {
  static constexpr uint32_t kValues = 256, kBytes = 210;
  template <class Sink>
  SJKV_AVX2_INLINE static void walk(const uint8_t* b, Sink& sink) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    const float d = scale_f16(b + 208);
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
      const int g = static_cast<int>(16 * half);
      codes32_q6(q1, d, s, sink, g);
      codes32_q6(q2, d, s + 2, sink, g + 4);
      codes32_q6(q3, d, s + 4, sink, g + 8);
      codes32_q6(q4, d, s + 6, sink, g + 12);
    }
  }
};
template <>
struct avx2_block<kGgmlQ5_K> {
  static constexpr uint32_t kValues = 256, kBytes = 176;
  template <class Sink>
  SJKV_AVX2_INLINE static void walk(const uint8_t* b, Sink& sink) {
    walk_k4_k5<true>(b, sink);
  }
};
template <>
struct avx2_block<kGgmlQ2_K> {
  static constexpr uint32_t kValues = 256, kBytes = 84;
  template <class Sink>
  SJKV_AVX2_INLINE static void walk(const uint8_t* b, Sink& sink) {
    const float d = scale_f16(b + 80), dmin = scale_f16(b + 82);
    float dl[16], ml[16];
    for (uint32_t k = 0; k < 16; ++k) {
      dl[k] = d * static_cast<float>(b[k] & 0xF);
      ml[k] = dmin * static_cast<float>(b[k] >> 4);
    }
    for (uint32_t c = 0; c < 8; ++c) codes32_k16(two_bits32(b + 16, c), dl + 2 * c, ml + 2 * c, sink, static_cast<int>(4 * c));
  }
};
template <>
struct avx2_block<kGgmlQ3_K> {
  static constexpr uint32_t kValues = 256, kBytes = 110;
  template <class Sink>
  SJKV_AVX2_INLINE static void walk(const uint8_t* b, Sink& sink) {
    const float d = scale_f16(b + 108);
    float dl[16];
    for (uint32_t k = 0; k < 16; ++k) dl[k] = d * static_cast<float>(blockfmt::q3_k_scale(b + 96, k));
    const __m256i hm = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b));
    // q - 4 where the chunk's hmask bit is clear: (q + 4 h) - 4.
    for (uint32_t c = 0; c < 8; ++c)
      codes32_signed16(_mm256_or_si256(two_bits32(b + 32, c), bits_as(hm, static_cast<uint8_t>(1u << c), 4)), 4,
                       dl + 2 * c, sink, static_cast<int>(4 * c));
  }
};
template <>
struct avx2_block<kGgmlIQ4_NL> {
  static constexpr uint32_t kValues = 32, kBytes = 18;
  template <class Sink>
  SJKV_AVX2_INLINE static void walk(const uint8_t* b, Sink& sink) {
    codes32_iq4(nibbles32(b + 2), scale_f16(b), sink, 0);
  }
};
template <>
struct avx2_block<kGgmlIQ4_XS> {
  static constexpr uint32_t kValues = 256, kBytes = 136;
  template <class Sink>
  SJKV_AVX2_INLINE static void walk(const uint8_t* b, Sink& sink) {
    const float d = scale_f16(b);
    for (uint32_t ib = 0; ib < 8; ++ib)
      codes32_iq4(nibbles32(b + 8 + 16 * ib), d * static_cast<float>(blockfmt::iq4_xs_scale(b, ib)), sink,
                  static_cast<int>(4 * ib));
  }
};
// Eight values of an F32, F16 or BF16 row from p, as floats (exact conversions).
template <uint32_t T>
SJKV_AVX2_INLINE __m256 load8(const uint8_t* p) {
  static_assert(T == kGgmlF32 || T == kGgmlF16 || T == kGgmlBF16, "load8: f32, f16 or bf16");
  if (T == kGgmlF16) return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  if (T == kGgmlBF16)
    return _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
  return _mm256_loadu_ps(reinterpret_cast<const float*>(p));
}
// F16, BF16 and F32 walk eight values as one "block".
template <uint32_t T>
struct avx2_plain {
  static constexpr uint32_t kValues = 8, kBytes = T == kGgmlF32 ? 32 : 16;
  template <class Sink>
  SJKV_AVX2_INLINE static void walk(const uint8_t* b, Sink& sink) {
    sink(0, load8<T>(b));
  }
};
template <>
struct avx2_block<kGgmlF16> : avx2_plain<kGgmlF16> {};
template <>
struct avx2_block<kGgmlBF16> : avx2_plain<kGgmlBF16> {};
template <>
struct avx2_block<kGgmlF32> : avx2_plain<kGgmlF32> {};

// The sink of the row dequantizers: each group stored at y + 8 g.
struct StoreSink {
  float* y;
  SJKV_AVX2_INLINE void operator()(int g, __m256 w) { _mm256_storeu_ps(y + 8 * g, w); }
};

#endif  // __x86_64__

}  // namespace blocks
}  // namespace replay
}  // namespace sjkv
