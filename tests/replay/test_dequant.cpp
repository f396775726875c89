// Dequantizers on hand-built blocks: every scale, min, nibble and high bit placed by hand,
// the expected values written out from the layout (dequant.h), not from the code under test.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#include "sjkv/fp16.h"
#include "sjkv/replay/dequant.h"

using namespace sjkv;
using namespace sjkv::replay;

namespace {

void put_f16(std::vector<uint8_t>& b, size_t at, float x) {
  const uint16_t h = f32_to_f16(x);
  b[at] = static_cast<uint8_t>(h & 0xFF);
  b[at + 1] = static_cast<uint8_t>(h >> 8);
}

std::vector<float> deq(uint32_t type, const std::vector<uint8_t>& b, size_t n) {
  // Sentinels around the output catch writes outside [0, n).
  std::vector<float> out(n + 2, -12345.0f);
  dequantize_row(type, b.data(), out.data() + 1, n);
  EXPECT_EQ(out[0], -12345.0f);
  EXPECT_EQ(out[n + 1], -12345.0f);
  return std::vector<float>(out.begin() + 1, out.end() - 1);
}

}  // namespace

TEST(Dequant, BlockSizesMatchGgml) {
  EXPECT_EQ(dequant_block_bytes(kGgmlQ4_0), 18u);
  EXPECT_EQ(dequant_block_bytes(kGgmlQ4_1), 20u);
  EXPECT_EQ(dequant_block_bytes(kGgmlQ5_0), 22u);
  EXPECT_EQ(dequant_block_bytes(kGgmlQ5_1), 24u);
  EXPECT_EQ(dequant_block_bytes(kGgmlQ8_0), 34u);
  EXPECT_EQ(dequant_block_bytes(kGgmlQ4_K), 144u);
  EXPECT_EQ(dequant_block_bytes(kGgmlQ5_K), 176u);
  EXPECT_EQ(dequant_block_bytes(kGgmlQ6_K), 210u);
  EXPECT_EQ(dequant_block_values(kGgmlQ6_K), 256u);
  EXPECT_EQ(dequant_block_values(kGgmlQ8_0), 32u);
}

TEST(Dequant, F32F16Bf16PassValuesThrough) {
  const float inf = std::numeric_limits<float>::infinity();
  {
    const float v[4] = {1.5f, -0.0f, inf, -3.25e-3f};
    std::vector<uint8_t> b(sizeof v);
    std::memcpy(b.data(), v, sizeof v);
    const auto o = deq(kGgmlF32, b, 4);
    EXPECT_EQ(0, std::memcmp(o.data(), v, sizeof v));
  }
  {
    // f16: 1.0 (0x3C00), -2.5 (0xC100), +inf (0x7C00), NaN (0x7E01), smallest subnormal (0x0001).
    const uint16_t h[5] = {0x3C00, 0xC100, 0x7C00, 0x7E01, 0x0001};
    std::vector<uint8_t> b(10);
    std::memcpy(b.data(), h, 10);
    const auto o = deq(kGgmlF16, b, 5);
    EXPECT_EQ(o[0], 1.0f);
    EXPECT_EQ(o[1], -2.5f);
    EXPECT_EQ(o[2], inf);
    EXPECT_TRUE(std::isnan(o[3]));
    EXPECT_EQ(o[4], std::ldexp(1.0f, -24));
  }
  {
    // bf16: the high half of the f32: 1.0 (0x3F80), -inf (0xFF80), NaN (0x7FC1), 3.140625 (0x4049).
    const uint16_t h[4] = {0x3F80, 0xFF80, 0x7FC1, 0x4049};
    std::vector<uint8_t> b(8);
    std::memcpy(b.data(), h, 8);
    const auto o = deq(kGgmlBF16, b, 4);
    EXPECT_EQ(o[0], 1.0f);
    EXPECT_EQ(o[1], -inf);
    EXPECT_TRUE(std::isnan(o[2]));
    EXPECT_EQ(o[3], 3.140625f);
  }
}

