// Row formats of the replay cache arms: one head's D values of K or V at one position.
// Block layouts and rounding follow ggml's reference row quantizers (ggml/src/ggml-quants.c,
// quantize_row_*_ref, and ggml-common.h for the block structs): same block sizes, same
// scale rule, same rounding, so our caches hold the bytes llama.cpp's caches would. The
// TurboQuant-style rows follow the public llama-cpp-turboquant fork (TheTom, ggml-common.h
// block_turbo3_0 / block_turbo4_0 and the CUDA writer k_set_rows_turbo*): one 128-value
// group per block, fp16 corrected norm, centroid codes of the group rotated by the fork's
// signed Walsh-Hadamard transform. Written from the published layouts, not copied.
// tq5_0 is sjkv's reconstruction from the note's description: tq6_0's construction (docs/SPEC.md
// §4.2) at 5 bits, with our own Lloyd-Max table (tq5_tables.h) and bit order.
// f16, q8_0 and tq6_0 rows are the codec's staging rows (docs/SPEC.md §4), encoded and decoded
// by the codec; its q8_0 block is llama.cpp's byte for byte on finite input with a normal
// binary32 block scale (tests/codec/test_staging.cpp, StagingQ8.BlockIsLlamaCppQ8_0OnFiniteInput).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "sjkv/decode_fast.h"
#include "sjkv/fp16.h"
#include "sjkv/layout.h"
#include "sjkv/replay/arm_spec.h"
#include "sjkv/staging.h"
#include "tq5_tables.h"

namespace sjkv {
namespace replay {
namespace fmt {

using RowFormat = replay::RowFormat;  // named by the arm specs (arm_spec.h)

// The formats that are codec staging rows, and their staging type.
inline bool codec_staging(RowFormat f, StagingType* t) {
  switch (f) {
    case RowFormat::f16: *t = StagingType::f16; return true;
    case RowFormat::q8_0: *t = StagingType::q8_0; return true;
    case RowFormat::tq6_0: *t = StagingType::tq6_0; return true;
    default: return false;
  }
}

// Values per block and bytes per block (the codec's for its rows, ggml-common.h sizes for
// the others; turbo from the fork).
inline uint32_t block_values(RowFormat f) {
  StagingType st = StagingType::f16;
  if (codec_staging(f, &st)) return staging_block_values(st);
  switch (f) {
    case RowFormat::f32: case RowFormat::bf16: return 1;
    case RowFormat::turbo3: case RowFormat::turbo4: case RowFormat::tq5_0: return 128;
    default: return 32;
  }
}

inline uint32_t block_bytes(RowFormat f) {
  StagingType st = StagingType::f16;
  if (codec_staging(f, &st)) return staging_row_bytes(st, staging_block_values(st));
  switch (f) {
    case RowFormat::f32: return 4;
    case RowFormat::bf16: return 2;
    case RowFormat::q4_0: return 18;    // fp16 d, 16 B nibbles
    case RowFormat::q4_1: return 20;    // fp16 d, fp16 m, 16 B nibbles
    case RowFormat::q5_0: return 22;    // fp16 d, 4 B high bits, 16 B nibbles
    case RowFormat::q5_1: return 24;    // fp16 d, fp16 m, 4 B high bits, 16 B nibbles
    case RowFormat::iq4_nl: return 18;  // fp16 d, 16 B nibbles into the non-linear table
    case RowFormat::turbo3: return 50;  // fp16 norm, 32 B low 2 bits, 16 B high bit
    case RowFormat::turbo4: return 66;  // fp16 norm, 64 B nibbles (the fork's later layout without rnorm)
    case RowFormat::tq5_0: return 82;   // fp16 norm, 80 B of 5-bit codes
    default: break;
  }
  return 0;
}

inline uint32_t row_bytes(RowFormat f, uint32_t d) { return d / block_values(f) * block_bytes(f); }
inline double bits_per_value(RowFormat f) { return 8.0 * block_bytes(f) / block_values(f); }

// ggml's kvalues_iq4nl (ggml-common.h).
static constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};

// TurboQuant fork centroids and their decision midpoints (turbo-quant.cuh; the fork calls
// both tables Lloyd-Max for N(0, 1/128)).
static constexpr float kTurbo3Centroids[8] = {-0.190685f, -0.117832f, -0.065717f, -0.021460f,
                                              0.021460f,  0.065717f,  0.117832f,  0.190685f};
static constexpr float kTurbo3Mid[7] = {-0.154259f, -0.091775f, -0.043589f, 0.0f, 0.043589f, 0.091775f, 0.154259f};
static constexpr float kTurbo4Centroids[16] = {-0.173926f, -0.117195f, -0.089527f, -0.068756f,
                                               -0.051262f, -0.035597f, -0.020989f, -0.006938f,
                                               0.006938f,  0.020989f,  0.035597f,  0.051262f,
                                               0.068756f,  0.089527f,  0.117195f,  0.173926f};
static constexpr float kTurbo4Mid[15] = {-0.145561f, -0.103361f, -0.079142f, -0.060009f, -0.043430f,
                                         -0.028293f, -0.013964f, 0.0f,       0.013964f,  0.028293f,
                                         0.043430f,  0.060009f,  0.079142f,  0.103361f,  0.145561f};

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

// A block's fp16 scale, widened through the codec's table (scales are decoded per attention).
inline float f16f(const uint8_t* p) { return f16_to_f32_table()[load_u16(p)]; }

inline uint16_t f32_to_bf16(float x) {  // ggml_compute_fp32_to_bf16: RNE, NaN kept quiet
  const uint32_t u = f32_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 64u);
  return static_cast<uint16_t>((u + (0x7fffu + ((u >> 16) & 1u))) >> 16);
}
inline float bf16_to_f32(uint16_t h) { return f32_from_bits(static_cast<uint32_t>(h) << 16); }

// ggml casts the shifted value to int8_t (truncation toward zero) before MIN(); the values
// reaching it are in [0, 2*levels], so an int cast truncates the same way.
inline int trunc_int(float x) { return static_cast<int>(x); }

// Signed absolute maximum: the value of largest magnitude, first one on ties.
inline float signed_amax(const float* x, int n) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < n; ++j) {
    const float a = std::fabs(x[j]);
    if (amax < a) {
      amax = a;
      max = x[j];
    }
  }
  return max;
}

