// The inner step of the replay's fused attention, as blocked products: a block of queries
// (positions x query heads of one KV head) against the rows of one decoded tile. The scores
// are one gemm (gemm.h: the queries against the K rows, in place), the online-softmax update
// is per query over its own rows, and weight x V is a register-blocked outer product with
// fused multiply-adds, each output element summed over its rows in increasing position.
//
// Two builds of the same arithmetic: a portable one (the reference) and AVX2 picked at run
// time. Every value goes through the same IEEE operations in the same order in both, so both
// give the same floats, and a query's result does not depend on the block it is computed in
// (its scores are gemm's fixed order, its softmax and its weight x V see only its own rows).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "sjkv/replay/dequant.h"

namespace sjkv {
namespace replay {
namespace detail {

constexpr uint32_t kTileRows = 256;  // rows of a decoded tile
constexpr uint32_t kMaxBlock = 64;   // queries per block

// e^x for x <= 0 (a score minus the running maximum): x = n ln 2 + r, |r| <= ln 2 / 2, a
// degree-7 Taylor polynomial of e^r (within 2 float ulps) times 2^n; 0 below -87.
// The scalar form of what the AVX2 build computes lane by lane.
float exp_nonpos(float x);

struct TileBlock {
  uint32_t nq = 0;               // queries, 1..kMaxBlock
  const float* q = nullptr;      // [nq][D], in the stored K basis
  float* acc = nullptr;          // [nq][D]: the running sums of weight x V
  float* m = nullptr;            // [nq] running maxima (-inf before the first tile)
  float* s = nullptr;            // [nq] running sums of weights
  float softcap = 0.0f;          // > 0: each score s becomes tanh(s * (1 / cap)) * cap (Gemma 2)
  uint32_t lo[kMaxBlock] = {};   // query j attends to the tile's rows [lo[j], hi[j]),
  uint32_t hi[kMaxBlock] = {};   // lo[j] < hi[j] <= kTileRows
};

// The K and V rows of one tile: row p at k + p * stride and v + p * stride (bytes), of a ggml
// type whose values are exact floats: kGgmlF32 (a decoded tile), kGgmlF16 or kGgmlBF16 (an
// arm's stored rows read in place, each value converted where it is used). The type changes
// where the floats come from, never the floats.
struct TileRows {
  uint32_t type = 0;
  const uint8_t* k = nullptr;
  const uint8_t* v = nullptr;
  size_t stride = 0;
  static TileRows f32(const float* kt, const float* vt, uint32_t D) {
    return {kGgmlF32, reinterpret_cast<const uint8_t*>(kt), reinterpret_cast<const uint8_t*>(vt), size_t{D} * 4};
  }
};

// One tile (rows at least every hi[j]): scores scale * q.k (soft-capped when b.softcap > 0),
// then m, s and acc updated.
// `scratch` holds kMaxBlock * kTileRows floats.
void tile_block_update(const TileBlock& b, const TileRows& t, uint32_t D, float scale, float* scratch);
// The same, portable build only (the reference the AVX2 build is tested against).
void tile_block_update_portable(const TileBlock& b, const TileRows& t, uint32_t D, float scale, float* scratch);
// A decoded tile (kt, vt: [rows][D] floats).
inline void tile_block_update(const TileBlock& b, const float* kt, const float* vt, uint32_t D, float scale,
                              float* scratch) {
  tile_block_update(b, TileRows::f32(kt, vt, D), D, scale, scratch);
}
inline void tile_block_update_portable(const TileBlock& b, const float* kt, const float* vt, uint32_t D, float scale,
                                       float* scratch) {
  tile_block_update_portable(b, TileRows::f32(kt, vt, D), D, scale, scratch);
}
// A learned sink logit joining a finished online softmax (m its maximum score, s its sum of
// e^(score - m)): the factor for the accumulated weight x V, 1 / (s + e^(sink - m)) taken at the
// larger of m and the sink, as ggml's soft_max with sinks; 0 when no row was seen.
inline float sink_normaliser(float m, float s, float sink) {
  const float top = std::max(m, sink);
  const float c = std::exp(m - top);  // 1 unless the sink is the larger
  return c / (s * c + std::exp(sink - top));
}

// Whether tile_block_update runs the AVX2 build on this machine.
bool tile_block_uses_avx2();

}  // namespace detail
}  // namespace replay
}  // namespace sjkv
