// Scalar reference decoders of ggml's low-bit weight formats (see block_decode_lowbit.h).
// Written for sjkv from the block layouts of ggml-common.h and the formulas of gguf.quants;
// the tables come from gguf.quants through scripts/gen-iq-grids.py (iq_grids.h).
#include "block_decode_lowbit.h"

#include "iq_grids.h"
#include "sjkv/block_formats.h"
#include "sjkv/fp16.h"

namespace sjkv {
namespace lowbit {
namespace {

inline uint32_t le16(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8);
}

inline uint32_t le32(const uint8_t* p) {
  return le16(p) | (le16(p + 2) << 16);
}

inline float fp16_at(const uint8_t* p) { return f16_to_f32(static_cast<uint16_t>(le16(p))); }

// Byte k of a grid row, as the grid's (unsigned) magnitude.
inline float grid_u8(uint64_t row, uint32_t k) {
  return static_cast<float>(static_cast<uint8_t>(row >> (8 * k)));
}

// Byte k of an iq1s_grid row, as the signed value it stores (-1, 0 or 1).
inline float grid_i8(uint64_t row, uint32_t k) {
  return static_cast<float>(static_cast<int8_t>(static_cast<uint8_t>(row >> (8 * k))));
}

inline float sign_of_bit(uint32_t bits, uint32_t k) { return ((bits >> k) & 1u) ? -1.0f : 1.0f; }

// The 2-bit fields of qs[64] in value order: value v sits at qs[32 (v / 128) + v % 32],
// bits 2 ((v / 32) % 4).
inline uint32_t two_bits_at(const uint8_t* qs, uint32_t v) {
  return (qs[(v / 128) * 32 + v % 32] >> (2 * ((v / 32) % 4))) & 3u;
}

// Half the E8M0 scale 2^(e - 127), built from its bits (e < 2 gives a binary32 subnormal;
// e = 255 gives 2^127, not NaN, as in gguf.quants and ggml).
inline float e8m0_half(uint8_t e) {
  const uint32_t bits = e < 2 ? (0x00200000u << e) : (static_cast<uint32_t>(e - 1) << 23);
  return f32_from_bits(bits);
}

// Half the unsigned E4M3 scale (bias 7, no sign bit: bit 7 is ignored). 0x00 and 0x7F (the
// NaN code) give +0; 0xFF is not special and gives 240, as in gguf.quants and ggml.
// gguf.quants computes man * 2**-9 and (1 + man / 8) * 2.0**(exp - 7) in binary32, every
// step exact, then halves; the power of two is built from its bits here, the same value.
inline float ue4m3_half(uint8_t x) {
  if (x == 0 || x == 0x7F) return 0.0f;
  const uint32_t exp = (x >> 3) & 0xFu;
  const float man = static_cast<float>(x & 7u);
  const float raw = exp == 0 ? man * f32_from_bits(0x3b000000u)  // 2^-9
                             : (1.0f + man / 8.0f) * f32_from_bits((exp - 7u + 127u) << 23);
  return raw * 0.5f;
}

}  // namespace

// y = dl * q - ml with dl = d * (sc & 15), ml = dmin * (sc >> 4), two roundings as numpy
// does. ggml's C writes the same expression, which a compiler may fuse into one FMA; the
// product dl * q (fp16 mantissa times 4 bits times 2 bits) is exact, so both give these bits.
void q2_k(const uint8_t* block, float* out) {
  const uint8_t* scales = block;
  const uint8_t* qs = block + 16;
  const float d = fp16_at(block + 80);
  const float dmin = fp16_at(block + 82);
  for (uint32_t v = 0; v < 256; ++v) {
    const uint8_t sc = scales[v / 16];
    const float dl = d * static_cast<float>(sc & 0xF);
    const float ml = dmin * static_cast<float>(sc >> 4);
    out[v] = dl * static_cast<float>(two_bits_at(qs, v)) - ml;
  }
}

void q3_k(const uint8_t* block, float* out) {
  const uint8_t* hmask = block;
  const uint8_t* qs = block + 32;
  const uint8_t* sc = block + 96;
  const float d = fp16_at(block + 108);
  float dl[16];
  for (uint32_t k = 0; k < 16; ++k) dl[k] = d * static_cast<float>(blockfmt::q3_k_scale(sc, k));
  for (uint32_t v = 0; v < 256; ++v) {
    // hmask bit (v / 32) of hmask[v % 32]; a clear bit subtracts 4.
    const uint32_t h = (hmask[v % 32] >> (v / 32)) & 1u;
    const int q = static_cast<int>(two_bits_at(qs, v)) - static_cast<int>((h ^ 1u) << 2);
    out[v] = dl[v / 16] * static_cast<float>(q);
  }
}

void iq4_xs(const uint8_t* block, float* out) {
  const float d = fp16_at(block);
  const uint8_t* qs = block + 8;
  for (uint32_t ib = 0; ib < 8; ++ib) {
    const float dl = d * static_cast<float>(blockfmt::iq4_xs_scale(block, ib));
    const uint8_t* q = qs + 16 * ib;
    float* y = out + 32 * ib;
    for (uint32_t j = 0; j < 16; ++j) {
      y[j] = dl * static_cast<float>(blockfmt::kIq4nlValues[q[j] & 0xF]);
      y[j + 16] = dl * static_cast<float>(blockfmt::kIq4nlValues[q[j] >> 4]);
    }
  }
}

// The i-quant sub-block scale is (d * (0.5 + s)) * 0.25 (IQ2) or * 0.5 (IQ3_XXS), in that
// order in both gguf.quants and ggml; then (db * grid) * sign.
void iq3_xxs(const uint8_t* block, float* out) {
  const float d = fp16_at(block);
  const uint8_t* qs = block + 2;
  const uint8_t* aux = block + 66;
  for (uint32_t ib = 0; ib < 8; ++ib) {
    const uint32_t a = le32(aux + 4 * ib);
    const float db = d * (0.5f + static_cast<float>(a >> 28)) * 0.5f;
    for (uint32_t g = 0; g < 4; ++g) {
      const uint32_t signs = k_ksigns_iq2xs[(a >> (7 * g)) & 127u];
      const uint32_t row0 = k_iq3xxs_grid[qs[8 * ib + 2 * g]];
      const uint32_t row1 = k_iq3xxs_grid[qs[8 * ib + 2 * g + 1]];
      float* y = out + 32 * ib + 8 * g;
      for (uint32_t k = 0; k < 4; ++k) {
        y[k] = db * grid_u8(row0, k) * sign_of_bit(signs, k);
        y[k + 4] = db * grid_u8(row1, k) * sign_of_bit(signs, k + 4);
      }
    }
  }
}

void iq3_s(const uint8_t* block, float* out) {
  const float d = fp16_at(block);
  const uint8_t* qs = block + 2;
  const uint8_t* qh = block + 66;
  const uint8_t* signs = block + 74;
  const uint8_t* scales = block + 106;
  for (uint32_t ib = 0; ib < 8; ++ib) {
    const uint32_t s = (scales[ib / 2] >> (4 * (ib % 2))) & 0xFu;
    const float db = d * static_cast<float>(1u + 2u * s);
    for (uint32_t j = 8 * ib; j < 8 * ib + 8; ++j) {  // grid rows of 4 values
      const uint32_t idx = qs[j] | (((qh[j / 8] >> (j % 8)) & 1u) << 8);
      const uint32_t row = k_iq3s_grid[idx];
      for (uint32_t k = 0; k < 4; ++k) {
        const uint32_t v = 4 * j + k;
        out[v] = db * grid_u8(row, k) * sign_of_bit(signs[v / 8], v % 8);
      }
    }
  }
}

void iq2_xxs(const uint8_t* block, float* out) {
  const float d = fp16_at(block);
  const uint8_t* qs = block + 2;
  for (uint32_t ib = 0; ib < 8; ++ib) {
    const uint32_t idx = le32(qs + 8 * ib);
    const uint32_t a = le32(qs + 8 * ib + 4);
    const float db = d * (0.5f + static_cast<float>(a >> 28)) * 0.25f;
    for (uint32_t g = 0; g < 4; ++g) {
      const uint64_t row = k_iq2xxs_grid[(idx >> (8 * g)) & 0xFFu];
      const uint32_t signs = k_ksigns_iq2xs[(a >> (7 * g)) & 127u];
      float* y = out + 32 * ib + 8 * g;
      for (uint32_t k = 0; k < 8; ++k) y[k] = db * grid_u8(row, k) * sign_of_bit(signs, k);
    }
  }
}

void iq2_xs(const uint8_t* block, float* out) {
  const float d = fp16_at(block);
  const uint8_t* qs = block + 2;
  const uint8_t* scales = block + 66;
  for (uint32_t j = 0; j < 32; ++j) {  // rows of 8 values; two rows share a 4-bit scale
    const uint32_t q = le16(qs + 2 * j);
    const uint32_t s = (scales[j / 4] >> (4 * ((j / 2) % 2))) & 0xFu;
    const float db = d * (0.5f + static_cast<float>(s)) * 0.25f;
    const uint64_t row = k_iq2xs_grid[q & 511u];
    const uint32_t signs = k_ksigns_iq2xs[q >> 9];
    for (uint32_t k = 0; k < 8; ++k) out[8 * j + k] = db * grid_u8(row, k) * sign_of_bit(signs, k);
  }
}

void iq2_s(const uint8_t* block, float* out) {
  const float d = fp16_at(block);
  const uint8_t* qs = block + 2;
  const uint8_t* signs = block + 34;
  const uint8_t* qh = block + 66;
  const uint8_t* scales = block + 74;
  for (uint32_t j = 0; j < 32; ++j) {
    const uint32_t idx = qs[j] | (((qh[j / 4] >> (2 * (j % 4))) & 3u) << 8);
    const uint32_t s = (scales[j / 4] >> (4 * ((j / 2) % 2))) & 0xFu;
    const float db = d * (0.5f + static_cast<float>(s)) * 0.25f;
    const uint64_t row = k_iq2s_grid[idx];
    for (uint32_t k = 0; k < 8; ++k)
      out[8 * j + k] = db * grid_u8(row, k) * sign_of_bit(signs[j], k);
  }
}

// IQ1: y = dl * (grid + delta), the sum first (exact: grid in {-1, 0, 1}, delta = +-1/8).
constexpr float kIq1Delta = 0.125f;

void iq1_s(const uint8_t* block, float* out) {
  const float d = fp16_at(block);
  const uint8_t* qs = block + 2;
  const uint8_t* qh = block + 34;
  for (uint32_t ib = 0; ib < 8; ++ib) {
    const uint32_t h = le16(qh + 2 * ib);
    const float dl = d * static_cast<float>(2u * ((h >> 12) & 7u) + 1u);
    const float delta = (h & 0x8000u) ? -kIq1Delta : kIq1Delta;
    for (uint32_t g = 0; g < 4; ++g) {
      const uint64_t row = k_iq1s_grid[qs[4 * ib + g] | (((h >> (3 * g)) & 7u) << 8)];
      float* y = out + 32 * ib + 8 * g;
      for (uint32_t k = 0; k < 8; ++k) y[k] = dl * (grid_i8(row, k) + delta);
    }
  }
}

void iq1_m(const uint8_t* block, float* out) {
  const uint8_t* qs = block;
  const uint8_t* qh = block + 32;
  uint32_t sc[4];
  for (uint32_t i = 0; i < 4; ++i) sc[i] = le16(block + 48 + 2 * i);
  // The fp16 scale: top nibble of sc[i] is its nibble 3 - i (sc[0] holds the lowest).
  const uint32_t dbits = (sc[0] >> 12) | ((sc[1] & 0xF000u) >> 8) | ((sc[2] & 0xF000u) >> 4) |
                         (sc[3] & 0xF000u);
  const float d = f16_to_f32(static_cast<uint16_t>(dbits));
  for (uint32_t j = 0; j < 32; ++j) {  // rows of 8; scale per 16 values (two rows)
    const uint32_t s = (sc[j / 8] >> (3 * ((j / 2) % 4))) & 7u;
    const float dl = d * static_cast<float>(2u * s + 1u);
    const uint32_t nib = (qh[j / 2] >> (4 * (j % 2))) & 0xFu;
    const float delta = (nib & 8u) ? -kIq1Delta : kIq1Delta;
    const uint64_t row = k_iq1s_grid[qs[j] | ((nib & 7u) << 8)];
    for (uint32_t k = 0; k < 8; ++k) out[8 * j + k] = dl * (grid_i8(row, k) + delta);
  }
}

// Q1_0: f16 d, then one bit per value (value j: bit j % 8 of byte j / 8): d where set, -d where
// clear (ggml negates d once, so a NaN d keeps its payload with the sign flipped).
void q1_0(const uint8_t* block, float* out) {
  const float d = fp16_at(block), neg = -d;
  for (uint32_t v = 0; v < 128; ++v) out[v] = ((block[2 + v / 8] >> (v % 8)) & 1u) ? d : neg;
}

// Q2_0: f16 d, then 2 bits per value (value j: bits 2 (j % 4) of byte j / 4), codes 0..3 as
// -1, 0, 1, 2 times d (the integer converted, then one multiply).
void q2_0(const uint8_t* block, float* out) {
  const float d = fp16_at(block);
  for (uint32_t v = 0; v < 64; ++v) {
    const int q = static_cast<int>((block[2 + v / 4] >> (2 * (v % 4))) & 3u);
    out[v] = static_cast<float>(q - 1) * d;
  }
}

// TQ1_0: trit n of a byte q is ((q * 3^n mod 256) * 3) >> 8 (the byte holds the trits as a
// fixed-point fraction). Value order: 5 x 32 from qs[0..31], 5 x 16 from qs[32..47], 4 x 4
// from qh, the trit number outer.
void tq1_0(const uint8_t* block, float* out) {
  const float d = fp16_at(block + 52);
  const auto trit = [](uint8_t q, uint32_t n) {
    const uint32_t shifted = static_cast<uint8_t>(q * k_tq1_pow3[n]);
    return static_cast<int>((shifted * 3u) >> 8) - 1;
  };
  uint32_t v = 0;
  for (uint32_t n = 0; n < 5; ++n)
    for (uint32_t m = 0; m < 32; ++m) out[v++] = d * static_cast<float>(trit(block[m], n));
  for (uint32_t n = 0; n < 5; ++n)
    for (uint32_t m = 0; m < 16; ++m) out[v++] = d * static_cast<float>(trit(block[32 + m], n));
  for (uint32_t n = 0; n < 4; ++n)
    for (uint32_t m = 0; m < 4; ++m) out[v++] = d * static_cast<float>(trit(block[48 + m], n));
}

void tq2_0(const uint8_t* block, float* out) {
  const float d = fp16_at(block + 64);
  for (uint32_t v = 0; v < 256; ++v)
    out[v] = d * static_cast<float>(static_cast<int>(two_bits_at(block, v)) - 1);
}

void mxfp4(const uint8_t* block, float* out) {
  const float d = e8m0_half(block[0]);
  const uint8_t* qs = block + 1;
  for (uint32_t j = 0; j < 16; ++j) {
    out[j] = d * static_cast<float>(k_kvalues_mxfp4[qs[j] & 0xF]);
    out[j + 16] = d * static_cast<float>(k_kvalues_mxfp4[qs[j] >> 4]);
  }
}

void nvfp4(const uint8_t* block, float* out) {
  const uint8_t* qs = block + 4;
  for (uint32_t s = 0; s < 4; ++s) {
    const float d = ue4m3_half(block[s]);
    for (uint32_t j = 0; j < 8; ++j) {
      const uint8_t q = qs[8 * s + j];
      out[16 * s + j] = d * static_cast<float>(k_kvalues_mxfp4[q & 0xF]);
      out[16 * s + 8 + j] = d * static_cast<float>(k_kvalues_mxfp4[q >> 4]);
    }
  }
}

}  // namespace lowbit
}  // namespace sjkv