TEST(Dequant, Q4_0) {
  std::vector<uint8_t> b(18, 0);
  put_f16(b, 0, 0.5f);
  for (int j = 0; j < 16; ++j) b[2 + j] = static_cast<uint8_t>((j & 0xF) | ((15 - j) << 4));
  const auto o = deq(kGgmlQ4_0, b, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(o[j], (j - 8) * 0.5f) << j;
    EXPECT_EQ(o[j + 16], (15 - j - 8) * 0.5f) << j;
  }
}

TEST(Dequant, Q4_1) {
  std::vector<uint8_t> b(20, 0);
  put_f16(b, 0, 0.25f);
  put_f16(b, 2, -1.0f);
  for (int j = 0; j < 16; ++j) b[4 + j] = static_cast<uint8_t>(((j * 3) & 0xF) | (j << 4));
  const auto o = deq(kGgmlQ4_1, b, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(o[j], ((j * 3) & 0xF) * 0.25f - 1.0f) << j;
    EXPECT_EQ(o[j + 16], j * 0.25f - 1.0f) << j;
  }
}

TEST(Dequant, Q5_0) {
  std::vector<uint8_t> b(22, 0);
  put_f16(b, 0, 2.0f);
  // Fifth bits: set for values 1, 5, 16 and 31 (bits 1, 5, 16, 31 of the little-endian u32).
  const uint32_t qh = (1u << 1) | (1u << 5) | (1u << 16) | (1u << 31);
  for (int i = 0; i < 4; ++i) b[2 + i] = static_cast<uint8_t>(qh >> (8 * i));
  for (int j = 0; j < 16; ++j) b[6 + j] = static_cast<uint8_t>(j | ((j ^ 5) << 4));
  const auto o = deq(kGgmlQ5_0, b, 32);
  for (int j = 0; j < 16; ++j) {
    const int lo = j + (((qh >> j) & 1) ? 16 : 0) - 16;
    const int hi = (j ^ 5) + (((qh >> (j + 16)) & 1) ? 16 : 0) - 16;
    EXPECT_EQ(o[j], lo * 2.0f) << j;
    EXPECT_EQ(o[j + 16], hi * 2.0f) << j;
  }
  EXPECT_EQ(o[1], (1 + 16 - 16) * 2.0f);
  EXPECT_EQ(o[0], -32.0f);
  EXPECT_EQ(o[31], ((15 ^ 5) + 16 - 16) * 2.0f);
}

TEST(Dequant, Q5_1) {
  std::vector<uint8_t> b(24, 0);
  put_f16(b, 0, 0.125f);
  put_f16(b, 2, 3.0f);
  const uint32_t qh = 0xA5A50F0Fu;
  for (int i = 0; i < 4; ++i) b[4 + i] = static_cast<uint8_t>(qh >> (8 * i));
  for (int j = 0; j < 16; ++j) b[8 + j] = static_cast<uint8_t>((15 - j) | (j << 4));
  const auto o = deq(kGgmlQ5_1, b, 32);
  for (int j = 0; j < 16; ++j) {
    const int lo = (15 - j) + (((qh >> j) & 1) ? 16 : 0);
    const int hi = j + (((qh >> (j + 16)) & 1) ? 16 : 0);
    EXPECT_EQ(o[j], lo * 0.125f + 3.0f) << j;
    EXPECT_EQ(o[j + 16], hi * 0.125f + 3.0f) << j;
  }
}

TEST(Dequant, Q8_0) {
  std::vector<uint8_t> b(34, 0);
  put_f16(b, 0, -0.5f);
  const int8_t q[4] = {-128, 127, 0, -1};
  for (int j = 0; j < 32; ++j) b[2 + j] = static_cast<uint8_t>(j < 4 ? q[j] : static_cast<int8_t>(j * 7 - 100));
  const auto o = deq(kGgmlQ8_0, b, 32);
  EXPECT_EQ(o[0], 64.0f);
  EXPECT_EQ(o[1], -63.5f);
  EXPECT_EQ(o[2], -0.0f);
  EXPECT_EQ(o[3], 0.5f);
  for (int j = 4; j < 32; ++j) EXPECT_EQ(o[j], (j * 7 - 100) * -0.5f) << j;
}

