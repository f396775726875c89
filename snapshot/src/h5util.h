// Internal: the HDF5 C API in small checked pieces shared by the capture and snapshot code.
// Readers treat every file as hostile (docs/FORMAT.md section 5): each helper checks link
// kind, object kind, type class, rank and shape before anything is allocated, and reports a
// one-line defect naming the attribute or dataset through FileError.
#pragma once

#include <fcntl.h>
#include <hdf5.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <limits>
#include <mutex>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "sjkv/io/atomic_file.h"
#include "sjkv/io/capture_file.h"
#include "sjkv/io/file_error.h"
#include "sjkv/io/paths.h"
#include "sjkv/io/zstd_filter.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "sjkv's HDF5 layer reads fp16 and u32 data in little-endian memory order"
#endif

namespace sjkv {
namespace h5 {

constexpr uint32_t kFileVersion = 1;
constexpr uint64_t kMaxStringBytes = 65535;
constexpr uint64_t kMaxLayers = 65536;
constexpr uint32_t kMinHeadDim = 32, kMaxHeadDim = 1024;
constexpr uint32_t kMaxKvHeads = 256;
constexpr uint64_t kChunkTargetBytes = 1u << 20;
// A dataset may not claim more than this many times its stored bytes (zstd's own ceiling is
// about 2^15): a crafted file cannot make the reader allocate memory it does not back.
constexpr uint64_t kMaxExpansion = 1u << 16;

// Every public read and write holds this lock: with a thread-safe HDF5 (Debian's is) it
// costs nothing, since HDF5 serializes its calls anyway; with a build that is not, it makes
// concurrent sjkv calls safe.
// Every public read and write takes this lock first, so it is also where HDF5 is told not to
// run its own exit-time teardown: after a corrupt file, that teardown can fail to evict the
// bad metadata and prints "infinite loop closing library" on exit. Our handles are all
// closed explicitly and writes are complete before their rename, so nothing is lost.
inline std::mutex& api_mutex() {
  static std::mutex m;
  static const bool no_atexit = (H5dont_atexit() >= 0);
  (void)no_atexit;
  return m;
}

// ---- identifiers ------------------------------------------------------------------------

// Owns one HDF5 identifier we created (never a predefined type such as H5T_NATIVE_INT).
class Hid {
 public:
  Hid() = default;
  explicit Hid(hid_t id) : id_(id) {}
  ~Hid() { (void)close(); }
  Hid(Hid&& o) noexcept : id_(std::exchange(o.id_, H5I_INVALID_HID)) {}
  Hid& operator=(Hid&& o) noexcept {
    if (this != &o) {
      (void)close();
      id_ = std::exchange(o.id_, H5I_INVALID_HID);
    }
    return *this;
  }
  Hid(const Hid&) = delete;
  Hid& operator=(const Hid&) = delete;

  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  // Closes now and returns the close's status (a file close flushes, and can fail).
  herr_t close() {
    if (id_ < 0) return 0;
    const hid_t id = std::exchange(id_, H5I_INVALID_HID);
    switch (H5Iget_type(id)) {
      case H5I_FILE: return H5Fclose(id);
      case H5I_GROUP: return H5Gclose(id);
      case H5I_DATASET: return H5Dclose(id);
      case H5I_DATASPACE: return H5Sclose(id);
      case H5I_DATATYPE: return H5Tclose(id);
      case H5I_ATTR: return H5Aclose(id);
      case H5I_GENPROP_LST: return H5Pclose(id);
      default: return H5Idec_ref(id) < 0 ? -1 : 0;
    }
  }

 private:
  hid_t id_ = H5I_INVALID_HID;
};

// Silences HDF5's automatic error printing for the lifetime of the object (per thread in a
// thread-safe HDF5) and restores the caller's handler afterwards.
class Quiet {
 public:
  Quiet() {
    H5Eget_auto2(H5E_DEFAULT, &func_, &data_);
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  }
  ~Quiet() { H5Eset_auto2(H5E_DEFAULT, func_, data_); }
  Quiet(const Quiet&) = delete;
  Quiet& operator=(const Quiet&) = delete;

 private:
  H5E_auto2_t func_ = nullptr;
  void* data_ = nullptr;
};

// What every writer does before it creates a file, for as long as it writes: refuse an invalid
// zstd level (std::invalid_argument, nothing created), hold the HDF5 lock, silence HDF5's error
// printing, and make sure the zstd filter is registered.
class WriteSession {
 public:
  WriteSession(const std::string& path, int zstd_level) : lock_(checked_lock(zstd_level)) {
    try {
      register_zstd_filter();
    } catch (const std::exception& e) {
      throw FileError(path, e.what());
    }
  }

