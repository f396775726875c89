// Fused decode attention on the GPU against the CPU reference attention (docs/SPEC.md §9.7) over
// caches built by SequenceCache (journal policy, real seals), every body and staging type.
//
// Tolerance, FlashAttention style: both results are compared with a binary64 softmax over
// the same decoded rows (resolve_row); the GPU error must be at most 4x the error of the
// binary32 CPU reference plus 2^-17 of the output's magnitude (the unfolded kernel had 2x
// and 2^-20). Why looser: the kernels fold the record's scales into the query and the
// softmax weights (attn_fold.h), so a body score is rounded as tok*(c0 + sum qs*code) where
// c0 = sum q*Kzero and the code sum nearly cancel (zero points are about -lo*scale); its
// rounding error is a few times the reference's (the CPU emulation measured 3.4x the
// reference error, 3.3e-6 of the magnitude, for 4/4 at n_rep 8). The worst-case bound of
// that arithmetic is checked per score and per V sum in FoldedRecordMathMatchesDecodedRows.
// NaN never passes (isfinite checks).
// The CPU emulation of the kernels (same functions, same reduction orders) must match the
// GPU to 2^-18 of the magnitude (only expf differs).
//
// The helper tests at the end (folded math, per-element decode, emulation) run without a GPU.
#include <gtest/gtest.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "gpu_test.h"
#include "sjkv/cache.h"
#include "sjkv/cache_view.h"
#include "sjkv/cuda/attention_cuda.h"
#include "sjkv/cuda/codec_cuda.h"
#include "sjkv/hadamard.h"
#include "sjkv/testgen.h"

using namespace sjkv;

