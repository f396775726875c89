// Deterministic generators of the format's test inputs (docs/SPEC.md §13.1): the
// xorshift64 stream, fill_group (outlier channels, per-token factors) and fill_rows. They
// regenerate the reference test vectors and serve as realistic synthetic tiles.
#pragma once

#include <cstddef>

#include "sjkv/fp16.h"

namespace sjkv {

struct XorShift64 {
  uint64_t s;
  SJKV_HD explicit XorShift64(uint64_t seed) : s(seed) {}
  SJKV_HD uint32_t next() {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return static_cast<uint32_t>(s >> 11);
  }
  // Sum of four centred 10-bit draws, in [-2048, 2044].
  SJKV_HD int32_t gauss() {
    int32_t g = 0;
    for (int i = 0; i < 4; ++i) g += static_cast<int32_t>(next() & 1023u) - 512;
    return g;
  }
  // gauss()*cf*tf * 2^-12, exact in binary32.
  SJKV_HD float value(int32_t cf, int32_t tf) {
    return op::fmul(static_cast<float>(gauss() * cf * tf), f32_from_bits(0x39800000u));
  }
};

// One side of fill_group: per-channel factors (3% outliers at 24..31), per-token factors.
SJKV_HD inline void fill_group_side(XorShift64& rng, uint32_t D, uint32_t G, uint16_t* X, int32_t* chf) {
  for (uint32_t d = 0; d < D; ++d) {
    const uint32_t u = rng.next();
    chf[d] = (u % 100u) < 3u ? 24 + static_cast<int32_t>(rng.next() & 7u) : 1 + static_cast<int32_t>(rng.next() & 3u);
  }
  for (uint32_t t = 0; t < G; ++t) {
    const int32_t tf = 1 + static_cast<int32_t>(rng.next() & 3u);
    for (uint32_t d = 0; d < D; ++d) X[static_cast<size_t>(t) * D + d] = f32_to_f16(rng.value(chf[d], tf));
  }
}

// fill_group(D, G, seed): K[G][D] then V[G][D] fp16 seal inputs; chf is D ints of scratch.
SJKV_HD inline void fill_group(uint32_t D, uint32_t G, uint64_t seed, uint16_t* K, uint16_t* V, int32_t* chf) {
  XorShift64 rng(0x9E3779B97F4A7C15ull ^ seed);
  fill_group_side(rng, D, G, K, chf);
  fill_group_side(rng, D, G, V, chf);
}

// fill_rows(64, 256) of §13.1: binary32 rows, the last overwritten with zeros.
SJKV_HD inline void fill_rows(uint32_t rows, uint32_t n, float* x) {
  XorShift64 rng(0xD1B54A32D192ED03ull);
  for (uint32_t r = 0; r < rows; ++r) {
    const int32_t tf = 1 + static_cast<int32_t>(rng.next() & 7u);
    for (uint32_t i = 0; i < n; ++i) x[static_cast<size_t>(r) * n + i] = rng.value(1, tf);
  }
  for (uint32_t i = 0; i < n; ++i) x[static_cast<size_t>(rows - 1) * n + i] = 0.0f;
}

}  // namespace sjkv
