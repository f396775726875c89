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

#include <cstdint>

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
  uint32_t lo[kMaxBlock] = {};   // query j attends to the tile's rows [lo[j], hi[j]),
  uint32_t hi[kMaxBlock] = {};   // lo[j] < hi[j] <= kTileRows
};

// One tile (kt, vt: [rows][D], rows at least every hi[j]): scores scale * q.k, then m, s and
// acc updated. `scratch` holds kMaxBlock * kTileRows floats.
void tile_block_update(const TileBlock& b, const float* kt, const float* vt, uint32_t D, float scale, float* scratch);
// The same, portable build only (the reference the AVX2 build is tested against).
void tile_block_update_portable(const TileBlock& b, const float* kt, const float* vt, uint32_t D, float scale,
                                float* scratch);
// Whether tile_block_update runs the AVX2 build on this machine.
bool tile_block_uses_avx2();

}  // namespace detail
}  // namespace replay
}  // namespace sjkv
