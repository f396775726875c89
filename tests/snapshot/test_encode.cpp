// Capture -> snapshot -> capture in memory: engine-faithful replay, records equal to the
// codec core's seal of the same rows, policy state as the rules predict, bounded error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "sjkv/hadamard.h"
#include "sjkv/io/encode.h"
#include "sjkv/io/snapshot_file.h"
#include "sjkv/io/codebook.h"
#include "sjkv/io/file_error.h"
#include "sjkv/trellis.h"
#include "sjkv/policy.h"
#include "sjkv/seal.h"
#include "sjkv/testgen.h"

using namespace sjkv;

namespace {

// Model-basis K/V with outlier channels and per-token scale, as fp16.
Capture make_capture(uint32_t layers, uint32_t heads, uint32_t D, uint32_t tokens, uint64_t seed) {
  Capture c;
  c.model = "synthetic";
  c.source = "test";
  c.head_dim = D;
  c.kv_heads = heads;
  c.tokens = tokens;
  XorShift64 rng(seed * 2654435761u + 7);
  for (uint32_t l = 0; l < layers; ++l) {
    CaptureLayer cl;
    cl.layer_id = 5 * l + 1;
    std::vector<float> chf(static_cast<size_t>(heads) * D);
    for (auto& f : chf) f = (rng.next() % 100) < 4 ? 6.0f + static_cast<float>(rng.next() & 3) : 1.0f;
    cl.k.resize(static_cast<size_t>(tokens) * heads * D);
    cl.v.resize(cl.k.size());
    for (uint32_t t = 0; t < tokens; ++t) {
      const float tf = 0.5f + static_cast<float>(rng.next() & 3) * 0.25f;
      for (size_t e = 0; e < static_cast<size_t>(heads) * D; ++e) {
        cl.k[t * heads * D + e] = f32_to_f16(static_cast<float>(rng.gauss()) / 1500.0f * chf[e] * tf);
        cl.v[t * heads * D + e] = f32_to_f16(static_cast<float>(rng.gauss()) / 2000.0f);
      }
    }
    c.layers.push_back(std::move(cl));
  }
  return c;
}

double rel_rms(const Capture& a, const Capture& b, uint32_t from, uint32_t to) {
  double e = 0, n = 0;
  const size_t row = static_cast<size_t>(a.kv_heads) * a.head_dim;
  for (size_t l = 0; l < a.layers.size(); ++l)
    for (size_t i = from * row; i < to * row; ++i) {
      const double x = f16_to_f32(a.layers[l].k[i]), y = f16_to_f32(b.layers[l].k[i]);
      const double u = f16_to_f32(a.layers[l].v[i]), w = f16_to_f32(b.layers[l].v[i]);
      e += (x - y) * (x - y) + (u - w) * (u - w);
      n += x * x + u * u;
    }
  return n > 0 ? std::sqrt(e / n) : 0.0;
}

// The policy an engine drives, replayed independently of the encoder.
JournalPolicy expected_policy(const CodecConfig& c, uint32_t N, uint32_t ubatch) {
  JournalPolicy p;
  p.init(c.sink, c.tail, c.tail_max, c.group, c.flush_chunk);
  for (uint32_t p0 = 0; p0 < N; p0 += ubatch) {
    p.begin_ubatch(p0, std::min(ubatch, N - p0));
    p.commit();
  }
  p.begin_ubatch(N, 1);
  p.commit();
  return p;
}

}  // namespace

