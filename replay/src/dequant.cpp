// Dequantizers: the portable path is the block formats table's reference decode
// (codec/src/block_formats.cpp); the AVX2 paths here give its bits. Written for sjkv; only the
// layouts and their formulas follow ggml.
#include "sjkv/replay/dequant.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "dequant_avx2.h"
#include "sjkv/fp16.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace sjkv {
namespace replay {
namespace {

using blocks::h2f;

// The weight types the forward pass accepts: every GGUF type the table decodes (gemm.h's paths
// are checked against each one's reference in tests/replay/test_gemm.cpp).
const BlockFormatInfo* weight_format(uint32_t type) {
  const BlockFormatInfo* f = format_by_gguf_id(type);
  return f && f->decode ? f : nullptr;
}

}  // namespace

bool dequant_supported(uint32_t type) { return weight_format(type) != nullptr; }

uint32_t dequant_block_values(uint32_t type) {
  const BlockFormatInfo* f = weight_format(type);
  return f ? f->block_values : 0;
}

uint32_t dequant_block_bytes(uint32_t type) {
  const BlockFormatInfo* f = weight_format(type);
  return f ? f->block_bytes : 0;
}

void dequantize_row(uint32_t type, const void* src, float* dst, size_t n) {
  const BlockFormatInfo* f = weight_format(type);
  if (!f) throw std::invalid_argument("dequantize_row: unsupported ggml type " + std::to_string(type));
  if (n % f->block_values != 0)
    throw std::invalid_argument("dequantize_row: " + std::to_string(n) + " values is not a whole number of " +
                                std::to_string(f->block_values) + "-value blocks");
  f->decode(static_cast<const uint8_t*>(src), dst, n / f->block_values);
}

// ---- AVX2 dequantizers ------------------------------------------------------------------------
// Each computes exactly the reference formula of its type (block_formats.cpp) on eight values
// at a time (integer codes converted exactly, then the same multiplies and subtractions in the
// same order; nothing is contracted), so the floats are the reference ones bit for bit.

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
        case kGgmlQ2_K: return rows_blocks<kGgmlQ2_K>(s, dst, nb);
        case kGgmlQ3_K: return rows_blocks<kGgmlQ3_K>(s, dst, nb);
        case kGgmlQ5_K: return rows_blocks<kGgmlQ5_K>(s, dst, nb);
        case kGgmlIQ4_NL: return rows_blocks<kGgmlIQ4_NL>(s, dst, nb);
        case kGgmlIQ4_XS: return rows_blocks<kGgmlIQ4_XS>(s, dst, nb);
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
  // MXFP4 and NVFP4 have no f16 scale: a large e8m0 exponent overflows with some codes only,
  // and NVFP4's E4M3 scales are all finite; their blocks are decoded and looked at.
  if (type == kGgmlMXFP4 || type == kGgmlNVFP4) {
    std::vector<float> y(bv);
    const BlockFormatInfo& f = *format_by_gguf_id(type);
    for (size_t i = 0; i < nb; ++i) {
      if (type == kGgmlMXFP4 && s[i * bb] <= 252) continue;  // 12 x 2^(252 - 128) is finite
      f.decode(s + i * bb, y.data(), 1);
      for (float x : y)
        if (!std::isfinite(x)) return false;
    }
    return true;
  }
  // IQ1_M's f16 scale is the top nibbles of its four u16 scale words (bytes 48-55).
  if (type == kGgmlIQ1_M) {
    for (size_t i = 0; i < nb; ++i) {
      const uint8_t* sc = s + i * bb + 48;
      const uint8_t h[2] = {static_cast<uint8_t>((sc[1] >> 4) | (sc[3] & 0xF0)),
                            static_cast<uint8_t>((sc[5] >> 4) | (sc[7] & 0xF0))};
      if (!h_finite(h)) return false;
    }
    return true;
  }
  // Offsets of the f16 scales in each block.
  uint32_t off[2] = {0, 0};
  int count = 1;
  switch (type) {
    case kGgmlQ4_1: case kGgmlQ5_1: case kGgmlQ4_K: case kGgmlQ5_K: off[1] = 2; count = 2; break;
    case kGgmlQ6_K: off[0] = 208; break;
    case kGgmlQ2_K: off[0] = 80; off[1] = 82; count = 2; break;
    case kGgmlQ3_K: off[0] = 108; break;
    case kGgmlTQ1_0: off[0] = 52; break;
    case kGgmlTQ2_0: off[0] = 64; break;
    default: break;  // the legacy formats and the IQ formats: d at byte 0
  }
  for (size_t i = 0; i < nb; ++i)
    for (int c = 0; c < count; ++c)
      if (!h_finite(s + i * bb + off[c])) return false;
  return true;
}

}  // namespace replay
}  // namespace sjkv
