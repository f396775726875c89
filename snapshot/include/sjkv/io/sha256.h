// SHA-256 (FIPS 180-4): hashes of codebook files, models and inputs. No dependency.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace sjkv {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t n);
  std::array<uint8_t, 32> digest();  // finalises; the object must not be updated afterwards

 private:
  void block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t fill_ = 0;
  uint64_t total_ = 0;
};

std::array<uint8_t, 32> sha256(const void* data, size_t n);
std::string to_hex(const uint8_t* p, size_t n);
std::string sha256_hex(const void* data, size_t n);
// SHA-256 of a whole file as lower-case hex; throws FileError when it cannot be read.
std::string sha256_file_hex(const std::string& path);

}  // namespace sjkv
