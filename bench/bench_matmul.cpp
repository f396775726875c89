// sjkv's matrix products (gemm.h, the weights in their GGUF blocks) against OpenBLAS's
// cblas_sgemm on f32 copies of the same weights, in one run: the seven matrices of every layer
// of a model (q, k, v, output, gate, up, down) for a ubatch of 512 tokens and for one token,
// on 1 and 2 threads. At one token the products read every weight byte once, so their rate is
// also given as weight bytes per second against a copy bandwidth measured in the same run.
//
//   build/bench/bench_matmul [--model M.gguf ...] [Google Benchmark flags]
//
// Without --model: both models scripts/setup installs (default.gguf, smollm2.gguf) when found.
// After the benchmarks, a table of the ratios (docs/REPLAY.md "Matrix products").
#include <benchmark/benchmark.h>
#include <cblas.h>
#include <omp.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "sjkv/parallel.h"
#include "sjkv/io/gguf.h"
#include "sjkv/io/paths.h"
#include "sjkv/replay/dequant.h"
#include "sjkv/replay/gemm.h"

using namespace sjkv;
using namespace sjkv::replay;

extern "C" void openblas_set_num_threads(int);

namespace {

struct Mat {
  WeightMatrix w;
  std::vector<float> f32;  // the f32 copy OpenBLAS multiplies
};

struct ModelMats {
  std::string name;
  std::unique_ptr<GgufFile> file;
  std::vector<Mat> mats;
  size_t macs_per_token = 0, weight_bytes = 0, max_rows = 0, max_cols = 0;
};

std::vector<std::unique_ptr<ModelMats>> g_models;

void load_model(const std::string& path) {
  auto m = std::make_unique<ModelMats>();
  char* real = ::realpath(path.c_str(), nullptr);  // the file's own name, not a link's
  m->name = base_name(real ? std::string(real) : path);
  std::free(real);
  m->file = std::make_unique<GgufFile>(GgufFile::open(path));
  static const char* kNames[] = {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"};
  for (uint32_t il = 0;; ++il) {
    bool any = false;
    for (const char* n : kNames) {
      const GgufTensorInfo* t = m->file->find_tensor("blk." + std::to_string(il) + "." + n + ".weight");
      if (!t) continue;
      any = true;
      Mat mt;
      mt.w = WeightMatrix::of(t->type, t->dims[1], t->dims[0], m->file->tensor_data(*t));
      mt.f32.resize(mt.w.rows * mt.w.cols);
      for (size_t r = 0; r < mt.w.rows; ++r)
        dequantize_row(t->type, mt.w.data + r * mt.w.row_bytes, mt.f32.data() + r * mt.w.cols, mt.w.cols);
      m->macs_per_token += mt.w.rows * mt.w.cols;
      m->weight_bytes += mt.w.bytes();
      m->max_rows = std::max(m->max_rows, mt.w.rows);
      m->max_cols = std::max(m->max_cols, mt.w.cols);
      m->mats.push_back(std::move(mt));
    }
    if (!any) break;
  }
  std::fprintf(stderr, "bench_matmul: %s: %zu matrices, %.1f MiB in blocks, %.1f MiB as f32\n", m->name.c_str(),
               m->mats.size(), m->weight_bytes / 1048576.0, m->macs_per_token * 4 / 1048576.0);
  g_models.push_back(std::move(m));
}

std::vector<float> inputs(size_t n, size_t k) {
  std::vector<float> x(n * k);
  uint32_t s = 12345;
  for (auto& e : x) {
    s = s * 1664525u + 1013904223u;
    e = static_cast<float>(static_cast<int32_t>(s >> 8) - (1 << 23)) / static_cast<float>(1 << 23);
  }
  return x;
}

// engine 0: sjkv, 1: OpenBLAS.
void BM_Layers(benchmark::State& st, ModelMats* m, int engine, size_t n, int threads) {
  const auto x = inputs(n, m->max_cols);
  std::vector<float> y(n * m->max_rows);
  openblas_set_num_threads(threads);
  for (auto _ : st) {
    for (const Mat& mt : m->mats) {
      if (engine == 0) {
        gemm(mt.w, x.data(), n, y.data(), mt.w.rows, threads);
      } else if (n == 1) {
        cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<int>(mt.w.rows), static_cast<int>(mt.w.cols), 1.0f,
                    mt.f32.data(), static_cast<int>(mt.w.cols), x.data(), 1, 0.0f, y.data(), 1);
      } else {
        // Y[n][rows] = X[n][k] * W[rows][k]^T
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(n), static_cast<int>(mt.w.rows),
                    static_cast<int>(mt.w.cols), 1.0f, x.data(), static_cast<int>(mt.w.cols), mt.f32.data(),
                    static_cast<int>(mt.w.cols), 0.0f, y.data(), static_cast<int>(mt.w.rows));
      }
    }
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  const double macs = static_cast<double>(m->macs_per_token) * n;
  st.counters["GMAC/s"] = benchmark::Counter(macs * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  const double bytes = engine == 0 ? static_cast<double>(m->weight_bytes) : static_cast<double>(m->macs_per_token) * 4;
  st.counters["GB/s"] = benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// memcpy of 256 MiB (well past the last-level cache) on `threads` threads, in halves.
void BM_Copy(benchmark::State& st, int threads) {
  const size_t n = size_t(256) << 20;
  std::vector<char> a(n, 1), b(n, 0);
  for (auto _ : st) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int i = 0; i < threads; ++i) {
      const size_t lo = n * i / threads, hi = n * (i + 1) / threads;
      std::memcpy(b.data() + lo, a.data() + lo, hi - lo);
    }
    benchmark::ClobberMemory();
  }
  // A copy reads and writes every byte: bandwidth counts both.
  st.counters["GB/s"] = benchmark::Counter(2.0 * n * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// Keeps each benchmark's counters for the ratio table.
class Collect : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      if (r.run_type != Run::RT_Iteration) continue;
      std::string name = r.benchmark_name();
      const std::string suffix = "/real_time";
      if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
        name.resize(name.size() - suffix.size());
      auto it = r.counters.find(name.rfind("copy/", 0) == 0 ? "GB/s" : "GMAC/s");
      if (it != r.counters.end()) rates[name] = it->second.value;
      auto gb = r.counters.find("GB/s");
      if (gb != r.counters.end()) bytes[name] = gb->second.value;
    }
    ConsoleReporter::ReportRuns(runs);
  }
  std::map<std::string, double> rates, bytes;
};