TEST(Encode, RoundTripEveryScalarConfigAndGeometry) {
  struct Geo {
    uint32_t layers, heads, D, tokens;
    StagingType st;
  };
  // lengths below the sink, inside the tail, and across several commits
  const Geo geos[] = {{2, 1, 128, 100, StagingType::tq6_0},  {1, 2, 128, 700, StagingType::tq6_0},
                      {2, 4, 256, 1500, StagingType::tq6_0}, {1, 8, 64, 1200, StagingType::q8_0},
                      {1, 1, 512, 900, StagingType::tq6_0},  {1, 3, 128, 1300, StagingType::f16}};
  const uint32_t pairs[][2] = {{4, 4}, {4, 3}, {4, 2}, {3, 4}, {3, 3}, {3, 2}, {2, 4}, {2, 3}, {2, 2}};
  for (const Geo& g : geos) {
    const Capture cap = make_capture(g.layers, g.heads, g.D, g.tokens, g.D + g.tokens);
    for (const auto& pr : pairs) {
      // every pair on the multi-commit D = 256 geometry; three representative pairs elsewhere
      const bool rep = (pr[0] == 4 && pr[1] == 4) || (pr[0] == 3 && pr[1] == 2) || (pr[0] == 2 && pr[1] == 2);
      if (g.D != 256 && !rep) continue;
      EncodeOptions o;
      o.config.bits_k = pr[0];
      o.config.bits_v = pr[1];
      o.config.body = Body::scalar;
      o.config.staging = g.st;
      o.config.tail = 256;
      o.config.tail_max = 512;
      o.n_ubatch = 64;
      o.threads = 1;  // thread-count independence has its own test
      const Snapshot s = encode_capture(cap, o);
      const JournalPolicy want = expected_policy(s.config, g.tokens, o.n_ubatch);
      EXPECT_EQ(s.B, want.B);
      EXPECT_EQ(s.B_prev, want.B_prev);
      EXPECT_EQ(s.draining, want.draining);
      EXPECT_EQ(s.N, g.tokens);
      if (g.tokens > 1000) {
        EXPECT_GT(s.B, s.config.sink) << "the capture should span commits";
      }
      const Capture back = decode_snapshot(s, false);
      ASSERT_EQ(back.tokens, cap.tokens);
      // body error bounded by the worst bit width of the pair; sink exact to fp16
      const double body = rel_rms(cap, back, s.config.sink, s.B);
      const uint32_t worst = std::min(pr[0], pr[1]);
      const double bound = worst == 4 ? 0.15 : worst == 3 ? 0.30 : 0.62;
      if (s.B > s.config.sink) {
        EXPECT_LT(body, bound) << "D=" << g.D << " " << pr[0] << "/" << pr[1];
        EXPECT_GT(body, 1e-3);
      }
      EXPECT_LT(rel_rms(cap, back, 0, std::min(s.config.sink, g.tokens)), 2e-3);  // fp16 sink, rotation round trip
      const double ring = rel_rms(cap, back, s.ring_from(), s.N);
      EXPECT_LT(ring, g.st == StagingType::f16 ? 2e-3 : 0.05);
      const auto cmp = compare_snapshot(s, cap);
      ASSERT_EQ(cmp.size(), cap.layers.size());
      EXPECT_GT(cmp[0].all.cosine, 0.8);
    }
  }
}

TEST(Encode, RotatedF16TailZeroEqualsCoreSeal) {
  // --assume-rotated --staging f16 --tail 0 --tail-max 0: every whole group past the sink is
  // sealed from the fp16 rows exactly as given.
  const uint32_t D = 128, H = 2, N = 128 + 3 * 128 + 50;
  Capture cap = make_capture(1, H, D, N, 99);
  EncodeOptions o;
  o.config.body = Body::scalar;
  o.config.staging = StagingType::f16;
  o.config.tail = 0;
  o.config.tail_max = 0;
  o.assume_rotated = true;
  o.n_ubatch = 100;
  const Snapshot s = encode_capture(cap, o);
  EXPECT_EQ(s.B, 128u + 3 * 128);
  const RecordLayout l = s.config.layout();
  SealWorkspace ws;
  std::vector<uint8_t> rec(l.bytes);
  for (uint32_t g = 0; g < 3; ++g)
    for (uint32_t h = 0; h < H; ++h) {
      const uint16_t* k = &cap.layers[0].k[(static_cast<size_t>(128 + g * 128) * H + h) * D];
      const uint16_t* v = &cap.layers[0].v[(static_cast<size_t>(128 + g * 128) * H + h) * D];
      ASSERT_TRUE(seal_record(l, SealOptions{}, k, v, static_cast<size_t>(H) * D, rec.data(), ws, SealPath::reference).ok());
      EXPECT_EQ(0, std::memcmp(rec.data(), &s.layers[0].body[(static_cast<size_t>(g) * H + h) * l.bytes], l.bytes))
          << "group " << g << " head " << h;
    }
}

