// Capture and snapshot files (docs/FORMAT.md): exact round trips over several geometries and
// configurations, embedded codebooks, and the same content giving the same bytes.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "file_fixtures.h"

using namespace sjkv;
using namespace sjkv::filetest;

namespace {

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

}  // namespace
