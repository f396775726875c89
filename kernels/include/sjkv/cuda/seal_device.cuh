// Device code of the tuned seal, decode and staging kernels (kernels/seal_kernels.cu).
// Included inside namespace sjkv::cuda::<anonymous> by the .cu file and, on the host, by
// tests/codec/test_seal_simt.cpp, which runs these very functions under a thread-per-lane
// emulation of the CUDA execution model (barriers, warp shuffles, atomics), so the
// kernels' indexing, synchronisation and bytes are checked on machines without a GPU.
// Not a standalone header: the includer provides the CUDA names (or their emulation) and
// SJKV_DYN_SHARED(type, name), the block's dynamic shared memory as `type* name`.
#pragma once

#if defined(__CUDACC__)
#define SJKV_SEAL_UNROLL _Pragma("unroll")
#else
#define SJKV_SEAL_UNROLL
#endif

constexpr unsigned kSealThreads = 512;
constexpr unsigned kSealWarps = kSealThreads / 32;
constexpr unsigned kFull = 0xffffffffu;

// ---- per-record scratch in global memory -------------------------------------------------

struct SealScratch {
  double* L_row;
  double* L_col;
  float* cur;
  float* s_row;
  float* s_col;
  float* best_row;
  float* best_col;
  float* lo;
  float* step;
  float* sd_row;
  float* sd_col;
  float* y;         // [warps][V]
  uint8_t* choice;  // [warps][V][64]
};

// Bytes of the balanced tile of either side: R rows of C + 1 floats.
__host__ __device__ inline size_t tile_bytes(uint32_t D, uint32_t G) {
  return (static_cast<size_t>(D) * G + (D > G ? D : G)) * sizeof(float);
}

// Bytes of one record's scratch for D x G (V = max(D, G)), 256-byte aligned.
__host__ __device__ inline size_t scratch_bytes(uint32_t D, uint32_t G) {
  const size_t V = D > G ? D : G;
  size_t b = 2 * V * sizeof(double) + static_cast<size_t>(D) * G * sizeof(float) + 9 * V * sizeof(float) +
             kSealWarps * V * sizeof(float) + kSealWarps * V * kTrellisStates;
  return (b + 255) & ~size_t{255};
}

__device__ inline SealScratch scratch_at(uint8_t* base, uint32_t D, uint32_t G) {
  const size_t V = D > G ? D : G;
  SealScratch s;
  double* d = reinterpret_cast<double*>(base);
  s.L_row = d;
  s.L_col = d + V;
  float* f = reinterpret_cast<float*>(d + 2 * V);
  s.cur = f;  // R rows of C + 1 floats (padded: no shared-memory bank conflicts)
  f += static_cast<size_t>(D) * G + V;
  s.s_row = f; f += V;
  s.s_col = f; f += V;
  s.best_row = f; f += V;
  s.best_col = f; f += V;
  s.lo = f; f += V;
  s.step = f; f += V;
  s.sd_row = f; f += V;
  s.sd_col = f; f += V;
  s.y = f;
  f += kSealWarps * V;
  s.choice = reinterpret_cast<uint8_t*>(f);
  return s;
}

// f16_to_f32 of a finite fp16 value (the seal checks its inputs first): the device's own
// widening conversion, exact like f16_to_f32 for every finite value, subnormals included.
__device__ inline float f16_finite(uint16_t h) {
#if defined(__CUDA_ARCH__)
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
#else
  return f16_to_f32(h);
#endif
}

// One side's tile M [R][C] read from fp16 rows: K: M[d][t], V: M[t][d].
struct Tile {
  const uint16_t* rows;
  size_t stride;
  bool is_k;
  uint32_t R, C;
  uint32_t ld;  // row pitch of the balanced tile: C + 1
  bool lanes8;  // row stds: 8 lanes per row (xor shuffles) or a thread per row
  __device__ float M(uint32_t r, uint32_t c) const {
    return f16_finite(is_k ? rows[static_cast<size_t>(c) * stride + r] : rows[static_cast<size_t>(r) * stride + c]);
  }
};

// The pairwise combine of the 8 chunk sums held by 8 consecutive lanes (contract tree).
__device__ inline double combine8_xor(double v) {
  v = op::dadd(v, __shfl_xor_sync(kFull, v, 1));
  v = op::dadd(v, __shfl_xor_sync(kFull, v, 2));
  v = op::dadd(v, __shfl_xor_sync(kFull, v, 4));
  return v;
}

// Sample std (reduction contract) of nseq sequences of n values: sequence s element i at
// base[s*seq_step + i*elem_step]. 8 lanes per sequence; every thread of the block calls it.
__device__ void sstd_all(const float* base, uint32_t nseq, size_t seq_step, size_t elem_step, uint32_t n,
                         float* sd) {
  const uint32_t lane8 = threadIdx.x & 7u, grp = threadIdx.x >> 3, ngrp = blockDim.x >> 3;
  const uint32_t k = n / 8;
  for (uint32_t s0 = 0; s0 < nseq; s0 += ngrp) {
    const uint32_t s = s0 + grp;
    const bool act = s < nseq;
    const float* x = base + (act ? s : 0u) * seq_step;
    double acc = 0.0;
    if (act)
      for (uint32_t i = lane8 * k; i < lane8 * k + k; ++i) acc = op::dadd(acc, static_cast<double>(x[i * elem_step]));
    const double mean = op::ddiv(combine8_xor(acc), static_cast<double>(n));
    double m2 = 0.0;
    if (act)
      for (uint32_t i = lane8 * k; i < lane8 * k + k; ++i) {
        const double d = op::dsub(static_cast<double>(x[i * elem_step]), mean);
        m2 = op::fma64(d, d, m2);
      }
    m2 = combine8_xor(m2);
    if (act && lane8 == 0) sd[s] = bal::sstd_finish(m2, n);
  }
}

