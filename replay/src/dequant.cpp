// Dequantizers (block layouts from ggml's ggml-common.h, see dequant.h), portable and AVX2.
// Written for sjkv; only the layouts and their formulas follow ggml.
#include "sjkv/replay/dequant.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "dequant_avx2.h"
#include "sjkv/fp16.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace sjkv {
namespace replay {
namespace {

constexpr uint32_t kQK = 32;    // values per block of the legacy formats
constexpr uint32_t kQKK = 256;  // values per K-quant super-block

using blocks::h2f;
using blocks::le32;
using blocks::scale_min_k4;

void deq_q4_0(const uint8_t* b, float* y) {
  const float d = h2f(b);
  const uint8_t* qs = b + 2;
  for (uint32_t j = 0; j < 16; ++j) {
    y[j] = static_cast<float>(static_cast<int>(qs[j] & 0xF) - 8) * d;
    y[j + 16] = static_cast<float>(static_cast<int>(qs[j] >> 4) - 8) * d;
  }
}

void deq_q4_1(const uint8_t* b, float* y) {
  const float d = h2f(b), m = h2f(b + 2);
  const uint8_t* qs = b + 4;
  for (uint32_t j = 0; j < 16; ++j) {
    y[j] = static_cast<float>(qs[j] & 0xF) * d + m;
    y[j + 16] = static_cast<float>(qs[j] >> 4) * d + m;
  }
}

void deq_q5_0(const uint8_t* b, float* y) {
  const float d = h2f(b);
  const uint32_t qh = le32(b + 2);
  const uint8_t* qs = b + 6;
  for (uint32_t j = 0; j < 16; ++j) {
    const int lo = static_cast<int>((qs[j] & 0xF) | (((qh >> j) & 1u) << 4)) - 16;
    const int hi = static_cast<int>((qs[j] >> 4) | (((qh >> (j + 16)) & 1u) << 4)) - 16;
    y[j] = static_cast<float>(lo) * d;
    y[j + 16] = static_cast<float>(hi) * d;
  }
}

void deq_q5_1(const uint8_t* b, float* y) {
  const float d = h2f(b), m = h2f(b + 2);
  const uint32_t qh = le32(b + 4);
  const uint8_t* qs = b + 8;
  for (uint32_t j = 0; j < 16; ++j) {
    const uint32_t lo = (qs[j] & 0xF) | (((qh >> j) & 1u) << 4);
    const uint32_t hi = (qs[j] >> 4) | (((qh >> (j + 16)) & 1u) << 4);
    y[j] = static_cast<float>(lo) * d + m;
    y[j + 16] = static_cast<float>(hi) * d + m;
  }
}

void deq_q8_0(const uint8_t* b, float* y) {
  const float d = h2f(b);
  for (uint32_t j = 0; j < kQK; ++j) y[j] = static_cast<float>(static_cast<int8_t>(b[2 + j])) * d;
}

void deq_q4_k(const uint8_t* b, float* y) {
  const float d = h2f(b), dmin = h2f(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qs = b + 16;
  for (uint32_t j = 0; j < 4; ++j) {
    uint32_t sc0, m0, sc1, m1;
    scale_min_k4(2 * j, scales, sc0, m0);
    scale_min_k4(2 * j + 1, scales, sc1, m1);
    const float d0 = d * static_cast<float>(sc0), mm0 = dmin * static_cast<float>(m0);
    const float d1 = d * static_cast<float>(sc1), mm1 = dmin * static_cast<float>(m1);
    for (uint32_t l = 0; l < 32; ++l) {
      y[64 * j + l] = d0 * static_cast<float>(qs[32 * j + l] & 0xF) - mm0;
      y[64 * j + 32 + l] = d1 * static_cast<float>(qs[32 * j + l] >> 4) - mm1;
    }
  }
}

void deq_q5_k(const uint8_t* b, float* y) {
  const float d = h2f(b), dmin = h2f(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* qs = b + 48;
  for (uint32_t j = 0; j < 4; ++j) {
    uint32_t sc0, m0, sc1, m1;
    scale_min_k4(2 * j, scales, sc0, m0);
    scale_min_k4(2 * j + 1, scales, sc1, m1);
    const float d0 = d * static_cast<float>(sc0), mm0 = dmin * static_cast<float>(m0);
    const float d1 = d * static_cast<float>(sc1), mm1 = dmin * static_cast<float>(m1);
    const uint32_t u0 = 1u << (2 * j), u1 = 2u << (2 * j);
    for (uint32_t l = 0; l < 32; ++l) {
      const uint32_t q0 = (qs[32 * j + l] & 0xFu) + ((qh[l] & u0) ? 16u : 0u);
      const uint32_t q1 = (qs[32 * j + l] >> 4) + ((qh[l] & u1) ? 16u : 0u);
      y[64 * j + l] = d0 * static_cast<float>(q0) - mm0;
      y[64 * j + 32 + l] = d1 * static_cast<float>(q1) - mm1;
    }
  }
}

void deq_q6_k(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = h2f(b + 208);
  for (uint32_t half = 0; half < 2; ++half) {
    const uint8_t* l6 = ql + 64 * half;
    const uint8_t* h6 = qh + 32 * half;
    const int8_t* s = sc + 8 * half;
    float* o = y + 128 * half;
    for (uint32_t l = 0; l < 32; ++l) {
      const uint32_t is = l / 16;
      const int q1 = static_cast<int>((l6[l] & 0xF) | ((h6[l] & 3u) << 4)) - 32;
      const int q2 = static_cast<int>((l6[l + 32] & 0xF) | (((h6[l] >> 2) & 3u) << 4)) - 32;
      const int q3 = static_cast<int>((l6[l] >> 4) | (((h6[l] >> 4) & 3u) << 4)) - 32;
      const int q4 = static_cast<int>((l6[l + 32] >> 4) | (((h6[l] >> 6) & 3u) << 4)) - 32;
      o[l] = d * static_cast<float>(s[is]) * static_cast<float>(q1);
      o[l + 32] = d * static_cast<float>(s[is + 2]) * static_cast<float>(q2);
      o[l + 64] = d * static_cast<float>(s[is + 4]) * static_cast<float>(q3);
      o[l + 96] = d * static_cast<float>(s[is + 6]) * static_cast<float>(q4);
    }
  }
}

}  // namespace

bool dequant_supported(uint32_t type) { return dequant_block_bytes(type) != 0; }

uint32_t dequant_block_values(uint32_t type) {
  switch (type) {
    case kGgmlF32: case kGgmlF16: case kGgmlBF16: return 1;
    case kGgmlQ4_0: case kGgmlQ4_1: case kGgmlQ5_0: case kGgmlQ5_1: case kGgmlQ8_0: return kQK;
    case kGgmlQ4_K: case kGgmlQ5_K: case kGgmlQ6_K: return kQKK;
    default: return 0;
  }
}

uint32_t dequant_block_bytes(uint32_t type) {
  switch (type) {
    case kGgmlF32: return 4;
    case kGgmlF16: case kGgmlBF16: return 2;
    case kGgmlQ4_0: return 18;
    case kGgmlQ4_1: return 20;
    case kGgmlQ5_0: return 22;
    case kGgmlQ5_1: return 24;
    case kGgmlQ8_0: return 34;
    case kGgmlQ4_K: return 144;
    case kGgmlQ5_K: return 176;
    case kGgmlQ6_K: return 210;
    default: return 0;
  }
}

void dequantize_row(uint32_t type, const void* src, float* dst, size_t n) {
  const uint32_t bv = dequant_block_values(type);
  if (bv == 0) throw std::invalid_argument("dequantize_row: unsupported ggml type " + std::to_string(type));
  if (n % bv != 0)
    throw std::invalid_argument("dequantize_row: " + std::to_string(n) + " values is not a whole number of " +
                                std::to_string(bv) + "-value blocks");
  const uint8_t* s = static_cast<const uint8_t*>(src);
  const size_t bb = dequant_block_bytes(type);
  const size_t nb = n / bv;
  switch (type) {
    case kGgmlF32: std::memcpy(dst, s, n * 4); return;
    case kGgmlF16:
      for (size_t i = 0; i < n; ++i) dst[i] = h2f(s + 2 * i);
      return;
    case kGgmlBF16:
      for (size_t i = 0; i < n; ++i) {
        const uint32_t u = (static_cast<uint32_t>(s[2 * i]) | (static_cast<uint32_t>(s[2 * i + 1]) << 8)) << 16;
        std::memcpy(dst + i, &u, 4);
      }
      return;
    default: break;
  }
  void (*f)(const uint8_t*, float*) = nullptr;
  switch (type) {
    case kGgmlQ4_0: f = deq_q4_0; break;
    case kGgmlQ4_1: f = deq_q4_1; break;
    case kGgmlQ5_0: f = deq_q5_0; break;
    case kGgmlQ5_1: f = deq_q5_1; break;
    case kGgmlQ8_0: f = deq_q8_0; break;
    case kGgmlQ4_K: f = deq_q4_k; break;
    case kGgmlQ5_K: f = deq_q5_k; break;
    case kGgmlQ6_K: f = deq_q6_k; break;
    default: break;
  }
  for (size_t i = 0; i < nb; ++i) f(s + i * bb, dst + i * bv);
}

// ---- AVX2 dequantizers ------------------------------------------------------------------------
// Each computes exactly the scalar formula of its type above on eight values at a time
// (integer codes converted exactly, then the same multiplies and subtractions in the same
// order; nothing is contracted), so the floats are the scalar ones bit for bit.

namespace {

bool cpu_avx2() {
#if defined(__x86_64__)
  static const bool ok = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    const bool f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
    return f16c && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }();
  return ok;
#else
  return false;
#endif
}

#if defined(__x86_64__)
#define SJKV_AVX2 __attribute__((target("avx2,fma,f16c")))

// nb blocks of Type from b to y, through the walkers of dequant_avx2.h.
template <uint32_t Type>
SJKV_AVX2 void rows_blocks(const uint8_t* b, float* y, size_t nb) {
  using B = blocks::avx2_block<Type>;
  for (size_t i = 0; i < nb; ++i, b += B::kBytes, y += B::kValues) {
    blocks::StoreSink sink{y};
    B::walk(b, sink);
  }
}
// F16 and BF16 rows of any length: whole groups of eight, then the tail one value at a time.
template <uint32_t Type>
SJKV_AVX2 void rows_halves(const uint8_t* s, float* y, size_t n) {
  rows_blocks<Type>(s, y, n / 8);
  for (size_t i = n / 8 * 8; i < n; ++i) {
    if (Type == kGgmlF16) {
      y[i] = h2f(s + 2 * i);
    } else {
      const uint32_t u = (static_cast<uint32_t>(s[2 * i]) | (static_cast<uint32_t>(s[2 * i + 1]) << 8)) << 16;
      std::memcpy(y + i, &u, 4);
    }
  }
}
#undef SJKV_AVX2
#endif

bool h_finite(const uint8_t* p) { return (static_cast<uint16_t>(p[0] | (p[1] << 8)) & 0x7c00u) != 0x7c00u; }

}  // namespace

bool dequant_simd() { return cpu_avx2(); }

void dequantize_row_fast(uint32_t type, const void* src, float* dst, size_t n) {
  dequantize_row_with(cpu_avx2(), type, src, dst, n);
}

void dequantize_row_with(bool simd, uint32_t type, const void* src, float* dst, size_t n) {
#if defined(__x86_64__)
  if (simd && cpu_avx2()) {
    const uint32_t bv = dequant_block_values(type);
    if (bv != 0 && n % bv == 0) {
      const uint8_t* s = static_cast<const uint8_t*>(src);
      const size_t nb = n / bv;
      switch (type) {
        case kGgmlQ4_0: return rows_blocks<kGgmlQ4_0>(s, dst, nb);
        case kGgmlQ4_1: return rows_blocks<kGgmlQ4_1>(s, dst, nb);
        case kGgmlQ5_0: return rows_blocks<kGgmlQ5_0>(s, dst, nb);
        case kGgmlQ5_1: return rows_blocks<kGgmlQ5_1>(s, dst, nb);
        case kGgmlQ8_0: return rows_blocks<kGgmlQ8_0>(s, dst, nb);
        case kGgmlQ4_K: return rows_blocks<kGgmlQ4_K>(s, dst, nb);
        case kGgmlQ6_K: return rows_blocks<kGgmlQ6_K>(s, dst, nb);
        case kGgmlF16: return rows_halves<kGgmlF16>(s, dst, n);
        case kGgmlBF16: return rows_halves<kGgmlBF16>(s, dst, n);
        default: break;
      }
    }
  }
#endif
  (void)simd;
  dequantize_row(type, src, dst, n);
}

bool dequant_finite(uint32_t type, const void* src, size_t n) {
  const uint32_t bv = dequant_block_values(type), bb = dequant_block_bytes(type);
  if (bv == 0 || n % bv != 0) throw std::invalid_argument("dequant_finite: unsupported type or partial block");
  const uint8_t* s = static_cast<const uint8_t*>(src);
  const size_t nb = n / bv;
  switch (type) {
    case kGgmlF32:
      for (size_t i = 0; i < n; ++i) {
        float x;
        std::memcpy(&x, s + 4 * i, 4);
        if (!std::isfinite(x)) return false;
      }
      return true;
    case kGgmlF16:
      for (size_t i = 0; i < n; ++i)
        if (!h_finite(s + 2 * i)) return false;
      return true;
    case kGgmlBF16:
      for (size_t i = 0; i < n; ++i)
        if ((s[2 * i + 1] & 0x7f) == 0x7f && (s[2 * i] & 0x80)) return false;  // exponent all ones
      return true;
    default: break;
  }
  // Offsets of the f16 scales in each block.
  uint32_t off[2] = {0, 0};
  int count = 1;
  switch (type) {
    case kGgmlQ4_1: case kGgmlQ5_1: case kGgmlQ4_K: case kGgmlQ5_K: off[1] = 2; count = 2; break;
    case kGgmlQ6_K: off[0] = 208; break;
    default: break;
  }
  for (size_t i = 0; i < nb; ++i)
    for (int c = 0; c < count; ++c)
      if (!h_finite(s + i * bb + off[c])) return false;
  return true;
}

}  // namespace replay
}  // namespace sjkv
