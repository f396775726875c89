// Internal: the one binary-reader layer of the file library. Every binary format (GGUF,
// .kvd, llama.cpp state, codebook tables and containers, training checkpoints) reads through
// it: InputFile holds a regular file's bytes (mapped read-only, or read whole under a size cap),
// ByteReader walks them with bounds and overflow checks, and every defect is a FileError naming
// the file. Little-endian helpers for the writers sit beside the readers.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "sjkv/io/file_error.h"

namespace sjkv::bin {

inline uint64_t load_le(const uint8_t* p, unsigned n) {
  uint64_t v = 0;
  for (unsigned i = 0; i < n; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}
inline uint16_t get_u16(const uint8_t* p) { return static_cast<uint16_t>(load_le(p, 2)); }
inline uint32_t get_u32(const uint8_t* p) { return static_cast<uint32_t>(load_le(p, 4)); }
inline uint64_t get_u64(const uint8_t* p) { return load_le(p, 8); }
inline double get_f64(const uint8_t* p) {
  const uint64_t u = get_u64(p);
  double v;
  std::memcpy(&v, &u, 8);
  return v;
}

inline void put_u32(std::vector<uint8_t>& o, uint32_t v) {
  for (int i = 0; i < 4; ++i) o.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
inline void put_u64(std::vector<uint8_t>& o, uint64_t v) {
  for (int i = 0; i < 8; ++i) o.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
inline void put_f64(std::vector<uint8_t>& o, double v) {
  uint64_t u;
  std::memcpy(&u, &v, 8);
  put_u64(o, u);
}

// A regular file's bytes. open() maps it read-only (large inputs: model files, state dumps);
// an empty file is an empty span. Throws FileError: cannot open, not a regular file, cannot map.
class InputFile {
 public:
  static InputFile open(const std::string& path);
  // Bytes held in memory (tests, fuzzing, parse_* entry points); `name` stands for the path.
  static InputFile hold(std::vector<uint8_t> bytes, const std::string& name);

  const std::string& path() const { return path_; }
  const uint8_t* data() const { return bytes_.get(); }
  uint64_t size() const { return size_; }
  // Keeps the bytes alive for as long as the returned owner lives (GgufFile's tensor data).
  std::shared_ptr<const uint8_t> share() const { return bytes_; }

 private:
  std::string path_;
  std::shared_ptr<const uint8_t> bytes_;
  uint64_t size_ = 0;
};

// Reads a whole small file into memory, refusing more than `limit` bytes with
// "is larger than LIMIT bytes; not WHAT" (WHAT: "a codebook file", "an sjkv-train checkpoint").
std::vector<uint8_t> read_whole(const std::string& path, size_t limit, const char* what);

// A cursor over bytes: every read is checked against what remains, every count against the
// bytes it needs, before anything is allocated.
class ByteReader {
 public:
  ByteReader(std::string path, const uint8_t* p, uint64_t size) : path_(std::move(path)), p_(p), size_(size) {}
  explicit ByteReader(const InputFile& f) : ByteReader(f.path(), f.data(), f.size()) {}

  const std::string& path() const { return path_; }
  const uint8_t* data() const { return p_; }
  uint64_t size() const { return size_; }
  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }
  const uint8_t* here() const { return p_ + pos_; }

  [[noreturn]] void fail(const std::string& defect) const { throw FileError(path_, defect); }

  void need(uint64_t n, const std::string& what) const {
    if (n > remaining())
      fail("truncated: " + what + " at offset " + std::to_string(pos_) + " needs " + std::to_string(n) + " bytes, " +
           std::to_string(remaining()) + " left");
  }
  void seek(uint64_t pos) {
    if (pos > size_) fail("seek past the end of the file (offset " + std::to_string(pos) + ")");
    pos_ = pos;
  }
  void skip(uint64_t n, const std::string& what) {
    need(n, what);
    pos_ += n;
  }
  void read(void* dst, uint64_t n, const std::string& what = "data") {
    need(n, what);
    if (n) std::memcpy(dst, p_ + pos_, static_cast<size_t>(n));
    pos_ += n;
  }
  uint64_t uint(unsigned n, const std::string& what) {
    need(n, what);
    const uint64_t v = load_le(p_ + pos_, n);
    pos_ += n;
    return v;
  }
  uint32_t u32(const std::string& what = "field") { return static_cast<uint32_t>(uint(4, what)); }
  int32_t i32(const std::string& what = "field") { return static_cast<int32_t>(u32(what)); }
  uint64_t u64(const std::string& what = "field") { return uint(8, what); }

  // A count of `elem_bytes`-sized items that must fit in what remains (no overflow).
  void check_count(uint64_t count, uint64_t elem_bytes, const std::string& what) const {
    if (elem_bytes != 0 && count > remaining() / elem_bytes)
      fail(what + " (" + std::to_string(count) + " x " + std::to_string(elem_bytes) +
           " bytes) runs past the end of the file (" + std::to_string(remaining()) + " bytes remain at offset " +
           std::to_string(pos_) + ")");
  }

 private:
  std::string path_;
  const uint8_t* p_;
  uint64_t size_;
  uint64_t pos_ = 0;
};

// A file opened and walked by one object (the importers): InputFile plus its cursor.
class FileReader : public ByteReader {
 public:
  explicit FileReader(InputFile f) : ByteReader(f), file_(std::move(f)) {}
  explicit FileReader(const std::string& path) : FileReader(InputFile::open(path)) {}

 private:
  InputFile file_;  // the mapping stays put when the reader moves: ByteReader points into it
};

}  // namespace sjkv::bin
