// GGUF reader (replay/gguf.h): files built by the small writer below, parsed back; one reject
// per named defect; geometry of the layer patterns the reader knows; a robustness sweep over
// truncations and byte flips; and, when it is on this machine, the real Gemma 3 270M GGUF.
//
// The writer's layout is GGUF v3 as ggml/include/gguf.h documents it (little-endian):
//   "GGUF" | u32 version | i64 n_tensors | i64 n_kv
//   n_kv x { u64 key length, key bytes | i32 type | value }
//     scalar: its bytes; string: u64 length + bytes; array: i32 element type | u64 count | elements
//   n_tensors x { u64 name length, name | u32 n_dims | i64 ne[n_dims] | i32 ggml type | u64 offset }
//   zero padding to the alignment | tensor data (zeros unless a test fills it)
// Every count, length and field can be overridden so that a test writes exactly one defect.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "../model_dir.h"
#include "sjkv/io/model_geometry.h"

namespace {

using sjkv::FileError;
using sjkv::GgufFile;
using sjkv::GgufType;
using sjkv::LayerKind;

// ---- Writer ----------------------------------------------------------------------------------

class Bytes {
 public:
  Bytes& u8(uint8_t v) { b_.push_back(v); return *this; }
  Bytes& le(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) b_.push_back(static_cast<uint8_t>(v >> (8 * i)));
    return *this;
  }
  Bytes& u16(uint16_t v) { return le(v, 2); }
  Bytes& u32(uint32_t v) { return le(v, 4); }
  Bytes& u64(uint64_t v) { return le(v, 8); }
  Bytes& f32(float f) { uint32_t b; std::memcpy(&b, &f, 4); return u32(b); }
  Bytes& f64(double f) { uint64_t b; std::memcpy(&b, &f, 8); return u64(b); }
  Bytes& raw(const std::string& s) { b_.insert(b_.end(), s.begin(), s.end()); return *this; }
  Bytes& str(const std::string& s) { return u64(s.size()).raw(s); }
  Bytes& append(const Bytes& o) { b_.insert(b_.end(), o.b_.begin(), o.b_.end()); return *this; }
  size_t size() const { return b_.size(); }
  std::vector<uint8_t>& vec() { return b_; }
  const std::vector<uint8_t>& vec() const { return b_; }

 private:
  std::vector<uint8_t> b_;
};

constexpr uint32_t T(GgufType t) { return static_cast<uint32_t>(t); }

struct Tensor {
  std::string name;
  std::vector<uint64_t> dims;
  uint32_t type = 0;        // ggml type id (0 = F32)
  uint64_t offset = ~0ull;  // ~0: next aligned offset after the previous tensor
  uint64_t bytes = 0;       // data bytes the writer reserves for it
};

class Writer {
 public:
  std::string magic = "GGUF";
  uint32_t version = 3;
  int64_t n_tensors = -1;  // -1: the real count
  int64_t n_kv = -1;
  uint64_t alignment = 32;
  int64_t truncate_to = -1;   // cut the file to this many bytes
  bool data = true;           // write the data section

  Writer& kv(const std::string& key, uint32_t type, const Bytes& value) {
    Bytes b;
    b.str(key).u32(type).append(value);
    kvs_.push_back(b);
    return *this;
  }
  Writer& raw_kv(const Bytes& b) { kvs_.push_back(b); return *this; }
  Writer& u8(const std::string& k, uint8_t v) { return kv(k, T(GgufType::u8), Bytes().u8(v)); }
  Writer& i8(const std::string& k, int8_t v) { return kv(k, T(GgufType::i8), Bytes().u8(static_cast<uint8_t>(v))); }
  Writer& u16(const std::string& k, uint16_t v) { return kv(k, T(GgufType::u16), Bytes().u16(v)); }
  Writer& i16(const std::string& k, int16_t v) { return kv(k, T(GgufType::i16), Bytes().u16(static_cast<uint16_t>(v))); }
  Writer& u32(const std::string& k, uint32_t v) { return kv(k, T(GgufType::u32), Bytes().u32(v)); }
  Writer& i32(const std::string& k, int32_t v) { return kv(k, T(GgufType::i32), Bytes().u32(static_cast<uint32_t>(v))); }
  Writer& u64(const std::string& k, uint64_t v) { return kv(k, T(GgufType::u64), Bytes().u64(v)); }
  Writer& i64(const std::string& k, int64_t v) { return kv(k, T(GgufType::i64), Bytes().u64(static_cast<uint64_t>(v))); }
  Writer& f32(const std::string& k, float v) { return kv(k, T(GgufType::f32), Bytes().f32(v)); }
  Writer& f64(const std::string& k, double v) { return kv(k, T(GgufType::f64), Bytes().f64(v)); }
  Writer& boolean(const std::string& k, bool v) { return kv(k, T(GgufType::boolean), Bytes().u8(v ? 1 : 0)); }
  Writer& str(const std::string& k, const std::string& v) { return kv(k, T(GgufType::string), Bytes().str(v)); }
  Writer& arr_u32(const std::string& k, const std::vector<uint32_t>& v) {
    Bytes b;
    b.u32(T(GgufType::u32)).u64(v.size());
    for (uint32_t x : v) b.u32(x);
    return kv(k, T(GgufType::array), b);
  }
  Writer& arr_i32(const std::string& k, const std::vector<int32_t>& v) {
    Bytes b;
    b.u32(T(GgufType::i32)).u64(v.size());
    for (int32_t x : v) b.u32(static_cast<uint32_t>(x));
    return kv(k, T(GgufType::array), b);
  }
  Writer& arr_bool(const std::string& k, const std::vector<bool>& v) {
    Bytes b;
    b.u32(T(GgufType::boolean)).u64(v.size());
    for (bool x : v) b.u8(x ? 1 : 0);
    return kv(k, T(GgufType::array), b);
  }
  Writer& arr_f32(const std::string& k, const std::vector<float>& v) {
    Bytes b;
    b.u32(T(GgufType::f32)).u64(v.size());
    for (float x : v) b.f32(x);
    return kv(k, T(GgufType::array), b);
  }
  Writer& arr_str(const std::string& k, const std::vector<std::string>& v) {
    Bytes b;
    b.u32(T(GgufType::string)).u64(v.size());
    for (const std::string& x : v) b.str(x);
    return kv(k, T(GgufType::array), b);
  }
  Writer& tensor(const Tensor& t) { tensors_.push_back(t); return *this; }
  // F32 tensor of the given shape, data bytes reserved for it.
  Writer& f32_tensor(const std::string& name, std::vector<uint64_t> dims) {
    uint64_t n = 1;
    for (uint64_t d : dims) n *= d;
    return tensor({name, dims, 0, ~0ull, 4 * n});
  }

  std::vector<uint8_t> bytes() const {
    Bytes b;
    b.raw(magic).u32(version);
    b.u64(static_cast<uint64_t>(n_tensors >= 0 ? n_tensors : static_cast<int64_t>(tensors_.size())));
    b.u64(static_cast<uint64_t>(n_kv >= 0 ? n_kv : static_cast<int64_t>(kvs_.size())));
    for (const Bytes& k : kvs_) b.append(k);
    uint64_t next = 0, end = 0;
    for (const Tensor& t : tensors_) {
      const uint64_t off = t.offset != ~0ull ? t.offset : next;
      b.str(t.name).u32(static_cast<uint32_t>(t.dims.size()));
      for (uint64_t d : t.dims) b.u64(d);
      b.u32(t.type).u64(off);
      next = (off + t.bytes + alignment - 1) / alignment * alignment;
      // Data the writer actually lays down; offsets meant to point past the file reserve none.
      if (off < (1u << 24) && t.bytes < (1u << 24)) end = std::max(end, off + t.bytes);
    }
    if (data && !tensors_.empty()) {
      while (b.size() % alignment) b.u8(0);
      for (uint64_t i = 0; i < end; ++i) b.u8(static_cast<uint8_t>(i * 7 + 1));
    }
    std::vector<uint8_t> v = b.vec();
    if (truncate_to >= 0) v.resize(static_cast<size_t>(truncate_to));
    return v;
  }

  GgufFile parse() const { return GgufFile::parse(bytes(), "test.gguf"); }

 private:
  std::vector<Bytes> kvs_;
  std::vector<Tensor> tensors_;
};

// The defect message of parsing `w`, or "" when it parses.
std::string defect(const Writer& w) {
  try {
    w.parse();
  } catch (const FileError& e) {
    EXPECT_EQ(e.path(), "test.gguf");
    EXPECT_EQ(std::string(e.what()), "test.gguf: " + e.defect());
    return e.defect();
  }
  return "";
}

#define EXPECT_REJECTS(writer, fragment)                                       \
  do {                                                                         \
    const std::string d_ = defect(writer);                                     \
    EXPECT_NE(d_, "") << "accepted; expected: " << (fragment);                 \
    EXPECT_NE(d_.find(fragment), std::string::npos) << "defect: " << d_;       \
  } while (0)

// A small valid model file: llama-like, two tensors.
Writer valid() {
  Writer w;
  w.str("general.architecture", "llama").u32("llama.block_count", 2).u32("llama.attention.head_count", 8);
  w.u32("llama.attention.head_count_kv", 2).u32("llama.embedding_length", 512);
  w.f32_tensor("a.weight", {64, 2}).f32_tensor("b.weight", {3});
  return w;
}

std::string temp_path(const std::string& name) {
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir && *dir ? dir : "/tmp") + "/sjkv_test_gguf_" + std::to_string(::getpid()) + "_" + name;
}

