// Folded per-record attention math (fused decode attention, GPU kernels and their CPU
// emulation). A body value is an affine of its code with per-row and per-column factors
// (record.h): K(t,d) = (q*Ks[d] + Kz[d]) * Ktok[t], V(t,d) = (q*Vs[t] + Vz[t]) * Vch[d]. So
//   q.K(t)      = Ktok[t] * (sum_d q[d]*Kz[d] + sum_d (q[d]*Ks[d]) * code(t,d))
//   sum_t p_t V = Vch[d]  * (sum_t p_t*Vz[t] + sum_t (p_t*Vs[t]) * code(t,d))
// and the inner loops are one multiply-add per code and query row; the factors are applied
// once per record. Equal to the reference up to rounding (a tolerance, not bits: docs/SPEC.md §9.7's
// attention is a tolerance reference).
#pragma once

#include <math.h>

#include <cstdint>

#include "sjkv/cache_view.h"
#include "sjkv/record.h"
#include "sjkv/staging.h"

namespace sjkv {
namespace attn {

// One correctly rounded multiply-add: the same bits from C fmaf on the host and the device.
SJKV_HD inline float fma32(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return ::fmaf(a, b, c);
#endif
}

// out[r] = sum over i in [i0, i1), in order, of x[i*NR + r] * val(i), for NR rows; val(i)
// is evaluated once per i (one code decode serves every query row of a KV head), and the
// NR factors of one i are adjacent (vector loads from shared memory).
template <int NR, class Val>
SJKV_HD inline void dot_rows(Val val, const float* x, uint32_t i0, uint32_t i1, float* out) {
  for (int r = 0; r < NR; ++r) out[r] = 0.0f;
  for (uint32_t i = i0; i < i1; ++i) {
    const float c = val(i);
    for (int r = 0; r < NR; ++r) out[r] = fma32(x[i * NR + r], c, out[r]);
  }
}

// Code value of (t, d) of one side: the integer code (scalar) or F(cb[w]) (trellis).
SJKV_HD inline float code_k(const RecordLayout& l, const uint8_t* rec, uint32_t t, uint32_t d, const uint16_t* tab) {
  return record_q(l, rec, Side::k, t, d, tab);
}
SJKV_HD inline float code_v(const RecordLayout& l, const uint8_t* rec, uint32_t t, uint32_t d, const uint16_t* tab) {
  return record_q(l, rec, Side::v, t, d, tab);
}

// 4-bit fragment order (layout.h code_bit, k_fragment / v_fragment): in a 16x16 tile, the
// codes of a fixed "own" index o (token t of a K tile, channel d of a V tile) lie in the 4
// words 4*(o%8) + j4 (j4 = 0..3) of the tile's 32, nibble (o/8)%2 + 2*hi + 4*e holding the
// other index x = 8*hi + 2*j4 + e. So one 32-bit word gives 4 of o's codes.
// out[r] = sum over the tiles tile0 + k*stride (k < n_tiles; x from x0 + 16k) of
// x[xi*NR + r] * code, in (tile, j4, hi, e) order.
SJKV_HD inline uint32_t load_u32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) | (static_cast<uint32_t>(p[2]) << 16) |
         (static_cast<uint32_t>(p[3]) << 24);
}
template <int NR>
SJKV_HD inline void frag4_dot(const uint8_t* payload, uint32_t tile0, uint32_t stride, uint32_t n_tiles, uint32_t o,
                              const float* x, uint32_t x0, float* out) {
  for (int r = 0; r < NR; ++r) out[r] = 0.0f;
  const uint32_t lane4 = 4 * (o % 8), nib0 = (o / 8) % 2;
  for (uint32_t k = 0; k < n_tiles; ++k) {
    const uint8_t* tile = payload + 128 * (tile0 + k * stride);
    for (uint32_t j4 = 0; j4 < 4; ++j4) {
#if defined(__CUDA_ARCH__)
      const uint8_t* wp = tile + 4 * (lane4 + j4);
      const uint32_t w = (reinterpret_cast<uintptr_t>(wp) & 3u) == 0 ? *reinterpret_cast<const uint32_t*>(wp) : load_u32(wp);
#else
      const uint32_t w = load_u32(tile + 4 * (lane4 + j4));
#endif
      for (uint32_t hi = 0; hi < 2; ++hi)
        for (uint32_t e = 0; e < 2; ++e) {
          // 2^23 + code, minus 2^23: exact, and full-rate integer and float ops on the GPU
          // instead of an int-to-float conversion.
          const float c = op::fsub(f32_from_bits(0x4b000000u | ((w >> (4 * (nib0 + 2 * hi + 4 * e))) & 15u)), 8388608.0f);
          const float* xr = x + (x0 + 16 * k + 8 * hi + 2 * j4 + e) * NR;
          for (int r = 0; r < NR; ++r) out[r] = fma32(xr[r], c, out[r]);
        }
    }
  }
}

