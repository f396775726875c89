// Host fast paths of the decoders (docs/SPEC.md §2.2, §4, §8, §9.3) for readers that decode
// many rows per attention pass (sjkv-replay's codec arms). Each gives the floats of its
// reference bit for bit (f16_to_f32, staging_decode_row, decode_k_row_ref / decode_v_row_ref,
// resolve_row); tests/codec/test_decode_fast.cpp holds them to that.
#pragma once

#include <cstdint>
#include <vector>

#include "sjkv/cache_view.h"
#include "sjkv/fp16.h"
#include "sjkv/layout.h"
#include "sjkv/staging.h"
#include "sjkv/trellis.h"

namespace sjkv {

// F(h) for every fp16 pattern, built once from f16_to_f32: one load instead of the branches.
inline const float* f16_to_f32_table() {
  static const std::vector<float> table = [] {
    std::vector<float> t(65536);
    for (uint32_t h = 0; h < 65536; ++h) t[h] = f16_to_f32(static_cast<uint16_t>(h));
    return t;
  }();
  return table.data();
}

// staging_decode_row with F from the table.
void staging_decode_row_fast(StagingType t, const uint8_t* in, uint32_t d, float* out);

// Rows of the records of one layout: per-channel factors read once per call instead of once
// per row, scalar code addresses from a table made once per layout.
class RecordRows {
 public:
  explicit RecordRows(const RecordLayout& l);
  const RecordLayout& layout() const { return l_; }
  // Rows [ta, tb) of record `rec` into k and v, [tb - ta][D] each: decode_k_row_ref and
  // decode_v_row_ref of every row (same operations, same order). `cb` as for those.
  void decode(const uint8_t* rec, uint32_t ta, uint32_t tb, const TrellisCodebooks& cb, float* k, float* v) const;

 private:
  RecordLayout l_;
  // Scalar bodies: code_bit of (t, d) for t < 16 per side ([16][D]), and the step per further
  // 16 tokens (code_bit is linear in t / 16 for every scalar layout).
  std::vector<uint32_t> koff_, voff_;
  uint32_t kstep_ = 0, vstep_ = 0;
};

// Rows [p0, p1) of KV head h into k and v ([p1 - p0][D] each): resolve_row of every position,
// bit for bit. `rows` must be made from v.layout.
void resolve_rows(const CacheView& v, const RecordRows& rows, uint32_t h, uint32_t p0, uint32_t p1, float* k,
                  float* vout);

}  // namespace sjkv
