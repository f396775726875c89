// Staging rows (docs/SPEC.md §4, §13.1-13.2, Appendix A): tq6_0 golden hashes and check
// values, a from-the-spec reference encoder, code selection, error bounds, the q8_0
// extension, f16 staging, the encode_row status flag and the seal input rounding.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "sjkv/config.h"
#include "sjkv/hadamard.h"
#include "sjkv/hash.h"
#include "sjkv/staging.h"
#include "sjkv/testgen.h"

namespace {

using sjkv::f16_to_f32;
using sjkv::f32_bits;
using sjkv::f32_from_bits;
using sjkv::f32_to_f16;
using sjkv::StagingType;

constexpr uint32_t kRows = 64;
constexpr uint32_t kN = 256;

// FNV over binary32 values as little-endian bytes (§10.4), independent of host order.
uint64_t fnv_floats(const float* x, size_t n) {
  uint64_t h = sjkv::kFnvBasis;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t u = f32_bits(x[i]);
    const uint8_t b[4] = {static_cast<uint8_t>(u), static_cast<uint8_t>(u >> 8), static_cast<uint8_t>(u >> 16),
                          static_cast<uint8_t>(u >> 24)};
    h = sjkv::fnv1a(b, 4, h);
  }
  return h;
}

double l2(const float* x, size_t n) {
  double s = 0.0;
  for (size_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return std::sqrt(s);
}

double rel_rms_error(const float* x, const float* y, size_t n) {
  double e = 0.0, s = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(x[i]) - y[i];
    e += d * d;
    s += static_cast<double>(x[i]) * x[i];
  }
  return std::sqrt(e / s);
}

uint16_t block_norm_bits(const uint8_t* blk) { return static_cast<uint16_t>(blk[0] | (blk[1] << 8)); }

// Code of value i read straight from the §3.1 byte table (not via tq6_block_code).
uint32_t spec_code(const uint8_t* blk, uint32_t i) {
  const uint32_t lo = (blk[2 + i / 2] >> (4 * (i % 2))) & 0xfu;
  const uint32_t hi = (blk[66 + i / 4] >> (2 * (i % 4))) & 0x3u;
  return lo | (hi << 4);
}

std::vector<float> fill_rows_64x256() {
  std::vector<float> x(static_cast<size_t>(kRows) * kN);
  sjkv::fill_rows(kRows, kN, x.data());
  return x;
}

// Gaussian-ish rows: sum of four uniforms (XorShift64::gauss), scaled per block over a
// few binades so the norm path is exercised at different magnitudes.
std::vector<float> gauss_rows(uint32_t rows, uint32_t n, uint64_t seed) {
  sjkv::XorShift64 rng(seed);
  std::vector<float> x(static_cast<size_t>(rows) * n);
  for (uint32_t r = 0; r < rows; ++r) {
    const float sc = std::ldexp(1.0f, static_cast<int>(rng.next() % 9u) - 13);
    for (uint32_t i = 0; i < n; ++i) x[static_cast<size_t>(r) * n + i] = static_cast<float>(rng.gauss()) * sc;
  }
  return x;
}

// ---- §10.3 / §10.4 golden line and Appendix A ------------------------------------------

// One parser for staging names, the inverse of staging_name; the tools and the arm grammar use it.
TEST(StagingNames, ParseIsTheInverseOfTheName) {
  const std::vector<std::string> names = sjkv::staging_names();
  ASSERT_EQ(names, (std::vector<std::string>{"tq6_0", "q8_0", "f16"}));
  for (const std::string& n : names) {
    sjkv::StagingType t = sjkv::StagingType::tq6_0;
    ASSERT_TRUE(sjkv::parse_staging(n, &t)) << n;
    EXPECT_EQ(sjkv::staging_name(t), n);
  }
  sjkv::StagingType t = sjkv::StagingType::f16;
  for (const char* bad : {"", "TQ6_0", "q8", "f32", "tq6_0 "}) EXPECT_FALSE(sjkv::parse_staging(bad, &t)) << bad;
  EXPECT_EQ(t, sjkv::StagingType::f16);  // untouched on failure
}

TEST(StagingTq6, GoldenVectorHashes) {
  const std::vector<float> x = fill_rows_64x256();
  const uint32_t row_bytes = sjkv::staging_row_bytes(StagingType::tq6_0, kN);
  ASSERT_EQ(row_bytes, 2u * 98u);
  std::vector<uint8_t> enc(static_cast<size_t>(kRows) * row_bytes);
  std::vector<float> dec(x.size());
  for (uint32_t r = 0; r < kRows; ++r) {
    EXPECT_TRUE(sjkv::staging_encode_row(StagingType::tq6_0, &x[r * kN], kN, &enc[r * row_bytes])) << r;
    sjkv::staging_decode_row(StagingType::tq6_0, &enc[r * row_bytes], kN, &dec[r * kN]);
  }
  ASSERT_EQ(enc.size(), 12544u);
  EXPECT_EQ(sjkv::fnv1a(enc.data(), enc.size()), 0xe2cf2c357ef8de90ull);
  EXPECT_EQ(fnv_floats(dec.data(), dec.size()), 0xde4f0c87393006e6ull);
  EXPECT_GT(l2(dec.data(), dec.size()), 1.0);
}