void write_file(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream o(path, std::ios::binary);
  o.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

// ---- Parsing ---------------------------------------------------------------------------------

TEST(Gguf, EmptyFileOfNoKeysAndNoTensors) {
  Writer w;
  const GgufFile f = w.parse();
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_TRUE(f.metadata().empty());
  EXPECT_TRUE(f.tensors().empty());
  EXPECT_EQ(f.file_size(), 24u);
  EXPECT_EQ(f.data_offset(), 24u);
}

TEST(Gguf, EveryValueType) {
  Writer w;
  w.u8("a.u8", 200).i8("a.i8", -5).u16("a.u16", 60000).i16("a.i16", -30000).u32("a.u32", 4000000000u);
  w.i32("a.i32", -7).u64("a.u64", 1ull << 60).i64("a.i64", -(1ll << 50)).f32("a.f32", 1.5f).f64("a.f64", -2.25);
  w.boolean("a.t", true).boolean("a.f", false).str("a.s", "hello").str("a.empty", "");
  w.arr_u32("b.u32", {1, 2, 3}).arr_i32("b.i32", {-1, 0, 1}).arr_bool("b.bool", {true, false});
  w.arr_f32("b.f32", {0.5f, -1.0f}).arr_str("b.str", {"x", "", "yz"}).arr_u32("b.empty", {});
  const GgufFile f = w.parse();
  ASSERT_EQ(f.metadata().size(), 20u);
  EXPECT_EQ(f.metadata()[0].key, "a.u8");  // file order
  EXPECT_EQ(f.get_u8("a.u8"), 200);
  EXPECT_EQ(f.get_i8("a.i8"), -5);
  EXPECT_EQ(f.get_u16("a.u16"), 60000);
  EXPECT_EQ(f.get_i16("a.i16"), -30000);
  EXPECT_EQ(f.get_u32("a.u32"), 4000000000u);
  EXPECT_EQ(f.get_i32("a.i32"), -7);
  EXPECT_EQ(f.get_u64("a.u64"), 1ull << 60);
  EXPECT_EQ(f.get_i64("a.i64"), -(1ll << 50));
  EXPECT_EQ(f.get_f32("a.f32"), 1.5f);
  EXPECT_EQ(f.get_f64("a.f64"), -2.25);
  EXPECT_TRUE(f.get_bool("a.t"));
  EXPECT_FALSE(f.get_bool("a.f"));
  EXPECT_EQ(f.get_string("a.s"), "hello");
  EXPECT_EQ(f.get_string("a.empty"), "");
  const sjkv::GgufValue& u = f.get_array("b.u32");
  EXPECT_TRUE(u.is_array());
  EXPECT_EQ(u.type(), GgufType::u32);
  ASSERT_EQ(u.count(), 3u);
  EXPECT_EQ(u.u32(2), 3u);
  EXPECT_EQ(f.get_array("b.i32").i32(0), -1);
  EXPECT_EQ(f.get_array("b.i32").to_unsigned(0), std::nullopt);
  EXPECT_EQ(f.get_array("b.i32").to_signed(0), -1);
  EXPECT_TRUE(f.get_array("b.bool").boolean(0));
  EXPECT_EQ(f.get_array("b.f32").f32(1), -1.0f);
  EXPECT_EQ(f.get_array("b.str").strings(), (std::vector<std::string>{"x", "", "yz"}));
  EXPECT_EQ(f.get_array("b.empty").count(), 0u);
  // Lenient integers for counts: any integer type whose value fits and is not negative.
  EXPECT_EQ(f.get_uint("a.u8"), 200u);
  EXPECT_EQ(f.get_uint("a.u64"), 1ull << 60);
  EXPECT_THROW(f.get_uint("a.i32"), FileError);   // negative
  EXPECT_THROW(f.get_uint("a.t"), FileError);     // bool
  EXPECT_THROW(f.get_uint("a.f32"), FileError);
  EXPECT_THROW(f.get_uint("b.u32"), FileError);   // array
  // Strict typed access.
  try {
    f.get_u32("a.i32");
    FAIL();
  } catch (const FileError& e) {
    EXPECT_EQ(e.defect(), "key 'a.i32' is i32, expected u32");
  }
  try {
    f.get_u32("nope");
    FAIL();
  } catch (const FileError& e) {
    EXPECT_EQ(e.defect(), "missing key 'nope'");
  }
  EXPECT_THROW(f.get_string("b.str"), FileError);  // an array of strings is not a string
  EXPECT_THROW(f.get_array("a.s"), FileError);
  EXPECT_THROW(f.get_array("a.u32"), FileError);  // a scalar is not an array
  EXPECT_THROW(u.i32(0), std::invalid_argument);
  EXPECT_THROW(u.u32(3), std::out_of_range);
  EXPECT_FALSE(f.has("A.U8"));
}

TEST(Gguf, TensorsOffsetsAndData) {
  Writer w = valid();
  w.u32("general.alignment", 64);
  w.alignment = 64;
  w.tensor({"q", {64, 4}, 8, ~0ull, 4 * 2 * 34});  // Q8_0: 2 blocks per row, 4 rows
  const GgufFile f = w.parse();
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.data_offset() % 64, 0u);
  ASSERT_EQ(f.tensors().size(), 3u);
  const sjkv::GgufTensorInfo* a = f.find_tensor("a.weight");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->dims, (std::vector<uint64_t>{64, 2}));
  EXPECT_EQ(a->n_elements, 128u);
  EXPECT_EQ(a->n_bytes, 512u);
  EXPECT_EQ(a->offset, 0u);
  EXPECT_STREQ(a->type_name(), "F32");
  const sjkv::GgufTensorInfo* b = f.find_tensor("b.weight");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->offset, 512u);
  const sjkv::GgufTensorInfo* q = f.find_tensor("q");
  ASSERT_NE(q, nullptr);
  EXPECT_STREQ(q->type_name(), "Q8_0");
  EXPECT_EQ(q->n_bytes, 272u);
  EXPECT_EQ(q->offset, 576u);
  EXPECT_EQ(f.find_tensor("missing"), nullptr);
  // The data the writer laid down: byte i of the section is i * 7 + 1.
  EXPECT_EQ(f.tensor_data(*b)[0], static_cast<uint8_t>(512 * 7 + 1));
  EXPECT_EQ(f.tensor_data(*q)[5], static_cast<uint8_t>((576 + 5) * 7 + 1));
  // Every known ggml type has a non-zero block; removed ids are unknown.
  EXPECT_EQ(sjkv::format_by_gguf_id(12)->block_bytes, 144u);  // Q4_K
  EXPECT_EQ(sjkv::format_by_gguf_id(31), nullptr);
}

TEST(Gguf, OpenFromDisk) {
  const std::string path = temp_path("ok.gguf");
  const std::vector<uint8_t> b = valid().bytes();
  write_file(path, b);
  GgufFile f = GgufFile::open(path);
  EXPECT_EQ(f.path(), path);
  EXPECT_EQ(f.file_size(), b.size());
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.tensors().size(), 2u);
  EXPECT_EQ(f.tensor_data(f.tensors()[1])[0], b[f.data_offset() + 512]);
  const GgufFile moved = std::move(f);  // the mapping moves with it
  EXPECT_EQ(moved.tensors().size(), 2u);
  std::remove(path.c_str());

  try {
    GgufFile::open(path);
    FAIL();
  } catch (const FileError& e) {
    EXPECT_EQ(e.path(), path);
    EXPECT_NE(e.defect().find("cannot open"), std::string::npos);
  }
  write_file(path, {});
  try {
    GgufFile::open(path);
    FAIL();
  } catch (const FileError& e) {
    EXPECT_EQ(e.defect(), "truncated: the file is empty");
  }
  std::remove(path.c_str());
  const std::string dir = temp_path("dir");
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  EXPECT_THROW(GgufFile::open(dir), FileError);
  ::rmdir(dir.c_str());
}

// ---- Rejects: one per named defect -----------------------------------------------------------

TEST(GgufReject, Magic) {
  Writer w;
  w.magic = "GGML";
  EXPECT_REJECTS(w, "not a GGUF file: magic 'GGML'");
  w.magic = std::string("\x00\x01GG", 4);
  EXPECT_REJECTS(w, "magic '??GG'");
  w = Writer();
  w.truncate_to = 3;
  EXPECT_REJECTS(w, "too short for the GGUF magic");
}

TEST(GgufReject, Versions) {
  Writer w;
  w.version = 1;
  EXPECT_REJECTS(w, "GGUF version 1 is not supported");
  w.version = 2;
  EXPECT_REJECTS(w, "GGUF version 2 is not supported: version 3 is required");
  w.version = 4;
  EXPECT_REJECTS(w, "GGUF version 4 is newer than the supported version 3");
  w.version = 0;
  EXPECT_REJECTS(w, "invalid GGUF version 0");
  w.version = 0x03000000u;  // version 3 written big-endian
  EXPECT_REJECTS(w, "big-endian GGUF files are not supported");
}

TEST(GgufReject, TruncatedHeader) {
  Writer w;
  w.truncate_to = 12;
  EXPECT_REJECTS(w, "truncated: tensor count at offset 8");
  w.truncate_to = 20;
  EXPECT_REJECTS(w, "truncated: metadata count");
}

TEST(GgufReject, CountsAgainstRemainingBytes) {
  // Negative counts: the writer's -1 means "the real count", so these are written by hand.
  Bytes b;
  b.raw("GGUF").u32(3).u64(static_cast<uint64_t>(-5ll)).u64(0);
  try {
    GgufFile::parse(b.vec(), "test.gguf");
    FAIL();
  } catch (const FileError& e) {
    EXPECT_EQ(e.defect(), "tensor count -5 is negative");
  }
  Bytes c;
  c.raw("GGUF").u32(3).u64(0).u64(static_cast<uint64_t>(-1ll));
  try {
    GgufFile::parse(c.vec(), "test.gguf");
    FAIL();
  } catch (const FileError& e) {
    EXPECT_EQ(e.defect(), "metadata count -1 is negative");
  }
  Writer t = valid();
  t.n_tensors = 1ll << 40;
  EXPECT_REJECTS(t, "more than the");
  Writer k = valid();
  k.n_kv = 1000000;
  EXPECT_REJECTS(k, "metadata pairs, more than the");
}