// Trellis values F(cb[w]) from a float copy of the table (tabf[w] = F(table[w])), the same
// values and the same summation order as dot_rows over record_q, so the same bits.
// Slide: positions [i0, i1) of one sequence starting at seq_bit; the window of position i
// is (window(i-1) >> b) | (code_i << 6), so each step reads one code.
// Codes come from two 32-bit words of the stream held in registers (one load per 32/b
// codes); the stream is read up to two words past the last code, which stays inside the
// record (the scales follow the payloads). Word loads need a 4-byte aligned payload.
SJKV_HD inline uint32_t load_word(const uint8_t* p) {
#if defined(__CUDA_ARCH__)
  return *reinterpret_cast<const uint32_t*>(p);
#else
  return load_u32(p);
#endif
}
template <int NR>
SJKV_HD inline void trellis_slide_dot(const uint8_t* payload, uint32_t seq_bit, uint32_t b, uint32_t i0, uint32_t i1,
                                      const float* tabf, const float* x, float* out) {
  uint32_t w = i0 > 0 ? trellis::window(payload, seq_bit, b, i0 - 1) : 0u;
  if ((reinterpret_cast<uintptr_t>(payload) & 3u) != 0) {
    dot_rows<NR>(
        [&](uint32_t i) {
          w = (w >> b) | (get_bits(payload, seq_bit + i * b, b) << kTrellisHistoryBits);
          return tabf[w];
        },
        x, i0, i1, out);
    return;
  }
  uint32_t bit = seq_bit + i0 * b, wi = bit >> 5;
  uint32_t lo = load_word(payload + 4 * wi), hi = load_word(payload + 4 * (wi + 1));
  const uint32_t mask = (1u << b) - 1u;
  dot_rows<NR>(
      [&](uint32_t) {
        const uint32_t sh = bit & 31u;
        const uint32_t code = static_cast<uint32_t>(((static_cast<uint64_t>(hi) << 32) | lo) >> sh) & mask;
        w = (w >> b) | (code << kTrellisHistoryBits);
        bit += b;
        if ((bit >> 5) != wi) {
          ++wi;
          lo = hi;
          hi = load_word(payload + 4 * (wi + 1));
        }
        return tabf[w];
      },
      x, i0, i1, out);
}
// Stride: position pos of the sequences [s0, s1), each seq_bits long: the windows sit at the
// same bit offset in every sequence, two bytes each.
template <int NR>
SJKV_HD inline void trellis_stride_dot(const uint8_t* payload, uint32_t seq_bits, uint32_t b, uint32_t pos,
                                       uint32_t s0, uint32_t s1, const float* tabf, const float* x, float* out) {
  const uint32_t L = kTrellisHistoryBits + b;
  if (pos * b >= kTrellisHistoryBits && seq_bits % 32 == 0 && ((pos * b - kTrellisHistoryBits) & 31u) + L <= 32 &&
      (reinterpret_cast<uintptr_t>(payload) & 3u) == 0) {
    // The window inside one aligned 32-bit word at the same place in every sequence.
    const uint32_t bit0 = pos * b - kTrellisHistoryBits, sh = bit0 & 31u, stride = seq_bits / 8, mask = (1u << L) - 1u;
    const uint8_t* p = payload + 4 * (bit0 >> 5);
    dot_rows<NR>([&](uint32_t s) { return tabf[(load_word(p + s * stride) >> sh) & mask]; }, x, s0, s1, out);
    return;
  }
  if (pos * b >= kTrellisHistoryBits && seq_bits % 8 == 0 && ((pos * b - kTrellisHistoryBits) & 7u) + L <= 16) {
    const uint32_t bit0 = pos * b - kTrellisHistoryBits, sh = bit0 & 7u, stride = seq_bits / 8, mask = (1u << L) - 1u;
    const uint8_t* p = payload + (bit0 >> 3);
    dot_rows<NR>(
        [&](uint32_t s) {
          const uint8_t* e = p + s * stride;
          return tabf[((static_cast<uint32_t>(e[0]) | (static_cast<uint32_t>(e[1]) << 8)) >> sh) & mask];
        },
        x, s0, s1, out);
    return;
  }
  dot_rows<NR>([&](uint32_t s) { return tabf[trellis::window(payload, s * seq_bits, b, pos)]; }, x, s0, s1, out);
}