TEST(StagingTq6, FnvBasisIsTheFormatsOwn) {
  // §13 item 1: the basis is 1469598103934665603 (not the standard ...037).
  EXPECT_EQ(sjkv::kFnvBasis, 1469598103934665603ull);
  EXPECT_EQ(sjkv::fnv1a(nullptr, 0), 1469598103934665603ull);
  const uint8_t a = 'a';
  EXPECT_EQ(sjkv::fnv1a(&a, 1), (1469598103934665603ull ^ 0x61ull) * 0x100000001b3ull);
}

TEST(StagingTq6, AppendixACheckValues) {
  sjkv::XorShift64 rng(0xD1B54A32D192ED03ull);
  const uint32_t want_draws[5] = {2393613085u, 2378330431u, 2053753221u, 4137761087u, 3461446778u};
  for (uint32_t w : want_draws) EXPECT_EQ(rng.next(), w);

  const std::vector<float> x = fill_rows_64x256();
  // Row 0 has tf = 6; values are exact multiples of 2^-12.
  EXPECT_EQ(x[0], -5394.0f / 4096.0f);  // -1.31689453
  EXPECT_EQ(x[1], -288.0f / 4096.0f);   // -0.0703125
  EXPECT_EQ(x[2], -4584.0f / 4096.0f);  // -1.11914062
  EXPECT_EQ(x[3], -708.0f / 4096.0f);   // -0.172851562

  uint8_t blk[98];
  ASSERT_TRUE(sjkv::tq6_encode_block(x.data(), blk));
  const uint8_t want_head[18] = {0x27, 0x49, 0xec, 0xdf, 0xed, 0x88, 0x66, 0x06, 0x75,
                                 0x93, 0x25, 0xc6, 0x57, 0x04, 0x4f, 0x8f, 0x3a, 0x20};
  for (int i = 0; i < 18; ++i) EXPECT_EQ(blk[i], want_head[i]) << "byte " << i;
  EXPECT_EQ(block_norm_bits(blk), 0x4927);
  const uint8_t want_qh[8] = {0x44, 0x49, 0xa6, 0xd3, 0x1a, 0xbe, 0x68, 0xe9};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(blk[66 + i], want_qh[i]) << "qh " << i;
}

TEST(StagingTq6, ZeroRowOfGoldenInput) {
  // Row 63 of fill_rows is zeros: both blocks store codes 32, norm 0, decode to +0.0.
  const std::vector<float> x = fill_rows_64x256();
  uint8_t row[196];
  std::memset(row, 0xAB, sizeof row);  // stale bytes must be overwritten
  ASSERT_TRUE(sjkv::staging_encode_row(StagingType::tq6_0, &x[63 * kN], kN, row));
  for (uint32_t b = 0; b < 2; ++b) {
    const uint8_t* blk = row + b * 98;
    EXPECT_EQ(block_norm_bits(blk), 0x0000);
    for (uint32_t i = 0; i < 128; ++i) ASSERT_EQ(spec_code(blk, i), 32u) << i;
  }
  float out[kN];
  sjkv::staging_decode_row(StagingType::tq6_0, row, kN, out);
  for (float v : out) ASSERT_EQ(f32_bits(v), 0u);
}

TEST(StagingTq6, ZeroAndTinyBlocks) {
  float zero[128] = {};
  uint8_t blk[98];
  std::memset(blk, 0xFF, sizeof blk);
  ASSERT_TRUE(sjkv::tq6_encode_block(zero, blk));
  EXPECT_EQ(block_norm_bits(blk), 0x0000);
  for (uint32_t i = 0; i < 64; ++i) EXPECT_EQ(blk[2 + i], 0x00) << "qs " << i;  // nibble 0 of code 32
  for (uint32_t i = 0; i < 32; ++i) EXPECT_EQ(blk[66 + i], 0xAA) << "qh " << i;  // 2 in every field
  float out[128];
  sjkv::tq6_decode_block(blk, out);
  for (float v : out) ASSERT_EQ(f32_bits(v), 0u);

  // Negative zeros behave the same (the norm is +0).
  float nz[128];
  for (float& v : nz) v = -0.0f;
  ASSERT_TRUE(sjkv::tq6_encode_block(nz, blk));
  EXPECT_EQ(block_norm_bits(blk), 0x0000);
  for (uint32_t i = 0; i < 128; ++i) ASSERT_EQ(spec_code(blk, i), 32u);

  // norm <= 1e-10 takes the dead branch: all codes 32 even though x is not zero.
  float tiny[128];
  for (uint32_t i = 0; i < 128; ++i) tiny[i] = (i & 1) ? 1e-13f : -1e-13f;
  ASSERT_TRUE(sjkv::tq6_encode_block(tiny, blk));
  for (uint32_t i = 0; i < 128; ++i) ASSERT_EQ(spec_code(blk, i), 32u);
}

