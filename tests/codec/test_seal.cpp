// Scalar seal: layout tables, fast paths and thread counts against the reference, typed
// errors, configuration checks, and decode error against the fp32 input.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "../golden.h"
#include "sjkv/hash.h"
#include "sjkv/seal.h"
#include "sjkv/testgen.h"

using namespace sjkv;

namespace {

const SealPath kFastPaths[] = {SealPath::fast_baseline, SealPath::fast_avx2, SealPath::fast_avx512, SealPath::fast};

// Realistic tile: fill_group's outlier channels and token factors, or a rotated-looking
// Gaussian tile with a per-channel bias; `kind` picks.
struct Tile {
  uint32_t D, G;
  std::vector<uint16_t> K, V;
};

Tile make_tile(uint32_t D, uint32_t G, uint64_t seed, int kind) {
  Tile t{D, G, std::vector<uint16_t>(static_cast<size_t>(G) * D), std::vector<uint16_t>(static_cast<size_t>(G) * D)};
  if (kind == 0) {
    std::vector<int32_t> chf(D);
    fill_group(D, G, seed, t.K.data(), t.V.data(), chf.data());
    return t;
  }
  XorShift64 rng(seed * 7919 + 17);
  std::vector<float> bias(D);
  for (auto& b : bias) b = static_cast<float>(rng.gauss()) / 1024.0f;
  for (uint32_t i = 0; i < G * D; ++i) {
    const uint32_t d = i % D;
    float k = static_cast<float>(rng.gauss()) / 2048.0f + bias[d];
    float v = static_cast<float>(rng.gauss()) / 4096.0f;
    if (kind == 2) {  // sparse: exact zeros, signed zeros and repeated values stress min/max ties
      if (rng.next() % 3 == 0) k = (rng.next() & 1) ? 0.0f : -0.0f;
      if (rng.next() % 4 == 0) v = (rng.next() & 1) ? 0.25f : -0.0f;
    }
    t.K[i] = f32_to_f16(k);
    t.V[i] = f32_to_f16(v);
  }
  return t;
}

std::vector<uint8_t> seal(const Tile& t, uint32_t bk, uint32_t bv, const SealOptions& o, SealPath p) {
  const RecordLayout l = make_layout(t.D, t.G, bk, bv, Body::scalar);
  std::vector<uint8_t> rec(l.bytes, 0xAB);
  SealWorkspace ws;
  const Status st = seal_record(l, o, t.K.data(), t.V.data(), t.D, rec.data(), ws, p);
  EXPECT_TRUE(st.ok()) << st.message();
  return rec;
}

}  // namespace

TEST(Layout, MatchesRecordLayoutsCsv) {
  int n = 0;
  for (const auto& r : sjkv_test::read_csv("record_layouts.csv")) {
    const Body body = r.at("body") == "trellis" ? Body::trellis : Body::scalar;
    const RecordLayout l = make_layout(std::stoul(r.at("D")), std::stoul(r.at("G")), std::stoul(r.at("bits_k")),
                                       std::stoul(r.at("bits_v")), body);
    EXPECT_EQ(l.k_payload, std::stoul(r.at("k_payload")));
    EXPECT_EQ(l.v_payload, std::stoul(r.at("v_payload")));
    EXPECT_EQ(l.k_scale, std::stoul(r.at("k_scale")));
    EXPECT_EQ(l.k_zero, std::stoul(r.at("k_zero")));
    EXPECT_EQ(l.k_tok, std::stoul(r.at("k_tok")));
    EXPECT_EQ(l.v_ch, std::stoul(r.at("v_ch")));
    EXPECT_EQ(l.v_scale, std::stoul(r.at("v_scale")));
    EXPECT_EQ(l.v_zero, std::stoul(r.at("v_zero")));
    EXPECT_EQ(l.bytes, std::stoul(r.at("bytes")));
    EXPECT_NEAR(8.0 * l.bytes / (2.0 * l.head_dim * l.group), std::stod(r.at("bits_per_element")), 1e-6);
    ++n;
  }
  EXPECT_GT(n, 30);
}

