// Raw engine codebook table files (CODEC-SPEC §12): the K table then the V table, each
// 2^(6 + bits) fp16 bit patterns, little-endian, no header. 1,024 bytes is a 2-bit pair,
// 2,048 a 3-bit pair, 4,096 a 4-bit pair; the size is the only thing that tells them apart.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sjkv {

struct RawCodebook {
  uint32_t bits = 0;
  std::vector<uint16_t> k, v;
};

// Validates size and entries (no NaN or infinity); throws FileError(path, defect).
RawCodebook read_raw_codebook(const std::string& path);

}  // namespace sjkv
