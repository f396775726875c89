// Training speed: Viterbi encodes per second per core (reference and vectorised, 2 and 3
// bits) and the time of generalized-Lloyd iterations over many 128-value sequences.
//
//   bench_train [--sequences 1000000] [--threads 2] [--iters 2]
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "sjkv/parallel.h"
#include "sjkv/seal.h"
#include "sjkv/testgen.h"
#include "sjkv/train/train.h"
#include "sjkv/trellis.h"

using namespace sjkv;
using clk = std::chrono::steady_clock;

static double secs(clk::time_point a, clk::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// Targets y in units of the row step, spread over [0, qmax] like balanced rows.
static train::Targets make_targets(size_t n, uint32_t bits, uint64_t seed) {
  train::Targets t;
  t.len = 128;
  t.y.resize(n * t.len);
  XorShift64 rng(seed);
  const float qmax = static_cast<float>((1u << bits) - 1), mid = qmax / 2;
  for (float& y : t.y) {
    float v = mid + static_cast<float>(rng.gauss()) / 1182.0f * (qmax / 4.0f);
    y = v < 0 ? 0 : v > qmax ? qmax : v;
  }
  return t;
}

int main(int argc, char** argv) {
  sjkv::settle_parallel_runtime(argv);  // OpenMP's wait, before anything else (sjkv/parallel.h)
  size_t n = 1000000;
  int threads = 2;
  uint32_t iters = 2;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--sequences") n = std::stoull(argv[i + 1]);
    else if (k == "--threads") threads = std::stoi(argv[i + 1]);
    else if (k == "--iters") iters = static_cast<uint32_t>(std::stoul(argv[i + 1]));
    else { std::fprintf(stderr, "unknown option %s\n", argv[i]); return 1; }
  }
  std::printf("| bits | Viterbi, reference path | Viterbi, fast path | speed-up |\n|--:|--:|--:|--:|\n");
  for (uint32_t bits : {2u, 3u}) {
    const train::Targets t = make_targets(2000, bits, 5 + bits);
    std::vector<uint16_t> id(size_t{1} << (6 + bits));
    identity_codebook(bits, id.data());
    std::vector<float> cbf(id.size());
    for (size_t w = 0; w < id.size(); ++w) cbf[w] = f16_to_f32(id[w]);
    std::vector<float> phi(2 * kTrellisStates);
    std::vector<uint8_t> choice(128 * kTrellisStates), codes(128), scratch(viterbi_scratch_bytes(128));
    std::vector<uint16_t> wins(128);
    auto t0 = clk::now();
    for (size_t s = 0; s < t.sequences(); ++s)
      trellis::viterbi_ref(&t.y[s * 128], 128, bits, cbf.data(), phi.data(), choice.data(), codes.data());
    auto t1 = clk::now();
    for (size_t s = 0; s < t.sequences(); ++s)
      viterbi_fast(&t.y[s * 128], 128, bits, cbf.data(), scratch.data(), codes.data(), wins.data());
    auto t2 = clk::now();
    const double ref = t.sequences() / secs(t0, t1), fast = t.sequences() / secs(t1, t2);
    std::printf("| %u | %.0f seq/s per core | %.0f seq/s per core | %.1fx |\n", bits, ref, fast, fast / ref);
  }
  std::printf("\n| bits | sequences | threads | seconds per Lloyd iteration | train MSE before, after |\n|--:|--:|--:|--:|--:|\n");
  for (uint32_t bits : {2u, 3u}) {
    const train::Targets tr = make_targets(n, bits, 11 + bits), ho = make_targets(1000, bits, 99);
    std::vector<uint16_t> id(size_t{1} << (6 + bits));
    identity_codebook(bits, id.data());
    train::LloydOptions o;
    o.max_iters = iters;
    o.tol = 0;
    o.threads = threads;
    const auto t0 = clk::now();
    const train::LloydResult r = train::lloyd_train(tr, ho, bits, id.data(), o);
    const double s = secs(t0, clk::now());
    const size_t passes = r.history.size() ? r.history.size() : 1;
    std::printf("| %u | %zu | %d | %.2f | %.5f, %.5f |\n", bits, n, threads, s / passes,
                r.history.empty() ? 0.0 : r.history.front().train_mse, r.history.empty() ? 0.0 : r.history.back().train_mse);
  }
  return 0;
}