inline void q4_0_block(const float* x, uint8_t* y) {
  const float d = signed_amax(x, 32) / -8.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  store_u16(y, f32_to_f16(d));
  for (int j = 0; j < 16; ++j) {
    const int a = std::min(15, trunc_int(x[j] * id + 8.5f));
    const int b = std::min(15, trunc_int(x[16 + j] * id + 8.5f));
    y[2 + j] = static_cast<uint8_t>(a | (b << 4));
  }
}

inline void q4_1_block(const float* x, uint8_t* y) {
  float mn = x[0], mx = x[0];
  for (int j = 1; j < 32; ++j) {
    if (x[j] < mn) mn = x[j];
    if (x[j] > mx) mx = x[j];
  }
  const float d = (mx - mn) / 15.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  store_u16(y, f32_to_f16(d));
  store_u16(y + 2, f32_to_f16(mn));
  for (int j = 0; j < 16; ++j) {
    const int a = std::min(15, trunc_int((x[j] - mn) * id + 0.5f));
    const int b = std::min(15, trunc_int((x[16 + j] - mn) * id + 0.5f));
    y[4 + j] = static_cast<uint8_t>(a | (b << 4));
  }
}

inline void q5_0_block(const float* x, uint8_t* y) {
  const float d = signed_amax(x, 32) / -16.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  store_u16(y, f32_to_f16(d));
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    const int a = std::min(31, trunc_int(x[j] * id + 16.5f));
    const int b = std::min(31, trunc_int(x[16 + j] * id + 16.5f));
    y[6 + j] = static_cast<uint8_t>((a & 15) | ((b & 15) << 4));
    qh |= static_cast<uint32_t>((a & 16) >> 4) << j;
    qh |= static_cast<uint32_t>((b & 16) >> 4) << (j + 16);
  }
  for (int i = 0; i < 4; ++i) y[2 + i] = static_cast<uint8_t>(qh >> (8 * i));
}

