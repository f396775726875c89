// Orthonormal Sylvester-Hadamard transform (docs/SPEC.md §3). Its own inverse.
#pragma once

#include "sjkv/hd.h"

namespace sjkv {

// Scale 1/sqrt(n) as the format computes it: binary32 reciprocal of the binary32 root.
SJKV_HD inline float hadamard_scale(uint32_t n) {
  return op::fdiv(1.0f, op::sqrt32(static_cast<float>(n)));
}

// In place on x[0..n), n a power of two. Butterflies in ascending half-size, block and
// index order; the values of a pair are read before either is written.
SJKV_HD inline void hadamard_inplace(float* x, uint32_t n) {
  for (uint32_t h = 1; h < n; h <<= 1) {
    for (uint32_t i = 0; i < n; i += 2 * h) {
      for (uint32_t j = i; j < i + h; ++j) {
        const float a = x[j];
        const float b = x[j + h];
        x[j] = op::fadd(a, b);
        x[j + h] = op::fsub(a, b);
      }
    }
  }
  const float s = hadamard_scale(n);
  for (uint32_t i = 0; i < n; ++i) x[i] = op::fmul(x[i], s);
}

// Consecutive blocks of `block` values each transformed on their own: one call rotates
// every head of a [n_head][head_dim] vector (block = head_dim), or the 256-value halves of
// a 512-wide head (block = 256).
SJKV_HD inline void hadamard_blocks(float* x, uint32_t n_values, uint32_t block) {
  for (uint32_t o = 0; o + block <= n_values; o += block) hadamard_inplace(x + o, block);
}

SJKV_HD inline bool is_pow2(uint32_t n) { return n != 0 && (n & (n - 1)) == 0; }

}  // namespace sjkv
