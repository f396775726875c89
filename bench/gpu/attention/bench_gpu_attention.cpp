// Fused decode attention at a 110,592-token context, D = 256, 8 query heads over 1, 2 or 4 KV
// heads (GQA 8/4/2 rows per KV head), fp16 sink + sealed body + tq6_0 ring, bodies 4/4
// (scalar) and 3/2 (trellis). Reports the cache bytes read per call over the median time,
// and that as a share of the device-to-device copy bandwidth measured here.
//
// Copy bandwidth convention: a cudaMemcpy of B bytes device to device reads B and writes B,
// so it moves 2B bytes of HBM traffic; that figure is the reference.
//
// The body is a pool of 64 distinct sealed records (fill_group tiles) repeated over the
// context: the kernel's work and traffic do not depend on which records they are.
//
// Then the case that makes the bandwidth meaningful: a 16-layer, 4-KV-head, D = 256 model
// (8 query heads, n_rep 2) at the same context, 4/4 and 3/2t; the 16 layers are 16 separate
// caches decoded by back-to-back attention_decode calls on one stream (one layer after
// another, as a decoder step runs them); bytes are all layers' cache bytes over that time.
//
// Usage: bench_gpu_attention [reps]     (default 50)
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "sjkv/cuda/attention_cuda.h"
#include "sjkv/cuda/codec_cuda.h"
#include "sjkv/policy.h"
#include "sjkv/seal.h"
#include "sjkv/testgen.h"

using namespace sjkv;

namespace {

#define CK(x)                                                                              \
  do {                                                                                     \
    const cudaError_t e_ = (x);                                                            \
    if (e_ != cudaSuccess) {                                                               \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)

constexpr uint32_t kContext = 110592, kD = 256, kSink = 128, kTail = 4096, kQHeads = 8;

float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median milliseconds of `reps` calls of f after 5 warm-up calls.
template <class F>
float time_ms(int reps, F f) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  for (int i = 0; i < 5; ++i) f();
  CK(cudaDeviceSynchronize());
  std::vector<float> t;
  for (int i = 0; i < reps; ++i) {
    CK(cudaEventRecord(a));
    f();
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms);
  }
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  return median(t);
}

struct HostCache {
  std::vector<uint16_t> sink;
  std::vector<uint8_t> ring, body;
  CacheView view;
};