// A thread's part of the folded K dot of token t over channels [d0, d1) (qs[d*NR + r]) and
// of the V sum of channel d over tokens [t0, t1) (pv[t*NR + r]) in a body record. `full`:
// the item covers the whole record. Trellis sides with a float table (tabf, else null) use
// the slide/stride readers, fragment sides frag4_dot when the ranges are whole tiles,
// everything else the per-element decode.
template <int NR>
SJKV_HD inline void body_k_dot(const RecordLayout& l, const uint8_t* rec, uint32_t t, uint32_t d0, uint32_t d1,
                               bool full, const float* qs, const uint16_t* tab, const float* tabf, float* out) {
  if (l.body == Body::trellis && tabf) {
    const uint32_t b = l.bits_k;
    if (l.axis == TrellisAxis::channel) trellis_slide_dot<NR>(rec + l.k_payload, t * l.head_dim * b, b, d0, d1, tabf, qs, out);
    else trellis_stride_dot<NR>(rec + l.k_payload, l.group * b, b, t, d0, d1, tabf, qs, out);
    return;
  }
  if (full && l.k_fragment() && d0 % 16 == 0 && d1 % 16 == 0) {
    frag4_dot<NR>(rec + l.k_payload, (t / 16) * (l.head_dim / 16) + d0 / 16, 1, (d1 - d0) / 16, t % 16, qs, d0, out);
    return;
  }
  dot_rows<NR>([&](uint32_t d) { return record_q(l, rec, Side::k, t, d, tab); }, qs, d0, d1, out);
}
template <int NR>
SJKV_HD inline void body_v_dot(const RecordLayout& l, const uint8_t* rec, uint32_t d, uint32_t t0, uint32_t t1,
                               bool full, const float* pv, const uint16_t* tab, const float* tabf, float* out) {
  if (l.body == Body::trellis && tabf) {
    const uint32_t b = l.bits_v;
    if (l.axis == TrellisAxis::channel) trellis_stride_dot<NR>(rec + l.v_payload, l.head_dim * b, b, d, t0, t1, tabf, pv, out);
    else trellis_slide_dot<NR>(rec + l.v_payload, d * l.group * b, b, t0, t1, tabf, pv, out);
    return;
  }
  if (full && l.v_fragment() && t0 % 16 == 0 && t1 % 16 == 0) {
    frag4_dot<NR>(rec + l.v_payload, (t0 / 16) * (l.head_dim / 16) + d / 16, l.head_dim / 16, (t1 - t0) / 16, d % 16,
                  pv, t0, out);
    return;
  }
  dot_rows<NR>([&](uint32_t t) { return record_q(l, rec, Side::v, t, d, tab); }, pv, t0, t1, out);
}