std::string bench_name(const std::string& model, const char* engine, size_t n, int threads) {
  return model + "/" + engine + "/ubatch" + std::to_string(n) + "/threads" + std::to_string(threads);
}

}  // namespace

int main(int argc, char** argv) {
  sjkv::settle_parallel_runtime(argv);  // OpenMP's wait, before anything else (sjkv/parallel.h)
  std::vector<std::string> models;
  std::vector<char*> rest{argv[0]};
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--model") == 0 && i + 1 < argc) models.push_back(argv[++i]);
    else rest.push_back(argv[i]);
  }
  if (models.empty()) {
    std::string dir = std::getenv("XDG_CACHE_HOME") ? std::getenv("XDG_CACHE_HOME")
                                                    : std::string(std::getenv("HOME") ? std::getenv("HOME") : ".") + "/.cache";
    for (const char* f : {"default.gguf", "smollm2.gguf"}) {
      const std::string p = dir + "/sjkv/models/" + f;
      if (FILE* fp = std::fopen(p.c_str(), "rb")) {
        std::fclose(fp);
        models.push_back(p);
      }
    }
  }
  if (models.empty()) {
    std::fprintf(stderr, "bench_matmul: no model (give --model, or run scripts/setup)\n");
    return 2;
  }
  for (const std::string& p : models) load_model(p);
  std::fprintf(stderr, "bench_matmul: gemm path %s\n", gemm_best() == GemmIsa::avx512 ? "avx512" : gemm_best() == GemmIsa::avx2 ? "avx2" : "portable");
  for (int threads : {1, 2}) benchmark::RegisterBenchmark(("copy/threads" + std::to_string(threads)).c_str(), BM_Copy, threads)->Unit(benchmark::kMillisecond)->UseRealTime();
  for (auto& m : g_models)
    for (size_t n : {size_t(512), size_t(1)})
      for (int threads : {1, 2})
        for (int engine : {0, 1})
          benchmark::RegisterBenchmark(bench_name(m->name, engine == 0 ? "sjkv" : "openblas", n, threads).c_str(),
                                       BM_Layers, m.get(), engine, n, threads)
              ->Unit(benchmark::kMillisecond)
              ->UseRealTime();
  int ac = static_cast<int>(rest.size());
  benchmark::Initialize(&ac, rest.data());
  Collect rep;
  benchmark::RunSpecifiedBenchmarks(&rep);
  benchmark::Shutdown();

  std::printf("\n| model | ubatch | threads | sjkv GMAC/s | OpenBLAS GMAC/s | sjkv / OpenBLAS | sjkv weight GB/s | copy GB/s | weight / copy |\n");
  std::printf("|---|--:|--:|--:|--:|--:|--:|--:|--:|\n");
  for (auto& m : g_models)
    for (size_t n : {size_t(512), size_t(1)})
      for (int threads : {1, 2}) {
        const std::string a = bench_name(m->name, "sjkv", n, threads), b = bench_name(m->name, "openblas", n, threads);
        if (!rep.rates.count(a) || !rep.rates.count(b)) continue;
        const double ra = rep.rates[a], rb = rep.rates[b];
        const std::string copy = "copy/threads" + std::to_string(threads);
        std::printf("| %s | %zu | %d | %.1f | %.1f | %.2f |", m->name.c_str(), n, threads, ra, rb, rb > 0 ? ra / rb : 0.0);
        if (n == 1 && rep.rates.count(copy))
          std::printf(" %.1f | %.1f | %.2f |\n", rep.bytes[a], rep.rates[copy], rep.bytes[a] / rep.rates[copy]);
        else
          std::printf(" | | |\n");
      }
  return 0;
}
