// Fused decode attention over sink, body records and ring (see attention_cuda.h).
#include <cuda_runtime.h>

#include <math.h>

#include <atomic>
#include <cstdint>

#include "sjkv/cuda/attention_cuda.h"
#include "sjkv/record.h"
#include "sjkv/staging.h"

namespace sjkv {
namespace cuda {
namespace {

constexpr int kThreads = 256;          // threads per item block (8 warps)
constexpr uint32_t kMaxRows = 128;     // sink/ring rows per item
constexpr uint32_t kMaxP = 256;        // positions per item (a body group or a row chunk)
constexpr uint32_t kMaxTable = kTrellisMaxEntries;

// Partials of one (KV head, query row, item): m, S, then acc[D]; rows back to back.
struct Workspace {
  float* m;
  float* S;
  float* acc;
};

__device__ inline float warp_sum(float x) {
  // xor butterfly: every lane ends with the same bits (attn::butterfly_sum32 on the host).
  for (int o = 16; o > 0; o >>= 1) x = op::fadd(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}
__device__ inline float warp_max(float x) {
  for (int o = 16; o > 0; o >>= 1) x = op::maxS(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

// One block per (item, KV head h, NR query rows from blockIdx.z*NR). Steps (the CPU
// emulation in tests/gpu/test_gpu_attention.cpp follows them in the same order):
//  1. body items: c0[r] = sum_d q*Kz (lane partials over d = lane + 32k, butterfly) and
//     qs[r][d] = q*Ks; row items: qs = q.
//  2. thread pair (t, half): dot over the half's channels for all rows, one code decode per
//     (t, d); score = (Ktok[t]*(c0 + (lo + hi)) | lo + hi) * scale.
//  3. warp r: m = max, p = exp(s - m), S = sum p, Z = sum p*Vz (lane partials, butterfly);
//     body items keep pv = p*Vs[t].
//  4. thread (d, token slice): sum_t pv*code(t, d) for all rows; slices added in order; body
//     items finish with Vch[d]*(acc + Z).
template <int D, int NR>
__global__ void __launch_bounds__(kThreads) attention_item_kernel(CacheView v, attn::Items it,
                                                                 const float* __restrict__ q, uint32_t n_rep,
                                                                 float scale, Workspace ws, uint32_t stage) {
  constexpr uint32_t NSL = D >= kThreads ? 1 : kThreads / D;  // token slices of step 4
  constexpr uint32_t kPad = 4;  // upper half of qs_s shifted 4 banks: the two halves of step 2 read apart
  __shared__ __align__(16) float qs_s[NR * D + kPad];
  __shared__ float p_s[NR * kMaxP];
  __shared__ float vpart_s[NSL > 1 ? NSL * NR * D : 1];
  __shared__ float c0_s[NR], m_s[NR], S_s[NR], Z_s[NR];
  __shared__ uint16_t tab_s[2][kMaxTable];
  __shared__ float tabf_s[2][kMaxTable];  // the same tables as binary32 (trellis readers)
  extern __shared__ uint4 rec_dyn[];  // the record's bytes when `stage` (dynamic size l.bytes)
  // Flat grid, item-major (block = (item * H + h) * nz + z): the heads and row blocks of an
  // item run together, and the items run in order (sink and ring chunks first).
  const uint32_t nz = (n_rep + NR - 1) / NR, bz = blockIdx.x % nz, bh = blockIdx.x / nz;
  const uint32_t item = bh / v.n_head_kv, h = bh % v.n_head_kv, r0 = bz * NR;
  const uint32_t nr = n_rep - r0 < static_cast<uint32_t>(NR) ? n_rep - r0 : NR;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const RecordLayout& l = v.layout;
  uint32_t p0, p1, g;
  it.range(v, item, &p0, &p1, &g);
  const uint32_t P = p1 - p0;
  const bool body = g != ~0u;
  const uint8_t* rec = body ? v.body + (static_cast<size_t>(g) * v.n_head_kv + h) * l.bytes : nullptr;
  if (body && stage) {
    // One coalesced sweep of 16-byte loads brings the record in; every later read of codes
    // and factors (in whatever layout order) hits shared memory.
    if ((reinterpret_cast<uintptr_t>(rec) & 15u) == 0 && (l.bytes & 15u) == 0) {
      const uint4* src = reinterpret_cast<const uint4*>(rec);
      for (uint32_t i = tid; i < l.bytes / 16; i += kThreads) rec_dyn[i] = __ldg(src + i);
    } else {
      uint8_t* dst = reinterpret_cast<uint8_t*>(rec_dyn);
      for (uint32_t i = tid; i < l.bytes; i += kThreads) dst[i] = rec[i];
    }
    rec = reinterpret_cast<const uint8_t*>(rec_dyn);
  }
  const float* qh = q + (static_cast<size_t>(h) * n_rep + r0) * D;
  if (body && l.body == Body::trellis) {
    const uint16_t* tk = codebook_table(v.codebooks, Side::k, l.bits_k);
    const uint16_t* tv = codebook_table(v.codebooks, Side::v, l.bits_v);
    for (uint32_t i = tid; i < trellis_entries(l.bits_k); i += kThreads) {
      tab_s[0][i] = tk[i];
      tabf_s[0][i] = f16_to_f32(tk[i]);
    }
    for (uint32_t i = tid; i < trellis_entries(l.bits_v); i += kThreads) {
      tab_s[1][i] = tv[i];
      tabf_s[1][i] = f16_to_f32(tv[i]);
    }
  }
  __syncthreads();
  // 1.
  for (uint32_t i = tid; i < NR * D; i += kThreads) {
    const uint32_t r = i / D, d = i % D;
    const float x = r < nr ? qh[static_cast<size_t>(r) * D + d] : 0.0f;
    qs_s[d * NR + r + (d >= D / 2 ? kPad : 0)] = body ? op::fmul(x, attn::k_scale_of(l, rec, d)) : x;
  }
  if (warp < NR) {
    float part = 0.0f;
    if (body && static_cast<uint32_t>(warp) < nr)
      for (uint32_t d = lane; d < D; d += 32)
        part = attn::fma32(qh[static_cast<size_t>(warp) * D + d], attn::k_zero_of(l, rec, d), part);
    part = warp_sum(part);
    if (lane == 0) c0_s[warp] = part;
  }
  __syncthreads();
  // 2.
  for (uint32_t j0 = 0; j0 < 2 * kMaxP; j0 += kThreads) {
    if (j0 >= 2 * P) break;  // uniform over the block
    const uint32_t j = j0 + tid, t = j >> 1, half = j & 1;
    const bool live = t < P;
    float part[NR];
    const uint32_t d0 = half * (D / 2), d1 = d0 + D / 2;
    const float* qx = qs_s + (half ? kPad : 0);  // qx[d * NR + r] for d in [d0, d1)
    if (live) {
      if (body) {
        const uint16_t* tab = tab_s[0];
        attn::body_k_dot<NR>(l, rec, t, d0, d1, P == l.group, qx, tab, tabf_s[0], part);
      } else {
        attn::dot_rows<NR>([&](uint32_t d) { return attn::row_value(v, p0 + t, h, Side::k, d); }, qx, d0, d1, part);
      }
    } else {
#pragma unroll
      for (int r = 0; r < NR; ++r) part[r] = 0.0f;
    }
    const float tok = live && body ? attn::k_tok_of(l, rec, t) : 0.0f;
#pragma unroll
    for (int r = 0; r < NR; ++r) {
      const float other = __shfl_xor_sync(0xffffffffu, part[r], 1);
      const float dot = half == 0 ? op::fadd(part[r], other) : op::fadd(other, part[r]);
      const float sc = body ? attn::k_score(tok, c0_s[r], dot) : dot;
      if (live && half == 0) p_s[t * NR + r] = op::fmul(sc, scale);
    }
  }
  __syncthreads();
  // 3.
  if (warp < NR) {
    float* pr = p_s + warp;  // pr[t * NR]: row `warp`, token t
    float m = -INFINITY;
    for (uint32_t t = lane; t < P; t += 32) m = op::maxS(m, pr[t * NR]);
    m = warp_max(m);
    float S = 0.0f, Z = 0.0f;
    for (uint32_t t = lane; t < P; t += 32) {
      const float p = expf(op::fsub(pr[t * NR], m));
      S = op::fadd(S, p);
      if (body) {
        Z = attn::fma32(p, attn::v_zero_of(l, rec, t), Z);
        pr[t * NR] = op::fmul(p, attn::v_scale_of(l, rec, t));
      } else {
        pr[t * NR] = p;
      }
    }
    S = warp_sum(S);
    Z = warp_sum(Z);
    if (lane == 0) {
      m_s[warp] = m;
      S_s[warp] = S;
      Z_s[warp] = Z;
    }
  }
  __syncthreads();
  // 4.
  const size_t n_items = it.count();
  for (uint32_t dd = 0; dd < (D + kThreads - 1) / kThreads * kThreads; dd += kThreads) {
    const uint32_t d = NSL > 1 ? tid % D : dd + tid, sl = NSL > 1 ? tid / D : 0;
    if (d >= D) continue;
    const uint32_t chunk = (P + NSL - 1) / NSL;
    const uint32_t t0 = sl * chunk < P ? sl * chunk : P, t1 = t0 + chunk < P ? t0 + chunk : P;
    float acc[NR];
    if (body) {
      const uint16_t* tab = tab_s[1];
      attn::body_v_dot<NR>(l, rec, d, t0, t1, P == l.group, p_s, tab, tabf_s[1], acc);
    } else {
      attn::dot_rows<NR>([&](uint32_t t) { return attn::row_value(v, p0 + t, h, Side::v, d); }, p_s, t0, t1, acc);
    }
    if (NSL > 1) {
#pragma unroll
      for (int r = 0; r < NR; ++r) vpart_s[(sl * NR + r) * D + d] = acc[r];
    } else {
      const float vch = body ? attn::v_ch_of(l, rec, d) : 0.0f;
#pragma unroll
      for (int r = 0; r < NR; ++r) {
        if (static_cast<uint32_t>(r) >= nr) break;
        const size_t row = (static_cast<size_t>(h) * n_rep + r0 + r) * n_items + item;
        ws.acc[row * D + d] = body ? attn::v_value(vch, Z_s[r], acc[r]) : acc[r];
      }
    }
    if (NSL > 1) break;
  }
  if (NSL > 1) {
    __syncthreads();
    for (uint32_t i = tid; i < nr * D; i += kThreads) {
      const uint32_t r = i / D, d = i % D;
      float a = vpart_s[r * D + d];
      for (uint32_t sl = 1; sl < NSL; ++sl) a = op::fadd(a, vpart_s[(sl * NR + r) * D + d]);
      const size_t row = (static_cast<size_t>(h) * n_rep + r0 + r) * n_items + item;
      ws.acc[row * D + d] = body ? attn::v_value(attn::v_ch_of(l, rec, d), Z_s[r], a) : a;
    }
  }
  if (tid < static_cast<int>(nr)) {
    const size_t row = (static_cast<size_t>(h) * n_rep + r0 + tid) * n_items + item;
    ws.m[row] = m_s[tid];
    ws.S[row] = S_s[tid];
  }
}

// Block (row, 32 channels): item weights in shared memory once, warp c sums chunk c of the
// items (lane = channel), chunk sums added in order (attn::merge_* on the host).
constexpr int kMergeThreads = 32 * attn::kMergeChunks;
__global__ void __launch_bounds__(kMergeThreads) attention_merge_kernel(uint32_t D, uint32_t n_items, Workspace ws,
                                                                        float* out) {
  extern __shared__ float f_s[];  // [n_items]
  __shared__ float red_s[kMergeThreads / 32];
  __shared__ float a_s[attn::kMergeChunks][32], t_s[attn::kMergeChunks];
  const size_t row = blockIdx.x;
  const float* m = ws.m + row * n_items;
  const float* S = ws.S + row * n_items;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  float M = -INFINITY;  // max is exact in any order
  for (uint32_t s = tid; s < n_items; s += kMergeThreads)
    if (S[s] != 0.0f) M = op::maxS(M, m[s]);
  M = warp_max(M);
  if (lane == 0) red_s[warp] = M;
  __syncthreads();
  M = red_s[0];
  for (int w = 1; w < kMergeThreads / 32; ++w) M = op::maxS(M, red_s[w]);
  for (uint32_t s = tid; s < n_items; s += kMergeThreads) f_s[s] = attn::merge_weight(m[s], S[s], M);
  __syncthreads();
  const uint32_t d = blockIdx.y * 32 + lane;
  const float* acc = ws.acc + row * n_items * D;
  a_s[warp][lane] = d < D ? attn::merge_chunk_sum(n_items, warp, S, f_s, [&](uint32_t s) { return acc[s * D + d]; })
                          : 0.0f;
  if (lane == 0) t_s[warp] = attn::merge_chunk_sum(n_items, warp, S, f_s, [&](uint32_t s) { return S[s]; });
  __syncthreads();
  if (warp == 0 && d < D) {
    float a[attn::kMergeChunks];
    for (uint32_t c = 0; c < attn::kMergeChunks; ++c) a[c] = a_s[c][lane];
    out[row * D + d] = attn::merge_finish(a, t_s);
  }
}

uint32_t rows_per_block(uint32_t n_rep) {
  uint32_t rb = 1;
  while (rb < n_rep && rb < 8) rb *= 2;
  return rb;
}

uint32_t context_end(const CacheView& v, uint32_t qpos) { return v.N < qpos + 1 ? v.N : qpos + 1; }
uint32_t item_rows(uint32_t span) { return span == 0 || span > kMaxRows ? kMaxRows : span; }

// Workspace layout in floats: m[rows*n_items], S[rows*n_items] (each padded to 64 floats),
// acc[rows*n_items*D].
size_t pad64(size_t x) { return (x + 63) & ~static_cast<size_t>(63); }
size_t workspace_floats(size_t rows, size_t n_items, uint32_t D) { return 2 * pad64(rows * n_items) + rows * n_items * D; }

int smem_optin() {
  static int n = -1;
  if (n < 0) {
    int dev = 0, c = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&c, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) {
      cudaGetLastError();
      c = 0;
    }
    n = c;
  }
  return n;
}

// Launch with the record staged in shared memory when it fits next to the static arrays.
template <int D, int R>
cudaError_t launch_one(dim3 grid, cudaStream_t st, const AttentionArgs& a, const attn::Items& it, Workspace ws) {
  static const size_t static_smem = [] {  // once per instantiation (thread-safe static)
    cudaFuncAttributes fa{};
    if (cudaFuncGetAttributes(&fa, attention_item_kernel<D, R>) != cudaSuccess) {
      cudaGetLastError();
      return ~static_cast<size_t>(0) / 2;  // unknown: never stage
    }
    return fa.sharedSizeBytes;
  }();
  cudaError_t e = cudaSuccess;
  const size_t dyn = a.view.layout.bytes;
  uint32_t stage = it.n_body > 0 && static_smem + dyn <= static_cast<size_t>(smem_optin()) ? 1u : 0u;
  // Above 48 KiB per block (static + dynamic) the kernel must opt in (the default dynamic
  // limit is 48 KiB less the static arrays).
  // The attributes are set once per kernel and size (they persist), not on every call.
  static std::atomic<size_t> opted{0};
  static std::atomic<bool> carved{false};
  if (stage && static_smem + dyn > 48 * 1024 && dyn > opted.load()) {
    e = cudaFuncSetAttribute(attention_item_kernel<D, R>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(dyn));
    if (e != cudaSuccess) {
      cudaGetLastError();
      stage = 0;
    } else {
      opted.store(dyn);
    }
  }
  if (stage && !carved.exchange(true)) {  // a hint: prefer shared memory over L1 (more record blocks per SM)
    if (cudaFuncSetAttribute(attention_item_kernel<D, R>, cudaFuncAttributePreferredSharedMemoryCarveout,
                             cudaSharedmemCarveoutMaxShared) != cudaSuccess)
      cudaGetLastError();
  }
  attention_item_kernel<D, R><<<grid, kThreads, stage ? dyn : 0, st>>>(a.view, it, a.q, a.n_rep, a.scale, ws, stage);
  return cudaGetLastError();
}

template <int D>
cudaError_t launch_items(uint32_t rb, dim3 grid, cudaStream_t st, const AttentionArgs& a, const attn::Items& it,
                         Workspace ws) {
  switch (rb) {
#define SJKV_ATTN_CASE(R)                            \
  case R: return launch_one<D, R>(grid, st, a, it, ws);
    SJKV_ATTN_CASE(1)
    SJKV_ATTN_CASE(2)
    SJKV_ATTN_CASE(4)
    SJKV_ATTN_CASE(8)
#undef SJKV_ATTN_CASE
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace

uint32_t attention_pick_span(uint32_t, uint32_t, uint32_t, uint32_t) { return kMaxRows; }

std::string attention_can_implement(const CacheView& v, uint32_t n_rep) {
  const uint32_t D = v.layout.head_dim;
  if (D < 32 || D > 512 || (D & (D - 1)) != 0) return "attention kernels need head_dim a power of two in 32..512";
  if (n_rep == 0) return "n_rep must be at least 1";
  if (v.n_head_kv == 0) return "no KV heads";
  if (v.layout.group == 0 || v.layout.group > kMaxP) return "attention kernels need group 1..256";
  if (v.layout.body == Body::trellis) {
    if (v.layout.bits_k > 4 || v.layout.bits_v > 4) return "trellis widths above 4 bits";
    if ((v.layout.bits_k == 4 && !v.codebooks.k) || (v.layout.bits_v == 4 && !v.codebooks.v))
      return "4-bit trellis bodies need explicit device codebooks";
  }
  return "";
}

size_t attention_workspace_bytes(const CacheView& v, uint32_t n_rep, uint32_t qpos, uint32_t span) {
  const uint32_t end = context_end(v, qpos);
  const size_t n_items = attn::make_items(v, end, item_rows(span)).count();
  const size_t rows = static_cast<size_t>(v.n_head_kv) * n_rep;
  return workspace_floats(rows, n_items, v.layout.head_dim) * sizeof(float);
}

std::string attention_decode(const AttentionArgs& a) {
  const std::string why = attention_can_implement(a.view, a.n_rep);
  if (!why.empty()) return why;
  const uint32_t D = a.view.layout.head_dim;
  const uint32_t end = context_end(a.view, a.qpos);
  const size_t rows = static_cast<size_t>(a.view.n_head_kv) * a.n_rep;
  cudaStream_t st = static_cast<cudaStream_t>(a.stream);
  if (end == 0) {  // nothing to attend to: zeros, as the reference
    const cudaError_t e = cudaMemsetAsync(a.out, 0, rows * D * sizeof(float), st);
    return e == cudaSuccess ? "" : cudaGetErrorString(e);
  }
  if (a.workspace_bytes < attention_workspace_bytes(a.view, a.n_rep, a.qpos, a.span)) return "attention workspace too small";
  const attn::Items it = attn::make_items(a.view, end, item_rows(a.span));
  const uint32_t n_items = it.count();
  float* base = static_cast<float*>(a.workspace);
  Workspace ws{base, base + pad64(rows * n_items), base + 2 * pad64(rows * n_items)};
  const uint32_t rb = rows_per_block(a.n_rep);
  const uint64_t blocks = static_cast<uint64_t>(n_items) * a.view.n_head_kv * ((a.n_rep + rb - 1) / rb);
  if (blocks > 0x7fffffffu) return "too many items, KV heads or query rows for one launch";
  const dim3 grid(static_cast<unsigned>(blocks));
  cudaError_t e = cudaSuccess;
  switch (D) {
    case 32: e = launch_items<32>(rb, grid, st, a, it, ws); break;
    case 64: e = launch_items<64>(rb, grid, st, a, it, ws); break;
    case 128: e = launch_items<128>(rb, grid, st, a, it, ws); break;
    case 256: e = launch_items<256>(rb, grid, st, a, it, ws); break;
    case 512: e = launch_items<512>(rb, grid, st, a, it, ws); break;
    default: return "unsupported head_dim";
  }
  if (e != cudaSuccess) return cudaGetErrorString(e);
  const size_t merge_smem = static_cast<size_t>(n_items) * sizeof(float);
  static std::atomic<size_t> merge_opted{0};
  if (merge_smem + 2048 > 48 * 1024 && merge_smem > merge_opted.load()) {  // static arrays: about 1 KiB
    e = cudaFuncSetAttribute(attention_merge_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(merge_smem));
    if (e != cudaSuccess) return std::string("context too long for the merge: ") + cudaGetErrorString(e);
    merge_opted.store(merge_smem);
  }
  attention_merge_kernel<<<dim3(static_cast<unsigned>(rows), (D + 31) / 32), kMergeThreads, merge_smem, st>>>(
      D, n_items, ws, a.out);
  e = cudaGetLastError();
  return e == cudaSuccess ? "" : cudaGetErrorString(e);
}

// ---- device copy of a host view ------------------------------------------------------------

DeviceCacheView::~DeviceCacheView() {
  for (void* p : mem_)
    if (p) cudaFree(p);
}

size_t DeviceCacheView::bytes_read(const CacheView& v, uint32_t end) {
  const uint32_t D = v.layout.head_dim, H = v.n_head_kv, rb = v.row_bytes();
  const size_t sink_rows = end < v.sink ? end : v.sink;
  size_t bytes = sink_rows * H * (v.sink_inherit ? 2 * rb : 4 * D);
  const uint32_t body_end = end < v.B ? end : v.B;
  if (body_end > v.sink) {
    const size_t groups = (body_end - v.sink + v.layout.group - 1) / v.layout.group;
    bytes += groups * H * v.layout.bytes;
  }
  const uint32_t ring_from = v.B > v.sink ? v.B : v.sink;
  if (end > ring_from) bytes += static_cast<size_t>(end - ring_from) * H * 2 * rb;
  return bytes;
}

std::string DeviceCacheView::upload(const CacheView& h) {
  for (void*& p : mem_) {
    if (p) cudaFree(p);
    p = nullptr;
  }
  view_ = h;
  const uint32_t D = h.layout.head_dim, H = h.n_head_kv, rb = h.row_bytes();
  const size_t sink_rows = h.N < h.sink ? h.N : h.sink;
  const size_t groups = h.B > h.sink ? (h.B - h.sink) / h.layout.group : 0;
  struct Part {
    const void* src;
    size_t bytes;
  };
  const bool trellis = h.layout.body == Body::trellis;
  const uint16_t* ck = trellis ? codebook_table(h.codebooks, Side::k, h.layout.bits_k) : nullptr;
  const uint16_t* cv = trellis ? codebook_table(h.codebooks, Side::v, h.layout.bits_v) : nullptr;
  const Part parts[6] = {
      {h.sink_inherit ? nullptr : h.sink_f16, h.sink_inherit ? 0 : sink_rows * H * 4 * D},
      {h.sink_inherit ? h.sink_staged : nullptr, h.sink_inherit ? sink_rows * H * 2 * rb : 0},
      {h.ring, h.N > h.sink ? static_cast<size_t>(h.cap) * H * 2 * rb : 0},
      {h.body, groups * H * h.layout.bytes},
      // Tables are uploaded even when they are the built-in ones (the device has them too,
      // but this keeps one code path for run-time tables).
      {ck, ck ? trellis_entries(h.layout.bits_k) * sizeof(uint16_t) : 0},
      {cv, cv ? trellis_entries(h.layout.bits_v) * sizeof(uint16_t) : 0},
  };
  for (int i = 0; i < 6; ++i) {
    if (parts[i].bytes == 0 || parts[i].src == nullptr) continue;
    cudaError_t e = cudaMalloc(&mem_[i], parts[i].bytes);
    if (e == cudaSuccess) e = cudaMemcpy(mem_[i], parts[i].src, parts[i].bytes, cudaMemcpyHostToDevice);
    if (e != cudaSuccess) return cudaGetErrorString(e);
  }
  view_.sink_f16 = static_cast<const uint16_t*>(mem_[0]);
  view_.sink_staged = static_cast<const uint8_t*>(mem_[1]);
  view_.ring = static_cast<const uint8_t*>(mem_[2]);
  view_.body = static_cast<const uint8_t*>(mem_[3]);
  view_.codebooks = TrellisCodebooks{static_cast<const uint16_t*>(mem_[4]), static_cast<const uint16_t*>(mem_[5])};
  return "";
}

std::string attention_decode_host(const CacheView& host_view, const float* q, uint32_t n_rep, uint32_t qpos,
                                  float scale, float* out, uint32_t span) {
  const std::string why = attention_can_implement(host_view, n_rep);
  if (!why.empty() && why.find("4-bit") == std::string::npos) return why;  // host tables are uploaded below
  DeviceCacheView dv;
  std::string err = dv.upload(host_view);
  if (!err.empty()) return err;
  const size_t n = static_cast<size_t>(host_view.n_head_kv) * n_rep * host_view.layout.head_dim;
  AttentionArgs a;
  a.view = dv.view();
  a.n_rep = n_rep;
  a.qpos = qpos;
  a.scale = scale;
  a.span = span;
  a.workspace_bytes = attention_workspace_bytes(a.view, n_rep, qpos, span);
  float *dq = nullptr, *dout = nullptr;
  void* dws = nullptr;
  cudaError_t e = cudaMalloc(&dq, n * sizeof(float));
  if (e == cudaSuccess) e = cudaMalloc(&dout, n * sizeof(float));
  if (e == cudaSuccess) e = cudaMalloc(&dws, a.workspace_bytes);
  if (e == cudaSuccess) e = cudaMemcpy(dq, q, n * sizeof(float), cudaMemcpyHostToDevice);
  if (e == cudaSuccess) {
    a.q = dq;
    a.out = dout;
    a.workspace = dws;
    err = attention_decode(a);
    if (err.empty()) {
      e = cudaDeviceSynchronize();
      if (e == cudaSuccess) e = cudaMemcpy(out, dout, n * sizeof(float), cudaMemcpyDeviceToHost);
    }
  }
  if (dq) cudaFree(dq);
  if (dout) cudaFree(dout);
  if (dws) cudaFree(dws);
  if (!err.empty()) return err;
  return e == cudaSuccess ? "" : cudaGetErrorString(e);
}

}  // namespace cuda
}  // namespace sjkv