// Sample stds (reduction contract) of nlines lines of n values, line s element i at
// cur[s*line_step + i*elem_step], with g = 8, 4, 2 or 1 threads per line (the most that fit
// the block), so every thread works. Thread j of a line sums chunks j*8/g .. (j+1)*8/g - 1
// (each in index order) and combines them by the lower levels of the contract's pairwise
// tree; the g partials, exchanged through shared memory, take the upper levels. Every
// thread of the block calls it; consecutive threads take consecutive lines.
__device__ void sstd_lines(const float* cur, uint32_t nlines, size_t line_step, size_t elem_step, uint32_t n,
                           float* sd) {
  __shared__ double xa[kSealThreads];
  __shared__ double xb[kSealThreads];
  uint32_t g = 8;
  while (g > 1 && g * nlines > blockDim.x) g >>= 1;
  const uint32_t per = 8 / g, k = n / 8;
  for (uint32_t base = 0; base < nlines * g; base += blockDim.x) {  // one round unless g == 1
    const uint32_t t = base + threadIdx.x;
    const bool act = t < nlines * g;
    const uint32_t s = act ? t % nlines : 0u, j = act ? t / nlines : 0u;
    const float* x = cur + s * line_step + static_cast<size_t>(j * per * k) * elem_step;
    double p[8];
SJKV_SEAL_UNROLL
    for (uint32_t l = 0; l < 8; ++l) p[l] = 0.0;
    if (act)
      for (uint32_t i = 0; i < k; ++i)
SJKV_SEAL_UNROLL
        for (uint32_t l = 0; l < 8; ++l)
          if (l < per) p[l] = op::dadd(p[l], static_cast<double>(x[static_cast<size_t>(l * k + i) * elem_step]));
    double part = per == 8 ? bal::combine8(p)
                  : per == 4 ? op::dadd(op::dadd(p[0], p[1]), op::dadd(p[2], p[3]))
                  : per == 2 ? op::dadd(p[0], p[1])
                             : p[0];
    if (g > 1) {
      xa[threadIdx.x] = part;
      __syncthreads();
      double a[8];
SJKV_SEAL_UNROLL
      for (uint32_t l = 0; l < 8; ++l) a[l] = l < g ? xa[l * nlines + s] : 0.0;
      part = g == 8 ? bal::combine8(a) : g == 4 ? op::dadd(op::dadd(a[0], a[1]), op::dadd(a[2], a[3]))
                                                : op::dadd(a[0], a[1]);
    }
    const double mean = op::ddiv(part, static_cast<double>(n));
SJKV_SEAL_UNROLL
    for (uint32_t l = 0; l < 8; ++l) p[l] = 0.0;
    if (act)
      for (uint32_t i = 0; i < k; ++i)
SJKV_SEAL_UNROLL
        for (uint32_t l = 0; l < 8; ++l)
          if (l < per) {
            const double d = op::dsub(static_cast<double>(x[static_cast<size_t>(l * k + i) * elem_step]), mean);
            p[l] = op::fma64(d, d, p[l]);
          }
    part = per == 8 ? bal::combine8(p)
           : per == 4 ? op::dadd(op::dadd(p[0], p[1]), op::dadd(p[2], p[3]))
           : per == 2 ? op::dadd(p[0], p[1])
                      : p[0];
    if (g > 1) {
      xb[threadIdx.x] = part;
      __syncthreads();
      if (act && j == 0) {
        double a[8];
SJKV_SEAL_UNROLL
        for (uint32_t l = 0; l < 8; ++l) a[l] = l < g ? xb[l * nlines + s] : 0.0;
        part = g == 8 ? bal::combine8(a) : g == 4 ? op::dadd(op::dadd(a[0], a[1]), op::dadd(a[2], a[3]))
                                                  : op::dadd(a[0], a[1]);
      }
    }
    if (act && j == 0) sd[s] = bal::sstd_finish(part, n);
  }
}

// Sample std of every column of tile [R][C] (pitch ld).
__device__ void sstd_cols(const float* cur, uint32_t R, uint32_t C, uint32_t ld, float* sd) {
  sstd_lines(cur, C, 1, ld, R, sd);
}

// Sample std of every row of tile [R][C] (pitch ld); with ld = C + 1 the rows start in
// distinct banks.
__device__ void sstd_rows(const float* cur, uint32_t R, uint32_t C, uint32_t ld, float* sd) {
  sstd_lines(cur, R, ld, 1, C, sd);
}

