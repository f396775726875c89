// The inner step of the replay's fused attention: a block of queries (the query heads of a
// GQA group at one position, which share their causal range) against the rows of one decoded
// tile, with the online-softmax update. The K and V rows are read once per block instead of
// once per query, and the exponentials are computed eight at a time.
//
// Two builds of the same arithmetic: a portable one (the reference) and AVX2 intrinsics
// picked at run time. Neither contracts (-ffp-contract=off, no FMA) nor reassociates; every
// value goes through the same IEEE operations in the same order in both, so both give the
// same floats, and a query's result does not depend on the block it is computed in.
#pragma once

#include <cstdint>

namespace sjkv {
namespace replay {
namespace detail {

constexpr uint32_t kTileRows = 256;   // rows of a decoded tile
constexpr uint32_t kMaxBlock = 8;     // queries per block

// e^x for x <= 0 (a score minus the running maximum): x = n ln 2 + r, |r| <= ln 2 / 2, a
// degree-7 Taylor polynomial of e^r (within 2 float ulps) times 2^n; 0 below -87.
// The scalar form of what the AVX2 build computes lane by lane.
float exp_nonpos(float x);

struct TileBlock {
  uint32_t nb = 0;                  // queries, 1..kMaxBlock
  const float* q[kMaxBlock] = {};   // each [D], in the stored K basis
  float* acc[kMaxBlock] = {};       // each [D]: the running sum of weight x V
  float* m = nullptr;               // [nb] running maxima (-inf before the first tile)
  float* s = nullptr;               // [nb] running sums of weights
};

// Rows [0, n) of a tile (kt, vt: [n][D], n <= kTileRows): scores scale * q.k (eight lanes,
// summed in a fixed tree), then m, s and acc updated. `scratch` holds nb * kTileRows floats.
void tile_block_update(const TileBlock& b, const float* kt, const float* vt, uint32_t n, uint32_t D, float scale,
                       float* scratch);
// The same, portable build only (the reference the AVX2 build is tested against).
void tile_block_update_portable(const TileBlock& b, const float* kt, const float* vt, uint32_t n, uint32_t D,
                                float scale, float* scratch);
// Whether tile_block_update runs the AVX2 build on this machine.
bool tile_block_uses_avx2();

}  // namespace detail
}  // namespace replay
}  // namespace sjkv
