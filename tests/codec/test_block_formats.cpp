// The block formats table (block_formats.h): its facts against ggml's (ids from ggml.h's enum
// ggml_type, block sizes from ggml-common.h's block structs), its lookups, and its reference
// decoders against the decoders they replaced (replay/src/dequant.cpp's, which widened fp16
// scales with f16_to_f32, and replay/src/kv_arms_formats.h's, which widened them through
// f16_to_f32_table()), bit for bit on random blocks, NaN and infinite scales included.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "sjkv/block_formats.h"
#include "sjkv/decode_fast.h"
#include "sjkv/fp16.h"
#include "sjkv/layout.h"
#include "sjkv/staging.h"

namespace {

using sjkv::BlockFormat;
using sjkv::BlockFormatInfo;
using namespace sjkv::blockfmt;

// ---- Facts -----------------------------------------------------------------------------------

struct Fact {
  uint32_t id;
  const char* gguf_name;
  uint32_t values;
  uint32_t bytes;
};
// ggml.h ids; bytes from ggml-common.h (e.g. block_q2_K: 2 f16 + QK_K/16 scales + QK_K/4 qs).
const Fact kFacts[] = {
    {0, "F32", 1, 4},         {1, "F16", 1, 2},        {2, "Q4_0", 32, 18},      {3, "Q4_1", 32, 20},
    {6, "Q5_0", 32, 22},      {7, "Q5_1", 32, 24},     {8, "Q8_0", 32, 34},      {9, "Q8_1", 32, 36},
    {10, "Q2_K", 256, 84},    {11, "Q3_K", 256, 110},  {12, "Q4_K", 256, 144},   {13, "Q5_K", 256, 176},
    {14, "Q6_K", 256, 210},   {15, "Q8_K", 256, 292},  {16, "IQ2_XXS", 256, 66}, {17, "IQ2_XS", 256, 74},
    {18, "IQ3_XXS", 256, 98}, {19, "IQ1_S", 256, 50},  {20, "IQ4_NL", 32, 18},   {21, "IQ3_S", 256, 110},
    {22, "IQ2_S", 256, 82},   {23, "IQ4_XS", 256, 136}, {24, "I8", 1, 1},        {25, "I16", 1, 2},
    {26, "I32", 1, 4},        {27, "I64", 1, 8},       {28, "F64", 1, 8},        {29, "IQ1_M", 256, 56},
    {30, "BF16", 1, 2},       {34, "TQ1_0", 256, 54},  {35, "TQ2_0", 256, 66},   {39, "MXFP4", 32, 17},
    {40, "NVFP4", 64, 36},    {41, "Q1_0", 128, 18},   {42, "Q2_0", 64, 18},
};

TEST(BlockFormats, GgufTypesAreGgmls) {
  size_t gguf = 0;
  for (const BlockFormatInfo& i : sjkv::block_formats())
    if (i.gguf_id != sjkv::kNoGgufId) ++gguf;
  EXPECT_EQ(gguf, std::size(kFacts));
  for (const Fact& f : kFacts) {
    const BlockFormatInfo* i = sjkv::format_by_gguf_id(f.id);
    ASSERT_NE(i, nullptr) << f.gguf_name;
    EXPECT_EQ(i->gguf_id, f.id);
    EXPECT_EQ(static_cast<uint32_t>(i->format), f.id) << "a BlockFormat's value is its GGUF id";
    EXPECT_STREQ(i->gguf_name, f.gguf_name);
    EXPECT_EQ(i->block_values, f.values) << f.gguf_name;
    EXPECT_EQ(i->block_bytes, f.bytes) << f.gguf_name;
    EXPECT_EQ(sjkv::format_by_name(f.gguf_name), i) << f.gguf_name;
    EXPECT_EQ(&sjkv::format_info(i->format), i);
  }
}

TEST(BlockFormats, RemovedAndUnknownIds) {
  const std::pair<uint32_t, const char*> removed[] = {{4, "Q4_2"},      {5, "Q4_3"},       {31, "Q4_0_4_4"},
                                                      {32, "Q4_0_4_8"}, {33, "Q4_0_8_8"},  {36, "IQ4_NL_4_4"},
                                                      {37, "IQ4_NL_4_8"}, {38, "IQ4_NL_8_8"}};
  for (const auto& [id, name] : removed) {
    EXPECT_EQ(sjkv::format_by_gguf_id(id), nullptr) << id;
    EXPECT_STREQ(sjkv::removed_gguf_type_name(id), name);
  }
  for (uint32_t id : {43u, 1000u, sjkv::kCacheOnlyFormatBase, sjkv::kNoGgufId}) {
    EXPECT_EQ(sjkv::format_by_gguf_id(id), nullptr) << id;
    EXPECT_EQ(sjkv::removed_gguf_type_name(id), nullptr) << id;
  }
  EXPECT_THROW(sjkv::format_info(static_cast<BlockFormat>(4)), std::invalid_argument);
}

TEST(BlockFormats, CacheOnlyRows) {
  const Fact rows[] = {{0, "tq6_0", 128, 98}, {0, "tq5_0", 128, 82}, {0, "turbo3", 128, 50}, {0, "turbo4", 128, 66}};
  for (const Fact& f : rows) {
    const BlockFormatInfo* i = sjkv::format_by_name(f.gguf_name);
    ASSERT_NE(i, nullptr) << f.gguf_name;
    EXPECT_EQ(i->gguf_id, sjkv::kNoGgufId);
    EXPECT_EQ(i->gguf_name, nullptr);
    EXPECT_EQ(i->block_values, f.values);
    EXPECT_EQ(i->block_bytes, f.bytes);
    EXPECT_NE(i->decode, nullptr);
    EXPECT_NE(i->encode, nullptr);
  }
  EXPECT_EQ(sjkv::format_info(BlockFormat::tq6_0).block_bytes, sjkv::kTq6BlockBytes);
  EXPECT_EQ(sjkv::format_info(BlockFormat::q8_0).block_bytes, sjkv::kQ8BlockBytes);
}

TEST(BlockFormats, NamesAndLookups) {
  std::set<std::string> names;
  std::set<uint32_t> values;
  for (const BlockFormatInfo& i : sjkv::block_formats()) {
    EXPECT_TRUE(names.insert(i.name).second) << i.name;
    EXPECT_TRUE(values.insert(static_cast<uint32_t>(i.format)).second) << i.name;
    EXPECT_EQ(sjkv::format_by_name(i.name), &i) << i.name;
    EXPECT_NE(i.source, nullptr);
    EXPECT_GT(i.block_values, 0u);
    EXPECT_GT(i.block_bytes, 0u);
  }
  EXPECT_STREQ(sjkv::format_info(BlockFormat::q4_k).name, "q4_K");  // ggml's type name
  EXPECT_EQ(sjkv::format_by_name("Q4_k")->format, BlockFormat::q4_k);
  EXPECT_EQ(sjkv::format_by_name("q4_2"), nullptr);
  EXPECT_EQ(sjkv::format_by_name(""), nullptr);
  EXPECT_DOUBLE_EQ(sjkv::format_bits(BlockFormat::q2_k), 2.625);
}

// The formats sjkv decodes today, and the cache arms' (those with an encoder).
TEST(BlockFormats, DecodersAndEncodersPresent) {
  const std::set<BlockFormat> decoded = {
      BlockFormat::f32,  BlockFormat::f16,  BlockFormat::bf16, BlockFormat::q4_0,   BlockFormat::q4_1,
      BlockFormat::q5_0, BlockFormat::q5_1, BlockFormat::q8_0, BlockFormat::q4_k,   BlockFormat::q5_k,
      BlockFormat::q6_k, BlockFormat::iq4_nl, BlockFormat::tq6_0, BlockFormat::tq5_0, BlockFormat::turbo3,
      BlockFormat::turbo4};
  const std::set<BlockFormat> encoded = {
      BlockFormat::f32,  BlockFormat::f16,  BlockFormat::bf16,  BlockFormat::q4_0,  BlockFormat::q4_1,
      BlockFormat::q5_0, BlockFormat::q5_1, BlockFormat::q8_0,  BlockFormat::iq4_nl, BlockFormat::tq6_0,
      BlockFormat::tq5_0, BlockFormat::turbo3, BlockFormat::turbo4};
  for (const BlockFormatInfo& i : sjkv::block_formats()) {
    // Decoders of other types may arrive (issue 44); the ones here must stay.
    if (decoded.count(i.format)) {
      EXPECT_NE(i.decode, nullptr) << i.name;
    }
    EXPECT_EQ(i.encode != nullptr, encoded.count(i.format) == 1) << i.name;
  }
  std::vector<float> y(256);
  std::vector<uint8_t> b(64);
  EXPECT_THROW(sjkv::decode_blocks(BlockFormat::q4_0, b.data(), y.data(), 31), std::invalid_argument);
  EXPECT_THROW(sjkv::decode_blocks(BlockFormat::i8, b.data(), y.data(), 1), std::invalid_argument);
  EXPECT_THROW(sjkv::encode_blocks(BlockFormat::q4_k, y.data(), b.data(), 256), std::invalid_argument);
}

// ---- The decoders they replaced ---------------------------------------------------------------

namespace before {

float h2f(const uint8_t* p) { return sjkv::f16_to_f32(static_cast<uint16_t>(p[0] | (p[1] << 8))); }
float f16f(const uint8_t* p) { return sjkv::f16_to_f32_table()[sjkv::load_u16(p)]; }
uint32_t le32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) | (static_cast<uint32_t>(p[2]) << 16) |
         (static_cast<uint32_t>(p[3]) << 24);
}
void scale_min_k4(uint32_t j, const uint8_t* q, uint32_t& sc, uint32_t& m) {
  if (j < 4) {
    sc = q[j] & 63u;
    m = q[j + 4] & 63u;
  } else {
    sc = (q[j + 4] & 0xFu) | ((q[j - 4] >> 6) << 4);
    m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// replay/src/dequant.cpp
void dq_q4_0(const uint8_t* b, float* y) {
  const float d = h2f(b);
  for (uint32_t j = 0; j < 16; ++j) {
    y[j] = static_cast<float>(static_cast<int>(b[2 + j] & 0xF) - 8) * d;
    y[j + 16] = static_cast<float>(static_cast<int>(b[2 + j] >> 4) - 8) * d;
  }
}
void dq_q4_1(const uint8_t* b, float* y) {
  const float d = h2f(b), m = h2f(b + 2);
  for (uint32_t j = 0; j < 16; ++j) {
    y[j] = static_cast<float>(b[4 + j] & 0xF) * d + m;
    y[j + 16] = static_cast<float>(b[4 + j] >> 4) * d + m;
  }
}
void dq_q5_0(const uint8_t* b, float* y) {
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
void dq_q5_1(const uint8_t* b, float* y) {
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
void dq_q8_0(const uint8_t* b, float* y) {
  const float d = h2f(b);
  for (uint32_t j = 0; j < 32; ++j) y[j] = static_cast<float>(static_cast<int8_t>(b[2 + j])) * d;
}
void dq_q45_k(const uint8_t* b, float* y, bool five) {
  const float d = h2f(b), dmin = h2f(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* qs = b + (five ? 48 : 16);
  for (uint32_t j = 0; j < 4; ++j) {
    uint32_t sc0, m0, sc1, m1;
    scale_min_k4(2 * j, scales, sc0, m0);
    scale_min_k4(2 * j + 1, scales, sc1, m1);
    const float d0 = d * static_cast<float>(sc0), mm0 = dmin * static_cast<float>(m0);
    const float d1 = d * static_cast<float>(sc1), mm1 = dmin * static_cast<float>(m1);
    const uint32_t u0 = 1u << (2 * j), u1 = 2u << (2 * j);
    for (uint32_t l = 0; l < 32; ++l) {
      const uint32_t q0 = (qs[32 * j + l] & 0xFu) + (five && (qh[l] & u0) ? 16u : 0u);
      const uint32_t q1 = (qs[32 * j + l] >> 4) + (five && (qh[l] & u1) ? 16u : 0u);
      y[64 * j + l] = d0 * static_cast<float>(q0) - mm0;
      y[64 * j + 32 + l] = d1 * static_cast<float>(q1) - mm1;
    }
  }
}
void dq_q4_k(const uint8_t* b, float* y) { dq_q45_k(b, y, false); }
void dq_q5_k(const uint8_t* b, float* y) { dq_q45_k(b, y, true); }
void dq_q6_k(const uint8_t* b, float* y) {
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = h2f(b + 208);
  for (uint32_t half = 0; half < 2; ++half) {
    const uint8_t* l6 = b + 64 * half;
    const uint8_t* h6 = b + 128 + 32 * half;
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
void dq_f16(const uint8_t* b, float* y) { y[0] = h2f(b); }
void dq_bf16(const uint8_t* b, float* y) {
  const uint32_t u = (static_cast<uint32_t>(b[0]) | (static_cast<uint32_t>(b[1]) << 8)) << 16;
  std::memcpy(y, &u, 4);
}
void dq_f32(const uint8_t* b, float* y) { std::memcpy(y, b, 4); }

// replay/src/kv_arms_formats.h (scales through f16_to_f32_table())
void arm_q4_0(const uint8_t* y, float* xb) {
  const float s = f16f(y);
  for (int j = 0; j < 16; ++j) {
    xb[j] = static_cast<float>((y[2 + j] & 15) - 8) * s;
    xb[16 + j] = static_cast<float>((y[2 + j] >> 4) - 8) * s;
  }
}
void arm_q4_1(const uint8_t* y, float* xb) {
  const float s = f16f(y), m = f16f(y + 2);
  for (int j = 0; j < 16; ++j) {
    xb[j] = static_cast<float>(y[4 + j] & 15) * s + m;
    xb[16 + j] = static_cast<float>(y[4 + j] >> 4) * s + m;
  }
}
void arm_q5(const uint8_t* y, float* xb, bool has_m) {
  const float s = f16f(y), m = has_m ? f16f(y + 2) : 0.0f;
  const uint8_t* qhp = y + (has_m ? 4 : 2);
  const uint8_t* qs = qhp + 4;
  const uint32_t qh = qhp[0] | (qhp[1] << 8) | (qhp[2] << 16) | (static_cast<uint32_t>(qhp[3]) << 24);
  for (int j = 0; j < 16; ++j) {
    const int a = (qs[j] & 15) | static_cast<int>(((qh >> j) & 1u) << 4);
    const int c = (qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
    if (has_m) {
      xb[j] = static_cast<float>(a) * s + m;
      xb[16 + j] = static_cast<float>(c) * s + m;
    } else {
      xb[j] = static_cast<float>(a - 16) * s;
      xb[16 + j] = static_cast<float>(c - 16) * s;
    }
  }
}
void arm_q5_0(const uint8_t* y, float* x) { arm_q5(y, x, false); }
void arm_q5_1(const uint8_t* y, float* x) { arm_q5(y, x, true); }
void arm_iq4_nl(const uint8_t* y, float* xb) {
  const float s = f16f(y);
  for (int j = 0; j < 16; ++j) {
    xb[j] = s * kIq4nlValues[y[2 + j] & 15];
    xb[16 + j] = s * kIq4nlValues[y[2 + j] >> 4];
  }
}
void arm_turbo3(const uint8_t* y, float* xb) {
  const float n = f16f(y);
  for (int j = 0; j < 128; ++j) {
    const int c = ((y[2 + j / 4] >> (2 * (j % 4))) & 3) | (((y[34 + j / 8] >> (j % 8)) & 1) << 2);
    xb[j] = kTurbo3Centroids[c] * n;
  }
}
void arm_turbo4(const uint8_t* y, float* xb) {
  const float n = f16f(y);
  for (int i = 0; i < 128; ++i) xb[i] = kTurbo4Centroids[(y[2 + i / 2] >> (4 * (i % 2))) & 15] * n;
}
void arm_tq5_0(const uint8_t* blk, float* out) {
  const float n = f16f(blk);
  for (uint32_t g = 0; g < 16; ++g) {
    uint64_t w = 0;
    for (uint32_t b = 0; b < 5; ++b) w |= static_cast<uint64_t>(blk[2 + 5 * g + b]) << (8 * b);
    for (uint32_t j = 0; j < 8; ++j) out[8 * g + j] = sjkv::op::fmul(tq5_centroid((w >> (5 * j)) & 31u), n);
  }
}
// The codec's staging rows, as the arms decode them (reference and fast).
template <sjkv::StagingType T, uint32_t V>
void staged(const uint8_t* b, float* y) { sjkv::staging_decode_row(T, b, V, y); }
template <sjkv::StagingType T, uint32_t V>
void staged_fast(const uint8_t* b, float* y) { sjkv::staging_decode_row_fast(T, b, V, y); }

}  // namespace before

using OneBlock = void (*)(const uint8_t*, float*);

// Random blocks of `f`: every byte random (so NaN, infinite and subnormal scales occur), then
// the same blocks with each f16 scale redrawn finite. Each is decoded one block at a time by
// `old` and as a row of 7 blocks by the table; the floats must agree bit for bit.
void expect_same_bits(BlockFormat f, OneBlock old, const char* what, uint32_t seed) {
  const BlockFormatInfo& i = sjkv::format_info(f);
  ASSERT_NE(i.decode, nullptr) << i.name;
  constexpr size_t kBlocks = 7, kRounds = 300;
  std::mt19937 rng(seed);
  std::vector<uint8_t> b(kBlocks * i.block_bytes);
  std::vector<float> want(kBlocks * i.block_values), got(want.size());
  size_t nonzero = 0;
  for (size_t r = 0; r < kRounds; ++r) {
    for (uint8_t& x : b) x = static_cast<uint8_t>(rng());
    if (r % 2 == 1 && i.block_values > 1) {  // finite scales: any exponent but 31
      for (size_t k = 0; k < kBlocks; ++k) {
        uint8_t* blk = b.data() + k * i.block_bytes;
        const size_t off = f == BlockFormat::q6_k ? 208 : 0;
        const size_t n_scales = (f == BlockFormat::q4_1 || f == BlockFormat::q5_1 || f == BlockFormat::q4_k ||
                                 f == BlockFormat::q5_k) ? 2 : 1;
        for (size_t s = 0; s < n_scales; ++s)
          if ((blk[off + 2 * s + 1] & 0x7c) == 0x7c) blk[off + 2 * s + 1] &= 0xbf;
      }
    }
    for (size_t k = 0; k < kBlocks; ++k) old(b.data() + k * i.block_bytes, want.data() + k * i.block_values);
    std::fill(got.begin(), got.end(), 0.0f);
    i.decode(b.data(), got.data(), kBlocks);
    for (size_t j = 0; j < want.size(); ++j) {
      ASSERT_EQ(sjkv::f32_bits(got[j]), sjkv::f32_bits(want[j]))
          << i.name << " vs " << what << ", round " << r << ", value " << j;
      nonzero += want[j] != 0.0f;
    }
  }
  EXPECT_GT(nonzero, kRounds * want.size() / 4) << i.name << ": the blocks decoded to zeros";
}

TEST(BlockFormats, F16WideningTableIsTheFunction) {
  // The two widenings the replaced decoders used give the same bits for every pattern.
  const float* t = sjkv::f16_to_f32_table();
  for (uint32_t h = 0; h < 65536; ++h)
    ASSERT_EQ(sjkv::f32_bits(t[h]), sjkv::f32_bits(sjkv::f16_to_f32(static_cast<uint16_t>(h)))) << h;
}

TEST(BlockFormats, DecodersAreTheDequantizersTheyReplaced) {
  expect_same_bits(BlockFormat::f32, before::dq_f32, "dequant.cpp", 1);
  expect_same_bits(BlockFormat::f16, before::dq_f16, "dequant.cpp", 2);
  expect_same_bits(BlockFormat::bf16, before::dq_bf16, "dequant.cpp", 3);
  expect_same_bits(BlockFormat::q4_0, before::dq_q4_0, "dequant.cpp", 4);
  expect_same_bits(BlockFormat::q4_1, before::dq_q4_1, "dequant.cpp", 5);
  expect_same_bits(BlockFormat::q5_0, before::dq_q5_0, "dequant.cpp", 6);
  expect_same_bits(BlockFormat::q5_1, before::dq_q5_1, "dequant.cpp", 7);
  expect_same_bits(BlockFormat::q8_0, before::dq_q8_0, "dequant.cpp", 8);
  expect_same_bits(BlockFormat::q4_k, before::dq_q4_k, "dequant.cpp", 9);
  expect_same_bits(BlockFormat::q5_k, before::dq_q5_k, "dequant.cpp", 10);
  expect_same_bits(BlockFormat::q6_k, before::dq_q6_k, "dequant.cpp", 11);
}

TEST(BlockFormats, DecodersAreTheArmDecodersTheyReplaced) {
  expect_same_bits(BlockFormat::q4_0, before::arm_q4_0, "kv_arms_formats.h", 21);
  expect_same_bits(BlockFormat::q4_1, before::arm_q4_1, "kv_arms_formats.h", 22);
  expect_same_bits(BlockFormat::q5_0, before::arm_q5_0, "kv_arms_formats.h", 23);
  expect_same_bits(BlockFormat::q5_1, before::arm_q5_1, "kv_arms_formats.h", 24);
  expect_same_bits(BlockFormat::iq4_nl, before::arm_iq4_nl, "kv_arms_formats.h", 25);
  expect_same_bits(BlockFormat::turbo3, before::arm_turbo3, "kv_arms_formats.h", 26);
  expect_same_bits(BlockFormat::turbo4, before::arm_turbo4, "kv_arms_formats.h", 27);
  expect_same_bits(BlockFormat::tq5_0, before::arm_tq5_0, "kv_arms_formats.h", 28);
}

TEST(BlockFormats, DecodersAreTheCodecStagingRows) {
  using sjkv::StagingType;
  expect_same_bits(BlockFormat::f16, before::staged<StagingType::f16, 1>, "staging_decode_row", 31);
  expect_same_bits(BlockFormat::f16, before::staged_fast<StagingType::f16, 1>, "staging_decode_row_fast", 32);
  expect_same_bits(BlockFormat::q8_0, before::staged<StagingType::q8_0, 32>, "staging_decode_row", 33);
  expect_same_bits(BlockFormat::q8_0, before::staged_fast<StagingType::q8_0, 32>, "staging_decode_row_fast", 34);
  expect_same_bits(BlockFormat::tq6_0, before::staged<StagingType::tq6_0, 128>, "staging_decode_row", 35);
  expect_same_bits(BlockFormat::tq6_0, before::staged_fast<StagingType::tq6_0, 128>, "staging_decode_row_fast", 36);
}

// Encoders: the staging rows are the codec's own bytes; every encoder's blocks decode back
// near their input (a smoke check; tests/replay/test_arms.cpp pins the bytes).
TEST(BlockFormats, EncodersAreTheStagingRowsAndRoundTrip) {
  std::mt19937 rng(7);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(256);
  for (float& v : x) v = g(rng);
  for (const BlockFormatInfo& i : sjkv::block_formats()) {
    if (!i.encode) continue;
    std::vector<uint8_t> b(x.size() / i.block_values * i.block_bytes);
    std::vector<float> y(x.size());
    sjkv::encode_blocks(i.format, x.data(), b.data(), x.size());
    sjkv::decode_blocks(i.format, b.data(), y.data(), y.size());
    double err = 0, norm = 0;
    for (size_t j = 0; j < x.size(); ++j) {
      err += (x[j] - y[j]) * (x[j] - y[j]);
      norm += x[j] * x[j];
    }
    EXPECT_LT(err / norm, 0.06) << i.name;  // turbo3, the coarsest, keeps about 3% of the energy as error
  }
  const std::pair<BlockFormat, sjkv::StagingType> staged[] = {{BlockFormat::f16, sjkv::StagingType::f16},
                                                              {BlockFormat::q8_0, sjkv::StagingType::q8_0},
                                                              {BlockFormat::tq6_0, sjkv::StagingType::tq6_0}};
  for (const auto& [f, st] : staged) {
    std::vector<uint8_t> a(sjkv::staging_row_bytes(st, 256)), b(a.size());
    sjkv::staging_encode_row(st, x.data(), 256, a.data());
    sjkv::encode_blocks(f, x.data(), b.data(), 256);
    EXPECT_EQ(a, b) << sjkv::format_info(f).name;
  }
}

}  // namespace
