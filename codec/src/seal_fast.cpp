// Vectorised seal of one record, scalar or trellis body. Compiled once per instruction set
// (SJKV_ISA_NS names the copy); seal.cpp picks one at run time.
//
// Same bytes as the reference because nothing is reordered: every reduction keeps its own
// accumulator and its own order, and the vector lanes run across independent columns, rows
// or tokens. Each side keeps its tile in both layouts, [R][C] and [C][R], so that both the
// column pass and the row pass walk their sequences with the lanes on the contiguous axis.
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

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

// n codes of b bits as one little-endian stream (code k at bit k*b).
void pack_stream(const uint8_t* __restrict codes, size_t n, uint32_t b, uint8_t* __restrict out) {
  uint64_t acc = 0;
  uint32_t nacc = 0;
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
  pack_stream(codes, static_cast<size_t>(G) * D, side == Side::k ? l.bits_k : l.bits_v, payload);
}

// One side after balancing and the docs/SPEC.md §6.5 row affine (scales and zeros already written).
struct SideState {
  Tiles w;       // cur [R][C] and curT [C][R] hold bal; M and MT are free
  uint32_t R, C, b;
  float *s_row, *s_col, *lo, *step;
};

SideState prepare_side(const RecordLayout& l, Side side, const uint16_t* rows, size_t stride, const SealOptions& opt,
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
  return SideState{w, R, C, b, s_row, s_col, lo, step};
}

void write_column_scales(const RecordLayout& l, Side side, const SideState& st, uint8_t* rec) {
  for (uint32_t c = 0; c < st.C; ++c) {
    const uint16_t h = f32_to_f16(st.s_col[c]);
    if (side == Side::k) store_u16(rec + l.k_tok + 2 * c, h); else store_u16(rec + l.v_ch + 2 * v_ch_idx(l, c), h);
  }
}

void seal_side(const RecordLayout& l, Side side, const uint16_t* rows, size_t stride, const SealOptions& opt,
               SealWorkspace& ws, uint8_t* rec) {
  const bool is_k = side == Side::k;
  const SideState st = prepare_side(l, side, rows, stride, opt, ws, rec);
  // Codes in [t][d]: K's bal in [t][d] is curT (rows are channels), V's is cur.
  uint8_t* codes = ws.codes();
  rtn_codes(is_k ? st.w.curT : st.w.cur, l.group, l.head_dim, st.lo, st.step, !is_k, (1u << st.b) - 1u, codes);
  pack_codes(l, side, codes, rec + (is_k ? l.k_payload : l.v_payload));
  write_column_scales(l, side, st, rec);
}

// ---- Trellis (docs/SPEC.md §7) -----------------------------------------------------------
//
// The Viterbi recursion runs with the vector lanes across the 64 states. At step i the
// windows of branch j of states s..s+W-1 are contiguous (w = s + 64 j), so one vector
// computes fsub(y, cbf[w]), fmul, fadd(., phi[w >> b]) for W states at once, exactly as
// trellis::branch_cost does for one. Each state takes its branches j = 0, 1, ... in order
// with a strict comparison: the mask `cost < best` picks the new j, and the running best is
// min(cost, best), which is `cost < best ? cost : best` by the instruction's definition.
// So every state's choice and cost-to-go are the reference's, bit for bit (ties keep the
// smallest j; a state whose costs are all +inf keeps j = 0).