TEST(Encode, SameSnapshotForAnyThreadCountAndUbatchOfOne) {
  const Capture cap = make_capture(2, 2, 128, 900, 3);
  EncodeOptions o;
  o.config.body = Body::scalar;
  o.config.tail = 256;
  o.config.tail_max = 512;
  o.n_ubatch = 32;
  o.threads = 1;
  const Snapshot a = encode_capture(cap, o);
  o.threads = 2;
  const Snapshot b = encode_capture(cap, o);
  ASSERT_EQ(a.layers.size(), b.layers.size());
  for (size_t l = 0; l < a.layers.size(); ++l) {
    EXPECT_EQ(a.layers[l].body, b.layers[l].body);
    EXPECT_EQ(a.layers[l].ring_k, b.layers[l].ring_k);
    EXPECT_EQ(a.layers[l].sink_v, b.layers[l].sink_v);
  }
}

// The sealer handed down (a GPU one in the tools, Device::sealer) seals every commit, with the
// CPU's bytes; here the CPU sealer itself, counted.
TEST(Encode, GivenSealerSealsEveryCommitWithTheSameBytes) {
  const Capture cap = make_capture(2, 2, 128, 900, 3);
  EncodeOptions o;
  o.config.body = Body::trellis;
  o.config.bits_k = 3;
  o.config.bits_v = 2;
  o.config.tail = 256;
  o.config.tail_max = 512;
  o.n_ubatch = 64;
  const Snapshot a = encode_capture(cap, o);
  size_t calls = 0, records = 0;
  o.sealer = [&](const RecordLayout& l, const SealOptions& so, size_t n, const uint16_t* const* k,
                 const uint16_t* const* v, size_t stride, uint8_t* out) {
    ++calls;
    records += n;
    return seal_records(l, so, n, k, v, stride, out);
  };
  const Snapshot b = encode_capture(cap, o);
  EXPECT_GT(calls, 0u);
  EXPECT_EQ(records, static_cast<size_t>(b.n_groups()) * cap.kv_heads * cap.layers.size());
  ASSERT_EQ(a.layers.size(), b.layers.size());
  EXPECT_GT(a.n_groups(), 0u);
  for (size_t l = 0; l < a.layers.size(); ++l) {
    EXPECT_EQ(a.layers[l].body, b.layers[l].body);
    EXPECT_EQ(a.layers[l].ring_k, b.layers[l].ring_k);
  }
}

TEST(Encode, KvarnSealsEveryFullGroup) {
  const Capture cap = make_capture(1, 2, 128, 128 + 5 * 128 + 17, 4);
  EncodeOptions o;
  o.config = kvarn_config(0, 4, 4, 0);
  o.n_ubatch = 1;  // decode-style: one token at a time
  const Snapshot s = encode_capture(cap, o);
  EXPECT_EQ(s.B, 128u + 5 * 128);  // exact suffix is the unfilled group only
  EXPECT_EQ(s.n_ring(), 17u);
  EXPECT_NE(s.config.name().find("kvarn:"), std::string::npos);
}

TEST(Encode, RejectsBadValuesAndConfigs) {
  Capture cap = make_capture(2, 1, 128, 300, 5);
  cap.layers[1].v[200 * 128 + 3] = 0x7c00;  // +inf in layer 1, position 200
  EncodeOptions o;
  o.config.body = Body::scalar;
  try {
    encode_capture(cap, o);
    FAIL() << "expected an error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("200"), std::string::npos) << e.what();  // names the position
  }
  Capture ok = make_capture(1, 1, 128, 10, 6);
  o.config.bits_k = 3;
  o.config.bits_v = 4;
  o.config.body = Body::trellis;  // a trellis V side may not be wider than K
  EXPECT_THROW(encode_capture(ok, o), std::invalid_argument);
}