TEST(GgufReject, StringLengths) {
  Writer w;
  w.raw_kv(Bytes().u64(1ull << 40).raw("k").u64(0));  // key length far beyond the file
  EXPECT_REJECTS(w, "metadata key 0 at offset 24 is 1099511627776 bytes, more than the 65535 allowed");
  Writer v;
  v.raw_kv(Bytes().str("k").u32(T(GgufType::string)).u64(1000).raw("short"));
  EXPECT_REJECTS(v, "truncated: key 'k' value at offset");
  Writer big;
  big.str(std::string(65536, 'k'), "v");
  EXPECT_REJECTS(big, "more than the 65535 allowed");
  Writer ok;
  ok.str(std::string(65535, 'k'), "v");
  EXPECT_EQ(defect(ok), "");
}

TEST(GgufReject, Keys) {
  Writer e;
  e.u32("", 1);
  EXPECT_REJECTS(e, "metadata key 0 is empty");
  Writer na;
  na.u32("caf\xc3\xa9", 1);
  EXPECT_REJECTS(na, "is not printable ASCII");
  Writer ctl;
  ctl.u32("a\nb", 1);
  EXPECT_REJECTS(ctl, "is not printable ASCII");
  Writer d;
  d.u32("a.b", 1).str("a.b", "x");
  EXPECT_REJECTS(d, "duplicate metadata key 'a.b'");
}

TEST(GgufReject, ValueTypes) {
  Writer u;
  u.kv("k", 13, Bytes().u32(0));
  EXPECT_REJECTS(u, "key 'k' has unknown value type 13");
  Writer nested;
  nested.kv("k", T(GgufType::array), Bytes().u32(T(GgufType::array)).u64(0));
  EXPECT_REJECTS(nested, "key 'k' is an array of arrays");
  Writer ue;
  ue.kv("k", T(GgufType::array), Bytes().u32(77).u64(0));
  EXPECT_REJECTS(ue, "key 'k' is an array of unknown value type 77");
  Writer count;
  count.kv("k", T(GgufType::array), Bytes().u32(T(GgufType::u64)).u64(1ull << 61));
  EXPECT_REJECTS(count, "truncated: key 'k' claims 2305843009213693952 u64 elements");
  Writer scount;  // strings need at least 8 bytes each
  scount.kv("k", T(GgufType::array), Bytes().u32(T(GgufType::string)).u64(3).u64(0).u64(0));
  EXPECT_REJECTS(scount, "claims 3 string elements");
  Writer b;
  b.kv("k", T(GgufType::boolean), Bytes().u8(2));
  EXPECT_REJECTS(b, "key 'k' is bool 2, not 0 or 1");
  Writer ba;
  ba.kv("k", T(GgufType::array), Bytes().u32(T(GgufType::boolean)).u64(2).u8(1).u8(255));
  EXPECT_REJECTS(ba, "key 'k' element 1 is bool 255");
  Writer cut;
  cut.kv("k", T(GgufType::u32), Bytes().u16(7));
  EXPECT_REJECTS(cut, "truncated: key 'k' value");
  Writer cut_type;
  cut_type.raw_kv(Bytes().str("kkkk").u16(0));
  EXPECT_REJECTS(cut_type, "truncated: key 'kkkk' type");
}

TEST(GgufReject, Alignment) {
  Writer t = valid();
  t.u64("general.alignment", 32);
  EXPECT_REJECTS(t, "general.alignment must be a u32, not u64");
  Writer z = valid();
  z.u32("general.alignment", 0);
  EXPECT_REJECTS(z, "general.alignment 0 is not a power of two");
  Writer np = valid();
  np.u32("general.alignment", 48);
  EXPECT_REJECTS(np, "general.alignment 48 is not a power of two");
  Writer arr = valid();
  arr.arr_u32("general.alignment", {32});
  EXPECT_REJECTS(arr, "must be a u32, not an array of u32");
}

TEST(GgufReject, TensorNames) {
  Writer e;
  e.f32_tensor("", {4});
  EXPECT_REJECTS(e, "tensor 0 has an empty name");
  Writer l;
  l.f32_tensor(std::string(64, 'n'), {4});
  EXPECT_REJECTS(l, "is 64 bytes, more than ggml's 63");
  Writer ok;
  ok.f32_tensor(std::string(63, 'n'), {4});
  EXPECT_EQ(defect(ok), "");
  Writer d;
  d.f32_tensor("t", {4}).f32_tensor("t", {4});
  EXPECT_REJECTS(d, "duplicate tensor name 't'");
}

TEST(GgufReject, TensorShapes) {
  Writer z;
  z.tensor({"t", {}, 0, 0, 0});
  EXPECT_REJECTS(z, "tensor 't' has 0 dimensions; 1 to 4 are allowed");
  Writer five;
  five.tensor({"t", {1, 1, 1, 1, 1}, 0, 0, 4});
  EXPECT_REJECTS(five, "has 5 dimensions");
  Writer neg;
  neg.tensor({"t", {4, static_cast<uint64_t>(-3ll)}, 0, 0, 0});
  EXPECT_REJECTS(neg, "tensor 't' dimension 1 is negative (-3)");
  Writer ovf;
  ovf.tensor({"t", {1ull << 32, 1ull << 32}, 0, 0, 0});
  EXPECT_REJECTS(ovf, "tensor 't' element count overflows");
  Writer bytes;  // 2^62 elements fit, 2^64 bytes of F32 do not
  bytes.tensor({"t", {1ull << 31, 1ull << 31}, 0, 0, 0});
  EXPECT_REJECTS(bytes, "tensor 't' byte size overflows");
  Writer zero;  // a zero dimension is an empty tensor, whatever the others are
  zero.tensor({"t", {0, 1ull << 40, 1ull << 40}, 0, 0, 0});
  EXPECT_EQ(defect(zero), "");
}

TEST(GgufReject, TensorTypes) {
  Writer u;
  u.tensor({"t", {32}, 99, 0, 0});
  EXPECT_REJECTS(u, "tensor 't' has unknown ggml type 99");
  Writer r;
  r.tensor({"t", {32}, 31, 0, 0});
  EXPECT_REJECTS(r, "ggml type 31 (Q4_0_4_4), which was removed from GGUF");
  Writer blk;
  blk.tensor({"t", {33, 2}, 8, 0, 0});
  EXPECT_REJECTS(blk, "rows of 33 values are not a whole number of Q8_0 blocks (32 values)");
}

TEST(GgufReject, TensorOffsets) {
  Writer mis = valid();
  mis.tensor({"c", {4}, 0, 16, 16});
  EXPECT_REJECTS(mis, "tensor 'c' offset 16 is not a multiple of the alignment 32");
  Writer past = valid();
  past.tensor({"c", {4}, 0, 1ull << 40, 0});
  EXPECT_REJECTS(past, "tensor 'c' data [1099511627776, +16) runs past the end");
  Writer wrap = valid();
  wrap.tensor({"c", {4}, 0, ~0ull - 31, 0});
  EXPECT_REJECTS(wrap, "runs past the end");
  Writer over = valid();
  over.tensor({"c", {256}, 0, 256, 1024});  // 1 KiB from 256 overlaps a.weight's [0, 512)
  EXPECT_REJECTS(over, "tensor 'c' data overlaps tensor 'a.weight'");
  Writer cut = valid();
  cut.truncate_to = static_cast<int64_t>(valid().bytes().size()) - 1;
  EXPECT_REJECTS(cut, "runs past the end");
  Writer nodata;  // the header ends unaligned and the file ends with it
  nodata.tensor({"t", {0}, 0, 0, 0});
  nodata.data = false;
  EXPECT_REJECTS(nodata, "truncated: the data section would start at offset");
}

TEST(GgufReject, TruncatedAnywhere) {
  // Every proper prefix of a valid file is rejected, and always as a FileError.
  const std::vector<uint8_t> full = valid().bytes();
  for (size_t n = 0; n < full.size(); ++n) {
    std::vector<uint8_t> p(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n));
    EXPECT_THROW(GgufFile::parse(p, "cut"), FileError) << n;
  }
  EXPECT_NO_THROW(GgufFile::parse(full, "full"));
}

TEST(GgufReject, FlippedBytesNeverCrash) {
  // Random byte flips: every outcome is a parse or a FileError, never another exception or a
  // crash (run under ASan/UBSan for the strong form of this check).
  Writer w = valid();
  w.arr_str("tok", {"a", "bb", "ccc"}).arr_u32("per_layer", {1, 2});
  const std::vector<uint8_t> base = w.bytes();
  std::mt19937_64 rng(12345);
  int parsed = 0, rejected = 0;
  for (int it = 0; it < 4000; ++it) {
    std::vector<uint8_t> b = base;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int j = 0; j < flips; ++j) b[rng() % b.size()] = static_cast<uint8_t>(rng());
    try {
      const GgufFile f = GgufFile::parse(std::move(b), "fuzz");
      try {
        (void)sjkv::geometry_from_gguf(f);
      } catch (const FileError&) {
      }
      ++parsed;
    } catch (const FileError&) {
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 0);
  EXPECT_GT(parsed, 0);
}

// ---- Stored must-reject files ------------------------------------------------------------------
//
// tests/reject/gguf/: one small file per named defect (and one valid control file), opened by
// path as a user would. The table below is their generator and their expected defect; every
// file of the folder must be in it, and the stored bytes must be what the generator writes, so
// a fixture that starts failing for another reason (or drifts from its recipe) is caught.
// The fuzz corpus holds a copy of each as corpus/gguf/reject-<name>.gguf.

struct StoredCase {
  const char* name;    // file name without ".gguf"
  const char* defect;  // what is wrong with it, for the README
  const char* expect;  // text the FileError's defect must contain; "" for the valid control file
  std::function<std::vector<uint8_t>()> make;
};

std::vector<uint8_t> raw_header(uint64_t n_tensors, uint64_t n_kv) {
  Bytes b;
  b.raw("GGUF").u32(3).u64(n_tensors).u64(n_kv);
  return b.vec();
}