namespace {

struct Case {
  const char* name;
  uint32_t D, bk, bv;
  Body body;
  StagingType staging;
  SinkType sink;
  bool runtime_tables;  // trellis sealed and decoded with non-reference tables
  TrellisAxis axis = TrellisAxis::token;
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
  cfg.trellis_axis = c.axis;
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

// The item and merge kernels step by step on the CPU with the same host-device functions
// (attn_fold.h) and the same reduction orders (lane partials, xor butterflies, thread-pair
// and token-slice sums, merge in item order), so the only difference left is expf.
uint32_t rows_per_block(uint32_t n_rep) {
  uint32_t rb = 1;
  while (rb < n_rep && rb < 8) rb *= 2;
  return rb;
}

void emulate(const CacheView& v, const std::vector<float>& q, uint32_t n_rep, uint32_t qpos, float scale,
             uint32_t span, std::vector<float>& out) {
  constexpr int NR = 8;  // rows are independent: padding to 8 gives each row the same bits
  constexpr uint32_t kThreads = 256, kMaxP = 256;
  const RecordLayout& l = v.layout;
  const uint32_t D = l.head_dim, H = v.n_head_kv, end = std::min(v.N, qpos + 1);
  const uint32_t rows = span == 0 || span > 128 ? 128 : span;
  const attn::Items it = attn::make_items(v, end, rows);
  const uint32_t n_items = it.count(), nsl = D >= kThreads ? 1 : kThreads / D, rb = rows_per_block(n_rep);
  const uint16_t* tk = l.body == Body::trellis ? codebook_table(v.codebooks, Side::k, l.bits_k) : nullptr;
  const uint16_t* tv = l.body == Body::trellis ? codebook_table(v.codebooks, Side::v, l.bits_v) : nullptr;
  std::vector<float> tfk(1024), tfv(1024);  // the kernels' binary32 copies of the tables
  for (uint32_t w = 0; tk && w < trellis_entries(l.bits_k); ++w) tfk[w] = f16_to_f32(tk[w]);
  for (uint32_t w = 0; tv && w < trellis_entries(l.bits_v); ++w) tfv[w] = f16_to_f32(tv[w]);
  std::vector<float> pm(static_cast<size_t>(H) * n_rep * n_items), pS(pm.size()), pacc(pm.size() * D);
  std::vector<float> qs(NR * D), ps(NR * kMaxP), vpart(static_cast<size_t>(nsl) * NR * D);
  for (uint32_t h = 0; h < H; ++h)
    for (uint32_t r0 = 0; r0 < n_rep; r0 += rb) {
      const uint32_t nr = std::min(rb, n_rep - r0);
      const float* qh = &q[(static_cast<size_t>(h) * n_rep + r0) * D];
      for (uint32_t item = 0; item < n_items; ++item) {
        uint32_t p0, p1, g;
        it.range(v, item, &p0, &p1, &g);
        const uint32_t P = p1 - p0;
        const bool body = g != ~0u;
        const uint8_t* rec = body ? v.body + (static_cast<size_t>(g) * H + h) * l.bytes : nullptr;
        float c0[NR] = {}, m[NR], S[NR], Z[NR];
        for (int r = 0; r < NR; ++r)
          for (uint32_t d = 0; d < D; ++d) {
            const float x = static_cast<uint32_t>(r) < nr ? qh[static_cast<size_t>(r) * D + d] : 0.0f;
            qs[d * NR + r] = body ? op::fmul(x, attn::k_scale_of(l, rec, d)) : x;
          }
        for (uint32_t r = 0; r < nr && body; ++r) {
          float lanes[32];
          for (uint32_t ln = 0; ln < 32; ++ln) {
            lanes[ln] = 0.0f;
            for (uint32_t d = ln; d < D; d += 32)
              lanes[ln] = attn::fma32(qh[static_cast<size_t>(r) * D + d], attn::k_zero_of(l, rec, d), lanes[ln]);
          }
          c0[r] = attn::butterfly_sum32(lanes);
        }
        for (uint32_t t = 0; t < P; ++t) {
          float part[2][NR];
          for (uint32_t half = 0; half < 2; ++half) {
            const uint32_t d0 = half * (D / 2), d1 = d0 + D / 2;
            if (body)
              attn::body_k_dot<NR>(l, rec, t, d0, d1, P == l.group, qs.data(), tk, tfk.data(), part[half]);
            else
              attn::dot_rows<NR>([&](uint32_t d) { return attn::row_value(v, p0 + t, h, Side::k, d); }, qs.data(),
                                 d0, d1, part[half]);
          }
          for (int r = 0; r < NR; ++r) {
            const float dot = op::fadd(part[0][r], part[1][r]);
            const float sc = body ? attn::k_score(attn::k_tok_of(l, rec, t), c0[r], dot) : dot;
            ps[t * NR + r] = op::fmul(sc, scale);
          }
        }
        for (uint32_t r = 0; r < nr; ++r) {
          float* pr = &ps[r];  // pr[t * NR]
          float lm[32], lS[32], lZ[32];
          for (uint32_t ln = 0; ln < 32; ++ln) {
            lm[ln] = -INFINITY;
            for (uint32_t t = ln; t < P; t += 32) lm[ln] = op::maxS(lm[ln], pr[t * NR]);
          }
          m[r] = attn::butterfly_max32(lm);
          for (uint32_t ln = 0; ln < 32; ++ln) {
            lS[ln] = lZ[ln] = 0.0f;
            for (uint32_t t = ln; t < P; t += 32) {
              const float p = expf(op::fsub(pr[t * NR], m[r]));
              lS[ln] = op::fadd(lS[ln], p);
              if (body) {
                lZ[ln] = attn::fma32(p, attn::v_zero_of(l, rec, t), lZ[ln]);
                pr[t * NR] = op::fmul(p, attn::v_scale_of(l, rec, t));
              } else {
                pr[t * NR] = p;
              }
            }
          }
          S[r] = attn::butterfly_sum32(lS);
          Z[r] = attn::butterfly_sum32(lZ);
        }
        const uint32_t chunk = (P + nsl - 1) / nsl;
        for (uint32_t sl = 0; sl < nsl; ++sl)
          for (uint32_t d = 0; d < D; ++d) {
            const uint32_t t0 = std::min(P, sl * chunk), t1 = std::min(P, t0 + chunk);
            float acc[NR];
            if (body)
              attn::body_v_dot<NR>(l, rec, d, t0, t1, P == l.group, ps.data(), tv, tfv.data(), acc);
            else
              attn::dot_rows<NR>([&](uint32_t t) { return attn::row_value(v, p0 + t, h, Side::v, d); }, ps.data(),
                                 t0, t1, acc);
            for (int r = 0; r < NR; ++r) vpart[(sl * NR + r) * D + d] = acc[r];
          }
        for (uint32_t r = 0; r < nr; ++r) {
          const size_t row = (static_cast<size_t>(h) * n_rep + r0 + r) * n_items + item;
          pm[row] = m[r];
          pS[row] = S[r];
          for (uint32_t d = 0; d < D; ++d) {
            float a = vpart[r * D + d];
            for (uint32_t sl = 1; sl < nsl; ++sl) a = op::fadd(a, vpart[(sl * NR + r) * D + d]);
            pacc[row * D + d] = body ? attn::v_value(attn::v_ch_of(l, rec, d), Z[r], a) : a;
          }
        }
      }
    }
  out.assign(static_cast<size_t>(H) * n_rep * D, 0.0f);
  std::vector<float> f(n_items);
  for (size_t row = 0; row < static_cast<size_t>(H) * n_rep; ++row) {
    const float* m = &pm[row * n_items];
    const float* S = &pS[row * n_items];
    const float M = attn::merge_max(n_items, m, S);
    for (uint32_t s = 0; s < n_items; ++s) f[s] = attn::merge_weight(m[s], S[s], M);
    float t[attn::kMergeChunks], a[attn::kMergeChunks];
    for (uint32_t c = 0; c < attn::kMergeChunks; ++c)
      t[c] = attn::merge_chunk_sum(n_items, c, S, f.data(), [&](uint32_t s) { return S[s]; });
    for (uint32_t d = 0; d < D; ++d) {
      for (uint32_t c = 0; c < attn::kMergeChunks; ++c)
        a[c] = attn::merge_chunk_sum(n_items, c, S, f.data(), [&](uint32_t s) { return pacc[(row * n_items + s) * D + d]; });
      out[row * D + d] = attn::merge_finish(a, t);
    }
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
      for (uint32_t n_rep : {1u, 2u, 3u, 8u, 12u}) {
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
          if (span == 7 && n_rep <= 4 && n < 4000) {
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
              EXPECT_LE(err_gpu, 4.0 * err_ref + std::ldexp(mag, -17))
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
                      Case{"D512_s43_q8_sinkf16", 512, 4, 3, Body::scalar, StagingType::q8_0, SinkType::f16, false},
                      Case{"t33_channel_q8_inherit", 128, 3, 3, Body::trellis, StagingType::q8_0, SinkType::inherit,
                           false, TrellisAxis::channel},
                      Case{"D256_t22_channel_tq6_sinkf16", 256, 2, 2, Body::trellis, StagingType::tq6_0, SinkType::f16,
                           false, TrellisAxis::channel},
                      Case{"s33_f16_sinkf16", 128, 3, 3, Body::scalar, StagingType::f16, SinkType::f16, false},
                      Case{"s22_tq6_inherit", 128, 2, 2, Body::scalar, StagingType::tq6_0, SinkType::inherit, false},
                      Case{"D512_t32_tq6_inherit", 512, 3, 2, Body::trellis, StagingType::tq6_0, SinkType::inherit,
                           false}),
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

// The kernels' steps run on the CPU against the reference, with the same tolerance as the
// GPU test: every region, body type, GQA width and span cut.
TEST(AttentionHelpers, KernelEmulationMatchesReferenceWithinTolerance) {
  const Case cases[] = {
      {"s44_tq6_sinkf16", 128, 4, 4, Body::scalar, StagingType::tq6_0, SinkType::f16, false},
      {"t32_q8_inherit", 128, 3, 2, Body::trellis, StagingType::q8_0, SinkType::inherit, false},
      {"t44_q8_runtime", 128, 4, 4, Body::trellis, StagingType::q8_0, SinkType::f16, true},
      {"D64_s42_f16_inherit", 64, 4, 2, Body::scalar, StagingType::f16, SinkType::inherit, false},
      {"D256_t32_tq6_sinkf16", 256, 3, 2, Body::trellis, StagingType::tq6_0, SinkType::f16, false},
      {"s22_tq6_inherit", 128, 2, 2, Body::scalar, StagingType::tq6_0, SinkType::inherit, false},
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
      for (uint32_t n_rep : {1u, 3u, 8u}) {
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
            EXPECT_LE(ee.err, 4.0 * er.err + std::ldexp(er.mag, -17))
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

// The folded score and V sum of every token/channel of real sealed records against the
// binary64 value of the same math over the decoded rows, within the worst-case rounding
// bound of the folded arithmetic ((D + 7) u times the sum of the absolute terms).
TEST(AttentionHelpers, FoldedRecordMathMatchesDecodedRows) {
  struct Cfg {
    uint32_t bk, bv;
    Body body;
  };
  const double u = std::ldexp(1.0, -24);
  for (uint32_t D : {128u, 256u})
    for (const Cfg& k : {Cfg{4, 4, Body::scalar}, Cfg{4, 2, Body::scalar}, Cfg{3, 3, Body::scalar},
                         Cfg{2, 2, Body::scalar}, Cfg{3, 2, Body::trellis}, Cfg{2, 2, Body::trellis},
                         Cfg{3, 3, Body::trellis}, Cfg{4, 4, Body::trellis}})
      for (TrellisAxis axis : {TrellisAxis::token, TrellisAxis::channel}) {
        if (k.body == Body::scalar && axis == TrellisAxis::channel) continue;
        const RecordLayout l = make_layout(D, 128, k.bk, k.bv, k.body, axis);
        std::vector<uint16_t> K(128 * D), V(128 * D);
        std::vector<int32_t> chf(D);
        fill_group(D, 128, 31 + k.bk + D, K.data(), V.data(), chf.data());
        std::vector<uint8_t> rec(l.bytes);
        SealWorkspace ws;
        SealOptions o;
        ASSERT_TRUE(seal_record(l, o, K.data(), V.data(), D, rec.data(), ws, SealPath::reference).ok());
        const uint16_t* tk = l.body == Body::trellis ? codebook_table(TrellisCodebooks{}, Side::k, l.bits_k) : nullptr;
        const uint16_t* tv = l.body == Body::trellis ? codebook_table(TrellisCodebooks{}, Side::v, l.bits_v) : nullptr;
        std::vector<float> tfk(1024), tfv(1024);
        for (uint32_t w = 0; tk && w < trellis_entries(l.bits_k); ++w) tfk[w] = f16_to_f32(tk[w]);
        for (uint32_t w = 0; tv && w < trellis_entries(l.bits_v); ++w) tfv[w] = f16_to_f32(tv[w]);
        XorShift64 rng(7 + D);
        constexpr int NR = 2;
        std::vector<float> q(NR * D), qs(NR * D), kr(D), vr(D), pw(128), pv(128);
        for (float& x : q) x = static_cast<float>(rng.gauss());
        for (int r = 0; r < NR; ++r)
          for (uint32_t d = 0; d < D; ++d) qs[d * NR + r] = op::fmul(q[r * D + d], attn::k_scale_of(l, rec.data(), d));
        float c0[NR] = {};
        for (int r = 0; r < NR; ++r)
          for (uint32_t d = 0; d < D; ++d) c0[r] = attn::fma32(q[r * D + d], attn::k_zero_of(l, rec.data(), d), c0[r]);
        std::vector<double> vex(D, 0.0);
        float Z = 0.0f;
        for (uint32_t t = 0; t < 128; ++t) {
          pw[t] = static_cast<float>(rng.next() % 1000u + 1u) / 1000.0f;
          pv[t] = op::fmul(pw[t], attn::v_scale_of(l, rec.data(), t));
          Z = attn::fma32(pw[t], attn::v_zero_of(l, rec.data(), t), Z);
        }
        for (uint32_t t = 0; t < 128; ++t) {
          decode_k_row_ref(l, rec.data(), t, kr.data());
          decode_v_row_ref(l, rec.data(), t, vr.data());
          for (uint32_t d = 0; d < D; ++d) vex[d] += static_cast<double>(pw[t]) * vr[d];
          float dot[NR], half[NR];  // the kernels' split: two halves, fragment fast path where it applies
          attn::body_k_dot<NR>(l, rec.data(), t, 0, D / 2, true, qs.data(), tk, tfk.data(), dot);
          attn::body_k_dot<NR>(l, rec.data(), t, D / 2, D, true, qs.data(), tk, tfk.data(), half);
          for (int r = 0; r < NR; ++r) dot[r] = op::fadd(dot[r], half[r]);
          const float tok = attn::k_tok_of(l, rec.data(), t);
          for (int r = 0; r < NR; ++r) {
            double ex = 0, M = 0;
            for (uint32_t d = 0; d < D; ++d) {
              ex += static_cast<double>(q[r * D + d]) * kr[d];
              M += std::fabs(q[r * D + d]) *
                   (std::fabs(static_cast<double>(attn::k_scale_of(l, rec.data(), d)) *
                              attn::code_k(l, rec.data(), t, d, tk)) +
                    std::fabs(attn::k_zero_of(l, rec.data(), d)));
            }
            // + 3 u per decoded value on the exact side (the reference rounds each value)
            const double bound = (D + 4 + 3) * u * std::fabs(tok) * M;
            const float sc = attn::k_score(tok, c0[r], dot[r]);
            ASSERT_TRUE(std::isfinite(sc));
            ASSERT_LE(std::fabs(sc - ex), bound) << "D " << D << " " << k.bk << "/" << k.bv << " t " << t << " row " << r;
          }
        }
        for (uint32_t d = 0; d < D; ++d) {
          float acc[1];
          attn::body_v_dot<1>(l, rec.data(), d, 0, 128, true, pv.data(), tv, tfv.data(), acc);
          const float out = attn::v_value(attn::v_ch_of(l, rec.data(), d), Z, acc[0]);
          double M = 0;
          for (uint32_t t = 0; t < 128; ++t)
            M += pw[t] * (std::fabs(static_cast<double>(attn::v_scale_of(l, rec.data(), t)) *
                                    attn::code_v(l, rec.data(), t, d, tv)) +
                          std::fabs(attn::v_zero_of(l, rec.data(), t)));
          const double bound = (128 + 4 + 3) * u * std::fabs(attn::v_ch_of(l, rec.data(), d)) * M;
          ASSERT_LE(std::fabs(out - vex[d]), bound) << "D " << D << " " << k.bk << "/" << k.bv << " V d " << d;
        }
      }
}

// The fragment fast path visits every code of a thread's range once with the right value:
// with small integer factors every sum is exact, so it must equal the per-element path.
TEST(AttentionHelpers, FragmentFastPathEqualsPerElementDecode) {
  for (uint32_t D : {32u, 64u, 128u, 256u, 512u}) {
    const RecordLayout l = make_layout(D, 128, 4, 4, Body::scalar);
    ASSERT_TRUE(l.k_fragment() && l.v_fragment());
    std::vector<uint8_t> rec(l.bytes);
    XorShift64 rng(D);
    for (uint8_t& b : rec) b = static_cast<uint8_t>(rng.next());
    constexpr int NR = 4;
    std::vector<float> x(NR * std::max(D, 128u));
    for (float& v : x) v = static_cast<float>(static_cast<int>(rng.next() % 7u) - 3);
    for (uint32_t t = 0; t < 128; t += 5)
      for (uint32_t d0 = 0; d0 < D; d0 += 16) {
        const uint32_t d1 = std::min(D, d0 + 16 * (1 + t % 3));
        float fast[NR], slow[NR];
        attn::body_k_dot<NR>(l, rec.data(), t, d0, d1, true, x.data(), nullptr, nullptr, fast);
        attn::dot_rows<NR>([&](uint32_t d) { return scalar_q(l, rec.data(), Side::k, t, d); }, x.data(), d0, d1, slow);
        for (int r = 0; r < NR; ++r) ASSERT_EQ(fast[r], slow[r]) << "K D " << D << " t " << t << " d0 " << d0;
      }
    for (uint32_t d = 0; d < D; d += 3)
      for (uint32_t t0 = 0; t0 < 128; t0 += 16) {
        const uint32_t t1 = std::min(128u, t0 + 16 * (1 + d % 4));
        float fast[NR], slow[NR];
        attn::body_v_dot<NR>(l, rec.data(), d, t0, t1, true, x.data(), nullptr, nullptr, fast);
        attn::dot_rows<NR>([&](uint32_t t) { return scalar_q(l, rec.data(), Side::v, t, d); }, x.data(), t0, t1, slow);
        for (int r = 0; r < NR; ++r) ASSERT_EQ(fast[r], slow[r]) << "V D " << D << " d " << d << " t0 " << t0;
      }
  }
}

// The trellis readers (slide and stride, both axes, 2..4 bits) give the same bits as the
// per-element window decode with the same summation order, for any range of a random record.
TEST(AttentionHelpers, TrellisReadersEqualPerElementDecode) {
  struct W {
    uint32_t bk, bv;
  };
  for (uint32_t D : {128u, 256u})
    for (const W& wb : {W{3, 2}, W{2, 2}, W{3, 3}, W{4, 4}})
      for (TrellisAxis axis : {TrellisAxis::token, TrellisAxis::channel}) {
        const RecordLayout l = make_layout(D, 128, wb.bk, wb.bv, Body::trellis, axis);
        std::vector<uint8_t> rec(l.bytes);
        XorShift64 rng(D * 7 + wb.bk * 3 + wb.bv + static_cast<uint32_t>(axis));
        for (uint8_t& b : rec) b = static_cast<uint8_t>(rng.next());
        const uint16_t* tk = codebook_table(TrellisCodebooks{}, Side::k, wb.bk);
        const uint16_t* tv = codebook_table(TrellisCodebooks{}, Side::v, wb.bv);
        std::vector<float> tfk(1024), tfv(1024);
        for (uint32_t w = 0; w < trellis_entries(wb.bk); ++w) tfk[w] = f16_to_f32(tk[w]);
        for (uint32_t w = 0; w < trellis_entries(wb.bv); ++w) tfv[w] = f16_to_f32(tv[w]);
        constexpr int NR = 2;
        std::vector<float> x(NR * D);
        for (float& v : x) v = static_cast<float>(rng.gauss());
        for (uint32_t t = 0; t < 128; t += 3)
          for (uint32_t d0 : {0u, 5u, D / 2}) {
            const uint32_t d1 = std::min(D, d0 + 1 + (t * 37) % D);
            float fast[NR], slow[NR];
            attn::body_k_dot<NR>(l, rec.data(), t, d0, d1, true, x.data(), tk, tfk.data(), fast);
            attn::dot_rows<NR>([&](uint32_t d) { return record_q(l, rec.data(), Side::k, t, d, tk); }, x.data(), d0, d1,
                               slow);
            for (int r = 0; r < NR; ++r)
              ASSERT_EQ(f32_bits(fast[r]), f32_bits(slow[r])) << "K D " << D << " t " << t << " d0 " << d0;
          }
        for (uint32_t d = 0; d < D; d += 7)
          for (uint32_t t0 : {0u, 1u, 2u, 3u, 64u}) {
            const uint32_t t1 = std::min(128u, t0 + 1 + (d * 13) % 128);
            float fast[NR], slow[NR];
            attn::body_v_dot<NR>(l, rec.data(), d, t0, t1, true, x.data(), tv, tfv.data(), fast);
            attn::dot_rows<NR>([&](uint32_t t) { return record_q(l, rec.data(), Side::v, t, d, tv); }, x.data(), t0, t1,
                               slow);
            for (int r = 0; r < NR; ++r)
              ASSERT_EQ(f32_bits(fast[r]), f32_bits(slow[r])) << "V D " << D << " d " << d << " t0 " << t0;
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