// Path from start state 0 through the recorded choices ([n][64], any integer type): codes
// and windows per token.
template <uint32_t B, class ChoiceT>
void traceback(const ChoiceT* __restrict choice, uint32_t n, uint8_t* __restrict codes, uint16_t* __restrict wins) {
  uint32_t s = 0;
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t c = static_cast<uint32_t>(choice[static_cast<size_t>(i) * kTrellisStates + s]);
    const uint32_t w = s + kTrellisStates * c;
    codes[i] = static_cast<uint8_t>(c);
    wins[i] = static_cast<uint16_t>(w);
    s = trellis::next_state(w, B);
  }
}

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
// GCC 12 warns about the deliberately undefined pass-through operand inside its own
// _mm512_permutexvar_ps / _mm512_min_ps (a known false positive).
#pragma GCC diagnostic push
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
// The 64 costs-to-go stay in four registers. Window chunk w0 = 64 j + 16 m (states 16m ..
// 16m+15, branch j) reads phi[(w0 >> B) + (l >> B)] for lane l: register (w0 >> B) / 16 at
// offset (w0 >> B) % 16 + (l >> B), one in-register permute. Choices are bytes [n][64].
template <uint32_t B>
void viterbi_channel(const float* __restrict y, uint32_t n, const float* __restrict cbf, void* choice_buf,
                     uint8_t* __restrict codes, uint16_t* __restrict wins) {
  constexpr uint32_t NB = 1u << B;
  uint8_t* __restrict choice = static_cast<uint8_t*>(choice_buf);
  __m512i idx[8];
  for (uint32_t k = 0; k < 8; ++k) {
    alignas(64) int32_t v[16];
    for (uint32_t l = 0; l < 16; ++l) v[l] = static_cast<int32_t>((B == 3 ? 2 * k : 4 * k) + (l >> B));
    idx[k] = _mm512_load_si512(v);
  }
  const __m512 inf = _mm512_set1_ps(f32_from_bits(0x7f800000u));
  __m512 phi[4];
  for (auto& p : phi) p = _mm512_setzero_ps();
  for (uint32_t i = n; i-- > 0;) {
    const __m512 yv = _mm512_set1_ps(y[i]);
    __m512 best[4];
    __m128i bj[4];
    for (uint32_t m = 0; m < 4; ++m) {
      best[m] = inf;
      bj[m] = _mm_setzero_si128();
    }
#pragma GCC unroll 8
    for (uint32_t j = 0; j < NB; ++j) {
      const __m128i jv = _mm_set1_epi8(static_cast<char>(j));
#pragma GCC unroll 4
      for (uint32_t m = 0; m < 4; ++m) {
        const uint32_t w0 = kTrellisStates * j + 16 * m, p0 = w0 >> B;
        const __m512 d = _mm512_sub_ps(yv, _mm512_loadu_ps(cbf + w0));
        // 4-bit: all 16 lanes share phi[p0]
        const __m512 ph = B == 4 ? _mm512_permutexvar_ps(_mm512_set1_epi32(static_cast<int>(p0 % 16)), phi[p0 / 16])
                                 : _mm512_permutexvar_ps(idx[((p0 % 16) / (B == 3 ? 2 : 4)) % 8], phi[p0 / 16]);
        const __m512 cost = _mm512_add_ps(_mm512_mul_ps(d, d), ph);
        const __mmask16 lt = _mm512_cmp_ps_mask(cost, best[m], _CMP_LT_OQ);
        best[m] = _mm512_min_ps(cost, best[m]);
        bj[m] = _mm_mask_mov_epi8(bj[m], lt, jv);
      }
    }
    uint8_t* ch = choice + static_cast<size_t>(i) * kTrellisStates;
    for (uint32_t m = 0; m < 4; ++m) {
      phi[m] = best[m];
      _mm_storeu_si128(reinterpret_cast<__m128i*>(ch + 16 * m), bj[m]);
    }
  }
  traceback<B>(choice, n, codes, wins);
}
#pragma GCC diagnostic pop
#elif defined(__AVX2__)
// Costs-to-go through two buffers; choices are int32 [n][64].
template <uint32_t B>
void viterbi_channel(const float* __restrict y, uint32_t n, const float* __restrict cbf, void* choice_buf,
                     uint8_t* __restrict codes, uint16_t* __restrict wins) {
  constexpr uint32_t NB = 1u << B;
  int32_t* __restrict choice = static_cast<int32_t*>(choice_buf);
  alignas(32) float buf[2][kTrellisStates + 8] = {};
  float* cur = buf[0];  // costs-to-go of step i + 1
  float* nxt = buf[1];
  const __m256i idx2 = _mm256_set_epi32(1, 1, 1, 1, 0, 0, 0, 0);  // 2-bit: lane l reads phi[(w0 >> 2) + (l >> 2)]
  const __m256 inf = _mm256_set1_ps(f32_from_bits(0x7f800000u));
  for (uint32_t i = n; i-- > 0;) {
    const __m256 yv = _mm256_set1_ps(y[i]);
    int32_t* ch = choice + static_cast<size_t>(i) * kTrellisStates;
    for (uint32_t m = 0; m < 8; ++m) {
      __m256 best = inf;
      __m256 bj = _mm256_setzero_ps();
#pragma GCC unroll 8
      for (uint32_t j = 0; j < NB; ++j) {
        const uint32_t w0 = kTrellisStates * j + 8 * m;
        const __m256 d = _mm256_sub_ps(yv, _mm256_loadu_ps(cbf + w0));
        // 3- and 4-bit: all 8 lanes share phi[w0 >> B]; 2-bit: lane l reads phi[(w0 >> 2) + (l >> 2)]
        // (the 8-float load reaches into the buffer's padding; those lanes are not selected).
        const __m256 ph = B >= 3 ? _mm256_broadcast_ss(cur + (w0 >> B))
                                 : _mm256_permutevar8x32_ps(_mm256_loadu_ps(cur + (w0 >> 2)), idx2);
        const __m256 cost = _mm256_add_ps(_mm256_mul_ps(d, d), ph);
        const __m256 lt = _mm256_cmp_ps(cost, best, _CMP_LT_OQ);
        best = _mm256_min_ps(cost, best);
        bj = _mm256_blendv_ps(bj, _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(j))), lt);
      }
      _mm256_store_ps(nxt + 8 * m, best);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(ch + 8 * m), _mm256_castps_si256(bj));
    }
    float* t = cur;
    cur = nxt;
    nxt = t;
  }
  traceback<B>(choice, n, codes, wins);
}
#elif defined(__SSE2__)
template <uint32_t B>
void viterbi_channel(const float* __restrict y, uint32_t n, const float* __restrict cbf, void* choice_buf,
                     uint8_t* __restrict codes, uint16_t* __restrict wins) {
  constexpr uint32_t NB = 1u << B;
  int32_t* __restrict choice = static_cast<int32_t*>(choice_buf);
  alignas(16) float buf[2][kTrellisStates] = {};
  float* cur = buf[0];
  float* nxt = buf[1];
  const __m128 inf = _mm_set1_ps(f32_from_bits(0x7f800000u));
  for (uint32_t i = n; i-- > 0;) {
    const __m128 yv = _mm_set1_ps(y[i]);
    int32_t* ch = choice + static_cast<size_t>(i) * kTrellisStates;
    for (uint32_t m = 0; m < 16; ++m) {
      __m128 best = inf;
      __m128i bj = _mm_setzero_si128();
#pragma GCC unroll 8
      for (uint32_t j = 0; j < NB; ++j) {
        const uint32_t w0 = kTrellisStates * j + 4 * m;
        const __m128 d = _mm_sub_ps(yv, _mm_loadu_ps(cbf + w0));
        const __m128 ph = _mm_set1_ps(cur[w0 >> B]);  // all 4 lanes share one next state
        const __m128 cost = _mm_add_ps(_mm_mul_ps(d, d), ph);
        const __m128i lt = _mm_castps_si128(_mm_cmplt_ps(cost, best));
        best = _mm_min_ps(cost, best);
        const __m128i jv = _mm_set1_epi32(static_cast<int>(j));
        bj = _mm_or_si128(_mm_and_si128(lt, jv), _mm_andnot_si128(lt, bj));
      }
      _mm_store_ps(nxt + 4 * m, best);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(ch + 4 * m), bj);
    }
    float* t = cur;
    cur = nxt;
    nxt = t;
  }
  traceback<B>(choice, n, codes, wins);
}
#else
// No vector unit we know: the reference recursion, then the windows of its path.
template <uint32_t B>
void viterbi_channel(const float* __restrict y, uint32_t n, const float* __restrict cbf, void* choice_buf,
                     uint8_t* __restrict codes, uint16_t* __restrict wins) {
  float phi[2 * kTrellisStates];
  uint8_t* choice = static_cast<uint8_t*>(choice_buf);
  trellis::viterbi_ref(y, n, B, cbf, phi, choice, codes);
  traceback<B>(choice, n, codes, wins);
}
#endif