// A case from a change to the small valid file (or to an empty one when `base` is false).
StoredCase with(const char* name, const char* what, const char* expect, std::function<void(Writer&)> edit,
                bool base = true) {
  return {name, what, expect, [edit, base] {
            Writer w = base ? valid() : Writer();
            edit(w);
            return w.bytes();
          }};
}

const std::vector<StoredCase>& stored_cases() {
  static const std::vector<StoredCase> cases = {
      with("valid-control", "none: a llama-like header, two F32 tensors (must open)", "", [](Writer&) {}),
      // Header
      with("bad-magic", "magic 'GGML'", "not a GGUF file: magic 'GGML' (bytes 0x4c4d4747), expected 'GGUF'", [](Writer& w) { w.magic = "GGML"; }),
      with("too-short-for-magic", "3 bytes", "truncated: 3 bytes is too short for the GGUF magic", [](Writer& w) { w.truncate_to = 3; },
           false),
      with("version-0", "version 0", "invalid GGUF version 0", [](Writer& w) { w.version = 0; }),
      with("version-1", "version 1", "GGUF version 1 is not supported: it used 32-bit counts and lengths", [](Writer& w) { w.version = 1; }),
      with("version-2", "version 2", "GGUF version 2 is not supported: version 3 is required",
           [](Writer& w) { w.version = 2; }),
      with("version-4", "version 4 (newer)", "GGUF version 4 is newer than the supported version 3",
           [](Writer& w) { w.version = 4; }),
      with("version-byte-swapped", "version 3 written big-endian", "GGUF version field 0x03000000 looks byte-swapped: big-endian GGUF files are not supported",
           [](Writer& w) { w.version = 0x03000000u; }),
      with("truncated-tensor-count", "the file ends inside the tensor count", "truncated: tensor count at offset 8 needs 8 bytes, 4 left",
           [](Writer& w) { w.truncate_to = 12; }, false),
      with("truncated-metadata-count", "the file ends inside the metadata count", "truncated: metadata count at offset 16 needs 8 bytes, 4 left",
           [](Writer& w) { w.truncate_to = 20; }, false),
      // Counts against the bytes that remain
      {"tensor-count-negative", "n_tensors = -5", "tensor count -5 is negative",
       [] { return raw_header(static_cast<uint64_t>(-5ll), 0); }},
      {"metadata-count-negative", "n_kv = -1", "metadata count -1 is negative",
       [] { return raw_header(0, static_cast<uint64_t>(-1ll)); }},
      with("tensor-count-past-end", "n_tensors = 2^40", "header claims 1099511627776 tensors and 5 metadata pairs, more than the 820 remaining bytes can hold",
           [](Writer& w) { w.n_tensors = 1ll << 40; }),
      with("metadata-count-past-end", "n_kv = 10^6", "header claims 2 tensors and 1000000 metadata pairs, more than the 820 remaining bytes can hold",
           [](Writer& w) { w.n_kv = 1000000; }),
      // Strings and keys
      with("key-too-long", "key length 65,536 (ggml's limit is 65,535)", "metadata key 0 at offset 24 is 65536 bytes, more than the 65535 allowed",
           [](Writer& w) { w.raw_kv(Bytes().u64(65536).raw("k").u32(T(GgufType::u32)).u32(1)); }, false),
      with("key-length-past-end", "key length 1,000 with 40 bytes left", "truncated: metadata key 0 at offset 24 claims 1000 bytes but only 40 remain",
           [](Writer& w) { w.raw_kv(Bytes().u64(1000).raw(std::string(40, 'k'))); }, false),
      with("string-past-end", "string value of 1,000 bytes with 5 left", "truncated: key 'k' value at offset 37 claims 1000 bytes but only 5 remain",
           [](Writer& w) { w.raw_kv(Bytes().str("k").u32(T(GgufType::string)).u64(1000).raw("short")); }, false),
      with("key-empty", "empty key", "metadata key 0 is empty", [](Writer& w) { w.u32("", 1); }, false),
      with("key-not-ascii", "key 'caf\\xc3\\xa9' (UTF-8)", "metadata key 0 'caf?\?' is not printable ASCII",
           [](Writer& w) { w.u32("caf\xc3\xa9", 1); }, false),
      with("key-control-char", "key 'a\\nb'", "metadata key 0 'a?b' is not printable ASCII", [](Writer& w) { w.u32("a\nb", 1); }, false),
      with("key-duplicate", "key 'a.b' twice", "duplicate metadata key 'a.b'",
           [](Writer& w) { w.u32("a.b", 1).str("a.b", "x"); }, false),
      // Values
      with("value-type-unknown", "value type 13", "key 'k' has unknown value type 13",
           [](Writer& w) { w.kv("k", 13, Bytes().u32(0)); }, false),
      with("value-truncated", "a u32 value cut to 2 bytes at the end of the file", "truncated: key 'k' value at offset 37 needs 4 bytes, 2 left",
           [](Writer& w) { w.kv("k", T(GgufType::u32), Bytes().u16(7)); }, false),
      with("array-nested", "an array of arrays", "key 'k' is an array of arrays, which GGUF does not allow",
           [](Writer& w) { w.kv("k", T(GgufType::array), Bytes().u32(T(GgufType::array)).u64(0)); }, false),
      with("array-type-unknown", "an array of value type 77", "key 'k' is an array of unknown value type 77",
           [](Writer& w) { w.kv("k", T(GgufType::array), Bytes().u32(77).u64(0)); }, false),
      with("array-count-past-end", "an array of 2^61 u64", "truncated: key 'k' claims 2305843009213693952 u64 elements, more than the 0 remaining bytes can hold",
           [](Writer& w) { w.kv("k", T(GgufType::array), Bytes().u32(T(GgufType::u64)).u64(1ull << 61)); }, false),
      with("string-array-count-past-end", "an array of 3 strings with 16 bytes left", "truncated: key 'k' claims 3 string elements, more than the 16 remaining bytes can hold",
           [](Writer& w) {
             w.kv("k", T(GgufType::array), Bytes().u32(T(GgufType::string)).u64(3).u64(0).u64(0));
           },
           false),
      with("bool-2", "bool value 2", "key 'k' is bool 2, not 0 or 1",
           [](Writer& w) { w.kv("k", T(GgufType::boolean), Bytes().u8(2)); }, false),
      with("bool-array-255", "bool array element 1 = 255", "key 'k' element 1 is bool 255, not 0 or 1",
           [](Writer& w) { w.kv("k", T(GgufType::array), Bytes().u32(T(GgufType::boolean)).u64(2).u8(1).u8(255)); },
           false),
      // general.alignment
      with("alignment-u64", "general.alignment stored as u64", "general.alignment must be a u32, not u64",
           [](Writer& w) { w.u64("general.alignment", 32); }),
      with("alignment-array", "general.alignment stored as [32]", "must be a u32, not an array of u32",
           [](Writer& w) { w.arr_u32("general.alignment", {32}); }),
      with("alignment-0", "general.alignment = 0", "general.alignment 0 is not a power of two",
           [](Writer& w) { w.u32("general.alignment", 0); }),
      with("alignment-48", "general.alignment = 48", "general.alignment 48 is not a power of two",
           [](Writer& w) { w.u32("general.alignment", 48); }),
      // Tensor names and shapes
      with("tensor-name-empty", "a tensor named ''", "tensor 0 has an empty name",
           [](Writer& w) { w.f32_tensor("", {4}); }, false),
      with("tensor-name-64-bytes", "a 64-byte tensor name", "is 64 bytes, more than ggml's 63",
           [](Writer& w) { w.f32_tensor(std::string(64, 'n'), {4}); }, false),
      with("tensor-name-duplicate", "two tensors named 't'", "duplicate tensor name 't'",
           [](Writer& w) { w.f32_tensor("t", {4}).f32_tensor("t", {4}); }, false),
      with("tensor-dims-0", "a tensor of 0 dimensions", "tensor 't' has 0 dimensions; 1 to 4 are allowed",
           [](Writer& w) { w.tensor({"t", {}, 0, 0, 0}); }, false),
      with("tensor-dims-5", "a tensor of 5 dimensions", "tensor 't' has 5 dimensions; 1 to 4 are allowed",
           [](Writer& w) { w.tensor({"t", {1, 1, 1, 1, 1}, 0, 0, 4}); }, false),
      with("tensor-dim-negative", "ne[1] = -3", "tensor 't' dimension 1 is negative (-3)",
           [](Writer& w) { w.tensor({"t", {4, static_cast<uint64_t>(-3ll)}, 0, 0, 0}); }, false),
      with("tensor-elements-overflow", "ne = [2^32, 2^32]", "tensor 't' element count overflows 64 bits",
           [](Writer& w) { w.tensor({"t", {1ull << 32, 1ull << 32}, 0, 0, 0}); }, false),
      with("tensor-bytes-overflow", "F32, ne = [2^31, 2^31]: 2^64 bytes", "tensor 't' byte size overflows 64 bits",
           [](Writer& w) { w.tensor({"t", {1ull << 31, 1ull << 31}, 0, 0, 0}); }, false),
      // ggml types
      with("tensor-type-unknown", "ggml type 99", "tensor 't' has unknown ggml type 99",
           [](Writer& w) { w.tensor({"t", {32}, 99, 0, 0}); }, false),
      with("tensor-type-removed", "ggml type 31 (Q4_0_4_4)", "tensor 't' has ggml type 31 (Q4_0_4_4), which was removed from GGUF",
           [](Writer& w) { w.tensor({"t", {32}, 31, 0, 0}); }, false),
      with("tensor-row-partial-block", "Q8_0 rows of 33 values",
           "rows of 33 values are not a whole number of Q8_0 blocks (32 values)",
           [](Writer& w) { w.tensor({"t", {33, 2}, 8, 0, 0}); }, false),
      // Offsets
      with("tensor-offset-misaligned", "offset 16 with alignment 32",
           "tensor 'c' offset 16 is not a multiple of the alignment 32",
           [](Writer& w) { w.tensor({"c", {4}, 0, 16, 16}); }),
      with("tensor-offset-past-end", "offset 2^40", "tensor 'c' data [1099511627776, +16) runs past the end of the 524-byte data section",
           [](Writer& w) { w.tensor({"c", {4}, 0, 1ull << 40, 0}); }),
      with("tensor-offset-wraps", "offset 2^64 - 32: offset + size wraps",
           "tensor 'c' data [18446744073709551584, +16) runs past the end of the 524-byte data section",
           [](Writer& w) { w.tensor({"c", {4}, 0, ~0ull - 31, 0}); }),
      with("tensor-overlap", "tensor 'c' at 256 overlaps a.weight [0, 512)", "tensor 'c' data overlaps tensor 'a.weight'",
           [](Writer& w) { w.tensor({"c", {256}, 0, 256, 1024}); }),
      {"tensor-data-truncated", "the valid control file less its last byte", "tensor 'b.weight' data [512, +12) runs past the end of the 523-byte data section",
       [] {
         std::vector<uint8_t> v = valid().bytes();
         v.pop_back();
         return v;
       }},
      with("data-section-missing", "the file ends with the (unaligned) header",
           "truncated: the data section would start at offset 64, past the end of the 57-byte file",
           [](Writer& w) {
             w.tensor({"t", {0}, 0, 0, 0});
             w.data = false;
           },
           false),
  };
  return cases;
}

