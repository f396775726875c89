// Staging rows (docs/SPEC.md §4): one head's D rotated values of K or V at one position.
//   tq6_0 (code 0): D/128 blocks of 98 bytes (norm fp16, 64 B low nibbles, 32 B high pairs)
//   f16   (code 1): D halves
//   q8_0  (code 2, sjkv extension, not in format version 1 of the reference): D/32 blocks of
//         34 bytes, fp16 d = amax/127 then 32 int8 codes, as llama.cpp's q8_0 block.
#pragma once

#include "sjkv/fp16.h"
#include "sjkv/layout.h"
#include "sjkv/tq6_tables.h"

#include <cmath>

namespace sjkv {

enum class StagingType : uint32_t { tq6_0 = 0, f16 = 1, q8_0 = 2 };

constexpr uint32_t kTq6BlockValues = 128;
constexpr uint32_t kTq6BlockBytes = 98;
constexpr uint32_t kQ8BlockValues = 32;
constexpr uint32_t kQ8BlockBytes = 34;

SJKV_HD inline uint32_t staging_block_values(StagingType t) {
  return t == StagingType::tq6_0 ? kTq6BlockValues : t == StagingType::q8_0 ? kQ8BlockValues : 1u;
}

SJKV_HD inline uint32_t staging_row_bytes(StagingType t, uint32_t d) {
  switch (t) {
    case StagingType::tq6_0: return (d / kTq6BlockValues) * kTq6BlockBytes;
    case StagingType::q8_0: return (d / kQ8BlockValues) * kQ8BlockBytes;
    case StagingType::f16: return 2u * d;
  }
  return 0;
}

namespace tables {
static constexpr uint32_t kTq6CentroidBits[64] = {SJKV_TQ6_CENTROID_BITS};
static constexpr uint32_t kTq6MidpointBits[63] = {SJKV_TQ6_MIDPOINT_BITS};
#if defined(__CUDACC__)
static __constant__ const uint32_t kTq6CentroidBitsDev[64] = {SJKV_TQ6_CENTROID_BITS};
static __constant__ const uint32_t kTq6MidpointBitsDev[63] = {SJKV_TQ6_MIDPOINT_BITS};
#endif
}  // namespace tables

SJKV_HD inline float tq6_centroid(uint32_t k) {
#if defined(__CUDA_ARCH__)
  return f32_from_bits(tables::kTq6CentroidBitsDev[k]);
#else
  return f32_from_bits(tables::kTq6CentroidBits[k]);
#endif
}

SJKV_HD inline float tq6_midpoint(uint32_t k) {
#if defined(__CUDA_ARCH__)
  return f32_from_bits(tables::kTq6MidpointBitsDev[k]);
#else
  return f32_from_bits(tables::kTq6MidpointBits[k]);
#endif
}

// First m with v < T[m], else 63: the count of midpoints <= v. A value on a midpoint takes
// the upper code; NaN compares false everywhere and lands on 63, as the spec says. Branch-free
// binary search: the probes are T[idx + step - 1] <= T[62], so no padding is needed.
SJKV_HD inline uint32_t tq6_code(float v) {
  uint32_t idx = 0;
  for (uint32_t step = 32; step > 0; step >>= 1) idx += !(v < tq6_midpoint(idx + step - 1)) ? step : 0u;
  return idx;
}

// Encode 128 values into one 98-byte block. Returns false when the stored norm would not be
// finite (the block's energy overflows fp16), so the caller can refuse the row.
SJKV_HD inline bool tq6_encode_block(const float* x, uint8_t* out) {
  float norm_sq = 0.0f;
  for (uint32_t i = 0; i < kTq6BlockValues; ++i) norm_sq = op::fadd(norm_sq, op::fmul(x[i], x[i]));
  const float norm = op::sqrt32(norm_sq);
  const bool live = norm > f32_from_bits(0x2edbe6ffu);  // 1e-10
  const float inv = live ? op::fdiv(1.0f, norm) : 0.0f;
  float v[kTq6BlockValues];
  for (uint32_t i = 0; i < kTq6BlockValues; ++i) v[i] = live ? op::fmul(x[i], inv) : 0.0f;
  // tq6_code() of every value at once: the count of midpoints m with !(v < T[m]). With the
  // midpoints ascending this is the first m with v < T[m] (63 if none, NaN too); counting
  // midpoint by midpoint keeps the inner loop over values, so it vectorises.
  uint8_t code[kTq6BlockValues];
  for (uint32_t i = 0; i < kTq6BlockValues; ++i) code[i] = 0;
  for (uint32_t m = 0; m < 63; ++m) {
    const float t = tq6_midpoint(m);
    for (uint32_t i = 0; i < kTq6BlockValues; ++i) code[i] = static_cast<uint8_t>(code[i] + (v[i] < t ? 0 : 1));
  }
  float rn_sq = 0.0f;
  for (uint32_t i = 0; i < kTq6BlockValues; ++i) {
    const float c = tq6_centroid(code[i]);
    rn_sq = op::fadd(rn_sq, op::fmul(c, c));
  }
  // Codes first, packed after: no read-modify-write chain through the output bytes.
  for (uint32_t i = 0; i < kTq6BlockValues / 2; ++i)
    out[2 + i] = static_cast<uint8_t>((code[2 * i] & 15u) | ((code[2 * i + 1] & 15u) << 4));
  for (uint32_t i = 0; i < kTq6BlockValues / 4; ++i)
    out[66 + i] = static_cast<uint8_t>((code[4 * i] >> 4) | ((code[4 * i + 1] >> 4) << 2) |
                                       ((code[4 * i + 2] >> 4) << 4) | ((code[4 * i + 3] >> 4) << 6));
  const float rn = op::sqrt32(rn_sq);
  const uint16_t h = f32_to_f16(rn > f32_from_bits(0x2edbe6ffu) ? op::fdiv(norm, rn) : norm);
  store_u16(out, h);
  return (h & 0x7c00u) != 0x7c00u;
}

SJKV_HD inline uint32_t tq6_block_code(const uint8_t* blk, uint32_t i) {
  const uint32_t lo = (blk[2 + (i >> 1)] >> (4 * (i & 1))) & 15u;
  const uint32_t hi = (blk[66 + (i >> 2)] >> (2 * (i & 3))) & 3u;
  return lo | (hi << 4);
}

// Value i = fmul(C[code_i], F(norm)) (docs/SPEC.md §4.2); four codes per step, from two qs
// bytes and one qh byte, so a row decodes without per-value address arithmetic.
SJKV_HD inline void tq6_decode_block(const uint8_t* blk, float* out) {
  const float n = f16_to_f32(load_u16(blk));
  for (uint32_t j = 0; j < kTq6BlockValues / 4; ++j) {
    const uint32_t lo0 = blk[2 + 2 * j], lo1 = blk[3 + 2 * j], hi = blk[66 + j];
    out[4 * j + 0] = op::fmul(tq6_centroid((lo0 & 15u) | ((hi & 3u) << 4)), n);
    out[4 * j + 1] = op::fmul(tq6_centroid((lo0 >> 4) | (((hi >> 2) & 3u) << 4)), n);
    out[4 * j + 2] = op::fmul(tq6_centroid((lo1 & 15u) | (((hi >> 4) & 3u) << 4)), n);
    out[4 * j + 3] = op::fmul(tq6_centroid((lo1 >> 4) | (((hi >> 6) & 3u) << 4)), n);
  }
}

// q8_0 (sjkv extension): d = amax/127 in binary32, stored as fp16; q = roundf(x/d) with ties
// away from zero, as llama.cpp's reference quantizer; decode F(d)*q.
SJKV_HD inline bool q8_encode_block(const float* x, uint8_t* out) {
  float amax = 0.0f;
  bool finite = true;
  for (uint32_t i = 0; i < kQ8BlockValues; ++i) {
    const float a = x[i] < 0.0f ? -x[i] : x[i];
    if (!(a <= f32_from_bits(0x7f7fffffu))) {  // NaN or infinity: refuse, keep d finite
      finite = false;
      continue;
    }
    amax = op::maxS(amax, a);
  }
  const float d = op::fdiv(amax, 127.0f);
  const float id = d != 0.0f ? op::fdiv(1.0f, d) : 0.0f;
  const uint16_t h = f32_to_f16(d);
  store_u16(out, h);
  const float dh = f16_to_f32(h);
  bool fits = (h & 0x7c00u) != 0x7c00u;
  for (uint32_t i = 0; i < kQ8BlockValues; ++i) {
    float q = roundf(op::fmul(x[i], id));
    if (q != q) q = 0.0f;  // NaN input: a defined byte, the call already reports failure
    q = op::minS(op::maxS(q, -127.0f), 127.0f);
    out[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(q));
    // The seal reads fp16(d*q) (§4.6): a block whose read-back overflows fp16 is refused.
    fits = fits && (f32_to_f16(op::fmul(dh, q)) & 0x7c00u) != 0x7c00u;
  }
  return finite && fits;
}

SJKV_HD inline void q8_decode_block(const uint8_t* blk, float* out) {
  const float d = f16_to_f32(load_u16(blk));
  for (uint32_t i = 0; i < kQ8BlockValues; ++i)
    out[i] = op::fmul(d, static_cast<float>(static_cast<int8_t>(blk[2 + i])));
}

// One staging row. Returns -1 when every value is stored finite, else the index of the
// first refused value: a NaN/infinity, or (for a block whose fp16 scale or read-back
// overflows) the block's largest magnitude. The row is fully written either way, so a
// caller that ignores the result never reads stale bytes.
SJKV_HD inline int32_t staging_encode_row_checked(StagingType t, const float* x, uint32_t d, uint8_t* out) {
  int32_t bad = -1;
  const uint32_t bv = staging_block_values(t);
  for (uint32_t b = 0; b < d / bv; ++b) {
    const float* xb = x + b * bv;
    bool ok = true;
    switch (t) {
      case StagingType::tq6_0: ok = tq6_encode_block(xb, out + b * kTq6BlockBytes); break;
      case StagingType::q8_0: ok = q8_encode_block(xb, out + b * kQ8BlockBytes); break;
      case StagingType::f16: {
        const uint16_t h = f32_to_f16(xb[0]);
        store_u16(out + 2 * b, h);
        ok = (h & 0x7c00u) != 0x7c00u;
        break;
      }
    }
    if (ok || bad >= 0) continue;
    uint32_t worst = 0;  // first non-finite value, else the largest magnitude
    float wmag = -1.0f;
    for (uint32_t i = 0; i < bv; ++i) {
      const float a = xb[i] < 0.0f ? -xb[i] : xb[i];
      if (!(a <= f32_from_bits(0x7f7fffffu))) { worst = i; break; }
      if (a > wmag) { wmag = a; worst = i; }
    }
    bad = static_cast<int32_t>(b * bv + worst);
  }
  return bad;
}

SJKV_HD inline bool staging_encode_row(StagingType t, const float* x, uint32_t d, uint8_t* out) {
  return staging_encode_row_checked(t, x, d, out) < 0;
}

SJKV_HD inline void staging_decode_row(StagingType t, const uint8_t* in, uint32_t d, float* out) {
  switch (t) {
    case StagingType::tq6_0:
      for (uint32_t b = 0; b < d / kTq6BlockValues; ++b)
        tq6_decode_block(in + b * kTq6BlockBytes, out + b * kTq6BlockValues);
      break;
    case StagingType::q8_0:
      for (uint32_t b = 0; b < d / kQ8BlockValues; ++b)
        q8_decode_block(in + b * kQ8BlockBytes, out + b * kQ8BlockValues);
      break;
    case StagingType::f16:
      for (uint32_t i = 0; i < d; ++i) out[i] = f16_to_f32(load_u16(in + 2 * i));
      break;
  }
}

// Value i of a staged row: element i of staging_decode_row (same operations), for kernels
// that decode a part of a row.
SJKV_HD inline float staging_decode_value(StagingType t, const uint8_t* in, uint32_t i) {
  switch (t) {
    case StagingType::tq6_0: {
      const uint8_t* blk = in + (i / kTq6BlockValues) * kTq6BlockBytes;
      return op::fmul(tq6_centroid(tq6_block_code(blk, i % kTq6BlockValues)), f16_to_f32(load_u16(blk)));
    }
    case StagingType::q8_0: {
      const uint8_t* blk = in + (i / kQ8BlockValues) * kQ8BlockBytes;
      return op::fmul(f16_to_f32(load_u16(blk)), static_cast<float>(static_cast<int8_t>(blk[2 + i % kQ8BlockValues])));
    }
    case StagingType::f16: return f16_to_f32(load_u16(in + 2 * i));
  }
  return 0.0f;
}

// The seal input of a staged row (docs/SPEC.md §4.6): decode, then round every value to fp16.
SJKV_HD inline void staging_seal_input(StagingType t, const uint8_t* in, uint32_t d, float* scratch,
                                       uint16_t* out) {
  staging_decode_row(t, in, d, scratch);
  for (uint32_t i = 0; i < d; ++i) out[i] = f32_to_f16(scratch[i]);
}

}  // namespace sjkv
