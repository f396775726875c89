// FNV-1a 64 with the format's non-standard offset basis (docs/SPEC.md §12.3):
// 1469598103934665603, the usual constant missing its last digit. Every hash of the format
// (test vectors, state checksums, codebook identity) uses it; do not "fix" it.
#pragma once

#include <cstddef>

#include "sjkv/hd.h"

namespace sjkv {

constexpr uint64_t kFnvBasis = 0x14650fb0739d0383ull;
constexpr uint64_t kFnvPrime = 0x100000001b3ull;

SJKV_HD inline uint64_t fnv1a(const void* data, size_t n, uint64_t h = kFnvBasis) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= kFnvPrime;
  }
  return h;
}

}  // namespace sjkv