// K fold of channel d for query value qd: qs = qd*Ks[d]; the zero term qd*Kz[d].
SJKV_HD inline float k_scale_of(const RecordLayout& l, const uint8_t* rec, uint32_t d) {
  return f16_to_f32(load_u16(rec + l.k_scale + 2 * k_ch_idx(l, d)));
}
SJKV_HD inline float k_zero_of(const RecordLayout& l, const uint8_t* rec, uint32_t d) {
  return f16_to_f32(load_u16(rec + l.k_zero + 2 * k_ch_idx(l, d)));
}
SJKV_HD inline float k_tok_of(const RecordLayout& l, const uint8_t* rec, uint32_t t) {
  return f16_to_f32(load_u16(rec + l.k_tok + 2 * t));
}
SJKV_HD inline float v_scale_of(const RecordLayout& l, const uint8_t* rec, uint32_t t) {
  return f16_to_f32(load_u16(rec + l.v_scale + 2 * t));
}
SJKV_HD inline float v_zero_of(const RecordLayout& l, const uint8_t* rec, uint32_t t) {
  return f16_to_f32(load_u16(rec + l.v_zero + 2 * t));
}
SJKV_HD inline float v_ch_of(const RecordLayout& l, const uint8_t* rec, uint32_t d) {
  return f16_to_f32(load_u16(rec + l.v_ch + 2 * v_ch_idx(l, d)));
}

// Score of token t from the folded dot (sum_d qs[d]*code) and c0 = sum_d q[d]*Kz[d].
SJKV_HD inline float k_score(float tok, float c0, float dot) { return op::fmul(tok, op::fadd(c0, dot)); }
// Output value of channel d from sum_t pv[t]*code and Z = sum_t p[t]*Vz[t].
SJKV_HD inline float v_value(float vch, float Z, float acc) { return op::fmul(vch, op::fadd(acc, Z)); }

// Value i of a staged or fp16 row (sink and ring positions): the exact per-element decode.
SJKV_HD inline float row_value(const CacheView& v, uint32_t p, uint32_t h, Side side, uint32_t d) {
  const RowLocation r = locate_row(v, p, h);  // never a record: callers pass sink and ring rows
  if (r.kind == RowLocation::sink_f16) return f16_to_f32(r.f16[(side == Side::v ? v.layout.head_dim : 0) + d]);
  return staging_decode_value(v.staging, r.entry + (side == Side::v ? v.row_bytes() : 0), d);
}

// The work items of a decode over [0, end), in this order: staged/fp16 sink rows in chunks
// of `rows` positions, ring rows in chunks, one item per body record (possibly cut by end).
// The row chunks come first so their slower per-element decode starts in the first wave.
struct Items {
  uint32_t end = 0, rows = 128;
  uint32_t sink_end = 0, n_sink = 0;
  uint32_t body_end = 0, n_body = 0;
  uint32_t ring_lo = 0, n_ring = 0;
  SJKV_HD uint32_t count() const { return n_sink + n_body + n_ring; }
  // Positions [p0, p1) of item i; body records report their group in *g (else ~0u).
  SJKV_HD void range(const CacheView& v, uint32_t i, uint32_t* p0, uint32_t* p1, uint32_t* g) const {
    *g = ~0u;
    if (i < n_sink) {
      *p0 = i * rows;
      *p1 = *p0 + rows < sink_end ? *p0 + rows : sink_end;
      return;
    }
    i -= n_sink;
    if (i < n_ring) {
      *p0 = ring_lo + i * rows;
      *p1 = *p0 + rows < end ? *p0 + rows : end;
      return;
    }
    i -= n_ring;
    *g = i;
    *p0 = v.sink + i * v.layout.group;
    *p1 = *p0 + v.layout.group < body_end ? *p0 + v.layout.group : body_end;
  }
};