TEST(Layout, ChannelPermutationsMatchCsv) {
  int n = 0;
  for (const auto& r : sjkv_test::read_csv("ch_perm_4bit.csv")) {
    const uint32_t D = std::stoul(r.at("D")), d = std::stoul(r.at("d"));
    const RecordLayout l = make_layout(D, 128, 4, 4, Body::scalar);
    EXPECT_EQ(k_ch_idx(l, d), std::stoul(r.at("k_ch_idx")));
    EXPECT_EQ(v_ch_idx(l, d), std::stoul(r.at("v_ch_idx")));
    ++n;
  }
  EXPECT_EQ(n, 128 + 256);
  // Identity for sides that are not fragment-ordered, e.g. 4/3: K permuted, V identity.
  const RecordLayout l43 = make_layout(128, 128, 4, 3, Body::scalar);
  EXPECT_EQ(v_ch_idx(l43, 1), 1u);
  EXPECT_EQ(k_ch_idx(l43, 2), 32u);
}

TEST(Layout, FragmentTileOrderMatchesCsv) {
  const RecordLayout l = make_layout(128, 128, 4, 4, Body::scalar);
  int n = 0;
  for (const auto& r : sjkv_test::read_csv("frag_tile_order.csv")) {
    const uint32_t tt = std::stoul(r.at("tt")), dd = std::stoul(r.at("dd"));
    EXPECT_EQ(code_bit(l, Side::k, tt, dd), std::stoul(r.at("K_bit_in_tile")));
    EXPECT_EQ(code_bit(l, Side::v, tt, dd), std::stoul(r.at("V_bit_in_tile")));
    ++n;
  }
  EXPECT_EQ(n, 256);
  // Tiles are strip-major: token strip 1 starts after all D/16 channel tiles of strip 0.
  EXPECT_EQ(code_bit(l, Side::k, 16, 0), 128u / 16u * 128u * 8u);
}

TEST(Seal, FastPathsEqualReferenceEverywhere) {
  const uint32_t pairs[][2] = {{4, 4}, {4, 3}, {4, 2}, {3, 4}, {3, 3}, {3, 2}, {2, 4}, {2, 3}, {2, 2}};
  int compared = 0;
  for (uint32_t D : {64u, 128u, 256u, 512u})
    for (int kind = 0; kind < 3; ++kind) {
      const Tile t = make_tile(D, 128, 11 + D + kind, kind);
      for (const auto& p : pairs) {
        if (D == 512 && kind != 0) continue;  // keep the run short; D=512 covered by kind 0
        for (BalanceMode mode : {BalanceMode::final_scales, BalanceMode::best_of}) {
          SealOptions o;
          o.balance = mode;
          o.iters = mode == BalanceMode::best_of ? 8 : 16;
          const auto ref = seal(t, p[0], p[1], o, SealPath::reference);
          for (SealPath path : kFastPaths) {
            if (!seal_path_available(path)) continue;
            const auto got = seal(t, p[0], p[1], o, path);
            ASSERT_EQ(0, std::memcmp(ref.data(), got.data(), ref.size()))
                << "D=" << D << " kind=" << kind << " " << p[0] << "/" << p[1] << " mode=" << int(mode) << " "
                << seal_path_name(path);
            ++compared;
          }
        }
      }
    }
  EXPECT_GT(compared, 100);
}

TEST(Seal, OtherGroupSizesAndIterationCounts) {
  for (uint32_t G : {16u, 64u, 256u})
    for (uint32_t iters : {0u, 1u, 3u}) {
      const Tile t = make_tile(128, G, G + iters, 1);
      SealOptions o;
      o.iters = iters;
      const auto ref = seal(t, 4, 3, o, SealPath::reference);
      const auto got = seal(t, 4, 3, o, SealPath::fast);
      EXPECT_EQ(0, std::memcmp(ref.data(), got.data(), ref.size())) << "G=" << G << " iters=" << iters;
    }
}

TEST(Seal, ZeroIterationsKeepUnitScales) {
  const Tile t = make_tile(128, 128, 5, 0);
  SealOptions o;
  o.iters = 0;
  const auto rec = seal(t, 4, 4, o, SealPath::fast);
  const RecordLayout l = make_layout(128, 128, 4, 4, Body::scalar);
  for (uint32_t i = 0; i < 128; ++i) {
    EXPECT_EQ(load_u16(&rec[l.k_tok + 2 * i]), 0x3c00);
    EXPECT_EQ(load_u16(&rec[l.v_ch + 2 * i]), 0x3c00);
  }
}

