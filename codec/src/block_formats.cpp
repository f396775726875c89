// The block formats table (block_formats.h) and the reference decoders and encoders it points
// to. Written for sjkv from the published block layouts (ggml-common.h for the ggml types, the
// TurboQuant fork's layouts, the note and docs/SPEC.md for the rest); no code is ggml's.
#include "sjkv/block_formats.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "sjkv/fp16.h"
#include "sjkv/layout.h"
#include "sjkv/staging.h"

#include "block_decode_lowbit.h"  // the low-bit weight formats' reference decoders

namespace sjkv {

namespace {

using namespace blockfmt;

inline float h2f(const uint8_t* p) { return f16_to_f32(load_u16(p)); }

// A row decoder from a one-block decoder.
template <void (*Block)(const uint8_t*, float*), uint32_t Values, uint32_t Bytes>
void decode_each(const uint8_t* src, float* dst, size_t nb) {
  for (size_t i = 0; i < nb; ++i) Block(src + i * Bytes, dst + i * Values);
}
template <void (*Block)(const float*, uint8_t*), uint32_t Values, uint32_t Bytes>
void encode_each(const float* src, uint8_t* dst, size_t nb) {
  for (size_t i = 0; i < nb; ++i) Block(src + i * Values, dst + i * Bytes);
}

// ---- Scalars ------------------------------------------------------------------------------

void dec_f32(const uint8_t* s, float* y, size_t n) { std::memcpy(y, s, n * 4); }
void enc_f32(const float* x, uint8_t* s, size_t n) { std::memcpy(s, x, n * 4); }

void dec_f16(const uint8_t* s, float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] = h2f(s + 2 * i);
}
void enc_f16(const float* x, uint8_t* s, size_t n) {
  // A value past fp16's range is stored as the codec writes it (infinity).
  staging_encode_row_checked(StagingType::f16, x, static_cast<uint32_t>(n), s);
}

void dec_bf16(const uint8_t* s, float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const uint32_t u = (static_cast<uint32_t>(s[2 * i]) | (static_cast<uint32_t>(s[2 * i + 1]) << 8)) << 16;
    std::memcpy(y + i, &u, 4);
  }
}
void enc_bf16(const float* x, uint8_t* s, size_t n) {
  for (size_t i = 0; i < n; ++i) store_u16(s + 2 * i, f32_to_bf16(x[i]));
}

// ---- Legacy 32-value blocks: decode (x = F(d) * code (+ F(m))) ------------------------------
//   Q4_0   18 B: f16 d | u8 qs[16]                    x = (nibble - 8) * d
//   Q4_1   20 B: f16 d | f16 m | u8 qs[16]            x = nibble * d + m
//   Q5_0   22 B: f16 d | u8 qh[4] | qs[16]            x = (nibble | bit4 - 16) * d
//   Q5_1   24 B: f16 d | f16 m | qh[4] | qs[16]       x = (nibble | bit4) * d + m
//   Q8_0   34 B: f16 d | i8 qs[32]                    x = q * d
//   IQ4_NL 18 B: f16 d | u8 qs[16]                    x = d * kIq4nlValues[nibble]
// Value j < 16 takes the low nibble of qs[j], value j + 16 the high one; Q5's fifth bit of
// value j is bit j of the little-endian u32 qh.

void deq_q4_0(const uint8_t* b, float* y) {
  const float d = h2f(b);
  const uint8_t* qs = b + 2;
  for (uint32_t j = 0; j < 16; ++j) {
    y[j] = static_cast<float>(static_cast<int>(qs[j] & 0xF) - 8) * d;
    y[j + 16] = static_cast<float>(static_cast<int>(qs[j] >> 4) - 8) * d;
  }
}

void deq_q4_1(const uint8_t* b, float* y) {
  const float d = h2f(b), m = h2f(b + 2);
  const uint8_t* qs = b + 4;
  for (uint32_t j = 0; j < 16; ++j) {
    y[j] = static_cast<float>(qs[j] & 0xF) * d + m;
    y[j + 16] = static_cast<float>(qs[j] >> 4) * d + m;
  }
}