SJKV_HD inline Items make_items(const CacheView& v, uint32_t end, uint32_t rows) {
  Items it;
  it.end = end;
  it.rows = rows;
  it.sink_end = end < v.sink ? end : v.sink;
  it.n_sink = (it.sink_end + rows - 1) / rows;
  if (v.B > v.sink && end > v.sink) {
    it.body_end = end < v.B ? end : v.B;
    it.n_body = (it.body_end - v.sink + v.layout.group - 1) / v.layout.group;
  }
  it.ring_lo = v.B > v.sink ? v.B : v.sink;
  it.n_ring = end > it.ring_lo ? (end - it.ring_lo + rows - 1) / rows : 0;
  return it;
}

// Sum of 32 lane values by the xor butterfly the kernels use (every lane ends with these bits).
SJKV_HD inline float butterfly_sum32(float* x) {
  for (int o = 16; o > 0; o >>= 1) {
    float y[32];
    for (int i = 0; i < 32; ++i) y[i] = op::fadd(x[i], x[i ^ o]);
    for (int i = 0; i < 32; ++i) x[i] = y[i];
  }
  return x[0];
}

// Max of 32 lane values by the same butterfly (order-free: max is exact).
SJKV_HD inline float butterfly_max32(float* x) {
  for (int o = 16; o > 0; o >>= 1) {
    float y[32];
    for (int i = 0; i < 32; ++i) y[i] = op::maxS(x[i], x[i ^ o]);
    for (int i = 0; i < 32; ++i) x[i] = y[i];
  }
  return x[0];
}

// Merge of the item partials of one row (m[s], S[s], acc relative to exp(-m[s])). The
// items are cut into kMergeChunks fixed chunks summed in item order, chunk sums added in
// chunk order: the kernel gives each chunk to one warp (many items in flight at once).
constexpr uint32_t kMergeChunks = 8;
SJKV_HD inline uint32_t merge_chunk_len(uint32_t n) { return (n + kMergeChunks - 1) / kMergeChunks; }
// M: the largest m over items with S != 0 (-inf when none).
SJKV_HD inline float merge_max(uint32_t n, const float* m, const float* S) {
  float M = -INFINITY;
  for (uint32_t s = 0; s < n; ++s)
    if (S[s] != 0.0f) M = op::maxS(M, m[s]);
  return M;
}
// Item weight exp(m - M); 0 for items with S == 0 (skipped below).
SJKV_HD inline float merge_weight(float m, float S, float M) { return S == 0.0f ? 0.0f : expf(op::fsub(m, M)); }
// Sum over chunk c of val(s) * f[s] for the items with S != 0, in item order.
template <class Val>
SJKV_HD inline float merge_chunk_sum(uint32_t n, uint32_t c, const float* S, const float* f, Val val) {
  const uint32_t len = merge_chunk_len(n), s0 = c * len < n ? c * len : n, s1 = s0 + len < n ? s0 + len : n;
  float a = 0.0f;
  for (uint32_t s = s0; s < s1; ++s)
    if (S[s] != 0.0f) a = op::fadd(a, op::fmul(val(s), f[s]));
  return a;
}
// The output value from the chunk sums of acc (a[c]) and of S (t[c]).
SJKV_HD inline float merge_finish(const float* a, const float* t) {
  float A = 0.0f, T = 0.0f;
  for (uint32_t c = 0; c < kMergeChunks; ++c) {
    A = op::fadd(A, a[c]);
    T = op::fadd(T, t[c]);
  }
  return T == 0.0f ? 0.0f : op::fdiv(A, T);
}

}  // namespace attn
}  // namespace sjkv