TEST(Seal, SameBytesForOneAndTwoThreads) {
  const uint32_t D = 256;
  const int n = 12;
  std::vector<Tile> tiles;
  for (int i = 0; i < n; ++i) tiles.push_back(make_tile(D, 128, 100 + i, i % 3));
  std::vector<const uint16_t*> kp, vp;
  for (auto& t : tiles) {
    kp.push_back(t.K.data());
    vp.push_back(t.V.data());
  }
  for (auto pr : {std::pair<uint32_t, uint32_t>{4, 4}, {3, 2}}) {
    const RecordLayout l = make_layout(D, 128, pr.first, pr.second, Body::scalar);
    std::vector<uint8_t> one(l.bytes * n), two(l.bytes * n), ref(l.bytes * n);
    ASSERT_TRUE(seal_records(l, SealOptions{}, n, kp.data(), vp.data(), D, one.data(), SealPath::fast, 1).ok());
    ASSERT_TRUE(seal_records(l, SealOptions{}, n, kp.data(), vp.data(), D, two.data(), SealPath::fast, 2).ok());
    ASSERT_TRUE(seal_records(l, SealOptions{}, n, kp.data(), vp.data(), D, ref.data(), SealPath::reference, 2).ok());
    EXPECT_EQ(one, two);
    EXPECT_EQ(one, ref);
  }
}

TEST(Seal, NonFiniteInputIsATypedErrorNamingThePosition) {
  for (uint16_t bad : {uint16_t(0x7c00), uint16_t(0xfc00), uint16_t(0x7e00), uint16_t(0x7d23)}) {
    Tile t = make_tile(128, 128, 9, 1);
    t.V[37 * 128 + 101] = bad;
    const RecordLayout l = make_layout(128, 128, 4, 4, Body::scalar);
    std::vector<uint8_t> rec(l.bytes, 0x55);
    SealWorkspace ws;
    const Status st = seal_record(l, SealOptions{}, t.K.data(), t.V.data(), 128, rec.data(), ws);
    EXPECT_EQ(st.code, ErrorCode::non_finite_input);
    EXPECT_EQ(st.side, Side::v);
    EXPECT_EQ(st.token, 37u);
    EXPECT_EQ(st.channel, 101u);
    EXPECT_NE(st.message().find("V token 37 channel 101"), std::string::npos) << st.message();
    for (uint8_t b : rec) ASSERT_EQ(b, 0);  // no half-written record
  }
  // seal_records reports the lowest failing record.
  std::vector<Tile> tiles;
  for (int i = 0; i < 4; ++i) tiles.push_back(make_tile(128, 128, 50 + i, 1));
  tiles[3].K[0] = 0x7c00;
  tiles[2].K[5 * 128 + 6] = 0xfe00;
  std::vector<const uint16_t*> kp, vp;
  for (auto& t : tiles) {
    kp.push_back(t.K.data());
    vp.push_back(t.V.data());
  }
  const RecordLayout l = make_layout(128, 128, 4, 4, Body::scalar);
  std::vector<uint8_t> out(4 * l.bytes);
  const Status st = seal_records(l, SealOptions{}, 4, kp.data(), vp.data(), 128, out.data(), SealPath::fast, 2);
  EXPECT_EQ(st.code, ErrorCode::non_finite_input);
  EXPECT_EQ(st.token, 5u);
  EXPECT_EQ(st.channel, 6u);
  EXPECT_NE(st.detail.find("record 2"), std::string::npos);
}

