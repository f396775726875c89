// fp16 conversion (docs/SPEC.md §2): H against an independent nearest-half search, the
// round trip over every half, the listed edge cases, and x86 F16C where the CPU has it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define SJKV_TEST_X86 1
#endif

#include "sjkv/fp16.h"

namespace {

using sjkv::f16_to_f32;
using sjkv::f32_bits;
using sjkv::f32_from_bits;
using sjkv::f32_to_f16;

bool half_is_nan(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x03ffu) != 0; }

// Value of a finite half computed from its fields in binary64, not through F.
double half_value_f64(uint16_t h) {
  const int e = (h >> 10) & 0x1f;
  const int m = h & 0x3ff;
  const double mag = e == 0 ? std::ldexp(static_cast<double>(m), -24)
                            : std::ldexp(static_cast<double>(1024 + m), e - 25);
  return (h & 0x8000u) ? -mag : mag;
}

// Positive finite halves 0x0000..0x7bff are ascending in value, so the index is the bits.
const std::vector<double>& positive_halves() {
  static const std::vector<double> v = [] {
    std::vector<double> t(0x7c00);
    for (uint32_t h = 0; h < 0x7c00; ++h) t[h] = half_value_f64(static_cast<uint16_t>(h));
    return t;
  }();
  return v;
}

// Reference H: nearest finite half by binary search, ties to the even mantissa,
// |x| >= 65520 -> inf, NaN -> 0x7E00|sign. Shares no code with the library.
uint16_t reference_h(float x) {
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  if (std::isnan(x)) return static_cast<uint16_t>(sign | 0x7e00);
  const double a = std::fabs(static_cast<double>(x));
  if (a >= 65520.0) return static_cast<uint16_t>(sign | 0x7c00);
  const std::vector<double>& t = positive_halves();
  // lo = largest half <= a (exists since t[0] = 0).
  const size_t lo = static_cast<size_t>(std::upper_bound(t.begin(), t.end(), a) - t.begin()) - 1;
  if (lo == 0x7bff) return static_cast<uint16_t>(sign | 0x7bff);  // a in [65504, 65520)
  const double dlo = a - t[lo];
  const double dhi = t[lo + 1] - a;
  size_t pick;
  if (dlo < dhi) pick = lo;
  else if (dhi < dlo) pick = lo + 1;
  else pick = (lo & 1u) ? lo + 1 : lo;
  return static_cast<uint16_t>(sign | pick);
}

float from_bits(uint32_t u) { return f32_from_bits(u); }

// ---- round trip over every half ---------------------------------------------------------

TEST(Fp16, EveryHalfRoundTrips) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const uint16_t hh = static_cast<uint16_t>(h);
    const uint16_t back = f32_to_f16(f16_to_f32(hh));
    if (half_is_nan(hh)) {
      ASSERT_EQ(back, static_cast<uint16_t>(0x7e00u | (hh & 0x8000u))) << std::hex << h;
    } else {
      ASSERT_EQ(back, hh) << std::hex << h;
    }
  }
}

TEST(Fp16, WideningMatchesFieldValue) {
  // F is exact: compare against the binary64 field decode for all finite halves.
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const uint16_t hh = static_cast<uint16_t>(h);
    if ((hh & 0x7c00u) == 0x7c00u) continue;
    const float f = f16_to_f32(hh);
    ASSERT_EQ(static_cast<double>(f), half_value_f64(hh)) << std::hex << h;
    ASSERT_EQ(std::signbit(f), (hh & 0x8000u) != 0) << std::hex << h;
  }
  // Infinities, and NaN payloads are kept by F (§1.2).
  EXPECT_EQ(f32_bits(f16_to_f32(0x7c00)), 0x7f800000u);
  EXPECT_EQ(f32_bits(f16_to_f32(0xfc00)), 0xff800000u);
  EXPECT_EQ(f32_bits(f16_to_f32(0x7e01)), 0x7fc02000u);
  EXPECT_EQ(f32_bits(f16_to_f32(0xfd55)), 0xffaaa000u);
}

// ---- sampled sweep of §1.1 --------------------------------------------------------------

