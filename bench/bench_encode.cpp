// Encode throughput of a whole capture file, the way `sjkv-encode encode` runs it: read the
// capture (HDF5 + zstd), replay it through staging and the journal policy, write the snapshot.
// Prints MB of fp16 input per second and the share of time spent in HDF5 I/O.
//
//   bench_encode [--layers 16] [--kv-heads 4] [--head-dim 256] [--tokens 32768] [--threads 2]
//                [--bits 4/4] [--dir DIR]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unistd.h>

#include "sjkv/parallel.h"
#include "sjkv/hadamard.h"
#include "sjkv/io/capture_file.h"
#include "sjkv/io/encode.h"
#include "sjkv/io/snapshot_file.h"
#include "sjkv/testgen.h"

using namespace sjkv;
using clk = std::chrono::steady_clock;

static double secs(clk::time_point a, clk::time_point b) { return std::chrono::duration<double>(b - a).count(); }

int main(int argc, char** argv) {
  sjkv::settle_parallel_runtime(argv);  // OpenMP's wait, before anything else (sjkv/parallel.h)
  uint32_t layers = 16, heads = 4, D = 256, tokens = 32768, bk = 4, bv = 4;
  int threads = 2;
  std::string dir = ".";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--layers") layers = std::stoul(v);
    else if (k == "--kv-heads") heads = std::stoul(v);
    else if (k == "--head-dim") D = std::stoul(v);
    else if (k == "--tokens") tokens = std::stoul(v);
    else if (k == "--threads") threads = std::stoi(v);
    else if (k == "--dir") dir = v;
    else if (k == "--bits") std::sscanf(v.c_str(), "%u/%u", &bk, &bv);
    else { std::fprintf(stderr, "unknown option %s\n", k.c_str()); return 1; }
  }
  // Model-basis rows with outlier channels, as a model's K/V look before rotation.
  Capture cap;
  cap.model = "bench";
  cap.source = "bench_encode";
  cap.head_dim = D;
  cap.kv_heads = heads;
  cap.tokens = tokens;
  for (uint32_t l = 0; l < layers; ++l) {
    CaptureLayer cl;
    cl.layer_id = l;
    const size_t n = static_cast<size_t>(tokens) * heads * D;
    cl.k.resize(n);
    cl.v.resize(n);
    XorShift64 rng(1000 + l);
    for (size_t i = 0; i < n; ++i) {
      const float out = (i % D) % 37 == 5 ? 8.0f : 1.0f;
      cl.k[i] = f32_to_f16(static_cast<float>(rng.gauss()) / 1500.0f * out);
      cl.v[i] = f32_to_f16(static_cast<float>(rng.gauss()) / 2000.0f);
    }
    cap.layers.push_back(std::move(cl));
  }
  const std::string in = dir + "/bench-capture-" + std::to_string(getpid()) + ".h5";
  const std::string out = dir + "/bench-snapshot-" + std::to_string(getpid()) + ".h5";
  write_capture(in, cap);
  cap.layers.clear();
  const double mb = static_cast<double>(layers) * tokens * heads * D * 2 * 2 / 1e6;

  const auto t0 = clk::now();
  const Capture got = read_capture(in);
  const auto t1 = clk::now();
  EncodeOptions o;
  o.config.bits_k = bk;
  o.config.bits_v = bv;
  o.config.body = Body::scalar;
  o.threads = threads;
  const Snapshot s = encode_capture(got, o);
  const auto t2 = clk::now();
  write_snapshot(out, s);
  const auto t3 = clk::now();
  std::remove(in.c_str());
  std::remove(out.c_str());

  const double rd = secs(t0, t1), enc = secs(t1, t2), wr = secs(t2, t3), all = secs(t0, t3);
  std::printf("capture: %u layers x %u kv heads x D %u x %u tokens = %.1f MB of fp16 K+V; %s, %d threads\n", layers,
              heads, D, tokens, mb, s.config.name().c_str(), threads);
  std::printf("| step | seconds | share |\n|---|--:|--:|\n");
  std::printf("| read capture (HDF5 + zstd) | %.2f | %.1f%% |\n", rd, 100 * rd / all);
  std::printf("| encode (staging + policy + seal) | %.2f | %.1f%% |\n", enc, 100 * enc / all);
  std::printf("| write snapshot (HDF5 + zstd) | %.2f | %.1f%% |\n", wr, 100 * wr / all);
  std::printf("| total | %.2f | |\n\nthroughput %.1f MB/s of fp16 input (%.1f%% of the time in HDF5 I/O); B=%u N=%u\n",
              all, mb / all, 100 * (rd + wr) / all, s.B, s.N);
  return 0;
}
