// The block-format table's decoders of the low-bit weight formats (sjkv/block_formats.h; the
// scalar code in codec/src/block_decode_lowbit.h, IQ4_NL's the arms' own) against gguf.quants's
// numpy dequantizers, bit for bit, on the fixtures of scripts/make-quant-fixtures.py
// (tests/golden/quants/TYPE.bin: random and edge blocks, the package's float32 output).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <ostream>
#include <string>
#include <vector>

#include "sjkv/block_formats.h"
#include "../golden.h"

namespace {

struct LowbitCase {
  const char* name;     // GGMLQuantizationType name, as in the fixture header
  uint32_t ggml_type;   // GGMLQuantizationType value
  uint32_t values;      // per block
  uint32_t bytes;       // per block
  // One bit of one block whose flip must change the decode (a block with a nonzero scale,
  // a bit of the quantized data).
  uint32_t mut_block, mut_byte;
  uint8_t mut_mask;
};

// Sizes: gguf.constants.GGML_QUANT_SIZES (= ggml's type traits). The first edge block of the
// fp16-scaled types is block 10 (after the 10 scale blocks), with d = 1.0.
const LowbitCase kCases[] = {
    {"Q2_K", 10, 256, 84, 10, 16 + 31, 0x01},
    {"Q3_K", 11, 256, 110, 10, 0, 0x01},
    {"IQ2_XXS", 16, 256, 66, 10, 2, 0x01},
    {"IQ2_XS", 17, 256, 74, 10, 2, 0x01},
    {"IQ3_XXS", 18, 256, 98, 10, 2, 0x01},
    {"IQ1_S", 19, 256, 50, 10, 2, 0x01},
    {"IQ4_NL", 20, 32, 18, 10, 2, 0x01},
    {"IQ3_S", 21, 256, 110, 10, 2, 0x01},
    {"IQ2_S", 22, 256, 82, 10, 2, 0x01},
    {"IQ4_XS", 23, 256, 136, 10, 8, 0x01},
    {"IQ1_M", 29, 256, 56, 10, 0, 0x01},
    {"TQ1_0", 34, 256, 54, 10, 0, 0x80},
    {"TQ2_0", 35, 256, 66, 10, 0, 0x01},
    {"MXFP4", 39, 32, 17, 127, 1, 0x01},  // block 127: e = 127
    {"NVFP4", 40, 64, 36, 1, 4, 0x01},    // block 1: scale byte 1
    // No gguf.quants dequantizer: the expected values are ggml's own to_float
    // (make-quant-fixtures.py --ggml-lib). Sizes: ggml-common.h.
    {"Q1_0", 41, 128, 18, 10, 2, 0x01},
    {"Q2_0", 42, 64, 18, 10, 2, 0x01},
};

// Names the case in test output (and in ctest's test names) instead of its bytes.
void PrintTo(const LowbitCase& c, std::ostream* os) { *os << c.name; }

struct Fixture {
  uint32_t n_blocks = 0;
  std::vector<uint8_t> blocks;
  std::vector<float> expected;
};

uint32_t rd32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}

