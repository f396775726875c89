// SequenceCache::set_sealer, the hook the GPU seal of sjkv-encode uses: one call per commit
// with the records of every layer (layer-major, then group, then head), and the bodies come
// out exactly as with the built-in CPU sealer; a failing sealer's status is returned.
#include <gtest/gtest.h>

#include <vector>

#include "sjkv/cache.h"
#include "sjkv/hadamard.h"
#include "sjkv/testgen.h"

using namespace sjkv;

namespace {

struct CacheRun {
  std::vector<std::vector<uint8_t>> bodies;
  std::vector<size_t> calls;  // records per sealer call
  Status status;
};

// Drives a cache over `n` positions in ubatches of 64 (rows: heavy-tailed, rotated).
CacheRun drive(const CodecConfig& cfg, uint32_t L, uint32_t H, uint32_t n, bool hook, bool fail = false) {
  CacheShape shape;
  shape.n_layers = L;
  shape.n_head_kv = H;
  shape.n_ctx = n + 1;
  shape.n_ubatch = 64;
  SequenceCache cache(cfg, shape);
  EXPECT_TRUE(cache.status().ok()) << cache.status().message();
  CacheRun run;
  if (hook)
    cache.set_sealer([&run, fail](const RecordLayout& l, const SealOptions& o, size_t n_rec, const uint16_t* const* k,
                                  const uint16_t* const* v, size_t stride, uint8_t* out) {
      run.calls.push_back(n_rec);
      if (fail) {
        Status st;
        st.code = ErrorCode::unsupported;
        st.detail = "sealer refused";
        return st;
      }
      return seal_records(l, o, n_rec, k, v, stride, out, SealPath::reference);
    });
  const uint32_t D = cfg.head_dim;
  const size_t per_pos = static_cast<size_t>(L) * H * D;
  std::vector<float> k(64 * per_pos), v(64 * per_pos);
  XorShift64 rng(77);
  for (uint32_t p0 = 0; p0 < n; p0 += 64) {
    const uint32_t m = n - p0 < 64 ? n - p0 : 64;
    Status st = cache.begin_ubatch(p0, m);
    if (!st.ok()) {
      run.status = st;
      return run;
    }
    for (size_t i = 0; i < m * per_pos; ++i) {
      k[i] = static_cast<float>(rng.gauss()) / 2048.0f * ((i % D) % 37 == 5 ? 16.0f : 1.0f);
      v[i] = static_cast<float>(rng.gauss()) / 4096.0f;
    }
    hadamard_blocks(k.data(), static_cast<uint32_t>(m * per_pos), D);
    hadamard_blocks(v.data(), static_cast<uint32_t>(m * per_pos), D);
    st = cache.store_ubatch(p0, m, k.data(), v.data());
    EXPECT_TRUE(st.ok()) << st.message();
  }
  run.status = cache.begin_ubatch(n, 1);
  for (uint32_t l = 0; l < L; ++l) run.bodies.push_back(cache.layer(l).body());
  return run;
}

CodecConfig config(uint32_t bk, uint32_t bv) {
  CodecConfig c;
  c.head_dim = 128;
  c.bits_k = bk;
  c.bits_v = bv;
  c.sink = 64;
  c.tail = 128;
  c.tail_max = 256;
  return c;
}

}  // namespace

TEST(CacheSealer, HookGivesTheSameBodiesOneCallPerCommit) {
  for (const CodecConfig& cfg : {config(4, 4), config(3, 2)}) {
    const uint32_t L = 3, H = 2, n = 900;
    const CacheRun cpu = drive(cfg, L, H, n, false);
    const CacheRun hooked = drive(cfg, L, H, n, true);
    ASSERT_TRUE(cpu.status.ok()) << cpu.status.message();
    ASSERT_TRUE(hooked.status.ok()) << hooked.status.message();
    ASSERT_FALSE(hooked.calls.empty());
    size_t total = 0;
    for (size_t c : hooked.calls) {
      EXPECT_EQ(c % (L * H), 0u) << "a call holds whole groups of every layer";
      total += c;
    }
    EXPECT_GT(total, 0u);
    for (uint32_t l = 0; l < L; ++l) EXPECT_EQ(cpu.bodies[l], hooked.bodies[l]) << "layer " << l;
  }
}

TEST(CacheSealer, FailingSealerStatusIsReturned) {
  const CacheRun r = drive(config(4, 4), 2, 1, 900, true, true);
  EXPECT_EQ(r.status.code, ErrorCode::unsupported);
  EXPECT_EQ(r.status.detail, "sealer refused");
}
