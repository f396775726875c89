// The matrix products (gemm.h): the AVX2 tiles and the portable path against the scalar
// reference bit for bit, on every weight type, shapes with every kind of tail (rows not a
// multiple of the 3-row tile or the 48-row panel, tokens not a multiple of 4 or 16, k not a
// multiple of 8 or of the 256-value k block), any thread count and any number of tokens.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "sjkv/fp16.h"
#include "sjkv/replay/dequant.h"
#include "sjkv/replay/gemm.h"

using namespace sjkv;
using namespace sjkv::replay;

namespace {

// Blocks of `type` with random codes and finite, realistic scales (about 0.02 per code).
std::vector<uint8_t> weights(uint32_t type, size_t rows, size_t k, std::mt19937& rng) {
  const size_t bv = dequant_block_values(type), bb = dequant_block_bytes(type);
  const size_t nb = rows * k / bv;
  std::vector<uint8_t> b(nb * bb);
  std::uniform_int_distribution<int> byte(0, 255);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (auto& e : b) e = static_cast<uint8_t>(byte(rng));
  auto put = [&](size_t at, float x) {
    const uint16_t h = f32_to_f16(x);
    b[at] = static_cast<uint8_t>(h & 0xFF);
    b[at + 1] = static_cast<uint8_t>(h >> 8);
  };
  for (size_t i = 0; i < nb; ++i) {
    const size_t o = i * bb;
    switch (type) {
      case kGgmlF32: {
        const float x = 0.05f * nd(rng);
        std::memcpy(b.data() + o, &x, 4);
        break;
      }
      case kGgmlF16: put(o, 0.05f * nd(rng)); break;
      case kGgmlBF16: {
        const float x = 0.05f * nd(rng);
        uint32_t u;
        std::memcpy(&u, &x, 4);
        b[o] = static_cast<uint8_t>((u >> 16) & 0xFF);
        b[o + 1] = static_cast<uint8_t>(u >> 24);
        break;
      }
      case kGgmlQ6_K: put(o + 208, 0.002f * (1.0f + std::fabs(nd(rng)))); break;
      case kGgmlQ4_K: case kGgmlQ5_K: put(o, 0.002f); put(o + 2, 0.001f); break;
      case kGgmlQ4_1: case kGgmlQ5_1: put(o, 0.01f); put(o + 2, -0.08f); break;
      case kGgmlQ2_K: put(o + 80, 0.004f); put(o + 82, 0.002f); break;
      case kGgmlQ3_K: put(o + 108, 0.001f); break;
      case kGgmlTQ1_0: put(o + 52, 0.02f); break;
      case kGgmlTQ2_0: put(o + 64, 0.02f); break;
      case kGgmlIQ1_M: {  // d = 0.01 in the top nibbles of the four scale words
        const uint16_t h = f32_to_f16(0.01f);
        for (int w = 0; w < 4; ++w)
          b[o + 49 + 2 * w] = static_cast<uint8_t>((b[o + 49 + 2 * w] & 0x0F) | (((h >> (4 * w)) & 0xF) << 4));
        break;
      }
      case kGgmlMXFP4: b[o] = static_cast<uint8_t>(120 + byte(rng) % 4); break;  // 2^-8 to 2^-5
      case kGgmlNVFP4: for (int j = 0; j < 4; ++j) b[o + j] = static_cast<uint8_t>(byte(rng) % 0x30); break;
      default: put(o, 0.005f * (1.0f + std::fabs(nd(rng)))); break;  // d at byte 0
    }
  }
  return b;
}

std::vector<float> tokens(size_t n, size_t ld, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(n * ld);
  for (auto& e : x) e = nd(rng);
  return x;
}

std::vector<GemmIsa> isas() {
  std::vector<GemmIsa> v{GemmIsa::portable};
  if (gemm_best() != GemmIsa::portable) v.push_back(GemmIsa::avx2);
  if (gemm_best() == GemmIsa::avx512) v.push_back(GemmIsa::avx512);
  return v;
}

}  // namespace

