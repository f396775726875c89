// Hadamard rotation (docs/SPEC.md §3): the scale table, exact small cases, self-inverse and
// orthonormality on random data, and per-block independence of hadamard_blocks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "sjkv/hadamard.h"
#include "sjkv/testgen.h"

namespace {

using sjkv::f32_bits;
using sjkv::f32_from_bits;
using sjkv::hadamard_blocks;
using sjkv::hadamard_inplace;
using sjkv::hadamard_scale;

std::vector<float> random_vector(uint32_t n, uint64_t seed) {
  sjkv::XorShift64 rng(seed);
  std::vector<float> x(n);
  // Full 24-bit mantissas (not a coarse grid), so butterflies really round.
  for (uint32_t i = 0; i < n; ++i) {
    const double u = static_cast<double>(rng.next()) * 0x1p-32 - 0.5;
    x[i] = static_cast<float>(u) * static_cast<float>(1u + (rng.next() & 3u));
  }
  return x;
}

double norm2(const std::vector<float>& x, size_t off = 0, size_t n = SIZE_MAX) {
  if (n == SIZE_MAX) n = x.size() - off;
  double s = 0.0;
  for (size_t i = off; i < off + n; ++i) s += static_cast<double>(x[i]) * x[i];
  return std::sqrt(s);
}

// Unnormalised Sylvester entry H[r][c] = (-1)^popcount(r & c), for an independent O(n^2) check.
int sylvester_sign(uint32_t r, uint32_t c) { return (__builtin_popcount(r & c) & 1) ? -1 : 1; }

TEST(Hadamard, ScaleBitsTable) {
  struct Row { uint32_t n; uint32_t bits; };
  const Row table[] = {
      {1, 0x3f800000u},    {2, 0x3f3504f3u},    {8, 0x3eb504f3u},    {16, 0x3e800000u},
      {32, 0x3e3504f3u},   {64, 0x3e000000u},   {128, 0x3db504f3u},  {256, 0x3d800000u},
      {512, 0x3d3504f3u},  {1024, 0x3d000000u}, {2048, 0x3cb504f3u}, {4096, 0x3c800000u},
  };
  for (const Row& r : table) EXPECT_EQ(f32_bits(hadamard_scale(r.n)), r.bits) << "n=" << r.n;
  // n = 4 is a power of four, so its scale is exact.
  EXPECT_EQ(hadamard_scale(4), 0.5f);
}

TEST(Hadamard, ScaleIsCorrectlyRoundedInverseRoot) {
  // §2: for every power of two up to 65536 the two-rounding scale equals the correctly
  // rounded 1/sqrt(n); binary64 1/sqrt(n) rounded to binary32 is that value here.
  for (uint32_t n = 1; n <= 65536; n <<= 1) {
    const float want = static_cast<float>(1.0 / std::sqrt(static_cast<double>(n)));
    EXPECT_EQ(f32_bits(hadamard_scale(n)), f32_bits(want)) << "n=" << n;
  }
}

TEST(Hadamard, SmallExactCases) {
  // n = 2: (a+b, a-b) * 0x3f3504f3, each product one binary32 rounding.
  const float s2 = f32_from_bits(0x3f3504f3u);
  float x2[2] = {3.0f, 1.0f};
  hadamard_inplace(x2, 2);
  EXPECT_EQ(x2[0], 4.0f * s2);
  EXPECT_EQ(x2[1], 2.0f * s2);

  // n = 4: scale 0.5 is exact, so the result is exactly H4 * x / 2.
  float x4[4] = {1.0f, 2.0f, 3.0f, 4.0f};
  hadamard_inplace(x4, 4);
  EXPECT_EQ(x4[0], 5.0f);   // (1+2+3+4)/2
  EXPECT_EQ(x4[1], -1.0f);  // (1-2+3-4)/2
  EXPECT_EQ(x4[2], -2.0f);  // (1+2-3-4)/2
  EXPECT_EQ(x4[3], 0.0f);   // (1-2-3+4)/2

  // n = 1: identity times scale 1.
  float x1[1] = {-7.25f};
  hadamard_inplace(x1, 1);
  EXPECT_EQ(x1[0], -7.25f);
}

TEST(Hadamard, IntegerInputsMatchSylvesterMatrix) {
  // Small integers keep every butterfly exact; n = 64 has exact scale 1/8, so the result
  // must equal the O(n^2) matrix product bit for bit.
  const uint32_t n = 64;
  sjkv::XorShift64 rng(0x1234567u);
  std::vector<float> x(n);
  for (uint32_t i = 0; i < n; ++i) x[i] = static_cast<float>(static_cast<int32_t>(rng.next() % 201u) - 100);
  x[5] = 100.0f;  // a non-zero corner, so the check cannot pass on zeros
  std::vector<float> y = x;
  hadamard_inplace(y.data(), n);
  for (uint32_t r = 0; r < n; ++r) {
    int64_t acc = 0;
    for (uint32_t c = 0; c < n; ++c) acc += sylvester_sign(r, c) * static_cast<int64_t>(x[c]);
    EXPECT_EQ(y[r], static_cast<float>(acc) / 8.0f) << "row " << r;
  }
  EXPECT_GT(norm2(y), 0.0);
}

// §2 written out with a scratch copy per stage: stages by ascending half-size, then the
// two-rounding scale. Rounding depends on the stage order, so this pins the exact bits.
std::vector<float> reference_hadamard(const std::vector<float>& in) {
  const size_t n = in.size();
  std::vector<float> x = in, prev(n);
  for (size_t h = 1; h < n; h *= 2) {
    prev = x;
    for (size_t j = 0; j < n; ++j) {
      const bool upper = (j & h) != 0;
      x[j] = upper ? prev[j - h] - prev[j] : prev[j] + prev[j + h];
    }
  }
  const float s = 1.0f / std::sqrt(static_cast<float>(n));
  for (float& v : x) v = v * s;
  return x;
}

TEST(Hadamard, BitExactAgainstSpecAlgorithm) {
  for (uint32_t n = 1; n <= 4096; n <<= 1) {
    const std::vector<float> x = random_vector(n, 0xE7ACull + n);
    std::vector<float> y = x;
    hadamard_inplace(y.data(), n);
    const std::vector<float> want = reference_hadamard(x);
    for (uint32_t i = 0; i < n; ++i) ASSERT_EQ(f32_bits(y[i]), f32_bits(want[i])) << "n=" << n << " i=" << i;
    EXPECT_GT(norm2(y), 0.0);
  }
}

TEST(Hadamard, SelfInverseOnRandomData) {
  for (uint32_t n = 32; n <= 512; n <<= 1) {
    const std::vector<float> x = random_vector(n, 0xABCDEF00ull + n);
    ASSERT_GT(norm2(x), 0.0);
    std::vector<float> y = x;
    hadamard_inplace(y.data(), n);
    EXPECT_NE(y, x) << "n=" << n;
    hadamard_inplace(y.data(), n);
    // Rounding errors of the butterflies are absolute (relative to the largest partial
    // sums), so measure in ulps of max|x|: 200 seeds per n measured at most 4.
    float amax = 0.0f;
    for (float v : x) amax = std::fmax(amax, std::fabs(v));
    const float tol = 8.0f * std::ldexp(1.0f, std::ilogb(amax) - 23);
    for (uint32_t i = 0; i < n; ++i) {
      ASSERT_LE(std::fabs(y[i] - x[i]), tol) << "n=" << n << " i=" << i;
    }
  }
}

TEST(Hadamard, SelfInverseExactForPowersOfFour) {
  // With exact scale (n = 64, 256) and inputs on a coarse grid, both passes are exact.
  for (uint32_t n : {64u, 256u}) {
    sjkv::XorShift64 rng(n);
    std::vector<float> x(n);
    for (uint32_t i = 0; i < n; ++i) x[i] = static_cast<float>(rng.gauss());
    std::vector<float> y = x;
    hadamard_inplace(y.data(), n);
    hadamard_inplace(y.data(), n);
    for (uint32_t i = 0; i < n; ++i) ASSERT_EQ(y[i], x[i]) << "n=" << n << " i=" << i;
  }
}

TEST(Hadamard, PreservesNorm) {
  for (uint32_t n = 32; n <= 4096; n <<= 1) {
    const std::vector<float> x = random_vector(n, 0x5151ull * n);
    std::vector<float> y = x;
    hadamard_inplace(y.data(), n);
    const double nx = norm2(x);
    ASSERT_GT(nx, 0.0);
    EXPECT_NEAR(norm2(y) / nx, 1.0, 1e-5) << "n=" << n;
  }
}

TEST(Hadamard, OrthonormalInnerProducts) {
  // <Hx, Hy> = <x, y>: orthogonality, not only norm preservation.
  const uint32_t n = 256;
  const std::vector<float> x = random_vector(n, 11);
  const std::vector<float> y = random_vector(n, 12);
  std::vector<float> hx = x, hy = y;
  hadamard_inplace(hx.data(), n);
  hadamard_inplace(hy.data(), n);
  double dxy = 0.0, dh = 0.0;
  for (uint32_t i = 0; i < n; ++i) {
    dxy += static_cast<double>(x[i]) * y[i];
    dh += static_cast<double>(hx[i]) * hy[i];
  }
  EXPECT_NEAR(dh, dxy, 1e-5 * norm2(x) * norm2(y));
}

TEST(Hadamard, ImpulseGivesSylvesterColumn) {
  // A unit impulse at index 1 gives column 1 of the Sylvester matrix times s:
  // alternating signs (a Walsh/sequency ordering would differ).
  const uint32_t n = 32;
  std::vector<float> x(n, 0.0f);
  x[1] = 1.0f;
  hadamard_inplace(x.data(), n);
  const float s = hadamard_scale(n);
  for (uint32_t r = 0; r < n; ++r) EXPECT_EQ(x[r], (r & 1u) ? -s : s) << r;
}

TEST(Hadamard, BlocksTransformIndependently) {
  const uint32_t D = 512, B = 256;
  const std::vector<float> x = random_vector(D, 0xB10Cull);
  std::vector<float> blocks = x;
  hadamard_blocks(blocks.data(), D, B);

  std::vector<float> lo(x.begin(), x.begin() + B), hi(x.begin() + B, x.end());
  hadamard_inplace(lo.data(), B);
  hadamard_inplace(hi.data(), B);
  for (uint32_t i = 0; i < B; ++i) {
    ASSERT_EQ(f32_bits(blocks[i]), f32_bits(lo[i])) << i;
    ASSERT_EQ(f32_bits(blocks[B + i]), f32_bits(hi[i])) << i;
  }
  EXPECT_GT(norm2(blocks), 0.0);

  std::vector<float> whole = x;
  hadamard_inplace(whole.data(), D);
  uint32_t differ = 0;
  for (uint32_t i = 0; i < D; ++i) differ += f32_bits(whole[i]) != f32_bits(blocks[i]);
  EXPECT_GT(differ, D / 2);
  // Each 256-block keeps its own norm (a full 512 transform mixes the halves).
  EXPECT_NEAR(norm2(blocks, 0, B) / norm2(x, 0, B), 1.0, 1e-5);
  EXPECT_NEAR(norm2(blocks, B, B) / norm2(x, B, B), 1.0, 1e-5);
}

TEST(Hadamard, BlocksPerHeadAndTrailingRemainderUntouched) {
  // Four heads of 128; a trailing partial block (n_values not a multiple) is left as is.
  const uint32_t hd = 128, heads = 4, extra = 7;
  const std::vector<float> x = random_vector(hd * heads + extra, 0x4EADull);
  std::vector<float> y = x;
  hadamard_blocks(y.data(), hd * heads + extra, hd);
  for (uint32_t h = 0; h < heads; ++h) {
    std::vector<float> ref(x.begin() + h * hd, x.begin() + (h + 1) * hd);
    hadamard_inplace(ref.data(), hd);
    for (uint32_t i = 0; i < hd; ++i) ASSERT_EQ(f32_bits(y[h * hd + i]), f32_bits(ref[i])) << h << "," << i;
  }
  for (uint32_t i = hd * heads; i < hd * heads + extra; ++i) EXPECT_EQ(f32_bits(y[i]), f32_bits(x[i]));
}

TEST(Hadamard, IsPow2) {
  EXPECT_FALSE(sjkv::is_pow2(0));
  EXPECT_TRUE(sjkv::is_pow2(1));
  EXPECT_TRUE(sjkv::is_pow2(4096));
  EXPECT_FALSE(sjkv::is_pow2(96));
  EXPECT_TRUE(sjkv::is_pow2(0x80000000u));
}

}  // namespace