// ---- tables and code selection -----------------------------------------------------------

TEST(StagingTq6, TablesMatchSpec) {
  // Spot values from tq6_*_bits.csv; the golden hashes cover every entry.
  EXPECT_EQ(f32_bits(sjkv::tq6_centroid(0)), 0xbea97050u);
  EXPECT_EQ(f32_bits(sjkv::tq6_centroid(32)), 0x3b41871eu);
  EXPECT_EQ(f32_bits(sjkv::tq6_centroid(63)), 0x3ea97050u);
  EXPECT_EQ(f32_bits(sjkv::tq6_midpoint(0)), 0xbe9e0ac8u);
  EXPECT_EQ(f32_bits(sjkv::tq6_midpoint(31)), 0x00000000u);
  EXPECT_EQ(f32_bits(sjkv::tq6_midpoint(62)), 0x3e9e0ac8u);
  // Each entry is the float nearest its decimal literal.
  EXPECT_EQ(sjkv::tq6_centroid(0), -0.330935f);
  EXPECT_EQ(sjkv::tq6_midpoint(0), -0.308676f);

  // Strictly interleaved: C[k] < T[k] < C[k+1].
  for (uint32_t k = 0; k < 63; ++k) {
    EXPECT_LT(sjkv::tq6_centroid(k), sjkv::tq6_midpoint(k)) << k;
    EXPECT_LT(sjkv::tq6_midpoint(k), sjkv::tq6_centroid(k + 1)) << k;
  }
  // §3.1: 36 of the 63 midpoints are not the float mean of their neighbours.
  uint32_t differ = 0;
  for (uint32_t k = 0; k < 63; ++k) {
    const float mean = (sjkv::tq6_centroid(k) + sjkv::tq6_centroid(k + 1)) * 0.5f;
    differ += mean != sjkv::tq6_midpoint(k);
  }
  EXPECT_EQ(differ, 36u);
}

TEST(StagingTq6, CodeOnMidpointTakesUpperCode) {
  for (uint32_t m = 0; m < 63; ++m) {
    const float t = sjkv::tq6_midpoint(m);
    EXPECT_EQ(sjkv::tq6_code(t), m + 1) << m;
    EXPECT_EQ(sjkv::tq6_code(std::nextafter(t, -INFINITY)), m) << m;
    EXPECT_EQ(sjkv::tq6_code(std::nextafter(t, INFINITY)), m + 1) << m;
  }
}

TEST(StagingTq6, CodeSpecialValues) {
  EXPECT_EQ(sjkv::tq6_code(0.0f), 32u);
  EXPECT_EQ(sjkv::tq6_code(-0.0f), 32u);  // -0 < +0 is false
  EXPECT_EQ(sjkv::tq6_code(NAN), 63u);
  EXPECT_EQ(sjkv::tq6_code(-NAN), 63u);
  EXPECT_EQ(sjkv::tq6_code(-INFINITY), 0u);
  EXPECT_EQ(sjkv::tq6_code(INFINITY), 63u);
  EXPECT_EQ(sjkv::tq6_code(-1.0f), 0u);
  EXPECT_EQ(sjkv::tq6_code(1.0f), 63u);
  EXPECT_EQ(sjkv::tq6_code(-1e-30f), 31u);
  EXPECT_EQ(sjkv::tq6_code(1e-30f), 32u);
}

TEST(StagingTq6, CodeIsMonotoneAndCountsMidpoints) {
  // Sweep [-0.4, 0.4] in steps of 2^-16; compare with a linear count of T[m] <= v.
  uint32_t prev = 0;
  uint32_t checked = 0;
  for (float v = -0.4f; v <= 0.4f; v += 1.0f / 65536.0f) {
    const uint32_t c = sjkv::tq6_code(v);
    uint32_t count = 0;
    for (uint32_t m = 0; m < 63; ++m) count += sjkv::tq6_midpoint(m) <= v;
    ASSERT_EQ(c, count) << v;
    ASSERT_GE(c, prev) << v;
    prev = c;
    ++checked;
  }
  EXPECT_EQ(prev, 63u);
  EXPECT_GT(checked, 50000u);
}

// ---- reference encoder written from §3.1 ------------------------------------------------

void reference_tq6_encode(const float* x, uint8_t* out) {
  float norm_sq = 0.0f;
  for (uint32_t i = 0; i < 128; ++i) norm_sq = norm_sq + x[i] * x[i];
  const float norm = std::sqrt(norm_sq);
  const float thr = 1e-10f;
  uint32_t code[128];
  float rn_sq = 0.0f;
  for (uint32_t i = 0; i < 128; ++i) {
    const float v = norm > thr ? x[i] * (1.0f / norm) : 0.0f;
    uint32_t c = 0;
    for (uint32_t m = 0; m < 63; ++m) c += sjkv::tq6_midpoint(m) <= v;
    code[i] = c;
    const float cc = sjkv::tq6_centroid(c);
    rn_sq = rn_sq + cc * cc;
  }
  const float rn = std::sqrt(rn_sq);
  const uint16_t h = f32_to_f16(rn > thr ? norm / rn : norm);
  std::memset(out, 0, 98);
  out[0] = static_cast<uint8_t>(h);
  out[1] = static_cast<uint8_t>(h >> 8);
  for (uint32_t i = 0; i < 128; ++i) {
    out[2 + i / 2] |= static_cast<uint8_t>((code[i] & 15u) << (4 * (i % 2)));
    out[66 + i / 4] |= static_cast<uint8_t>((code[i] >> 4) << (2 * (i % 4)));
  }
}