// Row stds by either schedule: 8 lanes per row with xor shuffles, or a thread per row.
__device__ void row_stds(const Tile& T, const float* cur, bool lanes8, float* sd) {
  if (lanes8) sstd_all(cur, T.R, T.ld, 1, T.C, sd);
  else sstd_rows(cur, T.R, T.C, T.ld, sd);
}

// Calls f(slow, fast) for every pair of an NS x NF grid, spread over the block with fast
// fastest (coalesced, conflict-free); when NF divides the block or the block divides NF
// there is no integer division per element.
template <class F>
__device__ inline void for_grid(uint32_t NS, uint32_t NF, F f) {
  if (blockDim.x % NF == 0) {
    const uint32_t fi = threadIdx.x % NF, step = blockDim.x / NF;
    for (uint32_t si = threadIdx.x / NF; si < NS; si += step) f(si, fi);
  } else if (NF % blockDim.x == 0) {
    for (uint32_t si = 0; si < NS; ++si)
      for (uint32_t fi = threadIdx.x; fi < NF; fi += blockDim.x) f(si, fi);
  } else {
    for (uint32_t i = threadIdx.x; i < NS * NF; i += blockDim.x) f(i / NF, i % NF);
  }
}

// Consecutive threads take consecutive fp16 inputs (K: r fastest, V: c fastest), so the
// global reads coalesce; the padded pitch keeps the shared writes conflict-free.
__device__ void recompute(const Tile& T, const SealScratch& s) {
  if (T.is_k)
    for_grid(T.C, T.R, [&](uint32_t c, uint32_t r) {
      s.cur[static_cast<size_t>(r) * T.ld + c] = bal::rescale(T.M(r, c), s.s_col[c], s.s_row[r]);
    });
  else
    for_grid(T.R, T.C, [&](uint32_t r, uint32_t c) {
      s.cur[static_cast<size_t>(r) * T.ld + c] = bal::rescale(T.M(r, c), s.s_col[c], s.s_row[r]);
    });
}

// (max/min column std) + (max/min row std) of the current tile, as tile_imbalance_ref.
__device__ double imbalance(const Tile& T, const SealScratch& s) {
  __shared__ double result;
  sstd_cols(s.cur, T.R, T.C, T.ld, s.sd_col);
  row_stds(T, s.cur, T.lanes8, s.sd_row);
  __syncthreads();
  if (threadIdx.x == 0) {
    float cmax = 0.0f, cmin = 0.0f, rmax = 0.0f, rmin = 0.0f;
    for (uint32_t c = 0; c < T.C; ++c) {
      const float sd = s.sd_col[c];
      cmax = c == 0 ? sd : op::maxS(cmax, sd);
      cmin = c == 0 ? sd : op::minS(cmin, sd);
    }
    for (uint32_t r = 0; r < T.R; ++r) {
      const float sd = s.sd_row[r];
      rmax = r == 0 ? sd : op::maxS(rmax, sd);
      rmin = r == 0 ? sd : op::minS(rmin, sd);
    }
    result = op::dadd(bal::spread_ratio(cmax, cmin), bal::spread_ratio(rmax, rmin));
  }
  __syncthreads();
  const double r = result;
  __syncthreads();
  return r;
}

__device__ void keep_best(const Tile& T, const SealScratch& s) {
  for (uint32_t r = threadIdx.x; r < T.R; r += blockDim.x) s.best_row[r] = s.s_row[r];
  for (uint32_t c = threadIdx.x; c < T.C; c += blockDim.x) s.best_col[c] = s.s_col[c];
}

// balance_tile_ref, block-parallel. Leaves s.cur, s.s_row, s.s_col as the reference does.
__device__ void balance(const Tile& T, uint32_t iters, BalanceMode mode, const SealScratch& s) {
  for (uint32_t r = threadIdx.x; r < T.R; r += blockDim.x) { s.s_row[r] = 1.0f; s.L_row[r] = 0.0; }
  for (uint32_t c = threadIdx.x; c < T.C; c += blockDim.x) { s.s_col[c] = 1.0f; s.L_col[c] = 0.0; }
  __syncthreads();
  recompute(T, s);
  __syncthreads();
  double best = 0.0;
  const bool best_of = mode == BalanceMode::best_of;
  if (best_of) {
    best = imbalance(T, s);
    keep_best(T, s);
    __syncthreads();
  }
  for (uint32_t it = 0; it < iters; ++it) {
    sstd_cols(s.cur, T.R, T.C, T.ld, s.sd_col);
    __syncthreads();
    for (uint32_t c = threadIdx.x; c < T.C; c += blockDim.x) {
      s.L_col[c] = bal::update_log(s.L_col[c], s.sd_col[c]);
      s.s_col[c] = bal::scale_of_log(s.L_col[c]);
    }
    __syncthreads();
    recompute(T, s);
    __syncthreads();
    row_stds(T, s.cur, T.lanes8, s.sd_row);
    __syncthreads();
    for (uint32_t r = threadIdx.x; r < T.R; r += blockDim.x) {
      s.L_row[r] = bal::update_log(s.L_row[r], s.sd_row[r]);
      s.s_row[r] = bal::scale_of_log(s.L_row[r]);
    }
    __syncthreads();
    recompute(T, s);
    __syncthreads();
    if (best_of) {
      const double imb = imbalance(T, s);
      if (imb <= best) {  // ties go to the later pass
        best = imb;
        keep_best(T, s);
      }
      __syncthreads();
    }
  }
  if (best_of) {
    for (uint32_t r = threadIdx.x; r < T.R; r += blockDim.x) s.s_row[r] = s.best_row[r];
    for (uint32_t c = threadIdx.x; c < T.C; c += blockDim.x) s.s_col[c] = s.best_col[c];
    __syncthreads();
    recompute(T, s);
    __syncthreads();
  }
}