TEST(Gemm, EveryTypeAndShapeEqualsTheReferenceBitForBit) {
  std::mt19937 rng(41);
  struct Case {
    uint32_t type;
    size_t k;
  };
  const Case cases[] = {{kGgmlF32, 7},    {kGgmlF32, 13},   {kGgmlF32, 264},  {kGgmlF16, 333},  {kGgmlBF16, 72},
                        {kGgmlQ4_0, 576}, {kGgmlQ4_1, 576}, {kGgmlQ5_0, 640}, {kGgmlQ5_1, 96},  {kGgmlQ8_0, 640},
                        {kGgmlQ4_K, 1024}, {kGgmlQ5_K, 512}, {kGgmlQ6_K, 2048}, {kGgmlF16, 1031}, {kGgmlF16, 256},
                        // the low-bit weight types: AVX2 walkers for Q2_K, Q3_K, IQ4_NL and IQ4_XS, the others
                        // the panel path through the table's decoder
                        {kGgmlQ2_K, 512}, {kGgmlQ3_K, 256}, {kGgmlIQ2_XXS, 256}, {kGgmlIQ2_XS, 512},
                        {kGgmlIQ2_S, 256}, {kGgmlIQ3_XXS, 256}, {kGgmlIQ3_S, 512}, {kGgmlIQ1_S, 256},
                        {kGgmlIQ1_M, 256}, {kGgmlIQ4_NL, 96}, {kGgmlIQ4_XS, 256}, {kGgmlTQ1_0, 256},
                        {kGgmlTQ2_0, 512}, {kGgmlMXFP4, 160}, {kGgmlNVFP4, 192}, {kGgmlQ1_0, 256}, {kGgmlQ2_0, 192}};
  for (const Case& c : cases)
    for (size_t rows : {size_t(1), size_t(5), size_t(50), size_t(59), size_t(97)}) {  // 59: a last panel of 6 + 5 rows
      const auto w = weights(c.type, rows, c.k, rng);
      const WeightMatrix m = WeightMatrix::of(c.type, rows, c.k, w.data());
      for (size_t n : {size_t(1), size_t(2), size_t(3), size_t(4), size_t(6), size_t(9), size_t(12), size_t(21)}) {  // 1-4: the fused decode tiles; 9, 12, 21: 8-token AVX-512 tiles and the rest
        const size_t ldx = c.k + 3, ldy = rows + 2;
        const auto x = tokens(n, ldx, rng);
        std::vector<float> ref(n * ldy, -7.0f);
        gemm_reference(m, x.data(), n, ref.data(), ldy, ldx);
        for (GemmIsa isa : isas())
          for (int threads : {1, 2, 3}) {
            std::vector<float> y(n * ldy, -7.0f);
            gemm_with(isa, m, x.data(), n, y.data(), ldy, threads, ldx);
            ASSERT_EQ(0, std::memcmp(y.data(), ref.data(), y.size() * 4))
                << "type " << c.type << " k " << c.k << " rows " << rows << " n " << n << " isa "
                << static_cast<int>(isa) << " threads " << threads;
          }
      }
    }
}

TEST(Gemm, ReferenceIsTheProductOfTheDequantizedWeights) {
  std::mt19937 rng(43);
  for (uint32_t type : {kGgmlQ4_K, kGgmlQ8_0, kGgmlF16}) {
    const size_t rows = 33, k = 768, n = 4;
    const auto w = weights(type, rows, k, rng);
    const WeightMatrix m = WeightMatrix::of(type, rows, k, w.data());
    const auto x = tokens(n, k, rng);
    std::vector<float> y(n * rows), row(k);
    gemm(m, x.data(), n, y.data(), rows);
    double norm = 0.0;
    for (size_t r = 0; r < rows; ++r) {
      dequantize_row(type, w.data() + r * m.row_bytes, row.data(), k);
      for (size_t t = 0; t < n; ++t) {
        double e = 0.0, mag = 0.0;
        for (size_t i = 0; i < k; ++i) {
          e += double(row[i]) * x[t * k + i];
          mag += std::fabs(double(row[i]) * x[t * k + i]);
        }
        norm += std::fabs(e);
        // binary32 sums of k terms: a few ulps of the magnitude summed.
        EXPECT_NEAR(y[t * rows + r], e, 1e-6 * mag) << type << " " << r << " " << t;
      }
    }
    EXPECT_GT(norm, 1.0) << type;
  }
}

TEST(Gemm, OneTokenEqualsTheSameTokenInABatch) {
  std::mt19937 rng(47);
  const size_t rows = 100, k = 640, n = 19;
  const auto w = weights(kGgmlQ5_0, rows, k, rng);
  const WeightMatrix m = WeightMatrix::of(kGgmlQ5_0, rows, k, w.data());
  const auto x = tokens(n, k, rng);
  std::vector<float> all(n * rows), one(rows);
  gemm(m, x.data(), n, all.data(), rows);
  for (size_t t = 0; t < n; ++t) {
    gemm(m, x.data() + t * k, 1, one.data(), rows);
    EXPECT_EQ(0, std::memcmp(one.data(), all.data() + t * rows, rows * 4)) << t;
  }
}

TEST(Gemm, F32RowsWithALeadingDimensionAreUsedInPlace) {
  std::mt19937 rng(53);
  const size_t rows = 20, k = 256, ld = 300, n = 5;
  const auto wf = tokens(rows, ld, rng);
  const WeightMatrix m = WeightMatrix::f32(wf.data(), rows, k, ld);
  std::vector<float> dense(rows * k);
  for (size_t r = 0; r < rows; ++r) std::memcpy(dense.data() + r * k, wf.data() + r * ld, k * 4);
  const auto x = tokens(n, k, rng);
  std::vector<float> a(n * rows), b(n * rows);
  gemm(m, x.data(), n, a.data(), rows, 1);
  gemm_reference(WeightMatrix::of(kGgmlF32, rows, k, dense.data()), x.data(), n, b.data(), rows);
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4));
}

TEST(Gemm, RefusesPartialBlocksAndUnknownTypes) {
  std::vector<uint8_t> b(1024);
  EXPECT_THROW(WeightMatrix::of(kGgmlQ4_K, 1, 128, b.data()), std::invalid_argument);
  EXPECT_THROW(WeightMatrix::of(kGgmlQ8_0, 1, 40, b.data()), std::invalid_argument);
  EXPECT_THROW(WeightMatrix::of(99, 1, 32, b.data()), std::invalid_argument);
}
