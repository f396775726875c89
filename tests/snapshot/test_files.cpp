// Capture and snapshot files (docs/FORMAT.md): exact round trips over several geometries,
// one hostile file per defect the reader must refuse (built here by writing a valid file
// and damaging it with the HDF5 C API, and committed under tests/reject/), atomic writes
// that leave nothing behind on failure, and the zstd filter (id 32015) on its own and
// against byte streams another writer would produce.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zstd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <ftw.h>
#include <fstream>
#include <functional>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include "sjkv/fp16.h"
#include "sjkv/io/atomic_file.h"
#include "sjkv/io/capture_file.h"
#include "sjkv/io/snapshot_file.h"
#include "sjkv/io/zstd_filter.h"
#include "sjkv/policy.h"
#include "sjkv/staging.h"
#include "sjkv/testgen.h"

using namespace sjkv;

namespace {

// ---- scratch folder -------------------------------------------------------------------------

std::string g_scratch;  // created on first use, removed when the tests end

std::string scratch_dir() {
  static std::string dir = [] {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/sjkv_test_files.XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    const char* d = mkdtemp(buf.data());
    if (!d) std::abort();
    g_scratch = d;
    return std::string(d);
  }();
  return dir;
}

class ScratchCleanup : public ::testing::Environment {
 public:
  void TearDown() override {
    if (g_scratch.empty()) return;
    nftw(
        g_scratch.c_str(),
        [](const char* p, const struct stat*, int, struct FTW*) { return std::remove(p); }, 16,
        FTW_DEPTH | FTW_PHYS);
  }
};
::testing::Environment* const g_cleanup = ::testing::AddGlobalTestEnvironment(new ScratchCleanup);

std::string scratch(const std::string& name) { return scratch_dir() + "/" + name; }

bool exists(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}

std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string n = e->d_name;
      if (n != "." && n != "..") out.push_back(n);
    }
    closedir(d);
  }
  return out;
}

std::vector<uint8_t> file_bytes(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// ---- generators -----------------------------------------------------------------------------

// Finite fp16 values with the corners that a lossy path would change: signed zeros,
// subnormals, the largest finite values.
// Fixture files use few distinct values so that they compress to a few KiB.
bool g_low_entropy = false;

uint16_t test_half(XorShift64& rng, uint64_t i) {
  if (g_low_entropy) return static_cast<uint16_t>(0x3800 + ((rng.next() & 1) << 10));
  switch (i % 61) {
    case 3: return 0x8000;  // -0
    case 11: return 0x0001;  // smallest subnormal
    case 17: return 0x83ff;  // largest negative subnormal
    case 29: return 0x7bff;  // 65504
    case 41: return 0xfbff;  // -65504
    default: return f32_to_f16(rng.value(1 + static_cast<int32_t>(i % 7), 1));
  }
}

Capture make_capture(uint32_t D, uint32_t H, uint32_t T, std::vector<uint32_t> ids, bool with_tokens, uint64_t seed) {
  Capture c;
  c.model = "test-model-D" + std::to_string(D);
  c.source = "test:seed=" + std::to_string(seed);
  c.head_dim = D;
  c.kv_heads = H;
  c.tokens = T;
  c.rotated = (seed & 1) != 0;
  c.rotation_block = c.rotated ? (D < 256 ? D : 256) : 0;
  XorShift64 rng(0x9E3779B97F4A7C15ull ^ seed);
  if (with_tokens)
    for (uint32_t t = 0; t < T; ++t) c.token_ids.push_back(static_cast<int32_t>(rng.next() % 262144));
  for (uint32_t id : ids) {
    CaptureLayer l;
    l.layer_id = id;
    l.k.resize(c.values_per_layer());
    l.v.resize(c.values_per_layer());
    for (size_t i = 0; i < l.k.size(); ++i) l.k[i] = test_half(rng, i);
    for (size_t i = 0; i < l.v.size(); ++i) l.v[i] = test_half(rng, i + 5);
    c.layers.push_back(std::move(l));
  }
  return c;
}

void fill_staged_rows(XorShift64& rng, StagingType st, uint32_t D, uint64_t rows, std::vector<uint8_t>* out) {
  const uint32_t rb = staging_row_bytes(st, D);
  out->assign(rows * rb, 0);
  std::vector<float> x(D);
  for (uint64_t r = 0; r < rows; ++r) {
    for (uint32_t d = 0; d < D; ++d)
      x[d] = g_low_entropy ? static_cast<float>(rng.next() & 1) : rng.value(1 + static_cast<int32_t>(d % 5), 1);
    ASSERT_TRUE(staging_encode_row(st, x.data(), D, out->data() + r * rb));
  }
}

struct SnapSpec {
  CodecConfig cfg;
  uint32_t H = 2, n_ubatch = 64, B = 0, B_prev = 0, N = 0, draining = 0;
  std::vector<uint32_t> ids = {0, 5};
  bool tokens = false;
  uint64_t seed = 1;
};

CodecConfig small_config(uint32_t D = 64, uint32_t bk = 4, uint32_t bv = 4, StagingType st = StagingType::q8_0) {
  CodecConfig c;
  c.head_dim = D;
  c.group = 16;
  c.bits_k = bk;
  c.bits_v = bv;
  c.body = Body::scalar;
  c.staging = st;
  c.sink = 64;
  c.tail = 32;
  c.tail_max = 128;
  return c;
}

// A consistent snapshot with synthetic bytes (the file layer treats records as opaque).
Snapshot make_snapshot(const SnapSpec& sp, EmbeddedCodebooks* cb = nullptr) {
  Snapshot s;
  s.config = sp.cfg;
  s.kv_heads = sp.H;
  s.n_ubatch = sp.n_ubatch;
  s.B = sp.B ? sp.B : sp.cfg.sink;
  s.B_prev = sp.B_prev ? sp.B_prev : s.B;
  s.N = sp.N;
  s.draining = sp.draining;
  s.model = "test-model";
  s.source = "test:snapshot seed=" + std::to_string(sp.seed);
  XorShift64 rng(0xD1B54A32D192ED03ull ^ sp.seed);
  if (sp.tokens)
    for (uint32_t t = 0; t < s.N; ++t) s.token_ids.push_back(static_cast<int32_t>(rng.next() % 151936));
  const uint32_t D = sp.cfg.head_dim, H = sp.H;
  const uint64_t rec = sp.cfg.layout().bytes;
  for (uint32_t id : sp.ids) {
    SnapshotLayer l;
    l.layer_id = id;
    if (sp.cfg.sink_type == SinkType::f16) {
      l.sink_k.resize(static_cast<size_t>(s.n_sink()) * H * D);
      l.sink_v.resize(l.sink_k.size());
      for (size_t i = 0; i < l.sink_k.size(); ++i) l.sink_k[i] = test_half(rng, i);
      for (size_t i = 0; i < l.sink_v.size(); ++i) l.sink_v[i] = test_half(rng, i + 1);
    } else {
      fill_staged_rows(rng, sp.cfg.staging, D, static_cast<uint64_t>(s.n_sink()) * H, &l.sink_k_staged);
      fill_staged_rows(rng, sp.cfg.staging, D, static_cast<uint64_t>(s.n_sink()) * H, &l.sink_v_staged);
    }
    l.body.resize(static_cast<size_t>(s.n_groups()) * H * rec);
    for (uint8_t& b : l.body) b = static_cast<uint8_t>(rng.next() & (g_low_entropy ? 1 : 255));
    fill_staged_rows(rng, sp.cfg.staging, D, static_cast<uint64_t>(s.n_ring()) * H, &l.ring_k);
    fill_staged_rows(rng, sp.cfg.staging, D, static_cast<uint64_t>(s.n_ring()) * H, &l.ring_v);
    s.layers.push_back(std::move(l));
  }
  if (sp.cfg.resolved_body() == Body::trellis && cb) {
    cb->axis = "token";
    cb->bits_k = sp.cfg.bits_k;
    cb->bits_v = sp.cfg.bits_v;
    cb->k_table.resize(size_t{1} << (6 + sp.cfg.bits_k));
    cb->v_table.resize(size_t{1} << (6 + sp.cfg.bits_v));
    for (size_t i = 0; i < cb->k_table.size(); ++i) cb->k_table[i] = f32_to_f16(static_cast<float>(i >> 6) - 3.5f + 0.01f * (i & 63));
    for (size_t i = 0; i < cb->v_table.size(); ++i) cb->v_table[i] = f32_to_f16(static_cast<float>(i >> 6) - 1.5f - 0.01f * (i & 63));
    s.codebook_id = codebook_id_of(cb->k_table, cb->v_table);
  }
  return s;
}

void expect_same_capture(const Capture& a, const Capture& b) {
  EXPECT_EQ(a.model, b.model);
  EXPECT_EQ(a.source, b.source);
  EXPECT_EQ(a.head_dim, b.head_dim);
  EXPECT_EQ(a.kv_heads, b.kv_heads);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.rotated, b.rotated);
  EXPECT_EQ(a.rotation_block, b.rotation_block);
  EXPECT_EQ(a.token_ids, b.token_ids);
  ASSERT_EQ(a.layers.size(), b.layers.size());
  for (size_t i = 0; i < a.layers.size(); ++i) {
    EXPECT_EQ(a.layers[i].layer_id, b.layers[i].layer_id);
    EXPECT_TRUE(a.layers[i].k == b.layers[i].k) << "layer " << i << " K differs";
    EXPECT_TRUE(a.layers[i].v == b.layers[i].v) << "layer " << i << " V differs";
  }
}

