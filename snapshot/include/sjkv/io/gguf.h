// GGUF v3 reader, validated like a hostile file (the model's cache geometry: sjkv/io/model_geometry.h).
//
// Layout (little-endian), after llama.cpp's ggml/include/gguf.h header comment:
//   magic "GGUF" | u32 version (3) | i64 n_tensors | i64 n_kv
//   n_kv x  { string key | i32 value type | value }
//            value: a scalar, a string (u64 length + bytes, no NUL), or an array:
//                   i32 element type | u64 count | count elements (no arrays of arrays)
//   n_tensors x { string name | u32 n_dims | i64 ne[n_dims] | i32 ggml type | u64 offset }
//   padding to the alignment (general.alignment, u32, a power of two; default 32)
//   tensor data: each tensor at data_offset + offset, offset a multiple of the alignment.
//
// Every defect is a sjkv::FileError naming the file and the defect (
// sjkv/io/file_error.h). Checked: magic; version (1 and 2 rejected with their own messages,
// newer versions, 0, and byte-swapped big-endian files); counts against the bytes that remain;
// string lengths against the bytes that remain (and 1 GiB); keys non-empty, printable ASCII,
// at most 65,535 bytes, unique; value types known; arrays not nested and their element count
// against the bytes that remain; bools 0 or 1; general.alignment a u32 power of two; tensor
// names non-empty, shorter than 64 bytes (ggml's GGML_MAX_NAME), unique; 1 to 4 dimensions,
// none negative, element count and byte size without overflow; ggml types known (removed ids
// named as such); rows a whole number of blocks; offsets aligned, inside the file and not
// overlapping. The data section is never read: open() maps the file and parses the header.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "sjkv/block_formats.h"
#include "sjkv/io/file_error.h"

namespace sjkv {

namespace bin {
class InputFile;
}

enum class GgufType : uint32_t {
  u8 = 0, i8 = 1, u16 = 2, i16 = 3, u32 = 4, i32 = 5, f32 = 6, boolean = 7,
  string = 8, array = 9, u64 = 10, i64 = 11, f64 = 12,
};
const char* gguf_type_name(GgufType t);

// The ggml tensor types a GGUF file may hold, their names and block sizes: the block formats
// table, sjkv/block_formats.h (format_by_gguf_id).

// One metadata value: a scalar, a string, or an array of one scalar/string type.
class GgufValue {
 public:
  bool is_array() const { return is_array_; }
  // Scalar type, or for an array the element type.
  GgufType type() const { return type_; }
  // Elements of an array; 1 for a scalar.
  uint64_t count() const { return count_; }

  // Element i (0 for a scalar) of exactly this type; std::invalid_argument otherwise.
  uint8_t u8(uint64_t i = 0) const;
  int8_t i8(uint64_t i = 0) const;
  uint16_t u16(uint64_t i = 0) const;
  int16_t i16(uint64_t i = 0) const;
  uint32_t u32(uint64_t i = 0) const;
  int32_t i32(uint64_t i = 0) const;
  uint64_t u64(uint64_t i = 0) const;
  int64_t i64(uint64_t i = 0) const;
  float f32(uint64_t i = 0) const;
  double f64(uint64_t i = 0) const;
  bool boolean(uint64_t i = 0) const;
  const std::string& str(uint64_t i = 0) const;
  const std::vector<std::string>& strings() const { return strings_; }

  // Any integer (or bool) element as a non-negative / signed value; nothing when the element
  // is not an integer or does not fit.
  std::optional<uint64_t> to_unsigned(uint64_t i = 0) const;
  std::optional<int64_t> to_signed(uint64_t i = 0) const;

 private:
  friend class GgufParser;
  const uint8_t* at(GgufType t, uint64_t i) const;
  bool is_array_ = false;
  GgufType type_ = GgufType::u8;
  uint64_t count_ = 1;
  std::vector<uint8_t> raw_;           // numeric elements, little-endian as in the file
  std::vector<std::string> strings_;   // string elements
};

struct GgufKv {
  std::string key;
  GgufValue value;
};

struct GgufTensorInfo {
  std::string name;
  uint32_t type = 0;            // ggml type id
  std::vector<uint64_t> dims;   // ne[0] (row length) first, as ggml counts them
  uint64_t offset = 0;          // from the start of the data section
  uint64_t n_elements = 0;
  uint64_t n_bytes = 0;
  const char* type_name() const;
};

class GgufFile {
 public:
  // Maps `path` read-only and parses its header. Throws FileError on any defect or I/O error.
  static GgufFile open(const std::string& path);
  // The same checks over bytes held in memory (tests, fuzzing); `name` stands for the path.
  static GgufFile parse(std::vector<uint8_t> bytes, const std::string& name = "<memory>");

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // start of the tensor data
  uint64_t file_size() const { return size_; }

  // Metadata in file order, and lookup by key.
  const std::vector<GgufKv>& metadata() const { return kv_; }
  bool has(std::string_view key) const { return find(key) != nullptr; }
  const GgufValue* find(std::string_view key) const;

  // Typed access: FileError ("missing key 'k'", "key 'k' is i32, expected u32") when the key
  // is absent or holds another type or an array.
  uint8_t get_u8(std::string_view key) const;
  int8_t get_i8(std::string_view key) const;
  uint16_t get_u16(std::string_view key) const;
  int16_t get_i16(std::string_view key) const;
  uint32_t get_u32(std::string_view key) const;
  int32_t get_i32(std::string_view key) const;
  uint64_t get_u64(std::string_view key) const;
  int64_t get_i64(std::string_view key) const;
  float get_f32(std::string_view key) const;
  double get_f64(std::string_view key) const;
  bool get_bool(std::string_view key) const;
  const std::string& get_string(std::string_view key) const;
  // An array (of any element type); FileError when absent or a scalar.
  const GgufValue& get_array(std::string_view key) const;
  // Any non-negative integer scalar that fits (writers differ on u32/i32/u64 for counts).
  uint64_t get_uint(std::string_view key) const;

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(std::string_view name) const;
  // The tensor's bytes inside the mapping (valid while this object lives).
  const uint8_t* tensor_data(const GgufTensorInfo& t) const;

 private:
  friend class GgufParser;
  static GgufFile from(const bin::InputFile& in);
  const GgufValue& require(std::string_view key, GgufType t) const;
  std::string path_;
  std::shared_ptr<const uint8_t> bytes_;  // the mapping or the owned buffer
  uint64_t size_ = 0;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;  // GGUF_DEFAULT_ALIGNMENT when general.alignment is absent
  uint64_t data_offset_ = 0;
  std::vector<GgufKv> kv_;
  std::unordered_map<std::string, size_t> kv_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::unordered_map<std::string, size_t> tensor_index_;
};

}  // namespace sjkv