// Balance, then the per-row affine of docs/SPEC.md §6.5 (seal_side_prepare_ref), one thread per row.
__device__ void prepare(const RecordLayout& l, const Tile& T, uint32_t iters, BalanceMode mode,
                        const SealScratch& s, uint8_t* rec) {
  balance(T, iters, mode, s);
  const uint32_t qmax = (1u << (T.is_k ? l.bits_k : l.bits_v)) - 1u;
  for (uint32_t r = threadIdx.x; r < T.R; r += blockDim.x) {
    const float* row = s.cur + static_cast<size_t>(r) * T.ld;
    float lo = row[0], hi = row[0];
    for (uint32_t c = 1; c < T.C; ++c) { lo = op::minS(lo, row[c]); hi = op::maxS(hi, row[c]); }
    const float step = bal::affine_step(lo, hi, qmax);
    const float sr = s.s_row[r];
    s.lo[r] = lo;
    s.step[r] = step;
    const uint32_t i = T.is_k ? k_ch_idx(l, r) : r;
    store_u16(rec + (T.is_k ? l.k_scale : l.v_scale) + 2 * i, f32_to_f16(op::fmul(sr, step)));
    store_u16(rec + (T.is_k ? l.k_zero : l.v_zero) + 2 * i, f32_to_f16(op::fmul(sr, lo)));
  }
  __syncthreads();
}

__device__ void columns(const RecordLayout& l, const Tile& T, const SealScratch& s, uint8_t* rec) {
  for (uint32_t c = threadIdx.x; c < T.C; c += blockDim.x) {
    const uint16_t h = f32_to_f16(s.s_col[c]);
    if (T.is_k) store_u16(rec + l.k_tok + 2 * c, h); else store_u16(rec + l.v_ch + 2 * v_ch_idx(l, c), h);
  }
}

__device__ void scalar_side(const RecordLayout& l, const Tile& T, uint32_t iters, BalanceMode mode,
                            const SealScratch& s, uint8_t* rec) {
  prepare(l, T, iters, mode, s, rec);
  const Side side = T.is_k ? Side::k : Side::v;
  const uint32_t b = T.is_k ? l.bits_k : l.bits_v;
  const uint32_t qmax = (1u << b) - 1u;
  uint32_t* words = reinterpret_cast<uint32_t*>(rec + (T.is_k ? l.k_payload : l.v_payload));
  for_grid(T.R, T.C, [&](uint32_t r, uint32_t c) {
    const uint32_t q = bal::rtn_code(s.cur[static_cast<size_t>(r) * T.ld + c], s.lo[r], s.step[r], qmax);
    if (q == 0) return;
    const uint32_t t = T.is_k ? c : r, d = T.is_k ? r : c;
    const uint32_t bit = code_bit(l, side, t, d);
    const uint32_t w = bit >> 5, sh = bit & 31u;
    atomicOr(&words[w], q << sh);
    if (sh + b > 32) atomicOr(&words[w + 1], q >> (32 - sh));
  });
  columns(l, T, s, rec);
  __syncthreads();
}