 private:
  static std::mutex& checked_lock(int zstd_level) {
    if (!zstd_level_valid(zstd_level))
      throw std::invalid_argument("zstd level " + std::to_string(zstd_level) + " is not valid");
    return api_mutex();
  }
  std::lock_guard<std::mutex> lock_;
  Quiet quiet_;
};

// The innermost description on HDF5's error stack, on one line; clears the stack.
inline std::string last_error() {
  std::string inner;
  H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_DOWNWARD,
      [](unsigned, const H5E_error2_t* e, void* data) -> herr_t {
        if (e && e->desc && e->desc[0]) *static_cast<std::string*>(data) = e->desc;
        return 0;
      },
      &inner);
  H5Eclear2(H5E_DEFAULT);
  // A failed write or read of the file driver reads "file write failed: time = ..., filename =
  // ..., errno = 28, error message = 'No space left on device', buf = 0x..., ...": keep the
  // operating system's reason only.
  const std::string key = "error message = '";
  const size_t k = inner.find(key);
  if (k != std::string::npos) {
    const size_t end = inner.find('\'', k + key.size());
    const size_t colon = inner.find(':');
    const std::string op = colon != std::string::npos && colon < k ? inner.substr(0, colon) : std::string("file access failed");
    if (end != std::string::npos) inner = op + ": " + inner.substr(k + key.size(), end - k - key.size());
  }
  for (char& c : inner)
    if (c == '\n' || c == '\r') c = ' ';
  return inner.empty() ? std::string("HDF5 error") : inner;
}

// ---- arithmetic -------------------------------------------------------------------------

inline bool mul_overflows(uint64_t a, uint64_t b, uint64_t* out) { return __builtin_mul_overflow(a, b, out); }

inline std::string dims_text(const std::vector<uint64_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

inline bool is_pow2_u64(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

inline std::string hex64(uint64_t v) {
  static const char* digits = "0123456789abcdef";
  std::string s = "0x";
  for (int i = 15; i >= 0; --i) s += digits[(v >> (4 * i)) & 15];
  return s;
}

// Index of the first fp16 NaN or infinity (exponent field 31), or -1.
inline int64_t first_non_finite(const uint16_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if ((p[i] & 0x7c00u) == 0x7c00u) return static_cast<int64_t>(i);
  return -1;
}

// "position t, head h, channel d" of a flat index into [rows][heads][inner].
inline std::string where3(uint64_t idx, uint64_t heads, uint64_t inner, const char* row_name,
                          const char* inner_name, uint64_t row0 = 0) {
  const uint64_t row = idx / (heads * inner), h = (idx / inner) % heads, c = idx % inner;
  return std::string(row_name) + " " + std::to_string(row0 + row) + ", head " + std::to_string(h) + ", " +
         inner_name + " " + std::to_string(c);
}

// A defect of a string field, or empty.
inline std::string string_defect(const char* name, const std::string& s) {
  if (s.size() > kMaxStringBytes) return std::string(name) + " is longer than 65535 bytes";
  if (s.find('\0') != std::string::npos) return std::string(name) + " contains a NUL byte";
  return {};
}

// ---- types --------------------------------------------------------------------------------

// IEEE binary16 as h5py defines numpy.float16 (docs/FORMAT.md section 1).
inline hid_t make_fp16_type() {
  const hid_t t = H5Tcopy(H5T_IEEE_F32LE);
  if (t < 0) return t;
  if (H5Tset_fields(t, 15, 10, 5, 0, 10) < 0 || H5Tset_size(t, 2) < 0 || H5Tset_ebias(t, 15) < 0) {
    H5Tclose(t);
    return H5I_INVALID_HID;
  }
  return t;
}

inline bool is_fp16_type(hid_t t) {
  if (H5Tget_class(t) != H5T_FLOAT || H5Tget_size(t) != 2) return false;
  size_t spos = 0, epos = 0, esize = 0, mpos = 0, msize = 0;
  if (H5Tget_fields(t, &spos, &epos, &esize, &mpos, &msize) < 0) return false;
  const H5T_order_t order = H5Tget_order(t);
  return spos == 15 && epos == 10 && esize == 5 && mpos == 0 && msize == 10 && H5Tget_ebias(t) == 15 &&
         H5Tget_precision(t) == 16 && H5Tget_offset(t) == 0 && H5Tget_norm(t) == H5T_NORM_IMPLIED &&
         order == H5T_ORDER_LE;
}

inline bool is_u8_type(hid_t t) {
  return H5Tget_class(t) == H5T_INTEGER && H5Tget_size(t) == 1 && H5Tget_sign(t) == H5T_SGN_NONE;
}

// ---- writing ------------------------------------------------------------------------------

struct Writer {
  std::string path;  // the final path, for messages

  [[noreturn]] void fail(const std::string& what) const {
    throw FileError(path, "cannot write " + what + ": " + last_error());
  }
  hid_t check(hid_t id, const std::string& what) const {
    if (id < 0) fail(what);
    return id;
  }
  void check_status(herr_t st, const std::string& what) const {
    if (st < 0) fail(what);
  }

  Hid create_file(const std::string& temp_path) const {
    Hid fcpl(check(H5Pcreate(H5P_FILE_CREATE), "file creation properties"));
    check_status(H5Pset_obj_track_times(fcpl.get(), 0), "file creation properties");
    Hid fapl(check(H5Pcreate(H5P_FILE_ACCESS), "file access properties"));
    // Nobody else opens the temporary file; locking only fails on file systems without it.
    check_status(H5Pset_file_locking(fapl.get(), 0, 1), "file access properties");
    // HDF5 1.10 object formats (FORMAT.md section 1): compact groups, small chunk indexes.
    check_status(H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V110, H5F_LIBVER_V110), "file access properties");
    // Closing the file fails while any object is still open, instead of leaving it open
    // (and unflushed) behind a successful close that the rename would then trust.
    check_status(H5Pset_fclose_degree(fapl.get(), H5F_CLOSE_SEMI), "file access properties");
    return Hid(check(H5Fcreate(temp_path.c_str(), H5F_ACC_TRUNC, fcpl.get(), fapl.get()), "HDF5 file " + temp_path));
  }

  Hid create_group(hid_t parent, const std::string& name) const {
    Hid gcpl(check(H5Pcreate(H5P_GROUP_CREATE), "group " + name));
    check_status(H5Pset_obj_track_times(gcpl.get(), 0), "group " + name);
    return Hid(check(H5Gcreate2(parent, name.c_str(), H5P_DEFAULT, gcpl.get(), H5P_DEFAULT), "group " + name));
  }

  void attr_raw(hid_t obj, const char* name, hid_t file_type, hid_t mem_type, const void* v, hsize_t n,
                bool scalar) const {
    Hid space(check(scalar ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &n, nullptr), std::string("attribute ") + name));
    Hid a(check(H5Acreate2(obj, name, file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT), std::string("attribute ") + name));
    check_status(H5Awrite(a.get(), mem_type, v), std::string("attribute ") + name);
  }
  void attr_u32(hid_t obj, const char* name, uint32_t v) const {
    attr_raw(obj, name, H5T_STD_U32LE, H5T_NATIVE_UINT32, &v, 1, true);
  }
  void attr_u64(hid_t obj, const char* name, uint64_t v) const {
    attr_raw(obj, name, H5T_STD_U64LE, H5T_NATIVE_UINT64, &v, 1, true);
  }
  void attr_u8(hid_t obj, const char* name, uint8_t v) const {
    attr_raw(obj, name, H5T_STD_U8LE, H5T_NATIVE_UINT8, &v, 1, true);
  }
  void attr_u32_array(hid_t obj, const char* name, const std::vector<uint32_t>& v) const {
    attr_raw(obj, name, H5T_STD_U32LE, H5T_NATIVE_UINT32, v.data(), v.size(), false);
  }
  // Fixed-length, null-padded UTF-8 (FORMAT.md section 1): variable-length strings live in
  // HDF5's global heap, whose parser is not safe on hostile files, so readers refuse them.
  void attr_string(hid_t obj, const char* name, const std::string& s) const {
    Hid t(check(H5Tcopy(H5T_C_S1), std::string("attribute ") + name));
    std::string padded = s.empty() ? std::string(1, '\0') : s;
    check_status(H5Tset_size(t.get(), padded.size()), std::string("attribute ") + name);
    check_status(H5Tset_strpad(t.get(), H5T_STR_NULLPAD), std::string("attribute ") + name);
    check_status(H5Tset_cset(t.get(), H5T_CSET_UTF8), std::string("attribute ") + name);
    attr_raw(obj, name, t.get(), t.get(), padded.data(), 1, true);
  }

  // Chunked along the first axis (<= 1 MiB per chunk unless one row is bigger), shuffled
  // (multi-byte elements) and zstd compressed; contiguous and unfiltered when it has no
  // element (FORMAT.md section 1).
  void dataset(hid_t parent, const std::string& name, const std::string& display, hid_t file_type, hid_t mem_type,
               size_t elem_size, const std::vector<uint64_t>& dims, const void* data, int level) const {
    std::vector<hsize_t> hd(dims.begin(), dims.end());
    uint64_t total = elem_size;
    for (uint64_t d : dims)
      if (mul_overflows(total, d, &total)) throw FileError(path, "dataset " + display + " is too large");
    Hid space(check(H5Screate_simple(static_cast<int>(hd.size()), hd.data(), nullptr), "dataset " + display));
    Hid dcpl(check(H5Pcreate(H5P_DATASET_CREATE), "dataset " + display));
    check_status(H5Pset_obj_track_times(dcpl.get(), 0), "dataset " + display);
    if (total > 0) {
      const uint64_t row_bytes = total / dims[0];
      uint64_t rows = kChunkTargetBytes / row_bytes;
      if (rows < 1) rows = 1;
      if (rows > dims[0]) rows = dims[0];
      std::vector<hsize_t> chunk = hd;
      chunk[0] = rows;
      check_status(H5Pset_chunk(dcpl.get(), static_cast<int>(chunk.size()), chunk.data()), "dataset " + display);
      // Byte shuffle first for multi-byte elements: fp16 sign/exponent bytes then compress
      // well (about 9% smaller on Gaussian K/V at the same speed class).
      if (elem_size > 1) check_status(H5Pset_shuffle(dcpl.get()), "dataset " + display);
      const unsigned cd = static_cast<unsigned>(level);
      check_status(H5Pset_filter(dcpl.get(), kZstdFilterId, H5Z_FLAG_MANDATORY, 1, &cd), "dataset " + display);
    }
    Hid d(check(H5Dcreate2(parent, name.c_str(), file_type, space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
                "dataset " + display));
    if (total > 0)
      check_status(H5Dwrite(d.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), "dataset " + display);
    check_status(d.close(), "dataset " + display);
  }

  // The layer_ids attribute and the optional token_ids dataset of n entries (both files).
  template <class Layers>
  void layer_ids_and_tokens(hid_t root, const Layers& layers, const std::vector<int32_t>& tokens, uint64_t n,
                            int zstd_level) const {
    std::vector<uint32_t> ids;
    for (const auto& l : layers) ids.push_back(l.layer_id);
    attr_u32_array(root, "layer_ids", ids);
    if (!tokens.empty())
      dataset(root, "token_ids", "token_ids", H5T_STD_I32LE, H5T_NATIVE_INT32, 4, {n}, tokens.data(), zstd_level);
  }
};

// ---- reading ------------------------------------------------------------------------------

enum class Elem { fp16, u8, integer };

struct Reader {
  std::string path;

  [[noreturn]] void fail(const std::string& defect) const { throw FileError(path, defect); }

  // Throws unless the path names a regular file this process can open for reading.
  void check_openable() const { check_input_file(path); }

  // Opens read-only after checking that the file exists and carries an HDF5 signature.
  Hid open_file() const {
    check_openable();
    if (!is_hdf5_file(path)) fail("not an HDF5 file");
    Hid fapl(H5Pcreate(H5P_FILE_ACCESS));
    if (!fapl.valid() || H5Pset_file_locking(fapl.get(), 0, 1) < 0 ||
        H5Pset_fclose_degree(fapl.get(), H5F_CLOSE_STRONG) < 0)
      fail("cannot set up HDF5 file access: " + last_error());
    Hid f(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get()));
    if (!f.valid()) fail("unreadable HDF5 file (truncated or corrupt): " + last_error());
    return f;
  }

  // ---- attributes
  Hid attr(hid_t obj, const char* name, const std::string& display) const {
    const htri_t e = H5Aexists(obj, name);
    if (e < 0) fail("cannot look up attribute " + display + ": " + last_error());
    if (e == 0) fail("missing attribute " + display);
    Hid a(H5Aopen(obj, name, H5P_DEFAULT));
    if (!a.valid()) fail("cannot open attribute " + display + ": " + last_error());
    return a;
  }

  bool has_attr(hid_t obj, const char* name) const {
    const htri_t e = H5Aexists(obj, name);
    if (e < 0) fail(std::string("cannot look up attribute ") + name + ": " + last_error());
    return e > 0;
  }

  // One integer as stored, without wrapping: a negative value stays negative.
  struct IntValue {
    bool negative = false;
    uint64_t u = 0;  // the value when !negative
    int64_t s = 0;   // the value when negative
    std::string text() const { return negative ? std::to_string(s) : std::to_string(u); }
  };

  // Integers of any HDF5 integer type up to 8 bytes; a scalar, or a 1-D array of 1 to
  // max_count entries.
  std::vector<IntValue> int_values(hid_t a, const std::string& display, bool scalar, uint64_t max_count) const {
    Hid t(H5Aget_type(a));
    if (!t.valid() || H5Tget_class(t.get()) != H5T_INTEGER) fail("attribute " + display + ": expected an integer");
    const size_t size = H5Tget_size(t.get());
    if (size == 0 || size > 8) fail("attribute " + display + ": integer wider than 64 bits");
    Hid s(H5Aget_space(a));
    if (!s.valid()) fail("attribute " + display + ": unreadable dataspace");
    const H5S_class_t cls = H5Sget_simple_extent_type(s.get());
    uint64_t n = 1;
    if (scalar) {
      if (cls != H5S_SCALAR) fail("attribute " + display + ": expected a scalar");
    } else {
      if (cls != H5S_SIMPLE || H5Sget_simple_extent_ndims(s.get()) != 1)
        fail("attribute " + display + ": expected a 1-D array");
      hsize_t dim = 0;
      H5Sget_simple_extent_dims(s.get(), &dim, nullptr);
      n = dim;
      if (n == 0) fail("attribute " + display + " is empty");
      if (n > max_count)
        fail("attribute " + display + " has " + std::to_string(n) + " entries, more than " + std::to_string(max_count));
    }
    std::vector<IntValue> out(static_cast<size_t>(n));
    if (H5Tget_sign(t.get()) == H5T_SGN_2) {
      std::vector<int64_t> v(out.size());
      if (H5Aread(a, H5T_NATIVE_INT64, v.data()) < 0) fail("cannot read attribute " + display + ": " + last_error());
      for (size_t i = 0; i < v.size(); ++i) {
        out[i].negative = v[i] < 0;
        out[i].s = v[i];
        out[i].u = v[i] < 0 ? 0 : static_cast<uint64_t>(v[i]);
      }
    } else {
      std::vector<uint64_t> v(out.size());
      if (H5Aread(a, H5T_NATIVE_UINT64, v.data()) < 0) fail("cannot read attribute " + display + ": " + last_error());
      for (size_t i = 0; i < v.size(); ++i) out[i].u = v[i];
    }
    return out;
  }

  static std::string range_text(uint64_t lo, uint64_t hi) {
    return "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  }

  uint64_t uint_attr(hid_t obj, const char* name, const std::string& display, uint64_t lo, uint64_t hi) const {
    Hid a = attr(obj, name, display);
    const IntValue v = int_values(a.get(), display, true, 1)[0];
    if (v.negative || v.u < lo || v.u > hi)
      fail("attribute " + display + " = " + v.text() + " is out of range " + range_text(lo, hi));
    return v.u;
  }
  uint32_t u32_attr(hid_t obj, const char* name, uint32_t lo = 0, uint32_t hi = UINT32_MAX) const {
    return static_cast<uint32_t>(uint_attr(obj, name, name, lo, hi));
  }

  std::vector<uint32_t> u32_array_attr(hid_t obj, const char* name, uint64_t max_count) const {
    Hid a = attr(obj, name, name);
    const std::vector<IntValue> v = int_values(a.get(), name, false, max_count);
    std::vector<uint32_t> out(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      if (v[i].negative || v[i].u > UINT32_MAX)
        fail(std::string("attribute ") + name + "[" + std::to_string(i) + "] = " + v[i].text() +
             " is out of range [0, 4294967295]");
      out[i] = static_cast<uint32_t>(v[i].u);
    }
    return out;
  }

  std::string string_attr(hid_t obj, const char* name, const std::string& display) const {
    Hid a = attr(obj, name, display);
    Hid t(H5Aget_type(a.get()));
    if (!t.valid() || H5Tget_class(t.get()) != H5T_STRING) fail("attribute " + display + ": expected a string");
    Hid s(H5Aget_space(a.get()));
    if (!s.valid() || H5Sget_simple_extent_type(s.get()) != H5S_SCALAR) fail("attribute " + display + ": expected a scalar string");
    // Variable-length strings are refused by their type alone, before HDF5 reads its global
    // heap (FORMAT.md section 1).
    const htri_t var = H5Tis_variable_str(t.get());
    if (var < 0) fail("attribute " + display + ": unreadable string type");
    if (var > 0)
      fail("attribute " + display + ": variable-length strings are not accepted (fixed-length only; h5py writes a "
           "Python str variable-length by default: store numpy.bytes_(text) instead, docs/FORMAT.md section 1)");
    const size_t n = H5Tget_size(t.get());
    if (n == 0 || n > kMaxStringBytes) fail("attribute " + display + " is longer than 65535 bytes");
    std::vector<char> buf(n);
    if (H5Aread(a.get(), t.get(), buf.data()) < 0) fail("cannot read attribute " + display + ": " + last_error());
    size_t len = n;
    for (size_t i = 0; i < n; ++i)
      if (buf[i] == '\0') {
        len = i;
        break;
      }
    for (size_t i = len; i < n; ++i)
      if (buf[i] != '\0') fail("attribute " + display + " contains a NUL byte");
    if (H5Tget_strpad(t.get()) == H5T_STR_SPACEPAD)
      while (len > 0 && buf[len - 1] == ' ') --len;
    std::string out(buf.data(), len);
    return out;
  }

  // ---- objects
  // A member reached by a hard link, of the wanted kind (H5I_GROUP or H5I_DATASET).
  Hid member(hid_t parent, const std::string& name, const std::string& display, H5I_type_t kind) const {
    const char* what = kind == H5I_GROUP ? "group " : "dataset ";
    const htri_t e = H5Lexists(parent, name.c_str(), H5P_DEFAULT);
    if (e < 0) fail(std::string("cannot look up ") + what + display + ": " + last_error());
    if (e == 0) fail(std::string(what) + display + " is missing");
    H5L_info_t li;
    if (H5Lget_info(parent, name.c_str(), &li, H5P_DEFAULT) < 0) fail(std::string("cannot look up ") + what + display + ": " + last_error());
    if (li.type != H5L_TYPE_HARD) fail(display + " is a soft or external link (not allowed)");
    Hid o(H5Oopen(parent, name.c_str(), H5P_DEFAULT));
    if (!o.valid()) fail(std::string("cannot open ") + what + display + ": " + last_error());
    if (H5Iget_type(o.get()) != kind) fail(display + " is not a " + (kind == H5I_GROUP ? "group" : "dataset"));
    return o;
  }

  bool has_link(hid_t parent, const std::string& name) const {
    const htri_t e = H5Lexists(parent, name.c_str(), H5P_DEFAULT);
    if (e < 0) fail("cannot look up " + name + ": " + last_error());
    return e > 0;
  }

  // Names of the links of a group (at most max_count + 1 are collected).
  std::vector<std::string> link_names(hid_t group, const std::string& display, size_t max_count) const {
    // sjkv writes the 1.8+ link format only. libhdf5 1.10 can crash iterating an old-style
    // (symbol table) group whose local heap is corrupt, so such groups are refused unread.
    H5G_info_t gi;
    if (H5Gget_info(group, &gi) < 0) fail("cannot read group " + display + ": " + last_error());
    if (gi.storage_type == H5G_STORAGE_TYPE_SYMBOL_TABLE)
      fail("group " + display + " uses the old HDF5 symbol-table format; sjkv files use the HDF5 1.8+ link format");
    struct Acc {
      std::vector<std::string> names;
      size_t max;
    } acc{{}, max_count + 1};
    const herr_t st = H5Literate(
        group, H5_INDEX_NAME, H5_ITER_NATIVE, nullptr,
        [](hid_t, const char* name, const H5L_info_t*, void* data) -> herr_t {
          Acc* a = static_cast<Acc*>(data);
          a->names.emplace_back(name);
          return a->names.size() >= a->max ? 1 : 0;
        },
        &acc);
    if (st < 0) fail("cannot list group " + display + ": " + last_error());
    return acc.names;
  }

  // Opens a dataset and checks, before any allocation: storage kind, element type, exact
  // shape, size overflow, every chunk stored, and the size it claims against the bytes the
  // file stores (FORMAT.md section 5, step 9).
  Hid dataset(hid_t parent, const std::string& name, const std::string& display, Elem elem,
              const std::vector<uint64_t>& want, const char* dim_names) const {
    Hid d = member(parent, name, display, H5I_DATASET);
    Hid dcpl(H5Dget_create_plist(d.get()));
    if (!dcpl.valid()) fail("cannot read the properties of dataset " + display + ": " + last_error());
    const H5D_layout_t layout = H5Pget_layout(dcpl.get());
    if (layout != H5D_CONTIGUOUS && layout != H5D_CHUNKED && layout != H5D_COMPACT)
      fail("dataset " + display + " uses a virtual or unknown layout (not allowed)");
    if (H5Pget_external_count(dcpl.get()) != 0) fail("dataset " + display + " uses external storage (not allowed)");

    Hid t(H5Dget_type(d.get()));
    if (!t.valid()) fail("cannot read the type of dataset " + display);
    size_t elem_size = 0;
    switch (elem) {
      case Elem::fp16:
        if (!is_fp16_type(t.get())) fail("dataset " + display + ": element type is not fp16");
        elem_size = 2;
        break;
      case Elem::u8:
        if (!is_u8_type(t.get())) fail("dataset " + display + ": element type is not uint8");
        elem_size = 1;
        break;
      case Elem::integer:
        if (H5Tget_class(t.get()) != H5T_INTEGER || H5Tget_size(t.get()) == 0 || H5Tget_size(t.get()) > 8)
          fail("dataset " + display + ": element type is not an integer");
        elem_size = H5Tget_size(t.get());
        break;
    }

    Hid s(H5Dget_space(d.get()));
    if (!s.valid() || H5Sget_simple_extent_type(s.get()) != H5S_SIMPLE)
      fail("dataset " + display + ": expected a " + std::to_string(want.size()) + "-D array");
    const int rank = H5Sget_simple_extent_ndims(s.get());
    if (rank != static_cast<int>(want.size()))
      fail("dataset " + display + ": rank " + std::to_string(rank) + ", expected " + std::to_string(want.size()) +
           " " + dim_names);
    std::vector<hsize_t> hd(want.size());
    H5Sget_simple_extent_dims(s.get(), hd.data(), nullptr);
    const std::vector<uint64_t> have(hd.begin(), hd.end());
    if (have != want)
      fail("dataset " + display + ": shape " + dims_text(have) + " does not match " + dim_names + " = " + dims_text(want));

    uint64_t logical = elem_size;
    for (uint64_t v : have)
      if (mul_overflows(logical, v, &logical)) fail("dataset " + display + ": size overflows 64 bits");
    if (logical == 0) return d;

    const uint64_t stored = H5Dget_storage_size(d.get());
    if (layout == H5D_CHUNKED) {
      std::vector<hsize_t> chunk(want.size());
      if (H5Pget_chunk(dcpl.get(), rank, chunk.data()) != rank) fail("dataset " + display + ": unreadable chunk shape");
      uint64_t need = 1;
      for (size_t i = 0; i < want.size(); ++i) {
        if (chunk[i] == 0) fail("dataset " + display + ": zero chunk extent");
        if (mul_overflows(need, (have[i] + chunk[i] - 1) / chunk[i], &need)) fail("dataset " + display + ": chunk count overflows");
      }
      hsize_t nchunks = 0;
      if (H5Dget_num_chunks(d.get(), s.get(), &nchunks) < 0)
        fail("cannot count the chunks of dataset " + display + ": " + last_error());
      if (nchunks < need)
        fail("dataset " + display + " is truncated: " + std::to_string(nchunks) + " of " + std::to_string(need) +
             " chunks stored");
    } else if (layout == H5D_CONTIGUOUS && stored < logical) {
      fail("dataset " + display + " is truncated: " + std::to_string(stored) + " of " + std::to_string(logical) +
           " bytes stored");
    }
    uint64_t backed = 0;
    if (layout != H5D_COMPACT && !mul_overflows(stored, kMaxExpansion, &backed) && logical > backed)
      fail("dataset " + display + " claims " + std::to_string(logical) + " bytes but stores only " + std::to_string(stored));
    return d;
  }

  void read(hid_t d, hid_t mem_type, void* out, const std::string& display) const {
    if (H5Dread(d, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out) < 0)
      fail("cannot read dataset " + display + ": " + last_error());
  }

  // Checks the magic and version attributes of the root group.
  void check_magic_version(hid_t file, const char* magic) const {
    if (!has_attr(file, "sjkv_format")) fail("not an sjkv file (no sjkv_format attribute)");
    const std::string m = string_attr(file, "sjkv_format", "sjkv_format");
    if (m != magic) fail("sjkv_format is '" + m + "', expected '" + magic + "'");
    check_version(file, "version", kFileVersion);
  }

  void check_version(hid_t obj, const char* name, uint32_t supported) const {
    Hid a = attr(obj, name, name);
    const IntValue v = int_values(a.get(), name, true, 1)[0];
    if (v.negative || v.u == 0) fail(std::string(name) + " " + v.text() + " is invalid");
    if (v.u > supported)
      fail(std::string(name) + " " + v.text() + " is newer than this build reads (" + std::to_string(supported) +
           "); a newer sjkv wrote it");
  }

  // /layers must hold exactly the groups named by layer_ids (both files).
  void check_layer_groups(hid_t root, const std::vector<uint32_t>& ids) const {
    Hid layers = member(root, "layers", "layers", H5I_GROUP);
    std::unordered_set<std::string> listed;
    for (uint32_t id : ids) listed.insert(std::to_string(id));
    for (const std::string& name : link_names(layers.get(), "layers", ids.size()))
      if (!listed.count(name)) fail("group layers/" + name + " is not in layer_ids");
  }

  // The optional /token_ids dataset of n entries (both files): any integer type, every value
  // in [0, INT32_MAX]. Empty when absent.
  std::vector<int32_t> token_ids(hid_t root, uint64_t n, const char* shape) const {
    std::vector<int32_t> out;
    if (!has_link(root, "token_ids")) return out;
    Hid d = dataset(root, "token_ids", "token_ids", Elem::integer, {n}, shape);
    Hid t(H5Dget_type(d.get()));
    std::vector<int64_t> v(n);
    if (H5Tget_sign(t.get()) == H5T_SGN_2) {
      if (n) read(d.get(), H5T_NATIVE_INT64, v.data(), "token_ids");
    } else {
      std::vector<uint64_t> u(n);
      if (n) read(d.get(), H5T_NATIVE_UINT64, u.data(), "token_ids");
      for (size_t i = 0; i < u.size(); ++i) v[i] = u[i] > INT64_MAX ? INT64_MAX : static_cast<int64_t>(u[i]);
    }
    out.resize(n);
    for (size_t i = 0; i < v.size(); ++i) {
      if (v[i] < 0 || v[i] > INT32_MAX)
        fail("token_ids[" + std::to_string(i) + "] = " + std::to_string(v[i]) + " is out of range [0, 2147483647]");
      out[i] = static_cast<int32_t>(v[i]);
    }
    return out;
  }
};

// A reader's hold on HDF5 for one file: the library lock, quiet errors, the zstd filter
// registered (a failure is reported as the file's defect) and the file opened read-only.
class ReadSession {
 public:
  explicit ReadSession(const std::string& path) : lock_(api_mutex()), r_{path} {
    try {
      register_zstd_filter();
    } catch (const std::exception& e) {
      r_.fail(e.what());
    }
    f_ = r_.open_file();
  }
  const Reader& reader() const { return r_; }
  hid_t root() const { return f_.get(); }

 private:
  std::lock_guard<std::mutex> lock_;
  Quiet quiet_;
  Reader r_;
  Hid f_;
};

}  // namespace h5
}  // namespace sjkv

namespace sjkv {
struct Capture;
namespace h5 {

// The rules of Capture::check_consistent() (capture.cpp) in two steps, so that a reader
// checks the header before it sizes any allocation. Each returns the first defect, or "".
std::string capture_header_defect(const Capture& c);                   // all but layer data
std::string capture_layer_defect(const Capture& c, size_t layer_index);  // sizes and values

// The one opening of every HDF5 output: the write session, a writer naming the final path,
// the file created in out's temporary, `body(writer, root)`, and the close checked. The caller
// commits `out` (alone, or with others through commit_all).
template <class Body>
void write_file(AtomicOutput& out, int zstd_level, Body&& body) {
  const std::string& path = out.final_path();
  const WriteSession session(path, zstd_level);
  const Writer w{path};
  Hid f = w.create_file(out.temp_path());
  body(w, f.get());
  w.check_status(f.close(), "HDF5 file");
}

}  // namespace h5
}  // namespace sjkv
