// Fused decode attention over a compressed cache on the GPU (docs/SPEC.md §9.7 semantics):
// sink, sealed body records and staging ring are read straight from their bytes; the
// decoded cache is never written to memory.
//
// Work split (flash-decoding style): the context [0, end) is cut into items (attn_fold.h
// Items): one per body record, and chunks of `span` sink or ring rows. One block per (item,
// KV head, block of up to 8 query rows of that head) computes the item's scores, its max m,
// weights p = exp(s - m), S = sum p and acc[D] = sum p V, all query rows served from one
// read of the record. Body records use the folded math of attn_fold.h (one multiply-add per
// code and query row, the record's factors applied once). A second kernel merges the
// partials of each row in 8 fixed item chunks (one warp each). No atomics and fixed
// reduction orders, so the output bits depend only on the inputs and `span`, never on
// scheduling.
//
// Per record block: the record is brought into shared memory by one sweep of 16-byte loads
// (when it fits; else read in place); step K, thread pair (token, half of the channels):
// score partials for all query rows; step V, thread (channel, token slice): the weighted
// code sums. Code readers (attn_fold.h): 4-bit fragment sides read one 32-bit word per 4
// codes; trellis sides slide a window along a sequence (two stream words in registers) or
// read it at a fixed offset in every sequence, with the codebook as binary32 in shared
// memory; other layouts (and a record cut by the query position) decode per element.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include <math.h>

#include "sjkv/attn_fold.h"
#include "sjkv/cache_view.h"
#include "sjkv/record.h"
#include "sjkv/staging.h"

namespace sjkv {
namespace cuda {

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
  uint32_t span = 0;         // sink/ring rows per item (1..128); 0 = attention_pick_span()
  void* stream = nullptr;    // cudaStream_t; null = the default stream
};

// Sink/ring rows per item (body items are always one record).
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