__device__ void trellis_side(const RecordLayout& l, const Tile& T, uint32_t iters, BalanceMode mode,
                             const uint16_t* table, const SealScratch& s, uint8_t* rec) {
  __shared__ float cbf[kTrellisMaxEntries];
  __shared__ float phi[kSealWarps][2][kTrellisStates];
  const uint32_t b = T.is_k ? l.bits_k : l.bits_v;
  const uint32_t nb = 1u << b;
  for (uint32_t w = threadIdx.x; w < trellis_entries(b); w += blockDim.x) cbf[w] = f16_to_f32(table[w]);
  prepare(l, T, iters, mode, s, rec);  // ends with a barrier, so cbf is complete too
  uint8_t* payload = rec + (T.is_k ? l.k_payload : l.v_payload);
  const bool ch_axis = l.axis == TrellisAxis::channel;
  const uint32_t S = l.trellis_seqs(), n = l.trellis_len();
  const uint32_t V = l.head_dim > l.group ? l.head_dim : l.group;
  const uint32_t warp = threadIdx.x >> 5, lane = threadIdx.x & 31u;
  float* y = s.y + static_cast<size_t>(warp) * V;
  uint8_t* choice = s.choice + static_cast<size_t>(warp) * V * kTrellisStates;
  uint32_t* words = reinterpret_cast<uint32_t*>(payload);  // zeroed; 4-byte aligned as scalar_side's
  for (uint32_t q = warp; q < S; q += kSealWarps) {
    for (uint32_t i = lane; i < n; i += 32) {
      const uint32_t t = ch_axis ? q : i, d = ch_axis ? i : q;
      const uint32_t r = T.is_k ? d : t, c = T.is_k ? t : d;
      y[i] = trellis::target(s.cur[static_cast<size_t>(r) * T.ld + c], s.lo[r], s.step[r]);
    }
    float* cur = phi[warp][0];
    float* nxt = phi[warp][1];
    cur[lane] = 0.0f;
    cur[lane + 32] = 0.0f;
    __syncwarp();
    float ynext = y[n - 1];
    for (uint32_t i = n; i-- > 0;) {
      const float yi = ynext;
      if (i > 0) ynext = y[i - 1];
      SJKV_SEAL_UNROLL
      for (uint32_t h = 0; h < 2; ++h) {
        const uint32_t st = lane + 32 * h;
        float best = f32_from_bits(0x7f800000u);
        uint32_t bj = 0;
        SJKV_SEAL_UNROLL
        for (uint32_t j = 0; j < 16; ++j) {
          if (j >= nb) break;
          const uint32_t w = st + kTrellisStates * j;
          const float cost = trellis::branch_cost(yi, cbf[w], cur[trellis::next_state(w, b)]);
          if (cost < best) {
            best = cost;
            bj = j;
          }
        }
        nxt[st] = best;
        choice[static_cast<size_t>(i) * kTrellisStates + st] = static_cast<uint8_t>(bj);
      }
      __syncwarp();
      float* tmp = cur;
      cur = nxt;
      nxt = tmp;
    }
    // Traceback by the whole warp: the choices of 8 steps are loaded at once (both halves
    // of the states, independent of the path), then each step's choice comes from the lane
    // holding the current state. The codes are OR-ed into the zeroed payload a 32-bit word
    // at a time (the bits put_bits would write, in the same places).
    uint32_t st = 0, wacc = 0;
    const uint32_t seq_bit = q * n * b;
    uint32_t wcur = seq_bit >> 5;
    for (uint32_t i0 = 0; i0 < n; i0 += 8) {
      uint32_t c0[8], c1[8];
      SJKV_SEAL_UNROLL
      for (uint32_t u = 0; u < 8; ++u) {
        const bool in = i0 + u < n;
        const size_t at = static_cast<size_t>(i0 + u) * kTrellisStates + lane;
        c0[u] = in ? choice[at] : 0u;
        c1[u] = in ? choice[at + 32] : 0u;
      }
      SJKV_SEAL_UNROLL
      for (uint32_t u = 0; u < 8; ++u) {
        if (i0 + u >= n) break;
        const uint32_t c = __shfl_sync(kFull, st >= 32 ? c1[u] : c0[u], st & 31u);
        const uint32_t bit = seq_bit + (i0 + u) * b, w = bit >> 5, sh = bit & 31u;
        if (w != wcur) {
          if (lane == 0 && wacc) atomicOr(&words[wcur], wacc);
          wcur = w;
          wacc = 0;
        }
        wacc |= c << sh;
        if (sh + b > 32) {
          if (lane == 0 && wacc) atomicOr(&words[wcur], wacc);
          wcur = w + 1;
          wacc = c >> (32 - sh);
        }
        st = trellis::next_state(st + kTrellisStates * c, b);
      }
    }
    if (lane == 0 && wacc) atomicOr(&words[wcur], wacc);
    __syncwarp();
  }
  __syncthreads();
  for (uint32_t r = threadIdx.x; r < T.R; r += blockDim.x) {
    trellis::RefitSums sums;
    for (uint32_t c = 0; c < T.C; ++c) {
      const uint32_t t = T.is_k ? c : r, d = T.is_k ? r : c;
      trellis::refit_add(sums, s.cur[static_cast<size_t>(r) * T.ld + c], cbf[trellis::window_at(l, rec, T.is_k ? Side::k : Side::v, t, d)]);
    }
    double a, bz;
    if (!trellis::refit_solve(sums, T.C, &a, &bz)) continue;
    uint16_t sc, zp;
    trellis::refit_store(s.s_row[r], a, bz, &sc, &zp);
    const uint32_t i = T.is_k ? k_ch_idx(l, r) : r;
    store_u16(rec + (T.is_k ? l.k_scale : l.v_scale) + 2 * i, sc);
    store_u16(rec + (T.is_k ? l.k_zero : l.v_zero) + 2 * i, zp);
  }
  columns(l, T, s, rec);
  __syncthreads();
}

