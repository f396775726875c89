// The reference codec's test vectors (docs/SPEC.md §13): regenerate the inputs, seal, decode
// and hash; every scalar and trellis line and the tq6_0 line must match byte for byte.
#include <gtest/gtest.h>

#include <cinttypes>
#include <cstdio>
#include <vector>

#include "../golden.h"
#include "sjkv/hash.h"
#include "sjkv/seal.h"
#include "sjkv/staging.h"
#include "sjkv/testgen.h"

using namespace sjkv;

namespace {

std::string hex64(uint64_t h) {
  char b[17];
  std::snprintf(b, sizeof b, "%016" PRIx64, h);
  return b;
}

struct Hashes {
  uint64_t rec, dec;
};

Hashes seal_and_hash(uint32_t D, uint32_t bk, uint32_t bv, SealPath path, std::vector<uint8_t>* rec_out = nullptr,
                     Body body = Body::scalar) {
  std::vector<uint16_t> K(128 * D), V(128 * D);
  std::vector<int32_t> chf(D);
  fill_group(D, 128, 1, K.data(), V.data(), chf.data());
  const RecordLayout l = make_layout(D, 128, bk, bv, body);
  std::vector<uint8_t> rec(l.bytes);
  SealWorkspace ws;
  const Status st = seal_record(l, SealOptions{}, K.data(), V.data(), D, rec.data(), ws, path);
  EXPECT_TRUE(st.ok()) << st.message();
  uint64_t dec = kFnvBasis;
  std::vector<float> row(D);
  for (uint32_t t = 0; t < 128; ++t) {
    decode_k_row(l, rec.data(), t, row.data());
    dec = fnv1a(row.data(), 4 * D, dec);
    decode_v_row(l, rec.data(), t, row.data());
    dec = fnv1a(row.data(), 4 * D, dec);
  }
  if (rec_out) *rec_out = rec;
  return {fnv1a(rec.data(), rec.size()), dec};
}

}  // namespace

TEST(Vectors, GoldenFileHasAllLines) {
  const auto lines = sjkv_test::read_kv_lines("expected_vectors.txt");
  int seal = 0, tq6 = 0;
  for (const auto& kv : lines) {
    seal += kv.at("kind") == "seal";
    tq6 += kv.at("kind") == "tq6";
  }
  EXPECT_EQ(seal, 20);
  EXPECT_EQ(tq6, 1);
}

TEST(Vectors, EveryScalarLineMatchesOnEveryPath) {
  int checked = 0;
  for (const auto& kv : sjkv_test::read_kv_lines("expected_vectors.txt")) {
    if (kv.at("kind") != "seal" || kv.at("body") != "0") continue;
    const uint32_t D = std::stoul(kv.at("D")), bk = std::stoul(kv.at("bk")), bv = std::stoul(kv.at("bv"));
    const RecordLayout l = make_layout(D, 128, bk, bv, Body::scalar);
    EXPECT_EQ(std::to_string(l.bytes), kv.at("bytes"));
    for (SealPath path : {SealPath::reference, SealPath::fast_baseline, SealPath::fast_avx2, SealPath::fast_avx512}) {
      if (!seal_path_available(path)) continue;
      const Hashes h = seal_and_hash(D, bk, bv, path);
      EXPECT_EQ(hex64(h.rec), kv.at("rec")) << "D=" << D << " " << bk << "/" << bv << " " << seal_path_name(path);
      EXPECT_EQ(hex64(h.dec), kv.at("dec")) << "D=" << D << " " << bk << "/" << bv << " " << seal_path_name(path);
    }
    ++checked;
  }
  EXPECT_EQ(checked, 14);
}

TEST(Vectors, EveryTrellisLineMatchesOnEveryPath) {
  int checked = 0;
  for (const auto& kv : sjkv_test::read_kv_lines("expected_vectors.txt")) {
    if (kv.at("kind") != "seal" || kv.at("body") != "1") continue;
    const uint32_t D = std::stoul(kv.at("D")), bk = std::stoul(kv.at("bk")), bv = std::stoul(kv.at("bv"));
    const RecordLayout l = make_layout(D, 128, bk, bv, Body::trellis);
    EXPECT_EQ(std::to_string(l.bytes), kv.at("bytes"));
    for (SealPath path : {SealPath::reference, SealPath::fast_baseline, SealPath::fast_avx2, SealPath::fast_avx512,
                          SealPath::fast}) {
      if (!seal_path_available(path)) continue;
      const Hashes h = seal_and_hash(D, bk, bv, path, nullptr, Body::trellis);
      EXPECT_EQ(hex64(h.rec), kv.at("rec")) << "D=" << D << " " << bk << "/" << bv << "t " << seal_path_name(path);
      EXPECT_EQ(hex64(h.dec), kv.at("dec")) << "D=" << D << " " << bk << "/" << bv << "t " << seal_path_name(path);
    }
    ++checked;
  }
  EXPECT_EQ(checked, 6);
}

