// The block formats sjkv knows, in one table (as ggml's type traits): every ggml/GGUF tensor
// type and sjkv's cache-only row formats, each with its name, GGUF type id, values and bytes
// per block, the reference decode and, where a cache arm stores the format, the reference
// encode. The GGUF reader, the replay's dequantizers, the cache arms and the planner read it.
//
// Ids are ggml's (ggml/include/ggml.h enum ggml_type) and block sizes ggml's block structs
// (ggml/src/ggml-common.h); the cache-only rows' sizes are the note's and this codec's
// (block_formats.cpp names each source). A BlockFormat's value is its GGUF id, as ggml's
// enum is; the cache-only rows, which have no id, count from kCacheOnlyFormatBase.
//
// The reference decodes are plain scalar code, the bits every fast path is tested against
// (tests/codec/test_block_formats.cpp, tests/replay/test_dequant.cpp). A null decode is a type
// sjkv cannot read yet.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "sjkv/hd.h"
#include "sjkv/tq5_tables.h"

namespace sjkv {

constexpr uint32_t kCacheOnlyFormatBase = 0x10000;

enum class BlockFormat : uint32_t {
  f32 = 0, f16 = 1, q4_0 = 2, q4_1 = 3, q5_0 = 6, q5_1 = 7, q8_0 = 8, q8_1 = 9,
  q2_k = 10, q3_k = 11, q4_k = 12, q5_k = 13, q6_k = 14, q8_k = 15,
  iq2_xxs = 16, iq2_xs = 17, iq3_xxs = 18, iq1_s = 19, iq4_nl = 20, iq3_s = 21, iq2_s = 22, iq4_xs = 23,
  i8 = 24, i16 = 25, i32 = 26, i64 = 27, f64 = 28, iq1_m = 29, bf16 = 30,
  tq1_0 = 34, tq2_0 = 35, mxfp4 = 39, nvfp4 = 40, q1_0 = 41, q2_0 = 42,
  // sjkv's cache-only rows (no GGUF id)
  tq6_0 = kCacheOnlyFormatBase, tq5_0, turbo3, turbo4,
};

constexpr uint32_t kNoGgufId = 0xFFFFFFFFu;

// n_blocks whole blocks from `src` to n_blocks x block_values floats.
using BlockDecodeFn = void (*)(const uint8_t* src, float* dst, size_t n_blocks);
// n_blocks x block_values finite floats to n_blocks whole blocks.
using BlockEncodeFn = void (*)(const float* src, uint8_t* dst, size_t n_blocks);

struct BlockFormatInfo {
  BlockFormat format;
  const char* name;       // ggml's type name ("q4_0", "q4_K", "bf16"); sjkv's for cache-only rows
  uint32_t block_values;
  uint32_t block_bytes;
  const char* source;     // where the block layout comes from
  uint32_t gguf_id;       // kNoGgufId for the cache-only rows
  const char* gguf_name;  // the name GGUF tools print ("Q4_K"); nullptr without a GGUF id
  BlockDecodeFn decode;   // nullptr: sjkv has no decoder for it yet
  BlockEncodeFn encode;   // set where a cache arm stores the format
};

// Every format: the GGUF types in id order, then the cache-only rows.
const std::vector<BlockFormatInfo>& block_formats();
const BlockFormatInfo& format_info(BlockFormat f);
// nullptr for an unknown or removed id.
const BlockFormatInfo* format_by_gguf_id(uint32_t id);
// Case-insensitive ("Q4_K", "q4_k", "turbo3"); nullptr for an unknown name.
const BlockFormatInfo* format_by_name(std::string_view name);
// The name of a type id that ggml removed from GGUF files (Q4_2, Q4_0_4_4, ...), else nullptr.
const char* removed_gguf_type_name(uint32_t id);
double format_bits(BlockFormat f);  // 8 x block_bytes / block_values

// Decode / encode n values (a whole number of blocks) through the table's reference.
void decode_blocks(BlockFormat f, const uint8_t* src, float* dst, size_t n);
void encode_blocks(BlockFormat f, const float* src, uint8_t* dst, size_t n);

// ---- The value tables the lookup formats decode through -------------------------------------
namespace blockfmt {

// ggml's kvalues_iq4nl (ggml-common.h).
inline constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};

// TurboQuant fork centroids and their decision midpoints (turbo-quant.cuh; the fork calls
// both tables Lloyd-Max for N(0, 1/128)).
inline constexpr float kTurbo3Centroids[8] = {-0.190685f, -0.117832f, -0.065717f, -0.021460f,
                                              0.021460f,  0.065717f,  0.117832f,  0.190685f};
inline constexpr float kTurbo3Mid[7] = {-0.154259f, -0.091775f, -0.043589f, 0.0f, 0.043589f, 0.091775f, 0.154259f};
inline constexpr float kTurbo4Centroids[16] = {-0.173926f, -0.117195f, -0.089527f, -0.068756f,
                                               -0.051262f, -0.035597f, -0.020989f, -0.006938f,
                                               0.006938f,  0.020989f,  0.035597f,  0.051262f,
                                               0.068756f,  0.089527f,  0.117195f,  0.173926f};
inline constexpr float kTurbo4Mid[15] = {-0.145561f, -0.103361f, -0.079142f, -0.060009f, -0.043430f,
                                         -0.028293f, -0.013964f, 0.0f,       0.013964f,  0.028293f,
                                         0.043430f,  0.060009f,  0.079142f,  0.103361f,  0.145561f};

// Shared by the reference decoders and their fast paths: a little-endian u32, and a K-quant's
// packed sub-block scales.
inline uint32_t le32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) | (static_cast<uint32_t>(p[2]) << 16) |
         (static_cast<uint32_t>(p[3]) << 24);
}

