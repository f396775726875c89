// Internal: checked little-endian reads from a regular file whose size is known up front,
// for the binary importers. Every failure is a FileError naming the file and the defect.
#pragma once

#include <sys/stat.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include "sjkv/io/file_error.h"

namespace sjkv {

class InFile {
 public:
  explicit InFile(const std::string& path) : path_(path) {
    f_ = std::fopen(path.c_str(), "rb");
    if (!f_) throw FileError(path_, std::string("cannot open: ") + std::strerror(errno));
    struct stat st {};
    if (fstat(fileno(f_), &st) != 0) fail(std::string("cannot stat: ") + std::strerror(errno));
    if (!S_ISREG(st.st_mode)) fail("not a regular file");
    size_ = static_cast<uint64_t>(st.st_size);
  }
  ~InFile() { std::fclose(f_); }
  InFile(const InFile&) = delete;
  InFile& operator=(const InFile&) = delete;

  uint64_t size() const { return size_; }
  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }

  [[noreturn]] void fail(const std::string& defect) const { throw FileError(path_, defect); }

  void seek(uint64_t pos) {
    if (pos > size_ || fseeko(f_, static_cast<off_t>(pos), SEEK_SET) != 0) fail("seek failed");
    pos_ = pos;
  }
  void read(void* dst, uint64_t n, const char* what = "data") {
    need(n, what);
    if (n && std::fread(dst, 1, n, f_) != n) {
      if (std::ferror(f_)) fail(std::string("read error: ") + std::strerror(errno));
      fail("unexpected end of file (the file shrank while being read)");
    }
    pos_ += n;
  }
  void skip(uint64_t n, const char* what) {
    need(n, what);
    if (fseeko(f_, static_cast<off_t>(pos_ + n), SEEK_SET) != 0) fail("seek failed");
    pos_ += n;
  }
  uint32_t u32(const char* what = "field") {
    unsigned char b[4];
    read(b, 4, what);
    return static_cast<uint32_t>(b[0]) | static_cast<uint32_t>(b[1]) << 8 | static_cast<uint32_t>(b[2]) << 16 |
           static_cast<uint32_t>(b[3]) << 24;
  }
  int32_t i32(const char* what = "field") { return static_cast<int32_t>(u32(what)); }
  uint64_t u64(const char* what = "field") {
    const uint64_t lo = u32(what);
    return lo | static_cast<uint64_t>(u32(what)) << 32;
  }
  // A count of `elem_bytes`-sized items that must fit in what remains (checked before any
  // allocation, without overflow).
  void check_count(uint64_t count, uint64_t elem_bytes, const std::string& what) const {
    if (elem_bytes != 0 && count > remaining() / elem_bytes)
      fail(what + " (" + std::to_string(count) + " x " + std::to_string(elem_bytes) +
           " bytes) runs past the end of the file (" + std::to_string(remaining()) + " bytes remain at offset " +
           std::to_string(pos_) + ")");
  }

 private:
  void need(uint64_t n, const char* what) const {
    if (n > remaining())
      fail(std::string("truncated: ") + what + " needs " + std::to_string(n) + " bytes at offset " +
           std::to_string(pos_) + ", " + std::to_string(remaining()) + " remain");
  }

  std::string path_;
  FILE* f_ = nullptr;
  uint64_t size_ = 0, pos_ = 0;
};

}  // namespace sjkv