// AUTO resolves to trellis for 3/3, 3/2 and 2/2 and seals the same bytes as an explicit
// trellis body.
TEST(Vectors, AutomaticBodySealsTrellis) {
  for (auto pr : {std::pair<uint32_t, uint32_t>{3, 3}, {3, 2}, {2, 2}}) {
    const RecordLayout l = make_layout(128, 128, pr.first, pr.second, resolve_body(Body::automatic, pr.first, pr.second));
    ASSERT_EQ(l.body, Body::trellis);
    std::vector<uint8_t> a, b;
    seal_and_hash(128, pr.first, pr.second, SealPath::fast, &a, l.body);
    seal_and_hash(128, pr.first, pr.second, SealPath::fast, &b, Body::trellis);
    EXPECT_EQ(a, b);
  }
}

TEST(Vectors, Tq6Line) {
  std::vector<float> x(64 * 256);
  fill_rows(64, 256, x.data());
  std::vector<uint8_t> enc(64 * 2 * kTq6BlockBytes);
  for (int r = 0; r < 64; ++r)
    staging_encode_row(StagingType::tq6_0, &x[r * 256], 256, &enc[r * 2 * kTq6BlockBytes]);
  std::vector<float> dec(64 * 256);
  for (int r = 0; r < 64; ++r) staging_decode_row(StagingType::tq6_0, &enc[r * 2 * kTq6BlockBytes], 256, &dec[r * 256]);
  for (const auto& kv : sjkv_test::read_kv_lines("expected_vectors.txt")) {
    if (kv.at("kind") != "tq6") continue;
    EXPECT_EQ(hex64(fnv1a(enc.data(), enc.size())), kv.at("enc"));
    EXPECT_EQ(hex64(fnv1a(dec.data(), dec.size() * 4)), kv.at("dec"));
  }
}

// The D = 128 group's intermediate values that docs/SPEC.md §13.1 points to (CODEC-SPEC Appendix A),
// for a readable failure.
TEST(Vectors, AppendixACheckValues) {
  XorShift64 a(0x9E3779B97F4A7C15ull ^ 1);
  EXPECT_EQ(a.next(), 4123618861u);
  EXPECT_EQ(a.next(), 4158770670u);
  EXPECT_EQ(a.next(), 1473340104u);
  EXPECT_EQ(a.next(), 32274953u);
  std::vector<uint16_t> K(128 * 128), V(128 * 128);
  std::vector<int32_t> chf(128);
  fill_group(128, 128, 1, K.data(), V.data(), chf.data());
  const uint16_t k0[8] = {0x3158, 0x39a8, 0xb4a8, 0x3928, 0xbff0, 0xbb68, 0xb84a, 0x3d54};
  const uint16_t v0[8] = {0x3964, 0x3018, 0xa380, 0x2fc0, 0x3764, 0xb8b3, 0x3248, 0x2880};
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(K[i], k0[i]) << i;
    EXPECT_EQ(V[i], v0[i]) << i;
  }
  std::vector<uint8_t> rec;
  seal_and_hash(128, 4, 4, SealPath::reference, &rec);
  const RecordLayout l = make_layout(128, 128, 4, 4, Body::scalar);
  const uint8_t kpay[16] = {0xa8, 0x44, 0x89, 0x60, 0x55, 0x9a, 0xaa, 0xb4, 0x60, 0x46, 0x64, 0x56, 0x54, 0xc9, 0x9c, 0x65};
  const uint8_t vpay[16] = {0x8a, 0x72, 0xc8, 0x78, 0x95, 0xa0, 0x54, 0x8b, 0xba, 0x73, 0x35, 0xa6, 0x4c, 0x87, 0xbb, 0x9a};
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(rec[l.k_payload + i], kpay[i]) << i;
    EXPECT_EQ(rec[l.v_payload + i], vpay[i]) << i;
  }
  const uint16_t kscale[4] = {0x358c, 0x338f, 0x35a0, 0x33d6}, kzero[4] = {0xc112, 0xbe4f, 0xc216, 0xbfdf};
  const uint16_t ktok[4] = {0x3cb0, 0x39ed, 0x3dad, 0x3cba}, vch[4] = {0x3c39, 0x3c26, 0x39ed, 0x3d76};
  const uint16_t vscale[4] = {0x34a6, 0x3023, 0x389c, 0x304b}, vzero[4] = {0xc0c5, 0xbc2b, 0xc4e1, 0xbc05};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(load_u16(&rec[l.k_scale + 2 * i]), kscale[i]);
    EXPECT_EQ(load_u16(&rec[l.k_zero + 2 * i]), kzero[i]);
    EXPECT_EQ(load_u16(&rec[l.k_tok + 2 * i]), ktok[i]);
    EXPECT_EQ(load_u16(&rec[l.v_ch + 2 * i]), vch[i]);
    EXPECT_EQ(load_u16(&rec[l.v_scale + 2 * i]), vscale[i]);
    EXPECT_EQ(load_u16(&rec[l.v_zero + 2 * i]), vzero[i]);
  }
  std::vector<float> row(128);
  decode_k_row(l, rec.data(), 0, row.data());
  EXPECT_FLOAT_EQ(row[0], 0.27923584f);
  EXPECT_FLOAT_EQ(row[1], 0.643014908f);
  decode_v_row(l, rec.data(), 0, row.data());
  EXPECT_FLOAT_EQ(row[0], 0.549481392f);
  EXPECT_FLOAT_EQ(row[1], 0.170351744f);
}
