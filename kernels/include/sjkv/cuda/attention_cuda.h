// Fused decode attention over a compressed cache on the GPU (CODEC-SPEC §9.1 semantics):
// sink, sealed body records and staging ring are decoded in registers straight from their
// bytes with the codec's per-element functions (record.h, staging.h); the decoded cache is
// never written to memory.
//
// Work split (flash-decoding style): the context [0, end) is cut into spans of `span`
// positions; one warp per (span, KV head, block of query rows) keeps an online softmax
// partial (m, S, acc[D]) per query row; a second kernel merges the partials of each row in
// span order. No atomics and a fixed merge order, so the output bits depend only on the
// inputs and `span`, never on scheduling.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include <math.h>

#include "sjkv/cache_view.h"
#include "sjkv/record.h"
#include "sjkv/staging.h"

#if defined(__CUDA_ARCH__)
#define SJKV_ATTN_UNROLL _Pragma("unroll")
#else
#define SJKV_ATTN_UNROLL
#endif

namespace sjkv {
namespace cuda {

// ---- per-lane steps of the span kernel (host-device, so the CPU tests can run the same
// steps lane by lane; see tests/gpu/test_gpu_attention.cpp) -----------------------------------

// Per-record factors of one lane's channels [d0, d0 + CPL), valid for group `g`.
template <int CPL>
struct LaneRecordFactors {
  uint32_t g = 0xffffffffu;
  float ksc[CPL], kzp[CPL], vch[CPL];
};

// K and V values of position p, head h, channels [d0, d0 + CPL): the row resolution of
// resolve_row (§8.2) with the per-element decoders; tab_k / tab_v are the side tables of a
// trellis body (unused for scalar bodies).
template <int CPL>
SJKV_HD inline void attention_lane_rows(const CacheView& v, uint32_t p, uint32_t h, uint32_t d0,
                                        const uint16_t* tab_k, const uint16_t* tab_v, LaneRecordFactors<CPL>& f,
                                        float* kv, float* vv) {
  const RecordLayout& l = v.layout;
  const uint32_t D = l.head_dim, H = v.n_head_kv;
  if (p >= v.sink && p < v.B) {
    const uint32_t g = (p - v.sink) / l.group, t = (p - v.sink) % l.group;
    const uint8_t* rec = v.body + (static_cast<size_t>(g) * H + h) * l.bytes;
    if (g != f.g) {
      f.g = g;
SJKV_ATTN_UNROLL
      for (int k = 0; k < CPL; ++k) {
        const uint32_t i = k_ch_idx(l, d0 + k);
        f.ksc[k] = f16_to_f32(load_u16(rec + l.k_scale + 2 * i));
        f.kzp[k] = f16_to_f32(load_u16(rec + l.k_zero + 2 * i));
        f.vch[k] = f16_to_f32(load_u16(rec + l.v_ch + 2 * v_ch_idx(l, d0 + k)));
      }
    }
    const float tok = f16_to_f32(load_u16(rec + l.k_tok + 2 * t));
    const float vsc = f16_to_f32(load_u16(rec + l.v_scale + 2 * t));
    const float vzp = f16_to_f32(load_u16(rec + l.v_zero + 2 * t));
SJKV_ATTN_UNROLL
    for (int k = 0; k < CPL; ++k) {
      kv[k] = decode_affine(record_q(l, rec, Side::k, t, d0 + k, tab_k), f.ksc[k], f.kzp[k], tok);
      vv[k] = decode_affine(record_q(l, rec, Side::v, t, d0 + k, tab_v), vsc, vzp, f.vch[k]);
    }
  } else if (p < v.sink && !v.sink_inherit) {
    const uint16_t* e = v.sink_f16 + (static_cast<size_t>(p) * H + h) * 2 * D;
SJKV_ATTN_UNROLL
    for (int k = 0; k < CPL; ++k) {
      kv[k] = f16_to_f32(e[d0 + k]);
      vv[k] = f16_to_f32(e[D + d0 + k]);
    }
  } else {
    const uint32_t rb = v.row_bytes();
    const uint8_t* e = p < v.sink ? v.sink_staged + (static_cast<size_t>(p) * H + h) * 2 * rb
                                   : v.ring + (static_cast<size_t>(ring_slot(p, v.sink, v.cap)) * H + h) * 2 * rb;
SJKV_ATTN_UNROLL
    for (int k = 0; k < CPL; ++k) {
      kv[k] = staging_decode_value(v.staging, e, d0 + k);
      vv[k] = staging_decode_value(v.staging, e + rb, d0 + k);
    }
  }
}

// A lane's part of q.k: q_k(k) for its CPL channels, in channel order.
template <int CPL, class Q>
SJKV_HD inline float attention_lane_dot(Q q_k, const float* kv) {
  float part = 0.0f;
SJKV_ATTN_UNROLL
  for (int k = 0; k < CPL; ++k) part = op::fadd(part, op::fmul(q_k(k), kv[k]));
  return part;
}

// Online softmax step of one row with score sc (already scaled), as attention_ref orders it.
template <int CPL>
SJKV_HD inline void attention_lane_update(float sc, float& m, float& S, float* acc, const float* vv) {
  float corr, w;
  if (sc > m) {
    corr = m == -INFINITY ? 0.0f : expf(op::fsub(m, sc));
    m = sc;
    w = 1.0f;
  } else {
    corr = 1.0f;
    w = expf(op::fsub(sc, m));
  }
SJKV_ATTN_UNROLL
  for (int k = 0; k < CPL; ++k) acc[k] = op::fadd(op::fmul(acc[k], corr), op::fmul(vv[k], w));
  S = op::fadd(op::fmul(S, corr), w);
}

// Merge of one channel over the spans of a row, in span order: m[s], S[s] and acc(s) the
// partials; returns the output value.
template <class Acc>
SJKV_HD inline float attention_merge_value(uint32_t n_spans, const float* m, const float* S, Acc acc) {
  float M = -INFINITY;
  for (uint32_t s = 0; s < n_spans; ++s)
    if (S[s] != 0.0f) M = op::maxS(M, m[s]);
  float tot = 0.0f, a = 0.0f;
  for (uint32_t s = 0; s < n_spans; ++s) {
    if (S[s] == 0.0f) continue;
    const float f = expf(op::fsub(m[s], M));
    tot = op::fadd(tot, op::fmul(S[s], f));
    a = op::fadd(a, op::fmul(acc(s), f));
  }
  return tot == 0.0f ? 0.0f : op::fdiv(a, tot);
}

struct AttentionArgs {
  // Device pointers throughout. view.codebooks: device tables, or null for the built-in
  // 2- and 3-bit reference tables (4-bit trellis bodies need explicit tables).
  CacheView view;
  const float* q = nullptr;  // [n_head_kv][n_rep][D] rotated query rows (row h*n_rep+r uses KV head h)
  uint32_t n_rep = 1;        // query rows per KV head (GQA group size, or several rows)
  uint32_t qpos = 0;         // the rows attend to positions [0, min(N, qpos + 1))
  float scale = 1.0f;
  float* out = nullptr;      // [n_head_kv][n_rep][D]
  void* workspace = nullptr; // attention_workspace_bytes() bytes, device
  size_t workspace_bytes = 0;
  uint32_t span = 0;         // positions per warp; 0 = attention_pick_span()
  void* stream = nullptr;    // cudaStream_t; null = the default stream
};

// Positions per warp for a context of `end` positions: enough warps to fill the device.
uint32_t attention_pick_span(uint32_t n_head_kv, uint32_t n_rep, uint32_t head_dim, uint32_t end);
size_t attention_workspace_bytes(const CacheView& v, uint32_t n_rep, uint32_t qpos, uint32_t span = 0);

// Why a view cannot be served ("" when it can): head_dim, 4-bit trellis without tables...
std::string attention_can_implement(const CacheView& v, uint32_t n_rep);

// Enqueues both kernels on a.stream; returns "" or the CUDA error text (launch errors are
// checked, execution errors surface at the caller's next synchronisation).
std::string attention_decode(const AttentionArgs& a);

// Convenience for tests: a host view (host pointers, host codebooks or null) copied to the
// device, host q in, host out; synchronous, every CUDA call checked.
std::string attention_decode_host(const CacheView& host_view, const float* q, uint32_t n_rep, uint32_t qpos,
                                  float scale, float* out, uint32_t span = 0);

// The device copy of a host view that attention_decode_host makes (for benchmarks and
// tests that launch attention_decode themselves). Frees its memory on destruction.
class DeviceCacheView {
 public:
  DeviceCacheView() = default;
  ~DeviceCacheView();
  DeviceCacheView(const DeviceCacheView&) = delete;
  DeviceCacheView& operator=(const DeviceCacheView&) = delete;
  // Copies the stored regions of `host` (sink rows, ring, body records up to B, codebooks).
  std::string upload(const CacheView& host);
  const CacheView& view() const { return view_; }
  // Bytes of cache a decode over positions [0, end) reads (rows and records, not tables).
  static size_t bytes_read(const CacheView& v, uint32_t end);

 private:
  CacheView view_{};
  void* mem_[6] = {};
};

}  // namespace cuda
}  // namespace sjkv
