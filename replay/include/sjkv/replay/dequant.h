// Dequantizers for the ggml tensor types a GGUF model holds (the forward pass keeps its
// weights in these blocks and dequantizes them panel by panel in its products, gemm.h).
// Block sizes and the portable decoders are the block formats table's (sjkv/block_formats.h);
// this layer adds the types the forward pass accepts, AVX2 fast paths (dequant_avx2.h) and
// the finiteness check.
#pragma once

#include <cstddef>
#include <cstdint>

#include "sjkv/block_formats.h"

namespace sjkv {
namespace replay {

// ggml type ids: the table's, under the names gemm, attention and their tests use.
enum GgmlTypeId : uint32_t {
  kGgmlF32 = static_cast<uint32_t>(BlockFormat::f32), kGgmlF16 = static_cast<uint32_t>(BlockFormat::f16),
  kGgmlQ4_0 = static_cast<uint32_t>(BlockFormat::q4_0), kGgmlQ4_1 = static_cast<uint32_t>(BlockFormat::q4_1),
  kGgmlQ5_0 = static_cast<uint32_t>(BlockFormat::q5_0), kGgmlQ5_1 = static_cast<uint32_t>(BlockFormat::q5_1),
  kGgmlQ8_0 = static_cast<uint32_t>(BlockFormat::q8_0), kGgmlQ4_K = static_cast<uint32_t>(BlockFormat::q4_k),
  kGgmlQ5_K = static_cast<uint32_t>(BlockFormat::q5_k), kGgmlQ6_K = static_cast<uint32_t>(BlockFormat::q6_k),
  kGgmlBF16 = static_cast<uint32_t>(BlockFormat::bf16),
  kGgmlQ2_K = static_cast<uint32_t>(BlockFormat::q2_k),
  kGgmlQ3_K = static_cast<uint32_t>(BlockFormat::q3_k),
  kGgmlIQ2_XXS = static_cast<uint32_t>(BlockFormat::iq2_xxs),
  kGgmlIQ2_XS = static_cast<uint32_t>(BlockFormat::iq2_xs),
  kGgmlIQ2_S = static_cast<uint32_t>(BlockFormat::iq2_s),
  kGgmlIQ3_XXS = static_cast<uint32_t>(BlockFormat::iq3_xxs),
  kGgmlIQ3_S = static_cast<uint32_t>(BlockFormat::iq3_s),
  kGgmlIQ1_S = static_cast<uint32_t>(BlockFormat::iq1_s),
  kGgmlIQ1_M = static_cast<uint32_t>(BlockFormat::iq1_m),
  kGgmlIQ4_NL = static_cast<uint32_t>(BlockFormat::iq4_nl),
  kGgmlIQ4_XS = static_cast<uint32_t>(BlockFormat::iq4_xs),
  kGgmlTQ1_0 = static_cast<uint32_t>(BlockFormat::tq1_0),
  kGgmlTQ2_0 = static_cast<uint32_t>(BlockFormat::tq2_0),
  kGgmlMXFP4 = static_cast<uint32_t>(BlockFormat::mxfp4),
  kGgmlNVFP4 = static_cast<uint32_t>(BlockFormat::nvfp4),
  kGgmlQ1_0 = static_cast<uint32_t>(BlockFormat::q1_0),
  kGgmlQ2_0 = static_cast<uint32_t>(BlockFormat::q2_0),
};

// True for the types dequantize_row handles: every GGUF type the table decodes (gemm.h's paths
// are checked against each one's reference).
bool dequant_supported(uint32_t type);
// Values per block of a supported type (1 for F32/F16/BF16) and bytes per block.
uint32_t dequant_block_values(uint32_t type);
uint32_t dequant_block_bytes(uint32_t type);

// n values (a multiple of the type's block size) from `src` to f32. NaN and infinities in
// F16/BF16/F32 pass through as values. std::invalid_argument for an unsupported type or an n
// that is not a whole number of blocks.
void dequantize_row(uint32_t type, const void* src, float* dst, size_t n);

// The same floats as dequantize_row, bit for bit (the same IEEE operations on each value),
// with AVX2 where this machine has it for the types the models use (Q4_0, Q4_1, Q5_0, Q8_0,
// Q4_K, Q6_K, F16, BF16, F32); the other types take dequantize_row.
void dequantize_row_fast(uint32_t type, const void* src, float* dst, size_t n);
// dequantize_row_fast on a given path: simd false takes the portable code (tests).
void dequantize_row_with(bool simd, uint32_t type, const void* src, float* dst, size_t n);
// Whether dequantize_row_fast runs AVX2 code on this machine.
bool dequant_simd();

// True when every value n values of `src` decode to is finite. For the block types with f16
// scales that is their scales (d, and m / dmin where the type has one; IQ1_M's d is spread over
// its scale words): a finite scale times the type's largest code cannot overflow binary32.
// MXFP4 (an e8m0 exponent) and NVFP4 (E4M3 scales) blocks are decoded and checked; F16, BF16
// and F32 check every value.
bool dequant_finite(uint32_t type, const void* src, size_t n);

}  // namespace replay
}  // namespace sjkv
