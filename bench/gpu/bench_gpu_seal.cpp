// GPU codec throughput: seal one 4096-token commit of a 16-layer, 4-kv-head, D = 256 model
// (2,048 records) per configuration, the staging write of that commit, and decode rates.
// Timed with CUDA events around the device API, after warm-up; the median of many runs.
// Reference figures: the tuned engine seals this commit in 10.4 ms at 4/4 and 16.9 ms at
// 3/2t on an RTX 3090 Ti.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "sjkv/cuda/codec_cuda.h"
#include "sjkv/seal.h"
#include "sjkv/testgen.h"

using namespace sjkv;

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "bench_gpu_seal: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

void check(const std::string& e) {
  if (!e.empty()) {
    std::fprintf(stderr, "bench_gpu_seal: %s\n", e.c_str());
    std::exit(1);
  }
}

template <class T>
T* dev_alloc(size_t n) {
  void* p = nullptr;
  check(cudaMalloc(&p, n * sizeof(T) + 256), "cudaMalloc");
  return static_cast<T*>(p);
}

// Median milliseconds of `runs` timed calls after `warm` untimed ones.
double median_ms(int warm, int runs, const std::function<void()>& fn) {
  cudaEvent_t a, b;
  check(cudaEventCreate(&a), "cudaEventCreate");
  check(cudaEventCreate(&b), "cudaEventCreate");
  for (int i = 0; i < warm; ++i) fn();
  check(cudaDeviceSynchronize(), "warm-up");
  std::vector<double> t;
  for (int i = 0; i < runs; ++i) {
    check(cudaEventRecord(a), "cudaEventRecord");
    fn();
    check(cudaEventRecord(b), "cudaEventRecord");
    check(cudaEventSynchronize(b), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
    t.push_back(ms);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  // Timed runs per figure: the first argument, else $BENCH_RUNS, else 25.
  int runs = 25;
  if (const char* e = std::getenv("BENCH_RUNS")) runs = std::max(3, std::atoi(e));
  if (argc > 1) runs = std::max(3, std::atoi(argv[1]));
  if (cuda::device_count() == 0) {
    std::printf("bench_gpu_seal: no CUDA device present; skipped\n");
    return 0;
  }
  std::printf("device: %s\n", cuda::device_name(0).c_str());
  const uint32_t L = 16, H = 4, D = 256, G = 128, T = 4096;
  const size_t n = static_cast<size_t>(L) * H * (T / G);  // 2048 records
  const size_t tile = static_cast<size_t>(G) * D;
  std::vector<uint16_t> K(n * tile), V(n * tile);
  std::vector<int32_t> chf(D);
  for (size_t i = 0; i < n; ++i) fill_group(D, G, 1000 + i, &K[i * tile], &V[i * tile], chf.data());
  uint16_t* dk = dev_alloc<uint16_t>(n * tile);
  uint16_t* dv = dev_alloc<uint16_t>(n * tile);
  check(cudaMemcpy(dk, K.data(), n * tile * 2, cudaMemcpyHostToDevice), "upload");
  check(cudaMemcpy(dv, V.data(), n * tile * 2, cudaMemcpyHostToDevice), "upload");
  cuda::RecordStatus* dst = dev_alloc<cuda::RecordStatus>(n);
  cuda::Engine eng;

  struct Row {
    std::string what;
    double ms;
    std::string rate;
    std::string note;
  };
  std::vector<Row> rows;

  struct Cfg {
    const char* name;
    RecordLayout l;
    double ref_ms;
  };
  const Cfg cfgs[] = {
      {"seal 4/4", make_layout(D, G, 4, 4, Body::scalar), 10.4},
      {"seal 3/3t", make_layout(D, G, 3, 3, Body::trellis), 0},
      {"seal 3/2t", make_layout(D, G, 3, 2, Body::trellis), 16.9},
      {"seal 2/2t", make_layout(D, G, 2, 2, Body::trellis), 0},
  };
  // The other schedules (same bytes): the tile in global memory instead of shared memory
  // (the path large tiles take), and row stds with 8 lanes per row and xor shuffles.
  for (const Cfg& c : {cfgs[0], cfgs[2]})
    for (int variant = 0; variant < 3; ++variant) {
      uint8_t* dout = dev_alloc<uint8_t>(n * c.l.bytes);
      SealOptions o;
      eng.set_shared_tile(variant != 1);
      eng.set_row_std_lanes8(variant == 2);
      const double ms = median_ms(2, runs, [&] { check(eng.seal_async(c.l, o, n, dk, dv, D, 0, dout, dst, 0)); });
      eng.set_shared_tile(true);
      eng.set_row_std_lanes8(false);
      char rate[64];
      std::snprintf(rate, sizeof rate, "%.0f records/s", n / (ms * 1e-3));
      const char* what[] = {" (default)", " global tile", " xor rows"};
      const char* note[] = {"shared tile, thread per row std", "tile in global memory", "8 lanes per row std, shuffles"};
      rows.push_back({std::string(c.name) + what[variant], ms, rate, note[variant]});
      check(cudaFree(dout), "cudaFree");
    }
  const size_t n_check = 16;
  for (const Cfg& c : cfgs) {
    uint8_t* dout = dev_alloc<uint8_t>(n * c.l.bytes);
    SealOptions o;
    const double ms = median_ms(2, runs, [&] { check(eng.seal_async(c.l, o, n, dk, dv, D, 0, dout, dst, 0)); });
    // Spot check: the first records against the CPU sealer.
    std::vector<uint8_t> gpu(n_check * c.l.bytes), cpu(n_check * c.l.bytes);
    check(cudaMemcpy(gpu.data(), dout, gpu.size(), cudaMemcpyDeviceToHost), "download");
    std::vector<const uint16_t*> kp(n_check), vp(n_check);
    for (size_t i = 0; i < n_check; ++i) {
      kp[i] = &K[i * tile];
      vp[i] = &V[i * tile];
    }
    const Status st = seal_records(c.l, o, n_check, kp.data(), vp.data(), D, cpu.data());
    const bool same = st.ok() && gpu == cpu;
    char rate[64], note[96];
    std::snprintf(rate, sizeof rate, "%.0f records/s", n / (ms * 1e-3));
    if (c.ref_ms > 0)
      std::snprintf(note, sizeof note, "%s; RTX 3090 Ti engine %.1f ms (x%.2f)", same ? "bytes ok" : "BYTES DIFFER",
                    c.ref_ms, c.ref_ms / ms);
    else
      std::snprintf(note, sizeof note, "%s", same ? "bytes ok" : "BYTES DIFFER");
    rows.push_back({std::string(c.name) + " (2048 rec)", ms, rate, note});

    // Decode of the sealed commit: records in, fp32 rows out.
    float* ddec = dev_alloc<float>(n * 2 * tile);
    const double dms = median_ms(2, runs, [&] { check(eng.decode_async(c.l, TrellisCodebooks{}, n, dout, ddec, 0)); });
    const double bytes = static_cast<double>(n) * c.l.bytes + static_cast<double>(n) * 2 * tile * 4;
    std::snprintf(rate, sizeof rate, "%.1f GB/s", bytes / (dms * 1e-3) / 1e9);
    rows.push_back({std::string("decode ") + (c.name + 5), dms, rate, "records -> fp32 rows"});
    check(cudaFree(ddec), "cudaFree");
    check(cudaFree(dout), "cudaFree");
  }

  // Staging write of the commit: 4096 tokens x 16 layers x 4 heads, K and V rows, rotated.
  const size_t n_rows = static_cast<size_t>(T) * L * H * 2;
  std::vector<float> x(n_rows * D);
  XorShift64 rng(9);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(rng.gauss()) / 900.0f;
  float* dx = dev_alloc<float>(x.size());
  check(cudaMemcpy(dx, x.data(), x.size() * 4, cudaMemcpyHostToDevice), "upload");
  for (StagingType t : {StagingType::tq6_0, StagingType::q8_0, StagingType::f16}) {
    const size_t rb = staging_row_bytes(t, D);
    uint8_t* dout = dev_alloc<uint8_t>(n_rows * rb);
    int32_t* dbad = dev_alloc<int32_t>(n_rows);
    const double ms =
        median_ms(2, runs, [&] { check(eng.staging_write_async(t, dx, n_rows, D, D, dout, dbad, 0)); });
    char rate[64];
    std::snprintf(rate, sizeof rate, "%.1f GB/s in", n_rows * D * 4.0 / (ms * 1e-3) / 1e9);
    rows.push_back({std::string("staging write ") + staging_name(t), ms, rate, "524,288 rows, rotated"});
    float* ddec = dev_alloc<float>(n_rows * D);
    const double dms = median_ms(2, runs, [&] { check(eng.staging_decode_async(t, dout, n_rows, D, ddec, 0)); });
    std::snprintf(rate, sizeof rate, "%.1f GB/s", (n_rows * rb + n_rows * D * 4.0) / (dms * 1e-3) / 1e9);
    rows.push_back({std::string("ring decode ") + staging_name(t), dms, rate, "rows -> fp32"});
    check(cudaFree(ddec), "cudaFree");
    check(cudaFree(dout), "cudaFree");
    check(cudaFree(dbad), "cudaFree");
  }

  std::printf("\n%-28s %10s  %-20s %s\n", "benchmark", "median ms", "rate", "note");
  for (const Row& r : rows) std::printf("%-28s %10.3f  %-20s %s\n", r.what.c_str(), r.ms, r.rate.c_str(), r.note.c_str());
  bool bad = false;
  for (const Row& r : rows) bad = bad || r.note.find("DIFFER") != std::string::npos;
  return bad ? 1 : 0;
}