inline void q5_1_block(const float* x, uint8_t* y) {
  float mn = x[0], mx = x[0];
  for (int j = 1; j < 32; ++j) {
    if (x[j] < mn) mn = x[j];
    if (x[j] > mx) mx = x[j];
  }
  const float d = (mx - mn) / 31.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  store_u16(y, f32_to_f16(d));
  store_u16(y + 2, f32_to_f16(mn));
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    const int a = trunc_int((x[j] - mn) * id + 0.5f);  // ggml: no clamp for q5_1
    const int b = trunc_int((x[16 + j] - mn) * id + 0.5f);
    y[8 + j] = static_cast<uint8_t>((a & 15) | ((b & 15) << 4));
    qh |= static_cast<uint32_t>((a & 16) >> 4) << j;
    qh |= static_cast<uint32_t>((b & 16) >> 4) << (j + 16);
  }
  for (int i = 0; i < 4; ++i) y[4 + i] = static_cast<uint8_t>(qh >> (8 * i));
}

// ggml's best_index_int8: nearest table entry, the lower one on an exact tie.
inline int iq4nl_index(float x) {
  const int8_t* v = kIq4nlValues;
  if (x <= v[0]) return 0;
  if (x >= v[15]) return 15;
  int lo = 0, hi = 15;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (x < v[mid]) hi = mid; else lo = mid;
  }
  return x - v[hi - 1] < v[hi] - x ? hi - 1 : hi;
}

// quantize_row_iq4_nl_ref: one 32-value block, no scale search (ntry = -1): d0 = max/-127
// picks the codes, then d is the weighted least-squares scale with weights x^2.
inline void iq4_nl_block(const float* x, uint8_t* y) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < 32; ++j) {
    const float a = std::fabs(x[j]);
    if (a > amax) {
      amax = a;
      max = x[j];
    }
  }
  uint8_t L[32] = {0};
  float d = 0.0f;
  if (amax >= 1e-15f) {  // ggml's GROUP_MAX_EPS; an all-zero block keeps d = 0
    const float d0 = max / static_cast<float>(kIq4nlValues[0]);
    const float id = 1.0f / d0;
    float sumqx = 0.0f, sumq2 = 0.0f;
    for (int j = 0; j < 32; ++j) {
      const int l = iq4nl_index(id * x[j]);
      L[j] = static_cast<uint8_t>(l);
      const float q = kIq4nlValues[l];
      const float w = x[j] * x[j];
      sumqx += w * q * x[j];
      sumq2 += w * q * q;
    }
    d = sumqx / sumq2;
  }
  store_u16(y, f32_to_f16(d));
  for (int j = 0; j < 16; ++j) y[2 + j] = static_cast<uint8_t>(L[j] | (L[16 + j] << 4));
}

inline int centroid_index(float v, const float* mid, int n_mid) {
  int i = 0;
  while (i < n_mid && !(v < mid[i])) ++i;
  return i;
}

// One 128-value group, already rotated: norm, normalise, nearest centroid, and the fork's
// norm correction (stored norm = |x| / |centroids|) so the group keeps its length. The fork
// takes the norm before rotating; the rotation is orthonormal, so only rounding differs.
inline float turbo_codes(const float* x, const float* mid, int n_mid, const float* cent, uint8_t* idx) {
  float norm_sq = 0.0f;
  for (int i = 0; i < 128; ++i) norm_sq += x[i] * x[i];
  const float norm = std::sqrt(norm_sq);
  const float inv = norm > 1e-10f ? 1.0f / norm : 0.0f;
  float rn_sq = 0.0f;
  for (int i = 0; i < 128; ++i) {
    idx[i] = static_cast<uint8_t>(centroid_index(x[i] * inv, mid, n_mid));
    rn_sq += cent[idx[i]] * cent[idx[i]];
  }
  const float rn = std::sqrt(rn_sq);
  return rn > 1e-10f ? norm / rn : norm;
}

inline void turbo3_group(const float* x, uint8_t* y) {
  uint8_t idx[128];
  std::memset(y, 0, 50);
  store_u16(y, f32_to_f16(turbo_codes(x, kTurbo3Mid, 7, kTurbo3Centroids, idx)));
  for (int j = 0; j < 128; ++j) {
    y[2 + j / 4] = static_cast<uint8_t>(y[2 + j / 4] | ((idx[j] & 3u) << (2 * (j % 4))));
    if (idx[j] & 4u) y[34 + j / 8] = static_cast<uint8_t>(y[34 + j / 8] | (1u << (j % 8)));
  }
}

