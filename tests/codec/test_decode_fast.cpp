// The host fast decoders (sjkv/decode_fast.h) against their references, bit for bit, on
// realistic inputs (testgen's outlier-channel groups and rows): the fp16 table against F,
// staged rows against staging_decode_row, record rows of every body against
// decode_k_row_ref / decode_v_row_ref, and cache rows against resolve_row. Also the row
// position rule (docs/SPEC.md §9.2).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "sjkv/cache.h"
#include "sjkv/cache_view.h"
#include "sjkv/decode_fast.h"
#include "sjkv/record.h"
#include "sjkv/seal.h"
#include "sjkv/staging.h"
#include "sjkv/testgen.h"

using namespace sjkv;

namespace {

bool same_bits(const float* a, const float* b, size_t n) { return std::memcmp(a, b, n * sizeof(float)) == 0; }

TEST(DecodeFast, F16TableIsFOfEveryPattern) {
  const float* F = f16_to_f32_table();
  for (uint32_t h = 0; h < 65536; ++h) {
    const float want = f16_to_f32(static_cast<uint16_t>(h));
    ASSERT_EQ(f32_bits(F[h]), f32_bits(want)) << h;  // NaNs and signed zeros too
  }
}

// The f16 row decoder (F16C where the machine has it) on every 16-bit pattern, in rows whose
// length is not a multiple of eight: infinities and NaN payloads come out as the table's.
TEST(DecodeFast, F16RowsOfEveryPattern) {
  const float* F = f16_to_f32_table();
  const uint32_t d = 65536 + 5;
  std::vector<uint8_t> in(2 * static_cast<size_t>(d));
  for (uint32_t i = 0; i < d; ++i) {
    in[2 * i] = static_cast<uint8_t>(i & 255);
    in[2 * i + 1] = static_cast<uint8_t>((i >> 8) & 255);
  }
  std::vector<float> out(d);
  staging_decode_row_fast(StagingType::f16, in.data(), d, out.data());
  for (uint32_t i = 0; i < d; ++i) ASSERT_EQ(f32_bits(out[i]), f32_bits(F[i & 65535])) << i;
}

TEST(DecodeFast, StagedRowsEqualTheReferenceDecoder) {
  for (StagingType t : kStagingTypes) {
    for (uint32_t D : {128u, 256u}) {
      SCOPED_TRACE(std::string(staging_name(t)) + " D=" + std::to_string(D));
      const uint32_t rows = 64, rb = staging_row_bytes(t, D);
      std::vector<float> x(static_cast<size_t>(rows) * D), a(D), b(D);
      fill_rows(rows, D, x.data());  // the last row is zeros
      std::vector<uint8_t> enc(rb);
      double norm = 0.0;
      for (uint32_t r = 0; r < rows; ++r) {
        ASSERT_TRUE(staging_encode_row(t, &x[static_cast<size_t>(r) * D], D, enc.data()));
        staging_decode_row(t, enc.data(), D, a.data());
        staging_decode_row_fast(t, enc.data(), D, b.data());
        ASSERT_TRUE(same_bits(a.data(), b.data(), D)) << r;
        for (uint32_t i = 0; i < D; ++i) {
          ASSERT_EQ(f32_bits(staging_decode_value(t, enc.data(), i)), f32_bits(a[i])) << r << " " << i;
          norm += static_cast<double>(a[i]) * a[i];
        }
      }
      EXPECT_GT(norm, 0.0);
    }
  }
}

struct LayoutCase {
  uint32_t D, G, bk, bv;
  Body body;
  TrellisAxis axis;
};

std::string case_name(const LayoutCase& c) {
  return "D=" + std::to_string(c.D) + " G=" + std::to_string(c.G) + " " + std::to_string(c.bk) + "/" +
         std::to_string(c.bv) + (c.body == Body::trellis ? "t" : "") + (c.axis == TrellisAxis::channel ? " channel" : "");
}

// A side's table with every entry scaled by 1.25 (rounded to fp16): a run-time codebook.
std::vector<uint16_t> scaled_table(Side side, uint32_t bits) {
  const uint16_t* ref = codebook_table(TrellisCodebooks{}, side, bits);
  std::vector<uint16_t> t(trellis_entries(bits));
  for (size_t i = 0; i < t.size(); ++i) t[i] = f32_to_f16(f16_to_f32(ref[i]) * 1.25f);
  return t;
}

TEST(DecodeFast, RecordRowsEqualTheReferenceDecoders) {
  const Body S = Body::scalar, T = Body::trellis;
  const TrellisAxis tok = TrellisAxis::token, ch = TrellisAxis::channel;
  const std::vector<LayoutCase> cases = {
      {128, 128, 4, 4, S, tok}, {128, 128, 4, 3, S, tok}, {128, 128, 4, 2, S, tok}, {128, 128, 3, 3, S, tok},
      {128, 128, 3, 2, S, tok}, {128, 128, 2, 2, S, tok}, {64, 128, 4, 4, S, tok},  {256, 128, 4, 4, S, tok},
      {128, 64, 4, 4, S, tok},  {128, 32, 3, 2, S, tok},  {64, 256, 2, 2, S, tok},  {256, 48, 4, 2, S, tok},
      {128, 128, 3, 3, T, tok}, {128, 128, 3, 2, T, tok}, {128, 128, 2, 2, T, tok}, {128, 128, 4, 4, T, tok},
      {256, 128, 4, 2, T, tok}, {128, 128, 3, 2, T, ch},  {256, 128, 3, 3, T, ch},  {128, 128, 4, 4, T, ch},
  };
  SealWorkspace ws;
  for (const LayoutCase& c : cases) {
    SCOPED_TRACE(case_name(c));
    ASSERT_EQ(can_implement_record(c.D, c.G, c.bk, c.bv, c.body, c.axis), Unsupported::none);
    const RecordLayout l = make_layout(c.D, c.G, c.bk, c.bv, c.body, c.axis);
    std::vector<uint16_t> K(static_cast<size_t>(c.G) * c.D), V(K.size());
    std::vector<int32_t> chf(c.D);
    fill_group(c.D, c.G, 1000 + c.D + c.G + 10 * c.bk + c.bv, K.data(), V.data(), chf.data());
    std::vector<uint8_t> rec(l.bytes);
    ASSERT_TRUE(seal_record(l, SealOptions{}, K.data(), V.data(), c.D, rec.data(), ws).ok());
    const RecordRows rows(l);
    // The reference tables, and for trellis bodies a run-time pair (decoding only reads them).
    const std::vector<uint16_t> tk = scaled_table(Side::k, c.bk), tv = scaled_table(Side::v, c.bv);
    std::vector<TrellisCodebooks> books = {TrellisCodebooks{}};
    if (c.body == T) books.push_back(TrellisCodebooks{tk.data(), tv.data()});
    for (const TrellisCodebooks& cb : books) {
      std::vector<float> k(static_cast<size_t>(c.G) * c.D), v(k.size()), rk(c.D), rv(c.D);
      // The whole record, a range inside it, and single rows.
      for (const auto& r : std::vector<std::pair<uint32_t, uint32_t>>{{0, c.G}, {5, c.G - 3}, {c.G - 1, c.G}, {17, 18}}) {
        rows.decode(rec.data(), r.first, r.second, cb, k.data(), v.data());
        double norm = 0.0;
        for (uint32_t t = r.first; t < r.second; ++t) {
          decode_k_row_ref(l, rec.data(), t, rk.data(), cb);
          decode_v_row_ref(l, rec.data(), t, rv.data(), cb);
          const size_t o = static_cast<size_t>(t - r.first) * c.D;
          ASSERT_TRUE(same_bits(rk.data(), &k[o], c.D)) << "K row " << t;
          ASSERT_TRUE(same_bits(rv.data(), &v[o], c.D)) << "V row " << t;
          for (uint32_t d = 0; d < c.D; ++d) norm += static_cast<double>(rk[d]) * rk[d] + static_cast<double>(rv[d]) * rv[d];
        }
        EXPECT_GT(norm, 0.0);
      }
    }
  }
}

TEST(DecodeFast, RowPositionRule) {
  // sink 128, G 64, B 320: [0,128) sink, [128,320) body (groups 0..2), [320, ...) tail.
  EXPECT_EQ(row_position(0, 128, 320, 64).region, RowPosition::sink);
  EXPECT_EQ(row_position(127, 128, 320, 64).region, RowPosition::sink);
  const RowPosition a = row_position(128, 128, 320, 64);
  EXPECT_EQ(a.region, RowPosition::body);
  EXPECT_EQ(a.g, 0u);
  EXPECT_EQ(a.t, 0u);
  const RowPosition b = row_position(319, 128, 320, 64);
  EXPECT_EQ(b.region, RowPosition::body);
  EXPECT_EQ(b.g, 2u);
  EXPECT_EQ(b.t, 63u);
  const RowPosition c = row_position(200, 128, 320, 64);
  EXPECT_EQ(c.g, 1u);
  EXPECT_EQ(c.t, 8u);
  EXPECT_EQ(row_position(320, 128, 320, 64).region, RowPosition::tail);
  // Nothing sealed yet (B = sink): the sink, then the tail.
  EXPECT_EQ(row_position(127, 128, 128, 64).region, RowPosition::sink);
  EXPECT_EQ(row_position(128, 128, 128, 64).region, RowPosition::tail);
}

// A cache driven as an engine does (ubatches, policy seals, ring wrap), every row of every
// head through resolve_rows against resolve_row: f16 and inherited sinks, every staging type,
// scalar and trellis bodies, whole and unaligned ranges.
TEST(DecodeFast, CacheRowsEqualResolveRow) {
  struct Case {
    StagingType st;
    SinkType sink;
    uint32_t bk, bv;
    Body body;
  };
  const std::vector<Case> cases = {
      {StagingType::tq6_0, SinkType::f16, 4, 4, Body::scalar},    {StagingType::q8_0, SinkType::f16, 4, 2, Body::scalar},
      {StagingType::f16, SinkType::inherit, 4, 4, Body::scalar},  {StagingType::tq6_0, SinkType::inherit, 3, 2, Body::trellis},
      {StagingType::q8_0, SinkType::inherit, 3, 3, Body::trellis}, {StagingType::f16, SinkType::f16, 2, 2, Body::trellis},
  };
  const uint32_t D = 128, H = 2, N = 1300, U = 64;
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(staging_name(c.st)) + (c.sink == SinkType::inherit ? " inherit " : " f16-sink ") +
                 std::to_string(c.bk) + "/" + std::to_string(c.bv) + (c.body == Body::trellis ? "t" : ""));
    CodecConfig cfg;
    cfg.head_dim = D;
    cfg.bits_k = c.bk;
    cfg.bits_v = c.bv;
    cfg.body = c.body;
    cfg.staging = c.st;
    cfg.sink_type = c.sink;
    cfg.tail = 256;
    cfg.tail_max = 512;
    CacheShape shape;
    shape.n_head_kv = H;
    shape.n_ctx = N;
    shape.n_ubatch = U;
    SequenceCache cache(cfg, shape);
    ASSERT_TRUE(cache.status().ok()) << cache.status().message();
    // Realistic rows: fill_group's outlier channels and token factors, one group per 128 positions.
    std::vector<float> k(static_cast<size_t>(U) * H * D), v(k.size());
    std::vector<uint16_t> gk(static_cast<size_t>(128) * D), gv(gk.size());
    std::vector<int32_t> chf(D);
    for (uint32_t p0 = 0; p0 < N; p0 += U) {
      const uint32_t n = p0 + U <= N ? U : N - p0;
      ASSERT_TRUE(cache.begin_ubatch(p0, n).ok());
      for (uint32_t h = 0; h < H; ++h) {
        fill_group(D, U, 77 + p0 + h, gk.data(), gv.data(), chf.data());
        for (uint32_t i = 0; i < n; ++i)
          for (uint32_t d = 0; d < D; ++d) {
            k[(static_cast<size_t>(i) * H + h) * D + d] = f16_to_f32(gk[static_cast<size_t>(i) * D + d]);
            v[(static_cast<size_t>(i) * H + h) * D + d] = f16_to_f32(gv[static_cast<size_t>(i) * D + d]);
          }
      }
      ASSERT_TRUE(cache.store_ubatch(p0, n, k.data(), v.data()).ok());
    }
    const CacheView view = cache.view(0);
    ASSERT_GT(view.B, view.sink);
    ASSERT_LT(view.B, view.N);
    const RecordRows rows(view.layout);
    std::vector<float> K(static_cast<size_t>(N) * D), V(K.size()), rk(D), rv(D);
    for (uint32_t h = 0; h < H; ++h) {
      resolve_rows(view, rows, h, 0, N, K.data(), V.data());
      for (uint32_t p = 0; p < N; ++p) {
        resolve_row(view, p, h, rk.data(), rv.data());
        ASSERT_TRUE(same_bits(rk.data(), &K[static_cast<size_t>(p) * D], D)) << "K position " << p;
        ASSERT_TRUE(same_bits(rv.data(), &V[static_cast<size_t>(p) * D], D)) << "V position " << p;
      }
      // Ranges that start and end inside a record, and cross the sink and tail borders.
      for (const auto& r : std::vector<std::pair<uint32_t, uint32_t>>{{100, 333}, {200, 201}, {view.B - 5, view.B + 7}}) {
        resolve_rows(view, rows, h, r.first, r.second, K.data(), V.data());
        for (uint32_t p = r.first; p < r.second; ++p) {
          resolve_row(view, p, h, rk.data(), rv.data());
          ASSERT_TRUE(same_bits(rk.data(), &K[static_cast<size_t>(p - r.first) * D], D)) << "K position " << p;
          ASSERT_TRUE(same_bits(rv.data(), &V[static_cast<size_t>(p - r.first) * D], D)) << "V position " << p;
        }
      }
    }
  }
}

}  // namespace
