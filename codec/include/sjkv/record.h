// Sealing and decoding one record, reference form (docs/SPEC.md §6, §7, §8). Plain loops in the
// spec's order, usable from host and device (one thread per record). The vectorised CPU
// path (seal.h) must give the same bytes; tests hold it to that.
#pragma once

#include "sjkv/balance.h"
#include "sjkv/fp16.h"
#include "sjkv/layout.h"
#include "sjkv/trellis.h"

namespace sjkv {

// Scratch for one record seal: tile M and the balancing state, sized for R*C = D*G.
struct RecordScratch {
  float* M;     // [R][C]
  BalanceScratch bal;
  float* lo;    // [max(D,G)]
  float* step;  // [max(D,G)]
};

// Scratch of the trellis part of one side (reference seal), n = the sequence length (G on
// the token axis, D on the channel axis): y[n] targets, phi[128] costs, choice[n*64] branch
// choices, codes[n] of one sequence and cbf[kTrellisMaxEntries] decoded table entries.
struct TrellisScratch {
  float* y;
  float* phi;
  uint8_t* choice;
  uint8_t* codes;
  float* cbf;
};

// Tile of one side from G fp16 rows of D values, balanced (§6.2-6.4), then the per-row
// affine of §6.5: s.lo / s.step per row and the scale/zero written for every row.
SJKV_HD inline void seal_side_prepare_ref(const RecordLayout& l, Side side, const uint16_t* rows, size_t stride,
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
  const uint32_t qmax = (1u << (is_k ? l.bits_k : l.bits_v)) - 1u;
  for (uint32_t r = 0; r < R; ++r) {
    const float* row = cur + static_cast<size_t>(r) * C;
    float lo = row[0], hi = row[0];
    for (uint32_t c = 1; c < C; ++c) { lo = op::minS(lo, row[c]); hi = op::maxS(hi, row[c]); }
    const float step = bal::affine_step(lo, hi, qmax);
    const float sr = s.bal.s_row[r];
    s.lo[r] = lo;
    s.step[r] = step;
    if (is_k) {
      const uint32_t i = k_ch_idx(l, r);
      store_u16(rec + l.k_scale + 2 * i, f32_to_f16(op::fmul(sr, step)));
      store_u16(rec + l.k_zero + 2 * i, f32_to_f16(op::fmul(sr, lo)));
    } else {
      store_u16(rec + l.v_scale + 2 * r, f32_to_f16(op::fmul(sr, step)));
      store_u16(rec + l.v_zero + 2 * r, f32_to_f16(op::fmul(sr, lo)));
    }
  }
}

// Column scales of §6.7, written last: Ktok[t] (K) or Vch[v_ch_idx(d)] (V).
SJKV_HD inline void seal_side_columns_ref(const RecordLayout& l, Side side, RecordScratch s, uint8_t* rec) {
  const bool is_k = side == Side::k;
  const uint32_t C = is_k ? l.group : l.head_dim;
  for (uint32_t c = 0; c < C; ++c) {
    const uint16_t h = f32_to_f16(s.bal.s_col[c]);
    if (is_k) store_u16(rec + l.k_tok + 2 * c, h); else store_u16(rec + l.v_ch + 2 * v_ch_idx(l, c), h);
  }
}

// One side (K or V) of a scalar record from G fp16 rows of D values (row stride `stride`).
SJKV_HD inline void seal_side_scalar_ref(const RecordLayout& l, Side side, const uint16_t* rows, size_t stride,
                                         uint32_t iters, BalanceMode mode, RecordScratch s, uint8_t* rec) {
  seal_side_prepare_ref(l, side, rows, stride, iters, mode, s, rec);
  const bool is_k = side == Side::k;
  const uint32_t R = is_k ? l.head_dim : l.group, C = is_k ? l.group : l.head_dim;
  const uint32_t b = is_k ? l.bits_k : l.bits_v;
  const uint32_t qmax = (1u << b) - 1u;
  uint8_t* payload = rec + (is_k ? l.k_payload : l.v_payload);
  for (uint32_t r = 0; r < R; ++r) {
    const float* row = s.bal.cur + static_cast<size_t>(r) * C;
    for (uint32_t c = 0; c < C; ++c) {
      const uint32_t q = bal::rtn_code(row[c], s.lo[r], s.step[r], qmax);
      const uint32_t t = is_k ? c : r, d = is_k ? r : c;
      put_bits(payload, code_bit(l, side, t, d), b, q);
    }
  }
  seal_side_columns_ref(l, side, s, rec);
}

// Whole scalar record: zero-fill, K side, then V side.
SJKV_HD inline void seal_record_scalar_ref(const RecordLayout& l, const uint16_t* k_rows, const uint16_t* v_rows,
                                           size_t stride, uint32_t iters, BalanceMode mode, RecordScratch s,
                                           uint8_t* rec) {
  for (uint32_t i = 0; i < l.bytes; ++i) rec[i] = 0;
  seal_side_scalar_ref(l, Side::k, k_rows, stride, iters, mode, s, rec);
  seal_side_scalar_ref(l, Side::v, v_rows, stride, iters, mode, s, rec);
}

// One side of a trellis record (§7), in the spec's order of events (§7.5): row min/max and the
// initial scale/zero of every row, Viterbi for every sequence (every channel on the token
// axis, every token row on the channel axis), refit of every row of the balanced tile,
// column scales. `table` is the side's codebook (2^(6+b) fp16 entries).
SJKV_HD inline void seal_side_trellis_ref(const RecordLayout& l, Side side, const uint16_t* rows, size_t stride,
                                          uint32_t iters, BalanceMode mode, const uint16_t* table, RecordScratch s,
                                          TrellisScratch ts, uint8_t* rec) {
  seal_side_prepare_ref(l, side, rows, stride, iters, mode, s, rec);
  const uint32_t D = l.head_dim, G = l.group;
  const bool is_k = side == Side::k;
  const uint32_t R = is_k ? D : G, C = is_k ? G : D;
  const uint32_t b = is_k ? l.bits_k : l.bits_v;
  const float* cur = s.bal.cur;
  for (uint32_t w = 0; w < trellis_entries(b); ++w) ts.cbf[w] = f16_to_f32(table[w]);
  uint8_t* payload = rec + (is_k ? l.k_payload : l.v_payload);
  // Sequence q, position i: (t, d) = (i, q) on the token axis, (q, i) on the channel axis;
  // its codes are contiguous in the stream from bit q*n*b either way.
  const bool ch_axis = l.axis == TrellisAxis::channel;
  const uint32_t S = l.trellis_seqs(), n = l.trellis_len();
  for (uint32_t q = 0; q < S; ++q) {
    for (uint32_t i = 0; i < n; ++i) {
      const uint32_t t = ch_axis ? q : i, d = ch_axis ? i : q;
      const uint32_t r = is_k ? d : t, c = is_k ? t : d;
      ts.y[i] = trellis::target(cur[static_cast<size_t>(r) * C + c], s.lo[r], s.step[r]);
    }
    trellis::viterbi_ref(ts.y, n, b, ts.cbf, ts.phi, ts.choice, ts.codes);
    for (uint32_t i = 0; i < n; ++i) put_bits(payload, (q * n + i) * b, b, ts.codes[i]);
  }
  for (uint32_t r = 0; r < R; ++r) {
    trellis::RefitSums sums;
    for (uint32_t c = 0; c < C; ++c) {
      const uint32_t t = is_k ? c : r, d = is_k ? r : c;
      trellis::refit_add(sums, cur[static_cast<size_t>(r) * C + c], ts.cbf[trellis::window_at(l, rec, side, t, d)]);
    }
    double a, bz;
    if (!trellis::refit_solve(sums, C, &a, &bz)) continue;
    uint16_t sc, zp;
    trellis::refit_store(s.bal.s_row[r], a, bz, &sc, &zp);
    const uint32_t i = is_k ? k_ch_idx(l, r) : r;
    store_u16(rec + (is_k ? l.k_scale : l.v_scale) + 2 * i, sc);
    store_u16(rec + (is_k ? l.k_zero : l.v_zero) + 2 * i, zp);
  }
  seal_side_columns_ref(l, side, s, rec);
}

// Whole trellis record (l.body == trellis, validated layout): zero-fill, K side, V side.
SJKV_HD inline void seal_record_trellis_ref(const RecordLayout& l, const uint16_t* k_rows, const uint16_t* v_rows,
                                            size_t stride, uint32_t iters, BalanceMode mode,
                                            const TrellisCodebooks& cb, RecordScratch s, TrellisScratch ts,
                                            uint8_t* rec) {
  for (uint32_t i = 0; i < l.bytes; ++i) rec[i] = 0;
  seal_side_trellis_ref(l, Side::k, k_rows, stride, iters, mode, codebook_table(cb, Side::k, l.bits_k), s, ts, rec);
  seal_side_trellis_ref(l, Side::v, v_rows, stride, iters, mode, codebook_table(cb, Side::v, l.bits_v), s, ts, rec);
}

// Either body, by l.body.
SJKV_HD inline void seal_record_ref(const RecordLayout& l, const uint16_t* k_rows, const uint16_t* v_rows,
                                    size_t stride, uint32_t iters, BalanceMode mode, const TrellisCodebooks& cb,
                                    RecordScratch s, TrellisScratch ts, uint8_t* rec) {
  if (l.body == Body::trellis) seal_record_trellis_ref(l, k_rows, v_rows, stride, iters, mode, cb, s, ts, rec);
  else seal_record_scalar_ref(l, k_rows, v_rows, stride, iters, mode, s, rec);
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

// Trellis K row t: q = F(cbK[w]) (§8), same operation order as the scalar decoder.
SJKV_HD inline void decode_k_row_trellis(const RecordLayout& l, const uint8_t* rec, uint32_t t, float* out,
                                         const TrellisCodebooks& cb = TrellisCodebooks{}) {
  const uint16_t* table = codebook_table(cb, Side::k, l.bits_k);
  const float tok = f16_to_f32(load_u16(rec + l.k_tok + 2 * t));
  for (uint32_t d = 0; d < l.head_dim; ++d) {
    const uint32_t i = k_ch_idx(l, d);
    const float sc = f16_to_f32(load_u16(rec + l.k_scale + 2 * i));
    const float zp = f16_to_f32(load_u16(rec + l.k_zero + 2 * i));
    out[d] = op::fmul(op::fadd(op::fmul(trellis_q(l, rec, Side::k, t, d, table), sc), zp), tok);
  }
}

// Trellis V row t: q = F(cbV[w]).
SJKV_HD inline void decode_v_row_trellis(const RecordLayout& l, const uint8_t* rec, uint32_t t, float* out,
                                         const TrellisCodebooks& cb = TrellisCodebooks{}) {
  const uint16_t* table = codebook_table(cb, Side::v, l.bits_v);
  const float sc = f16_to_f32(load_u16(rec + l.v_scale + 2 * t));
  const float zp = f16_to_f32(load_u16(rec + l.v_zero + 2 * t));
  for (uint32_t d = 0; d < l.head_dim; ++d) {
    const float ch = f16_to_f32(load_u16(rec + l.v_ch + 2 * v_ch_idx(l, d)));
    out[d] = op::fmul(op::fadd(op::fmul(trellis_q(l, rec, Side::v, t, d, table), sc), zp), ch);
  }
}

// Per-element forms of the decoders above (same operations, same order), for kernels that
// decode a part of a row (a lane's channels) and keep a record's factors in registers.
// (q*scale + zero) * f: f is Ktok[t] on the K side, Vch[d] on the V side.
SJKV_HD inline float decode_affine(float q, float scale, float zero, float f) {
  return op::fmul(op::fadd(op::fmul(q, scale), zero), f);
}

// Code value of (t, d) of either body; `table` is the side's codebook (unused for scalar).
SJKV_HD inline float record_q(const RecordLayout& l, const uint8_t* rec, Side side, uint32_t t, uint32_t d,
                              const uint16_t* table) {
  return l.body == Body::trellis ? trellis_q(l, rec, side, t, d, table) : scalar_q(l, rec, side, t, d);
}

// K value (t, d) and V value (t, d): element d of decode_k_row_ref / decode_v_row_ref.
SJKV_HD inline float decode_k_value(const RecordLayout& l, const uint8_t* rec, uint32_t t, uint32_t d,
                                    const TrellisCodebooks& cb = TrellisCodebooks{}) {
  const uint32_t i = k_ch_idx(l, d);
  return decode_affine(record_q(l, rec, Side::k, t, d, codebook_table(cb, Side::k, l.bits_k)),
                       f16_to_f32(load_u16(rec + l.k_scale + 2 * i)), f16_to_f32(load_u16(rec + l.k_zero + 2 * i)),
                       f16_to_f32(load_u16(rec + l.k_tok + 2 * t)));
}

SJKV_HD inline float decode_v_value(const RecordLayout& l, const uint8_t* rec, uint32_t t, uint32_t d,
                                    const TrellisCodebooks& cb = TrellisCodebooks{}) {
  return decode_affine(record_q(l, rec, Side::v, t, d, codebook_table(cb, Side::v, l.bits_v)),
                       f16_to_f32(load_u16(rec + l.v_scale + 2 * t)), f16_to_f32(load_u16(rec + l.v_zero + 2 * t)),
                       f16_to_f32(load_u16(rec + l.v_ch + 2 * v_ch_idx(l, d))));
}

// Either body, by l.body (host and device).
SJKV_HD inline void decode_k_row_ref(const RecordLayout& l, const uint8_t* rec, uint32_t t, float* out,
                                     const TrellisCodebooks& cb = TrellisCodebooks{}) {
  if (l.body == Body::trellis) decode_k_row_trellis(l, rec, t, out, cb);
  else decode_k_row_scalar(l, rec, t, out);
}

SJKV_HD inline void decode_v_row_ref(const RecordLayout& l, const uint8_t* rec, uint32_t t, float* out,
                                     const TrellisCodebooks& cb = TrellisCodebooks{}) {
  if (l.body == Body::trellis) decode_v_row_trellis(l, rec, t, out, cb);
  else decode_v_row_scalar(l, rec, t, out);
}

}  // namespace sjkv
