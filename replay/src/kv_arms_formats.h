// Row formats of the replay cache arms: one head's D values of K or V at one position.
// The blocks are the block formats table's (sjkv/block_formats.h: sizes, reference encode and
// decode, each format's sources): ggml's reference row quantizers for q4_0 .. iq4_nl and bf16,
// the TurboQuant fork's turbo3/turbo4 groups, sjkv's tq5_0. This header maps the arms'
// RowFormat onto the table and keeps what is the arms' own: the fork's rotation, and the
// codec's fast decode of its staging rows.
// f16, q8_0 and tq6_0 rows are the codec's staging rows (docs/SPEC.md §4), encoded and decoded
// by the codec; its q8_0 block is llama.cpp's byte for byte on finite input with a normal
// binary32 block scale (tests/codec/test_staging.cpp, StagingQ8.BlockIsLlamaCppQ8_0OnFiniteInput).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "sjkv/block_formats.h"
#include "sjkv/decode_fast.h"
#include "sjkv/replay/arm_spec.h"
#include "sjkv/staging.h"

namespace sjkv {
namespace replay {
namespace fmt {

using RowFormat = replay::RowFormat;  // named by the arm specs (arm_spec.h)

// The tables' names under fmt, where the arms' tests look for them.
using blockfmt::f32_to_bf16;
using blockfmt::kIq4nlValues;
using blockfmt::kTq5MidpointBits;
using blockfmt::kTurbo3Centroids;
using blockfmt::kTurbo4Centroids;
using blockfmt::tq5_block_code;
using blockfmt::tq5_centroid;

// The table's entry of each arm row format.
inline BlockFormat block_format(RowFormat f) {
  switch (f) {
    case RowFormat::f32: return BlockFormat::f32;
    case RowFormat::f16: return BlockFormat::f16;
    case RowFormat::bf16: return BlockFormat::bf16;
    case RowFormat::q8_0: return BlockFormat::q8_0;
    case RowFormat::q4_0: return BlockFormat::q4_0;
    case RowFormat::q4_1: return BlockFormat::q4_1;
    case RowFormat::q5_0: return BlockFormat::q5_0;
    case RowFormat::q5_1: return BlockFormat::q5_1;
    case RowFormat::iq4_nl: return BlockFormat::iq4_nl;
    case RowFormat::turbo3: return BlockFormat::turbo3;
    case RowFormat::turbo4: return BlockFormat::turbo4;
    case RowFormat::tq5_0: return BlockFormat::tq5_0;
    case RowFormat::tq6_0: return BlockFormat::tq6_0;
  }
  return BlockFormat::f32;
}

// The formats that are codec staging rows, and their staging type.
inline bool codec_staging(RowFormat f, StagingType* t) {
  switch (f) {
    case RowFormat::f16: *t = StagingType::f16; return true;
    case RowFormat::q8_0: *t = StagingType::q8_0; return true;
    case RowFormat::tq6_0: *t = StagingType::tq6_0; return true;
    default: return false;
  }
}

inline uint32_t block_values(RowFormat f) { return format_info(block_format(f)).block_values; }
inline uint32_t block_bytes(RowFormat f) { return format_info(block_format(f)).block_bytes; }
inline uint32_t row_bytes(RowFormat f, uint32_t d) { return d / block_values(f) * block_bytes(f); }
inline double bits_per_value(RowFormat f) { return 8.0 * block_bytes(f) / block_values(f); }

// The fork's rotation of a 128-value group: R x = s2 .* H128(s1 .* x) with H128 the
// orthonormal Walsh-Hadamard transform and s1, s2 fixed sign vectors ("seed=42",
// TURBO_WHT_SIGNS1/2); bit i of these words is set where the sign is -1. Inverse: R^T y =
// s1 .* H128(s2 .* y).
static constexpr uint32_t kTurboSigns1[4] = {0xe46a0359u, 0x42f85949u, 0xa4c63bbbu, 0x49f250a9u};
static constexpr uint32_t kTurboSigns2[4] = {0x16acee90u, 0x3f628fdcu, 0xb7a5357au, 0xbea56562u};

inline void turbo_signs(float* x, const uint32_t* w) {
  for (uint32_t i = 0; i < 128; ++i)
    if ((w[i / 32] >> (i % 32)) & 1u) x[i] = -x[i];
}

// Encode one row of d values (the rotated group for turbo3/turbo4). Returns false on a
// non-finite input value.
inline bool encode_row(RowFormat f, const float* x, uint32_t d, uint8_t* out) {
  for (uint32_t i = 0; i < d; ++i)
    if (!std::isfinite(x[i])) return false;
  // A codec row that overflows fp16 is stored as the codec writes it (inf scale or value):
  // only non-finite input is refused here.
  const BlockFormatInfo& b = format_info(block_format(f));
  b.encode(x, out, d / b.block_values);
  return true;
}

// Decode as ggml's dequantize_row_* does: F(d) * code (+ F(m)). The codec's staging rows take
// its table-driven fast decode (the same bits, tests/codec/test_block_formats.cpp).
inline void decode_row(RowFormat f, const uint8_t* in, uint32_t d, float* x) {
  StagingType st = StagingType::f16;
  if (codec_staging(f, &st)) return staging_decode_row_fast(st, in, d, x);
  const BlockFormatInfo& b = format_info(block_format(f));
  b.decode(in, x, d / b.block_values);
}

}  // namespace fmt
}  // namespace replay
}  // namespace sjkv