TEST(Encode, TrellisSnapshotCarriesItsCodebooksThroughTheFile) {
  const Capture cap = make_capture(1, 2, 128, 128 + 4 * 128 + 30, 8);
  EncodeOptions o;
  o.config.bits_k = 3;
  o.config.bits_v = 2;  // AUTO resolves to trellis
  o.config.tail = 128;
  o.config.tail_max = 256;
  o.n_ubatch = 64;
  const Snapshot s = encode_capture(cap, o);
  ASSERT_EQ(s.config.resolved_body(), Body::trellis);
  EXPECT_EQ(s.codebook_id, 0x8098c9fada170179ull);  // the reference 3/2 tables' identity
  EXPECT_EQ(s.codebook_k.size(), 512u);
  EXPECT_EQ(s.codebook_v.size(), 256u);
  ASSERT_GT(s.B, s.config.sink);
  const std::string path = ::testing::TempDir() + "trellis-snapshot.h5";
  write_snapshot(path, s);
  const Snapshot r = read_snapshot(path);
  std::remove(path.c_str());
  EXPECT_EQ(r.codebook_id, s.codebook_id);
  EXPECT_EQ(r.codebook_k, s.codebook_k);
  EXPECT_EQ(r.layers[0].body, s.layers[0].body);
  const Capture a = decode_snapshot(s, true), b = decode_snapshot(r, true);
  EXPECT_EQ(a.layers[0].k, b.layers[0].k);
  // trellis at 3/2 beats scalar 3/2 on the same rows
  EncodeOptions sc = o;
  sc.config.body = Body::scalar;
  const Snapshot t = encode_capture(cap, sc);
  const double et = rel_rms(cap, decode_snapshot(s, false), s.config.sink, s.B);
  const double es = rel_rms(cap, decode_snapshot(t, false), t.config.sink, t.B);
  EXPECT_LT(et, es) << "trellis " << et << " scalar " << es;
}

TEST(Encode, RawCodebookFilesAreValidatedAndUsed) {
  const std::string dir = std::string(SJKV_GOLDEN_DIR) + "/../../data/codebooks/";
  const RawCodebook c3 = read_raw_codebook(dir + "reference-3bit.bin");
  const RawCodebook c2 = read_raw_codebook(dir + "reference-2bit.bin");
  EXPECT_EQ(c3.bits, 3u);
  EXPECT_EQ(c2.bits, 2u);
  EXPECT_EQ(codebook_id(3, 2, TrellisCodebooks{c3.k.data(), c2.v.data()}), 0x8098c9fada170179ull);

  const std::string tmp = ::testing::TempDir() + "cb-test.bin";
  auto write = [&](const std::vector<uint16_t>& v) {
    std::FILE* f = std::fopen(tmp.c_str(), "wb");
    std::fwrite(v.data(), 2, v.size(), f);
    std::fclose(f);
  };
  std::vector<uint16_t> t(1024, 0x3c00);
  write(t);  // 2048 bytes: a 3-bit pair
  EXPECT_EQ(read_raw_codebook(tmp).bits, 3u);
  write(std::vector<uint16_t>(700, 0x3c00));
  EXPECT_THROW(read_raw_codebook(tmp), FileError);
  t[600] = 0x7e00;  // NaN in the V table
  write(t);
  try {
    read_raw_codebook(tmp);
    FAIL();
  } catch (const FileError& e) {
    EXPECT_NE(std::string(e.what()).find("V table entry 88"), std::string::npos) << e.what();
  }
  std::remove(tmp.c_str());

  // A run-time table seals differently from the reference and the snapshot carries it.
  std::vector<uint16_t> scaled_k = c3.k;
  for (auto& h : scaled_k) h = f32_to_f16(f16_to_f32(h) * 0.5f);
  const Capture cap = make_capture(1, 1, 128, 128 + 2 * 128, 12);
  EncodeOptions o;
  o.config.bits_k = 3;
  o.config.bits_v = 3;
  o.config.tail = 0;
  o.config.tail_max = 0;
  o.codebooks.k = scaled_k.data();
  const Snapshot s = encode_capture(cap, o);
  EXPECT_EQ(s.codebook_k, scaled_k);
  EXPECT_EQ(s.codebook_v, c3.v);
  EXPECT_NE(s.codebook_id, 0xd3b4c98ce0f8406cull);
  // It decodes with the tables it was sealed with: decoding its records with the reference
  // K table instead is clearly worse.
  Snapshot wrong = s;
  wrong.codebook_k.clear();
  const double e = rel_rms(cap, decode_snapshot(s, false), s.config.sink, s.B);
  const double e_wrong = rel_rms(cap, decode_snapshot(wrong, false), s.config.sink, s.B);
  EXPECT_LT(e, e_wrong);
  EXPECT_GT(e, 0.0);
}