TEST(Fp16, SpecSweepMatchesNearestHalfSearch) {
  const uint32_t step = (0x47800000u - 0x33000000u) / 200000u;
  ASSERT_EQ(step, 1719u);
  uint32_t nonzero = 0;
  for (uint32_t i = 0; i < 200000u; ++i) {
    const uint32_t bits = 0x33000000u + i * step + (i & 0x1fffu);
    for (uint32_t s : {0u, 0x80000000u}) {
      const float x = from_bits(bits | s);
      const uint16_t want = reference_h(x);
      ASSERT_EQ(f32_to_f16(x), want) << "bits=0x" << std::hex << (bits | s);
      nonzero += (want & 0x7fffu) != 0;
    }
  }
  // The sweep spans 2^-25 .. 65536, so nearly every sample is a non-zero half.
  EXPECT_GT(nonzero, 399000u);
}

TEST(Fp16, ReferenceSearchSanity) {
  // The reference must itself reproduce a few hand-known values.
  EXPECT_EQ(reference_h(1.0f), 0x3c00);
  EXPECT_EQ(reference_h(-2.0f), 0xc000);
  EXPECT_EQ(reference_h(65504.0f), 0x7bff);
  EXPECT_EQ(reference_h(65520.0f), 0x7c00);
  EXPECT_EQ(reference_h(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(reference_h(std::ldexp(1.0f, -25)), 0x0000);
}

// ---- explicit edge cases ----------------------------------------------------------------

TEST(Fp16, Zeros) {
  EXPECT_EQ(f32_to_f16(0.0f), 0x0000);
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
  EXPECT_EQ(f32_bits(f16_to_f32(0x8000)), 0x80000000u);
}

TEST(Fp16, LargestFiniteAndOverflow) {
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(-65504.0f), 0xfbff);
  EXPECT_EQ(f32_to_f16(65519.99f), 0x7bff);
  EXPECT_EQ(f32_to_f16(from_bits(0x477fefffu)), 0x7bff);  // largest float below 65520
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);
  EXPECT_EQ(f32_to_f16(-65520.0f), 0xfc00);
  EXPECT_EQ(f32_to_f16(1e6f), 0x7c00);
  EXPECT_EQ(f32_to_f16(from_bits(0x7f7fffffu)), 0x7c00);  // FLT_MAX
}

TEST(Fp16, Infinities) {
  EXPECT_EQ(f32_to_f16(INFINITY), 0x7c00);
  EXPECT_EQ(f32_to_f16(-INFINITY), 0xfc00);
}

TEST(Fp16, NaNCanonicalised) {
  for (uint32_t bits : {0x7fc00000u, 0x7f800001u, 0x7fbfffffu, 0x7fffffffu, 0x7fc02000u, 0x7f812345u}) {
    EXPECT_EQ(f32_to_f16(from_bits(bits)), 0x7e00) << std::hex << bits;
    EXPECT_EQ(f32_to_f16(from_bits(bits | 0x80000000u)), 0xfe00) << std::hex << bits;
  }
}

TEST(Fp16, SubnormalBoundary) {
  const float two_m25 = std::ldexp(1.0f, -25);
  EXPECT_EQ(f32_bits(two_m25), 0x33000000u);
  EXPECT_EQ(f32_to_f16(two_m25), 0x0000);   // tie, rounds to even zero
  EXPECT_EQ(f32_to_f16(-two_m25), 0x8000);
  EXPECT_EQ(f32_to_f16(from_bits(0x33000001u)), 0x0001);  // just above the tie
  EXPECT_EQ(f32_to_f16(from_bits(0xb3000001u)), 0x8001);
  EXPECT_EQ(f32_to_f16(from_bits(0x32ffffffu)), 0x0000);
  // Smallest subnormal 2^-24 and its neighbours.
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(f32_to_f16(std::ldexp(3.0f, -25)), 0x0002);  // 1.5 ulp tie -> even 2
  EXPECT_EQ(f32_to_f16(std::ldexp(5.0f, -25)), 0x0002);  // 2.5 ulp tie -> even 2
  // Largest subnormal and smallest normal.
  EXPECT_EQ(f32_to_f16(std::ldexp(1023.0f, -24)), 0x03ff);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -14)), 0x0400);
  EXPECT_EQ(f32_to_f16(std::ldexp(2047.0f, -25)), 0x0400);  // tie between 0x3ff and 0x400 -> even
}