void seal_side_trellis(const RecordLayout& l, Side side, const uint16_t* rows, size_t stride, const SealOptions& opt,
                       SealWorkspace& ws, uint8_t* rec) {
  const bool is_k = side == Side::k;
  const SideState st = prepare_side(l, side, rows, stride, opt, ws, rec);
  const uint32_t D = l.head_dim, G = l.group, b = st.b, R = st.R, C = st.C;
  const uint16_t* table = codebook_table(opt.codebooks, side, b);
  float* __restrict cbf = ws.cbf();
  for (uint32_t w = 0; w < trellis_entries(b); ++w) cbf[w] = f16_to_f32(table[w]);

  // Targets of every sequence, [q][i] (sjkv/record.h): token axis [d][t], channel axis
  // [t][d]. The balanced tile in that order is cur or curT (K's cur is [d][t], V's is
  // [t][d]); the row affine is indexed by d for K and by t for V.
  const bool ch_axis = l.channel_axis();
  const uint32_t S = l.trellis_seqs(), n = l.trellis_len();
  float* __restrict Y = st.w.M;
  const bool bal_is_cur = is_k != ch_axis;  // K token axis, V channel axis: cur
  const float* bal_qi = bal_is_cur ? st.w.cur : st.w.curT;
  const bool affine_per_q = is_k != ch_axis;  // affine row r = d for K, t for V
  for (uint32_t q = 0; q < S; ++q) {
    const float* __restrict x = bal_qi + static_cast<size_t>(q) * n;
    float* __restrict y = Y + static_cast<size_t>(q) * n;
    if (affine_per_q) {
      const float lo = st.lo[q], step = st.step[q];
      for (uint32_t i = 0; i < n; ++i) y[i] = trellis::target(x[i], lo, step);
    } else {
      for (uint32_t i = 0; i < n; ++i) y[i] = trellis::target(x[i], st.lo[i], st.step[i]);
    }
  }
  uint8_t* codes = ws.codes();    // [q][i]
  uint16_t* wins = ws.windows();  // [q][i]
  for (uint32_t q = 0; q < S; ++q) {
    const size_t o = static_cast<size_t>(q) * n;
    if (b == 4) viterbi_channel<4>(Y + o, n, cbf, ws.choice(), codes + o, wins + o);
    else if (b == 3) viterbi_channel<3>(Y + o, n, cbf, ws.choice(), codes + o, wins + o);
    else viterbi_channel<2>(Y + o, n, cbf, ws.choice(), codes + o, wins + o);
  }
  // Sequence q's codes from bit q*n*b: the [q][i] codes in order, on either axis.
  pack_stream(codes, static_cast<size_t>(D) * G, b, rec + (is_k ? l.k_payload : l.v_payload));

  // Refit: decoded entries in the tile's [R][C] order next to bal, then one row at a time.
  float* __restrict yhat = st.w.MT;
  for (uint32_t d = 0; d < D; ++d)
    for (uint32_t t = 0; t < G; ++t) {
      const size_t k = ch_axis ? static_cast<size_t>(t) * D + d : static_cast<size_t>(d) * G + t;
      const float q = cbf[wins[k]];
      if (is_k) yhat[static_cast<size_t>(d) * G + t] = q; else yhat[static_cast<size_t>(t) * D + d] = q;
    }
  for (uint32_t r = 0; r < R; ++r) {
    const float* x = st.w.cur + static_cast<size_t>(r) * C;
    const float* q = yhat + static_cast<size_t>(r) * C;
    trellis::RefitSums sums;
    for (uint32_t c = 0; c < C; ++c) trellis::refit_add(sums, x[c], q[c]);
    double a, bz;
    if (!trellis::refit_solve(sums, C, &a, &bz)) continue;
    uint16_t sc, zp;
    trellis::refit_store(st.s_row[r], a, bz, &sc, &zp);
    const uint32_t i = is_k ? k_ch_idx(l, r) : r;
    store_u16(rec + (is_k ? l.k_scale : l.v_scale) + 2 * i, sc);
    store_u16(rec + (is_k ? l.k_zero : l.v_zero) + 2 * i, zp);
  }
  write_column_scales(l, side, st, rec);
}

}  // namespace