std::string stored_dir() { return std::string(SJKV_GOLDEN_DIR) + "/../reject/gguf"; }
std::string corpus_dir() { return std::string(SJKV_GOLDEN_DIR) + "/../fuzz/corpus/gguf"; }

std::vector<uint8_t> read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Every case as the generator writes it: small, and parsed in memory as the file says.
TEST(GgufRejectFixtures, GeneratorWritesEachDefect) {
  std::set<std::string> names;
  for (const StoredCase& c : stored_cases()) {
    EXPECT_TRUE(names.insert(c.name).second) << "duplicate case " << c.name;
    const std::vector<uint8_t> b = c.make();
    EXPECT_LE(b.size(), 4096u) << c.name;
    std::string d;
    try {
      (void)GgufFile::parse(b, "x.gguf");
    } catch (const FileError& e) {
      d = e.defect();
    }
    if (*c.expect == 0)
      EXPECT_EQ(d, "") << c.name;
    else
      EXPECT_NE(d.find(c.expect), std::string::npos) << c.name << "\n  got:      " << d << "\n  expected: " << c.expect;
  }
}

// SJKV_REGENERATE_REJECT_DIR=tests/reject build/tests/snapshot/test_gguf --gtest_filter='GgufRejectFixtures.*'
// writes tests/reject/gguf/ (files and README.md) and the copies in tests/fuzz/corpus/gguf/.
// (Defined before the checks below so that one run regenerates and then checks.)
TEST(GgufRejectFixtures, Regenerate) {
  const char* dir = std::getenv("SJKV_REGENERATE_REJECT_DIR");
  if (!dir || !*dir) GTEST_SKIP() << "set SJKV_REGENERATE_REJECT_DIR to rewrite tests/reject/gguf/";
  const std::string out = std::string(dir) + "/gguf";
  const std::string corpus = std::string(dir) + "/../fuzz/corpus/gguf";
  std::filesystem::create_directories(out);
  for (const auto& entry : std::filesystem::directory_iterator(out)) std::filesystem::remove(entry.path());
  std::ofstream readme(out + "/README.md");
  readme << "# Must-reject GGUF files\n\n"
            "Each `.gguf` file below is a small GGUF header with one defect; `GgufFile::open` must refuse it\n"
            "with `sjkv::FileError` (`<path>: <defect>`, one line) whose defect contains the text in the last\n"
            "column. `valid-control.gguf` is the small valid file most of them are edited from: it must open.\n"
            "`tests/snapshot/test_gguf.cpp` holds the recipes and checks the files\n"
            "(`GgufRejectFixtures.*`: every file is in the table, its bytes are what its recipe writes, and it\n"
            "is refused with its defect); `snapshot/include/sjkv/io/gguf.h` lists the reader's checks. The fuzz\n"
            "corpus holds a copy of each as `tests/fuzz/corpus/gguf/reject-<name>.gguf`. Regenerate with\n\n"
            "    SJKV_REGENERATE_REJECT_DIR=tests/reject build/tests/snapshot/test_gguf --gtest_filter='GgufRejectFixtures.*'\n\n"
            "| file | defect | message contains |\n|---|---|---|\n";
  for (const StoredCase& c : stored_cases()) {
    const std::vector<uint8_t> b = c.make();
    write_file(out + "/" + c.name + ".gguf", b);
    write_file(corpus + "/reject-" + c.name + ".gguf", b);
    readme << "| `" << c.name << ".gguf` | " << c.defect << " | "
           << (*c.expect ? "`" + std::string(c.expect) + "`" : std::string("(opens)")) << " |\n";
  }
}

// The stored files, opened by path: refused with a one-line FileError naming the file and the
// expected defect (the control file opens); no file of the folder is missing from the table.
TEST(GgufRejectFixtures, StoredFilesRefusedWithTheirDefect) {
  std::set<std::string> known;
  for (const StoredCase& c : stored_cases()) {
    const std::string p = stored_dir() + "/" + c.name + ".gguf";
    known.insert(std::string(c.name) + ".gguf");
    ASSERT_TRUE(std::filesystem::is_regular_file(p))
        << p << " is missing; regenerate: SJKV_REGENERATE_REJECT_DIR=tests/reject build/tests/snapshot/test_gguf "
                "--gtest_filter='GgufRejectFixtures.*'";
    EXPECT_EQ(read_all(p), c.make()) << c.name << ": the stored file is not what its recipe writes; regenerate";
    if (*c.expect == 0) {
      EXPECT_NO_THROW((void)GgufFile::open(p)) << c.name;
      continue;
    }
    try {
      (void)GgufFile::open(p);
      ADD_FAILURE() << c.name << ": accepted";
    } catch (const FileError& e) {
      const std::string what = e.what();
      EXPECT_EQ(e.path(), p);
      EXPECT_EQ(what, p + ": " + e.defect());
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
      EXPECT_NE(e.defect().find(c.expect), std::string::npos)
          << c.name << "\n  got:      " << e.defect() << "\n  expected: " << c.expect;
    } catch (const std::exception& e) {
      ADD_FAILURE() << c.name << ": expected FileError, got " << e.what();
    }
  }
  size_t files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(stored_dir())) {
    const std::string n = entry.path().filename().string();
    if (n == "README.md") continue;
    ++files;
    EXPECT_TRUE(known.count(n)) << entry.path().string() << " has no entry in the fixture table";
  }
  EXPECT_EQ(files, stored_cases().size());
  const std::vector<uint8_t> readme = read_all(stored_dir() + "/README.md");
  const std::string text(readme.begin(), readme.end());
  for (const StoredCase& c : stored_cases())
    EXPECT_NE(text.find("| `" + std::string(c.name) + ".gguf` |"), std::string::npos) << c.name << " is not in README.md";
}

// The fuzz corpus runs the same files through the fuzz target (ctest fuzz_corpus_gguf).
TEST(GgufRejectFixtures, FuzzCorpusHoldsCopies) {
  for (const StoredCase& c : stored_cases()) {
    const std::string p = corpus_dir() + "/reject-" + c.name + ".gguf";
    ASSERT_TRUE(std::filesystem::is_regular_file(p)) << p << " is missing; regenerate";
    EXPECT_EQ(read_all(p), c.make()) << p;
  }
}

// ---- Geometry --------------------------------------------------------------------------------

std::vector<uint32_t> full_layers(const Writer& w) { return sjkv::geometry_from_gguf(w.parse()).full_attention_layers(); }

// The Gated DeltaNet state keys a Qwen 3.5 family file with recurrent layers must carry.
Writer& ssm_keys(Writer& w, const std::string& arch, uint32_t conv_kernel, uint32_t inner, uint32_t state, uint32_t dt_rank,
                 uint32_t groups) {
  return w.u32(arch + ".ssm.conv_kernel", conv_kernel).u32(arch + ".ssm.inner_size", inner)
      .u32(arch + ".ssm.state_size", state).u32(arch + ".ssm.time_step_rank", dt_rank).u32(arch + ".ssm.group_count", groups);
}

TEST(GgufGeometry, DenseModelDerivesHeadDim) {
  const GgufFile f = valid().parse();
  const sjkv::ModelGeometry g = sjkv::geometry_from_gguf(f);
  EXPECT_EQ(g.architecture, "llama");
  EXPECT_EQ(g.n_layers, 2u);
  ASSERT_EQ(g.layers.size(), 2u);
  for (const sjkv::LayerInfo& l : g.layers) {
    EXPECT_EQ(l.kind, LayerKind::full_attention);
    EXPECT_EQ(l.n_head, 8u);
    EXPECT_EQ(l.n_head_kv, 2u);
    EXPECT_EQ(l.head_dim_k, 64u);  // 512 / 8
    EXPECT_EQ(l.head_dim_v, 64u);
  }
  EXPECT_EQ(g.layer_rule, "every layer has full attention");
  const sjkv::CacheGeometry cg = g.cache_geometry();
  EXPECT_EQ(cg.values_per_token(), 2u * 2 * 128);
}

Writer gemma3(uint32_t layers, bool window) {
  Writer w;
  w.str("general.architecture", "gemma3").u32("gemma3.block_count", layers).u32("gemma3.attention.head_count", 4);
  w.u32("gemma3.attention.head_count_kv", 1).u32("gemma3.embedding_length", 640);
  w.u32("gemma3.attention.key_length", 256).u32("gemma3.attention.value_length", 256);
  if (window) w.u32("gemma3.attention.sliding_window", 512);
  return w;
}