TEST(Config, CanImplementGivesTypedReasons) {
  EXPECT_EQ(can_implement_record(128, 128, 4, 4, Body::scalar), Unsupported::none);
  EXPECT_EQ(can_implement_record(96, 128, 4, 4, Body::scalar), Unsupported::head_dim_not_pow2);
  EXPECT_EQ(can_implement_record(16, 128, 4, 4, Body::scalar), Unsupported::head_dim_too_small);
  EXPECT_EQ(can_implement_record(128, 0, 4, 4, Body::scalar), Unsupported::group_invalid);
  EXPECT_EQ(can_implement_record(128, 120, 4, 4, Body::scalar), Unsupported::group_invalid);
  EXPECT_EQ(can_implement_record(128, 128, 5, 4, Body::scalar), Unsupported::bits_out_of_range);
  EXPECT_EQ(can_implement_record(128, 128, 4, 1, Body::scalar), Unsupported::bits_out_of_range);
  EXPECT_EQ(can_implement_record(128, 128, 4, 4, static_cast<Body>(7)), Unsupported::body_invalid);
  EXPECT_EQ(can_implement_record(128, 128, 3, 4, Body::trellis), Unsupported::trellis_bits);
  EXPECT_EQ(can_implement_record(128, 128, 2, 3, Body::trellis), Unsupported::trellis_bits);
  EXPECT_EQ(can_implement_record(128, 64, 3, 3, Body::trellis), Unsupported::trellis_group);
  EXPECT_EQ(can_implement_record(64, 128, 3, 3, Body::trellis), Unsupported::trellis_head_dim);
  EXPECT_EQ(can_implement_record(128, 128, 3, 2, Body::automatic), Unsupported::none);  // AUTO -> trellis
  EXPECT_EQ(can_implement_record(256, 128, 3, 3, Body::trellis), Unsupported::none);
  EXPECT_EQ(can_implement_record(512, 128, 2, 2, Body::trellis), Unsupported::none);
  EXPECT_EQ(can_implement_record(128, 128, 3, 4, Body::automatic), Unsupported::none);  // AUTO -> scalar
  EXPECT_EQ(can_implement_record(128, 128, 2, 3, Body::automatic), Unsupported::none);
  // sjkv extensions: 4/4 trellis only when asked for; the channel axis needs a trellis body.
  EXPECT_EQ(can_implement_record(128, 128, 4, 4, Body::trellis), Unsupported::none);
  EXPECT_EQ(can_implement_record(128, 128, 3, 2, Body::trellis, TrellisAxis::channel), Unsupported::none);
  EXPECT_EQ(can_implement_record(128, 128, 4, 4, Body::automatic, TrellisAxis::channel), Unsupported::trellis_axis);

  CodecConfig c;
  c.body = Body::scalar;
  EXPECT_EQ(can_implement(c), Unsupported::none);
  c.head_dim = 64;
  EXPECT_EQ(can_implement(c), Unsupported::staging_block);  // tq6_0 needs 128-value blocks
  c.staging = StagingType::q8_0;
  EXPECT_EQ(can_implement(c), Unsupported::none);
  c.staging = StagingType::f16;
  EXPECT_EQ(can_implement(c), Unsupported::none);
  c = CodecConfig{};
  c.body = Body::scalar;
  c.head_dim = 512;
  EXPECT_EQ(c.rotation(), 256u);
  c.rotation_block = 512;
  EXPECT_EQ(can_implement(c), Unsupported::none);
  c.rotation_block = 48;
  EXPECT_EQ(can_implement(c), Unsupported::rotation_block);
  c = CodecConfig{};
  c.body = Body::scalar;
  c.sink = 96;
  EXPECT_EQ(can_implement(c), Unsupported::sink_invalid);
  c.sink = 0;
  EXPECT_EQ(can_implement(c), Unsupported::sink_invalid);
  c = CodecConfig{};
  c.body = Body::scalar;
  c.tail = 100;
  EXPECT_EQ(can_implement(c), Unsupported::tail_not_group_aligned);
  c.tail = 4096;
  c.tail_max = 2048;
  EXPECT_EQ(can_implement(c), Unsupported::tail_max_invalid);
  c.tail_max = 8200;
  EXPECT_EQ(can_implement(c), Unsupported::tail_max_invalid);
  c.tail_max = 0;
  EXPECT_EQ(can_implement(c), Unsupported::none);
  c.iters = 65;
  EXPECT_EQ(can_implement(c), Unsupported::iters_out_of_range);
  for (int u = 0; u <= static_cast<int>(Unsupported::iters_out_of_range); ++u)
    EXPECT_STRNE(describe(static_cast<Unsupported>(u)), "unknown reason");

  const CodecConfig kv = kvarn_config(128, 4, 4, 0);
  EXPECT_EQ(can_implement(kv), Unsupported::none);
  EXPECT_EQ(kv.iters, 8u);
  EXPECT_EQ(kv.balance, BalanceMode::best_of);
  EXPECT_NE(kv.name().find("kvarn:4/4"), std::string::npos);
}

