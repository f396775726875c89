// One Lloyd iteration on the GPU (Viterbi of every sequence, per-window sums and counts,
// squared error: cuda::LloydPass::run) over 1M token-axis sequences of 128 targets, at 3 and
// 2 bits. Targets come from fill_group tiles with the seal's per-channel affine; a pool of
// 64K distinct sequences is repeated to 1M (the work does not depend on the values).
// Reference: the CPU pass takes 3.17 s (3-bit) and 1.79 s (2-bit) on 2 cores.
//
// Usage: bench_gpu_train [n_sequences] [reps]     (defaults 1048576, 3)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "sjkv/balance.h"
#include "sjkv/cuda/codec_cuda.h"
#include "sjkv/cuda/train_cuda.h"
#include "sjkv/testgen.h"
#include "sjkv/trellis.h"

using namespace sjkv;

namespace {

std::vector<float> make_targets(size_t n, uint32_t bits) {
  const uint32_t D = 128, G = 128, qmax = (1u << bits) - 1u;
  const size_t pool = std::min<size_t>(n, 65536);
  std::vector<float> y(n * G);
  std::vector<uint16_t> K(G * D), V(G * D);
  std::vector<int32_t> chf(D);
  size_t s = 0;
  for (uint64_t rec = 0; s < pool; ++rec) {
    fill_group(D, G, 500 + rec, K.data(), V.data(), chf.data());
    for (uint32_t d = 0; d < D && s < pool; ++d, ++s) {
      float lo = f16_to_f32(K[d]), hi = lo;
      for (uint32_t t = 1; t < G; ++t) {
        lo = op::minS(lo, f16_to_f32(K[t * D + d]));
        hi = op::maxS(hi, f16_to_f32(K[t * D + d]));
      }
      const float step = bal::affine_step(lo, hi, qmax);
      for (uint32_t t = 0; t < G; ++t) y[s * G + t] = trellis::target(f16_to_f32(K[t * D + d]), lo, step);
    }
  }
  for (size_t i = pool * G; i < y.size(); ++i) y[i] = y[i % (pool * G)];
  return y;
}

}  // namespace

int main(int argc, char** argv) {
  const size_t n = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : (size_t(1) << 20);
  const int reps = argc > 2 ? std::max(1, std::atoi(argv[2])) : 3;
  if (cuda::device_count() == 0) {
    std::fprintf(stderr, "bench_gpu_train: no CUDA device present\n");
    return 2;
  }
  std::printf("device: %s, %zu sequences of 128 targets\n", cuda::device_name(0).c_str(), n);
  for (uint32_t bits : {3u, 2u}) {
    const std::vector<float> y = make_targets(n, bits);
    std::vector<float> cbf(trellis_entries(bits));
    const uint16_t* ref = reference_codebook(Side::k, bits);
    for (size_t w = 0; w < cbf.size(); ++w) cbf[w] = f16_to_f32(ref[w]);
    cuda::LloydPass pass;
    std::string err = pass.upload(y.data(), n, 128);
    if (!err.empty()) {
      std::fprintf(stderr, "upload: %s\n", err.c_str());
      return 1;
    }
    std::vector<double> sum;
    std::vector<uint64_t> cnt;
    double mse = 0;
    err = pass.run(bits, cbf.data(), &mse, &sum, &cnt);  // warm-up
    std::vector<double> t;
    for (int r = 0; r < reps && err.empty(); ++r) {
      const auto a = std::chrono::steady_clock::now();
      err = pass.run(bits, cbf.data(), &mse, &sum, &cnt);
      t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count());
    }
    if (!err.empty()) {
      std::fprintf(stderr, "run: %s\n", err.c_str());
      return 1;
    }
    std::sort(t.begin(), t.end());
    std::printf("%u-bit: one Lloyd iteration %.4f s (median of %d), mse %.6g\n", bits, t[t.size() / 2], reps, mse);
    std::printf("RESULT train_iter_%ubit_1M %.4f s\n", bits, t[t.size() / 2]);
  }
  return 0;
}