TEST(GgufGeometry, Gemma3EverySixthLayerIsGlobal) {
  // llama.cpp LLM_ARCH_GEMMA3: set_swa_pattern(6), layer il slides unless il % 6 == 5.
  const sjkv::ModelGeometry g = sjkv::geometry_from_gguf(gemma3(26, true).parse());
  EXPECT_EQ(g.full_attention_layers(), (std::vector<uint32_t>{5, 11, 17, 23}));
  EXPECT_EQ(g.sliding_window, 512u);
  EXPECT_EQ(g.layers[0].kind, LayerKind::sliding_window);
  EXPECT_NE(g.layer_rule.find("gemma3"), std::string::npos);
  // Without a sliding window every layer keeps a full cache (llama.cpp enables the pattern
  // only when the window is present).
  EXPECT_EQ(full_layers(gemma3(6, false)).size(), 6u);
}

TEST(GgufGeometry, OtherBuiltInPatterns) {
  Writer g2;
  g2.str("general.architecture", "gemma2").u32("gemma2.block_count", 4).u32("gemma2.attention.head_count", 8);
  g2.u32("gemma2.embedding_length", 1024).u32("gemma2.attention.sliding_window", 4096);
  EXPECT_EQ(full_layers(g2), (std::vector<uint32_t>{1, 3}));
  Writer c2;
  c2.str("general.architecture", "cohere2").u32("cohere2.block_count", 8).u32("cohere2.attention.head_count", 8);
  c2.u32("cohere2.embedding_length", 1024).u32("cohere2.attention.sliding_window", 4096);
  EXPECT_EQ(full_layers(c2), (std::vector<uint32_t>{3, 7}));
  Writer unknown;  // a window without a known pattern: all full, and the rule says so
  unknown.str("general.architecture", "mystery").u32("mystery.block_count", 3).u32("mystery.attention.head_count", 2);
  unknown.u32("mystery.embedding_length", 256).u32("mystery.attention.sliding_window", 128);
  const sjkv::ModelGeometry g = sjkv::geometry_from_gguf(unknown.parse());
  EXPECT_EQ(g.full_attention_layers().size(), 3u);
  EXPECT_NE(g.layer_rule.find("no pattern known"), std::string::npos);
  Writer g2d;  // Gemma 2 without the key: llama.cpp's default window of 4096, even layers slide
  g2d.str("general.architecture", "gemma2").u32("gemma2.block_count", 4).u32("gemma2.attention.head_count", 8);
  g2d.u32("gemma2.embedding_length", 1024);
  const sjkv::ModelGeometry gd = sjkv::geometry_from_gguf(g2d.parse());
  EXPECT_EQ(gd.sliding_window, 4096u);
  EXPECT_EQ(full_layers(g2d), (std::vector<uint32_t>{1, 3}));
  for (const char* arch : {"llama", "phi3"}) {  // a declared window llama.cpp does not apply
    const std::string a = arch;
    Writer w;
    w.str("general.architecture", a).u32(a + ".block_count", 2).u32(a + ".attention.head_count", 2);
    w.u32(a + ".embedding_length", 256).u32(a + ".attention.sliding_window", 64);
    const sjkv::ModelGeometry gw = sjkv::geometry_from_gguf(w.parse());
    EXPECT_EQ(gw.full_attention_layers().size(), 2u) << a;
    EXPECT_NE(gw.layer_rule.find("not applied by llama.cpp's " + a + " graph"), std::string::npos) << gw.layer_rule;
  }
}

TEST(GgufGeometry, SlidingWindowPatternKey) {
  // A period in the file overrides the built-in one.
  Writer p = gemma3(8, true);
  p.u32("gemma3.attention.sliding_window_pattern", 4);
  EXPECT_EQ(full_layers(p), (std::vector<uint32_t>{3, 7}));
  // A per-layer bool array (true = sliding), with separate sliding-layer head dims (Gemma 4).
  Writer a;
  a.str("general.architecture", "gemma4").u32("gemma4.block_count", 6).u32("gemma4.attention.head_count", 16);
  a.arr_u32("gemma4.attention.head_count_kv", {8, 8, 8, 8, 8, 4});
  a.u32("gemma4.attention.key_length", 512).u32("gemma4.attention.value_length", 512);
  a.u32("gemma4.attention.key_length_swa", 256).u32("gemma4.attention.value_length_swa", 256);
  a.u32("gemma4.attention.sliding_window", 1024);
  a.arr_bool("gemma4.attention.sliding_window_pattern", {true, true, true, true, true, false});
  const sjkv::ModelGeometry g = sjkv::geometry_from_gguf(a.parse());
  EXPECT_EQ(g.full_attention_layers(), (std::vector<uint32_t>{5}));
  EXPECT_EQ(g.layers[5].n_head_kv, 4u);
  EXPECT_EQ(g.layers[5].head_dim_k, 512u);
  EXPECT_EQ(g.layers[0].head_dim_k, 256u);
  const sjkv::CacheGeometry cg = g.cache_geometry();
  ASSERT_EQ(cg.layers.size(), 1u);
  EXPECT_EQ(cg.layers[0].kv_heads, 4u);
  EXPECT_EQ(cg.layers[0].head_dim_k, 512u);
  EXPECT_EQ(sjkv::check(cg, sjkv::CacheOption::sjkv(4, 4)), "");  // D 512: two 256-point rotations
}

// Gemma 4 geometry (docs/design/gemma4.md sections 1, 4, 8 and 9): n layers, full every
// `period`-th (il % period == period - 1), KV heads and head sizes per kind.
Writer gemma4(uint32_t n, uint32_t period, uint32_t kv_swa, uint32_t kv_full, uint32_t shared, bool array = true) {
  std::vector<bool> swa(n);
  std::vector<uint32_t> kv(n);
  for (uint32_t i = 0; i < n; ++i) {
    swa[i] = i % period != period - 1;
    kv[i] = swa[i] ? kv_swa : kv_full;
  }
  Writer w;
  w.str("general.architecture", "gemma4").u32("gemma4.block_count", n).u32("gemma4.attention.head_count", 32);
  w.arr_u32("gemma4.attention.head_count_kv", kv).u32("gemma4.attention.sliding_window", 1024);
  w.u32("gemma4.attention.key_length", 512).u32("gemma4.attention.value_length", 512);
  w.u32("gemma4.attention.key_length_swa", 256).u32("gemma4.attention.value_length_swa", 256);
  if (array) w.arr_bool("gemma4.attention.sliding_window_pattern", swa);
  else w.u32("gemma4.attention.sliding_window_pattern", period);
  if (shared) w.u32("gemma4.attention.shared_kv_layers", shared);
  return w;
}

TEST(GgufGeometry, Gemma4KeepsKvInOwnFullLayers) {
  // The 31B: 60 layers, every sixth full with 4 KV heads of 512; the note's memory rule is 10
  // layers x 4 x 512 x 2 values a token: 80 KiB at f16, 20 GiB at 262,144 tokens.
  const sjkv::ModelGeometry big = sjkv::geometry_from_gguf(gemma4(60, 6, 16, 4, 0).parse());
  EXPECT_EQ(big.full_attention_layers().size(), 10u);
  EXPECT_EQ(big.cache_geometry().values_per_token(), 40960u);
  EXPECT_EQ(big.cache_geometry().values_per_token() * 2 * 262144, 21474836480ull);
  // Its 50 sliding layers: a cache bounded by the window, llama.cpp's min(n_ctx, W + ubatch)
  // cells rounded up to 256 (llama-kv-cache-iswa.cpp).
  EXPECT_EQ(big.sliding_layers().size(), 50u);
  EXPECT_EQ(big.sliding_values_per_cell(), 50u * 16 * (256 + 256));
  EXPECT_EQ(big.sliding_cells(262144, 512), 1536u);
  EXPECT_EQ(big.sliding_cells(262144, 1000), 2048u);
  EXPECT_EQ(big.sliding_cells(700, 512), 768u);
  // E2B: 35 layers, full at 4, 9, ..., 34; the last 20 share: K0 = 15, sliding ones read layer
  // 13, full ones layer 14 (llama.cpp's reuse rule, not i - 20). Only 4, 9 and 14 keep a full cache.
  const sjkv::ModelGeometry e = sjkv::geometry_from_gguf(gemma4(35, 5, 1, 1, 20).parse());
  EXPECT_EQ(e.full_attention_layers(), (std::vector<uint32_t>{4, 9, 14}));
  EXPECT_EQ(e.cache_geometry().layers.size(), 3u);
  EXPECT_EQ(e.sliding_layers().size(), 12u);  // 15 own-KV layers, 3 of them full; the shared 20 keep none
  EXPECT_EQ(sjkv::geometry_from_gguf(gemma4(35, 35, 1, 1, 0).parse()).sliding_cells(4096, 512), 1536u);
  for (uint32_t i = 0; i < 35; ++i) EXPECT_EQ(e.layers[i].kv_source, i < 15 ? -1 : i % 5 == 4 ? 14 : 13) << i;
  EXPECT_NE(e.layer_rule.find("the last 20 layers read the KV"), std::string::npos) << e.layer_rule;
  const auto defect = [](const Writer& w) {
    try {
      sjkv::geometry_from_gguf(w.parse());
    } catch (const FileError& x) {
      return x.defect();
    }
    return std::string();
  };
  // llama.cpp's gemma4 reads the pattern as an array only.
  const Writer period = gemma4(6, 6, 2, 1, 0, false);
  EXPECT_NE(defect(period).find("must be an array of 6 bools"), std::string::npos) << defect(period);
  Writer none;
  none.str("general.architecture", "gemma4").u32("gemma4.block_count", 2).u32("gemma4.attention.head_count", 2);
  none.u32("gemma4.embedding_length", 256);
  EXPECT_NE(defect(none).find("missing key 'gemma4.attention.sliding_window_pattern'"), std::string::npos) << defect(none);
  // Full at 2 and 5, K0 = 4: the sliding layer 4 would read layer 2, which is full.
  EXPECT_NE(defect(gemma4(6, 3, 2, 1, 2)).find("shared-KV layer 4 (sliding) would read layer 2, which is full"),
            std::string::npos)
      << defect(gemma4(6, 3, 2, 1, 2));
  EXPECT_NE(defect(gemma4(6, 3, 2, 1, 5)).find("at least 2 must keep their own KV"), std::string::npos);
}