namespace {
// Packs eight 6-bit scales and mins the way ggml's K-quants store them (12 bytes).
void pack_k4_scales(const int sc[8], const int mn[8], uint8_t* q) {
  for (int j = 0; j < 4; ++j) {
    q[j] = static_cast<uint8_t>((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    q[j + 4] = static_cast<uint8_t>((mn[j] & 63) | ((mn[j + 4] >> 4) << 6));
    q[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0xF) | ((mn[j + 4] & 0xF) << 4));
  }
}
}  // namespace

TEST(Dequant, Q4_K) {
  std::vector<uint8_t> b(144, 0);
  put_f16(b, 0, 0.5f);   // d
  put_f16(b, 2, 0.25f);  // dmin
  const int sc[8] = {1, 63, 17, 40, 33, 2, 60, 48};  // sub-blocks 4..7 use the high bits
  const int mn[8] = {0, 5, 63, 31, 62, 16, 1, 47};
  pack_k4_scales(sc, mn, b.data() + 4);
  for (int i = 0; i < 128; ++i) b[16 + i] = static_cast<uint8_t>((i * 5) & 0xFF);
  const auto o = deq(kGgmlQ4_K, b, 256);
  for (int chunk = 0; chunk < 4; ++chunk)
    for (int l = 0; l < 32; ++l) {
      const uint8_t byte = static_cast<uint8_t>((( 32 * chunk + l) * 5) & 0xFF);
      const int s0 = 2 * chunk, s1 = 2 * chunk + 1;
      EXPECT_EQ(o[64 * chunk + l], 0.5f * sc[s0] * (byte & 0xF) - 0.25f * mn[s0]) << chunk << " " << l;
      EXPECT_EQ(o[64 * chunk + 32 + l], 0.5f * sc[s1] * (byte >> 4) - 0.25f * mn[s1]) << chunk << " " << l;
    }
}

TEST(Dequant, Q5_K) {
  std::vector<uint8_t> b(176, 0);
  put_f16(b, 0, 0.0625f);
  put_f16(b, 2, 1.5f);
  const int sc[8] = {63, 1, 2, 3, 50, 51, 18, 19};
  const int mn[8] = {7, 0, 63, 9, 32, 4, 45, 63};
  pack_k4_scales(sc, mn, b.data() + 4);
  for (int l = 0; l < 32; ++l) b[16 + l] = static_cast<uint8_t>(l * 37 + 11);  // qh
  for (int i = 0; i < 128; ++i) b[48 + i] = static_cast<uint8_t>(255 - i * 3);
  const auto o = deq(kGgmlQ5_K, b, 256);
  for (int chunk = 0; chunk < 4; ++chunk)
    for (int l = 0; l < 32; ++l) {
      const uint8_t ql = static_cast<uint8_t>(255 - (32 * chunk + l) * 3);
      const uint8_t qh = static_cast<uint8_t>(l * 37 + 11);
      // Sub-block 2c takes bit 2c of qh[l], sub-block 2c+1 bit 2c+1.
      const int q0 = (ql & 0xF) + (((qh >> (2 * chunk)) & 1) << 4);
      const int q1 = (ql >> 4) + (((qh >> (2 * chunk + 1)) & 1) << 4);
      const int s0 = 2 * chunk, s1 = s0 + 1;
      EXPECT_EQ(o[64 * chunk + l], 0.0625f * sc[s0] * q0 - 1.5f * mn[s0]) << chunk << " " << l;
      EXPECT_EQ(o[64 * chunk + 32 + l], 0.0625f * sc[s1] * q1 - 1.5f * mn[s1]) << chunk << " " << l;
    }
}

TEST(Dequant, Q6_K) {
  std::vector<uint8_t> b(210, 0);
  for (int i = 0; i < 128; ++i) b[i] = static_cast<uint8_t>(i * 13 + 7);        // ql
  for (int i = 0; i < 64; ++i) b[128 + i] = static_cast<uint8_t>(i * 29 + 3);  // qh
  const int8_t scales[16] = {-128, 127, 1, -1, 5, -7, 64, -64, 3, 2, -3, 100, -100, 9, 33, -33};
  std::memcpy(b.data() + 192, scales, 16);
  put_f16(b, 208, 0.03125f);
  const auto o = deq(kGgmlQ6_K, b, 256);
  // Value y (0..255): half n = y / 128, r = y % 128, quarter g = r / 32, l = r % 32.
  // Low 4 bits: ql[64n + l + 32*(g & 1)], low nibble for g < 2, high for g >= 2.
  // High 2 bits: bits 2g..2g+1 of qh[32n + l]. Scale: scales[8n + g*2 + l/16].
  for (int y = 0; y < 256; ++y) {
    const int n = y / 128, r = y % 128, g = r / 32, l = r % 32;
    const uint8_t ql = b[64 * n + l + 32 * (g & 1)];
    const int lo = g < 2 ? (ql & 0xF) : (ql >> 4);
    const int hi = (b[128 + 32 * n + l] >> (2 * g)) & 3;
    const int q = (lo | (hi << 4)) - 32;
    const float s = static_cast<float>(scales[8 * n + 2 * g + l / 16]);
    EXPECT_EQ(o[y], 0.03125f * s * static_cast<float>(q)) << y;
  }
}

TEST(Dequant, ManyBlocksInOneRow) {
  std::vector<uint8_t> b(3 * 34, 0);
  for (int blk = 0; blk < 3; ++blk) {
    put_f16(b, blk * 34, static_cast<float>(blk + 1));
    for (int j = 0; j < 32; ++j) b[blk * 34 + 2 + j] = static_cast<uint8_t>(j - 16);
  }
  const auto o = deq(kGgmlQ8_0, b, 96);
  for (int i = 0; i < 96; ++i) EXPECT_EQ(o[i], static_cast<float>((i % 32) - 16) * (i / 32 + 1)) << i;
}

TEST(Dequant, RejectsUnknownTypesAndPartialBlocks) {
  std::vector<uint8_t> b(512, 0);
  std::vector<float> o(512);
  for (uint32_t t : {4u, 5u, 9u, 10u, 11u, 15u, 16u, 20u, 29u, 31u, 39u, 1000u}) {
    EXPECT_FALSE(dequant_supported(t)) << t;
    EXPECT_THROW(dequantize_row(t, b.data(), o.data(), 256), std::invalid_argument) << t;
  }
  EXPECT_THROW(dequantize_row(kGgmlQ4_0, b.data(), o.data(), 31), std::invalid_argument);
  EXPECT_THROW(dequantize_row(kGgmlQ6_K, b.data(), o.data(), 128), std::invalid_argument);
}

TEST(MatmulF16, MatchesScalarReference) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (size_t k : {size_t(7), size_t(64), size_t(333), size_t(640)}) {
    const size_t rows = 37, n = 6;
    std::vector<uint16_t> w(rows * k);
    std::vector<float> x(n * k);
    for (auto& e : w) e = f32_to_f16(nd(rng) * 0.05f);
    for (auto& e : x) e = nd(rng);
    std::vector<float> r(n * (rows + 3), -7.0f);
    matmul_f16_reference(w.data(), rows, k, x.data(), n, r.data(), rows + 3);
    for (int isa = 0; isa <= static_cast<int>(matmul_f16_best()); ++isa) {
    std::vector<float> y(n * (rows + 3), -7.0f);
    matmul_f16_with(static_cast<MatmulIsa>(isa), w.data(), rows, k, x.data(), n, y.data(), rows + 3);
    double norm = 0.0;
    for (size_t t = 0; t < n; ++t) {
      for (size_t i = 0; i < rows; ++i) {
        const float a = y[t * (rows + 3) + i], e = r[t * (rows + 3) + i];
        norm += std::fabs(e);
        // f32 accumulation over k terms against a double reference.
        EXPECT_NEAR(a, e, 1e-6 * k + 1e-5 * std::fabs(e)) << "isa " << isa << " k " << k << " " << t << " " << i;
      }
      for (size_t i = rows; i < rows + 3; ++i) EXPECT_EQ(y[t * (rows + 3) + i], -7.0f);  // ldy gap untouched
    }
    EXPECT_GT(norm, 1.0);
    }
  }
}