uint32_t bits_of(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

// Reads and checks tests/golden/quants/NAME.bin against the case's facts.
Fixture load_fixture(const LowbitCase& c) {
  const std::string path = sjkv_test::golden_path(std::string("quants/") + c.name + ".bin");
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << path << ": cannot open (scripts/make-quant-fixtures.py writes it)";
  const std::vector<uint8_t> raw((std::istreambuf_iterator<char>(f)),
                                 std::istreambuf_iterator<char>());
  Fixture fx;
  constexpr size_t kHeader = 8 + 16 + 4 * 4;
  if (raw.size() < kHeader) {
    ADD_FAILURE() << path << ": " << raw.size() << " bytes, shorter than the header";
    return fx;
  }
  EXPECT_EQ(0, std::memcmp(raw.data(), "SJKVQNT1", 8)) << path << ": bad magic";
  char name[17] = {};
  std::memcpy(name, raw.data() + 8, 16);
  EXPECT_STREQ(c.name, name) << path;
  EXPECT_EQ(c.ggml_type, rd32(raw.data() + 24)) << path << ": ggml type";
  const uint32_t n = rd32(raw.data() + 28);
  EXPECT_EQ(c.bytes, rd32(raw.data() + 32)) << path << ": block bytes";
  EXPECT_EQ(c.values, rd32(raw.data() + 36)) << path << ": values per block";
  const size_t want = kHeader + static_cast<size_t>(n) * (c.bytes + 4u * c.values);
  if (raw.size() != want || n == 0) {
    ADD_FAILURE() << path << ": " << raw.size() << " bytes, " << want << " expected for " << n
                  << " blocks";
    return fx;
  }
  fx.n_blocks = n;
  const uint8_t* p = raw.data() + kHeader;
  fx.blocks.assign(p, p + static_cast<size_t>(n) * c.bytes);
  fx.expected.resize(static_cast<size_t>(n) * c.values);
  std::memcpy(fx.expected.data(), p + fx.blocks.size(), fx.expected.size() * 4);
  return fx;
}

// Decodes one block into a buffer with sentinels on both sides; fails on a write outside.
std::vector<float> decode_checked(const LowbitCase& c, const uint8_t* block) {
  constexpr uint32_t kPad = 16;
  const float sentinel = -1234.5f;
  std::vector<float> buf(c.values + 2 * kPad, sentinel);
  const sjkv::BlockFormatInfo* f = sjkv::format_by_gguf_id(c.ggml_type);
  EXPECT_TRUE(f && f->decode && f->block_values == c.values && f->block_bytes == c.bytes) << c.name;
  if (!f || !f->decode) return {};
  f->decode(block, buf.data() + kPad, 1);
  for (uint32_t i = 0; i < kPad; ++i) {
    EXPECT_EQ(bits_of(sentinel), bits_of(buf[i])) << c.name << ": write before the block";
    EXPECT_EQ(bits_of(sentinel), bits_of(buf[kPad + c.values + i]))
        << c.name << ": write past the block";
  }
  return std::vector<float>(buf.begin() + kPad, buf.begin() + kPad + c.values);
}

// Same bits, or NaN in both (a NaN's payload is not part of the check).
bool same_value(float got, float want) {
  if (std::isnan(got) || std::isnan(want)) return std::isnan(got) && std::isnan(want);
  return bits_of(got) == bits_of(want);
}

class LowbitDecode : public ::testing::TestWithParam<LowbitCase> {};

TEST_P(LowbitDecode, MatchesGgufQuantsBitForBit) {
  const LowbitCase& c = GetParam();
  const Fixture fx = load_fixture(c);
  ASSERT_GT(fx.n_blocks, 0u);
  size_t nonzero = 0;
  uint32_t bad_blocks = 0;
  for (uint32_t b = 0; b < fx.n_blocks; ++b) {
    const std::vector<float> got = decode_checked(c, fx.blocks.data() + size_t{b} * c.bytes);
    const float* want = fx.expected.data() + size_t{b} * c.values;
    uint32_t first_bad = c.values;
    for (uint32_t i = 0; i < c.values; ++i) {
      if (want[i] != 0.0f) ++nonzero;
      if (!same_value(got[i], want[i]) && first_bad == c.values) first_bad = i;
    }
    if (first_bad != c.values) {
      ++bad_blocks;
      if (bad_blocks <= 5)
        ADD_FAILURE() << c.name << " block " << b << " value " << first_bad << ": got 0x"
                      << std::hex << bits_of(got[first_bad]) << " (" << got[first_bad]
                      << "), gguf.quants 0x" << bits_of(want[first_bad]) << " ("
                      << want[first_bad] << ")";
    }
  }
  EXPECT_EQ(0u, bad_blocks) << c.name << ": blocks that differ, of " << fx.n_blocks;
  // A fixture of zeros would pass any decoder.
  EXPECT_GT(nonzero, fx.expected.size() / 2) << c.name << ": too few nonzero values";
}

TEST_P(LowbitDecode, FlippedBitChangesTheOutput) {
  const LowbitCase& c = GetParam();
  const Fixture fx = load_fixture(c);
  ASSERT_GT(fx.n_blocks, c.mut_block);
  std::vector<uint8_t> block(fx.blocks.begin() + size_t{c.mut_block} * c.bytes,
                             fx.blocks.begin() + size_t{c.mut_block + 1} * c.bytes);
  block[c.mut_byte] ^= c.mut_mask;
  const std::vector<float> got = decode_checked(c, block.data());
  const float* want = fx.expected.data() + size_t{c.mut_block} * c.values;
  uint32_t differ = 0;
  for (uint32_t i = 0; i < c.values; ++i) differ += same_value(got[i], want[i]) ? 0 : 1;
  EXPECT_GT(differ, 0u) << c.name << ": flipping byte " << c.mut_byte << " mask 0x" << std::hex
                        << int{c.mut_mask} << " of block " << std::dec << c.mut_block
                        << " left the output unchanged";
}

INSTANTIATE_TEST_SUITE_P(Types, LowbitDecode, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<LowbitCase>& info) {
                           return std::string(info.param.name);
                         });

}  // namespace