TEST(StagingTq6, MatchesReferenceEncoderAndDecoder) {
  std::vector<float> x = gauss_rows(64, 128, 0x7E57ull);
  // Add rotated outlier rows, as the engine feeds after the Hadamard.
  std::vector<float> o = gauss_rows(16, 128, 0x0077ull);
  for (uint32_t r = 0; r < 16; ++r) {
    o[r * 128 + (r * 7) % 128] *= 40.0f;
    sjkv::hadamard_inplace(&o[r * 128], 128);
  }
  x.insert(x.end(), o.begin(), o.end());
  const size_t nblk = x.size() / 128;
  for (size_t b = 0; b < nblk; ++b) {
    uint8_t got[98], want[98];
    ASSERT_TRUE(sjkv::tq6_encode_block(&x[b * 128], got));
    reference_tq6_encode(&x[b * 128], want);
    ASSERT_EQ(std::memcmp(got, want, 98), 0) << "block " << b;
    float dec[128];
    sjkv::tq6_decode_block(got, dec);
    const float n = f16_to_f32(block_norm_bits(want));
    ASSERT_GT(n, 0.0f);
    for (uint32_t i = 0; i < 128; ++i) {
      ASSERT_EQ(f32_bits(dec[i]), f32_bits(sjkv::tq6_centroid(spec_code(want, i)) * n)) << b << "," << i;
      ASSERT_EQ(sjkv::tq6_block_code(got, i), spec_code(want, i));
    }
  }
}

// ---- round-trip quality -----------------------------------------------------------------

TEST(StagingTq6, RoundTripErrorAndNorm) {
  // 6-bit Lloyd-Max on a Gaussian has MSE ~ 6.6e-4 sigma^2 (Panter-Dite 2.72 * 4^-6), i.e.
  // ~2.6% relative RMS; gauss() (sum of 4 uniforms) has lighter tails. Measured over these
  // 2048 blocks: mean 2.4%, worst block 3.0%. Bounds leave a little room, no more.
  const uint32_t blocks = 2048;
  const std::vector<float> x = gauss_rows(blocks, 128, 0x5EEDull);
  std::vector<float> y(x.size());
  double sum_sq_rel = 0.0, worst = 0.0, worst_norm_dev = 0.0;
  for (uint32_t b = 0; b < blocks; ++b) {
    uint8_t blk[98];
    ASSERT_TRUE(sjkv::tq6_encode_block(&x[b * 128], blk));
    sjkv::tq6_decode_block(blk, &y[b * 128]);
    const double nx = l2(&x[b * 128], 128);
    ASSERT_GT(nx, 0.0);
    const double rel = rel_rms_error(&x[b * 128], &y[b * 128], 128);
    sum_sq_rel += rel * rel;
    worst = std::fmax(worst, rel);
    // The stored factor is ||x||/||C||; only its fp16 rounding (<= 2^-11 relative) and
    // float rounding (~1e-7) separate the decoded norm from the input norm.
    const double dev = std::fabs(l2(&y[b * 128], 128) / nx - 1.0);
    worst_norm_dev = std::fmax(worst_norm_dev, dev);
    ASSERT_LE(dev, std::ldexp(1.0, -11) + 1e-6) << "block " << b;
  }
  const double mean_rel = std::sqrt(sum_sq_rel / blocks);
  EXPECT_LT(mean_rel, 0.027);
  EXPECT_GT(mean_rel, 0.015);  // far lower would mean the test data degenerated
  EXPECT_LT(worst, 0.035);
  EXPECT_GT(worst_norm_dev, 0.0);
}

TEST(StagingTq6, RowWithMultipleBlocks) {
  // D = 512: four independent blocks; block b only depends on values 128b..128b+127.
  const uint32_t D = 512;
  std::vector<float> x = gauss_rows(1, D, 0xD512ull);
  const uint32_t rb = sjkv::staging_row_bytes(StagingType::tq6_0, D);
  ASSERT_EQ(rb, 4u * 98u);
  std::vector<uint8_t> row(rb);
  ASSERT_TRUE(sjkv::staging_encode_row(StagingType::tq6_0, x.data(), D, row.data()));
  for (uint32_t b = 0; b < 4; ++b) {
    uint8_t blk[98];
    sjkv::tq6_encode_block(&x[b * 128], blk);
    EXPECT_EQ(std::memcmp(blk, &row[b * 98], 98), 0) << b;
  }
  std::vector<float> y(D);
  sjkv::staging_decode_row(StagingType::tq6_0, row.data(), D, y.data());
  EXPECT_LT(rel_rms_error(x.data(), y.data(), D), 0.035);
}