TEST(GgufGeometry, HybridQwen) {
  // Qwen3.8 27B's shape: 64 main layers, full attention every 4th, plus one nextn draft block.
  Writer w;
  w.str("general.architecture", "qwen35").u32("qwen35.block_count", 65).u32("qwen35.nextn_predict_layers", 1);
  w.u32("qwen35.attention.head_count", 24).u32("qwen35.attention.head_count_kv", 4);
  w.u32("qwen35.attention.key_length", 256).u32("qwen35.attention.value_length", 256);
  w.u32("qwen35.embedding_length", 5120).u32("qwen35.full_attention_interval", 4);
  ssm_keys(w, "qwen35", 4, 6144, 128, 48, 16);
  const sjkv::ModelGeometry g = sjkv::geometry_from_gguf(w.parse());
  const std::vector<uint32_t> full = g.full_attention_layers();
  ASSERT_EQ(full.size(), 16u);
  EXPECT_EQ(full.front(), 3u);
  EXPECT_EQ(full.back(), 63u);
  EXPECT_EQ(g.layers[64].kind, LayerKind::nextn);
  EXPECT_EQ(g.layers[0].kind, LayerKind::recurrent);
  // The planner then gives the note's 65,536 bytes per token in 16-bit.
  EXPECT_EQ(sjkv::bytes_per_token(g.cache_geometry(), sjkv::CacheOption::plain(sjkv::BlockFormat::f16)).numerator, 65536u);
  // Without the key llama.cpp's default interval for the architecture is 4.
  Writer d;
  d.str("general.architecture", "qwen3next").u32("qwen3next.block_count", 8).u32("qwen3next.attention.head_count", 16);
  d.u32("qwen3next.attention.head_count_kv", 2).u32("qwen3next.attention.key_length", 256).u32("qwen3next.attention.value_length", 256);
  ssm_keys(d, "qwen3next", 4, 4096, 128, 32, 16);
  EXPECT_EQ(full_layers(d), (std::vector<uint32_t>{3, 7}));
}

TEST(GgufGeometry, RecurrentLayersArrayComesBeforeTheInterval) {
  // The Qwen 3.5 converter writes attention.recurrent_layers (false for the nextn block) and
  // the interval; llama.cpp takes the array. Here they disagree, so the array must win.
  Writer w;
  w.str("general.architecture", "qwen35").u32("qwen35.block_count", 9).u32("qwen35.nextn_predict_layers", 1);
  w.u32("qwen35.attention.head_count", 8).u32("qwen35.attention.head_count_kv", 2);
  w.u32("qwen35.attention.key_length", 256).u32("qwen35.attention.value_length", 256);
  w.u32("qwen35.embedding_length", 1024).u32("qwen35.full_attention_interval", 4);
  w.arr_bool("qwen35.attention.recurrent_layers", {true, false, true, true, true, true, false, true, false});
  ssm_keys(w, "qwen35", 4, 2048, 128, 16, 16);
  const sjkv::ModelGeometry g = sjkv::geometry_from_gguf(w.parse());
  EXPECT_EQ(g.full_attention_layers(), (std::vector<uint32_t>{1, 6}));
  EXPECT_EQ(g.layers[3].kind, LayerKind::recurrent);
  EXPECT_EQ(g.layers[8].kind, LayerKind::nextn);
  Writer bad;
  bad.str("general.architecture", "qwen35").u32("qwen35.block_count", 2).u32("qwen35.attention.head_count", 8);
  bad.arr_bool("qwen35.attention.recurrent_layers", {true});
  std::string defect;
  try {
    sjkv::geometry_from_gguf(bad.parse());
  } catch (const FileError& e) {
    defect = e.defect();
  }
  EXPECT_NE(defect.find("must be an array of 2 bools"), std::string::npos) << defect;
}

// The published Qwen 3.5 0.8B shape (docs/design/qwen35.md section 10), metadata only: 24 main
// layers (3 linear + 1 full, repeated) and one MTP block; Kc 4, 16 key and 16 value heads of 128.
Writer qwen35_0_8b() {
  Writer w;
  w.str("general.architecture", "qwen35").u32("qwen35.block_count", 25).u32("qwen35.nextn_predict_layers", 1);
  w.u32("qwen35.embedding_length", 1024).u32("qwen35.context_length", 262144);
  w.u32("qwen35.attention.head_count", 8).u32("qwen35.attention.head_count_kv", 2);
  w.u32("qwen35.attention.key_length", 256).u32("qwen35.attention.value_length", 256);
  w.u32("qwen35.full_attention_interval", 4);
  std::vector<bool> recurrent;
  for (int i = 0; i < 24; ++i) recurrent.push_back((i + 1) % 4 != 0);
  recurrent.push_back(false);  // the converter writes false for the MTP block
  w.arr_bool("qwen35.attention.recurrent_layers", recurrent);
  ssm_keys(w, "qwen35", 4, 2048, 128, 16, 16);
  return w;
}

TEST(GgufGeometry, RecurrentStateOfQwen35_0_8B) {
  const sjkv::ModelGeometry g = sjkv::geometry_from_gguf(qwen35_0_8b().parse());
  EXPECT_EQ(g.full_attention_layers(), (std::vector<uint32_t>{3, 7, 11, 15, 19, 23}));
  EXPECT_EQ(g.recurrent_layers().size(), 18u);
  EXPECT_EQ(g.main_layers(), 24u);
  EXPECT_EQ(g.layers[24].kind, LayerKind::nextn);
  EXPECT_TRUE(g.state_cell_ext);  // iM-RoPE: llama.cpp's state files carry the cell ext record
  const sjkv::RecurrentShape& r = g.recurrent;
  ASSERT_TRUE(r.known());
  // The note's shape check: conv 18 layers x 3 x 6144 f32, delta 18 x 128 x 2048 f32.
  EXPECT_EQ(r.conv_dim(), 6144u);
  EXPECT_EQ(r.conv_values(), 3u * 6144u);
  EXPECT_EQ(r.delta_values(), 128u * 2048u);
  EXPECT_EQ(g.recurrent_state_values(), 18u * (3u * 6144u + 128u * 2048u));
  const uint64_t conv_f32 = 18ull * 3 * 6144 * 4, delta_f32 = 18ull * 128 * 2048 * 4;
  EXPECT_EQ(conv_f32, 1327104u);        // 1.27 MiB
  EXPECT_EQ(delta_f32, 18ull * sjkv::kMiB);  // 18 MiB
  EXPECT_EQ(g.recurrent_state_bytes(32), conv_f32 + delta_f32);
  EXPECT_EQ(g.recurrent_state_bytes(16), (conv_f32 + delta_f32) / 2);
  EXPECT_EQ(g.recurrent_state_bytes(1), (g.recurrent_state_values() + 7) / 8);
  EXPECT_THROW((void)g.recurrent_state_bytes(0), std::invalid_argument);
  EXPECT_THROW((void)g.recurrent_state_bytes(65), std::invalid_argument);
  // KV: 6 layers x 2 (K, V) x 2 heads x 256 values per token.
  EXPECT_EQ(g.cache_geometry().values_per_token(), 6u * 2 * 512);
}

TEST(GgufGeometry, RecurrentStateOnlyForTheQwenHybrids) {
  // A dense model and a zero-KV-head hybrid of another family know no state shape.
  EXPECT_FALSE(sjkv::geometry_from_gguf(valid().parse()).recurrent.known());
  EXPECT_EQ(sjkv::geometry_from_gguf(valid().parse()).recurrent_state_bytes(16), 0u);
  EXPECT_FALSE(sjkv::geometry_from_gguf(valid().parse()).state_cell_ext);
  Writer j;
  j.str("general.architecture", "jamba").u32("jamba.block_count", 2).u32("jamba.attention.head_count", 8);
  j.arr_u32("jamba.attention.head_count_kv", {0, 2}).u32("jamba.embedding_length", 1024);
  EXPECT_FALSE(sjkv::geometry_from_gguf(j.parse()).recurrent.known());
  // A qwen35 file whose every main layer has full attention needs no ssm keys.
  Writer a;
  a.str("general.architecture", "qwen35").u32("qwen35.block_count", 2).u32("qwen35.attention.head_count", 8);
  a.u32("qwen35.attention.head_count_kv", 2).u32("qwen35.embedding_length", 1024);
  a.arr_bool("qwen35.attention.recurrent_layers", {false, false});
  const sjkv::ModelGeometry ga = sjkv::geometry_from_gguf(a.parse());
  EXPECT_FALSE(ga.recurrent.known());
  EXPECT_EQ(ga.full_attention_layers().size(), 2u);
  // qwen3next shares the keys; its rope is NEOX, so its state files have no cell ext record.
  Writer n;
  n.str("general.architecture", "qwen3next").u32("qwen3next.block_count", 4).u32("qwen3next.attention.head_count", 16);
  n.u32("qwen3next.attention.head_count_kv", 2).u32("qwen3next.attention.key_length", 256).u32("qwen3next.attention.value_length", 256);
  ssm_keys(n, "qwen3next", 4, 4096, 128, 32, 16);
  const sjkv::ModelGeometry gn = sjkv::geometry_from_gguf(n.parse());
  EXPECT_EQ(gn.recurrent.conv_dim(), 2u * 16 * 128 + 4096);
  EXPECT_EQ(gn.recurrent_state_values(), 3u * (3u * 8192 + 128u * 4096));
  EXPECT_FALSE(gn.state_cell_ext);
}