inline void turbo4_group(const float* x, uint8_t* y) {
  uint8_t idx[128];
  std::memset(y, 0, 66);
  store_u16(y, f32_to_f16(turbo_codes(x, kTurbo4Mid, 15, kTurbo4Centroids, idx)));
  for (int i = 0; i < 128; ++i) y[2 + i / 2] = static_cast<uint8_t>(y[2 + i / 2] | (idx[i] << (4 * (i % 2))));
}

// tq5_0 block (128 values, 82 bytes): fp16 corrected norm, then the 128 5-bit codes packed
// little-endian, code i in bits 5i .. 5i+4 of bytes 2 .. 81 (so codes 8g .. 8g+7 fill bytes
// 2 + 5g .. 6 + 5g). Encode is tq6_encode_block's at 5 bits: norm, normalise, code = the
// count of thresholds <= v (a value on a threshold takes the upper code), norm corrected to
// |x| / |C[code]|. Decode: F(norm) * C[code].
inline float tq5_centroid(uint32_t k) { return f32_from_bits(kTq5CentroidBits[k]); }

inline uint32_t tq5_block_code(const uint8_t* blk, uint32_t i) {
  const uint32_t bit = 5 * i, byte = 2 + bit / 8, shift = bit % 8;
  const uint32_t w = blk[byte] | (shift > 3 ? static_cast<uint32_t>(blk[byte + 1]) << 8 : 0u);
  return (w >> shift) & 31u;
}

inline void tq5_encode_block(const float* x, uint8_t* out) {
  float norm_sq = 0.0f;
  for (uint32_t i = 0; i < 128; ++i) norm_sq = op::fadd(norm_sq, op::fmul(x[i], x[i]));
  const float norm = op::sqrt32(norm_sq);
  const bool live = norm > f32_from_bits(0x2edbe6ffu);  // 1e-10, as tq6_0
  const float inv = live ? op::fdiv(1.0f, norm) : 0.0f;
  uint8_t code[128];
  float rn_sq = 0.0f;
  for (uint32_t i = 0; i < 128; ++i) {
    const float v = live ? op::fmul(x[i], inv) : 0.0f;
    uint32_t c = 0;
    for (uint32_t m = 0; m < 31; ++m) c += v < f32_from_bits(kTq5MidpointBits[m]) ? 0u : 1u;
    code[i] = static_cast<uint8_t>(c);
    rn_sq = op::fadd(rn_sq, op::fmul(tq5_centroid(c), tq5_centroid(c)));
  }
  for (uint32_t g = 0; g < 16; ++g) {
    uint64_t w = 0;
    for (uint32_t j = 0; j < 8; ++j) w |= static_cast<uint64_t>(code[8 * g + j]) << (5 * j);
    for (uint32_t b = 0; b < 5; ++b) out[2 + 5 * g + b] = static_cast<uint8_t>(w >> (8 * b));
  }
  const float rn = op::sqrt32(rn_sq);
  store_u16(out, f32_to_f16(rn > f32_from_bits(0x2edbe6ffu) ? op::fdiv(norm, rn) : norm));
}

inline void tq5_decode_block(const uint8_t* blk, float* out) {
  const float n = f16f(blk);
  for (uint32_t g = 0; g < 16; ++g) {
    uint64_t w = 0;
    for (uint32_t b = 0; b < 5; ++b) w |= static_cast<uint64_t>(blk[2 + 5 * g + b]) << (8 * b);
    for (uint32_t j = 0; j < 8; ++j) out[8 * g + j] = op::fmul(tq5_centroid((w >> (5 * j)) & 31u), n);
  }
}