void seal_record_scalar(const RecordLayout& l, const SealOptions& opt, const uint16_t* k_rows,
                        const uint16_t* v_rows, size_t stride, uint8_t* rec, SealWorkspace& ws) {
  std::memset(rec, 0, l.bytes);
  seal_side(l, Side::k, k_rows, stride, opt, ws, rec);
  seal_side(l, Side::v, v_rows, stride, opt, ws, rec);
#if defined(__AVX__)
  _mm256_zeroupper();  // see seal_record_trellis
#endif
}

void viterbi_codes(const float* y, uint32_t n, uint32_t bits, const float* cbf, void* choice, uint8_t* codes,
                   uint16_t* wins) {
  if (bits == 4) viterbi_channel<4>(y, n, cbf, choice, codes, wins);
  else if (bits == 3) viterbi_channel<3>(y, n, cbf, choice, codes, wins);
  else viterbi_channel<2>(y, n, cbf, choice, codes, wins);
#if defined(__AVX__)
  _mm256_zeroupper();
#endif
}

void seal_record_trellis(const RecordLayout& l, const SealOptions& opt, const uint16_t* k_rows,
                         const uint16_t* v_rows, size_t stride, uint8_t* rec, SealWorkspace& ws) {
  std::memset(rec, 0, l.bytes);
  seal_side_trellis(l, Side::k, k_rows, stride, opt, ws, rec);
  seal_side_trellis(l, Side::v, v_rows, stride, opt, ws, rec);
#if defined(__AVX__)
  // Leave the upper vector state clean for the caller's SSE code (GCC did not always insert
  // vzeroupper on these paths: a reference trellis seal after a fast one on the same thread
  // ran ~3x slower, a scalar one ~1.45x).
  _mm256_zeroupper();
#endif
}

}  // namespace SJKV_ISA_NS
}  // namespace sjkv
