// Read-only view of one layer's cache regions and the reference attention over them
// (docs/SPEC.md §9.2-9.3, §9.7). Plain pointers so the same code runs on host and device.
//
// Layouts (per layer):
//   sink_f16    [sink][n_head_kv][K: D halves | V: D halves]          (sink_type f16)
//   sink_staged [sink][n_head_kv][K staging row | V staging row]      (sink_type inherit)
//   ring        [cap][n_head_kv][K staging row | V staging row]       slot (p - sink) % cap
//   body        [n_groups][n_head_kv][record]                         group (p - sink) / G
#pragma once

#include <math.h>

#include "sjkv/layout.h"
#include "sjkv/policy.h"
#include "sjkv/record.h"
#include "sjkv/staging.h"

namespace sjkv {

struct CacheView {
  RecordLayout layout;
  uint32_t n_head_kv = 0;
  uint32_t sink = 0;
  uint32_t cap = 0;
  uint32_t sink_inherit = 0;  // 1: sink rows use the staging type
  StagingType staging = StagingType::tq6_0;
  const uint16_t* sink_f16 = nullptr;
  const uint8_t* sink_staged = nullptr;
  const uint8_t* ring = nullptr;
  const uint8_t* body = nullptr;
  uint32_t B = 0;  // sealed end
  uint32_t N = 0;  // stored end
  // Trellis bodies decode with these tables (default: the built-in reference codebooks;
  // device views need device pointers or the default).
  TrellisCodebooks codebooks{};

  SJKV_HD uint32_t head_dim() const { return layout.head_dim; }
  SJKV_HD uint32_t row_bytes() const { return staging_row_bytes(staging, layout.head_dim); }
};

// The region of position p (docs/SPEC.md §9.2, resolved in the order of §9.3): the sink
// [0, sink), the body [sink, B) as row t of group g's record, or the staged tail [max(B, sink), N).
// The one position rule of the codec: the cache view, snapshot decoding and replay use it.
struct RowPosition {
  enum Region : uint32_t { sink, body, tail } region;
  uint32_t g;  // body: group
  uint32_t t;  // body: token within the group
};

SJKV_HD inline RowPosition row_position(uint32_t p, uint32_t sink, uint32_t B, uint32_t group) {
  if (p < sink) return RowPosition{RowPosition::sink, 0, 0};
  if (p < B) return RowPosition{RowPosition::body, (p - sink) / group, (p - sink) % group};
  return RowPosition{RowPosition::tail, 0, 0};
}

// Where position p of KV head h is stored, by row_position: row t of a body record, an fp16
// sink entry (K: D halves, then V), or a staged entry (the K staging row, then the V row,
// row_bytes() each) in the staged sink or the ring.
struct RowLocation {
  enum Kind : uint32_t { record, sink_f16, staged } kind;
  const uint8_t* rec;    // record: the record, t its token
  uint32_t t;
  const uint16_t* f16;   // sink_f16: the entry
  const uint8_t* entry;  // staged: the entry
};

SJKV_HD inline RowLocation locate_row(const CacheView& v, uint32_t p, uint32_t h) {
  RowLocation r{RowLocation::staged, nullptr, 0, nullptr, nullptr};
  const RowPosition rp = row_position(p, v.sink, v.B, v.layout.group);
  const size_t rb = v.row_bytes();
  if (rp.region == RowPosition::body) {
    r.kind = RowLocation::record;
    r.t = rp.t;
    r.rec = v.body + (static_cast<size_t>(rp.g) * v.n_head_kv + h) * v.layout.bytes;
  } else if (rp.region == RowPosition::sink && !v.sink_inherit) {
    r.kind = RowLocation::sink_f16;
    r.f16 = v.sink_f16 + (static_cast<size_t>(p) * v.n_head_kv + h) * 2 * v.layout.head_dim;
  } else if (rp.region == RowPosition::sink) {
    r.entry = v.sink_staged + (static_cast<size_t>(p) * v.n_head_kv + h) * 2 * rb;
  } else {
    r.entry = v.ring + (static_cast<size_t>(ring_slot(p, v.sink, v.cap)) * v.n_head_kv + h) * 2 * rb;
  }
  return r;
}

// K and V rows of position p, head h (rotated basis), decoded with the reference decoders.
SJKV_HD inline void resolve_row(const CacheView& v, uint32_t p, uint32_t h, float* k_out, float* v_out) {
  const uint32_t D = v.layout.head_dim;
  const RowLocation r = locate_row(v, p, h);
  if (r.kind == RowLocation::record) {
    decode_k_row_ref(v.layout, r.rec, r.t, k_out, v.codebooks);
    decode_v_row_ref(v.layout, r.rec, r.t, v_out, v.codebooks);
  } else if (r.kind == RowLocation::sink_f16) {
    for (uint32_t d = 0; d < D; ++d) {
      k_out[d] = f16_to_f32(r.f16[d]);
      v_out[d] = f16_to_f32(r.f16[D + d]);
    }
  } else {
    staging_decode_row(v.staging, r.entry, D, k_out);
    staging_decode_row(v.staging, r.entry + v.row_bytes(), D, v_out);
  }
}

SJKV_HD inline float dot_seq(const float* a, const float* b, uint32_t n) {
  float s = 0.0f;
  for (uint32_t i = 0; i < n; ++i) s = op::fadd(s, op::fmul(a[i], b[i]));
  return s;
}

// One query row against KV head h over positions [0, min(N, qpos+1)), single-pass online
// softmax in binary32 (§9.7). q and out are D floats in the rotated basis; kbuf and vbuf
// are D floats of scratch. expf is the platform's: a tolerance reference, not a format.
SJKV_HD inline void attention_ref(const CacheView& v, const float* q, uint32_t h, uint32_t qpos, float scale,
                                  float* out, float* kbuf, float* vbuf) {
  const uint32_t D = v.layout.head_dim;
  const uint32_t end = v.N < qpos + 1 ? v.N : qpos + 1;
  float m = -INFINITY, S = 0.0f;
  for (uint32_t d = 0; d < D; ++d) out[d] = 0.0f;
  for (uint32_t p = 0; p < end; ++p) {
    resolve_row(v, p, h, kbuf, vbuf);
    const float s = op::fmul(dot_seq(q, kbuf, D), scale);
    float ms, vs;
    if (s > m) {
      ms = p == 0 ? 0.0f : expf(op::fsub(m, s));
      m = s;
      for (uint32_t d = 0; d < D; ++d) out[d] = op::fmul(out[d], ms);
      vs = 1.0f;
    } else {
      ms = 1.0f;
      vs = expf(op::fsub(s, m));
    }
    for (uint32_t d = 0; d < D; ++d) out[d] = op::fadd(out[d], op::fmul(vbuf[d], vs));
    S = op::fadd(op::fmul(S, ms), vs);
  }
  const float inv = S == 0.0f ? 0.0f : op::fdiv(1.0f, S);
  for (uint32_t d = 0; d < D; ++d) out[d] = op::fmul(out[d], inv);
}

}  // namespace sjkv