// Encode one row of d values. Returns false on a non-finite input value.
inline bool encode_row(RowFormat f, const float* x, uint32_t d, uint8_t* out) {
  for (uint32_t i = 0; i < d; ++i)
    if (!std::isfinite(x[i])) return false;
  // A codec row that overflows fp16 is stored as the codec writes it (inf scale or value):
  // only non-finite input is refused here.
  StagingType st = StagingType::f16;
  if (codec_staging(f, &st)) {
    staging_encode_row_checked(st, x, d, out);
    return true;
  }
  const uint32_t bv = block_values(f), bb = block_bytes(f);
  switch (f) {
    case RowFormat::f32: std::memcpy(out, x, 4u * d); return true;
    case RowFormat::bf16: for (uint32_t i = 0; i < d; ++i) store_u16(out + 2 * i, f32_to_bf16(x[i])); return true;
    default: break;
  }
  for (uint32_t b = 0; b < d / bv; ++b) {
    const float* xb = x + b * bv;
    uint8_t* yb = out + b * bb;
    switch (f) {
      case RowFormat::q4_0: q4_0_block(xb, yb); break;
      case RowFormat::q4_1: q4_1_block(xb, yb); break;
      case RowFormat::q5_0: q5_0_block(xb, yb); break;
      case RowFormat::q5_1: q5_1_block(xb, yb); break;
      case RowFormat::iq4_nl: iq4_nl_block(xb, yb); break;
      case RowFormat::turbo3: turbo3_group(xb, yb); break;
      case RowFormat::turbo4: turbo4_group(xb, yb); break;
      case RowFormat::tq5_0: tq5_encode_block(xb, yb); break;
      default: break;
    }
  }
  return true;
}

// Decode as ggml's dequantize_row_* does: F(d) * code (+ F(m)).
inline void decode_row(RowFormat f, const uint8_t* in, uint32_t d, float* x) {
  StagingType st = StagingType::f16;
  if (codec_staging(f, &st)) return staging_decode_row_fast(st, in, d, x);
  const uint32_t bv = block_values(f), bb = block_bytes(f);
  switch (f) {
    case RowFormat::f32: std::memcpy(x, in, 4u * d); return;
    case RowFormat::bf16: for (uint32_t i = 0; i < d; ++i) x[i] = bf16_to_f32(load_u16(in + 2 * i)); return;
    default: break;
  }
  for (uint32_t b = 0; b < d / bv; ++b) {
    const uint8_t* y = in + b * bb;
    float* xb = x + b * bv;
    switch (f) {
      case RowFormat::q4_0: {
        const float s = f16f(y);
        for (int j = 0; j < 16; ++j) {
          xb[j] = static_cast<float>((y[2 + j] & 15) - 8) * s;
          xb[16 + j] = static_cast<float>((y[2 + j] >> 4) - 8) * s;
        }
        break;
      }
      case RowFormat::q4_1: {
        const float s = f16f(y), m = f16f(y + 2);
        for (int j = 0; j < 16; ++j) {
          xb[j] = static_cast<float>(y[4 + j] & 15) * s + m;
          xb[16 + j] = static_cast<float>(y[4 + j] >> 4) * s + m;
        }
        break;
      }
      case RowFormat::q5_0:
      case RowFormat::q5_1: {
        const bool has_m = f == RowFormat::q5_1;
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
        break;
      }
      case RowFormat::iq4_nl: {
        const float s = f16f(y);
        for (int j = 0; j < 16; ++j) {
          xb[j] = s * kIq4nlValues[y[2 + j] & 15];
          xb[16 + j] = s * kIq4nlValues[y[2 + j] >> 4];
        }
        break;
      }
      case RowFormat::turbo3: {
        const float n = f16f(y);
        for (int j = 0; j < 128; ++j) {
          const int c = ((y[2 + j / 4] >> (2 * (j % 4))) & 3) | (((y[34 + j / 8] >> (j % 8)) & 1) << 2);
          xb[j] = kTurbo3Centroids[c] * n;
        }
        break;
      }
      case RowFormat::turbo4: {
        const float n = f16f(y);
        for (int i = 0; i < 128; ++i) xb[i] = kTurbo4Centroids[(y[2 + i / 2] >> (4 * (i % 2))) & 15] * n;
        break;
      }
      case RowFormat::tq5_0: tq5_decode_block(y, xb); break;
      default: break;
    }
  }
}

}  // namespace fmt
}  // namespace replay
}  // namespace sjkv
