// Dequantizers for the ggml tensor types a GGUF model holds (the forward pass keeps its
// weights in these blocks and dequantizes them panel by panel in its products, gemm.h).
//
// Block layouts are ggml's (ggml/src/ggml-common.h in llama.cpp), little-endian:
//   Q4_0  32 values, 18 B: f16 d | u8 qs[16]            x = (nibble - 8) * d
//   Q4_1  32 values, 20 B: f16 d | f16 m | u8 qs[16]    x = nibble * d + m
//   Q5_0  32 values, 22 B: f16 d | u8 qh[4] | qs[16]    x = (nibble | bit4 - 16) * d
//   Q5_1  32 values, 24 B: f16 d | f16 m | qh[4] | qs[16]
//   Q8_0  32 values, 34 B: f16 d | i8 qs[32]            x = q * d
//   (value j < 16 takes the low nibble of qs[j], value j + 16 the high one; Q5's fifth bit of
//    value j is bit j of the little-endian u32 qh)
//   Q4_K 256 values, 144 B: f16 d | f16 dmin | u8 scales[12] | u8 qs[128]
//   Q5_K 256 values, 176 B: f16 d | f16 dmin | u8 scales[12] | u8 qh[32] | u8 qs[128]
//        8 sub-blocks of 32 with 6-bit scale and min packed in `scales`;
//        x = d * sc * q - dmin * m
//   Q6_K 256 values, 210 B: u8 ql[128] | u8 qh[64] | i8 scales[16] | f16 d
//        16 sub-blocks of 16; x = d * scale * (q6 - 32)
#pragma once

#include <cstddef>
#include <cstdint>

namespace sjkv {
namespace replay {

// ggml type ids (ggml.h enum ggml_type).
enum GgmlTypeId : uint32_t {
  kGgmlF32 = 0, kGgmlF16 = 1, kGgmlQ4_0 = 2, kGgmlQ4_1 = 3, kGgmlQ5_0 = 6, kGgmlQ5_1 = 7,
  kGgmlQ8_0 = 8, kGgmlQ4_K = 12, kGgmlQ5_K = 13, kGgmlQ6_K = 14, kGgmlBF16 = 30,
};

// True for the types dequantize_row handles.
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

// True when every value n values of `src` decode to is finite. For the block types that is
// their scales (d, and m / dmin where the type has one): a finite scale times a code of at most
// 8 bits cannot overflow binary32. F16, BF16 and F32 check every value.
bool dequant_finite(uint32_t type, const void* src, size_t n);

}  // namespace replay
}  // namespace sjkv