// One defect of the state keys per case; each is a FileError naming the key.
TEST(GgufGeometry, RecurrentStateKeysRejected) {
  const auto geo_defect = [](const Writer& w) {
    try {
      (void)sjkv::geometry_from_gguf(w.parse());
    } catch (const FileError& e) {
      EXPECT_EQ(e.path(), "test.gguf");
      return e.defect();
    }
    return std::string();
  };
  // Base: 4 layers (layer 3 full), Kc 4, S 64, Hk 2, Hv 4; each case edits the ssm keys.
  const auto model = [](std::function<void(Writer&)> keys) {
    Writer w;
    w.str("general.architecture", "qwen35").u32("qwen35.block_count", 4).u32("qwen35.attention.head_count", 4);
    w.u32("qwen35.attention.head_count_kv", 2).u32("qwen35.attention.key_length", 256).u32("qwen35.attention.value_length", 256);
    keys(w);
    return w;
  };
  EXPECT_EQ(geo_defect(model([](Writer& w) { ssm_keys(w, "qwen35", 4, 256, 64, 4, 2); })), "");
  const std::vector<std::string> names = {"conv_kernel", "inner_size", "state_size", "time_step_rank", "group_count"};
  const std::vector<uint32_t> values = {4, 256, 64, 4, 2};
  for (size_t miss = 0; miss < names.size(); ++miss) {
    const Writer w = model([&](Writer& x) {
      for (size_t i = 0; i < names.size(); ++i)
        if (i != miss) x.u32("qwen35.ssm." + names[i], values[i]);
    });
    EXPECT_EQ(geo_defect(w), "missing key 'qwen35.ssm." + names[miss] + "' (the recurrent layers' state shape)");
    const Writer z = model([&](Writer& x) {
      for (size_t i = 0; i < names.size(); ++i) x.u32("qwen35.ssm." + names[i], i == miss ? 0 : values[i]);
    });
    EXPECT_EQ(geo_defect(z), "'qwen35.ssm." + names[miss] + "' is 0");
  }
  EXPECT_EQ(geo_defect(model([](Writer& w) { ssm_keys(w, "qwen35", 1, 256, 64, 4, 2); })),
            "'qwen35.ssm.conv_kernel' is 1; the conv state keeps conv_kernel - 1 inputs, so at least 2");
  EXPECT_EQ(geo_defect(model([](Writer& w) { ssm_keys(w, "qwen35", 4, 512, 64, 4, 2); })),
            "'qwen35.ssm.inner_size' is 512, not ssm.time_step_rank 4 x ssm.state_size 64");
  EXPECT_EQ(geo_defect(model([](Writer& w) {
              w.i32("qwen35.ssm.conv_kernel", -4).u32("qwen35.ssm.inner_size", 256).u32("qwen35.ssm.state_size", 64);
              w.u32("qwen35.ssm.time_step_rank", 4).u32("qwen35.ssm.group_count", 2);
            })),
            "key 'qwen35.ssm.conv_kernel' must be a non-negative 32-bit integer");
  // 2 x group_count x state_size alone past 2^32 (and past 2^64 were it not checked first).
  EXPECT_NE(geo_defect(model([](Writer& w) { ssm_keys(w, "qwen35", 4, 65536, 1, 65536, 0xFFFFFFFFu); }))
                .find("the recurrent conv state ((ssm.conv_kernel - 1) x (2 x ssm.group_count x ssm.state_size + "
                      "ssm.inner_size) = (4 - 1) x (2 x 4294967295 x 1 + 65536)) exceeds 2^32 - 1 values"),
            std::string::npos);
  // conv_dim fits, (Kc - 1) x conv_dim does not.
  EXPECT_NE(geo_defect(model([](Writer& w) { ssm_keys(w, "qwen35", 0xFFFFFFFFu, 256, 64, 4, 2); })).find("exceeds 2^32 - 1 values"),
            std::string::npos);
  // state_size x inner_size = 2^16 x 2^17 = 2^33.
  EXPECT_EQ(geo_defect(model([](Writer& w) { ssm_keys(w, "qwen35", 2, 1u << 17, 1u << 16, 2, 1); })),
            "the recurrent delta state (ssm.state_size x ssm.inner_size = 65536 x 131072) exceeds 2^32 - 1 values");
}

TEST(GgufGeometry, ZeroKvHeadsAreRecurrent) {
  Writer w;
  w.str("general.architecture", "jamba").u32("jamba.block_count", 4).u32("jamba.attention.head_count", 8);
  w.arr_u32("jamba.attention.head_count_kv", {0, 0, 2, 0}).u32("jamba.embedding_length", 1024);
  const sjkv::ModelGeometry g = sjkv::geometry_from_gguf(w.parse());
  EXPECT_EQ(g.full_attention_layers(), (std::vector<uint32_t>{2}));
  EXPECT_EQ(g.layers[0].kind, LayerKind::recurrent);
  EXPECT_EQ(g.layers[2].head_dim_k, 128u);
}

TEST(GgufGeometry, Rejects) {
  Writer none;
  none.u32("llama.block_count", 2);
  EXPECT_THROW(sjkv::geometry_from_gguf(none.parse()), FileError);
  const auto geo_defect = [](const Writer& w) {
    try {
      sjkv::geometry_from_gguf(w.parse());
    } catch (const FileError& e) {
      return e.defect();
    }
    return std::string();
  };
  Writer arch_type;
  arch_type.u32("general.architecture", 7);
  EXPECT_EQ(geo_defect(arch_type), "key 'general.architecture' is u32, expected string");
  Writer blocks;
  blocks.str("general.architecture", "llama");
  EXPECT_EQ(geo_defect(blocks), "missing key 'llama.block_count'");
  Writer zero;
  zero.str("general.architecture", "x").u32("x.block_count", 0);
  EXPECT_NE(geo_defect(zero).find("1 to 65536 layers"), std::string::npos);
  Writer neg;
  neg.str("general.architecture", "x").i32("x.block_count", -2);
  EXPECT_EQ(geo_defect(neg), "key 'x.block_count' must be a non-negative 32-bit integer");
  Writer heads;
  heads.str("general.architecture", "x").u32("x.block_count", 2);
  EXPECT_EQ(geo_defect(heads), "missing key 'x.attention.head_count'");
  Writer len;
  len.str("general.architecture", "x").u32("x.block_count", 3).arr_u32("x.attention.head_count", {8, 8});
  EXPECT_EQ(geo_defect(len), "key 'x.attention.head_count' has 2 entries for 3 layers");
  Writer div;
  div.str("general.architecture", "x").u32("x.block_count", 1).u32("x.attention.head_count", 3).u32("x.embedding_length", 100);
  EXPECT_NE(geo_defect(div).find("not a multiple of head_count 3"), std::string::npos);
  Writer nodim;
  nodim.str("general.architecture", "x").u32("x.block_count", 1).u32("x.attention.head_count", 4);
  EXPECT_NE(geo_defect(nodim).find("no 'x.attention.key_length'"), std::string::npos);
  Writer pat = gemma3(6, false);
  pat.u32("gemma3.attention.sliding_window_pattern", 6);
  EXPECT_NE(geo_defect(pat).find("marks sliding layers but"), std::string::npos);
  Writer patlen = gemma3(6, true);
  patlen.arr_bool("gemma3.attention.sliding_window_pattern", {true, false});
  EXPECT_NE(geo_defect(patlen).find("has 2 entries for 6 layers"), std::string::npos);
  Writer kvmore;
  kvmore.str("general.architecture", "y").u32("y.block_count", 1).u32("y.attention.head_count", 2);
  kvmore.u32("y.attention.head_count_kv", 4).u32("y.embedding_length", 256);
  EXPECT_NE(geo_defect(kvmore).find("exceeds head_count"), std::string::npos);
  Writer nextn;
  nextn.str("general.architecture", "x").u32("x.block_count", 2).u32("x.nextn_predict_layers", 2);
  nextn.u32("x.attention.head_count", 2).u32("x.embedding_length", 256);
  EXPECT_NE(geo_defect(nextn).find("nextn_predict_layers"), std::string::npos);
  Writer interval;
  interval.str("general.architecture", "x").u32("x.block_count", 2).u32("x.full_attention_interval", 0);
  interval.u32("x.attention.head_count", 2).u32("x.embedding_length", 256);
  EXPECT_NE(geo_defect(interval).find("full_attention_interval' is 0"), std::string::npos);
}

// ---- A real model, when present --------------------------------------------------------------

// $SJKV_GEMMA3_GGUF names the file; else it is where scripts/setup links it.
std::string gemma3_270m_path() {
  if (const char* p = std::getenv("SJKV_GEMMA3_GGUF")) return p;
  return sjkv_test::model_dir() + "/gemma-3-270m-q4_k_m.gguf";
}

TEST(GgufRealModel, Gemma3_270M) {
  const std::string path = gemma3_270m_path();
  if (::access(path.c_str(), R_OK) != 0) GTEST_SKIP() << "no Gemma 3 270M GGUF at " << path << " (scripts/setup puts it there)";
  const GgufFile f = GgufFile::open(path);
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.get_string("general.architecture"), "gemma3");
  EXPECT_EQ(f.get_u32("gemma3.block_count"), 18u);
  EXPECT_EQ(f.get_array("tokenizer.ggml.tokens").count(), 262144u);
  EXPECT_EQ(f.tensors().size(), 236u);
  const sjkv::GgufTensorInfo* emb = f.find_tensor("token_embd.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->dims, (std::vector<uint64_t>{640, 262144}));
  const sjkv::ModelGeometry g = sjkv::geometry_from_gguf(f);
  EXPECT_EQ(g.sliding_window, 512u);
  EXPECT_EQ(g.context_length, 32768u);
  EXPECT_EQ(g.full_attention_layers(), (std::vector<uint32_t>{5, 11, 17}));
  const sjkv::CacheGeometry cg = g.cache_geometry();
  ASSERT_EQ(cg.layers.size(), 3u);
  EXPECT_EQ(cg.layers[0].kv_heads, 1u);
  EXPECT_EQ(cg.layers[0].head_dim_k, 256u);
  // f16 cache of the three global layers: 3 x 2 x 256 x 2 B per token.
  EXPECT_EQ(sjkv::bytes_per_token(cg, sjkv::CacheOption::plain(sjkv::BlockFormat::f16)).numerator, 3072u);
  EXPECT_EQ(sjkv::check(cg, sjkv::CacheOption::sjkv(4, 4)), "");
}

}  // namespace