HostCache make_cache(uint32_t bk, uint32_t bv, Body body, uint32_t H) {
  HostCache c;
  const RecordLayout l = make_layout(kD, 128, bk, bv, body);
  const StagingType st = StagingType::tq6_0;
  const uint32_t rb = staging_row_bytes(st, kD);
  const uint32_t groups = (kContext - kSink - kTail) / 128;
  const uint32_t B = kSink + groups * 128;
  const uint32_t cap = ring_capacity(kTail, 2 * kTail, 128, 512);
  // pool of sealed records
  const size_t pool = 64;
  std::vector<uint16_t> K(pool * 128 * kD), V(K.size());
  std::vector<int32_t> chf(kD);
  std::vector<const uint16_t*> kp(pool), vp(pool);
  for (size_t i = 0; i < pool; ++i) {
    fill_group(kD, 128, 1000 + i, &K[i * 128 * kD], &V[i * 128 * kD], chf.data());
    kp[i] = &K[i * 128 * kD];
    vp[i] = &V[i * 128 * kD];
  }
  std::vector<uint8_t> recs(pool * l.bytes);
  const Status s = seal_records(l, SealOptions{}, pool, kp.data(), vp.data(), kD, recs.data());
  if (!s.ok()) {
    std::fprintf(stderr, "seal failed: %s\n", s.message().c_str());
    std::exit(1);
  }
  c.body.resize(static_cast<size_t>(groups) * H * l.bytes);
  for (size_t r = 0; r < static_cast<size_t>(groups) * H; ++r)
    std::copy(recs.begin() + (r % pool) * l.bytes, recs.begin() + (r % pool + 1) * l.bytes, c.body.begin() + r * l.bytes);
  // fp16 sink and staged ring rows from the same tiles
  c.sink.resize(static_cast<size_t>(kSink) * H * 2 * kD);
  for (size_t i = 0; i < c.sink.size(); ++i) c.sink[i] = K[i % K.size()];
  c.ring.resize(static_cast<size_t>(cap) * H * 2 * rb);
  std::vector<float> x(kD);
  for (size_t row = 0; row < static_cast<size_t>(cap) * H * 2; ++row) {
    const uint16_t* src = &V[(row % (pool * 128)) * kD];
    for (uint32_t d = 0; d < kD; ++d) x[d] = f16_to_f32(src[d]);
    staging_encode_row(st, x.data(), kD, &c.ring[row * rb]);
  }
  c.view.layout = l;
  c.view.n_head_kv = H;
  c.view.sink = kSink;
  c.view.cap = cap;
  c.view.sink_inherit = 0;
  c.view.staging = st;
  c.view.sink_f16 = c.sink.data();
  c.view.ring = c.ring.data();
  c.view.body = c.body.data();
  c.view.B = B;
  c.view.N = kContext;
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 50;
  if (cuda::device_count() == 0) {
    std::fprintf(stderr, "bench_gpu_attention: no CUDA device present\n");
    return 2;
  }
  std::printf("device: %s\n", cuda::device_name(0).c_str());

  // Device-to-device copy bandwidth (1 GiB).
  const size_t copy_bytes = size_t(1) << 30;
  void *src = nullptr, *dst = nullptr;
  CK(cudaMalloc(&src, copy_bytes));
  CK(cudaMalloc(&dst, copy_bytes));
  CK(cudaMemset(src, 1, copy_bytes));
  const float copy_ms = time_ms(std::max(5, reps / 5), [&] { CK(cudaMemcpyAsync(dst, src, copy_bytes, cudaMemcpyDeviceToDevice)); });
  const double copy_gbps = 2.0 * copy_bytes / (copy_ms * 1e-3) / 1e9;
  CK(cudaFree(src));
  CK(cudaFree(dst));
  std::printf("device-to-device copy: %.3f ms for 1 GiB, %.1f GB/s (read + write)\n", copy_ms, copy_gbps);
  std::printf("RESULT d2d_copy_bandwidth %.1f GB/s\n", copy_gbps);

  struct Cfg {
    const char* name;
    uint32_t bk, bv;
    Body body;
  };
  std::printf("\n%-10s %3s %5s %10s %10s %10s %8s\n", "config", "Hkv", "n_rep", "MB read", "us", "GB/s", "% copy");
  for (const Cfg& cfg : {Cfg{"4_4", 4, 4, Body::scalar}, Cfg{"3_2t", 3, 2, Body::trellis}})
    for (uint32_t H : {1u, 2u, 4u}) {
      HostCache hc = make_cache(cfg.bk, cfg.bv, cfg.body, H);
      cuda::DeviceCacheView dv;
      const std::string err = dv.upload(hc.view);
      if (!err.empty()) {
        std::fprintf(stderr, "upload: %s\n", err.c_str());
        return 1;
      }
      const uint32_t n_rep = kQHeads / H;
      const size_t nq = static_cast<size_t>(H) * n_rep * kD;
      std::vector<float> q(nq);
      XorShift64 rng(5 + H);
      for (float& x : q) x = static_cast<float>(rng.gauss()) / 2048.0f;
      float *dq = nullptr, *dout = nullptr;
      void* ws = nullptr;
      cuda::AttentionArgs a;
      a.view = dv.view();
      a.n_rep = n_rep;
      a.qpos = kContext - 1;
      a.scale = 1.0f / 16.0f;
      a.workspace_bytes = cuda::attention_workspace_bytes(a.view, n_rep, a.qpos);
      CK(cudaMalloc(&dq, nq * 4));
      CK(cudaMalloc(&dout, nq * 4));
      CK(cudaMalloc(&ws, a.workspace_bytes));
      CK(cudaMemcpy(dq, q.data(), nq * 4, cudaMemcpyHostToDevice));
      a.q = dq;
      a.out = dout;
      a.workspace = ws;
      const float ms = time_ms(reps, [&] {
        const std::string e = cuda::attention_decode(a);
        if (!e.empty()) {
          std::fprintf(stderr, "attention_decode: %s\n", e.c_str());
          std::exit(1);
        }
      });
      CK(cudaDeviceSynchronize());
      std::vector<float> out(nq);
      CK(cudaMemcpy(out.data(), dout, nq * 4, cudaMemcpyDeviceToHost));
      for (float o : out)
        if (!std::isfinite(o)) {
          std::fprintf(stderr, "non-finite output\n");
          return 1;
        }
      const size_t bytes = cuda::DeviceCacheView::bytes_read(hc.view, kContext);
      const double gbps = bytes / (ms * 1e-3) / 1e9;
      const double pct = 100.0 * gbps / copy_gbps;
      std::printf("%-10s %3u %5u %10.2f %10.1f %10.1f %7.1f%%\n", cfg.name, H, n_rep, bytes / 1e6, ms * 1e3, gbps,
                  pct);
      std::printf("RESULT attn_%s_hkv%u_time %.2f us\n", cfg.name, H, ms * 1e3);
      std::printf("RESULT attn_%s_hkv%u_bandwidth %.1f GB/s\n", cfg.name, H, gbps);
      std::printf("RESULT attn_%s_hkv%u_pct_copy %.1f %%\n", cfg.name, H, pct);
      CK(cudaFree(dq));
      CK(cudaFree(dout));
      CK(cudaFree(ws));
    }

  // 16 layers back to back.
  constexpr uint32_t kLayers = 16, kHkv = 4;
  for (const Cfg& cfg : {Cfg{"4_4", 4, 4, Body::scalar}, Cfg{"3_2t", 3, 2, Body::trellis}}) {
    HostCache hc = make_cache(cfg.bk, cfg.bv, cfg.body, kHkv);
    std::vector<cuda::DeviceCacheView> dvs(kLayers);
    for (auto& dv : dvs) {
      const std::string err = dv.upload(hc.view);
      if (!err.empty()) {
        std::fprintf(stderr, "upload: %s\n", err.c_str());
        return 1;
      }
    }
    const uint32_t n_rep = kQHeads / kHkv;
    const size_t nq = static_cast<size_t>(kHkv) * n_rep * kD;
    std::vector<float> q(nq);
    XorShift64 rng(77);
    for (float& x : q) x = static_cast<float>(rng.gauss()) / 2048.0f;
    std::vector<cuda::AttentionArgs> args(kLayers);
    std::vector<void*> bufs;
    for (uint32_t L = 0; L < kLayers; ++L) {
      cuda::AttentionArgs& a = args[L];
      a.view = dvs[L].view();
      a.n_rep = n_rep;
      a.qpos = kContext - 1;
      a.scale = 1.0f / 16.0f;
      a.workspace_bytes = cuda::attention_workspace_bytes(a.view, n_rep, a.qpos);
      float *dq = nullptr, *dout = nullptr;
      void* ws = nullptr;
      CK(cudaMalloc(&dq, nq * 4));
      CK(cudaMalloc(&dout, nq * 4));
      CK(cudaMalloc(&ws, a.workspace_bytes));
      CK(cudaMemcpy(dq, q.data(), nq * 4, cudaMemcpyHostToDevice));
      a.q = dq;
      a.out = dout;
      a.workspace = ws;
      bufs.insert(bufs.end(), {dq, dout, ws});
    }
    const float ms = time_ms(reps, [&] {
      for (const cuda::AttentionArgs& a : args) {
        const std::string e = cuda::attention_decode(a);
        if (!e.empty()) {
          std::fprintf(stderr, "attention_decode: %s\n", e.c_str());
          std::exit(1);
        }
      }
    });
    CK(cudaDeviceSynchronize());
    std::vector<float> out(nq);
    CK(cudaMemcpy(out.data(), args.back().out, nq * 4, cudaMemcpyDeviceToHost));
    for (float o : out)
      if (!std::isfinite(o)) {
        std::fprintf(stderr, "non-finite output\n");
        return 1;
      }
    const size_t bytes = kLayers * cuda::DeviceCacheView::bytes_read(hc.view, kContext);
    const double gbps = bytes / (ms * 1e-3) / 1e9;
    const double pct = 100.0 * gbps / copy_gbps;
    std::printf("%-10s 16 layers x Hkv %u x n_rep %u, back to back: %.2f MB in %.1f us, %.1f GB/s, %.1f%% of copy\n",
                cfg.name, kHkv, n_rep, bytes / 1e6, ms * 1e3, gbps, pct);
    std::printf("RESULT attn_%s_16layers_time %.2f us\n", cfg.name, ms * 1e3);
    std::printf("RESULT attn_%s_16layers_bandwidth %.1f GB/s\n", cfg.name, gbps);
    std::printf("RESULT attn_%s_16layers_pct_copy %.1f %%\n", cfg.name, pct);
    for (void* b : bufs) CK(cudaFree(b));
  }
  return 0;
}
