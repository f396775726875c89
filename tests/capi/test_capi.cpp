// The C interface against the C++ library it wraps: the same record bytes, rows, policy steps
// and cache contents for the same inputs; every failure a code and a message naming it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "sjkv/cache.h"
#include "sjkv/cache_view.h"
#include "sjkv/config.h"
#include "sjkv/fp16.h"
#include "sjkv/hadamard.h"
#include "sjkv/io/codebook.h"
#include "sjkv/seal.h"
#include "sjkv/sjkv.h"

namespace {

sjkv::CodecConfig cpp_config(const std::string& text, uint32_t D) {
  sjkv::CodecConfig c;
  std::string err;
  EXPECT_TRUE(sjkv::parse_config(text, &c, &err)) << err;
  c.head_dim = D;
  return c;
}

// G rows of D fp16 values, heavy-tailed as keys are.
std::vector<uint16_t> rows16(uint32_t G, uint32_t D, uint32_t seed) {
  std::mt19937 rng(seed);
  std::student_t_distribution<float> t(4.0f);
  std::vector<uint16_t> r(size_t(G) * D);
  for (auto& x : r) x = sjkv::f32_to_f16(t(rng));
  return r;
}

std::string table(const char* name) { return std::string(SJKV_SOURCE_DIR) + "/data/codebooks/" + name; }

TEST(CApi, RecordsAreTheLibrarysBytes) {
  for (const char* spec : {"sj:4/4", "sj:3/3", "sj:4/2", "sj:3/2t", "sj:2/2t", "kvarn:4/4"}) {
    for (uint32_t D : {128u, 256u}) {
      SCOPED_TRACE(std::string(spec) + " D " + std::to_string(D));
      sjkv_config* c = nullptr;
      ASSERT_EQ(sjkv_config_parse(spec, D, &c), SJKV_OK) << sjkv_last_error();
      sjkv_config_info info;
      sjkv_config_get(c, &info);
      const sjkv::CodecConfig cc = cpp_config(spec, D);
      ASSERT_EQ(info.record_bytes, cc.layout().bytes);
      ASSERT_EQ(info.head_dim, D);
      const auto k = rows16(info.group, D, 1), v = rows16(info.group, D, 2);
      std::vector<uint8_t> a(info.record_bytes), b(info.record_bytes);
      ASSERT_EQ(sjkv_seal_record(c, nullptr, k.data(), v.data(), D, a.data()), SJKV_OK) << sjkv_last_error();
      sjkv::SealOptions so;
      so.iters = cc.iters;
      so.balance = cc.balance;
      sjkv::SealWorkspace ws;
      ASSERT_TRUE(sjkv::seal_record(cc.layout(), so, k.data(), v.data(), D, b.data(), ws).ok());
      EXPECT_EQ(a, b);
      // Rows decode as the library decodes them.
      std::vector<float> ka(D), va(D), kb(D), vb(D);
      for (uint32_t t : {0u, 7u, info.group - 1}) {
        ASSERT_EQ(sjkv_decode_record_row(c, nullptr, a.data(), t, ka.data(), va.data()), SJKV_OK);
        sjkv::decode_k_row(cc.layout(), b.data(), t, kb.data());
        sjkv::decode_v_row(cc.layout(), b.data(), t, vb.data());
        EXPECT_EQ(0, std::memcmp(ka.data(), kb.data(), D * 4));
        EXPECT_EQ(0, std::memcmp(va.data(), vb.data(), D * 4));
      }
      char name[256];
      EXPECT_EQ(sjkv_config_name(c, name, sizeof name), cc.name().size());
      EXPECT_EQ(std::string(name), cc.name());
      sjkv_config_free(c);
    }
  }
}

TEST(CApi, TrainedTablesSealAsTheLibraryDoes) {
  sjkv_codebook* cb = nullptr;
  ASSERT_EQ(sjkv_codebook_load(table("gemma3-270m-3bit.sjcb").c_str(), &cb), SJKV_OK) << sjkv_last_error();
  ASSERT_EQ(sjkv_codebook_add(cb, table("gemma3-270m-2bit.bin").c_str()), SJKV_OK) << sjkv_last_error();
  EXPECT_EQ(sjkv_codebook_add(cb, table("reference-2bit.bin").c_str()), SJKV_ERR_ARGUMENT);
  EXPECT_NE(std::string(sjkv_last_error()).find("already holds 2-bit tables"), std::string::npos);
  EXPECT_TRUE(sjkv_codebook_has(cb, 3) && sjkv_codebook_has(cb, 2) && !sjkv_codebook_has(cb, 4));
  sjkv_config* c = nullptr;
  ASSERT_EQ(sjkv_config_parse("sj:3/2t", 256, &c), SJKV_OK);
  sjkv_config_info info;
  sjkv_config_get(c, &info);
  const auto k = rows16(128, 256, 3), v = rows16(128, 256, 4);
  std::vector<uint8_t> with(info.record_bytes), without(info.record_bytes), lib(info.record_bytes);
  ASSERT_EQ(sjkv_seal_record(c, cb, k.data(), v.data(), 256, with.data()), SJKV_OK);
  ASSERT_EQ(sjkv_seal_record(c, nullptr, k.data(), v.data(), 256, without.data()), SJKV_OK);
  EXPECT_NE(with, without);
  const sjkv::RawCodebook t3 = sjkv::read_codebook_any(table("gemma3-270m-3bit.sjcb")).table;
  const sjkv::RawCodebook t2 = sjkv::read_codebook_any(table("gemma3-270m-2bit.bin")).table;
  const sjkv::CodecConfig cc = cpp_config("sj:3/2t", 256);
  sjkv::SealOptions so;
  so.codebooks = {t3.k.data(), t2.v.data()};
  sjkv::SealWorkspace ws;
  ASSERT_TRUE(sjkv::seal_record(cc.layout(), so, k.data(), v.data(), 256, lib.data(), ws).ok());
  EXPECT_EQ(with, lib);
  EXPECT_EQ(sjkv_codebook_id(c, cb), sjkv::codebook_id(cc.layout(), so.codebooks));
  EXPECT_NE(sjkv_codebook_id(c, cb), sjkv_codebook_id(c, nullptr));
  sjkv_config_free(c);
  sjkv_codebook_free(cb);
}

TEST(CApi, CacheHoldsWhatTheLibrarysCacheHolds) {
  const uint32_t L = 2, H = 2, D = 128, N = 900, U = 100;
  sjkv_config* c = nullptr;
  ASSERT_EQ(sjkv_config_parse("sj:4/4:tail=256/512", D, &c), SJKV_OK);
  sjkv_cache* cache = nullptr;
  ASSERT_EQ(sjkv_cache_new(c, nullptr, L, H, N, U, &cache), SJKV_OK) << sjkv_last_error();
  sjkv::CacheShape shape{L, H, N, U};
  sjkv::SequenceCache lib(cpp_config("sj:4/4:tail=256/512", D), shape);
  ASSERT_TRUE(lib.status().ok());
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> k(size_t(U) * L * H * D), v(k.size());
  for (uint32_t p0 = 0; p0 < N; p0 += U) {
    for (auto& x : k) x = nd(rng);
    for (auto& x : v) x = nd(rng);
    uint32_t ga = 0, gb = 0;
    ASSERT_EQ(sjkv_cache_begin_ubatch(cache, p0, U, &ga), SJKV_OK) << sjkv_last_error();
    ASSERT_TRUE(lib.begin_ubatch(p0, U, &gb).ok());
    EXPECT_EQ(ga, gb);
    ASSERT_EQ(sjkv_cache_store(cache, p0, U, k.data(), v.data()), SJKV_OK) << sjkv_last_error();
    ASSERT_TRUE(lib.store_ubatch(p0, U, k.data(), v.data()).ok());
  }
  EXPECT_GT(sjkv_cache_sealed_end(cache), 128u);  // the body holds records
  EXPECT_EQ(sjkv_cache_sealed_end(cache), lib.policy().B);
  EXPECT_EQ(sjkv_cache_n_stored(cache), N);
  std::vector<float> ka(D), va(D), kb(D), vb(D);
  for (uint32_t l = 0; l < L; ++l)
    for (uint32_t h = 0; h < H; ++h)
      for (uint32_t p = 0; p < N; p += 37) {
        ASSERT_EQ(sjkv_cache_read(cache, l, h, p, ka.data(), va.data()), SJKV_OK);
        sjkv::resolve_row(lib.view(l), p, h, kb.data(), vb.data());
        ASSERT_EQ(0, std::memcmp(ka.data(), kb.data(), D * 4)) << l << " " << h << " " << p;
        ASSERT_EQ(0, std::memcmp(va.data(), vb.data(), D * 4)) << l << " " << h << " " << p;
      }
  const double bits = sjkv_cache_bits(cache);
  EXPECT_EQ(bits, sjkv::occupied_bits(lib.config(), lib.policy().B, N).total_bits());
  EXPECT_GT(bits, 4.0);
  EXPECT_LT(bits, 16.0);
  // The idle step seals as the library's does.
  uint32_t ga = 0, gb = 0;
  ASSERT_EQ(sjkv_cache_idle(cache, 0, &ga), SJKV_OK);
  ASSERT_TRUE(lib.idle(0, &gb).ok());
  EXPECT_EQ(ga, gb);
  EXPECT_EQ(sjkv_cache_sealed_end(cache), lib.policy().B);
  // Out of order, out of range, non-finite: codes, nothing stored.
  EXPECT_EQ(sjkv_cache_store(cache, 5, 1, k.data(), v.data()), SJKV_ERR_STATE);
  EXPECT_EQ(sjkv_cache_read(cache, L, 0, 0, ka.data(), nullptr), SJKV_ERR_ARGUMENT);
  EXPECT_EQ(sjkv_cache_read(cache, 0, 0, N, ka.data(), nullptr), SJKV_ERR_ARGUMENT);
  sjkv_cache_free(cache);

  ASSERT_EQ(sjkv_cache_new(c, nullptr, 1, 1, 64, 8, &cache), SJKV_OK);
  std::vector<float> row(D, 1.0f), nan_row(D, 1.0f);
  nan_row[5] = std::nanf("");
  ASSERT_EQ(sjkv_cache_begin_ubatch(cache, 0, 1, nullptr), SJKV_OK);
  EXPECT_EQ(sjkv_cache_store(cache, 0, 1, nan_row.data(), row.data()), SJKV_ERR_INPUT);
  EXPECT_EQ(sjkv_cache_n_stored(cache), 0u);
  EXPECT_NE(std::string(sjkv_last_error()), "");
  EXPECT_EQ(sjkv_cache_store(cache, 0, 1, row.data(), row.data()), SJKV_OK);
  EXPECT_EQ(std::string(sjkv_last_error()), "");
  sjkv_cache_free(cache);
  sjkv_config_free(c);
}

TEST(CApi, PolicyIsTheFormatsPolicy) {
  sjkv_config* c = nullptr;
  ASSERT_EQ(sjkv_config_parse("sj:4/4:tail=512/1024", 128, &c), SJKV_OK);
  sjkv_policy p;
  sjkv_policy_init(&p, c);
  sjkv::JournalPolicy q;
  q.init(128, 512, 1024, 128, 0);
  for (uint32_t pos = 0; pos < 5000; pos += 64) {
    EXPECT_EQ(sjkv_policy_seal_target(&p, pos, 64), q.begin_ubatch(pos, 64)) << pos;
    sjkv_policy_commit(&p);
    q.commit();
    ASSERT_EQ(0, std::memcmp(&p, &q, sizeof p)) << pos;
  }
  EXPECT_EQ(sjkv_policy_idle(&p, 5000, 700), q.idle(5000, 700));
  EXPECT_EQ(sjkv_policy_idle(&p, 5000, 0), q.idle(5000, 0));
  sjkv_policy_commit(&p);
  q.commit();
  // A ubatch far past the sealed end makes a seal pending: no truncation until it commits.
  const uint32_t target = sjkv_policy_seal_target(&p, 7000, 64);
  EXPECT_EQ(target, q.begin_ubatch(7000, 64));
  EXPECT_GT(target, p.B);
  uint32_t d1 = 0, d2 = 0;
  EXPECT_EQ(sjkv_policy_truncate(&p, 3000, &d1), SJKV_NO_POS);
  EXPECT_EQ(q.truncate(3000, &d2), sjkv::kNoPos);
  sjkv_policy_commit(&p);
  q.commit();
  EXPECT_EQ(sjkv_policy_truncate(&p, 1000, &d1), q.truncate(1000, &d2));
  EXPECT_EQ(d1, d2);
  EXPECT_GT(d1, 0u);
  ASSERT_EQ(0, std::memcmp(&p, &q, sizeof p));
  EXPECT_EQ(sjkv_ring_capacity(c, 512), sjkv::ring_capacity(512, 1024, 128, 512));
  sjkv_config_free(c);
}

TEST(CApi, RotationAndStagingAreTheCodecs) {
  sjkv_config* c = nullptr;
  ASSERT_EQ(sjkv_config_parse("sj:4/4:staging=q8_0", 256, &c), SJKV_OK);
  sjkv_config_info info;
  sjkv_config_get(c, &info);
  std::vector<float> row(256), twice(256), lib(256);
  for (uint32_t i = 0; i < 256; ++i) row[i] = std::sin(0.37f * static_cast<float>(i)) * 3.0f;
  twice = lib = row;
  sjkv_rotate(c, twice.data());
  sjkv::hadamard_blocks(lib.data(), 256, 256);
  EXPECT_EQ(twice, lib);
  sjkv_rotate(c, twice.data());
  for (uint32_t i = 0; i < 256; ++i) EXPECT_NEAR(twice[i], row[i], 1e-5f);
  std::vector<uint8_t> staged(info.staging_bytes), ref(info.staging_bytes);
  ASSERT_EQ(sjkv_stage_row(c, row.data(), staged.data()), SJKV_OK);
  ASSERT_TRUE(sjkv::staging_encode_row(sjkv::StagingType::q8_0, row.data(), 256, ref.data()));
  EXPECT_EQ(staged, ref);
  std::vector<float> back(256);
  ASSERT_EQ(sjkv_unstage_row(c, staged.data(), back.data()), SJKV_OK);
  for (uint32_t i = 0; i < 256; ++i) EXPECT_NEAR(back[i], row[i], 0.05f);
  sjkv_config_free(c);
}

TEST(CApi, BadInputsAreCodesWithMessages) {
  sjkv_config* c = reinterpret_cast<sjkv_config*>(1);
  EXPECT_EQ(sjkv_config_parse("sj:4/4:frob=1", 0, &c), SJKV_ERR_ARGUMENT);
  EXPECT_EQ(c, nullptr);
  EXPECT_NE(std::string(sjkv_last_error()).find("sj:4/4:frob=1"), std::string::npos);
  EXPECT_EQ(sjkv_config_parse("sj:5/4", 0, &c), SJKV_ERR_UNSUPPORTED);
  EXPECT_NE(std::string(sjkv_last_error()).find("bits"), std::string::npos) << sjkv_last_error();
  EXPECT_EQ(sjkv_config_parse("sj:3/2t", 64, &c), SJKV_ERR_UNSUPPORTED);
  EXPECT_NE(std::string(sjkv_last_error()).find("trellis"), std::string::npos) << sjkv_last_error();
  EXPECT_EQ(sjkv_config_parse(nullptr, 0, &c), SJKV_ERR_ARGUMENT);
  sjkv_codebook* cb = nullptr;
  EXPECT_EQ(sjkv_codebook_load("/nonexistent/table.bin", &cb), SJKV_ERR_FILE);
  EXPECT_NE(std::string(sjkv_last_error()).find("/nonexistent/table.bin"), std::string::npos);
  EXPECT_EQ(cb, nullptr);
  EXPECT_EQ(sjkv_codebook_load(table("README.md").c_str(), &cb), SJKV_ERR_FILE);
  ASSERT_EQ(sjkv_config_parse("sj:4/4", 128, &c), SJKV_OK);
  std::vector<uint16_t> k(128 * 128, 0x3c00), v(128 * 128, 0x3c00);
  k[300] = 0x7e00;  // NaN
  sjkv_config_info info;
  sjkv_config_get(c, &info);
  std::vector<uint8_t> out(info.record_bytes);
  EXPECT_EQ(sjkv_seal_record(c, nullptr, k.data(), v.data(), 128, out.data()), SJKV_ERR_INPUT);
  EXPECT_EQ(sjkv_seal_record(c, nullptr, k.data(), v.data(), 64, out.data()), SJKV_ERR_ARGUMENT);
  sjkv_cache* cache = nullptr;
  EXPECT_EQ(sjkv_cache_new(c, nullptr, 0, 1, 10, 8, &cache), SJKV_ERR_UNSUPPORTED);
  EXPECT_EQ(cache, nullptr);
  EXPECT_EQ(std::string(sjkv_version()), SJKV_PROJECT_VERSION);
  EXPECT_EQ(sjkv_format_version(), 1u);
  sjkv_config_free(c);
}

}  // namespace
