// Memory planner (plan.h): the note's worked memory figures for Qwen3.8 27B (16 full-attention
// layers, 4 kv heads, head_dim 256), reproduced from the format sizes and the codec's record
// layout, plus the planner's own contracts (units, applicability, the budget search).
//
// Rounding. The note prints GB (1,024 MiB) to two decimals, bits per value to two decimals and
// contexts in K = 1,000 tokens rounded down; each figure is checked at that resolution, and the
// exact byte counts behind it are pinned as well.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "sjkv/layout.h"
#include "sjkv/policy.h"
#include "sjkv/plan.h"

namespace {

using sjkv::BlockFormat;
using sjkv::Body;
using sjkv::CacheGeometry;
using sjkv::CacheOption;
using sjkv::kGiB;
using sjkv::kMiB;
using sjkv::PlanSettings;
using sjkv::SjkvAccounting;

constexpr uint64_t kCtx100K = 110592;  // the note's 108K-token context of sections 1, 6, 8.4
constexpr uint64_t kCtx200K = 204800;  // section 7

// The note's two-decimal rounding.
double round2(double x) { return std::round(x * 100.0) / 100.0; }
double gb2(uint64_t bytes) { return round2(sjkv::to_gib(bytes)); }

CacheOption rule(uint32_t bk, uint32_t bv) { return CacheOption::sjkv(bk, bv, Body::automatic, SjkvAccounting::note_rule); }
CacheOption layout(uint32_t bk, uint32_t bv) { return CacheOption::sjkv(bk, bv); }

// ---- Units -----------------------------------------------------------------------------------

TEST(PlanUnits, GbIs1024MiB) {
  EXPECT_EQ(kGiB, 1024ull * kMiB);
  EXPECT_DOUBLE_EQ(sjkv::to_gib(6912ull * kMiB), 6.75);
  EXPECT_EQ(sjkv::gib(0.25), 256ull * kMiB);
  EXPECT_EQ(sjkv::gib(7.77), 8342973972ull);  // 7.77 x 2^30 = 8,342,973,972.48
  EXPECT_EQ(sjkv::kNote12GbBudget, 11ull * kGiB);
}

TEST(PlanUnits, ParseSize) {
  EXPECT_EQ(sjkv::parse_size("11GiB"), 11ull * kGiB);
  EXPECT_EQ(sjkv::parse_size("11 GB"), 11ull * kGiB);  // the note's GB
  EXPECT_EQ(sjkv::parse_size("11000MiB"), 11000ull * kMiB);
  EXPECT_EQ(sjkv::parse_size("7.77g"), sjkv::gib(7.77));
  EXPECT_EQ(sjkv::parse_size("1024"), 1024u);
  EXPECT_EQ(sjkv::parse_size("1k"), 1024u);
  EXPECT_EQ(sjkv::parse_size("0.5KiB"), 512u);
  EXPECT_EQ(sjkv::parse_size(" 3 b "), 3u);
  EXPECT_EQ(sjkv::parse_size("16384TiB"), 16384ull * 1024ull * kGiB);  // 2^54
  for (const char* bad : {"", "GiB", "-1GiB", "1.2.3", "12 parsecs", "1 G B", "99999999999999999999",
                          "20000000TiB", "."})
    EXPECT_FALSE(sjkv::parse_size(bad).has_value()) << bad;
}

// ---- Format sizes ----------------------------------------------------------------------------

TEST(PlanFormats, BitsFromTheBlockLayouts) {
  EXPECT_DOUBLE_EQ(sjkv::format_bits(BlockFormat::f16), 16.0);
  EXPECT_DOUBLE_EQ(sjkv::format_bits(BlockFormat::q8_0), 8.5);    // 34 B / 32
  EXPECT_DOUBLE_EQ(sjkv::format_bits(BlockFormat::q5_1), 6.0);    // 24 B / 32
  EXPECT_DOUBLE_EQ(sjkv::format_bits(BlockFormat::q4_0), 4.5);    // 18 B / 32
  EXPECT_DOUBLE_EQ(sjkv::format_bits(BlockFormat::tq6_0), 6.125); // 98 B / 128
  EXPECT_DOUBLE_EQ(sjkv::format_bits(BlockFormat::tq5_0), 5.125); // 82 B / 128
  EXPECT_DOUBLE_EQ(sjkv::format_bits(BlockFormat::turbo4), 4.125);// 66 B / 128
  EXPECT_DOUBLE_EQ(sjkv::format_bits(BlockFormat::turbo3), 3.125);// 50 B / 128
  for (const sjkv::BlockFormatInfo& i : sjkv::all_formats()) {
    EXPECT_EQ(sjkv::parse_format(i.name), i.format) << i.name;
    EXPECT_NE(std::string(i.source), "") << i.name;
  }
  EXPECT_EQ(sjkv::parse_format("Q8_0"), BlockFormat::q8_0);
  EXPECT_FALSE(sjkv::parse_format("q3_k").has_value());
}

// ---- Section 1 and 8.4: 16-bit and 8-bit at 110,592 tokens -------------------------------------

TEST(PlanNote, SixteenBitIs65536BytesPerTokenAnd6p75GB) {
  const CacheGeometry g = sjkv::qwen38_27b_geometry();
  EXPECT_EQ(g.values_per_token(), 32768u);  // 16 layers x (1,024 K + 1,024 V)
  const CacheOption f16 = CacheOption::plain(BlockFormat::f16);
  EXPECT_EQ(sjkv::bytes_per_token(g, f16).numerator, 65536u);
  const uint64_t b = sjkv::cache_bytes(g, f16, kCtx100K).total();
  EXPECT_EQ(b, 6912ull * kMiB);
  EXPECT_DOUBLE_EQ(sjkv::to_gib(b), 6.75);
}

TEST(PlanNote, EightBitIsQ8_0At3p59GB) {
  const CacheGeometry g = sjkv::qwen38_27b_geometry();
  const CacheOption q8 = CacheOption::plain(BlockFormat::q8_0);
  EXPECT_EQ(sjkv::bytes_per_token(g, q8).numerator, 34816u);  // 32,768 values x 34/32
  const uint64_t b = sjkv::cache_bytes(g, q8, kCtx100K).total();
  EXPECT_EQ(b, 3672ull * kMiB);  // 3.5859 GB
  EXPECT_DOUBLE_EQ(gb2(b), 3.59);
  // A flat 8 bits per value would print 3.38: the note's "common 8-bit format" is q8_0.
  EXPECT_DOUBLE_EQ(gb2(g.values_per_token() * kCtx100K), 3.38);
}

// ---- Sections 3, 7.2, 8.4: SJ-KVaRN --------------------------------------------------------

TEST(PlanNote, RecordIsPayloadPlus2304ScaleBytes) {
  // Section 3: 2,304 bytes of fp16 scales per record per KV head, 0.28125 bits per value.
  const sjkv::RecordLayout l44 = sjkv::make_layout(256, 128, 4, 4, Body::scalar);
  EXPECT_EQ(l44.bytes, 32768u + 2304u);
  EXPECT_DOUBLE_EQ(8.0 * 2304 / (128.0 * 2 * 256), 0.28125);
  // Trellis and scalar records have exactly the same size (section 2.3).
  for (uint32_t bk : {2u, 3u})
    for (uint32_t bv = 2; bv <= bk; ++bv)
      EXPECT_EQ(sjkv::make_layout(256, 128, bk, bv, Body::trellis).bytes,
                sjkv::make_layout(256, 128, bk, bv, Body::scalar).bytes);
  const CacheGeometry g = sjkv::qwen38_27b_geometry();
  EXPECT_EQ(sjkv::bytes_per_token(g, rule(4, 4)).value(), 17536.0);  // 35,072 / 128 x 64 heads
  EXPECT_EQ(sjkv::bytes_per_token(g, rule(3, 3)).value(), 13440.0);
  EXPECT_EQ(sjkv::bytes_per_token(g, rule(3, 2)).value(), 11392.0);
  EXPECT_EQ(rule(3, 2).label(), "sjkv 3/2t (note rule)");
  EXPECT_EQ(layout(4, 4).label(), "sjkv 4/4");
}

TEST(PlanNote, FourFourAllocates1p99GBAt110592) {
  const CacheGeometry g = sjkv::qwen38_27b_geometry();
  // body bytes per token x (context - 4,224) + 259 MiB
  const sjkv::CacheBytes c = sjkv::cache_bytes(g, rule(4, 4), kCtx100K);
  EXPECT_EQ(c.body, 17536ull * (kCtx100K - 4224));
  EXPECT_EQ(c.fixed, 259ull * kMiB);
  EXPECT_DOUBLE_EQ(gb2(c.total()), 1.99);
  // The exact layout count agrees at the note's resolution.
  EXPECT_DOUBLE_EQ(gb2(sjkv::cache_bytes(g, layout(4, 4), kCtx100K).total()), 1.99);
}

TEST(PlanNote, ThreeTwoTrellisIs2p38GBAt204800) {
  const CacheGeometry g = sjkv::qwen38_27b_geometry();
  const uint64_t b = sjkv::cache_bytes(g, rule(3, 2), kCtx200K).total();
  EXPECT_EQ(b, 11392ull * (kCtx200K - 4224) + 259ull * kMiB);
  EXPECT_DOUBLE_EQ(gb2(b), 2.38);
  // "against 2.36 GB measured, so the computed SJ-KVaRN rows are slightly conservative"
  EXPECT_GT(sjkv::to_gib(b), 2.36);
}

TEST(PlanNote, Fixed259MiBIsSinkStagedSinkAndRing) {
  // Section 8.4: "a fixed 259 MiB (0.25 GB) for the sink, the staging rows and a ring sized for
  // 8,192 tokens plus margin". The layout gives 259.125 MiB with a 1,024-token ubatch.
  const CacheGeometry g = sjkv::qwen38_27b_geometry();
  const sjkv::CacheBytes c = sjkv::cache_bytes(g, layout(4, 4), kCtx100K);
  EXPECT_EQ(c.sink, 8ull * kMiB);                 // 128 x 4 heads x 2 x 256 x 2 B x 16 layers
  EXPECT_EQ(c.sink_staged, 3211264u);             // 128 x 4 x 2 x 196 B x 16 = 3.0625 MiB
  EXPECT_EQ(c.ring_rows, 10368u);                 // 8,192 + 128 + 2 x 1,024
  EXPECT_EQ(c.ring, 10368ull * 4 * 2 * 196 * 16); // 248.0625 MiB
  const uint64_t fixed = c.sink + c.sink_staged + c.ring;
  EXPECT_EQ(fixed, 259ull * kMiB + kMiB / 8);
  EXPECT_EQ(fixed, sjkv::layout_fixed_bytes(g, layout(4, 4)));
  EXPECT_DOUBLE_EQ(round2(sjkv::to_gib(fixed)), 0.25);
  // With llama.cpp's default ubatch of 512 the ring has 9,344 rows and the fixed part is
  // 234.6 MiB: not the note's figure.
  sjkv::SjkvLayoutOptions o512;
  o512.n_ubatch = 512;
  EXPECT_EQ(sjkv::layout_fixed_bytes(g, layout(4, 4), o512), 8ull * kMiB + 3211264u + 9344ull * 4 * 2 * 196 * 16);
  // The pool holds the records the policy can seal: (N - 4,224) / 128 of them, so at a
  // group-aligned context the layout is the note's rule plus 0.125 MiB.
  EXPECT_EQ(c.n_records, (kCtx100K - 4224) / 128);
  for (uint32_t bk : {4u, 3u, 2u})
    for (uint64_t n : {kCtx100K, kCtx200K})
      EXPECT_EQ(sjkv::cache_bytes(g, layout(bk, bk == 4 ? 4 : 2), n).total(),
                sjkv::cache_bytes(g, rule(bk, bk == 4 ? 4 : 2), n).total() + kMiB / 8);
}

TEST(PlanNote, OversizedRecordPoolOfTheEarlierBuild) {
  // Section 6: the build that produced the KL rows allocated 0.04 to 0.07 GB more "because of
  // an over-sized record pool": a pool for every position past the sink holds `tail` tokens
  // more, 4,096 x body bytes per token.
  const CacheGeometry g = sjkv::qwen38_27b_geometry();
  PlanSettings full;
  full.layout.pool = sjkv::RecordPool::full_context;
  const auto extra = [&](uint32_t bk, uint32_t bv) {
    return sjkv::cache_bytes(g, layout(bk, bv), kCtx100K, full).total() -
           sjkv::cache_bytes(g, layout(bk, bv), kCtx100K).total();
  };
  EXPECT_EQ(extra(4, 4), 4096ull * 17536);
  EXPECT_DOUBLE_EQ(gb2(extra(4, 4)), 0.07);
  EXPECT_EQ(extra(3, 2), 4096ull * 11392);
  EXPECT_DOUBLE_EQ(gb2(extra(3, 2)), 0.04);
}

TEST(PlanNote, TailCosts98MiBPer4096TokensAgainst256MiB) {
  // Section 4.1, computed from the formats.
  const CacheGeometry g = sjkv::qwen38_27b_geometry();
  EXPECT_EQ(sjkv::cache_bytes(g, CacheOption::plain(BlockFormat::tq6_0), 4096).total(), 98ull * kMiB);
  EXPECT_EQ(sjkv::cache_bytes(g, CacheOption::plain(BlockFormat::f16), 4096).total(), 256ull * kMiB);
}

TEST(PlanNote, AllocatedBitsPerValueOfSection6) {
  // Every format charged the KV memory it allocates at 110,592 tokens.
  const CacheGeometry g = sjkv::qwen38_27b_geometry();
  const auto bits = [&](const CacheOption& o) { return round2(sjkv::allocated_bits_per_value(g, o, kCtx100K)); };
  EXPECT_DOUBLE_EQ(bits(rule(4, 4)), 4.72);
  EXPECT_DOUBLE_EQ(bits(rule(3, 3)), 3.76);
  EXPECT_DOUBLE_EQ(bits(rule(3, 2)), 3.27);
  EXPECT_DOUBLE_EQ(bits(layout(4, 4)), 4.72);
  EXPECT_DOUBLE_EQ(bits(layout(3, 3)), 3.76);
  EXPECT_DOUBLE_EQ(bits(layout(3, 2)), 3.27);
  const CacheOption q8q51 = CacheOption::plain(BlockFormat::q8_0, BlockFormat::q5_1);
  EXPECT_EQ(q8q51.label(), "q8_0/q5_1");
  EXPECT_DOUBLE_EQ(sjkv::allocated_bits_per_value(g, q8q51, kCtx100K), 7.25);
  EXPECT_DOUBLE_EQ(gb2(sjkv::cache_bytes(g, q8q51, kCtx100K).total()), 3.06);  // section 6.1
  EXPECT_DOUBLE_EQ(sjkv::allocated_bits_per_value(g, CacheOption::plain(BlockFormat::tq5_0, BlockFormat::turbo4), kCtx100K),
                   4.625);  // printed 4.63
  EXPECT_DOUBLE_EQ(sjkv::allocated_bits_per_value(g, CacheOption::plain(BlockFormat::turbo4), kCtx100K), 4.125);
  // "4/4 uses about the same memory as tq5_0/turbo4" (8.4); "2% more memory" (6).
  const double ratio = sjkv::allocated_bits_per_value(g, rule(4, 4), kCtx100K) / 4.625;
  EXPECT_NEAR(ratio, 1.02, 0.005);
  // "SJ-KVaRN 4/4 gets within 0.00034 nats ... in 65% of its memory" (6.1).
  EXPECT_DOUBLE_EQ(round2(sjkv::to_gib(sjkv::cache_bytes(g, rule(4, 4), kCtx100K).total()) /
                          sjkv::to_gib(sjkv::cache_bytes(g, q8q51, kCtx100K).total())),
                   0.65);
}

TEST(PlanNote, AllocatedBitsAt204800OfSection7p2) {
  // "the allocated figure at 204,800 tokens is about 4.52 (4/4), 3.54 (3/3t) and 3.02 (3/2t,
  // measured)". The rule reproduces the first two; 3.02 is the measured 2.36 GB, which the
  // rule overstates by 0.02 GB (3.05 bits).
  const CacheGeometry g = sjkv::qwen38_27b_geometry();
  EXPECT_DOUBLE_EQ(round2(sjkv::allocated_bits_per_value(g, rule(4, 4), kCtx200K)), 4.52);
  EXPECT_DOUBLE_EQ(round2(sjkv::allocated_bits_per_value(g, rule(3, 3), kCtx200K)), 3.54);
  EXPECT_DOUBLE_EQ(round2(8.0 * sjkv::gib(2.36) / (g.values_per_token() * kCtx200K)), 3.02);
  EXPECT_DOUBLE_EQ(round2(sjkv::allocated_bits_per_value(g, rule(3, 2), kCtx200K)), 3.05);
}

// ---- Section 7.2: the largest context in 11 GB ------------------------------------------------

TEST(PlanNote, LargestContextIn11GB) {
  // 7.77 GB for everything but the cache and the mask, 1 KiB of mask per token, budget 11 GiB
  // (11,264 MiB); SJ-KVaRN rows by the note's rule. "K = 1,000 tokens, rounded down."
  const CacheGeometry g = sjkv::qwen38_27b_geometry();
  PlanSettings s;
  s.overheads = sjkv::note_12gb_overheads();
  const auto fit = [&](const CacheOption& o) { return sjkv::max_context(g, o, sjkv::kNote12GbBudget, s); };
  struct Row {
    CacheOption opt;
    uint64_t k;      // the note's figure
    uint64_t exact;  // the planner's context
  };
  const Row rows[] = {
      {rule(3, 2), 261, 261334},                           // "about 261K tokens"
      {CacheOption::plain(BlockFormat::turbo3), 250, 250881},  // "turbo3 / turbo3 comes next at about 250K"
      {CacheOption::plain(BlockFormat::q8_0), 96, 96768},  // "An 8-bit cache stops at about 96K"
      {rule(3, 3), 224, 224929},                           // "SJ-KVaRN 3/3t reaches about 224K"
      {CacheOption::plain(BlockFormat::turbo4), 193, 193537},  // "turbo4 / turbo4, which reaches about 193K"
  };
  for (const Row& r : rows) {
    const sjkv::Fit f = fit(r.opt);
    ASSERT_TRUE(f.fits) << r.opt.label();
    EXPECT_FALSE(f.capped);
    EXPECT_EQ(f.n_ctx / 1000, r.k) << r.opt.label();
    EXPECT_EQ(f.n_ctx, r.exact) << r.opt.label();
    EXPECT_LE(sjkv::total_bytes(g, r.opt, f.n_ctx, s), sjkv::kNote12GbBudget);
    EXPECT_GT(sjkv::total_bytes(g, r.opt, f.n_ctx + 1, s), sjkv::kNote12GbBudget);
  }
  // The ordering the note reads off the table.
  EXPECT_GT(fit(rule(3, 2)).n_ctx, fit(CacheOption::plain(BlockFormat::turbo3)).n_ctx);
  // 7.77 GB is itself rounded to 0.01 GB (+-5.12 MiB), which moves a row by at most 5.12 MiB /
  // (bytes per token + 1 KiB): under 500 tokens for 3/2t, so the K figures are stable to
  // about half a K; at 7.77 exactly every row lands on the note's K.
  PlanSettings lo = s, hi = s;
  lo.overheads.fixed_bytes = sjkv::gib(7.765);
  hi.overheads.fixed_bytes = sjkv::gib(7.775);
  const uint64_t n_lo = sjkv::max_context(g, rule(3, 2), sjkv::kNote12GbBudget, hi).n_ctx;
  const uint64_t n_hi = sjkv::max_context(g, rule(3, 2), sjkv::kNote12GbBudget, lo).n_ctx;
  EXPECT_LT(n_hi - n_lo, 1000u);
}

TEST(PlanNote, ThreeThreeMarginsAt204800) {
  // "Its computed margin is about 0.27 GB under 11 GB but only about 0.01 GB under 11,000 MiB".
  const CacheGeometry g = sjkv::qwen38_27b_geometry();
  PlanSettings s;
  s.overheads = sjkv::note_12gb_overheads();
  const uint64_t t = sjkv::total_bytes(g, rule(3, 3), kCtx200K, s);
  EXPECT_DOUBLE_EQ(gb2(sjkv::kNote12GbBudget - t), 0.27);
  EXPECT_DOUBLE_EQ(gb2(11000ull * kMiB - t), 0.01);
  // And it includes the 200 MiB mask: 1 KiB x 204,800.
  EXPECT_EQ(t, sjkv::cache_bytes(g, rule(3, 3), kCtx200K).total() + 200ull * kMiB + sjkv::gib(7.77));
}

// ---- Planner contracts -----------------------------------------------------------------------

TEST(Plan, CacheAloneByDefault) {
  const CacheGeometry g = sjkv::qwen38_27b_geometry();
  for (const CacheOption& o : sjkv::standard_options())
    EXPECT_EQ(sjkv::total_bytes(g, o, 1000), sjkv::cache_bytes(g, o, 1000).total()) << o.label();
}

TEST(Plan, StandardOptionsApplyToQwen) {
  const CacheGeometry g = sjkv::qwen38_27b_geometry();
  const auto opts = sjkv::standard_options();
  EXPECT_EQ(opts.size(), 14u);
  for (const CacheOption& o : opts) EXPECT_EQ(sjkv::check(g, o), "") << o.label();
}

TEST(Plan, Applicability) {
  // turbo3 blocks are 128 values: head_dim 64 is not a whole block.
  const CacheGeometry g64 = CacheGeometry::uniform(2, 8, 64);
  const CacheOption t3 = CacheOption::plain(BlockFormat::turbo3);
  EXPECT_NE(sjkv::check(g64, t3).find("not a multiple of the turbo3 block"), std::string::npos);
  EXPECT_THROW(sjkv::cache_bytes(g64, t3, 100), std::invalid_argument);
  EXPECT_THROW(sjkv::max_context(g64, t3, kGiB), std::invalid_argument);
  EXPECT_EQ(sjkv::check(g64, CacheOption::plain(BlockFormat::q8_0)), "");
  // sjkv with tq6_0 staging needs head_dim a multiple of 128; q8_0 staging allows 64.
  EXPECT_NE(sjkv::check(g64, layout(4, 4)), "");
  sjkv::CodecConfig c;
  c.staging = sjkv::StagingType::q8_0;
  EXPECT_EQ(sjkv::check(g64, CacheOption::sjkv(c)), "");
  // head_dim not a power of two, K/V dims that differ, an empty geometry.
  EXPECT_NE(sjkv::check(CacheGeometry::uniform(1, 1, 96), CacheOption::sjkv(c)), "");
  CacheGeometry kv;
  kv.layers.push_back({4, 192, 128});
  EXPECT_NE(sjkv::check(kv, layout(4, 4)).find("equal K and V head_dim"), std::string::npos);
  EXPECT_EQ(sjkv::check(kv, CacheOption::plain(BlockFormat::q8_0)), "");
  EXPECT_EQ(sjkv::cache_bytes(kv, CacheOption::plain(BlockFormat::q8_0), 10).total(), 10ull * 4 * (204 + 136));
  EXPECT_NE(sjkv::check(CacheGeometry{}, layout(4, 4)), "");
  // Trellis is planned (the record size is the scalar one) even where this build cannot seal it.
  EXPECT_EQ(sjkv::check(sjkv::qwen38_27b_geometry(), layout(2, 2)), "");
  EXPECT_EQ(sjkv::check(sjkv::qwen38_27b_geometry(), CacheOption::sjkv(4, 3, Body::trellis)), "");  // sjkv's 4/3t
  EXPECT_NE(sjkv::check(sjkv::qwen38_27b_geometry(), CacheOption::sjkv(3, 4, Body::trellis)), "");
}

TEST(Plan, LayoutCounts) {
  const CacheGeometry g = CacheGeometry::uniform(1, 1, 128);
  sjkv::CodecConfig c;  // sink 128, tail 4,096/8,192, G 128
  c.head_dim = 128;
  const CacheOption o = CacheOption::sjkv(c);
  const uint32_t rec = sjkv::make_layout(128, 128, 4, 4, Body::scalar).bytes;
  // No record below sink + tail; one per whole group past it.
  EXPECT_EQ(sjkv::cache_bytes(g, o, 4224).n_records, 0u);
  EXPECT_EQ(sjkv::cache_bytes(g, o, 4224 + 127).n_records, 0u);
  EXPECT_EQ(sjkv::cache_bytes(g, o, 4224 + 128).n_records, 1u);
  EXPECT_EQ(sjkv::cache_bytes(g, o, 4224 + 128).body, rec);
  // Short contexts still pay the sink and the full ring.
  const sjkv::CacheBytes empty = sjkv::cache_bytes(g, o, 0);
  EXPECT_EQ(empty.body, 0u);
  EXPECT_EQ(empty.sink, 128u * 2 * 128 * 2);
  EXPECT_EQ(empty.sink_staged, 128u * 2 * 98);
  EXPECT_EQ(empty.ring, 10368u * 2 * 98);
  // Without the staged copy, and with an inherited (staged-only) sink.
  PlanSettings nocopy;
  nocopy.layout.staged_sink_copy = false;
  EXPECT_EQ(sjkv::cache_bytes(g, o, 0, nocopy).sink_staged, 0u);
  sjkv::CodecConfig inh = c;
  inh.sink_type = sjkv::SinkType::inherit;
  const sjkv::CacheBytes ib = sjkv::cache_bytes(g, CacheOption::sjkv(inh), 0);
  EXPECT_EQ(ib.sink, 128u * 2 * 98);
  EXPECT_EQ(ib.sink_staged, 0u);
  // KVarN-faithful: fixed tail 0, f16 staging, every whole group past the sink is a record.
  const CacheOption kv = CacheOption::sjkv(sjkv::kvarn_config(128, 4, 4));
  EXPECT_EQ(sjkv::cache_bytes(g, kv, 128 + 1000).n_records, 7u);
  EXPECT_EQ(sjkv::cache_bytes(g, kv, 0).ring_rows, sjkv::ring_capacity(0, 0, 128, 1024));
  // The note rule's fixed part can be replaced for another geometry.
  PlanSettings r;
  r.rule.fixed_bytes = sjkv::layout_fixed_bytes(g, o);
  const CacheOption ro = CacheOption::sjkv(c, SjkvAccounting::note_rule);
  EXPECT_EQ(sjkv::cache_bytes(g, ro, 4224 + 128, r).total(), sjkv::cache_bytes(g, o, 4224 + 128).total());
}

TEST(Plan, LayersAddUp) {
  // A non-uniform geometry is the sum of its layers.
  CacheGeometry mixed;
  mixed.layers.push_back({4, 256, 256});
  mixed.layers.push_back({2, 128, 128});
  const CacheGeometry a = CacheGeometry::uniform(1, 4, 256), b = CacheGeometry::uniform(1, 2, 128);
  for (const CacheOption& o : {layout(4, 4), rule(3, 2), CacheOption::plain(BlockFormat::q4_0)}) {
    PlanSettings s;
    s.rule.fixed_bytes = 0;
    for (uint64_t n : {0ull, 5000ull, 123457ull})
      EXPECT_EQ(sjkv::cache_bytes(mixed, o, n, s).total(),
                sjkv::cache_bytes(a, o, n, s).total() + sjkv::cache_bytes(b, o, n, s).total())
          << o.label() << " n=" << n;
  }
}

TEST(Plan, MaxContextEdges) {
  const CacheGeometry g = sjkv::qwen38_27b_geometry();
  const CacheOption f16 = CacheOption::plain(BlockFormat::f16);
  // Nothing fits: the budget is below one token.
  sjkv::Fit f = sjkv::max_context(g, f16, 65535);
  EXPECT_FALSE(f.fits);
  EXPECT_EQ(f.n_ctx, 0u);
  f = sjkv::max_context(g, f16, 65536);
  EXPECT_TRUE(f.fits);
  EXPECT_EQ(f.n_ctx, 1u);
  // Exactly on a boundary, and one byte short of it.
  EXPECT_EQ(sjkv::max_context(g, f16, 65536ull * 1000).n_ctx, 1000u);
  EXPECT_EQ(sjkv::max_context(g, f16, 65536ull * 1000 - 1).n_ctx, 999u);
  // sjkv pays its fixed part first.
  EXPECT_FALSE(sjkv::max_context(g, layout(4, 4), 259ull * kMiB).fits);
  // An unbounded budget stops at the codec's 32-bit positions.
  f = sjkv::max_context(g, f16, UINT64_MAX);
  EXPECT_TRUE(f.capped);
  EXPECT_EQ(f.n_ctx, sjkv::kMaxPlanContext);
  // Fixed overheads alone can exhaust the budget.
  PlanSettings s;
  s.overheads.fixed_bytes = kGiB;
  EXPECT_FALSE(sjkv::max_context(g, f16, kGiB, s).fits);
  // Against a linear scan on a small case, layout accounting (steps at whole records).
  const CacheGeometry tiny = CacheGeometry::uniform(1, 1, 128);
  const CacheOption o = layout(3, 2);
  for (uint64_t budget : {400000ull, 500000ull, 777777ull, 1000000ull}) {
    uint64_t best = 0;
    for (uint64_t n = 0; n < 20000; ++n)
      if (sjkv::total_bytes(tiny, o, n) <= budget) best = n;
    const sjkv::Fit ff = sjkv::max_context(tiny, o, budget);
    if (best == 0) {
      EXPECT_FALSE(ff.fits);
    } else {
      EXPECT_EQ(ff.n_ctx, best) << budget;
    }
  }
}

TEST(Plan, Saturates) {
  const CacheGeometry big = CacheGeometry::uniform(1u << 20, 1u << 10, 1u << 16);
  EXPECT_EQ(sjkv::cache_bytes(big, CacheOption::plain(BlockFormat::f32), sjkv::kMaxPlanContext).total(), UINT64_MAX);
}

}  // namespace

// plan --ubatch 2147479488 printed 0.691 bits per value (the ring's 32-bit size wrapped);
// a ubatch outside [1, 2^20] is refused instead.
TEST(PlanLayout, UbatchOutsideTheRingLimitsIsRefused) {
  const sjkv::CacheGeometry g = sjkv::qwen38_27b_geometry();
  const sjkv::CacheOption opt = sjkv::CacheOption::sjkv(4, 4);
  sjkv::PlanSettings ps;
  for (uint32_t ub : {0u, 2147479488u, 2147483648u, sjkv::kMaxUbatch + 1}) {
    ps.layout.n_ubatch = ub;
    EXPECT_THROW((void)sjkv::cache_bytes(g, opt, 16384, ps), std::invalid_argument) << ub;
  }
  ps.layout.n_ubatch = sjkv::kMaxUbatch;
  EXPECT_GT(sjkv::allocated_bits_per_value(g, opt, 16384, ps), 16.0);  // a ring of 2^21 rows dominates
}