// tq6_decode_block (four codes per step) against the per-value decode of §4.2 (code i via
// tq6_block_code, fmul(C[code], F(norm))), bit for bit. Moved from the replay arm tests, whose
// tq6_0 rows are now the codec's.
TEST(StagingTq6, DecodeBlockEqualsPerValueDecode) {
  std::vector<float> x(256 * 16), a(x.size()), b(x.size());
  sjkv::fill_rows(16, 256, x.data());
  std::vector<uint8_t> blk(98);
  for (size_t o = 0; o < x.size(); o += 128) {
    ASSERT_TRUE(sjkv::tq6_encode_block(&x[o], blk.data()));
    const float n = f16_to_f32(block_norm_bits(blk.data()));
    for (uint32_t i = 0; i < 128; ++i) a[o + i] = sjkv::tq6_centroid(sjkv::tq6_block_code(blk.data(), i)) * n;
    sjkv::tq6_decode_block(blk.data(), &b[o]);
  }
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
  EXPECT_GT(l2(b.data(), b.size()), 0.0);
}

// ---- q8_0 (sjkv extension) --------------------------------------------------------------

TEST(StagingQ8, HandBuiltBlockUnitScale) {
  // amax 127 -> d = 1 exactly (fp16 0x3c00), id = 1, so q = roundf(x): ties go away from zero.
  float x[32] = {};
  const float vals[] = {127.0f, -127.0f, 0.5f, -0.5f, 1.5f, 2.5f, -2.5f, 3.49f, -3.51f, 0.49f, 100.0f, -0.0f};
  for (size_t i = 0; i < sizeof vals / sizeof vals[0]; ++i) x[i] = vals[i];
  uint8_t blk[34];
  std::memset(blk, 0xCD, sizeof blk);
  ASSERT_TRUE(sjkv::q8_encode_block(x, blk));
  const uint8_t want[34] = {0x00, 0x3c,                                       // d = 1.0
                            0x7f, 0x81, 0x01, 0xff, 0x02, 0x03, 0xfd, 0x03,  // 127 -127 1 -1 2 3 -3 3
                            0xfc, 0x00, 0x64, 0x00};                         // -4 0 100 0, rest 0
  for (int i = 0; i < 34; ++i) EXPECT_EQ(blk[i], want[i]) << "byte " << i;
  float y[32];
  sjkv::q8_decode_block(blk, y);
  EXPECT_EQ(y[0], 127.0f);
  EXPECT_EQ(y[1], -127.0f);
  EXPECT_EQ(y[5], 3.0f);
  EXPECT_EQ(y[8], -4.0f);
}

TEST(StagingQ8, HandBuiltBlockHalfScale) {
  // amax 63.5 -> d = 0.5 (0x3800), id = 2: x = 0.25 -> roundf(0.5) = 1.
  float x[32];
  for (uint32_t i = 0; i < 32; ++i) x[i] = 0.25f * static_cast<float>(i) - 4.0f;  // -4 .. 3.75
  x[31] = -63.5f;
  uint8_t blk[34];
  ASSERT_TRUE(sjkv::q8_encode_block(x, blk));
  EXPECT_EQ(blk[0], 0x00);
  EXPECT_EQ(blk[1], 0x38);
  for (uint32_t i = 0; i < 31; ++i) {
    // 2x = 0.5*i - 8: ties (odd i) round away from zero.
    const float t = 0.5f * static_cast<float>(i) - 8.0f;
    const int want = static_cast<int>(t < 0 ? -std::floor(-t + 0.5f) : std::floor(t + 0.5f));
    EXPECT_EQ(static_cast<int8_t>(blk[2 + i]), want) << i;
  }
  EXPECT_EQ(static_cast<int8_t>(blk[33]), -127);
}

TEST(StagingQ8, InexactScaleUsesStoredHalf) {
  // amax 1 -> d = 1/127 in binary32; the decoder multiplies by F(H(d)), not d.
  float x[32];
  for (uint32_t i = 0; i < 32; ++i) x[i] = (static_cast<float>(i) - 15.5f) / 15.5f;  // amax 1 at both ends
  uint8_t blk[34];
  ASSERT_TRUE(sjkv::q8_encode_block(x, blk));
  const float d = 1.0f / 127.0f;
  const uint16_t hd = f32_to_f16(d);
  EXPECT_EQ(hd, 0x2008);  // 1/127 = 0.007874 -> fp16 0x2008 (0.0078735)
  EXPECT_EQ(static_cast<uint16_t>(blk[0] | (blk[1] << 8)), hd);
  const float id = 1.0f / d;
  float y[32];
  sjkv::q8_decode_block(blk, y);
  for (uint32_t i = 0; i < 32; ++i) {
    const float q = std::round(x[i] * id);
    EXPECT_EQ(static_cast<int8_t>(blk[2 + i]), static_cast<int8_t>(q)) << i;
    EXPECT_EQ(f32_bits(y[i]), f32_bits(f16_to_f32(hd) * q)) << i;
  }
  EXPECT_EQ(static_cast<int8_t>(blk[2]), -127);
  EXPECT_EQ(static_cast<int8_t>(blk[33]), 127);
}

