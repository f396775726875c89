// Vectorised seal of one scalar record. Compiled once per instruction set (SJKV_ISA_NS
// names the copy); seal.cpp picks one at run time.
//
// Same bytes as the reference because nothing is reordered: every reduction keeps its own
// accumulator and its own order, and the vector lanes run across independent columns, rows
// or tokens. Each side keeps its tile in both layouts, [R][C] and [C][R], so that both the
// column pass and the row pass walk their sequences with the lanes on the contiguous axis.
#include <cstring>

#include "seal_isa.h"
#include "sjkv/seal.h"

#ifndef SJKV_ISA_NS
#error "SJKV_ISA_NS must name the instruction-set copy"
#endif

namespace sjkv {
namespace SJKV_ISA_NS {
namespace {

// Sample std of every lane of X[n][lanes] along n, by the reduction contract.
void lane_sstd(const float* __restrict X, uint32_t n, uint32_t lanes, double* __restrict p,
               double* __restrict mean, float* __restrict sd) {
  const uint32_t k = n / 8;
  for (uint32_t c = 0; c < 8; ++c) {
    double* __restrict acc = p + static_cast<size_t>(c) * lanes;
    for (uint32_t L = 0; L < lanes; ++L) acc[L] = 0.0;
    for (uint32_t i = c * k; i < c * k + k; ++i) {
      const float* __restrict x = X + static_cast<size_t>(i) * lanes;
      for (uint32_t L = 0; L < lanes; ++L) acc[L] = op::dadd(acc[L], static_cast<double>(x[L]));
    }
  }
  for (uint32_t L = 0; L < lanes; ++L) {
    double q[8];
    for (uint32_t c = 0; c < 8; ++c) q[c] = p[static_cast<size_t>(c) * lanes + L];
    mean[L] = op::ddiv(bal::combine8(q), static_cast<double>(n));
  }
  for (uint32_t c = 0; c < 8; ++c) {
    double* __restrict acc = p + static_cast<size_t>(c) * lanes;
    for (uint32_t L = 0; L < lanes; ++L) acc[L] = 0.0;
    for (uint32_t i = c * k; i < c * k + k; ++i) {
      const float* __restrict x = X + static_cast<size_t>(i) * lanes;
      for (uint32_t L = 0; L < lanes; ++L) {
        const double d = op::dsub(static_cast<double>(x[L]), mean[L]);
        acc[L] = op::fma64(d, d, acc[L]);
      }
    }
  }
  for (uint32_t L = 0; L < lanes; ++L) {
    double q[8];
    for (uint32_t c = 0; c < 8; ++c) q[c] = p[static_cast<size_t>(c) * lanes + L];
    sd[L] = bal::sstd_finish(bal::combine8(q), n);
  }
}

// dst[a][b] = (src[a][b] / col) / row, where the outer index a is a row (scale_outer is
// the row scale) or a column (scale_outer is the column scale) of the logical tile.
void rescale_outer_row(const float* __restrict src, float* __restrict dst, uint32_t outer, uint32_t inner,
                       const float* __restrict s_row, const float* __restrict s_col) {
  for (uint32_t a = 0; a < outer; ++a) {
    const float sr = s_row[a];
    const float* __restrict s = src + static_cast<size_t>(a) * inner;
    float* __restrict d = dst + static_cast<size_t>(a) * inner;
    for (uint32_t b = 0; b < inner; ++b) d[b] = bal::rescale(s[b], s_col[b], sr);
  }
}

void rescale_outer_col(const float* __restrict src, float* __restrict dst, uint32_t outer, uint32_t inner,
                       const float* __restrict s_row, const float* __restrict s_col) {
  for (uint32_t a = 0; a < outer; ++a) {
    const float sc = s_col[a];
    const float* __restrict s = src + static_cast<size_t>(a) * inner;
    float* __restrict d = dst + static_cast<size_t>(a) * inner;
    for (uint32_t b = 0; b < inner; ++b) d[b] = bal::rescale(s[b], sc, s_row[b]);
  }
}

void update_scales(const float* sd, uint32_t n, double* L, float* s) {
  for (uint32_t i = 0; i < n; ++i) {
    L[i] = bal::update_log(L[i], sd[i]);
    s[i] = bal::scale_of_log(L[i]);
  }
}

float max_of(const float* x, uint32_t n) {
  float m = x[0];
  for (uint32_t i = 1; i < n; ++i) m = op::maxS(m, x[i]);
  return m;
}
float min_of(const float* x, uint32_t n) {
  float m = x[0];
  for (uint32_t i = 1; i < n; ++i) m = op::minS(m, x[i]);
  return m;
}

struct Tiles {
  float* M;     // [R][C]
  float* MT;    // [C][R]
  float* cur;   // [R][C]
  float* curT;  // [C][R]
};

// Balancing as balance_tile_ref(), leaving bal in both cur and curT.
void balance_tile(const Tiles& w, uint32_t R, uint32_t C, const SealOptions& opt, double* p, double* mean,
                  float* sd, float* s_row, float* s_col, double* L_row, double* L_col, float* best_row,
                  float* best_col, float* sd_col, float* sd_row) {
  for (uint32_t r = 0; r < R; ++r) { s_row[r] = 1.0f; L_row[r] = 0.0; }
  for (uint32_t c = 0; c < C; ++c) { s_col[c] = 1.0f; L_col[c] = 0.0; }
  const bool best_of = opt.balance == BalanceMode::best_of;
  std::memcpy(w.cur, w.M, sizeof(float) * R * C);  // x / 1 / 1 == x for finite x
  std::memcpy(w.curT, w.MT, sizeof(float) * R * C);
  double best = 0.0;
  auto imbalance = [&]() {
    lane_sstd(w.cur, R, C, p, mean, sd_col);
    lane_sstd(w.curT, C, R, p, mean, sd_row);
    return op::dadd(bal::spread_ratio(max_of(sd_col, C), min_of(sd_col, C)),
                    bal::spread_ratio(max_of(sd_row, R), min_of(sd_row, R)));
  };
  if (best_of) {
    best = imbalance();
    std::memcpy(best_row, s_row, sizeof(float) * R);
    std::memcpy(best_col, s_col, sizeof(float) * C);
  }
  for (uint32_t it = 0; it < opt.iters; ++it) {
    lane_sstd(w.cur, R, C, p, mean, sd);  // columns: sequences along R
    update_scales(sd, C, L_col, s_col);
    rescale_outer_col(w.MT, w.curT, C, R, s_row, s_col);
    lane_sstd(w.curT, C, R, p, mean, sd);  // rows: sequences along C
    update_scales(sd, R, L_row, s_row);
    rescale_outer_row(w.M, w.cur, R, C, s_row, s_col);
    rescale_outer_col(w.MT, w.curT, C, R, s_row, s_col);
    if (best_of) {
      const double imb = imbalance();
      if (imb <= best) {
        best = imb;
        std::memcpy(best_row, s_row, sizeof(float) * R);
        std::memcpy(best_col, s_col, sizeof(float) * C);
      }
    }
  }
  if (best_of) {
    std::memcpy(s_row, best_row, sizeof(float) * R);
    std::memcpy(s_col, best_col, sizeof(float) * C);
    rescale_outer_row(w.M, w.cur, R, C, s_row, s_col);
    rescale_outer_col(w.MT, w.curT, C, R, s_row, s_col);
  }
}

// Codes in [t][d] order from a [t][d] tile whose affine is indexed by t (per_t) or d.
void rtn_codes(const float* __restrict X, uint32_t T, uint32_t D, const float* __restrict lo,
               const float* __restrict step, bool per_t, uint32_t qmax, uint8_t* __restrict codes) {
  for (uint32_t t = 0; t < T; ++t) {
    const float* __restrict x = X + static_cast<size_t>(t) * D;
    uint8_t* __restrict q = codes + static_cast<size_t>(t) * D;
    if (per_t) {
      const float l = lo[t], s = step[t];
      for (uint32_t d = 0; d < D; ++d) q[d] = static_cast<uint8_t>(bal::rtn_code(x[d], l, s, qmax));
    } else {
      for (uint32_t d = 0; d < D; ++d) q[d] = static_cast<uint8_t>(bal::rtn_code(x[d], lo[d], step[d], qmax));
    }
  }
}

void pack_codes(const RecordLayout& l, Side side, const uint8_t* codes, uint8_t* payload) {
  const uint32_t D = l.head_dim, G = l.group;
  const bool frag = side == Side::k ? l.k_fragment() : l.v_fragment();
  if (frag) {
    const uint8_t* pos = fragment_tile_positions(side);
    const uint32_t tiles_per_strip = D / 16;
    for (uint32_t s = 0; s < G / 16; ++s)
      for (uint32_t c = 0; c < tiles_per_strip; ++c) {
        uint8_t* tile = payload + static_cast<size_t>(s * tiles_per_strip + c) * 128;
        for (uint32_t tt = 0; tt < 16; ++tt) {
          const uint8_t* q = codes + static_cast<size_t>(16 * s + tt) * D + 16 * c;
          for (uint32_t dd = 0; dd < 16; ++dd) {
            const uint32_t nib = pos[tt * 16 + dd];
            tile[nib >> 1] = static_cast<uint8_t>(tile[nib >> 1] | (q[dd] << (4 * (nib & 1))));
          }
        }
      }
    return;
  }
  // token-major little-endian stream: code k = t*D + d at bit k*b
  const uint32_t b = side == Side::k ? l.bits_k : l.bits_v;
  const size_t n = static_cast<size_t>(G) * D;
  uint64_t acc = 0;
  uint32_t nacc = 0;
  uint8_t* out = payload;
  for (size_t k = 0; k < n; ++k) {
    acc |= static_cast<uint64_t>(codes[k]) << nacc;
    nacc += b;
    while (nacc >= 8) {
      *out++ = static_cast<uint8_t>(acc & 0xff);
      acc >>= 8;
      nacc -= 8;
    }
  }
  if (nacc) *out = static_cast<uint8_t>(acc & 0xff);
}

void seal_side(const RecordLayout& l, Side side, const uint16_t* rows, size_t stride, const SealOptions& opt,
               SealWorkspace& ws, uint8_t* rec) {
  const uint32_t D = l.head_dim, G = l.group;
  const bool is_k = side == Side::k;
  const uint32_t R = is_k ? D : G, C = is_k ? G : D;
  const size_t tile = ws.capacity_tile();
  float* base = ws.tiles();
  Tiles w{base, base + tile, base + 2 * tile, base + 3 * tile};
  // [t][d] and [d][t] copies of the side; which is M and which MT depends on the side.
  float* td = is_k ? w.MT : w.M;
  float* dt = is_k ? w.M : w.MT;
  for (uint32_t t = 0; t < G; ++t) {
    const uint16_t* src = rows + static_cast<size_t>(t) * stride;
    float* dst = td + static_cast<size_t>(t) * D;
    for (uint32_t d = 0; d < D; ++d) dst[d] = f16_to_f32(src[d]);
  }
  for (uint32_t t = 0; t < G; ++t)
    for (uint32_t d = 0; d < D; ++d) dt[static_cast<size_t>(d) * G + t] = td[static_cast<size_t>(t) * D + d];

  const uint32_t V = D > G ? D : G;
  double* p = ws.sums();
  float* f = ws.vecs();
  double* dv = reinterpret_cast<double*>(f + 10 * V);  // 3*V doubles behind 10*V floats
  float *sd = f, *s_row = f + V, *s_col = f + 2 * V, *best_row = f + 3 * V, *best_col = f + 4 * V,
        *sd_col = f + 5 * V, *sd_row = f + 6 * V, *lo = f + 7 * V, *hi = f + 8 * V, *step = f + 9 * V;
  double *mean = dv, *L_row = dv + V, *L_col = dv + 2 * V;
  balance_tile(w, R, C, opt, p, mean, sd, s_row, s_col, L_row, L_col, best_row, best_col, sd_col, sd_row);

  // Per-row min/max: row r's sequence runs along C, which is the outer axis of curT.
  for (uint32_t r = 0; r < R; ++r) lo[r] = hi[r] = w.curT[r];
  for (uint32_t c = 1; c < C; ++c) {
    const float* __restrict x = w.curT + static_cast<size_t>(c) * R;
    for (uint32_t r = 0; r < R; ++r) {
      lo[r] = op::minS(lo[r], x[r]);
      hi[r] = op::maxS(hi[r], x[r]);
    }
  }
  const uint32_t b = is_k ? l.bits_k : l.bits_v;
  const uint32_t qmax = (1u << b) - 1u;
  for (uint32_t r = 0; r < R; ++r) {
    step[r] = bal::affine_step(lo[r], hi[r], qmax);
    const uint16_t sc = f32_to_f16(op::fmul(s_row[r], step[r]));
    const uint16_t zp = f32_to_f16(op::fmul(s_row[r], lo[r]));
    const uint32_t i = is_k ? k_ch_idx(l, r) : r;
    store_u16(rec + (is_k ? l.k_scale : l.v_scale) + 2 * i, sc);
    store_u16(rec + (is_k ? l.k_zero : l.v_zero) + 2 * i, zp);
  }
  // Codes in [t][d]: K's bal in [t][d] is curT (rows are channels), V's is cur.
  uint8_t* codes = ws.codes();
  rtn_codes(is_k ? w.curT : w.cur, G, D, lo, step, !is_k, qmax, codes);
  pack_codes(l, side, codes, rec + (is_k ? l.k_payload : l.v_payload));
  for (uint32_t c = 0; c < C; ++c) {
    const uint16_t h = f32_to_f16(s_col[c]);
    if (is_k) store_u16(rec + l.k_tok + 2 * c, h); else store_u16(rec + l.v_ch + 2 * v_ch_idx(l, c), h);
  }
}

}  // namespace

void seal_record_scalar(const RecordLayout& l, const SealOptions& opt, const uint16_t* k_rows,
                        const uint16_t* v_rows, size_t stride, uint8_t* rec, SealWorkspace& ws) {
  std::memset(rec, 0, l.bytes);
  seal_side(l, Side::k, k_rows, stride, opt, ws, rec);
  seal_side(l, Side::v, v_rows, stride, opt, ws, rec);
}

}  // namespace SJKV_ISA_NS
}  // namespace sjkv
