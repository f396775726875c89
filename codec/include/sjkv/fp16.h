// binary32 <-> binary16 exactly as docs/SPEC.md §2: round to nearest even, no flush to zero,
// |x| >= 65520 -> infinity, every NaN -> canonical 0x7E00 with the sign kept.
#pragma once

#include "sjkv/hd.h"

namespace sjkv {

// H(x): binary32 -> binary16 bit pattern.
SJKV_HD inline uint16_t f32_to_f16(float x) {
  const uint32_t u = f32_bits(x);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520, inf
  if (a >= 0x38800000u) {  // normal half: re-bias the exponent, round the 13 dropped bits
    const uint32_t r = a - 0x38000000u;
    const uint32_t h = (r + 0x0fffu + ((r >> 13) & 1u)) >> 13;
    return static_cast<uint16_t>(sign | h);
  }
  if (a < 0x33000000u) return sign;  // below 2^-25 (and binary32 subnormals): signed zero
  // Half subnormal: the value in units of 2^-24 is mant >> shift, rounded to nearest even.
  const uint32_t e = a >> 23;
  const uint32_t mant = (a & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126u - e;  // 14 ... 24
  uint32_t q = mant >> shift;
  const uint32_t rem = mant & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (q & 1u))) ++q;
  return static_cast<uint16_t>(sign | q);
}

// F(h): exact widening of a binary16 bit pattern.
SJKV_HD inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  if (e == 31) return f32_from_bits(sign | 0x7f800000u | (man << 13));
  if (e != 0) return f32_from_bits(sign | ((e + 112u) << 23) | (man << 13));
  if (man == 0) return f32_from_bits(sign);
  // subnormal: man * 2^-24, both factors exact in binary32
  const float v = static_cast<float>(man) * f32_from_bits(0x33800000u);
  return sign ? -v : v;
}

// The seal input rounding of docs/SPEC.md §4.6: a value as it reads back from fp16.
SJKV_HD inline float round_f16(float x) { return f16_to_f32(f32_to_f16(x)); }

}  // namespace sjkv