TEST(Fp16, Binary32SubnormalsGiveSignedZero) {
  for (uint32_t bits : {0x00000001u, 0x00000100u, 0x007fffffu, 0x00400000u}) {
    EXPECT_EQ(f32_to_f16(from_bits(bits)), 0x0000) << std::hex << bits;
    EXPECT_EQ(f32_to_f16(from_bits(bits | 0x80000000u)), 0x8000) << std::hex << bits;
  }
  EXPECT_EQ(f32_to_f16(from_bits(0x00800000u)), 0x0000);  // FLT_MIN, far below 2^-25
}

TEST(Fp16, TiesToEvenNearOne) {
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);       // tie -> even 0x3c00
  EXPECT_EQ(f32_to_f16(1.0f + 3.0f * std::ldexp(1.0f, -11)), 0x3c02);  // tie -> even 0x3c02
  EXPECT_EQ(f32_to_f16(from_bits(0x3f801001u)), 0x3c01);  // just above the first tie
  EXPECT_EQ(f32_to_f16(from_bits(0x3f800fffu)), 0x3c00);  // just below it
  EXPECT_EQ(f32_to_f16(-(1.0f + std::ldexp(1.0f, -11))), 0xbc00);
  // Rounding carries into the exponent: 2 - 2^-12 rounds up to 2.0.
  EXPECT_EQ(f32_to_f16(2.0f - std::ldexp(1.0f, -12)), 0x4000);
}

// ---- x86 F16C cross-check ---------------------------------------------------------------

#if defined(SJKV_TEST_X86)
__attribute__((target("f16c"))) uint16_t f16c_convert(float x) {
  return static_cast<uint16_t>(_cvtss_sh(x, 0));
}

__attribute__((target("f16c"))) uint32_t f16c_mismatches(uint32_t stride, uint32_t start, uint32_t* checked,
                                                           uint32_t* first_bad) {
  uint32_t bad = 0;
  uint32_t n = 0;
  for (uint64_t b = start; b <= 0xffffffffull; b += stride) {
    const uint32_t bits = static_cast<uint32_t>(b);
    if ((bits & 0x7fffffffu) > 0x7f800000u) continue;  // F16C keeps NaN payloads
    const float x = f32_from_bits(bits);
    ++n;
    if (f32_to_f16(x) != f16c_convert(x)) {
      if (bad == 0) *first_bad = bits;
      ++bad;
    }
  }
  *checked = n;
  return bad;
}
#endif

TEST(Fp16, MatchesF16C) {
#if defined(SJKV_TEST_X86)
  if (!__builtin_cpu_supports("f16c")) GTEST_SKIP() << "CPU has no F16C";
  ASSERT_EQ(f16c_convert(1.0f), 0x3c00);
  // A prime stride over the whole 32-bit space (~4.2M patterns, every exponent)...
  uint32_t checked = 0, first_bad = 0;
  uint32_t bad = f16c_mismatches(1021u, 7u, &checked, &first_bad);
  EXPECT_EQ(bad, 0u) << "first mismatch bits=0x" << std::hex << first_bad;
  EXPECT_GT(checked, 4000000u);
  // ...and a dense stride across the rounding-sensitive low mantissa bits of [2^-26, 2^17).
  uint32_t checked2 = 0, bad2 = 0, fb2 = 0;
  for (uint32_t base = 0x32800000u; base < 0x48000000u; base += 0x01000000u) {
    // 2^16 patterns with step 8 per two binades: every combination of the 13 dropped bits
    // above bit 2, so every round/sticky case of the normal path.
    for (uint32_t k = 0; k < 0x10000u; ++k) {
      const uint32_t bits = base + (k << 3);
      const float x = f32_from_bits(bits);
      ++checked2;
      if (f32_to_f16(x) != f16c_convert(x) || f32_to_f16(-x) != f16c_convert(-x)) {
        if (bad2 == 0) fb2 = bits;
        ++bad2;
      }
    }
  }
  EXPECT_EQ(bad2, 0u) << "first mismatch bits=0x" << std::hex << fb2;
  EXPECT_GT(checked2, 1000000u);
#else
  GTEST_SKIP() << "not an x86 build";
#endif
}

}  // namespace
