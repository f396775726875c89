// Sealing and decoding one record, reference form (CODEC-SPEC §5, §7). Plain loops in the
// spec's order, usable from host and device (one thread per record). The vectorised CPU
// path (seal.h) must give the same bytes; tests hold it to that.
#pragma once

#include "sjkv/balance.h"
#include "sjkv/fp16.h"
#include "sjkv/layout.h"

namespace sjkv {

// Scratch for one record seal: tile M and the balancing state, sized for R*C = D*G.
struct RecordScratch {
  float* M;     // [R][C]
  BalanceScratch bal;
  float* lo;    // [max(D,G)]
  float* step;  // [max(D,G)]
};

// One side (K or V) of a scalar record from G fp16 rows of D values (row stride `stride`).
SJKV_HD inline void seal_side_scalar_ref(const RecordLayout& l, Side side, const uint16_t* rows, size_t stride,
                                         uint32_t iters, BalanceMode mode, RecordScratch s, uint8_t* rec) {
  const uint32_t D = l.head_dim, G = l.group;
  const bool is_k = side == Side::k;
  const uint32_t R = is_k ? D : G, C = is_k ? G : D;
  for (uint32_t t = 0; t < G; ++t)
    for (uint32_t d = 0; d < D; ++d) {
      const float x = f16_to_f32(rows[static_cast<size_t>(t) * stride + d]);
      if (is_k) s.M[static_cast<size_t>(d) * C + t] = x; else s.M[static_cast<size_t>(t) * C + d] = x;
    }
  balance_tile_ref(s.M, R, C, iters, mode, s.bal);
  const float* cur = s.bal.cur;
  const uint32_t b = is_k ? l.bits_k : l.bits_v;
  const uint32_t qmax = (1u << b) - 1u;
  uint8_t* payload = rec + (is_k ? l.k_payload : l.v_payload);
  for (uint32_t r = 0; r < R; ++r) {
    const float* row = cur + static_cast<size_t>(r) * C;
    float lo = row[0], hi = row[0];
    for (uint32_t c = 1; c < C; ++c) { lo = op::minS(lo, row[c]); hi = op::maxS(hi, row[c]); }
    const float step = bal::affine_step(lo, hi, qmax);
    const float sr = s.bal.s_row[r];
    if (is_k) {
      const uint32_t i = k_ch_idx(l, r);
      store_u16(rec + l.k_scale + 2 * i, f32_to_f16(op::fmul(sr, step)));
      store_u16(rec + l.k_zero + 2 * i, f32_to_f16(op::fmul(sr, lo)));
    } else {
      store_u16(rec + l.v_scale + 2 * r, f32_to_f16(op::fmul(sr, step)));
      store_u16(rec + l.v_zero + 2 * r, f32_to_f16(op::fmul(sr, lo)));
    }
    for (uint32_t c = 0; c < C; ++c) {
      const uint32_t q = bal::rtn_code(row[c], lo, step, qmax);
      const uint32_t t = is_k ? c : r, d = is_k ? r : c;
      put_bits(payload, code_bit(l, side, t, d), b, q);
    }
  }
  for (uint32_t c = 0; c < C; ++c) {
    const uint16_t h = f32_to_f16(s.bal.s_col[c]);
    if (is_k) store_u16(rec + l.k_tok + 2 * c, h); else store_u16(rec + l.v_ch + 2 * v_ch_idx(l, c), h);
  }
}

// Whole scalar record: zero-fill, K side, then V side.
SJKV_HD inline void seal_record_scalar_ref(const RecordLayout& l, const uint16_t* k_rows, const uint16_t* v_rows,
                                           size_t stride, uint32_t iters, BalanceMode mode, RecordScratch s,
                                           uint8_t* rec) {
  for (uint32_t i = 0; i < l.bytes; ++i) rec[i] = 0;
  seal_side_scalar_ref(l, Side::k, k_rows, stride, iters, mode, s, rec);
  seal_side_scalar_ref(l, Side::v, v_rows, stride, iters, mode, s, rec);
}

// Code value q(t, d) of a scalar side, as binary32.
SJKV_HD inline float scalar_q(const RecordLayout& l, const uint8_t* rec, Side side, uint32_t t, uint32_t d) {
  const uint8_t* payload = rec + (side == Side::k ? l.k_payload : l.v_payload);
  const uint32_t b = side == Side::k ? l.bits_k : l.bits_v;
  return static_cast<float>(get_bits(payload, code_bit(l, side, t, d), b));
}

// K row t (D outputs, rotated basis): ((q*Kscale + Kzero) * Ktok).
SJKV_HD inline void decode_k_row_scalar(const RecordLayout& l, const uint8_t* rec, uint32_t t, float* out) {
  const float tok = f16_to_f32(load_u16(rec + l.k_tok + 2 * t));
  for (uint32_t d = 0; d < l.head_dim; ++d) {
    const uint32_t i = k_ch_idx(l, d);
    const float sc = f16_to_f32(load_u16(rec + l.k_scale + 2 * i));
    const float zp = f16_to_f32(load_u16(rec + l.k_zero + 2 * i));
    out[d] = op::fmul(op::fadd(op::fmul(scalar_q(l, rec, Side::k, t, d), sc), zp), tok);
  }
}

// V row t: ((q*Vscale + Vzero) * Vch).
SJKV_HD inline void decode_v_row_scalar(const RecordLayout& l, const uint8_t* rec, uint32_t t, float* out) {
  const float sc = f16_to_f32(load_u16(rec + l.v_scale + 2 * t));
  const float zp = f16_to_f32(load_u16(rec + l.v_zero + 2 * t));
  for (uint32_t d = 0; d < l.head_dim; ++d) {
    const float ch = f16_to_f32(load_u16(rec + l.v_ch + 2 * v_ch_idx(l, d)));
    out[d] = op::fmul(op::fadd(op::fmul(scalar_q(l, rec, Side::v, t, d), sc), zp), ch);
  }
}

}  // namespace sjkv