TEST(StagingQ8, AllZeroBlock) {
  float x[32] = {};
  uint8_t blk[34];
  std::memset(blk, 0x5A, sizeof blk);
  ASSERT_TRUE(sjkv::q8_encode_block(x, blk));
  for (int i = 0; i < 34; ++i) EXPECT_EQ(blk[i], 0x00) << i;
  float y[32];
  sjkv::q8_decode_block(blk, y);
  for (float v : y) EXPECT_EQ(f32_bits(v), 0u);
}

TEST(StagingQ8, RoundTripErrorBound) {
  // Per value: |x - F(d) q| <= d/2 (rounding of x/d; 1e-4 d covers the binary32 error of
  // x * (1/d) for |q| <= 127) + 127 |d - F(d)| (the fp16 scale error times the largest code). Relative RMS measured 0.5%.
  const uint32_t D = 256, rows = 256;
  const std::vector<float> x = gauss_rows(rows, D, 0x98ull);
  std::vector<float> y(x.size());
  const uint32_t rb = sjkv::staging_row_bytes(StagingType::q8_0, D);
  ASSERT_EQ(rb, 8u * 34u);
  std::vector<uint8_t> row(rb);
  double sum_sq_rel = 0.0;
  for (uint32_t r = 0; r < rows; ++r) {
    const float* xr = &x[r * D];
    ASSERT_TRUE(sjkv::staging_encode_row(StagingType::q8_0, xr, D, row.data()));
    sjkv::staging_decode_row(StagingType::q8_0, row.data(), D, &y[r * D]);
    for (uint32_t b = 0; b < D / 32; ++b) {
      float amax = 0.0f;
      for (uint32_t i = 0; i < 32; ++i) amax = std::fmax(amax, std::fabs(xr[b * 32 + i]));
      ASSERT_GT(amax, 0.0f);
      const double d = amax / 127.0f;
      const double fd = f16_to_f32(static_cast<uint16_t>(row[b * 34] | (row[b * 34 + 1] << 8)));
      const double bound = 0.5 * d + 1e-4 * d + 127.0 * std::fabs(d - fd);
      for (uint32_t i = 0; i < 32; ++i) {
        const uint32_t k = b * 32 + i;
        ASSERT_LE(std::fabs(static_cast<double>(xr[k]) - y[r * D + k]), bound) << r << "," << k;
      }
    }
    const double rel = rel_rms_error(xr, &y[r * D], D);
    sum_sq_rel += rel * rel;
  }
  const double mean_rel = std::sqrt(sum_sq_rel / rows);
  EXPECT_LT(mean_rel, 0.008);
  EXPECT_GT(mean_rel, 0.002);
}

// ggml's quantize_row_q8_0_ref / dequantize_row_q8_0 (ggml-quants.c), written from its
// description: amax = MAX(amax, fabsf(x)), d = amax/127, id = d ? 1/d : 0, q = roundf(x*id).
void ggml_q8_0_ref(const float* x, uint8_t* y) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) {
    const float a = std::fabs(x[j]);
    amax = amax > a ? amax : a;
  }
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  const uint16_t h = f32_to_f16(d);
  y[0] = static_cast<uint8_t>(h);
  y[1] = static_cast<uint8_t>(h >> 8);
  for (int j = 0; j < 32; ++j) y[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(std::roundf(x[j] * id)));
}