__global__ void __launch_bounds__(kSealThreads) seal_kernel(RecordLayout l, uint32_t iters, BalanceMode mode,
                                                            TrellisCodebooks cb, const uint16_t* k, const uint16_t* v,
                                                            size_t stride, size_t rec_stride, uint8_t* out,
                                                            RecordStatus* status, uint8_t* scratch,
                                                            size_t scratch_per_block, bool tile_in_shared,
                                                            bool row_lanes8, bool m_in_shared) {
  __shared__ unsigned first_bad;
  const size_t ri = blockIdx.x;
  const uint16_t* kr = k + ri * rec_stride;
  const uint16_t* vr = v + ri * rec_stride;
  uint8_t* rec = out + ri * l.bytes;
  const uint32_t D = l.head_dim, G = l.group;
  if (threadIdx.x == 0) first_bad = UINT_MAX;
  uint32_t* words = reinterpret_cast<uint32_t*>(rec);
  for (uint32_t i = threadIdx.x; i < l.bytes / 4; i += blockDim.x) words[i] = 0;
  __syncthreads();
  // First NaN/Inf: K before V, token-major, as check_finite_rows.
  const uint32_t tile = D * G;
  for (uint32_t i = threadIdx.x; i < 2 * tile; i += blockDim.x) {
    const uint32_t j = i % tile, t = j / D, d = j % D;
    const uint16_t h = (i < tile ? kr : vr)[static_cast<size_t>(t) * stride + d];
    if ((h & 0x7c00u) == 0x7c00u) atomicMin(&first_bad, i);
  }
  __syncthreads();
  if (first_bad != UINT_MAX) {
    if (threadIdx.x == 0) {
      const uint32_t j = first_bad % tile;
      status[ri] = RecordStatus{static_cast<uint32_t>(ErrorCode::non_finite_input), first_bad < tile ? 0u : 1u, j / D,
                                j % D};
    }
    return;
  }
  SealScratch s = scratch_at(scratch + blockIdx.x * scratch_per_block, D, G);
  // Dynamic shared memory: [balanced tile, when in shared][fp16 input copy, when in shared].
  SJKV_DYN_SHARED(float, dyn_shared);
  // The balanced tile in shared memory: every balancing pass reads and writes it.
  if (tile_in_shared) s.cur = dyn_shared;
  // A compact fp16 copy of the side's input rows ([G][D]): every recompute reads the whole
  // input, and from shared memory that costs no global-memory latency per pass.
  uint16_t* m_copy = reinterpret_cast<uint16_t*>(reinterpret_cast<uint8_t*>(dyn_shared) +
                                                 (tile_in_shared ? tile_bytes(D, G) : 0));
  for (uint32_t side = 0; side < 2; ++side) {
    const uint16_t* src = side == 0 ? kr : vr;
    size_t st = stride;
    if (m_in_shared) {
      for_grid(G, D, [&](uint32_t t, uint32_t d) { m_copy[t * D + d] = src[static_cast<size_t>(t) * stride + d]; });
      __syncthreads();
      src = m_copy;
      st = D;
    }
    const Tile T = side == 0 ? Tile{src, st, true, D, G, G + 1, row_lanes8} : Tile{src, st, false, G, D, D + 1, row_lanes8};
    const Side sd = side == 0 ? Side::k : Side::v;
    if (l.body == Body::trellis)
      trellis_side(l, T, iters, mode, codebook_table(cb, sd, sd == Side::k ? l.bits_k : l.bits_v), s, rec);
    else
      scalar_side(l, T, iters, mode, s, rec);
  }
  if (threadIdx.x == 0) status[ri] = RecordStatus{0, 0, 0, 0};
}


// Decode: one warp per row (record r, row j: K rows 0..G-1 then V rows), lanes over d, the
// per-element formula of decode_k_row_* / decode_v_row_*.
__global__ void decode_rows_kernel(RecordLayout l, TrellisCodebooks cb, size_t n, const uint8_t* recs, float* out) {
  const size_t row = (blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x) >> 5;
  const uint32_t lane = threadIdx.x & 31u;
  const size_t per = 2 * static_cast<size_t>(l.group);
  if (row >= n * per) return;
  const size_t r = row / per;
  const uint32_t j = static_cast<uint32_t>(row % per);
  const uint8_t* rec = recs + r * l.bytes;
  float* o = out + row * l.head_dim;
  const bool trel = l.body == Body::trellis;
  if (j < l.group) {
    const uint32_t t = j;
    const uint16_t* table = trel ? codebook_table(cb, Side::k, l.bits_k) : nullptr;
    const float tok = f16_to_f32(load_u16(rec + l.k_tok + 2 * t));
    for (uint32_t d = lane; d < l.head_dim; d += 32) {
      const uint32_t i = k_ch_idx(l, d);
      const float sc = f16_to_f32(load_u16(rec + l.k_scale + 2 * i));
      const float zp = f16_to_f32(load_u16(rec + l.k_zero + 2 * i));
      const float q = trel ? trellis_q(l, rec, Side::k, t, d, table) : scalar_q(l, rec, Side::k, t, d);
      o[d] = op::fmul(op::fadd(op::fmul(q, sc), zp), tok);
    }
  } else {
    const uint32_t t = j - l.group;
    const uint16_t* table = trel ? codebook_table(cb, Side::v, l.bits_v) : nullptr;
    const float sc = f16_to_f32(load_u16(rec + l.v_scale + 2 * t));
    const float zp = f16_to_f32(load_u16(rec + l.v_zero + 2 * t));
    for (uint32_t d = lane; d < l.head_dim; d += 32) {
      const float ch = f16_to_f32(load_u16(rec + l.v_ch + 2 * v_ch_idx(l, d)));
      const float q = trel ? trellis_q(l, rec, Side::v, t, d, table) : scalar_q(l, rec, Side::v, t, d);
      o[d] = op::fmul(op::fadd(op::fmul(q, sc), zp), ch);
    }
  }
}