TEST(MatmulF16, OneTokenEqualsTheSameTokenInABatch) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const size_t rows = 50, k = 200, n = 7;
  std::vector<uint16_t> w(rows * k);
  std::vector<float> x(n * k);
  for (auto& e : w) e = f32_to_f16(nd(rng));
  for (auto& e : x) e = nd(rng);
  std::vector<float> all(n * rows), one(rows);
  matmul_f16(w.data(), rows, k, x.data(), n, all.data(), rows);
  for (size_t t = 0; t < n; ++t) {
    matmul_f16(w.data(), rows, k, x.data() + t * k, 1, one.data(), rows);
    EXPECT_EQ(0, std::memcmp(one.data(), all.data() + t * rows, rows * 4)) << t;
  }
  std::vector<float> t1(n * rows), t2(n * rows);
  matmul_f16(w.data(), rows, k, x.data(), n, t1.data(), rows, 1);
  matmul_f16(w.data(), rows, k, x.data(), n, t2.data(), rows, 2);
  EXPECT_EQ(0, std::memcmp(t1.data(), t2.data(), t1.size() * 4));
}

TEST(MatmulQ8_0, MatchesDequantizedReference) {
  std::mt19937 rng(17);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_int_distribution<int> qd(-128, 127);
  const size_t rows = 45, k = 640, n = 5, row_bytes = k / 32 * 34;
  std::vector<uint8_t> w(rows * row_bytes);
  for (size_t r = 0; r < rows; ++r)
    for (size_t b = 0; b < k / 32; ++b) {
      uint8_t* blk = w.data() + r * row_bytes + b * 34;
      const uint16_t d = f32_to_f16(0.001f + 0.01f * std::fabs(nd(rng)));
      blk[0] = static_cast<uint8_t>(d & 0xFF);
      blk[1] = static_cast<uint8_t>(d >> 8);
      for (int j = 0; j < 32; ++j) blk[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(qd(rng)));
    }
  std::vector<float> x(n * k);
  for (auto& e : x) e = nd(rng);
  std::vector<float> y(n * rows), y1(n * rows), y2(n * rows), row(k);
  matmul_q8_0(w.data(), rows, k, x.data(), n, y.data(), rows);
  double norm = 0.0;
  for (size_t r = 0; r < rows; ++r) {
    dequantize_row(kGgmlQ8_0, w.data() + r * row_bytes, row.data(), k);
    for (size_t t = 0; t < n; ++t) {
      double e = 0.0;
      for (size_t i = 0; i < k; ++i) e += double(row[i]) * x[t * k + i];
      norm += std::fabs(e);
      EXPECT_NEAR(y[t * rows + r], e, 1e-5 * (1.0 + std::fabs(e))) << r << " " << t;
    }
  }
  EXPECT_GT(norm, 1.0);
  matmul_q8_0(w.data(), rows, k, x.data(), n, y1.data(), rows, 1);
  matmul_q8_0(w.data(), rows, k, x.data(), n, y2.data(), rows, 2);
  EXPECT_EQ(0, std::memcmp(y1.data(), y2.data(), y1.size() * 4));
  for (size_t t = 0; t < n; ++t) {
    std::vector<float> one(rows);
    matmul_q8_0(w.data(), rows, k, x.data() + t * k, 1, one.data(), rows);
    EXPECT_EQ(0, std::memcmp(one.data(), y.data() + t * rows, rows * 4)) << t;
  }
}

TEST(MatmulF16, Avx512EqualsAvx2BitForBit) {
  if (matmul_f16_best() != MatmulIsa::avx512) GTEST_SKIP() << "no AVX-512 on this machine";
  std::mt19937 rng(23);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (size_t k : {size_t(16), size_t(100), size_t(640), size_t(2048)})
    for (size_t n : {size_t(1), size_t(3), size_t(9)}) {
      const size_t rows = 37;  // row blocks of 16, tiles of 4 rows, and tails of both
      std::vector<uint16_t> w(rows * k);
      std::vector<float> x(n * k);
      for (auto& e : w) e = f32_to_f16(nd(rng) * 0.1f);
      for (auto& e : x) e = nd(rng);
      std::vector<float> a(n * rows), b(n * rows);
      matmul_f16_with(MatmulIsa::avx2, w.data(), rows, k, x.data(), n, a.data(), rows);
      matmul_f16_with(MatmulIsa::avx512, w.data(), rows, k, x.data(), n, b.data(), rows);
      EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4)) << k << " " << n;
    }
}