void expect_same_snapshot(const Snapshot& a, const Snapshot& b) {
  // The file stores the resolved body and rotation block.
  EXPECT_EQ(a.config.resolved_body(), b.config.body);
  EXPECT_EQ(a.config.rotation(), b.config.rotation_block);
  EXPECT_EQ(a.config.name(), b.config.name());
  EXPECT_EQ(a.config.head_dim, b.config.head_dim);
  EXPECT_EQ(a.config.group, b.config.group);
  EXPECT_EQ(a.config.bits_k, b.config.bits_k);
  EXPECT_EQ(a.config.bits_v, b.config.bits_v);
  EXPECT_EQ(a.config.iters, b.config.iters);
  EXPECT_EQ(a.config.balance, b.config.balance);
  EXPECT_EQ(a.config.staging, b.config.staging);
  EXPECT_EQ(a.config.sink_type, b.config.sink_type);
  EXPECT_EQ(a.config.sink, b.config.sink);
  EXPECT_EQ(a.config.tail, b.config.tail);
  EXPECT_EQ(a.config.tail_max, b.config.tail_max);
  EXPECT_EQ(a.config.flush_chunk, b.config.flush_chunk);
  EXPECT_EQ(a.kv_heads, b.kv_heads);
  EXPECT_EQ(a.n_ubatch, b.n_ubatch);
  EXPECT_EQ(a.B, b.B);
  EXPECT_EQ(a.B_prev, b.B_prev);
  EXPECT_EQ(a.N, b.N);
  EXPECT_EQ(a.draining, b.draining);
  EXPECT_EQ(a.codebook_id, b.codebook_id);
  EXPECT_EQ(a.model, b.model);
  EXPECT_EQ(a.source, b.source);
  EXPECT_EQ(a.token_ids, b.token_ids);
  ASSERT_EQ(a.layers.size(), b.layers.size());
  for (size_t i = 0; i < a.layers.size(); ++i) {
    const SnapshotLayer &x = a.layers[i], &y = b.layers[i];
    EXPECT_EQ(x.layer_id, y.layer_id);
    EXPECT_TRUE(x.sink_k == y.sink_k && x.sink_v == y.sink_v) << "layer " << i << " sink differs";
    EXPECT_TRUE(x.sink_k_staged == y.sink_k_staged && x.sink_v_staged == y.sink_v_staged) << "layer " << i;
    EXPECT_TRUE(x.body == y.body) << "layer " << i << " body differs";
    EXPECT_TRUE(x.ring_k == y.ring_k && x.ring_v == y.ring_v) << "layer " << i << " ring differs";
  }
}

// ---- HDF5 surgery on written files (the hostile-file fixtures) -------------------------------

struct H5File {
  hid_t id;
  explicit H5File(const std::string& p) : id(H5Fopen(p.c_str(), H5F_ACC_RDWR, H5P_DEFAULT)) {
    if (id < 0) throw std::runtime_error("fixture: cannot open " + p);
  }
  ~H5File() { H5Fclose(id); }
};

void must(herr_t st, const char* what) {
  if (st < 0) throw std::runtime_error(std::string("fixture: ") + what);
}

// Splits "a/b/attr" into object path "a/b" (or "/") and attribute name.
std::pair<std::string, std::string> split_attr(const std::string& p) {
  const size_t s = p.find_last_of('/');
  if (s == std::string::npos) return {"/", p};
  return {p.substr(0, s), p.substr(s + 1)};
}

void put_attr(hid_t f, const std::string& path, hid_t type, const void* v, hsize_t n = 0) {
  const auto [obj, name] = split_attr(path);
  if (H5Aexists_by_name(f, obj.c_str(), name.c_str(), H5P_DEFAULT) > 0)
    must(H5Adelete_by_name(f, obj.c_str(), name.c_str(), H5P_DEFAULT), "delete attribute");
  const hid_t sp = n ? H5Screate_simple(1, &n, nullptr) : H5Screate(H5S_SCALAR);
  const hid_t a = H5Acreate_by_name(f, obj.c_str(), name.c_str(), type, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  must(a, "create attribute");
  must(H5Awrite(a, type, v), "write attribute");
  H5Aclose(a);
  H5Sclose(sp);
}
void put_u32(hid_t f, const std::string& path, uint32_t v) { put_attr(f, path, H5T_NATIVE_UINT32, &v); }
void put_i64(hid_t f, const std::string& path, int64_t v) { put_attr(f, path, H5T_NATIVE_INT64, &v); }
void put_u64(hid_t f, const std::string& path, uint64_t v) { put_attr(f, path, H5T_NATIVE_UINT64, &v); }
// A string as sjkv writes it (fixed-length, null-padded).
void put_str(hid_t f, const std::string& path, const std::string& s) {
  const hid_t t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, s.size());
  H5Tset_strpad(t, H5T_STR_NULLPAD);
  put_attr(f, path, t, s.data());
  H5Tclose(t);
}
// A variable-length string, as h5py writes a Python str.
void put_vlen_str(hid_t f, const std::string& path, const std::string& s) {
  const hid_t t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, H5T_VARIABLE);
  H5Tset_cset(t, H5T_CSET_UTF8);
  const char* p = s.c_str();
  put_attr(f, path, t, &p);
  H5Tclose(t);
}
// Fixed-length, null-terminated, with `extra` trailing spaces in a space-padded type.
void put_spacepad_str(hid_t f, const std::string& path, const std::string& s) {
  const hid_t t = H5Tcopy(H5T_C_S1);
  const std::string padded = s + "   ";
  H5Tset_size(t, padded.size());
  H5Tset_strpad(t, H5T_STR_SPACEPAD);
  put_attr(f, path, t, padded.data());
  H5Tclose(t);
}
void drop_attr(hid_t f, const std::string& path) {
  const auto [obj, name] = split_attr(path);
  must(H5Adelete_by_name(f, obj.c_str(), name.c_str(), H5P_DEFAULT), "delete attribute");
}
void drop(hid_t f, const std::string& path) { must(H5Ldelete(f, path.c_str(), H5P_DEFAULT), "delete link"); }

hid_t fp16_type() {
  const hid_t t = H5Tcopy(H5T_IEEE_F32LE);
  H5Tset_fields(t, 15, 10, 5, 0, 10);
  H5Tset_size(t, 2);
  H5Tset_ebias(t, 15);
  return t;
}

