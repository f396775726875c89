// Scalar reference decoders of ggml's low-bit weight formats: one block in, its values out,
// bit for bit as gguf.quants (the `gguf` package 0.19.0, llama.cpp's numpy dequantizers)
// computes them; tests/codec/test_block_decode_lowbit.cpp checks that against fixtures the
// package wrote. Block layouts are ggml's (ggml-common.h); offsets below are bytes into the
// block, multi-byte fields little-endian, "fp16" an IEEE binary16 scale.
//
// Arithmetic is binary32 with one rounding per operation, in gguf.quants's order (the project
// compiles with -ffp-contract=off). ggml's C dequantizers use the same order for every type
// here; where a product could be fused or reordered the result is exact anyway (noted at the
// function in the .cpp).
#pragma once

#include <cstdint>

namespace sjkv {
namespace lowbit {

// 256 values, 84 bytes: scales[16] (low nibble scale, high nibble min, per 16 values) @0,
// qs[64] (2 bits) @16, fp16 d @80, fp16 dmin @82.
void q2_k(const uint8_t* block, float* out);
// 256 values, 110 bytes: hmask[32] (high bit, set = no offset) @0, qs[64] (low 2 bits) @32,
// scales[12] (16 six-bit scales, offset 32) @96, fp16 d @108.
void q3_k(const uint8_t* block, float* out);
// 256 values, 136 bytes: fp16 d @0, scales_h (u16, 2 bits per 32) @2, scales_l[4] @4,
// qs[128] @8.
void iq4_xs(const uint8_t* block, float* out);
// 256 values, 98 bytes: fp16 d @0, qs[64] (iq3xxs_grid indices) @2, 8 u32 (4 x 7-bit sign
// index, 4-bit scale on top) @66.
void iq3_xxs(const uint8_t* block, float* out);
// 256 values, 110 bytes: fp16 d @0, qs[64] @2, qh[8] (9th index bit) @66, signs[32] @74,
// scales[4] (4 bits per 32) @106.
void iq3_s(const uint8_t* block, float* out);
// 256 values, 66 bytes: fp16 d @0, 16 u32 in pairs (4 grid indices; 4 x 7-bit sign index and
// a 4-bit scale) @2.
void iq2_xxs(const uint8_t* block, float* out);
// 256 values, 74 bytes: fp16 d @0, 32 u16 (9-bit grid index, 7-bit sign index) @2,
// scales[8] (4 bits per 16) @66.
void iq2_xs(const uint8_t* block, float* out);
// 256 values, 82 bytes: fp16 d @0, qs[32] @2, signs[32] @34, qh[8] (2 high index bits each)
// @66, scales[8] @74.
void iq2_s(const uint8_t* block, float* out);
// 256 values, 50 bytes: fp16 d @0, qs[32] @2, 8 u16 (4 x 3 high index bits, 3-bit scale,
// delta sign) @34.
void iq1_s(const uint8_t* block, float* out);
// 256 values, 56 bytes: qs[32] @0, qh[16] (3 high index bits and a delta sign per nibble) @32,
// 4 u16 (four 3-bit scales each; their top nibbles form the fp16 d) @48.
void iq1_m(const uint8_t* block, float* out);
// 256 values, 54 bytes: qs[48] (5 trits a byte) @0, qh[4] (4 trits a byte) @48, fp16 d @52.
void tq1_0(const uint8_t* block, float* out);
// 256 values, 66 bytes: qs[64] (2 bits, value + 1) @0, fp16 d @64.
void tq2_0(const uint8_t* block, float* out);
// Q1_0 (128 values, 18 B) and Q2_0 (64 values, 18 B): no gguf.quants dequantizer; checked
// against ggml's own to_float (scripts/make-quant-fixtures.py --ggml-lib).
void q1_0(const uint8_t* block, float* out);
void q2_0(const uint8_t* block, float* out);
// 32 values, 17 bytes: e8m0 exponent e @0, qs[16] (4-bit E2M1 codes) @1.
void mxfp4(const uint8_t* block, float* out);
// 64 values, 36 bytes: four unsigned E4M3 scales (one per 16 values) @0, qs[32] @4.
void nvfp4(const uint8_t* block, float* out);

}  // namespace lowbit
}  // namespace sjkv