void deq_q5_0(const uint8_t* b, float* y) {
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

void deq_q5_1(const uint8_t* b, float* y) {
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

void deq_q8_0(const uint8_t* b, float* y) {
  const float d = h2f(b);
  for (uint32_t j = 0; j < 32; ++j) y[j] = static_cast<float>(static_cast<int8_t>(b[2 + j])) * d;
}

void deq_iq4_nl(const uint8_t* b, float* y) {
  const float d = h2f(b);
  for (int j = 0; j < 16; ++j) {
    y[j] = d * kIq4nlValues[b[2 + j] & 15];
    y[16 + j] = d * kIq4nlValues[b[2 + j] >> 4];
  }
}

// ---- K-quants: 256-value super-blocks -------------------------------------------------------

// Q4_K: f16 d | f16 dmin | u8 scales[12] | u8 qs[128]; x = d * sc * q - dmin * m.
void deq_q4_k(const uint8_t* b, float* y) {
  const float d = h2f(b), dmin = h2f(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qs = b + 16;
  for (uint32_t j = 0; j < 4; ++j) {
    uint32_t sc0, m0, sc1, m1;
    scale_min_k4(2 * j, scales, sc0, m0);
    scale_min_k4(2 * j + 1, scales, sc1, m1);
    const float d0 = d * static_cast<float>(sc0), mm0 = dmin * static_cast<float>(m0);
    const float d1 = d * static_cast<float>(sc1), mm1 = dmin * static_cast<float>(m1);
    for (uint32_t l = 0; l < 32; ++l) {
      y[64 * j + l] = d0 * static_cast<float>(qs[32 * j + l] & 0xF) - mm0;
      y[64 * j + 32 + l] = d1 * static_cast<float>(qs[32 * j + l] >> 4) - mm1;
    }
  }
}

// Q5_K: f16 d | f16 dmin | u8 scales[12] | u8 qh[32] | u8 qs[128].
void deq_q5_k(const uint8_t* b, float* y) {
  const float d = h2f(b), dmin = h2f(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* qs = b + 48;
  for (uint32_t j = 0; j < 4; ++j) {
    uint32_t sc0, m0, sc1, m1;
    scale_min_k4(2 * j, scales, sc0, m0);
    scale_min_k4(2 * j + 1, scales, sc1, m1);
    const float d0 = d * static_cast<float>(sc0), mm0 = dmin * static_cast<float>(m0);
    const float d1 = d * static_cast<float>(sc1), mm1 = dmin * static_cast<float>(m1);
    const uint32_t u0 = 1u << (2 * j), u1 = 2u << (2 * j);
    for (uint32_t l = 0; l < 32; ++l) {
      const uint32_t q0 = (qs[32 * j + l] & 0xFu) + ((qh[l] & u0) ? 16u : 0u);
      const uint32_t q1 = (qs[32 * j + l] >> 4) + ((qh[l] & u1) ? 16u : 0u);
      y[64 * j + l] = d0 * static_cast<float>(q0) - mm0;
      y[64 * j + 32 + l] = d1 * static_cast<float>(q1) - mm1;
    }
  }
}

// Q6_K: u8 ql[128] | u8 qh[64] | i8 scales[16] | f16 d; 16 sub-blocks of 16,
// x = d * scale * (q6 - 32).
void deq_q6_k(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = h2f(b + 208);
  for (uint32_t half = 0; half < 2; ++half) {
    const uint8_t* l6 = ql + 64 * half;
    const uint8_t* h6 = qh + 32 * half;
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

// ---- Legacy 32-value blocks: encode, as ggml's quantize_row_*_ref -----------------------------

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

// The smallest and largest of x[0..n), scanned as ggml's q4_1 / q5_1 quantizers scan them.
inline void min_max(const float* x, int n, float* mn, float* mx) {
  *mn = *mx = x[0];
  for (int j = 1; j < n; ++j) {
    if (x[j] < *mn) *mn = x[j];
    if (x[j] > *mx) *mx = x[j];
  }
}

void q4_0_block(const float* x, uint8_t* y) {
  const float d = signed_amax(x, 32) / -8.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  store_u16(y, f32_to_f16(d));
  for (int j = 0; j < 16; ++j) {
    const int a = std::min(15, trunc_int(x[j] * id + 8.5f));
    const int b = std::min(15, trunc_int(x[16 + j] * id + 8.5f));
    y[2 + j] = static_cast<uint8_t>(a | (b << 4));
  }
}

void q4_1_block(const float* x, uint8_t* y) {
  float mn, mx;
  min_max(x, 32, &mn, &mx);
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

void q5_0_block(const float* x, uint8_t* y) {
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

void q5_1_block(const float* x, uint8_t* y) {
  float mn, mx;
  min_max(x, 32, &mn, &mx);
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

void enc_q8_0(const float* x, uint8_t* s, size_t nb) {
  // The codec's staging q8_0 block: llama.cpp's byte for byte on finite input with a normal
  // binary32 block scale (tests/codec/test_staging.cpp).
  staging_encode_row_checked(StagingType::q8_0, x, static_cast<uint32_t>(nb * kQ8BlockValues), s);
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
void iq4_nl_block(const float* x, uint8_t* y) {
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

// ---- Rotated 128-value rows: tq6_0 (the codec's staging), tq5_0, turbo3, turbo4 ---------------

void dec_tq6_0(const uint8_t* s, float* y, size_t nb) {
  staging_decode_row(StagingType::tq6_0, s, static_cast<uint32_t>(nb * kTq6BlockValues), y);
}
void enc_tq6_0(const float* x, uint8_t* s, size_t nb) {
  staging_encode_row_checked(StagingType::tq6_0, x, static_cast<uint32_t>(nb * kTq6BlockValues), s);
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

// turbo3 block (128 values, 50 B): fp16 norm | 32 B low 2 bits of each code | 16 B high bit.
void turbo3_group(const float* x, uint8_t* y) {
  uint8_t idx[128];
  std::memset(y, 0, 50);
  store_u16(y, f32_to_f16(turbo_codes(x, kTurbo3Mid, 7, kTurbo3Centroids, idx)));
  for (int j = 0; j < 128; ++j) {
    y[2 + j / 4] = static_cast<uint8_t>(y[2 + j / 4] | ((idx[j] & 3u) << (2 * (j % 4))));
    if (idx[j] & 4u) y[34 + j / 8] = static_cast<uint8_t>(y[34 + j / 8] | (1u << (j % 8)));
  }
}

void deq_turbo3(const uint8_t* y, float* x) {
  const float n = h2f(y);
  for (int j = 0; j < 128; ++j) {
    const int c = ((y[2 + j / 4] >> (2 * (j % 4))) & 3) | (((y[34 + j / 8] >> (j % 8)) & 1) << 2);
    x[j] = kTurbo3Centroids[c] * n;
  }
}

// turbo4 block (128 values, 66 B): fp16 norm | 64 B of 4-bit codes, low nibble first.
void turbo4_group(const float* x, uint8_t* y) {
  uint8_t idx[128];
  std::memset(y, 0, 66);
  store_u16(y, f32_to_f16(turbo_codes(x, kTurbo4Mid, 15, kTurbo4Centroids, idx)));
  for (int i = 0; i < 128; ++i) y[2 + i / 2] = static_cast<uint8_t>(y[2 + i / 2] | (idx[i] << (4 * (i % 2))));
}

void deq_turbo4(const uint8_t* y, float* x) {
  const float n = h2f(y);
  for (int i = 0; i < 128; ++i) x[i] = kTurbo4Centroids[(y[2 + i / 2] >> (4 * (i % 2))) & 15] * n;
}

// tq5_0 block (128 values, 82 bytes): fp16 corrected norm, then the 128 5-bit codes packed
// little-endian, code i in bits 5i .. 5i+4 of bytes 2 .. 81 (so codes 8g .. 8g+7 fill bytes
// 2 + 5g .. 6 + 5g). Encode is tq6_encode_block's at 5 bits: norm, normalise, code = the
// count of thresholds <= v (a value on a threshold takes the upper code), norm corrected to
// |x| / |C[code]|. Decode: F(norm) * C[code].
void tq5_encode_block(const float* x, uint8_t* out) {
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

void tq5_decode_block(const uint8_t* blk, float* out) {
  const float n = h2f(blk);
  for (uint32_t g = 0; g < 16; ++g) {
    uint64_t w = 0;
    for (uint32_t b = 0; b < 5; ++b) w |= static_cast<uint64_t>(blk[2 + 5 * g + b]) << (8 * b);
    for (uint32_t j = 0; j < 8; ++j) out[8 * g + j] = op::fmul(tq5_centroid((w >> (5 * j)) & 31u), n);
  }
}

// ---- The table -------------------------------------------------------------------------------

using F = BlockFormat;
constexpr uint32_t kNo = kNoGgufId;

template <F f>
constexpr uint32_t id() { return static_cast<uint32_t>(f); }

// Block sizes of the ggml types from ggml-common.h's block structs (each static_assert'ed
// there); the cache-only rows from the note: tq6_0 98 B / 128 (section 2.1, and this codec's
// staging.h), tq5_0 82 B / 128 (5.125 bits) and turbo4 66 B / 128 (4.125 bits, "one 16-bit
// norm per 128 values") in section 6, turbo3 50 B / 128 (3.125 bits) in section 7.2. Some
// public turbo4 forks use a 68-byte block (a second fp16 norm, 4.25 bits); the note's format
// is the 66-byte one, and its 7.2 figure (turbo4 about 193K tokens in 11 GB) needs 4.125 bits.
const std::vector<BlockFormatInfo>& table() {
  static const std::vector<BlockFormatInfo> t = {
      {F::f32, "f32", 1, 4, "ggml: float", id<F::f32>(), "F32", dec_f32, enc_f32},
      {F::f16, "f16", 1, 2, "ggml: IEEE half", id<F::f16>(), "F16", dec_f16, enc_f16},
      {F::q4_0, "q4_0", 32, 18, "ggml block_q4_0; note section 7.2 (18 B / 32, 4.5 bits)", id<F::q4_0>(), "Q4_0",
       decode_each<deq_q4_0, 32, 18>, encode_each<q4_0_block, 32, 18>},
      {F::q4_1, "q4_1", 32, 20, "ggml block_q4_1", id<F::q4_1>(), "Q4_1", decode_each<deq_q4_1, 32, 20>,
       encode_each<q4_1_block, 32, 20>},
      {F::q5_0, "q5_0", 32, 22, "ggml block_q5_0", id<F::q5_0>(), "Q5_0", decode_each<deq_q5_0, 32, 22>,
       encode_each<q5_0_block, 32, 22>},
      {F::q5_1, "q5_1", 32, 24, "ggml block_q5_1; note section 6 (24 B / 32, 6.0 bits)", id<F::q5_1>(), "Q5_1",
       decode_each<deq_q5_1, 32, 24>, encode_each<q5_1_block, 32, 24>},
      {F::q8_0, "q8_0", kQ8BlockValues, kQ8BlockBytes, "ggml block_q8_0; note section 6 (34 B / 32, 8.5 bits)",
       id<F::q8_0>(), "Q8_0", decode_each<deq_q8_0, 32, 34>, enc_q8_0},
      {F::q8_1, "q8_1", 32, 36, "ggml block_q8_1 (f16 d, f16 s, 32 int8)", id<F::q8_1>(), "Q8_1", nullptr, nullptr},
      {F::q2_k, "q2_K", 256, 84, "ggml block_q2_K", id<F::q2_k>(), "Q2_K", decode_each<lowbit::q2_k, 256, 84>, nullptr},
      {F::q3_k, "q3_K", 256, 110, "ggml block_q3_K", id<F::q3_k>(), "Q3_K",
       decode_each<lowbit::q3_k, 256, 110>, nullptr},
      {F::q4_k, "q4_K", 256, 144, "ggml block_q4_K", id<F::q4_k>(), "Q4_K", decode_each<deq_q4_k, 256, 144>, nullptr},
      {F::q5_k, "q5_K", 256, 176, "ggml block_q5_K", id<F::q5_k>(), "Q5_K", decode_each<deq_q5_k, 256, 176>, nullptr},
      {F::q6_k, "q6_K", 256, 210, "ggml block_q6_K", id<F::q6_k>(), "Q6_K", decode_each<deq_q6_k, 256, 210>, nullptr},
      {F::q8_k, "q8_K", 256, 292, "ggml block_q8_K (f32 d, 256 int8, 16 int16 sums)", id<F::q8_k>(), "Q8_K", nullptr,
       nullptr},
      {F::iq2_xxs, "iq2_xxs", 256, 66, "ggml block_iq2_xxs", id<F::iq2_xxs>(), "IQ2_XXS",
       decode_each<lowbit::iq2_xxs, 256, 66>, nullptr},
      {F::iq2_xs, "iq2_xs", 256, 74, "ggml block_iq2_xs", id<F::iq2_xs>(), "IQ2_XS",
       decode_each<lowbit::iq2_xs, 256, 74>, nullptr},
      {F::iq3_xxs, "iq3_xxs", 256, 98, "ggml block_iq3_xxs", id<F::iq3_xxs>(), "IQ3_XXS",
       decode_each<lowbit::iq3_xxs, 256, 98>, nullptr},
      {F::iq1_s, "iq1_s", 256, 50, "ggml block_iq1_s", id<F::iq1_s>(), "IQ1_S",
       decode_each<lowbit::iq1_s, 256, 50>, nullptr},
      {F::iq4_nl, "iq4_nl", 32, 18, "ggml block_iq4_nl", id<F::iq4_nl>(), "IQ4_NL", decode_each<deq_iq4_nl, 32, 18>,
       encode_each<iq4_nl_block, 32, 18>},
      {F::iq3_s, "iq3_s", 256, 110, "ggml block_iq3_s", id<F::iq3_s>(), "IQ3_S",
       decode_each<lowbit::iq3_s, 256, 110>, nullptr},
      {F::iq2_s, "iq2_s", 256, 82, "ggml block_iq2_s", id<F::iq2_s>(), "IQ2_S",
       decode_each<lowbit::iq2_s, 256, 82>, nullptr},
      {F::iq4_xs, "iq4_xs", 256, 136, "ggml block_iq4_xs", id<F::iq4_xs>(), "IQ4_XS",
       decode_each<lowbit::iq4_xs, 256, 136>, nullptr},
      {F::i8, "i8", 1, 1, "ggml: int8_t", id<F::i8>(), "I8", nullptr, nullptr},
      {F::i16, "i16", 1, 2, "ggml: int16_t", id<F::i16>(), "I16", nullptr, nullptr},
      {F::i32, "i32", 1, 4, "ggml: int32_t", id<F::i32>(), "I32", nullptr, nullptr},
      {F::i64, "i64", 1, 8, "ggml: int64_t", id<F::i64>(), "I64", nullptr, nullptr},
      {F::f64, "f64", 1, 8, "ggml: double", id<F::f64>(), "F64", nullptr, nullptr},
      {F::iq1_m, "iq1_m", 256, 56, "ggml block_iq1_m", id<F::iq1_m>(), "IQ1_M",
       decode_each<lowbit::iq1_m, 256, 56>, nullptr},
      {F::bf16, "bf16", 1, 2, "ggml: bfloat16", id<F::bf16>(), "BF16", dec_bf16, enc_bf16},
      {F::tq1_0, "tq1_0", 256, 54, "ggml block_tq1_0", id<F::tq1_0>(), "TQ1_0",
       decode_each<lowbit::tq1_0, 256, 54>, nullptr},
      {F::tq2_0, "tq2_0", 256, 66, "ggml block_tq2_0", id<F::tq2_0>(), "TQ2_0",
       decode_each<lowbit::tq2_0, 256, 66>, nullptr},
      {F::mxfp4, "mxfp4", 32, 17, "ggml block_mxfp4 (e8m0 scale, 16 B of e2m1)", id<F::mxfp4>(), "MXFP4",
       decode_each<lowbit::mxfp4, 32, 17>, nullptr},
      {F::nvfp4, "nvfp4", 64, 36, "ggml block_nvfp4", id<F::nvfp4>(), "NVFP4",
       decode_each<lowbit::nvfp4, 64, 36>, nullptr},
      {F::q1_0, "q1_0", 128, 18, "ggml block_q1_0", id<F::q1_0>(), "Q1_0", decode_each<lowbit::q1_0, 128, 18>,
       nullptr},
      {F::q2_0, "q2_0", 64, 18, "ggml block_q2_0 (f16 d, 16 B of 2-bit codes)", id<F::q2_0>(), "Q2_0",
       decode_each<lowbit::q2_0, 64, 18>, nullptr},
      {F::tq6_0, "tq6_0", kTq6BlockValues, kTq6BlockBytes,
       "note section 2.1 (98 B / 128, 6.125 bits); sjkv staging.h", kNo, nullptr, dec_tq6_0, enc_tq6_0},
      {F::tq5_0, "tq5_0", 128, 82, "note section 6 (82 B / 128, 5.125 bits); sjkv's reconstruction, docs/REPLAY.md",
       kNo, nullptr, decode_each<tq5_decode_block, 128, 82>, encode_each<tq5_encode_block, 128, 82>},
      {F::turbo3, "turbo3", 128, 50, "note section 7.2 (50 B / 128, 3.125 bits); TurboQuant fork block_turbo3_0",
       kNo, nullptr, decode_each<deq_turbo3, 128, 50>, encode_each<turbo3_group, 128, 50>},
      {F::turbo4, "turbo4", 128, 66,
       "note section 6 (66 B / 128, 4.125 bits: one fp16 norm + 64 B); TurboQuant fork block_turbo4_0", kNo,
       nullptr, decode_each<deq_turbo4, 128, 66>, encode_each<turbo4_group, 128, 66>},
  };
  return t;
}

// Table index of each format: GGUF ids 0..kMaxGgufId directly, the cache-only rows after.
constexpr uint32_t kMaxGgufId = 42;
constexpr uint32_t kCacheOnlyCount = 4;
constexpr int16_t kAbsent = -1;

const std::array<int16_t, kMaxGgufId + 1 + kCacheOnlyCount>& index() {
  static const auto ix = [] {
    std::array<int16_t, kMaxGgufId + 1 + kCacheOnlyCount> a{};
    a.fill(kAbsent);
    const std::vector<BlockFormatInfo>& t = table();
    for (size_t i = 0; i < t.size(); ++i) {
      const uint32_t v = static_cast<uint32_t>(t[i].format);
      const uint32_t slot = v >= kCacheOnlyFormatBase ? kMaxGgufId + 1 + (v - kCacheOnlyFormatBase) : v;
      if (slot >= a.size() || a[slot] != kAbsent) throw std::logic_error("block_formats: bad table");
      a[slot] = static_cast<int16_t>(i);
    }
    return a;
  }();
  return ix;
}

const BlockFormatInfo* find(BlockFormat f) {
  const uint32_t v = static_cast<uint32_t>(f);
  size_t slot;
  if (v <= kMaxGgufId) slot = v;
  else if (v >= kCacheOnlyFormatBase && v - kCacheOnlyFormatBase < kCacheOnlyCount) slot = kMaxGgufId + 1 + (v - kCacheOnlyFormatBase);
  else return nullptr;
  const int16_t i = index()[slot];
  return i == kAbsent ? nullptr : &table()[static_cast<size_t>(i)];
}

}  // namespace

const std::vector<BlockFormatInfo>& block_formats() { return table(); }

const BlockFormatInfo& format_info(BlockFormat f) {
  if (const BlockFormatInfo* i = find(f)) return *i;
  throw std::invalid_argument("unknown block format " + std::to_string(static_cast<uint32_t>(f)));
}

const BlockFormatInfo* format_by_gguf_id(uint32_t id) {
  if (id > kMaxGgufId) return nullptr;
  return find(static_cast<BlockFormat>(id));
}

const BlockFormatInfo* format_by_name(std::string_view name) {
  std::string low;
  for (char c : name) low += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const BlockFormatInfo& i : table()) {
    std::string n = i.name;
    for (char& c : n) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (low == n) return &i;
  }
  return nullptr;
}

const char* removed_gguf_type_name(uint32_t id) {
  switch (id) {
    case 4: return "Q4_2";
    case 5: return "Q4_3";
    case 31: return "Q4_0_4_4";
    case 32: return "Q4_0_4_8";
    case 33: return "Q4_0_8_8";
    case 36: return "IQ4_NL_4_4";
    case 37: return "IQ4_NL_4_8";
    case 38: return "IQ4_NL_8_8";
  }
  return nullptr;
}

double format_bits(BlockFormat f) {
  const BlockFormatInfo& i = format_info(f);
  return 8.0 * i.block_bytes / i.block_values;
}

void decode_blocks(BlockFormat f, const uint8_t* src, float* dst, size_t n) {
  const BlockFormatInfo& i = format_info(f);
  if (!i.decode) throw std::invalid_argument(std::string("no decoder for block format ") + i.name);
  if (n % i.block_values != 0)
    throw std::invalid_argument(std::to_string(n) + " values is not a whole number of " + i.name + " blocks");
  i.decode(src, dst, n / i.block_values);
}

void encode_blocks(BlockFormat f, const float* src, uint8_t* dst, size_t n) {
  const BlockFormatInfo& i = format_info(f);
  if (!i.encode) throw std::invalid_argument(std::string("no encoder for block format ") + i.name);
  if (n % i.block_values != 0)
    throw std::invalid_argument(std::to_string(n) + " values is not a whole number of " + i.name + " blocks");
  i.encode(src, dst, n / i.block_values);
}

}  // namespace sjkv