// The codec's q8_0 block is llama.cpp's q8_0 block byte for byte on finite input whose block
// scale amax/127 is a normal binary32 (there |x*id| <= 127 and the codec's clamp never acts),
// and decodes to the same floats. Below that (amax < 127 * 2^-126) the stored fp16 scale is 0
// either way, and ggml's float -> int8 conversion may be out of range where the codec clamps:
// the only place the two can differ. The replay arm q8_0 therefore uses the codec's block.
TEST(StagingQ8, BlockIsLlamaCppQ8_0OnFiniteInput) {
  std::vector<float> x = gauss_rows(256, 256, 0x8A8Aull);
  std::vector<float> rows(64 * 256);
  sjkv::fill_rows(64, 256, rows.data());
  x.insert(x.end(), rows.begin(), rows.end());
  // Block magnitudes from near the normal-scale limit (2^-115) past fp16 overflow of d (2^30),
  // signed zeros, ties at d = 1, and a block of one spike.
  sjkv::XorShift64 rng(0x0808ull);
  for (int e = -115; e <= 30; ++e)
    for (int r = 0; r < 4; ++r)
      for (int j = 0; j < 32; ++j) x.push_back(std::ldexp(static_cast<float>(rng.gauss()), e - 11));
  for (int j = 0; j < 32; ++j) x.push_back(j % 2 ? -0.0f : 0.0f);
  for (int j = 0; j < 32; ++j) x.push_back(j == 0 ? 127.0f : static_cast<float>(j - 16) + 0.5f);
  for (int j = 0; j < 32; ++j) x.push_back(j == 7 ? -3.0e4f : 0.0f);
  ASSERT_EQ(x.size() % 32, 0u);
  uint8_t want[34], got[34];
  float a[32], b[32];
  size_t nonzero = 0;
  for (size_t o = 0; o < x.size(); o += 32) {
    ggml_q8_0_ref(&x[o], want);
    sjkv::q8_encode_block(&x[o], got);  // false where d overflows fp16: the bytes still match
    ASSERT_EQ(std::memcmp(want, got, 34), 0) << "block at " << o;
    const float d = f16_to_f32(static_cast<uint16_t>(want[0] | (want[1] << 8)));
    for (int j = 0; j < 32; ++j) a[j] = static_cast<float>(static_cast<int8_t>(want[2 + j])) * d;
    sjkv::q8_decode_block(got, b);
    ASSERT_EQ(std::memcmp(a, b, sizeof a), 0) << "block at " << o;
    for (int j = 0; j < 32; ++j) nonzero += want[2 + j] != 0;
  }
  EXPECT_GT(nonzero, x.size() / 2);
}

// ---- f16 staging --------------------------------------------------------------------------

TEST(StagingF16, ExactHalfPerValue) {
  const uint32_t D = 128;
  std::vector<float> x = gauss_rows(1, D, 0xF16ull);
  // Edge values: subnormal halves, a tie, the largest finite half, signed zero.
  x[0] = std::ldexp(1.0f, -24);
  x[1] = -std::ldexp(3.0f, -25);
  x[2] = 1.0f + std::ldexp(1.0f, -11);
  x[3] = 65504.0f;
  x[4] = -0.0f;
  x[5] = 1e-9f;
  ASSERT_EQ(sjkv::staging_row_bytes(StagingType::f16, D), 256u);
  std::vector<uint8_t> row(256);
  ASSERT_TRUE(sjkv::staging_encode_row(StagingType::f16, x.data(), D, row.data()));
  std::vector<float> y(D);
  sjkv::staging_decode_row(StagingType::f16, row.data(), D, y.data());
  for (uint32_t i = 0; i < D; ++i) {
    const uint16_t h = f32_to_f16(x[i]);
    ASSERT_EQ(row[2 * i], h & 0xff) << i;  // little-endian
    ASSERT_EQ(row[2 * i + 1], h >> 8) << i;
    ASSERT_EQ(f32_bits(y[i]), f32_bits(f16_to_f32(h))) << i;
  }
  EXPECT_EQ(row[0], 0x01);
  EXPECT_EQ(row[1], 0x00);
  EXPECT_EQ(row[3], 0x80);
  EXPECT_EQ(row[2], 0x02);
  EXPECT_EQ(row[8], 0x00);
  EXPECT_EQ(row[9], 0x80);
  EXPECT_GT(l2(y.data(), D), 0.0);
}

// ---- encode_row status flag ---------------------------------------------------------------

struct FlagCase {
  StagingType type;
  uint32_t d;
};

const FlagCase kFlagCases[] = {{StagingType::tq6_0, 256}, {StagingType::f16, 256}, {StagingType::q8_0, 256}};

std::vector<float> ordinary_row(uint32_t d) { return gauss_rows(1, d, 0xF1A6ull); }

TEST(StagingRow, FiniteRowsReturnTrue) {
  for (const FlagCase& c : kFlagCases) {
    std::vector<float> x = ordinary_row(c.d);
    std::vector<uint8_t> out(sjkv::staging_row_bytes(c.type, c.d));
    EXPECT_TRUE(sjkv::staging_encode_row(c.type, x.data(), c.d, out.data())) << static_cast<int>(c.type);
    std::vector<float> zero(c.d, 0.0f);
    EXPECT_TRUE(sjkv::staging_encode_row(c.type, zero.data(), c.d, out.data())) << static_cast<int>(c.type);
  }
}

TEST(StagingRow, InfinityReturnsFalse) {
  for (const FlagCase& c : kFlagCases) {
    for (uint32_t pos : {0u, 130u, 255u}) {
      for (float bad : {INFINITY, -INFINITY}) {
        std::vector<float> x = ordinary_row(c.d);
        x[pos] = bad;
        std::vector<uint8_t> out(sjkv::staging_row_bytes(c.type, c.d));
        EXPECT_FALSE(sjkv::staging_encode_row(c.type, x.data(), c.d, out.data()))
            << "type " << static_cast<int>(c.type) << " pos " << pos << " value " << bad;
      }
    }
  }
}

