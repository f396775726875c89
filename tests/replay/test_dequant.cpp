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
  // removed ids, Q8_1 and Q8_K (activation blocks), 43+
  for (uint32_t t : {4u, 5u, 9u, 15u, 31u, 43u, 1000u}) {
    EXPECT_FALSE(dequant_supported(t)) << t;
    EXPECT_THROW(dequantize_row(t, b.data(), o.data(), 256), std::invalid_argument) << t;
  }
  EXPECT_THROW(dequantize_row(kGgmlQ4_0, b.data(), o.data(), 31), std::invalid_argument);
  EXPECT_THROW(dequantize_row(kGgmlQ6_K, b.data(), o.data(), 128), std::invalid_argument);
}

// Random blocks of every type with finite scales: the AVX2 dequantizers give the portable
// floats bit for bit, and dequant_finite sees a non-finite scale wherever it is.
std::vector<uint8_t> random_blocks(uint32_t type, size_t n, std::mt19937& rng) {
  const size_t bytes = n / dequant_block_values(type) * dequant_block_bytes(type);
  std::vector<uint8_t> b(bytes);
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& e : b) e = static_cast<uint8_t>(byte(rng));
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const size_t bb = dequant_block_bytes(type), nb = bytes / bb;
  auto scale = [&](size_t at) { put_f16(b, at, 0.01f * nd(rng)); };
  for (size_t i = 0; i < nb; ++i) {
    const size_t o = i * bb;
    switch (type) {
      case kGgmlF16: put_f16(b, o, 3.0f * nd(rng)); break;
      case kGgmlBF16: b[o + 1] = static_cast<uint8_t>(b[o + 1] & 0xBF); break;  // exponent below all ones
      case kGgmlF32: {
        const float x = nd(rng);
        std::memcpy(b.data() + o, &x, 4);
        break;
      }
      case kGgmlQ6_K: scale(o + 208); break;
      case kGgmlQ4_1: case kGgmlQ5_1: case kGgmlQ4_K: case kGgmlQ5_K: scale(o); scale(o + 2); break;
      case kGgmlQ2_K: scale(o + 80); scale(o + 82); break;
      case kGgmlQ3_K: scale(o + 108); break;
      default: scale(o); break;
    }
  }
  return b;
}

TEST(Dequant, FastEqualsPortableBitForBit) {
  if (!dequant_simd()) GTEST_SKIP() << "no AVX2 on this machine";
  std::mt19937 rng(29);
  for (uint32_t type : {kGgmlF32, kGgmlF16, kGgmlBF16, kGgmlQ4_0, kGgmlQ4_1, kGgmlQ5_0, kGgmlQ5_1, kGgmlQ8_0,
                        kGgmlQ4_K, kGgmlQ5_K, kGgmlQ6_K, kGgmlQ2_K, kGgmlQ3_K, kGgmlIQ4_NL, kGgmlIQ4_XS}) {
    const size_t n = 256 * 7 + (dequant_block_values(type) == 1 ? 5 : 0);
    const auto b = random_blocks(type, n, rng);
    std::vector<float> a(n + 1, -1.0f), f(n + 1, -1.0f);
    dequantize_row_with(false, type, b.data(), a.data(), n);
    dequantize_row_fast(type, b.data(), f.data(), n);
    EXPECT_EQ(f[n], -1.0f) << type;  // nothing written past n
    EXPECT_EQ(0, std::memcmp(a.data(), f.data(), n * 4)) << "type " << type;
    EXPECT_TRUE(dequant_finite(type, b.data(), n)) << type;
    double norm = 0.0;
    for (size_t i = 0; i < n; ++i) norm += std::fabs(a[i]);
    EXPECT_GT(norm, 0.0) << type;
  }
}