// The 6-bit scale and min of sub-block j (0..7) packed in a K-quant's 12 scale bytes.
inline void scale_min_k4(uint32_t j, const uint8_t* q, uint32_t& sc, uint32_t& m) {
  if (j < 4) {
    sc = q[j] & 63u;
    m = q[j + 4] & 63u;
  } else {
    sc = (q[j + 4] & 0xFu) | ((q[j - 4] >> 6) << 4);
    m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// The signed 6-bit scale (-32..31) of Q3_K's sub-block k (0..15): its low nibble from
// sc[k % 8] (k < 8: the low half, else the high), its top 2 bits from sc[8 + k % 4] at bit 2 (k / 4).
inline int q3_k_scale(const uint8_t* sc, uint32_t k) {
  const uint32_t lo = (k < 8 ? sc[k] : sc[k - 8] >> 4) & 0xFu;
  const uint32_t hi = (sc[8 + k % 4] >> (2 * (k / 4))) & 3u;
  return static_cast<int>(lo | (hi << 4)) - 32;
}
// The signed 6-bit scale (-32..31) of IQ4_XS's sub-block ib (0..7): its low nibble from the
// scales_l bytes at b + 4, its top 2 bits from the little-endian u16 scales_h at b + 2.
inline int iq4_xs_scale(const uint8_t* b, uint32_t ib) {
  const uint32_t scales_h = static_cast<uint32_t>(b[2]) | (static_cast<uint32_t>(b[3]) << 8);
  const uint32_t lo = (b[4 + ib / 2] >> (4 * (ib % 2))) & 0xFu, hi = (scales_h >> (2 * ib)) & 3u;
  return static_cast<int>(lo | (hi << 4)) - 32;
}

inline uint16_t f32_to_bf16(float x) {  // ggml_compute_fp32_to_bf16: RNE, NaN kept quiet
  const uint32_t u = f32_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 64u);
  return static_cast<uint16_t>((u + (0x7fffu + ((u >> 16) & 1u))) >> 16);
}

// tq5_0 level k (tq5_tables.h) and code i of a 128-value tq5_0 block (code i in bits 5i ..
// 5i+4 of bytes 2 .. 81, little-endian).
inline float tq5_centroid(uint32_t k) { return f32_from_bits(kTq5CentroidBits[k]); }
inline uint32_t tq5_block_code(const uint8_t* blk, uint32_t i) {
  const uint32_t bit = 5 * i, byte = 2 + bit / 8, shift = bit % 8;
  const uint32_t w = blk[byte] | (shift > 3 ? static_cast<uint32_t>(blk[byte + 1]) << 8 : 0u);
  return (w >> shift) & 31u;
}

}  // namespace blockfmt
}  // namespace sjkv