// Replaces a dataset by a contiguous one of the given type and shape, filled with `fill`.
void replace_dataset(hid_t f, const std::string& path, hid_t type, std::vector<hsize_t> dims, uint8_t fill = 0) {
  if (H5Lexists(f, path.c_str(), H5P_DEFAULT) > 0) drop(f, path);
  const hid_t sp = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
  const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_obj_track_times(dcpl, 0);  // reproducible fixture bytes
  const hid_t d = H5Dcreate2(f, path.c_str(), type, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  H5Pclose(dcpl);
  must(d, "create dataset");
  size_t n = H5Tget_size(type);
  for (hsize_t v : dims) n *= v;
  if (n) {
    std::vector<uint8_t> buf(n, fill);
    must(H5Dwrite(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data()), "write dataset");
  }
  H5Dclose(d);
  H5Sclose(sp);
}

// Writes one element of a 3-D (or 1-D) dataset with the dataset's own type.
void poke(hid_t f, const std::string& path, std::vector<hsize_t> at, const void* value) {
  const hid_t d = H5Dopen2(f, path.c_str(), H5P_DEFAULT);
  must(d, "open dataset");
  const hid_t t = H5Dget_type(d);
  const hid_t fs = H5Dget_space(d);
  std::vector<hsize_t> one(at.size(), 1);
  must(H5Sselect_hyperslab(fs, H5S_SELECT_SET, at.data(), nullptr, one.data(), nullptr), "select");
  const hsize_t n1 = 1;
  const hid_t ms = H5Screate_simple(1, &n1, nullptr);
  must(H5Dwrite(d, t, ms, fs, H5P_DEFAULT, value), "write element");
  H5Sclose(ms);
  H5Sclose(fs);
  H5Tclose(t);
  H5Dclose(d);
}

void poke_u16(hid_t f, const std::string& path, std::vector<hsize_t> at, uint16_t v) { poke(f, path, at, &v); }
void poke_u8(hid_t f, const std::string& path, std::vector<hsize_t> at, uint8_t v) { poke(f, path, at, &v); }

// Recreates a dataset chunked along its first axis with the zstd filter and writes only
// the first chunk: a dataset whose other chunks were never stored.
void truncate_chunks(hid_t f, const std::string& path, hsize_t rows_per_chunk) {
  const hid_t d0 = H5Dopen2(f, path.c_str(), H5P_DEFAULT);
  const hid_t t = H5Dget_type(d0);
  const hid_t sp = H5Dget_space(d0);
  std::vector<hsize_t> dims(static_cast<size_t>(H5Sget_simple_extent_ndims(sp)));
  H5Sget_simple_extent_dims(sp, dims.data(), nullptr);
  H5Dclose(d0);
  drop(f, path);
  const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_obj_track_times(dcpl, 0);
  std::vector<hsize_t> chunk = dims;
  chunk[0] = rows_per_chunk;
  must(H5Pset_chunk(dcpl, static_cast<int>(chunk.size()), chunk.data()), "chunk");
  const unsigned level = 3;
  must(H5Pset_filter(dcpl, kZstdFilterId, H5Z_FLAG_MANDATORY, 1, &level), "filter");
  const hid_t d = H5Dcreate2(f, path.c_str(), t, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  must(d, "create chunked");
  const hid_t fs = H5Dget_space(d);
  std::vector<hsize_t> start(dims.size(), 0);
  must(H5Sselect_hyperslab(fs, H5S_SELECT_SET, start.data(), nullptr, chunk.data(), nullptr), "select");
  size_t n = H5Tget_size(t);
  for (hsize_t v : chunk) n *= v;
  std::vector<uint8_t> buf(n, 0);
  const hid_t ms = H5Screate_simple(static_cast<int>(chunk.size()), chunk.data(), nullptr);
  must(H5Dwrite(d, t, ms, fs, H5P_DEFAULT, buf.data()), "write first chunk");
  H5Sclose(ms);
  H5Sclose(fs);
  H5Dclose(d);
  H5Pclose(dcpl);
  H5Sclose(sp);
  H5Tclose(t);
}

// Replaces the first chunk of a chunked dataset by bytes that are not a zstd frame.
void corrupt_first_chunk(hid_t f, const std::string& path) {
  const hid_t d = H5Dopen2(f, path.c_str(), H5P_DEFAULT);
  const hid_t sp = H5Dget_space(d);
  std::vector<hsize_t> off(static_cast<size_t>(H5Sget_simple_extent_ndims(sp)), 0);
  const std::vector<uint8_t> junk = {0x28, 0xb5, 0x2f, 0xfd, 0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07};
  must(H5Dwrite_chunk(d, H5P_DEFAULT, 0, off.data(), junk.size(), junk.data()), "write chunk");
  H5Sclose(sp);
  H5Dclose(d);
}

// Moves an object to the root and points a soft link at it under its old name.
void make_soft_link(hid_t f, const std::string& path) {
  const std::string moved = "/moved_away";
  must(H5Lmove(f, path.c_str(), f, moved.c_str(), H5P_DEFAULT, H5P_DEFAULT), "move");
  must(H5Lcreate_soft(moved.c_str(), f, path.c_str(), H5P_DEFAULT, H5P_DEFAULT), "soft link");
}

// Replaces a dataset by a contiguous one whose raw data lives in an external file.
void make_external(hid_t f, const std::string& path, const std::string& ext_file) {
  const hid_t d0 = H5Dopen2(f, path.c_str(), H5P_DEFAULT);
  const hid_t t = H5Dget_type(d0);
  const hid_t sp = H5Dget_space(d0);
  const hsize_t bytes = H5Dget_storage_size(d0) ? static_cast<hsize_t>(H5Sget_simple_extent_npoints(sp)) * H5Tget_size(t) : 0;
  H5Dclose(d0);
  drop(f, path);
  std::ofstream(ext_file, std::ios::binary) << std::string(bytes, '\0');
  const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_obj_track_times(dcpl, 0);
  must(H5Pset_external(dcpl, ext_file.c_str(), 0, bytes), "external");
  const hid_t d = H5Dcreate2(f, path.c_str(), t, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  must(d, "create external");
  H5Dclose(d);
  H5Pclose(dcpl);
  H5Sclose(sp);
  H5Tclose(t);
}

void truncate_file(const std::string& p, double keep) {
  struct stat st;
  ASSERT_EQ(::stat(p.c_str(), &st), 0);
  ASSERT_EQ(::truncate(p.c_str(), static_cast<off_t>(static_cast<double>(st.st_size) * keep)), 0);
}

// ---- the reject cases -----------------------------------------------------------------------

enum class Kind { capture, snapshot };

// The small valid files every case starts from (a few KiB each).
Capture base_capture() { return make_capture(32, 2, 40, {3, 7}, true, 11); }
SnapSpec base_snap_spec() {
  SnapSpec sp;
  sp.cfg = small_config(64, 4, 4, StagingType::q8_0);
  sp.H = 2;
  sp.ids = {0, 5};
  sp.B = 96;  // two groups of 16 past the 64-token sink
  sp.B_prev = 80;
  sp.N = 130;  // 34 ring rows
  sp.tokens = true;
  return sp;
}
Snapshot base_snapshot() { return make_snapshot(base_snap_spec()); }
SnapSpec tq6_spec(SinkType sink_type) {
  SnapSpec sp = base_snap_spec();
  sp.cfg = small_config(128, 4, 4, StagingType::tq6_0);
  sp.cfg.sink_type = sink_type;
  sp.H = 1;
  sp.ids = {1};
  return sp;
}
SnapSpec trellis_spec() {
  SnapSpec sp = base_snap_spec();
  sp.cfg = small_config(128, 3, 2, StagingType::q8_0);
  sp.cfg.group = 128;
  sp.cfg.body = Body::trellis;
  sp.cfg.tail = 128;
  sp.cfg.tail_max = 256;
  sp.H = 1;
  sp.ids = {2};
  sp.B = 192;
  sp.B_prev = 64;
  sp.N = 200;
  return sp;
}

struct RejectCase {
  const char* name;    // file name under tests/reject/ (without .h5)
  Kind kind;           // which reader must refuse it
  const char* defect;  // what the README says
  const char* expect;  // a fragment the error message must contain
  bool commit;         // also committed as a file under tests/reject/
  std::function<void(const std::string&)> make;
};

void write_base_capture(const std::string& p) { write_capture(p, base_capture(), 3); }
void write_base_snapshot(const std::string& p) { write_snapshot(p, base_snapshot(), 3); }

// Writes a valid base file and applies `edit` to it with HDF5.
std::function<void(const std::string&)> capture_with(std::function<void(hid_t)> edit) {
  return [edit](const std::string& p) {
    write_base_capture(p);
    H5File f(p);
    edit(f.id);
  };
}
std::function<void(const std::string&)> snapshot_with(std::function<void(hid_t)> edit, SnapSpec sp = base_snap_spec()) {
  return [edit, sp](const std::string& p) {
    EmbeddedCodebooks cb;
    const Snapshot s = make_snapshot(sp, &cb);
    write_snapshot(p, s, 3, s.config.resolved_body() == Body::trellis ? &cb : nullptr);
    H5File f(p);
    edit(f.id);
  };
}

const std::vector<RejectCase>& reject_cases() {
  static const std::vector<RejectCase> cases = {
      // -- not a readable sjkv file
      {"capture-not-hdf5", Kind::capture, "a text file, no HDF5 signature", "not an HDF5 file", true,
       [](const std::string& p) { std::ofstream(p) << "K,V\n1,2\n"; }},
      {"capture-truncated-file", Kind::capture, "a valid capture cut to 60% of its bytes",
       "unreadable HDF5 file (truncated or corrupt)", true,
       [](const std::string& p) {
         write_base_capture(p);
         truncate_file(p, 0.6);
       }},
      {"capture-no-magic", Kind::capture, "an HDF5 file without the sjkv_format attribute",
       "not an sjkv file (no sjkv_format attribute)", false, capture_with([](hid_t f) { drop_attr(f, "sjkv_format"); })},
      {"capture-bad-magic", Kind::capture, "sjkv_format = 'sjkv-captur'",
       "sjkv_format is 'sjkv-captur', expected 'sjkv-capture'", true,
       capture_with([](hid_t f) { put_str(f, "sjkv_format", "sjkv-captur"); })},
      {"capture-is-snapshot", Kind::capture, "a snapshot given to the capture reader",
       "sjkv_format is 'sjkv-snapshot', expected 'sjkv-capture'", false, write_base_snapshot},
      {"capture-future-version", Kind::capture, "version = 2", "version 2 is newer than this build reads (1)", true,
       capture_with([](hid_t f) { put_u32(f, "version", 2); })},
      {"capture-version-zero", Kind::capture, "version = 0", "version 0 is invalid", false,
       capture_with([](hid_t f) { put_u32(f, "version", 0); })},
      {"capture-version-string", Kind::capture, "version stored as a string", "attribute version: expected an integer",
       false, capture_with([](hid_t f) { put_str(f, "version", "1"); })},
      {"capture-missing-head-dim", Kind::capture, "no head_dim attribute", "missing attribute head_dim", false,
       capture_with([](hid_t f) { drop_attr(f, "head_dim"); })},
      {"capture-head-dim-not-pow2", Kind::capture, "head_dim = 96", "head_dim = 96 is not a power of two", true,
       capture_with([](hid_t f) { put_u32(f, "head_dim", 96); })},
      {"capture-head-dim-too-large", Kind::capture, "head_dim = 2048", "head_dim = 2048 is outside [32, 1024]", false,
       capture_with([](hid_t f) { put_u32(f, "head_dim", 2048); })},
      {"capture-kv-heads-zero", Kind::capture, "kv_heads = 0", "kv_heads = 0 is outside [1, 256]", false,
       capture_with([](hid_t f) { put_u32(f, "kv_heads", 0); })},
      {"capture-tokens-mismatch", Kind::capture, "tokens = 41 but the datasets hold 40 positions",
       "dataset layers/3/k: shape [40, 2, 32] does not match [tokens, kv_heads, head_dim] = [41, 2, 32]", true,
       capture_with([](hid_t f) {
         put_u32(f, "tokens", 41);
         drop(f, "token_ids");
       })},
      {"capture-kv-heads-mismatch", Kind::capture, "kv_heads = 4 but the datasets hold 2 heads",
       "does not match [tokens, kv_heads, head_dim] = [40, 4, 32]", false,
       capture_with([](hid_t f) { put_u32(f, "kv_heads", 4); })},
      {"capture-head-dim-mismatch", Kind::capture, "head_dim = 64 but the datasets hold 32 channels",
       "does not match [tokens, kv_heads, head_dim] = [40, 2, 64]", false,
       capture_with([](hid_t f) { put_u32(f, "head_dim", 64); })},
      {"capture-negative-tokens", Kind::capture, "tokens = -1 (int64)", "attribute tokens = -1 is out of range", false,
       capture_with([](hid_t f) { put_i64(f, "tokens", -1); })},
      {"capture-rotated-not-bool", Kind::capture, "rotated = 2", "attribute rotated = 2 is out of range [0, 1]", false,
       capture_with([](hid_t f) { put_u32(f, "rotated", 2); })},
      {"capture-rotation-block-unrotated", Kind::capture, "rotation_block = 32 with rotated = 0",
       "but the values are not rotated", false, capture_with([](hid_t f) {
         put_u32(f, "rotated", 0);
         put_u32(f, "rotation_block", 32);
       })},
      {"capture-model-not-string", Kind::capture, "model stored as an integer", "attribute model: expected a string",
       false, capture_with([](hid_t f) { put_u32(f, "model", 5); })},
      {"capture-duplicate-layer", Kind::capture, "layer_ids = [3, 3]", "layer id 3 appears twice", false,
       capture_with([](hid_t f) {
         const uint32_t ids[2] = {3, 3};
         put_attr(f, "layer_ids", H5T_NATIVE_UINT32, ids, 2);
       })},
      {"capture-layer-missing", Kind::capture, "layer 7 listed but its group deleted", "group layers/7 is missing",
       false, capture_with([](hid_t f) { drop(f, "layers/7"); })},
      {"capture-layer-unlisted", Kind::capture, "layers/7 present but layer_ids = [3]",
       "group layers/7 is not in layer_ids", false, capture_with([](hid_t f) {
         const uint32_t ids[1] = {3};
         put_attr(f, "layer_ids", H5T_NATIVE_UINT32, ids, 1);
       })},
      {"capture-missing-dataset", Kind::capture, "layers/3/k deleted", "dataset layers/3/k is missing", true,
       capture_with([](hid_t f) { drop(f, "layers/3/k"); })},
      {"capture-unexpected-object", Kind::capture, "an extra dataset layers/3/q",
       "group layers/3 holds an unexpected object 'q'", false,
       capture_with([](hid_t f) { replace_dataset(f, "layers/3/q", H5T_NATIVE_UINT8, {1}); })},
      {"capture-k-not-fp16", Kind::capture, "layers/3/k stored as uint16",
       "dataset layers/3/k: element type is not fp16", false,
       capture_with([](hid_t f) { replace_dataset(f, "layers/3/k", H5T_STD_U16LE, {40, 2, 32}); })},
      {"capture-k-rank", Kind::capture, "layers/3/k stored as [40, 64]", "dataset layers/3/k: rank 2, expected 3",
       false, capture_with([](hid_t f) {
         const hid_t t = fp16_type();
         replace_dataset(f, "layers/3/k", t, {40, 64});
         H5Tclose(t);
       })},
      {"capture-nan-in-k", Kind::capture, "a NaN (0x7e00) at layer 3, token 5, head 1, channel 7 of K",
       "layers/3/k: NaN or infinity at token 5, head 1, channel 7", true,
       capture_with([](hid_t f) { poke_u16(f, "layers/3/k", {5, 1, 7}, 0x7e00); })},
      {"capture-inf-in-v", Kind::capture, "-infinity (0xfc00) at layer 7, token 39, head 0, channel 31 of V",
       "layers/7/v: NaN or infinity at token 39, head 0, channel 31", false,
       capture_with([](hid_t f) { poke_u16(f, "layers/7/v", {39, 0, 31}, 0xfc00); })},
      {"capture-truncated-dataset", Kind::capture, "layers/3/v chunked by 16 tokens with only the first chunk stored",
       "dataset layers/3/v is truncated: 1 of 3 chunks stored", true,
       capture_with([](hid_t f) { truncate_chunks(f, "layers/3/v", 16); })},
      {"capture-corrupt-chunk", Kind::capture, "the first chunk of layers/7/k is not a valid zstd frame",
       "cannot read dataset layers/7/k", true, capture_with([](hid_t f) { corrupt_first_chunk(f, "layers/7/k"); })},
      {"capture-soft-link", Kind::capture, "layers/3 is a soft link to another group",
       "layers/3 is a soft or external link (not allowed)", false,
       capture_with([](hid_t f) { make_soft_link(f, "layers/3"); })},
      {"capture-external-storage", Kind::capture, "layers/3/k keeps its data in an external file",
       "dataset layers/3/k uses external storage (not allowed)", false, [](const std::string& p) {
         write_base_capture(p);
         H5File f(p);
         make_external(f.id, "layers/3/k", p + ".raw");
       }},
      {"capture-token-id-negative", Kind::capture, "token_ids[4] = -1",
       "token_ids[4] = -1 is out of range [0, 2147483647]", false,
       capture_with([](hid_t f) {
         const int32_t v = -1;
         poke(f, "token_ids", {4}, &v);
       })},
      {"capture-token-ids-length", Kind::capture, "token_ids with 39 entries for 40 tokens",
       "dataset token_ids: shape [39] does not match [tokens] = [40]", false,
       capture_with([](hid_t f) { replace_dataset(f, "token_ids", H5T_STD_I32LE, {39}); })},

      // -- snapshots
      {"snapshot-future-version", Kind::snapshot, "version = 2", "version 2 is newer than this build reads (1)", true,
       snapshot_with([](hid_t f) { put_u32(f, "version", 2); })},
      {"snapshot-future-record-format", Kind::snapshot, "record_format_version = 2",
       "record_format_version 2 is newer than this build reads (1)", false,
       snapshot_with([](hid_t f) { put_u32(f, "record_format_version", 2); })},
      {"snapshot-is-capture", Kind::snapshot, "a capture given to the snapshot reader",
       "sjkv_format is 'sjkv-capture', expected 'sjkv-snapshot'", false, write_base_capture},
      {"snapshot-spacepad-magic-ok-version-bad", Kind::snapshot,
       "magic as a space-padded string (accepted) and version = 3", "version 3 is newer", false,
       snapshot_with([](hid_t f) {
         put_spacepad_str(f, "sjkv_format", "sjkv-snapshot");
         put_u32(f, "version", 3);
       })},
      {"snapshot-vlen-string", Kind::snapshot, "model as a variable-length string (HDF5's global heap)",
       "attribute model: variable-length strings are not accepted", true,
       snapshot_with([](hid_t f) { put_vlen_str(f, "model", "x"); })},
      {"capture-string-with-nul", Kind::capture, "source = 'ab<NUL>cd' in a null-padded string",
       "attribute source contains a NUL byte", false, capture_with([](hid_t f) { put_str(f, "source", std::string("ab\0cd", 5)); })},
      {"snapshot-unknown-staging", Kind::snapshot, "staging = 'q4_0'",
       "attribute staging: unknown value 'q4_0' (expected one of tq6_0, f16, q8_0)", true,
       snapshot_with([](hid_t f) { put_str(f, "staging", "q4_0"); })},
      {"snapshot-unknown-body", Kind::snapshot, "body = 'auto' (files store the resolved body)",
       "attribute body: unknown value 'auto' (expected one of scalar, trellis)", false,
       snapshot_with([](hid_t f) { put_str(f, "body", "auto"); })},
      {"snapshot-unknown-sink-type", Kind::snapshot, "sink_type = 'bf16'", "attribute sink_type: unknown value 'bf16'",
       false, snapshot_with([](hid_t f) { put_str(f, "sink_type", "bf16"); })},
      {"snapshot-unknown-balance", Kind::snapshot, "balance = 'last'", "attribute balance: unknown value 'last'", false,
       snapshot_with([](hid_t f) { put_str(f, "balance", "last"); })},
      {"snapshot-unknown-axis", Kind::snapshot, "axis = 'row'", "attribute axis: unknown value 'row'", false,
       snapshot_with([](hid_t f) { put_str(f, "axis", "row"); })},
      {"snapshot-channel-axis-scalar", Kind::snapshot, "axis = 'channel' with a scalar body",
       "axis = 'channel' with a scalar body", false, snapshot_with([](hid_t f) { put_str(f, "axis", "channel"); })},
      {"snapshot-head-dim-not-pow2", Kind::snapshot, "head_dim = 96", "head_dim = 96 is not a power of two", false,
       snapshot_with([](hid_t f) { put_u32(f, "head_dim", 96); })},
      {"snapshot-bits-out-of-range", Kind::snapshot, "bits_k = 5", "attribute bits_k = 5 is out of range [2, 4]", false,
       snapshot_with([](hid_t f) { put_u32(f, "bits_k", 5); })},
      {"snapshot-group-invalid", Kind::snapshot, "group = 24", "group = 24 is not a multiple of 16", false,
       snapshot_with([](hid_t f) { put_u32(f, "group", 24); })},
      {"snapshot-sink-invalid", Kind::snapshot, "sink = 100", "sink must be a positive multiple of 64", false,
       snapshot_with([](hid_t f) { put_u32(f, "sink", 100); })},
      {"snapshot-staging-block", Kind::snapshot, "staging tq6_0 with head_dim 64",
       "head_dim must be a multiple of the staging block", false,
       snapshot_with([](hid_t f) { put_str(f, "staging", "tq6_0"); })},
      {"snapshot-rotation-zero", Kind::snapshot, "rotation_block = 0", "rotation_block = 0 (the file stores the resolved block)",
       false, snapshot_with([](hid_t f) { put_u32(f, "rotation_block", 0); })},
      {"snapshot-rotation-invalid", Kind::snapshot, "rotation_block = 48",
       "rotation block must be a power of two >= 32 that divides head_dim", false,
       snapshot_with([](hid_t f) { put_u32(f, "rotation_block", 48); })},
      {"snapshot-record-bytes-mismatch", Kind::snapshot, "record_bytes = 1500 (the layout says 1504)",
       "attribute record_bytes = 1500 does not match the layout", true,
       snapshot_with([](hid_t f) { put_u32(f, "record_bytes", 1500); })},
      {"snapshot-row-bytes-mismatch", Kind::snapshot, "row_bytes = 64 (q8_0 rows of 64 values are 68 bytes)",
       "attribute row_bytes = 64 does not match q8_0 rows", false,
       snapshot_with([](hid_t f) { put_u32(f, "row_bytes", 64); })},
      {"snapshot-body-shape", Kind::snapshot, "layers/0/body records of 1500 bytes, record_bytes 1504",
       "dataset layers/0/body: shape [2, 2, 1500] does not match [(B - sink) / group, kv_heads, record_bytes] = [2, 2, 1504]",
       false, snapshot_with([](hid_t f) { replace_dataset(f, "layers/0/body", H5T_STD_U8LE, {2, 2, 1500}); })},
      {"snapshot-kv-heads-mismatch", Kind::snapshot, "kv_heads = 3 while the datasets hold 2 heads",
       "does not match [min(N, sink), kv_heads, head_dim] = [64, 3, 64]", false,
       snapshot_with([](hid_t f) { put_u32(f, "kv_heads", 3); })},
      {"snapshot-b-below-sink", Kind::snapshot, "B = 32 < sink = 64", "B = 32 < sink = 64", false,
       snapshot_with([](hid_t f) {
         put_u32(f, "B", 32);
         put_u32(f, "B_prev", 32);
       })},
      {"snapshot-b-misaligned", Kind::snapshot, "B = 100: (B - sink) % group = 4", "B = 100 is not group-aligned", true,
       snapshot_with([](hid_t f) { put_u32(f, "B", 100); })},
      {"snapshot-b-prev-above-b", Kind::snapshot, "B_prev = 112 > B = 96", "B_prev = 112 > B = 96", true,
       snapshot_with([](hid_t f) { put_u32(f, "B_prev", 112); })},
      {"snapshot-draining-not-bool", Kind::snapshot, "draining = 2", "draining = 2 is not 0 or 1", false,
       snapshot_with([](hid_t f) { put_u32(f, "draining", 2); })},
      {"snapshot-b-above-n", Kind::snapshot, "B = 96 > N = 90", "B = 96 > N = 90", false,
       snapshot_with([](hid_t f) { put_u32(f, "N", 90); })},
      {"snapshot-ring-over-capacity", Kind::snapshot, "N = 100000: 99904 ring rows, capacity 384",
       "rows, more than its capacity 384", false, snapshot_with([](hid_t f) { put_u32(f, "N", 100000); })},
      {"snapshot-capacity-overflow", Kind::snapshot, "n_ubatch = 2^31: the ring capacity overflows 32 bits",
       "n_ubatch = 2147483648 is outside [1, 2^20]", true, snapshot_with([](hid_t f) { put_u32(f, "n_ubatch", 0x80000000u); })},
      {"snapshot-n-ubatch-zero", Kind::snapshot, "n_ubatch = 0", "n_ubatch = 0 is outside [1, 2^20]", false,
       snapshot_with([](hid_t f) { put_u32(f, "n_ubatch", 0); })},
      {"snapshot-missing-body", Kind::snapshot, "layers/5/body deleted", "dataset layers/5/body is missing", false,
       snapshot_with([](hid_t f) { drop(f, "layers/5/body"); })},
      {"snapshot-staged-sink-with-f16-sink", Kind::snapshot, "sink_k_staged present with sink_type f16",
       "group layers/0 holds an unexpected object 'sink_k_staged' (sink_type f16)", false,
       snapshot_with([](hid_t f) { replace_dataset(f, "layers/0/sink_k_staged", H5T_STD_U8LE, {64, 2, 68}); })},
      {"snapshot-nan-in-sink", Kind::snapshot, "a NaN at layer 5 sink_k position 63, head 1, channel 0",
       "layers/5/sink_k: NaN or infinity at position 63, head 1, channel 0", true,
       snapshot_with([](hid_t f) { poke_u16(f, "layers/5/sink_k", {63, 1, 0}, 0x7e01); })},
      {"snapshot-inf-q8-scale-in-ring", Kind::snapshot, "the q8_0 scale of block 1 of ring_v row (position 100, head 1) is +inf",
       "layers/0/ring_v: non-finite q8_0 block scale at position 100, head 1, block 1", false,
       snapshot_with([](hid_t f) {
         poke_u8(f, "layers/0/ring_v", {4, 1, 34}, 0x00);
         poke_u8(f, "layers/0/ring_v", {4, 1, 35}, 0x7c);
       })},
      {"snapshot-nan-tq6-norm-in-ring", Kind::snapshot, "the tq6_0 norm of ring_k (position 97, head 0) is NaN",
       "layers/1/ring_k: non-finite tq6_0 block norm at position 97, head 0, block 0", false,
       snapshot_with(
           [](hid_t f) {
             poke_u8(f, "layers/1/ring_k", {1, 0, 0}, 0x00);
             poke_u8(f, "layers/1/ring_k", {1, 0, 1}, 0x7e);
           },
           tq6_spec(SinkType::f16))},
      {"snapshot-inf-in-staged-sink", Kind::snapshot, "inherit sink: tq6_0 norm of sink_v_staged position 3 is +inf",
       "layers/1/sink_v_staged: non-finite tq6_0 block norm at position 3, head 0, block 0", false,
       snapshot_with(
           [](hid_t f) {
             poke_u8(f, "layers/1/sink_v_staged", {3, 0, 0}, 0x00);
             poke_u8(f, "layers/1/sink_v_staged", {3, 0, 1}, 0x7c);
           },
           tq6_spec(SinkType::inherit))},
      {"snapshot-codebook-id-mismatch", Kind::snapshot, "trellis 3/2: codebook_id (root and group) off by one",
       "does not match the embedded codebooks (FNV-1a-64 0x", true,
       snapshot_with(
           [](hid_t f) {
             uint64_t id = 0;
             const hid_t a = H5Aopen(f, "codebook_id", H5P_DEFAULT);
             H5Aread(a, H5T_NATIVE_UINT64, &id);
             H5Aclose(a);
             put_u64(f, "codebook_id", id + 1);
             put_u64(f, "codebooks/codebook_id", id + 1);
           },
           trellis_spec())},
      {"snapshot-codebook-table-edited", Kind::snapshot, "trellis 3/2: one k_table entry changed after writing",
       "does not match the embedded codebooks", false,
       snapshot_with([](hid_t f) { poke_u16(f, "codebooks/k_table", {17}, 0x3c00); }, trellis_spec())},
      {"snapshot-codebook-group-id-differs", Kind::snapshot, "codebooks/codebook_id differs from the root's",
       "codebooks/codebook_id = 0x0000000000000001 differs from codebook_id", false,
       snapshot_with([](hid_t f) { put_u64(f, "codebooks/codebook_id", 1); }, trellis_spec())},
      {"snapshot-codebook-window", Kind::snapshot, "codebooks/window_k = 8 for bits_k = 3",
       "codebooks/window_k = 8, expected 6 + bits_k = 9", false,
       snapshot_with([](hid_t f) { put_u32(f, "codebooks/window_k", 8); }, trellis_spec())},
      {"snapshot-codebooks-missing", Kind::snapshot, "trellis body without /codebooks",
       "a trellis body needs its codebooks embedded (/codebooks is missing)", false,
       snapshot_with([](hid_t f) { drop(f, "codebooks"); }, trellis_spec())},
      {"snapshot-codebooks-for-scalar", Kind::snapshot, "/codebooks present with a scalar body",
       "/codebooks is present for a scalar body", false, snapshot_with([](hid_t f) {
         const hid_t gcpl = H5Pcreate(H5P_GROUP_CREATE);
         H5Pset_obj_track_times(gcpl, 0);
         H5Gclose(H5Gcreate2(f, "codebooks", H5P_DEFAULT, gcpl, H5P_DEFAULT));
         H5Pclose(gcpl);
       })},
      {"snapshot-codebook-id-scalar", Kind::snapshot, "codebook_id = 5 with a scalar body",
       "codebook_id = 0x0000000000000005 must be 0 for a scalar body", false,
       snapshot_with([](hid_t f) { put_u64(f, "codebook_id", 5); })},
      {"snapshot-layer-ids-scalar", Kind::snapshot, "layer_ids stored as a scalar", "attribute layer_ids: expected a 1-D array",
       false, snapshot_with([](hid_t f) { put_u32(f, "layer_ids", 0); })},
  };
  return cases;
}

void expect_rejected(const RejectCase& c, const std::string& p) {
  try {
    if (c.kind == Kind::capture)
      (void)read_capture(p);
    else
      (void)read_snapshot(p);
    ADD_FAILURE() << c.name << ": the reader accepted " << p;
  } catch (const FileError& e) {
    EXPECT_EQ(e.path(), p);
    const std::string what = e.what();
    EXPECT_EQ(what.rfind(p + ": ", 0), 0u) << what;  // "<path>: <defect>"
    EXPECT_NE(e.defect().find(c.expect), std::string::npos) << c.name << "\n  got:      " << e.defect()
                                                          << "\n  expected: " << c.expect;
    EXPECT_EQ(what.find('\n'), std::string::npos) << "one line: " << what;
  } catch (const std::exception& e) {
    ADD_FAILURE() << c.name << ": expected FileError, got " << e.what();
  }
}

class Reject : public ::testing::TestWithParam<size_t> {};

TEST_P(Reject, RefusedWithNamedDefect) {
  const RejectCase& c = reject_cases()[GetParam()];
  const std::string p = scratch(std::string(c.name) + ".h5");
  ASSERT_NO_THROW(c.make(p)) << c.name;
  expect_rejected(c, p);
}

INSTANTIATE_TEST_SUITE_P(Files, Reject, ::testing::Range<size_t>(0, reject_cases().size()),
                         [](const ::testing::TestParamInfo<size_t>& info) {
                           std::string n = reject_cases()[info.param].name;
                           for (char& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

std::string reject_dir() { return std::string(SJKV_GOLDEN_DIR) + "/../reject"; }

// The committed files (golden must-reject files): each still refused with its defect.
TEST(RejectFixtures, CommittedFilesRefused) {
  size_t n = 0;
  for (const RejectCase& c : reject_cases()) {
    if (!c.commit) continue;
    const std::string p = reject_dir() + "/" + c.name + ".h5";
    ASSERT_TRUE(exists(p)) << p << " is missing; regenerate with SJKV_REGENERATE_REJECT_DIR (docs/FORMAT.md 5.1)";
    expect_rejected(c, p);
    ++n;
  }
  EXPECT_GE(n, 15u);
}

// SJKV_REGENERATE_REJECT_DIR=tests/reject build/tests/snapshot/test_files --gtest_filter=RejectFixtures.*
TEST(RejectFixtures, Regenerate) {
  const char* dir = std::getenv("SJKV_REGENERATE_REJECT_DIR");
  if (!dir || !*dir) GTEST_SKIP() << "set SJKV_REGENERATE_REJECT_DIR to rewrite tests/reject/";
  std::ofstream readme(std::string(dir) + "/README.md");
  readme << "# Must-reject files\n\n"
            "Each file below is a small capture or snapshot with one defect. Every sjkv reader must\n"
            "refuse it with `sjkv::FileError` (the CLIs: exit 2 and one line `<tool>: <path>: <defect>`)\n"
            "whose defect contains the text in the last column. `tests/snapshot/test_files.cpp` checks them\n"
            "(`RejectFixtures.CommittedFilesRefused`) and builds more cases the same way\n"
            "(`Files/Reject.*`); docs/FORMAT.md section 5 lists the rules. Regenerate with\n\n"
            "    SJKV_REGENERATE_REJECT_DIR=tests/reject build/tests/snapshot/test_files --gtest_filter='RejectFixtures.*'\n\n"
            "| file | reader | defect | message contains |\n|---|---|---|---|\n";
  g_low_entropy = true;
  for (const RejectCase& c : reject_cases()) {
    if (!c.commit) continue;
    const std::string p = std::string(dir) + "/" + c.name + ".h5";
    std::remove(p.c_str());
    ASSERT_NO_THROW(c.make(p)) << c.name;
    std::remove((p + ".raw").c_str());
    readme << "| `" << c.name << ".h5` | " << (c.kind == Kind::capture ? "capture" : "snapshot") << " | " << c.defect
           << " | `" << c.expect << "` |\n";
  }
  readme << "\nGGUF files (model headers for `GgufFile::open`): one per named defect under `gguf/`, listed\n"
            "with their expected messages in `gguf/README.md`; `tests/snapshot/test_gguf.cpp` writes and checks them\n"
            "(`GgufRejectFixtures.*`).\n";
  readme << "\nTrajectory files (`sjkv-replay`, hidden encoding): one per named defect under `trajectory/`,\n"
            "with their expected messages in `kRejectFixtures` of `tests/snapshot/test_trajectory.cpp`, which\n"
            "writes (`SJKV_REGENERATE_REJECT_DIR=tests/reject build/tests/snapshot/test_trajectory`) and checks them\n"
            "(`TrajectoryRejectFixtures.*`).\n";
  g_low_entropy = false;
}

// ---- round trips ----------------------------------------------------------------------------

struct CaptureGeom {
  uint32_t D, H, T;
  bool tokens;
  uint64_t seed;
};

class CaptureRoundTrip : public ::testing::TestWithParam<CaptureGeom> {};

TEST_P(CaptureRoundTrip, Exact) {
  const CaptureGeom g = GetParam();
  const Capture c = make_capture(g.D, g.H, g.T, {0, 13, 2}, g.tokens, g.seed);
  const std::string p = scratch("rt-capture-" + std::to_string(g.D) + "-" + std::to_string(g.H) + "-" +
                                std::to_string(g.T) + ".h5");
  write_capture(p, c);
  EXPECT_EQ(sniff_file(p), FileKind::capture);
  const Capture r = read_capture(p);
  expect_same_capture(c, r);
  EXPECT_NO_THROW(r.check_consistent());
}

INSTANTIATE_TEST_SUITE_P(Files, CaptureRoundTrip,
                         ::testing::Values(CaptureGeom{64, 1, 0, false, 2},     // no tokens at all
                                           CaptureGeom{32, 3, 1, true, 3},      // one token
                                           CaptureGeom{64, 2, 100, true, 4},    // below a sink
                                           CaptureGeom{128, 4, 1100, false, 5}, // several chunks
                                           CaptureGeom{256, 8, 517, true, 6},   // ragged last chunk
                                           CaptureGeom{512, 8, 300, false, 7},
                                           CaptureGeom{512, 1, 2600, true, 8},
                                           CaptureGeom{1024, 2, 33, true, 9}));

struct SnapCase {
  const char* name;
  std::function<SnapSpec()> spec;
};

SnapSpec spec_of(CodecConfig cfg, uint32_t H, uint32_t n_ubatch, uint32_t B, uint32_t B_prev, uint32_t N, bool tokens,
                 uint64_t seed, uint32_t draining = 0) {
  SnapSpec s;
  s.cfg = cfg;
  s.H = H;
  s.n_ubatch = n_ubatch;
  s.B = B;
  s.B_prev = B_prev;
  s.N = N;
  s.tokens = tokens;
  s.seed = seed;
  s.draining = draining;
  s.ids = {1, 0, 9};
  return s;
}

CodecConfig cfg_of(uint32_t D, uint32_t bk, uint32_t bv, StagingType st) {
  CodecConfig c;
  c.head_dim = D;
  c.bits_k = bk;
  c.bits_v = bv;
  c.body = Body::scalar;
  c.staging = st;
  c.tail = 256;
  c.tail_max = 512;
  return c;
}

const std::vector<SnapCase>& snap_cases() {
  static const std::vector<SnapCase> cases = {
      {"empty", [] { return spec_of(cfg_of(128, 4, 4, StagingType::tq6_0), 2, 64, 128, 128, 0, false, 1); }},
      {"below_sink", [] { return spec_of(cfg_of(128, 4, 4, StagingType::tq6_0), 4, 64, 128, 128, 50, true, 2); }},
      {"at_sink_inherit",
       [] {
         CodecConfig c = cfg_of(256, 3, 3, StagingType::tq6_0);
         c.sink_type = SinkType::inherit;
         return spec_of(c, 2, 64, 128, 128, 128, true, 3);
       }},
      {"tail_only_d64_q8",
       [] { return spec_of(cfg_of(64, 4, 2, StagingType::q8_0), 1, 32, 128, 128, 300, false, 4); }},
      {"several_commits_d256",
       [] { return spec_of(cfg_of(256, 4, 4, StagingType::tq6_0), 4, 64, 640, 512, 1000, true, 5, 1); }},
      {"d512_f16_staging_kvarn",
       [] {
         CodecConfig c = kvarn_config(512, 2, 2, 0);
         return spec_of(c, 8, 16, 384, 256, 390, true, 6);
       }},
      {"d512_rotation_full",
       [] {
         CodecConfig c = cfg_of(512, 3, 2, StagingType::q8_0);
         c.rotation_block = 512;
         c.flush_chunk = 2;
         return spec_of(c, 2, 128, 256, 256, 700, false, 7);
       }},
      {"d128_inherit_f16_staging",
       [] {
         CodecConfig c = cfg_of(128, 2, 4, StagingType::f16);
         c.sink_type = SinkType::inherit;
         c.body = Body::automatic;  // resolves to scalar for 2/4
         return spec_of(c, 3, 64, 384, 256, 600, true, 8);
       }},
  };
  return cases;
}

class SnapshotRoundTrip : public ::testing::TestWithParam<size_t> {};

TEST_P(SnapshotRoundTrip, Exact) {
  const SnapCase& sc = snap_cases()[GetParam()];
  const Snapshot s = make_snapshot(sc.spec());
  ASSERT_NO_THROW(check_snapshot_consistent(s));
  const std::string p = scratch(std::string("rt-snapshot-") + sc.name + ".h5");
  write_snapshot(p, s);
  EXPECT_EQ(sniff_file(p), FileKind::snapshot);
  EmbeddedCodebooks cb;
  cb.bits_k = 99;
  const Snapshot r = read_snapshot(p, &cb);
  expect_same_snapshot(s, r);
  EXPECT_EQ(cb.bits_k, 0u);  // scalar: cleared
  EXPECT_TRUE(cb.k_table.empty());
  EXPECT_NO_THROW(check_snapshot_consistent(r));
  // Writing what was read gives the same bytes: nothing is lost or reinterpreted.
  const std::string p2 = scratch(std::string("rt-snapshot-") + sc.name + "-again.h5");
  write_snapshot(p2, r);
  EXPECT_TRUE(file_bytes(p) == file_bytes(p2));
}

INSTANTIATE_TEST_SUITE_P(Files, SnapshotRoundTrip, ::testing::Range<size_t>(0, snap_cases().size()),
                         [](const ::testing::TestParamInfo<size_t>& info) { return snap_cases()[info.param].name; });

TEST(SnapshotFile, TrellisWithEmbeddedCodebooks) {
  EmbeddedCodebooks cb;
  const Snapshot s = make_snapshot(trellis_spec(), &cb);
  EXPECT_NE(s.codebook_id, 0u);
  const std::string p = scratch("trellis.h5");
  write_snapshot(p, s, 5, &cb);
  EmbeddedCodebooks got;
  const Snapshot r = read_snapshot(p, &got);
  expect_same_snapshot(s, r);
  EXPECT_EQ(got.axis, "token");
  EXPECT_EQ(got.bits_k, 3u);
  EXPECT_EQ(got.bits_v, 2u);
  EXPECT_TRUE(got.k_table == cb.k_table);
  EXPECT_TRUE(got.v_table == cb.v_table);
  EXPECT_EQ(codebook_id_of(got.k_table, got.v_table), r.codebook_id);
}

// §11 defines the identity over the K then V tables as little-endian uint16 with the
// non-standard FNV basis; check the byte order and the basis independently.
TEST(SnapshotFile, CodebookIdIsSpecFnv) {
  const std::vector<uint16_t> k = {0x3c00, 0xbc00, 0x0001};
  const std::vector<uint16_t> v = {0x7bff};
  uint64_t h = 1469598103934665603ull;  // the format's basis, not the standard one
  for (uint8_t b : {0x00, 0x3c, 0x00, 0xbc, 0x01, 0x00, 0xff, 0x7b}) {
    h ^= b;
    h *= 1099511628211ull;
  }
  EXPECT_EQ(codebook_id_of(k, v), h);
}

TEST(SnapshotFile, AxisChannelTrellisRoundTrips) {
  EmbeddedCodebooks cb;
  Snapshot s = make_snapshot(trellis_spec(), &cb);
  // The axis is part of the configuration; the embedded tables must agree with it.
  const std::string p = scratch("trellis-channel.h5");
  EXPECT_THROW(write_snapshot(p, s, 3, &(cb.axis = "channel", cb)), std::invalid_argument);
  s.config.trellis_axis = TrellisAxis::channel;
  write_snapshot(p, s, 3, &cb);
  EmbeddedCodebooks got;
  const Snapshot r = read_snapshot(p, &got);
  EXPECT_EQ(got.axis, "channel");
  EXPECT_EQ(r.config.trellis_axis, TrellisAxis::channel);
  EXPECT_NE(r.config.name().find("axis=channel"), std::string::npos);
}

TEST(Files, SameContentSameBytes) {
  const Capture c = make_capture(64, 2, 200, {1, 2}, true, 21);
  write_capture(scratch("same-a.h5"), c);
  write_capture(scratch("same-b.h5"), c);
  EXPECT_TRUE(file_bytes(scratch("same-a.h5")) == file_bytes(scratch("same-b.h5")));
}

TEST(Files, CompressesRedundantData) {
  Capture c = make_capture(128, 4, 2048, {0}, false, 22);
  for (uint16_t& x : c.layers[0].k) x = static_cast<uint16_t>(x & 0xff00u);  // low-entropy
  const std::string p = scratch("compress.h5");
  write_capture(p, c);
  EXPECT_LT(file_bytes(p).size(), c.layers[0].k.size() * 2 + c.layers[0].v.size());
}

// ---- writers --------------------------------------------------------------------------------

size_t count_temp_files(const std::string& dir) {
  size_t n = 0;
  for (const std::string& f : list_dir(dir))
    if (f.find(".tmp-") != std::string::npos) ++n;
  return n;
}

TEST(Writers, RefuseInconsistentInputAndCreateNothing) {
  const std::string dir = scratch("refuse");
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
  Capture c = make_capture(64, 2, 10, {1}, false, 30);
  c.layers[0].v[2 * 64 + 5] = 0x7c00;  // +inf
  EXPECT_THROW(write_capture(dir + "/c.h5", c), std::invalid_argument);
  try {
    c.check_consistent();
    ADD_FAILURE();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("layers/1/v: NaN or infinity at token 1, head 0, channel 5"), std::string::npos)
        << e.what();
  }
  Capture d = make_capture(64, 2, 10, {1}, true, 31);
  d.token_ids.pop_back();
  EXPECT_THROW(write_capture(dir + "/d.h5", d), std::invalid_argument);
  Capture e = make_capture(48, 2, 10, {1}, false, 32);
  EXPECT_THROW(write_capture(dir + "/e.h5", e), std::invalid_argument);
  EXPECT_THROW(write_capture(dir + "/f.h5", make_capture(64, 1, 3, {1}, false, 33), 99), std::invalid_argument);

  Snapshot s = base_snapshot();
  s.B_prev = s.B + 16;
  EXPECT_THROW(write_snapshot(dir + "/s.h5", s), std::invalid_argument);
  Snapshot t = base_snapshot();
  t.layers[1].body.pop_back();
  EXPECT_THROW(write_snapshot(dir + "/t.h5", t), std::invalid_argument);
  EmbeddedCodebooks cb;
  Snapshot u = make_snapshot(trellis_spec(), &cb);
  EXPECT_THROW(write_snapshot(dir + "/u.h5", u), std::invalid_argument);  // trellis without codebooks
  u.codebook_id ^= 1;
  EXPECT_THROW(write_snapshot(dir + "/u.h5", u, 3, &cb), std::invalid_argument);
  EXPECT_TRUE(list_dir(dir).empty());
}

TEST(Writers, MissingFolderFailsCleanly) {
  const std::string p = scratch("no-such-folder/out.h5");
  try {
    write_capture(p, base_capture());
    ADD_FAILURE() << "wrote into a missing folder";
  } catch (const FileError& e) {
    EXPECT_EQ(e.path(), p);
    EXPECT_NE(e.defect().find("the folder " + scratch("no-such-folder") + " does not exist"), std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(exists(scratch("no-such-folder")));
}

TEST(Writers, FailedRenameLeavesNothing) {
  const std::string dir = scratch("rename");
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
  const std::string target = dir + "/out.h5";
  ASSERT_EQ(::mkdir(target.c_str(), 0755), 0);  // a folder where the file should go
  ASSERT_EQ(::mkdir((target + "/x").c_str(), 0755), 0);
  EXPECT_THROW(write_snapshot(target, base_snapshot()), FileError);
  EXPECT_EQ(count_temp_files(dir), 0u);
  struct stat st;
  ASSERT_EQ(::stat(target.c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
}

// A write that fails half way (the file size limit hit while HDF5 writes) leaves neither a
// partial file nor the temporary, and an existing file under the name is untouched.
TEST(Writers, FailureMidWriteLeavesOldFileIntact) {
  const std::string dir = scratch("midwrite");
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
  const std::string target = dir + "/cap.h5";
  write_capture(target, base_capture());
  const std::vector<uint8_t> before = file_bytes(target);
  const Capture big = make_capture(256, 8, 600, {0, 1, 2}, false, 40);  // ~15 MiB of fp16
  fflush(nullptr);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = {256 * 1024, 256 * 1024};
    setrlimit(RLIMIT_FSIZE, &rl);
    int code = 10;
    try {
      write_capture(target, big, 1);
      code = 11;  // should not succeed
    } catch (const FileError&) {
      code = 0;
    } catch (...) {
      code = 12;
    }
    _exit(code);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "10: no exception, 11: write succeeded, 12: not a FileError";
  EXPECT_EQ(count_temp_files(dir), 0u);
  EXPECT_TRUE(file_bytes(target) == before);
  EXPECT_NO_THROW((void)read_capture(target));
}

TEST(Writers, ReplacesExistingFile) {
  const std::string p = scratch("replace.h5");
  write_capture(p, make_capture(64, 1, 5, {1}, false, 50));
  const Capture c = make_capture(32, 2, 7, {4, 2}, true, 51);
  write_capture(p, c);
  expect_same_capture(c, read_capture(p));
}

TEST(AtomicOutput, UncommittedIsRemoved) {
  const std::string p = scratch("atomic.bin");
  std::string temp;
  {
    AtomicOutput out(p);
    temp = out.temp_path();
    EXPECT_EQ(temp, scratch(".atomic.bin.tmp-" + std::to_string(getpid())));
    EXPECT_TRUE(exists(temp));
  }
  EXPECT_FALSE(exists(temp));
  EXPECT_FALSE(exists(p));
  {
    AtomicOutput out(p);
    std::ofstream(out.temp_path()) << "done";
    out.commit();
  }
  EXPECT_TRUE(exists(p));
  EXPECT_FALSE(exists(temp));
}

// A signal while a temporary exists removes it (the handler AtomicOutput installs), and the
// process still dies of that signal.
TEST(AtomicOutput, SignalRemovesTemporary) {
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    const std::string p = scratch("atomic-signal.bin");
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      AtomicOutput out(p);
      std::ofstream(out.temp_path()) << "half";
      ::raise(sig);
      _exit(0);  // not reached
    }
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == sig) << "signal " << sig;
    EXPECT_FALSE(exists(scratch(".atomic-signal.bin.tmp-" + std::to_string(child)))) << "signal " << sig;
    EXPECT_FALSE(exists(p));
  }
}

// After a SIGKILL (here: _exit, no destructor) the temporary stays; the next writer of the
// same name removes it, because its process is gone. A live process's temporary is kept.
TEST(AtomicOutput, NextWriterRemovesDeadProcessesTemporaries) {
  const std::string p = scratch("atomic-stale.bin");
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    AtomicOutput* leak = new AtomicOutput(p);
    (void)leak;
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  const std::string stale = scratch(".atomic-stale.bin.tmp-" + std::to_string(child));
  ASSERT_TRUE(exists(stale));
  const std::string live = scratch(".atomic-stale.bin.tmp-1");  // pid 1 exists
  std::ofstream(live) << "x";
  const std::string other = scratch(".atomic-stale.bin.tmp-12x");  // not our shape
  std::ofstream(other) << "x";
  {
    AtomicOutput out(p);
    EXPECT_FALSE(exists(stale));
  }
  EXPECT_TRUE(exists(live));
  EXPECT_TRUE(exists(other));
  ::unlink(live.c_str());
  ::unlink(other.c_str());
}

// Destinations that are not regular files: a folder, a FIFO are refused and left as they
// are; a character device is written through and stays a device.
TEST(AtomicOutput, SpecialDestinations) {
  EXPECT_THROW(AtomicOutput{scratch_dir()}, FileError);
  const std::string fifo = scratch("atomic.fifo");
  ::unlink(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_THROW(AtomicOutput{fifo}, FileError);
  struct stat st;
  ASSERT_EQ(::stat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
  ::unlink(fifo.c_str());
  EXPECT_THROW(AtomicOutput{scratch("no-such-folder/x.bin")}, FileError);
  {
    AtomicOutput out("/dev/null");
    EXPECT_EQ(out.temp_path().find("/dev/"), std::string::npos);
    write_file_bytes(out.temp_path(), "abc", 3, "/dev/null");
    out.commit();
  }
  ASSERT_EQ(::stat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  if (::access("/dev/full", W_OK) == 0) {
    AtomicOutput out("/dev/full");
    write_file_bytes(out.temp_path(), "abc", 3, "/dev/full");
    EXPECT_THROW(out.commit(), FileError);  // ENOSPC from the device
    ASSERT_EQ(::stat("/dev/full", &st), 0);
    EXPECT_TRUE(S_ISCHR(st.st_mode));
  }
}

// A final name that fits NAME_MAX gets a temporary that fits too (the plain suffix would not).
TEST(AtomicOutput, LongNamesStayWritable) {
  const std::string name(250, 'n');
  const std::string p = scratch(name);
  {
    AtomicOutput out(p);
    EXPECT_LE(out.temp_path().size() - scratch("").size(), 255u);
    write_file_bytes(out.temp_path(), "ok", 2, p);
    out.commit();
  }
  EXPECT_TRUE(exists(p));
  ::unlink(p.c_str());
  EXPECT_NE(atomic_temp_name(std::string(250, 'a'), 7), atomic_temp_name(std::string(249, 'a') + "b", 7));
}

TEST(AtomicOutput, SameFileIsByInode) {
  const std::string a = scratch("same-a.bin"), b = scratch("same-b.bin");
  std::ofstream(a) << "x";
  ::unlink(b.c_str());
  ASSERT_EQ(::link(a.c_str(), b.c_str()), 0);
  EXPECT_TRUE(same_file(a, b));
  EXPECT_TRUE(same_file(a, scratch_dir() + "/./same-a.bin"));
  EXPECT_FALSE(same_file(a, scratch("no-such")));
  ::unlink(a.c_str());
  ::unlink(b.c_str());
}

// ---- sniffing -------------------------------------------------------------------------------

TEST(Sniff, TellsFilesApart) {
  const std::string cap = scratch("sniff-cap.h5"), snap = scratch("sniff-snap.h5"), txt = scratch("sniff.txt"),
                    plain = scratch("sniff-plain.h5");
  write_capture(cap, base_capture());
  write_snapshot(snap, base_snapshot());
  std::ofstream(txt) << "hello";
  const hid_t f = H5Fcreate(plain.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  H5Fclose(f);
  EXPECT_EQ(sniff_file(cap), FileKind::capture);
  EXPECT_EQ(sniff_file(snap), FileKind::snapshot);
  EXPECT_EQ(sniff_file(txt), FileKind::not_hdf5);
  EXPECT_EQ(sniff_file(plain), FileKind::other_hdf5);
  EXPECT_TRUE(is_hdf5_file(cap));
  EXPECT_TRUE(is_hdf5_file(plain));
  EXPECT_FALSE(is_hdf5_file(txt));
  EXPECT_FALSE(is_hdf5_file(scratch("missing.h5")));
  EXPECT_THROW(sniff_file(scratch("missing.h5")), FileError);
  EXPECT_THROW(read_capture(scratch("missing.h5")), FileError);
  EXPECT_THROW(read_snapshot(scratch_dir()), FileError);
  EXPECT_STREQ(file_kind_name(FileKind::snapshot), "snapshot");
}

// A superblock at offset 512 (a user block) is still an HDF5 file.
TEST(Sniff, UserBlock) {
  const std::string p = scratch("userblock.h5");
  const hid_t fcpl = H5Pcreate(H5P_FILE_CREATE);
  H5Pset_userblock(fcpl, 512);
  const hid_t f = H5Fcreate(p.c_str(), H5F_ACC_TRUNC, fcpl, H5P_DEFAULT);
  H5Fclose(f);
  H5Pclose(fcpl);
  EXPECT_TRUE(is_hdf5_file(p));
}

// ---- zstd -----------------------------------------------------------------------------------

std::vector<uint8_t> sample_bytes(size_t n, uint64_t seed) {
  XorShift64 rng(seed);
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>((rng.next() & 15) + (i % 7));
  return v;
}

TEST(Zstd, ChunkCodecRoundTrip) {
  for (size_t n : {size_t{1}, size_t{1000}, size_t{1} << 20}) {
    const std::vector<uint8_t> x = sample_bytes(n, n);
    const std::vector<uint8_t> z = zstd_compress_chunk(x.data(), x.size(), 3);
    EXPECT_EQ(ZSTD_getFrameContentSize(z.data(), z.size()), n);  // what hdf5plugin's decoder reads
    EXPECT_TRUE(zstd_decompress_chunk(z.data(), z.size()) == x);
    // The frame ends with zstd's content checksum: damage there is detected.
    std::vector<uint8_t> bad = z;
    bad[bad.size() - 2] ^= 0x10;
    EXPECT_THROW(zstd_decompress_chunk(bad.data(), bad.size()), std::runtime_error);
  }
}

TEST(Zstd, ForeignStreams) {
  const std::vector<uint8_t> a = sample_bytes(70000, 1), b = sample_bytes(5000, 2);
  // Two frames back to back.
  std::vector<uint8_t> z = zstd_compress_chunk(a.data(), a.size(), 1);
  const std::vector<uint8_t> zb = zstd_compress_chunk(b.data(), b.size(), 19);
  z.insert(z.end(), zb.begin(), zb.end());
  std::vector<uint8_t> ab = a;
  ab.insert(ab.end(), b.begin(), b.end());
  EXPECT_TRUE(zstd_decompress_chunk(z.data(), z.size()) == ab);
  // A streaming writer's frame without a content size.
  ZSTD_CCtx* c = ZSTD_createCCtx();
  ZSTD_CCtx_setParameter(c, ZSTD_c_contentSizeFlag, 0);
  std::vector<uint8_t> s(ZSTD_compressBound(a.size()));
  const size_t n = ZSTD_compress2(c, s.data(), s.size(), a.data(), a.size());
  ZSTD_freeCCtx(c);
  ASSERT_FALSE(ZSTD_isError(n));
  s.resize(n);
  EXPECT_EQ(ZSTD_getFrameContentSize(s.data(), s.size()), ZSTD_CONTENTSIZE_UNKNOWN);
  EXPECT_TRUE(zstd_decompress_chunk(s.data(), s.size()) == a);
  // Limits and damage.
  EXPECT_THROW(zstd_decompress_chunk(s.data(), s.size(), 1000), std::runtime_error);
  EXPECT_THROW(zstd_decompress_chunk(z.data(), z.size(), 1000), std::runtime_error);
  EXPECT_THROW(zstd_decompress_chunk(s.data(), s.size() - 3), std::runtime_error);
  EXPECT_THROW(zstd_decompress_chunk(z.data(), 7), std::runtime_error);
  std::vector<uint8_t> bad = z;
  bad[0] ^= 0x55;
  EXPECT_THROW(zstd_decompress_chunk(bad.data(), bad.size()), std::runtime_error);
  EXPECT_THROW(zstd_decompress_chunk(z.data(), 0), std::runtime_error);
}

// Through HDF5: the filter's client data, the raw chunk bytes (one frame with its content
// size, what hdf5plugin decodes), and chunks written by another zstd writer.
TEST(Zstd, Hdf5FilterInterop) {
  register_zstd_filter();
  EXPECT_GT(H5Zfilter_avail(kZstdFilterId), 0);
  const std::string p = scratch("zstd-filter.h5");
  const hid_t f = H5Fcreate(p.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  const hsize_t dims[1] = {100000}, chunk[1] = {40000};
  const hid_t sp = H5Screate_simple(1, dims, nullptr);
  const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_chunk(dcpl, 1, chunk);
  const unsigned level = 7;
  ASSERT_GE(H5Pset_filter(dcpl, kZstdFilterId, H5Z_FLAG_MANDATORY, 1, &level), 0);
  const hid_t d = H5Dcreate2(f, "x", H5T_STD_U8LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  ASSERT_GE(d, 0);
  const std::vector<uint8_t> x = sample_bytes(100000, 9);
  ASSERT_GE(H5Dwrite(d, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, x.data()), 0);
  // Chunk 2 (the last, partial chunk) rewritten as a foreign writer would: no content size,
  // two frames.
  std::vector<uint8_t> tail(x.begin() + 80000, x.end());
  tail.resize(40000, 0);
  ZSTD_CCtx* c = ZSTD_createCCtx();
  ZSTD_CCtx_setParameter(c, ZSTD_c_contentSizeFlag, 0);
  std::vector<uint8_t> fr(ZSTD_compressBound(20000) * 2 + 64);
  const size_t n1 = ZSTD_compress2(c, fr.data(), fr.size(), tail.data(), 20000);
  const size_t n2 = ZSTD_compress2(c, fr.data() + n1, fr.size() - n1, tail.data() + 20000, 20000);
  ZSTD_freeCCtx(c);
  ASSERT_FALSE(ZSTD_isError(n1) || ZSTD_isError(n2));
  const hsize_t off[1] = {80000};
  ASSERT_GE(H5Dwrite_chunk(d, H5P_DEFAULT, 0, off, n1 + n2, fr.data()), 0);
  H5Dclose(d);
  H5Pclose(dcpl);
  H5Sclose(sp);
  H5Fclose(f);

  const hid_t g = H5Fopen(p.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  const hid_t e = H5Dopen2(g, "x", H5P_DEFAULT);
  std::vector<uint8_t> y(100000);
  ASSERT_GE(H5Dread(e, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, y.data()), 0);
  EXPECT_TRUE(y == x);
  const hid_t pl = H5Dget_create_plist(e);
  unsigned flags = 0, cd[4] = {0, 0, 0, 0};
  size_t ncd = 4;
  ASSERT_GE(H5Pget_filter_by_id2(pl, kZstdFilterId, &flags, &ncd, cd, 0, nullptr, nullptr), 0);
  EXPECT_EQ(ncd, 1u);
  EXPECT_EQ(cd[0], 7u);
  const hsize_t off0[1] = {0};
  hsize_t raw_n = 0;
  ASSERT_GE(H5Dget_chunk_storage_size(e, off0, &raw_n), 0);
  std::vector<uint8_t> raw(raw_n);
  uint32_t mask = 0;
  ASSERT_GE(H5Dread_chunk(e, H5P_DEFAULT, off0, &mask, raw.data()), 0);
  EXPECT_EQ(mask, 0u);
  EXPECT_EQ(ZSTD_getFrameContentSize(raw.data(), raw.size()), 40000u);
  EXPECT_EQ(ZSTD_findFrameCompressedSize(raw.data(), raw.size()), raw.size());  // exactly one frame
  H5Pclose(pl);
  H5Dclose(e);
  H5Fclose(g);
}

TEST(Zstd, LevelValidation) {
  EXPECT_TRUE(zstd_level_valid(1));
  EXPECT_TRUE(zstd_level_valid(19));
  EXPECT_TRUE(zstd_level_valid(-5));
  EXPECT_FALSE(zstd_level_valid(100));
}

}  // namespace