// Rows of up to this many tq6_0 blocks (D <= 1024) take the thread-per-value tq6 path.
constexpr uint32_t kTq6ParallelBlocks = 8;
constexpr unsigned kStagingMaxThreads = 256;

// Launch shape of staging_write_kernel: a thread per value up to 256, and the dynamic
// shared memory (the row, then one norm per tq6 block).
__host__ __device__ inline unsigned staging_threads(uint32_t D) {
  return D < 32 ? 32u : (D > kStagingMaxThreads ? kStagingMaxThreads : D);
}
__host__ __device__ inline size_t staging_dyn_bytes(uint32_t D) {
  return (static_cast<size_t>(D) + D / kTq6BlockValues + 1) * sizeof(float);
}

// Loads row r into shared sx and rotates it with the butterflies of hadamard_inplace (each
// pair's two results depend only on that pair, so the pairs of a stage run in parallel).
// Ends with a barrier.
__device__ inline void staging_load_rotate(const float* xr, uint32_t D, uint32_t rot, float* sx) {
  for (uint32_t i = threadIdx.x; i < D; i += blockDim.x) sx[i] = xr[i];
  __syncthreads();
  if (rot > 1) {
    for (uint32_t h = 1; h < rot; h <<= 1) {
      for (uint32_t p = threadIdx.x; p < D / 2; p += blockDim.x) {
        const uint32_t o = (p / (rot / 2)) * rot, q = p % (rot / 2);
        const uint32_t j = o + (q / h) * 2 * h + q % h;
        const float a = sx[j], b = sx[j + h];
        sx[j] = op::fadd(a, b);
        sx[j + h] = op::fsub(a, b);
      }
      __syncthreads();
    }
    const float sc = hadamard_scale(rot);
    for (uint32_t i = threadIdx.x; i < D; i += blockDim.x) sx[i] = op::fmul(sx[i], sc);
    __syncthreads();
  }
}

// tq6_code's search against a copy of the midpoints in shared memory (the constant-memory
// table serialises a warp's divergent probes).
__device__ inline uint32_t tq6_code_at(float v, const float* mid) {
  uint32_t idx = 0;
  for (uint32_t step = 32; step > 0; step >>= 1) idx += !(v < mid[idx + step - 1]) ? step : 0u;
  return idx;
}

// Staging write of tq6_0 rows of at most kTq6ParallelBlocks blocks: one block per row, a
// thread per value. Its own kernel: the generic one's per-thread block buffers (local memory,
// 128 registers) limited the SM to two rows at a time. The two block sums stay sequential on
// one thread per block (their order is the format's); the codes and the packing run in
// parallel, with both tables in shared memory.
__global__ void __launch_bounds__(kStagingMaxThreads, 4) staging_write_tq6_kernel(const float* x, size_t n_rows,
                                                                                 uint32_t D, uint32_t rot,
                                                                                 uint8_t* out, int32_t* bad) {
  SJKV_DYN_SHARED(float, sx);
  __shared__ int32_t first;
  __shared__ float tq_inv[kTq6ParallelBlocks];
  __shared__ float tq_mid[64];
  __shared__ float tq_cen[64];
  __shared__ uint8_t tq_code[kTq6ParallelBlocks * kTq6BlockValues];
  const size_t r = blockIdx.x;
  if (r >= n_rows) return;
  if (threadIdx.x == 0) first = INT_MAX;
  for (uint32_t i = threadIdx.x; i < 64; i += blockDim.x) {
    tq_mid[i] = i < 63 ? tq6_midpoint(i) : 0.0f;
    tq_cen[i] = tq6_centroid(i);
  }
  staging_load_rotate(x + r * D, D, rot, sx);
  const uint32_t nblk = D / kTq6BlockValues;
  for (uint32_t b = threadIdx.x; b < nblk; b += blockDim.x) {
    const float* xb = sx + b * kTq6BlockValues;
    float norm_sq = 0.0f;
    for (uint32_t i = 0; i < kTq6BlockValues; ++i) norm_sq = op::fadd(norm_sq, op::fmul(xb[i], xb[i]));
    const float norm = op::sqrt32(norm_sq);
    const bool live = norm > f32_from_bits(0x2edbe6ffu);  // 1e-10
    tq_inv[b] = live ? op::fdiv(1.0f, norm) : 0.0f;
    sx[D + b] = norm;  // the dynamic buffer holds D + blocks floats
  }
  __syncthreads();
  for (uint32_t i = threadIdx.x; i < D; i += blockDim.x) {
    const uint32_t b = i / kTq6BlockValues;
    const float inv = tq_inv[b];
    const bool live = sx[D + b] > f32_from_bits(0x2edbe6ffu);
    tq_code[i] = static_cast<uint8_t>(tq6_code_at(live ? op::fmul(sx[i], inv) : 0.0f, tq_mid));
  }
  __syncthreads();
  uint8_t* row_out = out + r * staging_row_bytes(StagingType::tq6_0, D);
  for (uint32_t b = threadIdx.x; b < nblk; b += blockDim.x) {
    const uint8_t* code = tq_code + b * kTq6BlockValues;
    float rn_sq = 0.0f;
    for (uint32_t i = 0; i < kTq6BlockValues; ++i) {
      const float c = tq_cen[code[i]];
      rn_sq = op::fadd(rn_sq, op::fmul(c, c));
    }
    const float norm = sx[D + b];
    const float rn = op::sqrt32(rn_sq);
    const uint16_t h = f32_to_f16(rn > f32_from_bits(0x2edbe6ffu) ? op::fdiv(norm, rn) : norm);
    store_u16(row_out + b * kTq6BlockBytes, h);
    if ((h & 0x7c00u) != 0x7c00u) continue;
    // Refused block: its first non-finite value, else its largest magnitude.
    const float* xb = sx + b * kTq6BlockValues;
    uint32_t worst = 0;
    float wmag = -1.0f;
    for (uint32_t i = 0; i < kTq6BlockValues; ++i) {
      const float a = xb[i] < 0.0f ? -xb[i] : xb[i];
      if (!(a <= f32_from_bits(0x7f7fffffu))) { worst = i; break; }
      if (a > wmag) { wmag = a; worst = i; }
    }
    atomicMin(&first, static_cast<int32_t>(b * kTq6BlockValues + worst));
  }
  for (uint32_t j = threadIdx.x; j < nblk * (kTq6BlockValues / 2); j += blockDim.x) {
    const uint32_t b = j / (kTq6BlockValues / 2), i = j % (kTq6BlockValues / 2);
    const uint8_t* code = tq_code + b * kTq6BlockValues;
    row_out[b * kTq6BlockBytes + 2 + i] = static_cast<uint8_t>((code[2 * i] & 15u) | ((code[2 * i + 1] & 15u) << 4));
  }
  for (uint32_t j = threadIdx.x; j < nblk * (kTq6BlockValues / 4); j += blockDim.x) {
    const uint32_t b = j / (kTq6BlockValues / 4), i = j % (kTq6BlockValues / 4);
    const uint8_t* code = tq_code + b * kTq6BlockValues;
    row_out[b * kTq6BlockBytes + 66 + i] =
        static_cast<uint8_t>((code[4 * i] >> 4) | ((code[4 * i + 1] >> 4) << 2) | ((code[4 * i + 2] >> 4) << 4) |
                             ((code[4 * i + 3] >> 4) << 6));
  }
  __syncthreads();
  if (bad && threadIdx.x == 0) bad[r] = first == INT_MAX ? -1 : first;
}