TEST(StagingRow, NaNReturnsFalseTq6AndF16) {
  for (StagingType t : {StagingType::tq6_0, StagingType::f16}) {
    for (uint32_t pos : {0u, 130u, 255u}) {
      std::vector<float> x = ordinary_row(256);
      x[pos] = NAN;
      std::vector<uint8_t> out(sjkv::staging_row_bytes(t, 256));
      EXPECT_FALSE(sjkv::staging_encode_row(t, x.data(), 256, out.data()))
          << "type " << static_cast<int>(t) << " pos " << pos;
    }
  }
}

// Disabled: q8_encode_block ignores NaN inputs (maxS keeps the running amax when the
// candidate is NaN), so d stays finite and the row is reported as valid; the NaN then
// reaches a float -> int8 cast (undefined behaviour). Enable once the header is fixed.
TEST(StagingRow, NaNReturnsFalseQ8) {
  for (uint32_t pos : {0u, 130u, 255u}) {
    std::vector<float> x = ordinary_row(256);
    x[pos] = NAN;
    std::vector<uint8_t> out(sjkv::staging_row_bytes(StagingType::q8_0, 256));
    EXPECT_FALSE(sjkv::staging_encode_row(StagingType::q8_0, x.data(), 256, out.data())) << "pos " << pos;
  }
}

TEST(StagingRow, ScaleOverflowReturnsFalse) {
  // tq6: finite values ~1e6 give a block norm ~1.1e7, beyond the largest half.
  std::vector<float> x = ordinary_row(256);
  for (uint32_t i = 128; i < 256; ++i) x[i] = (i & 1) ? 1e6f : -1e6f;
  std::vector<uint8_t> tq(sjkv::staging_row_bytes(StagingType::tq6_0, 256));
  EXPECT_FALSE(sjkv::staging_encode_row(StagingType::tq6_0, x.data(), 256, tq.data()));
  // The other block is still written and valid (staging.h: a refused row is still fully written).
  uint8_t first[98];
  ASSERT_TRUE(sjkv::tq6_encode_block(x.data(), first));
  EXPECT_EQ(std::memcmp(first, tq.data(), 98), 0);
  EXPECT_EQ(block_norm_bits(&tq[98]) & 0x7c00u, 0x7c00u);

  // Just below the limit is fine: a block norm of 60000 stores a finite half.
  std::vector<float> ok(128, 60000.0f / std::sqrt(128.0f));
  uint8_t blk[98];
  EXPECT_TRUE(sjkv::tq6_encode_block(ok.data(), blk));

  // q8: the seal reads fp16(F(d)*q) back (§5.1), so a block is refused as soon as one
  // read-back value overflows fp16 (|x| near 65520), long before d itself does.
  std::vector<float> q = ordinary_row(256);
  q[40] = 1e7f;
  std::vector<uint8_t> qb(sjkv::staging_row_bytes(StagingType::q8_0, 256));
  EXPECT_FALSE(sjkv::staging_encode_row(StagingType::q8_0, q.data(), 256, qb.data()));
  EXPECT_EQ(sjkv::staging_encode_row_checked(StagingType::q8_0, q.data(), 256, qb.data()), 40);
  q[40] = 70000.0f;  // d finite, read-back of the largest value is not
  EXPECT_FALSE(sjkv::staging_encode_row(StagingType::q8_0, q.data(), 256, qb.data()));
  q[40] = 65000.0f;  // read-back 65000 +- d/2 stays finite
  EXPECT_TRUE(sjkv::staging_encode_row(StagingType::q8_0, q.data(), 256, qb.data()));

  // f16: a finite value >= 65520 becomes infinity.
  std::vector<float> f = ordinary_row(256);
  f[7] = 65520.0f;
  std::vector<uint8_t> fb(sjkv::staging_row_bytes(StagingType::f16, 256));
  EXPECT_FALSE(sjkv::staging_encode_row(StagingType::f16, f.data(), 256, fb.data()));
  f[7] = 65519.0f;
  EXPECT_TRUE(sjkv::staging_encode_row(StagingType::f16, f.data(), 256, fb.data()));
}

// ---- seal input (§5.1) --------------------------------------------------------------------

TEST(StagingRow, SealInputIsRoundedDecode) {
  const uint32_t D = 256;
  for (const FlagCase& c : kFlagCases) {
    std::vector<float> x = gauss_rows(1, D, 0x5EA1ull + static_cast<uint64_t>(c.type));
    std::vector<uint8_t> row(sjkv::staging_row_bytes(c.type, D));
    ASSERT_TRUE(sjkv::staging_encode_row(c.type, x.data(), D, row.data()));
    std::vector<float> dec(D), scratch(D);
    std::vector<uint16_t> seal(D);
    sjkv::staging_decode_row(c.type, row.data(), D, dec.data());
    sjkv::staging_seal_input(c.type, row.data(), D, scratch.data(), seal.data());
    uint32_t nonzero = 0;
    for (uint32_t i = 0; i < D; ++i) {
      ASSERT_EQ(seal[i], f32_to_f16(dec[i])) << static_cast<int>(c.type) << "," << i;
      nonzero += (seal[i] & 0x7fffu) != 0;
    }
    EXPECT_GT(nonzero, D / 2) << static_cast<int>(c.type);
  }
}

}  // namespace
