// Shared by the capture/snapshot file tests (test_files_*.cpp): a scratch folder removed
// when the tests end, generators of valid captures and snapshots with the fp16 corners a
// lossy path would change, and field-by-field comparisons.
#pragma once

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <dirent.h>
#include <ftw.h>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "sjkv/fp16.h"
#include "sjkv/io/capture_file.h"
#include "sjkv/io/snapshot_file.h"
#include "sjkv/policy.h"
#include "sjkv/staging.h"
#include "sjkv/testgen.h"

namespace sjkv::filetest {

// ---- scratch folder -------------------------------------------------------------------------

inline std::string g_scratch;  // created on first use, removed when the tests end

inline std::string scratch_dir() {
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
inline ::testing::Environment* const g_cleanup = ::testing::AddGlobalTestEnvironment(new ScratchCleanup);

inline std::string scratch(const std::string& name) { return scratch_dir() + "/" + name; }

inline bool exists(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}

inline std::vector<std::string> list_dir(const std::string& dir) {
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

inline std::vector<uint8_t> file_bytes(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// ---- generators -----------------------------------------------------------------------------

// Finite fp16 values with the corners that a lossy path would change: signed zeros,
// subnormals, the largest finite values.
// Fixture files use few distinct values so that they compress to a few KiB.
inline bool g_low_entropy = false;

inline uint16_t test_half(XorShift64& rng, uint64_t i) {
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

inline Capture make_capture(uint32_t D, uint32_t H, uint32_t T, std::vector<uint32_t> ids, bool with_tokens, uint64_t seed) {
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

inline void fill_staged_rows(XorShift64& rng, StagingType st, uint32_t D, uint64_t rows, std::vector<uint8_t>* out) {
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

inline CodecConfig small_config(uint32_t D = 64, uint32_t bk = 4, uint32_t bv = 4, StagingType st = StagingType::q8_0) {
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
inline Snapshot make_snapshot(const SnapSpec& sp, EmbeddedCodebooks* cb = nullptr) {
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

inline void expect_same_capture(const Capture& a, const Capture& b) {
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

// Every layer's sink, records and ring, byte for byte (layers in order; ids not compared).
inline void expect_same_region_bytes(const Snapshot& a, const Snapshot& b) {
  ASSERT_EQ(a.layers.size(), b.layers.size());
  for (size_t i = 0; i < a.layers.size(); ++i) {
    const SnapshotLayer &x = a.layers[i], &y = b.layers[i];
    EXPECT_TRUE(x.sink_k == y.sink_k && x.sink_v == y.sink_v) << "layer " << i << " sink differs";
    EXPECT_TRUE(x.sink_k_staged == y.sink_k_staged && x.sink_v_staged == y.sink_v_staged) << "layer " << i;
    EXPECT_TRUE(x.body == y.body) << "layer " << i << " body differs";
    EXPECT_TRUE(x.ring_k == y.ring_k && x.ring_v == y.ring_v) << "layer " << i << " ring differs";
  }
}

inline void expect_same_snapshot(const Snapshot& a, const Snapshot& b) {
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
  for (size_t i = 0; i < a.layers.size(); ++i) EXPECT_EQ(a.layers[i].layer_id, b.layers[i].layer_id);
  expect_same_region_bytes(a, b);
}


// The small valid files every case starts from (a few KiB each).
inline Capture base_capture() { return make_capture(32, 2, 40, {3, 7}, true, 11); }
inline SnapSpec base_snap_spec() {
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
inline Snapshot base_snapshot() { return make_snapshot(base_snap_spec()); }
inline SnapSpec tq6_spec(SinkType sink_type) {
  SnapSpec sp = base_snap_spec();
  sp.cfg = small_config(128, 4, 4, StagingType::tq6_0);
  sp.cfg.sink_type = sink_type;
  sp.H = 1;
  sp.ids = {1};
  return sp;
}
inline SnapSpec trellis_spec() {
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

}  // namespace sjkv::filetest