// Relative RMS error of decoded rows against the fp32 seal input, per bit pair; the bounds
// come from measurements on these tiles with margin (see the printed table).
TEST(Seal, DecodeErrorWithinPerBitBound) {
  struct Bound {
    uint32_t bk, bv;
    double k_max, v_max;
  };
  // Measured on fill_group tiles (unrotated, 3% outlier channels), D = 64..512: 4-bit
  // 0.080-0.103, 3-bit 0.176-0.224, 2-bit 0.404-0.529. Bounds sit ~15% above the worst.
  const Bound bounds[] = {{4, 4, 0.12, 0.12}, {3, 3, 0.26, 0.26}, {2, 2, 0.61, 0.61},
                          {4, 2, 0.12, 0.61}, {3, 2, 0.26, 0.61}, {2, 4, 0.61, 0.12}};
  for (uint32_t D : {64u, 128u, 256u, 512u}) {
    const Tile t = make_tile(D, 128, 77 + D, 0);
    for (const auto& b : bounds) {
      const RecordLayout l = make_layout(D, 128, b.bk, b.bv, Body::scalar);
      const auto rec = seal(t, b.bk, b.bv, SealOptions{}, SealPath::fast);
      double ek = 0, ev = 0, nk = 0, nv = 0;
      std::vector<float> row(D);
      for (uint32_t tk = 0; tk < 128; ++tk) {
        decode_k_row(l, rec.data(), tk, row.data());
        for (uint32_t d = 0; d < D; ++d) {
          const double x = f16_to_f32(t.K[tk * D + d]);
          ek += (row[d] - x) * (row[d] - x);
          nk += x * x;
        }
        decode_v_row(l, rec.data(), tk, row.data());
        for (uint32_t d = 0; d < D; ++d) {
          const double x = f16_to_f32(t.V[tk * D + d]);
          ev += (row[d] - x) * (row[d] - x);
          nv += x * x;
        }
      }
      ASSERT_GT(nk, 0.0);
      ASSERT_GT(nv, 0.0);
      const double rk = std::sqrt(ek / nk), rv = std::sqrt(ev / nv);
      EXPECT_LT(rk, b.k_max) << "D=" << D << " " << b.bk << "/" << b.bv;
      EXPECT_LT(rv, b.v_max) << "D=" << D << " " << b.bk << "/" << b.bv;
      EXPECT_GT(rk, 1e-4) << "suspiciously exact";  // a lossy code that is exact is a bug
      std::printf("D=%3u %u/%u  K rel.rms %.4f  V rel.rms %.4f\n", D, b.bk, b.bv, rk, rv);
    }
  }
}

TEST(Seal, AllZeroTileDecodesToZero) {
  Tile t{128, 128, std::vector<uint16_t>(128 * 128, 0), std::vector<uint16_t>(128 * 128, 0)};
  const RecordLayout l = make_layout(128, 128, 4, 4, Body::scalar);
  const auto rec = seal(t, 4, 4, SealOptions{}, SealPath::fast);
  std::vector<float> row(128);
  for (uint32_t tk = 0; tk < 128; tk += 17) {
    decode_k_row(l, rec.data(), tk, row.data());
    for (float x : row) EXPECT_EQ(x, 0.0f);
  }
}

TEST(Seal, KvarnBestOfDiffersFromFinalScalesAndIsNoWorseBalanced) {
  const Tile t = make_tile(128, 128, 3, 0);
  SealOptions sj, kv;
  sj.iters = 8;
  kv.iters = 8;
  kv.balance = BalanceMode::best_of;
  const auto a = seal(t, 4, 4, sj, SealPath::reference);
  const auto b = seal(t, 4, 4, kv, SealPath::reference);
  EXPECT_EQ(a.size(), b.size());
  // Same format and layout; different scale choice is allowed but both must decode well.
  const RecordLayout l = make_layout(128, 128, 4, 4, Body::scalar);
  std::vector<float> ra(128), rb(128);
  double e = 0, n = 0;
  for (uint32_t tk = 0; tk < 128; ++tk) {
    decode_k_row(l, b.data(), tk, rb.data());
    for (uint32_t d = 0; d < 128; ++d) {
      const double x = f16_to_f32(t.K[tk * 128 + d]);
      e += (rb[d] - x) * (rb[d] - x);
      n += x * x;
    }
  }
  EXPECT_LT(std::sqrt(e / n), 0.15);
}
