// The replay's matrix products: Y[t][r] = sum_k W[r][k] * X[t][k], with W held as the GGUF
// stores it (any dequant.h type, used in place) and dequantized to f32 a panel of rows at a
// time (dequantize_row_fast). The forward pass and the fused attention both multiply here.
//
// Every output element is summed in one order that depends on k only: eight lanes, lane j
// the fused multiply-adds of k = j, j + 8, ... (k below k / 8 * 8) in increasing k, the lanes
// then added as ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)), and the last k % 8 terms
// fused-multiply-added onto that in order. The AVX2 kernels (register tiles of 4 tokens x 3
// rows over packed panels; for one to four tokens, tiles of 4 rows whose weights are
// dequantized in registers and used where they are made, never stored) and the portable
// path (std::fma) do exactly that, so the bytes do not depend on the instruction set, the
// thread count, the tile or the number of tokens (a token alone gives the bits it gets
// inside a batch). On AVX-512 machines the batch tiles hold two rows' eight lanes in one
// register (4 tokens x 6 rows over panels whose row pairs are interleaved): each lane still
// takes the same fused multiply-adds in the same order, so the same bits.
#pragma once

#include <cstddef>
#include <cstdint>

namespace sjkv {
namespace replay {

struct WeightMatrix {
  uint32_t type = 0;          // ggml type id (dequant.h)
  size_t rows = 0, cols = 0;  // cols = k, a whole number of the type's blocks
  const uint8_t* data = nullptr;
  size_t row_bytes = 0;
  // A [rows][cols] matrix of `type` at `data`; std::invalid_argument for an unsupported type or
  // a row that is not whole blocks.
  static WeightMatrix of(uint32_t type, size_t rows, size_t cols, const void* data);
  // f32 rows with a leading dimension (ld >= cols, in floats).
  static WeightMatrix f32(const float* data, size_t rows, size_t cols, size_t ld);
  // Rows of `type` row_bytes apart (at least a row's size); std::invalid_argument otherwise.
  static WeightMatrix strided(uint32_t type, size_t rows, size_t cols, const void* data, size_t row_bytes);
  size_t bytes() const { return rows * row_bytes; }
};

enum class GemmIsa { portable = 0, avx2 = 1, avx512 = 2 };
GemmIsa gemm_best();  // avx512 where AVX-512 F and DQ are present, else avx2 where AVX2, FMA and F16C are

// x [n][ldx] (ldx >= k; 0 means k), y [n][ldy] (ldy >= rows). n_threads 0: OpenMP's default;
// 1 runs on the calling thread (for callers already inside a parallel region).
void gemm(const WeightMatrix& w, const float* x, size_t n, float* y, size_t ldy, int n_threads = 0, size_t ldx = 0);
// gemm on a given path (tests, benchmarks); std::invalid_argument when this machine lacks it.
void gemm_with(GemmIsa isa, const WeightMatrix& w, const float* x, size_t n, float* y, size_t ldy, int n_threads = 0,
               size_t ldx = 0);
// The order above written as plain loops over dequantize_row: what the kernels are tested against.
void gemm_reference(const WeightMatrix& w, const float* x, size_t n, float* y, size_t ldy, size_t ldx = 0);

}  // namespace replay
}  // namespace sjkv
