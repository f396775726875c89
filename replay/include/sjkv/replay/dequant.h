// Dequantizers for the ggml tensor types a GGUF model holds, and the f16-weight matrix
// products the forward pass runs on (weights are dequantized once, at load, into f16 copies).
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

// ---- f16-weight products ------------------------------------------------------------------
// Y[t][r] = sum_k W[r][k] * X[t][k] for W [rows][k] f16 bits, X [n][k] f32, Y [n][ldy]
// (ldy >= rows). Each Y element is computed by one thread in an order that depends only on k,
// so results are the same bytes for any thread count and any n (a token computed alone equals
// the same token inside a batch). The SIMD path (AVX2+F16C+FMA, chosen at run time) and the
// scalar path use the same order of lanes but may differ in the last bits (fused multiply-add).
void matmul_f16(const uint16_t* w, size_t rows, size_t k, const float* x, size_t n, float* y,
                size_t ldy, int n_threads = 0);
// The paths matmul_f16 chooses between; AVX-512 equals AVX2 bit for bit (the same lanes and
// fused multiply-adds), the scalar path differs in the last bits (no FMA).
enum class MatmulIsa { scalar = 0, avx2 = 1, avx512 = 2 };
MatmulIsa matmul_f16_best();
// matmul_f16 on a given path (tests); std::invalid_argument when this machine lacks it.
void matmul_f16_with(MatmulIsa isa, const uint16_t* w, size_t rows, size_t k, const float* x, size_t n,
                     float* y, size_t ldy, int n_threads = 0);
// The same products with W held as Q8_0 rows ([rows][k / 32] blocks, used in place: the tied
// output matrix of both default models), with the same guarantees; k a multiple of 32.
void matmul_q8_0(const uint8_t* w, size_t rows, size_t k, const float* x, size_t n, float* y,
                 size_t ldy, int n_threads = 0);
// The scalar reference of the f16 products (double accumulation), for tests.
void matmul_f16_reference(const uint16_t* w, size_t rows, size_t k, const float* x, size_t n,
                          float* y, size_t ldy);
// Whether matmul_f16 runs its AVX2 path on this machine.
bool matmul_f16_simd();

}  // namespace replay
}  // namespace sjkv