// The AVX2 walkers read block scales with F16C where it is exact: every f16 pattern as a scale
// (subnormals, infinities, quiet and signalling NaNs included) decodes to the portable bits.
TEST(Dequant, FastScalesOfEveryF16PatternEqualPortable) {
  if (!dequant_simd()) GTEST_SKIP() << "no AVX2 on this machine";
  std::mt19937 rng(37);
  for (uint32_t type : {kGgmlQ8_0, kGgmlQ4_1, kGgmlQ4_K, kGgmlQ6_K, kGgmlQ3_K, kGgmlIQ4_XS}) {
    const size_t bb = dequant_block_bytes(type), bv = dequant_block_values(type), nb = 65536;
    std::vector<uint8_t> b = random_blocks(type, nb * bv, rng);
    for (size_t i = 0; i < nb; ++i) {
      uint8_t* blk = b.data() + i * bb;
      const size_t at = type == kGgmlQ6_K ? 208 : type == kGgmlQ3_K ? 108 : 0;
      blk[at] = static_cast<uint8_t>(i & 0xff);
      blk[at + 1] = static_cast<uint8_t>(i >> 8);
      if (type == kGgmlQ4_1 || type == kGgmlQ4_K) {  // the second scale too, another pattern
        blk[2] = static_cast<uint8_t>((i * 7919) & 0xff);
        blk[3] = static_cast<uint8_t>(((i * 7919) >> 8) & 0xff);
      }
    }
    std::vector<float> a(nb * bv), f(nb * bv);
    dequantize_row_with(false, type, b.data(), a.data(), nb * bv);
    dequantize_row_fast(type, b.data(), f.data(), nb * bv);
    EXPECT_EQ(0, std::memcmp(a.data(), f.data(), a.size() * 4)) << "type " << type;
  }
}

TEST(Dequant, FiniteCheckFindsEveryNonFiniteScale) {
  std::mt19937 rng(31);
  const uint16_t inf = 0x7c00, nan = 0x7e01;
  for (uint32_t type : {kGgmlQ4_0, kGgmlQ4_1, kGgmlQ5_0, kGgmlQ5_1, kGgmlQ8_0, kGgmlQ4_K, kGgmlQ5_K, kGgmlQ6_K, kGgmlF16}) {
    const size_t n = 512;
    const size_t bb = dequant_block_bytes(type);
    std::vector<size_t> offsets;
    if (type == kGgmlF16) offsets = {2 * 77};
    else if (type == kGgmlQ6_K) offsets = {bb + 208};
    else if (type == kGgmlQ4_1 || type == kGgmlQ5_1 || type == kGgmlQ4_K || type == kGgmlQ5_K) offsets = {bb, bb + 2};
    else offsets = {bb};
    for (size_t at : offsets)
      for (uint16_t bad : {inf, nan}) {
        auto b = random_blocks(type, n, rng);
        b[at] = static_cast<uint8_t>(bad & 0xFF);
        b[at + 1] = static_cast<uint8_t>(bad >> 8);
        EXPECT_FALSE(dequant_finite(type, b.data(), n)) << type << " at " << at;
      }
  }
  // The low-bit weight types: on single random blocks (random scales too, so some are not
  // finite), the check says exactly whether every decoded value is finite.
  for (uint32_t type : {kGgmlQ2_K, kGgmlQ3_K, kGgmlIQ2_XXS, kGgmlIQ2_XS, kGgmlIQ2_S, kGgmlIQ3_XXS, kGgmlIQ3_S,
                        kGgmlIQ1_S, kGgmlIQ1_M, kGgmlIQ4_NL, kGgmlIQ4_XS, kGgmlTQ1_0, kGgmlTQ2_0, kGgmlMXFP4, kGgmlNVFP4,
                        kGgmlQ1_0, kGgmlQ2_0}) {
    ASSERT_TRUE(dequant_supported(type)) << type;
    const size_t bv = dequant_block_values(type), bb = dequant_block_bytes(type);
    std::uniform_int_distribution<int> byte(0, 255);
    std::vector<uint8_t> b(bb);
    std::vector<float> y(bv);
    int finite = 0, not_finite = 0;
    for (int trial = 0; trial < 4000 && (finite < 20 || not_finite < 20); ++trial) {
      for (auto& e : b) e = static_cast<uint8_t>(byte(rng));
      dequantize_row(type, b.data(), y.data(), bv);
      bool all = true;
      for (float x : y) all = all && std::isfinite(x);
      EXPECT_EQ(dequant_finite(type, b.data(), bv), all) << "type " << type << " trial " << trial;
      ++(all ? finite : not_finite);
    }
    EXPECT_GE(finite, 20) << type;
    if (type != kGgmlNVFP4) {  // NVFP4's E4M3 scales are all finite
      EXPECT_GE(not_finite, 20) << type;
    }
  }
  std::vector<uint8_t> f32(16, 0);
  const float nanf = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(f32.data() + 8, &nanf, 4);
  EXPECT_FALSE(dequant_finite(kGgmlF32, f32.data(), 4));
  std::vector<uint8_t> bf(4, 0);
  bf[3] = 0x7f;
  bf[2] = 0x80;  // bf16 +inf
  EXPECT_FALSE(dequant_finite(kGgmlBF16, bf.data(), 2));
}
