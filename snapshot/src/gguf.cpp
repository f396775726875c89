#include "sjkv/io/gguf.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "byte_reader.h"

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

using bin::load_le;

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

const char* GgufTensorInfo::type_name() const {
  const BlockFormatInfo* t = format_by_gguf_id(type);
  return t ? t->gguf_name : "?";
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
  GgufParser(GgufFile& f, const uint8_t* p, uint64_t size) : f_(f), in_(f.path_, p, size) {}

  void run() {
    header();
    for (uint64_t i = 0; i < n_kv_; ++i) kv(i);
    alignment();
    for (uint64_t i = 0; i < n_tensors_; ++i) tensor(i);
    data_section();
  }

 private:
  [[noreturn]] void fail(const std::string& defect) const { in_.fail(defect); }
  uint64_t remaining() const { return in_.remaining(); }
  void need(uint64_t n, const std::string& what) const { in_.need(n, what); }
  uint64_t uint(unsigned n, const std::string& what) { return in_.uint(n, what); }

  std::string string(const std::string& what, uint64_t max_len) {
    const uint64_t at = in_.pos();
    const uint64_t len = uint(8, what + " length");
    if (len > max_len)
      fail(what + " at offset " + std::to_string(at) + " is " + std::to_string(len) + " bytes, more than the " +
           std::to_string(max_len) + " allowed");
    if (len > remaining())
      fail("truncated: " + what + " at offset " + std::to_string(at) + " claims " + std::to_string(len) +
           " bytes but only " + std::to_string(remaining()) + " remain");
    std::string s(reinterpret_cast<const char*>(in_.here()), static_cast<size_t>(len));
    in_.skip(len, what);
    return s;
  }

  void header() {
    const uint8_t* p = in_.data();
    if (in_.size() < 4) fail("truncated: " + std::to_string(in_.size()) + " bytes is too short for the GGUF magic");
    if (std::memcmp(p, "GGUF", 4) != 0)
      fail("not a GGUF file: magic '" + printable(std::string_view(reinterpret_cast<const char*>(p), 4)) +
           "' (bytes " + hex32(bin::get_u32(p)) + "), expected 'GGUF'");
    in_.seek(4);
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
    v.raw_.assign(in_.here(), in_.here() + bytes);
    in_.skip(bytes, k + " value");
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
    const BlockFormatInfo* ti = format_by_gguf_id(t.type);
    if (!ti) {
      if (const char* old = removed_gguf_type_name(t.type))
        fail(k + " has ggml type " + std::to_string(t.type) + " (" + old + "), which was removed from GGUF");
      fail(k + " has unknown ggml type " + std::to_string(t.type));
    }
    if (t.dims[0] % ti->block_values != 0)
      fail(k + " rows of " + std::to_string(t.dims[0]) + " values are not a whole number of " + ti->gguf_name +
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
    const uint64_t pos = in_.pos();
    f_.data_offset_ = pos;
    if (f_.tensors_.empty()) return;
    const uint64_t a = f_.alignment_;
    const uint64_t pad = (a - pos % a) % a;
    f_.data_offset_ = pos + pad;
    if (pad > remaining())
      fail("truncated: the data section would start at offset " + std::to_string(f_.data_offset_) +
           ", past the end of the " + std::to_string(in_.size()) + "-byte file");
    const uint64_t data = in_.size() - f_.data_offset_;
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
  bin::ByteReader in_;
  uint64_t n_tensors_ = 0, n_kv_ = 0;
};

// ---- GgufFile --------------------------------------------------------------------------------

GgufFile GgufFile::open(const std::string& path) {
  return from(bin::InputFile::open(path));
}

GgufFile GgufFile::parse(std::vector<uint8_t> bytes, const std::string& name) {
  return from(bin::InputFile::hold(std::move(bytes), name));
}

GgufFile GgufFile::from(const bin::InputFile& in) {
  GgufFile f;
  f.path_ = in.path();
  if (in.size() == 0) throw FileError(f.path_, "truncated: the file is empty");
  f.bytes_ = in.share();
  f.size_ = in.size();
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

}  // namespace sjkv
