// Fused decode attention over sink, body records and ring (see attention_cuda.h).
#include <cuda_runtime.h>

#include <math.h>

#include "sjkv/cuda/attention_cuda.h"
#include "sjkv/record.h"
#include "sjkv/staging.h"

namespace sjkv {
namespace cuda {
namespace {

constexpr int kWarps = 4;           // warps per block of the span kernel
constexpr int kMaxRegs = 64;        // acc floats per lane: rows per block * channels per lane
constexpr uint32_t kMaxTable = kTrellisMaxEntries;

// Partials of one (KV head, query row, span): m, S, then acc[D]; rows back to back.
struct Workspace {
  float* m;
  float* S;
  float* acc;
};

__device__ inline float warp_sum(float x) {
  // xor butterfly: every lane ends with the same bits (a + b == b + a).
  for (int o = 16; o > 0; o >>= 1) x = op::fadd(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

// Lane `lane` owns channels [lane*CPL, lane*CPL + CPL) of every row; RB query rows per block.
template <int CPL, int RB>
__global__ void __launch_bounds__(kWarps * 32) attention_span_kernel(CacheView v, const float* __restrict__ q,
                                                                     uint32_t n_rep, uint32_t end, float scale,
                                                                     uint32_t span, uint32_t n_spans, Workspace ws) {
  constexpr int D = CPL * 32;
  __shared__ float q_s[RB * CPL * 32];  // [r][k][lane]: conflict-free reads
  __shared__ uint16_t tab_s[2][kMaxTable];
  const uint32_t h = blockIdx.y, r0 = blockIdx.z * RB;
  const uint32_t nr = n_rep - r0 < static_cast<uint32_t>(RB) ? n_rep - r0 : RB;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  for (int i = tid; i < RB * D; i += kWarps * 32) {
    const int r = i / D, d = i % D;
    q_s[(r * CPL + d % CPL) * 32 + d / CPL] =
        static_cast<uint32_t>(r) < nr ? q[(static_cast<size_t>(h) * n_rep + r0 + r) * D + d] : 0.0f;
  }
  const RecordLayout& l = v.layout;
  const bool trellis = l.body == Body::trellis;
  if (trellis) {
    const uint16_t* tk = codebook_table(v.codebooks, Side::k, l.bits_k);
    const uint16_t* tv = codebook_table(v.codebooks, Side::v, l.bits_v);
    for (uint32_t i = tid; i < trellis_entries(l.bits_k); i += kWarps * 32) tab_s[0][i] = tk[i];
    for (uint32_t i = tid; i < trellis_entries(l.bits_v); i += kWarps * 32) tab_s[1][i] = tv[i];
  }
  __syncthreads();
  const uint32_t s = blockIdx.x * kWarps + warp;
  if (s >= n_spans) return;
  const uint32_t p0 = s * span, p1 = p0 + span < end ? p0 + span : end;
  const uint32_t d0 = lane * CPL;

  float m[RB], S[RB], acc[RB][CPL];
#pragma unroll
  for (int r = 0; r < RB; ++r) {
    m[r] = -INFINITY;
    S[r] = 0.0f;
#pragma unroll
    for (int k = 0; k < CPL; ++k) acc[r][k] = 0.0f;
  }
  LaneRecordFactors<CPL> f;  // reloaded when the span enters a new group
  for (uint32_t p = p0; p < p1; ++p) {
    float kv[CPL], vv[CPL];
    attention_lane_rows<CPL>(v, p, h, d0, tab_s[0], tab_s[1], f, kv, vv);
#pragma unroll
    for (int r = 0; r < RB; ++r) {
      const float part = attention_lane_dot<CPL>([&](int k) { return q_s[(r * CPL + k) * 32 + lane]; }, kv);
      const float sc = op::fmul(warp_sum(part), scale);
      attention_lane_update<CPL>(sc, m[r], S[r], acc[r], vv);
    }
  }
#pragma unroll
  for (int r = 0; r < RB; ++r) {
    if (static_cast<uint32_t>(r) >= nr) break;
    const size_t row = (static_cast<size_t>(h) * n_rep + r0 + r) * n_spans + s;
    if (lane == 0) {
      ws.m[row] = m[r];
      ws.S[row] = S[r];
    }
#pragma unroll
    for (int k = 0; k < CPL; ++k) ws.acc[row * D + d0 + k] = acc[r][k];
  }
}

// One block per query row; thread d merges channel d over the spans in span order.
__global__ void attention_merge_kernel(uint32_t D, uint32_t n_spans, Workspace ws, float* out) {
  const size_t row = blockIdx.x;
  const float* m = ws.m + row * n_spans;
  const float* S = ws.S + row * n_spans;
  for (uint32_t d = threadIdx.x; d < D; d += blockDim.x)
    out[row * D + d] =
        attention_merge_value(n_spans, m, S, [&](uint32_t s) { return ws.acc[(row * n_spans + s) * D + d]; });
}

uint32_t rows_per_block(uint32_t D, uint32_t n_rep) {
  const uint32_t cap = static_cast<uint32_t>(kMaxRegs) / (D / 32);  // 64 (D=32) .. 4 (D=512)
  const uint32_t lim = cap < 8 ? cap : 8;
  uint32_t rb = 1;
  while (rb < n_rep && rb < lim) rb *= 2;
  return rb;
}

uint32_t context_end(const CacheView& v, uint32_t qpos) { return v.N < qpos + 1 ? v.N : qpos + 1; }

// Workspace layout in floats: m[rows*n_spans], S[rows*n_spans] (each padded to 64 floats),
// acc[rows*n_spans*D].
size_t pad64(size_t x) { return (x + 63) & ~static_cast<size_t>(63); }
size_t workspace_floats(size_t rows, size_t n_spans, uint32_t D) { return 2 * pad64(rows * n_spans) + rows * n_spans * D; }

int sm_count() {
  static int n = -1;
  if (n < 0) {
    int dev = 0, c = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&c, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
      cudaGetLastError();
      c = 0;
    }
    n = c > 0 ? c : 1;
  }
  return n;
}

template <int CPL>
cudaError_t launch_span(uint32_t rb, dim3 grid, cudaStream_t st, const AttentionArgs& a, uint32_t end, uint32_t span,
                        uint32_t n_spans, Workspace ws) {
  switch (rb) {
#define SJKV_ATTN_CASE(R)                                                                                    \
  case R:                                                                                                    \
    if constexpr (R * CPL <= kMaxRegs)                                                                       \
      attention_span_kernel<CPL, R><<<grid, kWarps * 32, 0, st>>>(a.view, a.q, a.n_rep, end, a.scale, span, \
                                                                  n_spans, ws);                              \
    break;
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

uint32_t attention_pick_span(uint32_t n_head_kv, uint32_t n_rep, uint32_t head_dim, uint32_t end) {
  const uint32_t rb = rows_per_block(head_dim, n_rep);
  const uint64_t items = static_cast<uint64_t>(n_head_kv) * ((n_rep + rb - 1) / rb);
  // About 48 warps per SM in flight: enough loads outstanding to stream the cache.
  const uint64_t target = static_cast<uint64_t>(sm_count()) * 48;
  uint64_t span = (static_cast<uint64_t>(end) * items + target - 1) / target;
  if (span < 32) span = 32;
  if (span > 4096) span = 4096;
  return static_cast<uint32_t>(span);
}

std::string attention_can_implement(const CacheView& v, uint32_t n_rep) {
  const uint32_t D = v.layout.head_dim;
  if (D < 32 || D > 512 || (D & (D - 1)) != 0) return "attention kernels need head_dim a power of two in 32..512";
  if (n_rep == 0) return "n_rep must be at least 1";
  if (v.n_head_kv == 0) return "no KV heads";
  if (v.layout.body == Body::trellis) {
    if (v.layout.bits_k > 4 || v.layout.bits_v > 4) return "trellis widths above 4 bits";
    if ((v.layout.bits_k == 4 && !v.codebooks.k) || (v.layout.bits_v == 4 && !v.codebooks.v))
      return "4-bit trellis bodies need explicit device codebooks";
  }
  return "";
}

size_t attention_workspace_bytes(const CacheView& v, uint32_t n_rep, uint32_t qpos, uint32_t span) {
  const uint32_t end = context_end(v, qpos);
  if (span == 0) span = attention_pick_span(v.n_head_kv, n_rep, v.layout.head_dim, end);
  const size_t n_spans = (static_cast<size_t>(end) + span - 1) / span;
  const size_t rows = static_cast<size_t>(v.n_head_kv) * n_rep;
  return workspace_floats(rows, n_spans, v.layout.head_dim) * sizeof(float);
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
  const uint32_t span = a.span ? a.span : attention_pick_span(a.view.n_head_kv, a.n_rep, D, end);
  if (a.workspace_bytes < attention_workspace_bytes(a.view, a.n_rep, a.qpos, span)) return "attention workspace too small";
  const uint32_t n_spans = static_cast<uint32_t>((static_cast<size_t>(end) + span - 1) / span);
  float* base = static_cast<float*>(a.workspace);
  Workspace ws{base, base + pad64(rows * n_spans), base + 2 * pad64(rows * n_spans)};
  const uint32_t rb = rows_per_block(D, a.n_rep);
  const dim3 grid((n_spans + kWarps - 1) / kWarps, a.view.n_head_kv, (a.n_rep + rb - 1) / rb);
  if (grid.y > 65535 || grid.z > 65535) return "too many KV heads or query rows for one launch";
  cudaError_t e = cudaSuccess;
  switch (D) {
    case 32: e = launch_span<1>(rb, grid, st, a, end, span, n_spans, ws); break;
    case 64: e = launch_span<2>(rb, grid, st, a, end, span, n_spans, ws); break;
    case 128: e = launch_span<4>(rb, grid, st, a, end, span, n_spans, ws); break;
    case 256: e = launch_span<8>(rb, grid, st, a, end, span, n_spans, ws); break;
    case 512: e = launch_span<16>(rb, grid, st, a, end, span, n_spans, ws); break;
    default: return "unsupported head_dim";
  }
  if (e != cudaSuccess) return cudaGetErrorString(e);
  attention_merge_kernel<<<static_cast<unsigned>(rows), 128, 0, st>>>(D, n_spans, ws, a.out);
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