// Whether a staging write takes staging_write_tq6_kernel.
__host__ __device__ inline bool staging_tq6_fast(StagingType t, uint32_t D) {
  return t == StagingType::tq6_0 && D / kTq6BlockValues <= kTq6ParallelBlocks;
}

// Staging write (q8_0, f16, wide tq6_0 rows): one block per row, rotated in shared memory,
// then encoded one staging block per thread.
__global__ void __launch_bounds__(kStagingMaxThreads, 2) staging_write_kernel(StagingType t, const float* x, size_t n_rows, uint32_t D, uint32_t rot,
                                     uint8_t* out, int32_t* bad) {
  SJKV_DYN_SHARED(float, sx);
  __shared__ int32_t first;
  const size_t r = blockIdx.x;
  if (r >= n_rows) return;
  if (threadIdx.x == 0) first = INT_MAX;
  staging_load_rotate(x + r * D, D, rot, sx);
  const uint32_t bv = staging_block_values(t), nblk = D / bv;
  const uint32_t rb = staging_row_bytes(t, D);
  for (uint32_t blk = threadIdx.x; blk < nblk; blk += blockDim.x) {
    // staging_encode_row_checked on one block: the row-level rule (first refused block,
    // its first non-finite value else its largest magnitude) is applied below.
    const int32_t b = staging_encode_row_checked(t, sx + blk * bv, bv, out + r * rb + blk * (rb / nblk));
    if (b >= 0) atomicMin(&first, static_cast<int32_t>(blk * bv) + b);
  }
  __syncthreads();
  if (bad && threadIdx.x == 0) bad[r] = first == INT_MAX ? -1 : first;
}

// Ring / staging rows decoded, a thread per value (the per-value formulas of staging.h).
__global__ void staging_decode_kernel(StagingType t, const uint8_t* rows, size_t n_rows, uint32_t D, float* out) {
  const size_t idx = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (idx >= n_rows * D) return;
  const size_t r = idx / D;
  const uint32_t i = static_cast<uint32_t>(idx % D);
  const uint8_t* row = rows + r * staging_row_bytes(t, D);
  float v = 0.0f;
  switch (t) {
    case StagingType::tq6_0: {
      const uint8_t* blk = row + (i / kTq6BlockValues) * kTq6BlockBytes;
      v = op::fmul(tq6_centroid(tq6_block_code(blk, i % kTq6BlockValues)), f16_to_f32(load_u16(blk)));
      break;
    }
    case StagingType::q8_0: {
      const uint8_t* blk = row + (i / kQ8BlockValues) * kQ8BlockBytes;
      v = op::fmul(f16_to_f32(load_u16(blk)), static_cast<float>(static_cast<int8_t>(blk[2 + i % kQ8BlockValues])));
      break;
    }
    case StagingType::f16: v = f16_to_f32(load_u16(row + 2 * i)); break;
  }
  out[idx] = v;
}

