// Fused decode attention on the GPU against the CPU reference attention (CODEC-SPEC §9.1) over
// caches built by SequenceCache (journal policy, real seals), every body and staging type.
//
// Tolerance, FlashAttention style: both results are compared with a binary64 softmax over
// the same decoded rows (resolve_row); the GPU error must be at most twice the error of the
// binary32 CPU reference plus 2^-20 of the output's magnitude. The decoded rows are the same
// bits on both sides (same per-element functions); only the summation order differs (lane
// partials and a shuffle tree for q.k, per-span softmax partials merged in span order), and
// the device expf may differ from the host's by an ulp or two.
//
// The helper tests at the end (per-element decode against the row decoders) run without a GPU.
#include <gtest/gtest.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "sjkv/cache.h"
#include "sjkv/cache_view.h"
#include "sjkv/cuda/attention_cuda.h"
#include "sjkv/cuda/codec_cuda.h"
#include "sjkv/hadamard.h"
#include "sjkv/testgen.h"

using namespace sjkv;

namespace {

#define SJKV_REQUIRE_GPU()                                                    \
  do {                                                                        \
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device present"; \
  } while (0)

struct Case {
  const char* name;
  uint32_t D, bk, bv;
  Body body;
  StagingType staging;
  SinkType sink;
  bool runtime_tables;  // trellis sealed and decoded with non-reference tables
};

// Test names and ctest listings show the case name, not the struct's bytes.
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

// Rotated K/V rows [n][H][D] with per-channel profiles (~4% outlier key channels, biases)
// and per-token factors; k_raw keeps the unrotated keys to build queries from.
struct Rows {
  uint32_t D, H, n;
  std::vector<float> k, v, k_raw;
};

Rows make_rows(uint32_t D, uint32_t H, uint32_t n, uint32_t rot, uint64_t seed) {
  Rows r{D, H, n, {}, {}, {}};
  XorShift64 rng(0x9E3779B97F4A7C15ull ^ seed);
  const uint32_t per = H * D;
  std::vector<float> kf(per), kb(per), vf(per), vb(per);
  for (uint32_t i = 0; i < per; ++i) {
    kf[i] = rng.next() % 100u < 4u ? 8.0f + static_cast<float>(rng.next() & 7u) : 1.0f + 0.25f * (rng.next() & 3u);
    kb[i] = static_cast<float>(rng.gauss()) / 2048.0f;
    vf[i] = 1.0f + 0.25f * static_cast<float>(rng.next() & 3u);
    vb[i] = static_cast<float>(rng.gauss()) / 4096.0f;
  }
  r.k_raw.resize(static_cast<size_t>(n) * per);
  r.v.resize(r.k_raw.size());
  for (uint32_t p = 0; p < n; ++p) {
    const float tf = 0.75f + 0.25f * static_cast<float>(rng.next() & 3u);
    for (uint32_t i = 0; i < per; ++i) {
      const size_t o = static_cast<size_t>(p) * per + i;
      r.k_raw[o] = static_cast<float>(rng.gauss()) / 2048.0f * kf[i] * tf + kb[i];
      r.v[o] = static_cast<float>(rng.gauss()) / 2048.0f * vf[i] + vb[i];
    }
  }
  r.k = r.k_raw;
  for (uint32_t p = 0; p < n; ++p) {
    hadamard_blocks(r.k.data() + static_cast<size_t>(p) * per, per, rot);
    hadamard_blocks(r.v.data() + static_cast<size_t>(p) * per, per, rot);
  }
  return r;
}

CodecConfig make_cfg(const Case& c) {
  CodecConfig cfg;
  cfg.head_dim = c.D;
  cfg.group = 128;
  cfg.bits_k = c.bk;
  cfg.bits_v = c.bv;
  cfg.body = c.body;
  cfg.staging = c.staging;
  cfg.sink_type = c.sink;
  cfg.sink = 128;
  cfg.tail = 256;
  cfg.tail_max = 512;
  return cfg;
}

// Non-reference tables of a trellis case: the built-in table (identity at 4 bits) with every
// entry scaled by 1 + (w % 7)/64, so a decoder using the wrong table would be caught.
std::vector<uint16_t> runtime_table(Side side, uint32_t bits) {
  const uint16_t* base = reference_codebook(side, bits);
  std::vector<uint16_t> t(trellis_entries(bits));
  for (uint32_t w = 0; w < t.size(); ++w)
    t[w] = f32_to_f16(f16_to_f32(base[w]) * (1.0f + static_cast<float>(w % 7) / 64.0f));
  return t;
}

struct Built {
  std::unique_ptr<SequenceCache> cache;
  std::vector<uint16_t> tk, tv;  // run-time tables (kept alive for the view)
};

// A cache of n positions, filled in 64-position ubatches through the journal policy.
void build(const Case& c, const Rows& rows, uint32_t n, Built& b) {
  const CodecConfig cfg = make_cfg(c);
  CacheShape shape;
  shape.n_layers = 1;
  shape.n_head_kv = rows.H;
  shape.n_ctx = n;
  shape.n_ubatch = 64;
  SealOptions opt;
  opt.iters = cfg.iters;
  opt.balance = cfg.balance;
  if (c.runtime_tables) {
    b.tk = runtime_table(Side::k, c.bk);
    b.tv = runtime_table(Side::v, c.bv);
    opt.codebooks = TrellisCodebooks{b.tk.data(), b.tv.data()};
  }
  b.cache.reset(new SequenceCache(cfg, shape, opt));
  ASSERT_TRUE(b.cache->status().ok()) << b.cache->status().message();
  const size_t per = static_cast<size_t>(rows.H) * rows.D;
  for (uint32_t p = 0; p < n; p += 64) {
    const uint32_t m = std::min(64u, n - p);
    const Status s1 = b.cache->begin_ubatch(p, m);
    ASSERT_TRUE(s1.ok()) << s1.message();
    const Status s2 = b.cache->store_ubatch(p, m, rows.k.data() + p * per, rows.v.data() + p * per);
    ASSERT_TRUE(s2.ok()) << s2.message();
  }
}

// Query rows [H][n_rep][D]: an unrotated key of some earlier position plus noise, rotated,
// scaled so its logits over [0, end) have standard deviation 2.5.
std::vector<float> make_queries(const Rows& r, uint32_t rot, uint32_t n_rep, uint32_t end, float scale,
                                const CacheView& view, XorShift64& rng) {
  const uint32_t D = r.D;
  std::vector<float> q(static_cast<size_t>(r.H) * n_rep * D), kb(D), vb(D);
  for (uint32_t h = 0; h < r.H; ++h)
    for (uint32_t j = 0; j < n_rep; ++j) {
      float* qr = &q[(static_cast<size_t>(h) * n_rep + j) * D];
      const uint32_t src = rng.next() % end;
      const float* kr = &r.k_raw[(static_cast<size_t>(src) * r.H + h) * D];
      for (uint32_t d = 0; d < D; ++d) qr[d] = kr[d] + static_cast<float>(rng.gauss()) / 4096.0f;
      hadamard_blocks(qr, D, rot);
      double s1 = 0, s2 = 0;
      for (uint32_t p = 0; p < end; ++p) {
        resolve_row(view, p, h, kb.data(), vb.data());
        double dot = 0;
        for (uint32_t d = 0; d < D; ++d) dot += static_cast<double>(qr[d]) * kb[d];
        dot *= scale;
        s1 += dot;
        s2 += dot * dot;
      }
      const double var = s2 / end - (s1 / end) * (s1 / end);
      const float f = var > 0 ? static_cast<float>(2.5 / std::sqrt(var)) : 1.0f;
      for (uint32_t d = 0; d < D; ++d) qr[d] *= f;
    }
  return q;
}

// Binary64 softmax attention over the resolved rows of head h.
std::vector<double> exact_attention(const CacheView& view, const float* q, uint32_t h, uint32_t end, float scale) {
  const uint32_t D = view.head_dim();
  std::vector<float> K(static_cast<size_t>(end) * D), V(K.size());
  for (uint32_t p = 0; p < end; ++p) resolve_row(view, p, h, &K[static_cast<size_t>(p) * D], &V[static_cast<size_t>(p) * D]);
  std::vector<double> s(end), out(D, 0.0);
  double m = -INFINITY, S = 0;
  for (uint32_t p = 0; p < end; ++p) {
    double dot = 0;
    for (uint32_t d = 0; d < D; ++d) dot += static_cast<double>(q[d]) * K[static_cast<size_t>(p) * D + d];
    s[p] = dot * static_cast<double>(scale);
    m = std::max(m, s[p]);
  }
  for (uint32_t p = 0; p < end; ++p) {
    const double w = std::exp(s[p] - m);
    S += w;
    for (uint32_t d = 0; d < D; ++d) out[d] += w * V[static_cast<size_t>(p) * D + d];
  }
  for (double& o : out) o /= S;
  return out;
}

// The span and merge kernels run lane by lane on the CPU with the same host-device steps
// (attention_cuda.h): decoded values, lane partial dot products, the xor-butterfly sum and
// the merge order are those of the GPU, so the only difference left is expf.
template <int CPL>
void emulate_cpl(const CacheView& v, const std::vector<float>& q, uint32_t n_rep, uint32_t qpos, float scale,
                 uint32_t span, std::vector<float>& out) {
  constexpr uint32_t D = CPL * 32;
  const uint32_t H = v.n_head_kv, end = std::min(v.N, qpos + 1), rows = H * n_rep;
  out.assign(static_cast<size_t>(rows) * D, 0.0f);
  if (end == 0) return;
  const uint32_t n_spans = (end + span - 1) / span;
  const bool tr = v.layout.body == Body::trellis;
  const uint16_t* tk = tr ? codebook_table(v.codebooks, Side::k, v.layout.bits_k) : nullptr;
  const uint16_t* tv = tr ? codebook_table(v.codebooks, Side::v, v.layout.bits_v) : nullptr;
  std::vector<float> pm(static_cast<size_t>(rows) * n_spans), pS(pm.size()), pacc(pm.size() * D);
  for (uint32_t row = 0; row < rows; ++row) {
    const uint32_t h = row / n_rep;
    for (uint32_t s = 0; s < n_spans; ++s) {
      cuda::LaneRecordFactors<CPL> f[32];
      float m[32], S[32], acc[32][CPL], kv[32][CPL], vv[32][CPL], part[32], tmp[32];
      for (int l = 0; l < 32; ++l) {
        m[l] = -INFINITY;
        S[l] = 0.0f;
        for (int k = 0; k < CPL; ++k) acc[l][k] = 0.0f;
      }
      for (uint32_t p = s * span; p < std::min(end, (s + 1) * span); ++p) {
        for (uint32_t l = 0; l < 32; ++l) {
          cuda::attention_lane_rows<CPL>(v, p, h, l * CPL, tk, tv, f[l], kv[l], vv[l]);
          part[l] = cuda::attention_lane_dot<CPL>([&](int k) { return q[static_cast<size_t>(row) * D + l * CPL + k]; },
                                                  kv[l]);
        }
        for (uint32_t o = 16; o > 0; o >>= 1) {
          for (uint32_t l = 0; l < 32; ++l) tmp[l] = op::fadd(part[l], part[l ^ o]);
          std::copy(tmp, tmp + 32, part);
        }
        for (uint32_t l = 0; l < 32; ++l) {
          ASSERT_EQ(f32_bits(part[l]), f32_bits(part[0])) << "butterfly lanes disagree";
          cuda::attention_lane_update<CPL>(op::fmul(part[l], scale), m[l], S[l], acc[l], vv[l]);
        }
      }
      const size_t idx = static_cast<size_t>(row) * n_spans + s;
      pm[idx] = m[0];
      pS[idx] = S[0];
      for (uint32_t l = 0; l < 32; ++l)
        for (int k = 0; k < CPL; ++k) pacc[idx * D + l * CPL + k] = acc[l][k];
    }
    for (uint32_t d = 0; d < D; ++d)
      out[static_cast<size_t>(row) * D + d] =
          cuda::attention_merge_value(n_spans, &pm[static_cast<size_t>(row) * n_spans],
                                      &pS[static_cast<size_t>(row) * n_spans],
                                      [&](uint32_t sp) { return pacc[(static_cast<size_t>(row) * n_spans + sp) * D + d]; });
  }
}

void emulate(const CacheView& v, const std::vector<float>& q, uint32_t n_rep, uint32_t qpos, float scale, uint32_t span,
             std::vector<float>& out) {
  switch (v.head_dim()) {
    case 32: emulate_cpl<1>(v, q, n_rep, qpos, scale, span, out); break;
    case 64: emulate_cpl<2>(v, q, n_rep, qpos, scale, span, out); break;
    case 128: emulate_cpl<4>(v, q, n_rep, qpos, scale, span, out); break;
    case 256: emulate_cpl<8>(v, q, n_rep, qpos, scale, span, out); break;
    case 512: emulate_cpl<16>(v, q, n_rep, qpos, scale, span, out); break;
    default: FAIL() << "head_dim " << v.head_dim();
  }
}

// Max |x - exact| against the binary64 softmax, over a row, with the row's magnitude.
struct RowError {
  double err = 0, mag = 0;
};
RowError row_error(const float* x, const std::vector<double>& ex) {
  RowError e;
  for (size_t d = 0; d < ex.size(); ++d) {
    e.mag = std::max(e.mag, std::fabs(ex[d]));
    e.err = std::max(e.err, std::fabs(x[d] - ex[d]));
  }
  return e;
}

void check(cudaError_t e, const char* what) { ASSERT_EQ(e, cudaSuccess) << what << ": " << cudaGetErrorString(e); }

// Runs the device API on a poisoned output buffer followed by a guard region; returns the
// outputs and checks the guard.
void run_gpu(const cuda::DeviceCacheView& dv, const std::vector<float>& q, uint32_t n_rep, uint32_t qpos, float scale,
             uint32_t span, std::vector<float>& out) {
  constexpr size_t kGuard = 256;
  const size_t n = q.size();
  float *dq = nullptr, *dout = nullptr;
  void* ws = nullptr;
  cuda::AttentionArgs a;
  a.view = dv.view();
  a.n_rep = n_rep;
  a.qpos = qpos;
  a.scale = scale;
  a.span = span;
  a.workspace_bytes = cuda::attention_workspace_bytes(a.view, n_rep, qpos, span);
  ASSERT_NO_FATAL_FAILURE(check(cudaMalloc(&dq, n * 4), "malloc q"));
  ASSERT_NO_FATAL_FAILURE(check(cudaMalloc(&dout, (n + kGuard) * 4), "malloc out"));
  ASSERT_NO_FATAL_FAILURE(check(cudaMalloc(&ws, a.workspace_bytes), "malloc workspace"));
  ASSERT_NO_FATAL_FAILURE(check(cudaMemcpy(dq, q.data(), n * 4, cudaMemcpyHostToDevice), "copy q"));
  ASSERT_NO_FATAL_FAILURE(check(cudaMemset(dout, 0xFF, (n + kGuard) * 4), "poison out"));  // NaN everywhere
  ASSERT_NO_FATAL_FAILURE(check(cudaMemset(ws, 0xFF, a.workspace_bytes), "poison workspace"));
  a.q = dq;
  a.out = dout;
  a.workspace = ws;
  ASSERT_EQ(cuda::attention_decode(a), "");
  ASSERT_NO_FATAL_FAILURE(check(cudaDeviceSynchronize(), "attention kernels"));
  std::vector<float> all(n + kGuard);
  ASSERT_NO_FATAL_FAILURE(check(cudaMemcpy(all.data(), dout, all.size() * 4, cudaMemcpyDeviceToHost), "copy out"));
  cudaFree(dq);
  cudaFree(dout);
  cudaFree(ws);
  for (size_t i = n; i < all.size(); ++i) {
    uint32_t u;
    std::memcpy(&u, &all[i], 4);
    ASSERT_EQ(u, 0xFFFFFFFFu) << "guard overwritten at " << i - n;
  }
  out.assign(all.begin(), all.begin() + static_cast<long>(n));
}

class GpuAttention : public ::testing::TestWithParam<Case> {};

TEST_P(GpuAttention, MatchesReferenceWithinTolerance) {
  SJKV_REQUIRE_GPU();
  const Case c = GetParam();
  const uint32_t H = 2, D = c.D;
  const CodecConfig cfg = make_cfg(c);
  const Rows rows = make_rows(D, H, 4000, cfg.rotation(), 17 + c.bk * 5 + c.bv);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  XorShift64 rng(4242);
  // Inside the sink, sink + body + ring, and long (several seals, wrapped ring).
  for (uint32_t n : {100u, 1300u, 4000u}) {
    Built b;
    ASSERT_NO_FATAL_FAILURE(build(c, rows, n, b));
    const CacheView view = b.cache->view(0);
    if (n == 4000) {
      ASSERT_GT(view.B, 3000u) << "long case should have a long body";
      ASSERT_LT(view.B, view.N) << "long case should have ring rows";
    }
    cuda::DeviceCacheView dv;
    ASSERT_EQ(dv.upload(view), "");
    std::vector<uint32_t> qposes = {n - 1};
    if (n > 1000) qposes.push_back(n / 2 + 17);  // attend to a prefix only
    for (uint32_t qpos : qposes)
      for (uint32_t n_rep : {1u, 3u, 4u, 12u}) {
        const uint32_t end = std::min(view.N, qpos + 1);
        const std::vector<float> q = make_queries(rows, cfg.rotation(), n_rep, end, scale, view, rng);
        // CPU binary32 reference and binary64 softmax of every row, once for all spans.
        std::vector<float> refs(q.size()), kbuf(D), vbuf(D);
        std::vector<std::vector<double>> exact(static_cast<size_t>(H) * n_rep);
        for (uint32_t h = 0; h < H; ++h)
          for (uint32_t j = 0; j < n_rep; ++j) {
            const size_t row = static_cast<size_t>(h) * n_rep + j;
            attention_ref(view, &q[row * D], h, qpos, scale, &refs[row * D], kbuf.data(), vbuf.data());
            exact[row] = exact_attention(view, &q[row * D], h, end, scale);
          }
        // default span, spans cutting records at odd places, one span for everything
        for (uint32_t span : {0u, 7u, 1u << 20}) {
          std::vector<float> gpu, again;
          ASSERT_NO_FATAL_FAILURE(run_gpu(dv, q, n_rep, qpos, scale, span, gpu));
          ASSERT_NO_FATAL_FAILURE(run_gpu(dv, q, n_rep, qpos, scale, span, again));
          ASSERT_EQ(0, std::memcmp(gpu.data(), again.data(), gpu.size() * 4)) << "not deterministic";
          // Same steps on the CPU: equal up to the device expf (a few ulps in the weights).
          // Once per query set (the emulation is slow), with the span that cuts records most.
          std::vector<float> emu;
          if (span == 7 && n_rep <= 4) {
            ASSERT_NO_FATAL_FAILURE(emulate(view, q, n_rep, qpos, scale, span, emu));
          }
          for (size_t i = 0; i < emu.size(); ++i) {
            const double mag = row_error(&refs[(i / D) * D], exact[i / D]).mag;
            ASSERT_LE(std::fabs(gpu[i] - emu[i]), std::ldexp(mag, -18))
                << c.name << " n " << n << " qpos " << qpos << " n_rep " << n_rep << " span " << span << " element "
                << i << ": gpu " << gpu[i] << " cpu lane emulation " << emu[i];
          }
          for (uint32_t h = 0; h < H; ++h)
            for (uint32_t j = 0; j < n_rep; ++j) {
              const size_t row = static_cast<size_t>(h) * n_rep + j;
              const float* ref = &refs[row * D];
              const std::vector<double>& ex = exact[row];
              double mag = 0, err_ref = 0, err_gpu = 0;
              for (uint32_t d = 0; d < D; ++d) {
                const float g = gpu[row * D + d];
                ASSERT_TRUE(std::isfinite(g)) << "row " << row << " d " << d;
                mag = std::max(mag, std::fabs(ex[d]));
                err_ref = std::max(err_ref, std::fabs(ref[d] - ex[d]));
                err_gpu = std::max(err_gpu, std::fabs(g - ex[d]));
              }
              ASSERT_GT(mag, 0.0) << "output is all zeros";
              EXPECT_LE(err_gpu, 2.0 * err_ref + std::ldexp(mag, -20))
                  << c.name << " n " << n << " qpos " << qpos << " n_rep " << n_rep << " span " << span << " head "
                  << h << " row " << j << ": gpu err " << err_gpu / mag << " ref err " << err_ref / mag;
            }
        }
      }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Configs, GpuAttention,
    ::testing::Values(Case{"s44_tq6_sinkf16", 128, 4, 4, Body::scalar, StagingType::tq6_0, SinkType::f16, false},
                      Case{"t32_q8_inherit", 128, 3, 2, Body::trellis, StagingType::q8_0, SinkType::inherit, false},
                      Case{"t22_tq6_inherit", 128, 2, 2, Body::trellis, StagingType::tq6_0, SinkType::inherit, false},
                      Case{"s42_q8_sinkf16", 128, 4, 2, Body::scalar, StagingType::q8_0, SinkType::f16, false},
                      Case{"t32_tq6_sinkf16_runtime", 128, 3, 2, Body::trellis, StagingType::tq6_0, SinkType::f16,
                           true},
                      Case{"t44_q8_sinkf16_runtime", 128, 4, 4, Body::trellis, StagingType::q8_0, SinkType::f16, true},
                      Case{"t33_f16_inherit", 128, 3, 3, Body::trellis, StagingType::f16, SinkType::inherit, false},
                      Case{"D256_s44_tq6_inherit", 256, 4, 4, Body::scalar, StagingType::tq6_0, SinkType::inherit,
                           false},
                      Case{"D256_t32_q8_sinkf16", 256, 3, 2, Body::trellis, StagingType::q8_0, SinkType::f16, false},
                      Case{"D64_s44_q8_inherit", 64, 4, 4, Body::scalar, StagingType::q8_0, SinkType::inherit, false},
                      Case{"D512_s43_q8_sinkf16", 512, 4, 3, Body::scalar, StagingType::q8_0, SinkType::f16, false}),
    [](const ::testing::TestParamInfo<Case>& i) { return std::string(i.param.name); });

TEST(GpuAttentionHost, ConvenienceApiMatchesDeviceApi) {
  SJKV_REQUIRE_GPU();
  const Case c{"t32", 128, 3, 2, Body::trellis, StagingType::tq6_0, SinkType::f16, false};
  const Rows rows = make_rows(128, 2, 1500, 128, 5);
  Built b;
  ASSERT_NO_FATAL_FAILURE(build(c, rows, 1500, b));
  const CacheView view = b.cache->view(0);
  XorShift64 rng(3);
  const float scale = 1.0f / std::sqrt(128.0f);
  const std::vector<float> q = make_queries(rows, 128, 4, 1500, scale, view, rng);
  std::vector<float> host(q.size()), dev;
  ASSERT_EQ(cuda::attention_decode_host(view, q.data(), 4, 1499, scale, host.data()), "");
  cuda::DeviceCacheView dv;
  ASSERT_EQ(dv.upload(view), "");
  ASSERT_NO_FATAL_FAILURE(run_gpu(dv, q, 4, 1499, scale, 0, dev));
  EXPECT_EQ(0, std::memcmp(host.data(), dev.data(), host.size() * 4));
}

// ---- host-device helpers, checked on the CPU (no GPU needed) ---------------------------------

// The kernels' steps run lane by lane on the CPU against the reference, with the same
// tolerance as the GPU test: every region, body type, GQA width and span cut.
TEST(AttentionHelpers, LaneEmulationMatchesReferenceWithinTolerance) {
  const Case cases[] = {
      {"s44_tq6_sinkf16", 128, 4, 4, Body::scalar, StagingType::tq6_0, SinkType::f16, false},
      {"t32_q8_inherit", 128, 3, 2, Body::trellis, StagingType::q8_0, SinkType::inherit, false},
      {"t44_q8_runtime", 128, 4, 4, Body::trellis, StagingType::q8_0, SinkType::f16, true},
      {"D64_s42_f16_inherit", 64, 4, 2, Body::scalar, StagingType::f16, SinkType::inherit, false},
  };
  for (const Case& c : cases) {
    const CodecConfig cfg = make_cfg(c);
    const uint32_t H = 2, D = c.D, n = 1300;
    const Rows rows = make_rows(D, H, n, cfg.rotation(), 99 + c.bk);
    Built b;
    ASSERT_NO_FATAL_FAILURE(build(c, rows, n, b));
    const CacheView view = b.cache->view(0);
    ASSERT_GT(view.B, view.sink);
    ASSERT_LT(view.B, view.N);
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    XorShift64 rng(12);
    for (uint32_t qpos : {90u, 700u, n - 1})
      for (uint32_t n_rep : {1u, 3u}) {
        const uint32_t end = std::min(view.N, qpos + 1);
        const std::vector<float> q = make_queries(rows, cfg.rotation(), n_rep, end, scale, view, rng);
        std::vector<float> ref(D), kbuf(D), vbuf(D), emu;
        for (uint32_t span : {7u, 128u, 1u << 20}) {
          ASSERT_NO_FATAL_FAILURE(emulate(view, q, n_rep, qpos, scale, span, emu));
          for (uint32_t row = 0; row < H * n_rep; ++row) {
            const uint32_t h = row / n_rep;
            attention_ref(view, &q[static_cast<size_t>(row) * D], h, qpos, scale, ref.data(), kbuf.data(), vbuf.data());
            const std::vector<double> ex = exact_attention(view, &q[static_cast<size_t>(row) * D], h, end, scale);
            const RowError er = row_error(ref.data(), ex), ee = row_error(&emu[static_cast<size_t>(row) * D], ex);
            ASSERT_GT(er.mag, 0.0);
            EXPECT_LE(ee.err, 2.0 * er.err + std::ldexp(er.mag, -20))
                << c.name << " qpos " << qpos << " n_rep " << n_rep << " span " << span << " row " << row
                << ": emulation err " << ee.err / er.mag << " ref err " << er.err / er.mag;
          }
        }
      }
  }
}


TEST(AttentionHelpers, PerElementRecordDecodeEqualsRowDecode) {
  struct Cfg {
    uint32_t bk, bv;
    Body body;
  };
  for (uint32_t D : {128u, 256u})
    for (const Cfg& k : {Cfg{4, 4, Body::scalar}, Cfg{4, 2, Body::scalar}, Cfg{2, 4, Body::scalar}, Cfg{3, 3, Body::scalar},
                         Cfg{3, 2, Body::trellis}, Cfg{2, 2, Body::trellis}, Cfg{3, 3, Body::trellis}, Cfg{4, 4, Body::trellis}})
      for (TrellisAxis axis : {TrellisAxis::token, TrellisAxis::channel}) {
        if (k.body == Body::scalar && axis == TrellisAxis::channel) continue;
        const RecordLayout l = make_layout(D, 128, k.bk, k.bv, k.body, axis);
        std::vector<uint16_t> K(128 * D), V(128 * D);
        std::vector<int32_t> chf(D);
        fill_group(D, 128, 9 + k.bk, K.data(), V.data(), chf.data());
        std::vector<uint8_t> rec(l.bytes);
        SealWorkspace ws;
        SealOptions o;
        ASSERT_TRUE(seal_record(l, o, K.data(), V.data(), D, rec.data(), ws, SealPath::reference).ok());
        std::vector<float> kr(D), vr(D);
        for (uint32_t t = 0; t < 128; ++t) {
          decode_k_row_ref(l, rec.data(), t, kr.data());
          decode_v_row_ref(l, rec.data(), t, vr.data());
          for (uint32_t d = 0; d < D; ++d) {
            const float kd = decode_k_value(l, rec.data(), t, d), vd = decode_v_value(l, rec.data(), t, d);
            ASSERT_EQ(0, std::memcmp(&kd, &kr[d], 4)) << "K t " << t << " d " << d;
            ASSERT_EQ(0, std::memcmp(&vd, &vr[d], 4)) << "V t " << t << " d " << d;
          }
        }
      }
}

TEST(AttentionHelpers, PerElementStagingDecodeEqualsRowDecode) {
  const uint32_t D = 256;
  std::vector<float> x(D), row(D);
  XorShift64 rng(11);
  for (StagingType t : {StagingType::tq6_0, StagingType::q8_0, StagingType::f16})
    for (int rep = 0; rep < 20; ++rep) {
      for (uint32_t d = 0; d < D; ++d) x[d] = static_cast<float>(rng.gauss()) / 700.0f * (d % 29 == 0 ? 11 : 1);
      std::vector<uint8_t> st(staging_row_bytes(t, D));
      ASSERT_TRUE(staging_encode_row(t, x.data(), D, st.data()));
      staging_decode_row(t, st.data(), D, row.data());
      for (uint32_t d = 0; d < D; ++d) {
        const float e = staging_decode_value(t, st.data(), d);
        ASSERT_EQ(0, std::memcmp(&e, &row[d], 4)) << staging_name(t) << " d " << d;
      }
    }
}

TEST(AttentionHelpers, BytesReadCountsEveryRegion) {
  CacheView v;
  v.layout = make_layout(128, 128, 4, 4, Body::scalar);
  v.n_head_kv = 2;
  v.sink = 128;
  v.cap = 768;
  v.staging = StagingType::tq6_0;
  v.B = 128 + 3 * 128;
  v.N = v.B + 50;
  const size_t rb = staging_row_bytes(v.staging, 128);
  EXPECT_EQ(cuda::DeviceCacheView::bytes_read(v, v.N), 128u * 2 * 4 * 128 + 3u * 2 * v.layout.bytes + 50u * 2 * 2 * rb);
  v.sink_inherit = 1;
  EXPECT_EQ(cuda::DeviceCacheView::bytes_read(v, 100), 100u * 2 * 2 * rb);
}

}  // namespace
