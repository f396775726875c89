#include "sjkv/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <stdexcept>

namespace sjkv {

namespace {

constexpr uint32_t kGgufVersion = 3;
constexpr uint64_t kMaxString = 1ull << 30;     // llama.cpp's GGUF_MAX_STRING_LENGTH
constexpr uint64_t kMaxKeyLength = 65535;       // GGUF spec: keys at most 2^16 - 1 bytes
constexpr uint64_t kMaxTensorName = 63;         // ggml's GGML_MAX_NAME (64) less the NUL
constexpr uint32_t kMaxDims = 4;                // GGML_MAX_DIMS
// Smallest encodings, for bounding counts by the bytes that remain.
constexpr uint64_t kMinKvBytes = 8 + 1 + 4 + 1;          // key length, 1-byte key, type, u8 value
constexpr uint64_t kMinTensorBytes = 8 + 1 + 4 + 8 + 4 + 8;  // name, n_dims, one dim, type, offset

std::string hex32(uint32_t v) {
  static const char* d = "0123456789abcdef";
  std::string s = "0x";
  for (int i = 7; i >= 0; --i) s += d[(v >> (4 * i)) & 15];
  return s;
}

std::string printable(std::string_view s) {
  std::string out;
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    out += (u >= 0x20 && u < 0x7f) ? c : '?';
  }
  return out;
}

uint64_t scalar_size(GgufType t) {
  switch (t) {
    case GgufType::u8: case GgufType::i8: case GgufType::boolean: return 1;
    case GgufType::u16: case GgufType::i16: return 2;
    case GgufType::u32: case GgufType::i32: case GgufType::f32: return 4;
    case GgufType::u64: case GgufType::i64: case GgufType::f64: return 8;
    case GgufType::string: case GgufType::array: return 0;
  }
  return 0;
}

bool known_type(uint32_t t) { return t <= static_cast<uint32_t>(GgufType::f64); }

uint64_t load_le(const uint8_t* p, unsigned n) {
  uint64_t v = 0;
  for (unsigned i = 0; i < n; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

// ggml type table (ggml/include/ggml.h enum ggml_type, block sizes from ggml-common.h). Ids 4,
// 5 (Q4_2, Q4_3), 31-33 (Q4_0_4_4, Q4_0_4_8, Q4_0_8_8) and 36-38 (IQ4_NL_4_4, _4_8, _8_8)
// were removed from GGUF files.
const GgmlTypeInfo kGgml[] = {
    {0, "F32", 1, 4},        {1, "F16", 1, 2},         {2, "Q4_0", 32, 18},     {3, "Q4_1", 32, 20},
    {6, "Q5_0", 32, 22},     {7, "Q5_1", 32, 24},      {8, "Q8_0", 32, 34},     {9, "Q8_1", 32, 36},
    {10, "Q2_K", 256, 84},   {11, "Q3_K", 256, 110},   {12, "Q4_K", 256, 144},  {13, "Q5_K", 256, 176},
    {14, "Q6_K", 256, 210},  {15, "Q8_K", 256, 292},   {16, "IQ2_XXS", 256, 66}, {17, "IQ2_XS", 256, 74},
    {18, "IQ3_XXS", 256, 98}, {19, "IQ1_S", 256, 50},  {20, "IQ4_NL", 32, 18},  {21, "IQ3_S", 256, 110},
    {22, "IQ2_S", 256, 82},  {23, "IQ4_XS", 256, 136}, {24, "I8", 1, 1},        {25, "I16", 1, 2},
    {26, "I32", 1, 4},       {27, "I64", 1, 8},        {28, "F64", 1, 8},       {29, "IQ1_M", 256, 56},
    {30, "BF16", 1, 2},      {34, "TQ1_0", 256, 54},   {35, "TQ2_0", 256, 66},  {39, "MXFP4", 32, 17},
    {40, "NVFP4", 64, 36},   {41, "Q1_0", 128, 18},
};

const char* removed_ggml_type(uint32_t id) {
  switch (id) {
    case 4: return "Q4_2";
    case 5: return "Q4_3";
    case 31: return "Q4_0_4_4";
    case 32: return "Q4_0_4_8";
    case 33: return "Q4_0_8_8";
    case 36: return "IQ4_NL_4_4";
    case 37: return "IQ4_NL_4_8";
    case 38: return "IQ4_NL_8_8";
  }
  return nullptr;
}

}  // namespace

const char* gguf_type_name(GgufType t) {
  switch (t) {
    case GgufType::u8: return "u8";
    case GgufType::i8: return "i8";
    case GgufType::u16: return "u16";
    case GgufType::i16: return "i16";
    case GgufType::u32: return "u32";
    case GgufType::i32: return "i32";
    case GgufType::f32: return "f32";
    case GgufType::boolean: return "bool";
    case GgufType::string: return "string";
    case GgufType::array: return "array";
    case GgufType::u64: return "u64";
    case GgufType::i64: return "i64";
    case GgufType::f64: return "f64";
  }
  return "?";
}

const GgmlTypeInfo* ggml_type_info(uint32_t id) {
  for (const GgmlTypeInfo& t : kGgml)
    if (t.id == id) return &t;
  return nullptr;
}

const char* GgufTensorInfo::type_name() const {
  const GgmlTypeInfo* t = ggml_type_info(type);
  return t ? t->name : "?";
}

// ---- GgufValue -------------------------------------------------------------------------------

const uint8_t* GgufValue::at(GgufType t, uint64_t i) const {
  if (type_ != t)
    throw std::invalid_argument(std::string("GGUF value is ") + gguf_type_name(type_) + ", not " + gguf_type_name(t));
  if (i >= count_) throw std::out_of_range("GGUF array index out of range");
  return raw_.data() + i * scalar_size(t);
}

uint8_t GgufValue::u8(uint64_t i) const { return static_cast<uint8_t>(load_le(at(GgufType::u8, i), 1)); }
int8_t GgufValue::i8(uint64_t i) const { return static_cast<int8_t>(load_le(at(GgufType::i8, i), 1)); }
uint16_t GgufValue::u16(uint64_t i) const { return static_cast<uint16_t>(load_le(at(GgufType::u16, i), 2)); }
int16_t GgufValue::i16(uint64_t i) const { return static_cast<int16_t>(load_le(at(GgufType::i16, i), 2)); }
uint32_t GgufValue::u32(uint64_t i) const { return static_cast<uint32_t>(load_le(at(GgufType::u32, i), 4)); }
int32_t GgufValue::i32(uint64_t i) const { return static_cast<int32_t>(load_le(at(GgufType::i32, i), 4)); }
uint64_t GgufValue::u64(uint64_t i) const { return load_le(at(GgufType::u64, i), 8); }
int64_t GgufValue::i64(uint64_t i) const { return static_cast<int64_t>(load_le(at(GgufType::i64, i), 8)); }
bool GgufValue::boolean(uint64_t i) const { return load_le(at(GgufType::boolean, i), 1) != 0; }

float GgufValue::f32(uint64_t i) const {
  const uint32_t b = static_cast<uint32_t>(load_le(at(GgufType::f32, i), 4));
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

double GgufValue::f64(uint64_t i) const {
  const uint64_t b = load_le(at(GgufType::f64, i), 8);
  double f;
  std::memcpy(&f, &b, 8);
  return f;
}

const std::string& GgufValue::str(uint64_t i) const {
  if (type_ != GgufType::string)
    throw std::invalid_argument(std::string("GGUF value is ") + gguf_type_name(type_) + ", not string");
  if (i >= count_) throw std::out_of_range("GGUF array index out of range");
  return strings_[i];
}

std::optional<int64_t> GgufValue::to_signed(uint64_t i) const {
  if (i >= count_) return std::nullopt;
  switch (type_) {
    case GgufType::u8: return u8(i);
    case GgufType::i8: return i8(i);
    case GgufType::u16: return u16(i);
    case GgufType::i16: return i16(i);
    case GgufType::u32: return u32(i);
    case GgufType::i32: return i32(i);
    case GgufType::i64: return i64(i);
    case GgufType::boolean: return boolean(i) ? 1 : 0;
    case GgufType::u64: {
      const uint64_t v = u64(i);
      if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
      return static_cast<int64_t>(v);
    }
    default: return std::nullopt;
  }
}

std::optional<uint64_t> GgufValue::to_unsigned(uint64_t i) const {
  if (i >= count_) return std::nullopt;
  if (type_ == GgufType::u64) return u64(i);
  const std::optional<int64_t> s = to_signed(i);
  if (!s || *s < 0) return std::nullopt;
  return static_cast<uint64_t>(*s);
}

// ---- Parser ----------------------------------------------------------------------------------

class GgufParser {
 public:
  GgufParser(GgufFile& f, const uint8_t* p, uint64_t size) : f_(f), p_(p), size_(size) {}

  void run() {
    header();
    for (uint64_t i = 0; i < n_kv_; ++i) kv(i);
    alignment();
    for (uint64_t i = 0; i < n_tensors_; ++i) tensor(i);
    data_section();
  }

 private:
  [[noreturn]] void fail(const std::string& defect) const { throw FileError(f_.path_, defect); }
  uint64_t remaining() const { return size_ - pos_; }

  void need(uint64_t n, const std::string& what) const {
    if (n > remaining())
      fail("truncated: " + what + " at offset " + std::to_string(pos_) + " needs " + std::to_string(n) +
           " bytes, " + std::to_string(remaining()) + " left");
  }
  uint64_t uint(unsigned n, const std::string& what) {
    need(n, what);
    const uint64_t v = load_le(p_ + pos_, n);
    pos_ += n;
    return v;
  }
  std::string string(const std::string& what, uint64_t max_len) {
    const uint64_t at = pos_;
    const uint64_t len = uint(8, what + " length");
    if (len > max_len)
      fail(what + " at offset " + std::to_string(at) + " is " + std::to_string(len) + " bytes, more than the " +
           std::to_string(max_len) + " allowed");
    if (len > remaining())
      fail("truncated: " + what + " at offset " + std::to_string(at) + " claims " + std::to_string(len) +
           " bytes but only " + std::to_string(remaining()) + " remain");
    std::string s(reinterpret_cast<const char*>(p_ + pos_), static_cast<size_t>(len));
    pos_ += len;
    return s;
  }

  void header() {
    if (size_ < 4) fail("truncated: " + std::to_string(size_) + " bytes is too short for the GGUF magic");
    if (std::memcmp(p_, "GGUF", 4) != 0)
      fail("not a GGUF file: magic '" + printable(std::string_view(reinterpret_cast<const char*>(p_), 4)) +
           "' (bytes " + hex32(static_cast<uint32_t>(load_le(p_, 4))) + "), expected 'GGUF'");
    pos_ = 4;
    const uint32_t v = static_cast<uint32_t>(uint(4, "version"));
    if (v == 0) fail("invalid GGUF version 0");
    // A big-endian file written for version 3 reads as 0x03000000 here.
    if ((v & 0xFFFFu) == 0)
      fail("GGUF version field " + hex32(v) + " looks byte-swapped: big-endian GGUF files are not supported");
    if (v == 1) fail("GGUF version 1 is not supported: it used 32-bit counts and lengths; version 3 is required");
    if (v == 2) fail("GGUF version 2 is not supported: version 3 is required (re-convert the model with a current llama.cpp)");
    if (v > kGgufVersion)
      fail("GGUF version " + std::to_string(v) + " is newer than the supported version " + std::to_string(kGgufVersion));
    f_.version_ = v;
    const uint64_t nt = uint(8, "tensor count");
    const uint64_t nk = uint(8, "metadata count");
    if (nt > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      fail("tensor count " + std::to_string(static_cast<int64_t>(nt)) + " is negative");
    if (nk > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      fail("metadata count " + std::to_string(static_cast<int64_t>(nk)) + " is negative");
    const uint64_t r = remaining();
    if (nt > r / kMinTensorBytes || nk > r / kMinKvBytes || nt * kMinTensorBytes + nk * kMinKvBytes > r)
      fail("header claims " + std::to_string(nt) + " tensors and " + std::to_string(nk) +
           " metadata pairs, more than the " + std::to_string(r) + " remaining bytes can hold");
    n_tensors_ = nt;
    n_kv_ = nk;
  }

  void kv(uint64_t i) {
    const std::string what = "metadata key " + std::to_string(i);
    std::string key = string(what, kMaxKeyLength);
    if (key.empty()) fail(what + " is empty");
    for (char c : key) {
      const auto u = static_cast<unsigned char>(c);
      if (u < 0x20 || u >= 0x7f) fail(what + " '" + printable(key) + "' is not printable ASCII");
    }
    if (f_.kv_index_.count(key)) fail("duplicate metadata key '" + key + "'");
    const std::string k = "key '" + key + "'";
    const uint32_t t = static_cast<uint32_t>(uint(4, k + " type"));
    if (!known_type(t)) fail(k + " has unknown value type " + std::to_string(t));
    GgufValue v;
    if (static_cast<GgufType>(t) == GgufType::array) {
      const uint32_t et = static_cast<uint32_t>(uint(4, k + " array type"));
      if (et == static_cast<uint32_t>(GgufType::array)) fail(k + " is an array of arrays, which GGUF does not allow");
      if (!known_type(et)) fail(k + " is an array of unknown value type " + std::to_string(et));
      const uint64_t n = uint(8, k + " array count");
      const GgufType e = static_cast<GgufType>(et);
      const uint64_t min = e == GgufType::string ? 8 : scalar_size(e);
      if (n > remaining() / min)
        fail("truncated: " + k + " claims " + std::to_string(n) + " " + gguf_type_name(e) +
             " elements, more than the " + std::to_string(remaining()) + " remaining bytes can hold");
      v.is_array_ = true;
      v.type_ = e;
      v.count_ = n;
      values(v, k);
    } else {
      v.type_ = static_cast<GgufType>(t);
      v.count_ = 1;
      values(v, k);
    }
    f_.kv_index_.emplace(key, f_.kv_.size());
    f_.kv_.push_back(GgufKv{std::move(key), std::move(v)});
  }

  void values(GgufValue& v, const std::string& k) {
    if (v.type_ == GgufType::string) {
      v.strings_.reserve(static_cast<size_t>(v.count_));
      for (uint64_t j = 0; j < v.count_; ++j)
        v.strings_.push_back(string(k + (v.is_array_ ? " element " + std::to_string(j) : std::string(" value")), kMaxString));
      return;
    }
    const uint64_t sz = scalar_size(v.type_);
    const uint64_t bytes = v.count_ * sz;  // bounded by remaining() above
    need(bytes, k + " value");
    v.raw_.assign(p_ + pos_, p_ + pos_ + bytes);
    pos_ += bytes;
    if (v.type_ == GgufType::boolean)
      for (uint64_t j = 0; j < v.count_; ++j)
        if (v.raw_[j] > 1)
          fail(k + (v.is_array_ ? " element " + std::to_string(j) : std::string("")) + " is bool " +
               std::to_string(v.raw_[j]) + ", not 0 or 1");
  }

  void alignment() {
    const GgufValue* a = f_.find("general.alignment");
    if (!a) return;
    if (a->is_array() || a->type() != GgufType::u32)
      fail(std::string("general.alignment must be a u32, not ") + (a->is_array() ? "an array of " : "") +
           gguf_type_name(a->type()));
    const uint32_t v = a->u32();
    if (v == 0 || (v & (v - 1)) != 0) fail("general.alignment " + std::to_string(v) + " is not a power of two");
    f_.alignment_ = v;
  }

  void tensor(uint64_t i) {
    const std::string what = "tensor " + std::to_string(i);
    GgufTensorInfo t;
    t.name = string(what + " name", kMaxString);
    if (t.name.empty()) fail(what + " has an empty name");
    if (t.name.size() > kMaxTensorName)
      fail(what + " name '" + printable(t.name.substr(0, 64)) + "...' is " + std::to_string(t.name.size()) +
           " bytes, more than ggml's 63");
    if (f_.tensor_index_.count(t.name)) fail("duplicate tensor name '" + printable(t.name) + "'");
    const std::string k = "tensor '" + printable(t.name) + "'";
    const uint64_t nd = uint(4, k + " dimension count");
    if (nd == 0 || nd > kMaxDims) fail(k + " has " + std::to_string(nd) + " dimensions; 1 to 4 are allowed");
    uint64_t ne = 1;
    bool overflow = false;
    for (uint64_t d = 0; d < nd; ++d) {
      const uint64_t x = uint(8, k + " dimension " + std::to_string(d));
      if (x > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        fail(k + " dimension " + std::to_string(d) + " is negative (" + std::to_string(static_cast<int64_t>(x)) + ")");
      t.dims.push_back(x);
      if (x != 0 && ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / x) overflow = true;
      else ne *= x;
    }
    // A zero dimension makes the product 0 whatever the others are.
    if (std::find(t.dims.begin(), t.dims.end(), 0u) != t.dims.end()) { ne = 0; overflow = false; }
    if (overflow) fail(k + " element count overflows 64 bits");
    t.n_elements = ne;
    t.type = static_cast<uint32_t>(uint(4, k + " type"));
    const GgmlTypeInfo* ti = ggml_type_info(t.type);
    if (!ti) {
      if (const char* old = removed_ggml_type(t.type))
        fail(k + " has ggml type " + std::to_string(t.type) + " (" + old + "), which was removed from GGUF");
      fail(k + " has unknown ggml type " + std::to_string(t.type));
    }
    if (t.dims[0] % ti->block_values != 0)
      fail(k + " rows of " + std::to_string(t.dims[0]) + " values are not a whole number of " + ti->name +
           " blocks (" + std::to_string(ti->block_values) + " values)");
    const uint64_t blocks = ne / ti->block_values;
    if (blocks > std::numeric_limits<uint64_t>::max() / ti->block_bytes) fail(k + " byte size overflows 64 bits");
    t.n_bytes = blocks * ti->block_bytes;
    t.offset = uint(8, k + " offset");
    if (t.offset % f_.alignment_ != 0)
      fail(k + " offset " + std::to_string(t.offset) + " is not a multiple of the alignment " +
           std::to_string(f_.alignment_));
    f_.tensor_index_.emplace(t.name, f_.tensors_.size());
    f_.tensors_.push_back(std::move(t));
  }

  void data_section() {
    // Without tensors there is no data section (and no padding to require): it starts at the
    // end of the header, as llama.cpp reports it.
    f_.data_offset_ = pos_;
    if (f_.tensors_.empty()) return;
    const uint64_t a = f_.alignment_;
    const uint64_t pad = (a - pos_ % a) % a;
    f_.data_offset_ = pos_ + pad;
    if (pad > remaining())
      fail("truncated: the data section would start at offset " + std::to_string(f_.data_offset_) +
           ", past the end of the " + std::to_string(size_) + "-byte file");
    const uint64_t data = size_ - f_.data_offset_;
    std::vector<const GgufTensorInfo*> order;
    for (const GgufTensorInfo& t : f_.tensors_) {
      if (t.offset > data || t.n_bytes > data - t.offset)
        fail("tensor '" + printable(t.name) + "' data [" + std::to_string(t.offset) + ", +" + std::to_string(t.n_bytes) +
             ") runs past the end of the " + std::to_string(data) + "-byte data section");
      order.push_back(&t);
    }
    std::sort(order.begin(), order.end(), [](const GgufTensorInfo* x, const GgufTensorInfo* y) {
      return x->offset != y->offset ? x->offset < y->offset : x->n_bytes < y->n_bytes;
    });
    for (size_t j = 1; j < order.size(); ++j) {
      const GgufTensorInfo& prev = *order[j - 1];
      const GgufTensorInfo& cur = *order[j];
      if (prev.n_bytes > 0 && cur.n_bytes > 0 && prev.offset + prev.n_bytes > cur.offset)
        fail("tensor '" + printable(cur.name) + "' data overlaps tensor '" + printable(prev.name) + "'");
    }
  }

  GgufFile& f_;
  const uint8_t* p_;
  uint64_t size_;
  uint64_t pos_ = 0;
  uint64_t n_tensors_ = 0, n_kv_ = 0;
};

// ---- GgufFile --------------------------------------------------------------------------------

GgufFile GgufFile::open(const std::string& path) {
  GgufFile f;
  f.path_ = path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw FileError(path, std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    throw FileError(path, std::string("cannot stat: ") + std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw FileError(path, "not a regular file");
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size == 0) {
    ::close(fd);
    throw FileError(path, "truncated: the file is empty");
  }
  void* m = ::mmap(nullptr, static_cast<size_t>(size), PROT_READ, MAP_PRIVATE, fd, 0);
  const int e = errno;
  ::close(fd);
  if (m == MAP_FAILED) throw FileError(path, std::string("cannot map: ") + std::strerror(e));
  const size_t len = static_cast<size_t>(size);
  f.bytes_ = std::shared_ptr<const uint8_t>(static_cast<const uint8_t*>(m),
                                            [len](const uint8_t* p) { ::munmap(const_cast<uint8_t*>(p), len); });
  f.size_ = size;
  GgufParser(f, f.bytes_.get(), size).run();
  return f;
}

GgufFile GgufFile::parse(std::vector<uint8_t> bytes, const std::string& name) {
  GgufFile f;
  f.path_ = name;
  auto owned = std::make_shared<std::vector<uint8_t>>(std::move(bytes));
  f.size_ = owned->size();
  f.bytes_ = std::shared_ptr<const uint8_t>(owned, owned->data());
  GgufParser(f, f.bytes_.get(), f.size_).run();
  return f;
}

const GgufValue* GgufFile::find(std::string_view key) const {
  const auto it = kv_index_.find(std::string(key));
  return it == kv_index_.end() ? nullptr : &kv_[it->second].value;
}

const GgufValue& GgufFile::require(std::string_view key, GgufType t) const {
  const GgufValue* v = find(key);
  if (!v) throw FileError(path_, "missing key '" + std::string(key) + "'");
  if (v->is_array() || v->type() != t)
    throw FileError(path_, "key '" + std::string(key) + "' is " + (v->is_array() ? "an array of " : "") +
                               gguf_type_name(v->type()) + ", expected " + gguf_type_name(t));
  return *v;
}

uint8_t GgufFile::get_u8(std::string_view k) const { return require(k, GgufType::u8).u8(); }
int8_t GgufFile::get_i8(std::string_view k) const { return require(k, GgufType::i8).i8(); }
uint16_t GgufFile::get_u16(std::string_view k) const { return require(k, GgufType::u16).u16(); }
int16_t GgufFile::get_i16(std::string_view k) const { return require(k, GgufType::i16).i16(); }
uint32_t GgufFile::get_u32(std::string_view k) const { return require(k, GgufType::u32).u32(); }
int32_t GgufFile::get_i32(std::string_view k) const { return require(k, GgufType::i32).i32(); }
uint64_t GgufFile::get_u64(std::string_view k) const { return require(k, GgufType::u64).u64(); }
int64_t GgufFile::get_i64(std::string_view k) const { return require(k, GgufType::i64).i64(); }
float GgufFile::get_f32(std::string_view k) const { return require(k, GgufType::f32).f32(); }
double GgufFile::get_f64(std::string_view k) const { return require(k, GgufType::f64).f64(); }
bool GgufFile::get_bool(std::string_view k) const { return require(k, GgufType::boolean).boolean(); }
const std::string& GgufFile::get_string(std::string_view k) const { return require(k, GgufType::string).str(); }

const GgufValue& GgufFile::get_array(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) throw FileError(path_, "missing key '" + std::string(key) + "'");
  if (!v->is_array())
    throw FileError(path_, "key '" + std::string(key) + "' is " + gguf_type_name(v->type()) + ", expected an array");
  return *v;
}

uint64_t GgufFile::get_uint(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) throw FileError(path_, "missing key '" + std::string(key) + "'");
  const std::optional<uint64_t> u = v->is_array() ? std::nullopt : v->to_unsigned();
  if (!u || v->type() == GgufType::boolean)
    throw FileError(path_, "key '" + std::string(key) + "' is " + (v->is_array() ? "an array of " : "") +
                               gguf_type_name(v->type()) + ", expected a non-negative integer");
  return *u;
}

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
  const auto it = tensor_index_.find(std::string(name));
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const uint8_t* GgufFile::tensor_data(const GgufTensorInfo& t) const { return bytes_.get() + data_offset_ + t.offset; }

// ---- Geometry --------------------------------------------------------------------------------

const char* layer_kind_name(LayerKind k) {
  switch (k) {
    case LayerKind::full_attention: return "full";
    case LayerKind::sliding_window: return "sliding";
    case LayerKind::recurrent: return "recurrent";
    case LayerKind::nextn: return "nextn";
  }
  return "?";
}

std::vector<uint32_t> ModelGeometry::full_attention_layers() const {
  std::vector<uint32_t> v;
  for (uint32_t i = 0; i < layers.size(); ++i)
    if (layers[i].kind == LayerKind::full_attention) v.push_back(i);
  return v;
}

CacheGeometry ModelGeometry::cache_geometry() const {
  CacheGeometry g;
  for (const LayerInfo& l : layers)
    if (l.kind == LayerKind::full_attention) g.layers.push_back(LayerGeometry{l.n_head_kv, l.head_dim_k, l.head_dim_v});
  return g;
}

namespace {

constexpr uint32_t kMaxLayers = 65536;

class GeometryReader {
 public:
  explicit GeometryReader(const GgufFile& f) : f_(f) {}

  [[noreturn]] void fail(const std::string& d) const { throw FileError(f_.path(), d); }

  std::string key(const std::string& suffix) const { return arch_ + "." + suffix; }

  // A u32-ranged non-negative integer scalar.
  std::optional<uint32_t> opt_u32(const std::string& k) const {
    const GgufValue* v = f_.find(k);
    if (!v) return std::nullopt;
    const std::optional<uint64_t> u = v->is_array() || v->type() == GgufType::boolean ? std::nullopt : v->to_unsigned();
    if (!u || *u > 0xFFFFFFFFull) fail("key '" + k + "' must be a non-negative 32-bit integer");
    return static_cast<uint32_t>(*u);
  }

  // A scalar broadcast to every layer, or an array with one entry per layer.
  std::optional<std::vector<uint32_t>> per_layer(const std::string& k, uint32_t n) const {
    const GgufValue* v = f_.find(k);
    if (!v) return std::nullopt;
    if (!v->is_array()) {
      const std::optional<uint32_t> s = opt_u32(k);
      return std::vector<uint32_t>(n, *s);
    }
    if (v->count() != n)
      fail("key '" + k + "' has " + std::to_string(v->count()) + " entries for " + std::to_string(n) + " layers");
    std::vector<uint32_t> out(n);
    for (uint32_t i = 0; i < n; ++i) {
      const std::optional<uint64_t> u = v->type() == GgufType::boolean ? std::nullopt : v->to_unsigned(i);
      if (!u || *u > 0xFFFFFFFFull) fail("key '" + k + "' entry " + std::to_string(i) + " is not a non-negative 32-bit integer");
      out[i] = static_cast<uint32_t>(*u);
    }
    return out;
  }

  ModelGeometry read() {
    ModelGeometry g;
    const GgufValue* a = f_.find("general.architecture");
    if (!a) fail("missing key 'general.architecture'");
    arch_ = f_.get_string("general.architecture");
    if (arch_.empty()) fail("general.architecture is empty");
    g.architecture = arch_;
    const std::optional<uint32_t> nl = opt_u32(key("block_count"));
    if (!nl) fail("missing key '" + key("block_count") + "'");
    if (*nl == 0 || *nl > kMaxLayers)
      fail("'" + key("block_count") + "' is " + std::to_string(*nl) + "; 1 to 65536 layers are supported");
    const uint32_t n = *nl;
    g.n_layers = n;
    if (const GgufValue* c = f_.find(key("context_length"))) {
      const std::optional<uint64_t> u = c->is_array() ? std::nullopt : c->to_unsigned();
      if (!u) fail("key '" + key("context_length") + "' must be a non-negative integer");
      g.context_length = *u;
    }
    g.sliding_window = opt_u32(key("attention.sliding_window")).value_or(0);

    const auto heads = per_layer(key("attention.head_count"), n);
    if (!heads) fail("missing key '" + key("attention.head_count") + "'");
    const std::vector<uint32_t> heads_kv = per_layer(key("attention.head_count_kv"), n).value_or(*heads);
    const std::optional<uint32_t> embd = opt_u32(key("embedding_length"));
    const std::optional<uint32_t> klen = opt_u32(key("attention.key_length"));
    const std::optional<uint32_t> vlen = opt_u32(key("attention.value_length"));
    const std::optional<uint32_t> klen_swa = opt_u32(key("attention.key_length_swa"));
    const std::optional<uint32_t> vlen_swa = opt_u32(key("attention.value_length_swa"));

    // Layer kinds.
    std::vector<LayerKind> kind(n, LayerKind::full_attention);
    std::string rule;
    const uint32_t nextn = opt_u32(key("nextn_predict_layers")).value_or(0);
    if (nextn >= n && nextn > 0)
      fail("'" + key("nextn_predict_layers") + "' is " + std::to_string(nextn) + " of " + std::to_string(n) + " layers");
    const uint32_t n_main = n - nextn;
    for (uint32_t i = n_main; i < n; ++i) kind[i] = LayerKind::nextn;
    if (nextn) rule += "last " + std::to_string(nextn) + " layer(s) are nextn draft blocks; ";

    bool zero_kv = false;
    for (uint32_t i = 0; i < n_main; ++i)
      if (heads_kv[i] == 0) {
        kind[i] = LayerKind::recurrent;
        zero_kv = true;
      }
    if (zero_kv) rule += "layers with head_count_kv 0 are recurrent; ";
    const std::optional<uint32_t> interval = opt_u32(key("full_attention_interval"));
    const bool qwen_hybrid = arch_ == "qwen3next" || arch_ == "qwen35" || arch_ == "qwen35moe";
    if (interval || qwen_hybrid) {
      const uint32_t p = interval.value_or(4);
      if (p == 0) fail("'" + key("full_attention_interval") + "' is 0");
      for (uint32_t i = 0; i < n_main; ++i)
        if ((i + 1) % p != 0) kind[i] = LayerKind::recurrent;
      rule += "full attention every " + std::to_string(p) + " layers ((il + 1) % " + std::to_string(p) + " == 0" +
              (interval ? ", " + key("full_attention_interval") : ", llama.cpp's default for " + arch_) + "); ";
    }

    std::vector<bool> swa(n, false);
    bool any_swa = false;
    const std::string pkey = key("attention.sliding_window_pattern");
    if (const GgufValue* pv = f_.find(pkey)) {
      if (pv->is_array()) {
        if (pv->count() != n)
          fail("key '" + pkey + "' has " + std::to_string(pv->count()) + " entries for " + std::to_string(n) + " layers");
        for (uint32_t i = 0; i < n; ++i) {
          const std::optional<uint64_t> u = pv->to_unsigned(i);
          if (!u || *u > 1) fail("key '" + pkey + "' entry " + std::to_string(i) + " is not a bool");
          swa[i] = *u == 1;
        }
        rule += "sliding layers from " + pkey + " (per layer); ";
      } else {
        const uint32_t p = *opt_u32(pkey);
        for (uint32_t i = 0; i < n; ++i) swa[i] = p == 0 || i % p < p - 1;
        rule += p == 0 ? "every layer slides (" + pkey + " 0); "
                       : "sliding unless il % " + std::to_string(p) + " == " + std::to_string(p - 1) + " (" + pkey + "); ";
      }
      for (uint32_t i = 0; i < n_main; ++i) any_swa = any_swa || (swa[i] && kind[i] == LayerKind::full_attention);
      if (any_swa && g.sliding_window == 0)
        fail("'" + pkey + "' marks sliding layers but '" + key("attention.sliding_window") + "' is missing or 0");
    } else if (g.sliding_window > 0) {
      uint32_t p = 0;
      if (arch_ == "gemma3") p = 6;
      else if (arch_ == "gemma2") p = 2;
      else if (arch_ == "cohere2") p = 4;
      if (p) {
        for (uint32_t i = 0; i < n; ++i) swa[i] = i % p < p - 1;
        rule += "sliding unless (il + 1) % " + std::to_string(p) + " == 0 (llama.cpp's built-in pattern for " + arch_ + "); ";
      } else {
        rule += "sliding_window set but no pattern known for " + arch_ + ": every attention layer counted as full; ";
      }
    }
    for (uint32_t i = 0; i < n_main; ++i)
      if (swa[i] && kind[i] == LayerKind::full_attention) kind[i] = LayerKind::sliding_window;
    if (rule.empty()) rule = "every layer has full attention; ";
    rule.resize(rule.size() - 2);
    g.layer_rule = rule;

    g.layers.resize(n);
    for (uint32_t i = 0; i < n; ++i) {
      LayerInfo& l = g.layers[i];
      l.kind = kind[i];
      l.n_head = (*heads)[i];
      l.n_head_kv = heads_kv[i];
      if (l.kind == LayerKind::recurrent) continue;
      const bool sl = l.kind == LayerKind::sliding_window;
      std::optional<uint32_t> dk = sl && klen_swa ? klen_swa : klen;
      std::optional<uint32_t> dv = sl && vlen_swa ? vlen_swa : vlen;
      if (!dk || !dv) {
        if (!embd || l.n_head == 0)
          fail("layer " + std::to_string(i) + ": no '" + key("attention.key_length") + "' and no embedding_length / head_count to derive it");
        if (*embd % l.n_head != 0)
          fail("layer " + std::to_string(i) + ": embedding_length " + std::to_string(*embd) +
               " is not a multiple of head_count " + std::to_string(l.n_head));
        if (!dk) dk = *embd / l.n_head;
        if (!dv) dv = *embd / l.n_head;
      }
      l.head_dim_k = *dk;
      l.head_dim_v = *dv;
      if (l.kind == LayerKind::full_attention && (l.n_head_kv == 0 || l.head_dim_k == 0 || l.head_dim_v == 0))
        fail("layer " + std::to_string(i) + ": a full-attention layer needs kv heads and head_dim > 0");
      if (l.n_head_kv > l.n_head && l.n_head > 0)
        fail("layer " + std::to_string(i) + ": head_count_kv " + std::to_string(l.n_head_kv) + " exceeds head_count " +
             std::to_string(l.n_head));
    }
    return g;
  }

 private:
  const GgufFile& f_;
  std::string arch_;
};

}  // namespace

ModelGeometry geometry_from_gguf(const GgufFile& f) { return GeometryReader(f).read(); }

}  // namespace sjkv
