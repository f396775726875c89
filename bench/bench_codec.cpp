// Google Benchmark programs for the host codec: record seal (per ISA path and across
// threads), staging row encode, K+V row decode and the reference attention loop.
//
// Counters carry their unit in their name (ms_per_record, ns_per_row, ...). Single-thread
// benchmarks time their counters with the CPU clock of the benchmark thread around the loop
// (the "CPU" column, per item): on an idle machine it equals wall time, and on a shared one
// it is not inflated by other processes. The multi-thread batch benchmark reports wall time
// (UseRealTime) plus the process CPU time it consumed. Ratios
// against the reference codec's published figures (github.com/JakeATX/sj-kvarn-codec
// README, "Limitations": Ryzen 7 5800X3D, one thread, -O2, D = 256, G = 128) are named
// x_vs_ref_<figure> and are reference time / our time, so higher is faster.
//
// Run: ./build/bench/bench_codec --benchmark_min_time=0.2
// Summary table: add --benchmark_out=bench.json --benchmark_out_format=json, then
//   python3 bench/summary.py bench.json

#include <benchmark/benchmark.h>
#include <omp.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "sjkv/cache.h"
#include "sjkv/parallel.h"
#include "sjkv/cache_view.h"
#include "sjkv/config.h"
#include "sjkv/record.h"
#include "sjkv/seal.h"
#include "sjkv/staging.h"
#include "sjkv/testgen.h"

namespace {

using sjkv::Body;
using sjkv::RecordLayout;
using sjkv::SealOptions;
using sjkv::SealPath;
using sjkv::SealWorkspace;
using sjkv::StagingType;

// Published single-thread figures of the reference codec (D = 256, G = 128).
constexpr double kRefSealMs44 = 19.8;   // 4/4 scalar record seal
constexpr double kRefDecodeKVUs = 7.6;  // one K+V row decode, fastest of 7.6-8.8 us

constexpr uint32_t kGroup = 128;

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double clock_seconds(clockid_t id) {
  timespec ts{};
  clock_gettime(id, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double process_cpu_seconds() { return clock_seconds(CLOCK_PROCESS_CPUTIME_ID); }

// CPU time of the calling thread, for the per-item counters of single-thread benchmarks.
struct ThreadCpuTimer {
  double t0 = clock_seconds(CLOCK_THREAD_CPUTIME_ID);
  double seconds() const { return clock_seconds(CLOCK_THREAD_CPUTIME_ID) - t0; }
};

RecordLayout scalar_layout(uint32_t d, uint32_t bits_k, uint32_t bits_v) {
  return sjkv::make_layout(d, kGroup, bits_k, bits_v, Body::scalar);
}

// `n` realistic seal inputs (fill_group: 3% outlier channels, per-token factors), record i
// from seed 1 + i. K and V of record i are G rows of D halves each, row stride D.
struct Groups {
  uint32_t d = 0;
  std::vector<std::vector<uint16_t>> k, v;
  std::vector<const uint16_t*> k_ptr, v_ptr;

  Groups(uint32_t d_, size_t n) : d(d_), k(n), v(n) {
    std::vector<int32_t> chf(d);
    for (size_t i = 0; i < n; ++i) {
      k[i].resize(static_cast<size_t>(d) * kGroup);
      v[i].resize(static_cast<size_t>(d) * kGroup);
      sjkv::fill_group(d, kGroup, 1 + i, k[i].data(), v[i].data(), chf.data());
      k_ptr.push_back(k[i].data());
      v_ptr.push_back(v[i].data());
    }
  }
};

const Groups& groups(uint32_t d, size_t n) {
  static std::map<std::pair<uint32_t, size_t>, Groups> cache;
  auto it = cache.find({d, n});
  if (it == cache.end()) it = cache.emplace(std::make_pair(d, n), Groups(d, n)).first;
  return it->second;
}

// Reference-path bytes of record 0 of groups(d, ...), to check a fast path before timing it.
const std::vector<uint8_t>& reference_record(const RecordLayout& l, const Groups& g) {
  static std::map<std::tuple<uint32_t, uint32_t, uint32_t>, std::vector<uint8_t>> cache;
  const auto key = std::make_tuple(l.head_dim, l.bits_k, l.bits_v);
  auto it = cache.find(key);
  if (it == cache.end()) {
    std::vector<uint8_t> rec(l.bytes);
    SealWorkspace ws;
    const sjkv::Status st = sjkv::seal_record(l, SealOptions{}, g.k_ptr[0], g.v_ptr[0], l.head_dim, rec.data(), ws,
                                              SealPath::reference);
    if (!st.ok()) rec.clear();
    it = cache.emplace(key, std::move(rec)).first;
  }
  return it->second;
}

// ---- BM_Seal: one record per iteration, one thread, one pinned path -----------------------
// Args: D, bits_k, bits_v, path (SealPath as int). Cycles over 8 distinct input groups so
// the timing does not ride on one tile's branch history.
void seal_bench(benchmark::State& state, Body body) {
  const uint32_t d = static_cast<uint32_t>(state.range(0));
  const uint32_t bk = static_cast<uint32_t>(state.range(1));
  const uint32_t bv = static_cast<uint32_t>(state.range(2));
  const SealPath path = static_cast<SealPath>(state.range(3));
  state.SetLabel(std::string(sjkv::seal_path_name(path)) + " " + std::to_string(bk) + "/" + std::to_string(bv) +
                 (body == Body::trellis ? "t" : "") + " D=" + std::to_string(d));
  if (!sjkv::seal_path_available(path)) {
    state.SkipWithError((std::string(sjkv::seal_path_name(path)) + " not available on this CPU").c_str());
    return;
  }
  const RecordLayout l = sjkv::make_layout(d, kGroup, bk, bv, body);
  const Groups& g = groups(d, 8);
  const SealOptions opt{};
  SealWorkspace ws;
  ws.reserve(d, kGroup);
  std::vector<uint8_t> out(l.bytes);

  // Same bytes as the reference, or the number is meaningless.
  const sjkv::Status st0 = sjkv::seal_record(l, opt, g.k_ptr[0], g.v_ptr[0], d, out.data(), ws, path);
  if (!st0.ok()) {
    state.SkipWithError(("seal failed: " + st0.message()).c_str());
    return;
  }
  if (path != SealPath::reference) {
    const std::vector<uint8_t>& ref = reference_record(l, g);
    if (ref.size() != out.size() || std::memcmp(ref.data(), out.data(), out.size()) != 0) {
      state.SkipWithError("fast path bytes differ from the reference seal");
      return;
    }
  }

  size_t i = 0;
  bool ok = true;
  const ThreadCpuTimer timer;
  for (auto _ : state) {
    const sjkv::Status st = sjkv::seal_record(l, opt, g.k_ptr[i], g.v_ptr[i], d, out.data(), ws, path);
    ok = ok && st.ok();
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
    i = (i + 1) & 7;
  }
  const double cpu = timer.seconds();
  if (!ok) {
    state.SkipWithError("seal failed inside the timed loop");
    return;
  }
  const double ms = 1e3 * cpu / static_cast<double>(state.iterations());
  state.counters["ms_per_record"] = ms;
  if (d == 256 && bk == 4 && bv == 4 && body == Body::scalar) state.counters["x_vs_ref_19.8ms"] = kRefSealMs44 / ms;
  // The reference codec's single-thread trellis figures (its README): 3/2t 88.5 ms, 3/3t 108 ms.
  if (d == 256 && body == Body::trellis && bk == 3 && bv == 2) state.counters["x_vs_ref_88.5ms"] = 88.5 / ms;
  if (d == 256 && body == Body::trellis && bk == 3 && bv == 3) state.counters["x_vs_ref_108ms"] = 108.0 / ms;
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(l.bytes));
}

void BM_Seal(benchmark::State& state) { seal_bench(state, Body::scalar); }
void BM_SealTrellis(benchmark::State& state) { seal_bench(state, Body::trellis); }

// path codes: 0 reference, 2 fast_baseline, 3 fast_avx2, 4 fast_avx512 (SealPath order).
BENCHMARK(BM_Seal)
    ->ArgNames({"D", "bk", "bv", "path"})
    ->ArgsProduct({{128, 256},
                   {4, 3, 2},
                   {4, 3, 2},
                   {static_cast<int64_t>(SealPath::reference), static_cast<int64_t>(SealPath::fast_baseline),
                    static_cast<int64_t>(SealPath::fast_avx2), static_cast<int64_t>(SealPath::fast_avx512)}})
    ->Unit(benchmark::kMillisecond);

BENCHMARK(BM_SealTrellis)
    ->ArgNames({"D", "bk", "bv", "path"})
    ->ArgsProduct({{128, 256},
                   {3},
                   {3, 2},
                   {static_cast<int64_t>(SealPath::reference), static_cast<int64_t>(SealPath::fast_avx2),
                    static_cast<int64_t>(SealPath::fast_avx512)}})
    ->Args({256, 2, 2, static_cast<int64_t>(SealPath::reference)})
    ->Args({256, 2, 2, static_cast<int64_t>(SealPath::fast_avx512)})
    ->Unit(benchmark::kMillisecond);

// ---- BM_SealBatchThreads: seal_records over 64 records, OpenMP ----------------------------
// Args: D, bits_k, bits_v, n_threads (0 = all, omp_get_max_threads()). Path: fast (widest ISA).
void BM_SealBatchThreads(benchmark::State& state) {
  const uint32_t d = static_cast<uint32_t>(state.range(0));
  const uint32_t bk = static_cast<uint32_t>(state.range(1));
  const uint32_t bv = static_cast<uint32_t>(state.range(2));
  const int n_threads = static_cast<int>(state.range(3));
  const int threads = n_threads > 0 ? n_threads : omp_get_max_threads();
  constexpr size_t kRecords = 64;
  state.SetLabel("fast " + std::to_string(bk) + "/" + std::to_string(bv) + " D=" + std::to_string(d) + " " +
                 std::to_string(threads) + " thread" + (threads == 1 ? "" : "s"));
  const RecordLayout l = scalar_layout(d, bk, bv);
  const Groups& g = groups(d, kRecords);
  const SealOptions opt{};
  std::vector<uint8_t> out(kRecords * l.bytes);

  bool ok = true;
  const double cpu0 = process_cpu_seconds();
  const auto t0 = Clock::now();
  for (auto _ : state) {
    const sjkv::Status st = sjkv::seal_records(l, opt, kRecords, g.k_ptr.data(), g.v_ptr.data(), d, out.data(),
                                               SealPath::fast, n_threads);
    ok = ok && st.ok();
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  const double wall = seconds_since(t0);
  const double cpu = process_cpu_seconds() - cpu0;
  if (!ok) {
    state.SkipWithError("seal_records failed");
    return;
  }
  const double records = static_cast<double>(state.iterations()) * kRecords;
  const double ms = 1e3 * wall / records;
  state.counters["threads"] = threads;
  state.counters["records_per_s"] = records / wall;
  state.counters["ms_per_record"] = ms;                       // wall time per record
  state.counters["core_ms_per_record"] = ms * threads;        // wall time x threads used
  state.counters["cpu_ms_per_record"] = 1e3 * cpu / records;  // process CPU time (incl. OpenMP waits)
  if (d == 256 && bk == 4 && bv == 4) state.counters["x_vs_ref_19.8ms"] = kRefSealMs44 / ms;
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(kRecords));
}

BENCHMARK(BM_SealBatchThreads)
    ->ArgNames({"D", "bk", "bv", "n_threads"})
    ->ArgsProduct({{256}, {4}, {4}, {1, 2, 0}})
    ->ArgsProduct({{256}, {3}, {2}, {1, 2, 0}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// ---- BM_Tq6StagingRow: encode one staging row (tq6_0, with q8_0 and f16 for comparison) -----
// Args: staging type (0 tq6_0, 1 f16, 2 q8_0), D. Inputs: the first 4095 rows of
// fill_rows(4096, D) (its last row is all zeros), cycled. Many distinct rows on purpose:
// tq6_0's code search branches on the data, and a short cycle (say 63 rows of D = 128)
// lets the branch predictor learn the whole sequence and flatters the figure several-fold.
void BM_Tq6StagingRow(benchmark::State& state) {
  const StagingType type = static_cast<StagingType>(state.range(0));
  const uint32_t d = static_cast<uint32_t>(state.range(1));
  state.SetLabel(std::string(sjkv::staging_name(type)) + " D=" + std::to_string(d));
  constexpr uint32_t kRows = 4096, kLive = kRows - 1;
  std::vector<float> x(static_cast<size_t>(kRows) * d);
  sjkv::fill_rows(kRows, d, x.data());
  const uint32_t rb = sjkv::staging_row_bytes(type, d);
  std::vector<uint8_t> out(static_cast<size_t>(kLive) * rb);

  uint32_t r = 0;
  bool ok = true;
  const ThreadCpuTimer timer;
  for (auto _ : state) {
    ok = sjkv::staging_encode_row(type, x.data() + static_cast<size_t>(r) * d, d, out.data() + static_cast<size_t>(r) * rb) && ok;
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
    if (++r == kLive) r = 0;
  }
  const double cpu = timer.seconds();
  if (!ok) {
    state.SkipWithError("staging_encode_row refused a row");
    return;
  }
  state.counters["ns_per_row"] = 1e9 * cpu / static_cast<double>(state.iterations());
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(rb));
}

BENCHMARK(BM_Tq6StagingRow)
    ->ArgNames({"type", "D"})
    ->ArgsProduct({{static_cast<int64_t>(StagingType::tq6_0), static_cast<int64_t>(StagingType::q8_0),
                    static_cast<int64_t>(StagingType::f16)},
                   {128, 256}})
    ->Unit(benchmark::kNanosecond);

// ---- BM_DecodeKVRow: decode_k_row + decode_v_row of one token of a scalar record ---------
// Args: D, bits_k, bits_v. The record is sealed once from fill_group; t cycles over 0..127.
void BM_DecodeKVRow(benchmark::State& state) {
  const uint32_t d = static_cast<uint32_t>(state.range(0));
  const uint32_t bk = static_cast<uint32_t>(state.range(1));
  const uint32_t bv = static_cast<uint32_t>(state.range(2));
  state.SetLabel("scalar " + std::to_string(bk) + "/" + std::to_string(bv) + " D=" + std::to_string(d));
  const RecordLayout l = scalar_layout(d, bk, bv);
  const Groups& g = groups(d, 8);
  std::vector<uint8_t> rec(l.bytes);
  SealWorkspace ws;
  const sjkv::Status st = sjkv::seal_record(l, SealOptions{}, g.k_ptr[0], g.v_ptr[0], d, rec.data(), ws);
  if (!st.ok()) {
    state.SkipWithError(("seal failed: " + st.message()).c_str());
    return;
  }
  std::vector<float> k(d), v(d);

  uint32_t t = 0;
  const ThreadCpuTimer timer;
  for (auto _ : state) {
    sjkv::decode_k_row(l, rec.data(), t, k.data());
    sjkv::decode_v_row(l, rec.data(), t, v.data());
    benchmark::DoNotOptimize(k.data());
    benchmark::DoNotOptimize(v.data());
    benchmark::ClobberMemory();
    t = (t + 1) & (kGroup - 1);
  }
  const double ns = 1e9 * timer.seconds() / static_cast<double>(state.iterations());
  state.counters["ns_per_kv_row"] = ns;
  // The reference's 7.6-8.8 us is measured at D = 256; a D = 128 ratio would flatter us.
  if (d == 256) state.counters["x_vs_ref_7.6us"] = 1e3 * kRefDecodeKVUs / ns;
  state.SetItemsProcessed(state.iterations());
}

BENCHMARK(BM_DecodeKVRow)
    ->ArgNames({"D", "bk", "bv"})
    ->ArgsProduct({{256, 128}, {4}, {4}})
    ->ArgsProduct({{256, 128}, {3}, {3}})
    ->ArgsProduct({{256, 128}, {3}, {2}})
    ->ArgsProduct({{256, 128}, {2}, {2}})
    ->Unit(benchmark::kNanosecond);

// ---- BM_AttentionRef: one query row over a small cache (sink, body, ring) ----------------
// D = 128, 4/4 scalar, tq6_0 staging, sink 128, fixed tail 256, 2048 positions: about 13
// sealed groups behind the ring. Args: query position count N. Measures the reference loop
// (docs/SPEC.md §9.7), which resolves and decodes every position; a tolerance reference, not a kernel.
void BM_AttentionRef(benchmark::State& state) {
  const uint32_t n_pos = static_cast<uint32_t>(state.range(0));
  constexpr uint32_t kD = 128, kUbatch = 128;
  sjkv::CodecConfig cfg;
  cfg.head_dim = kD;
  cfg.bits_k = 4;
  cfg.bits_v = 4;
  cfg.body = Body::scalar;
  cfg.tail = 256;
  cfg.tail_max = 0;
  sjkv::CacheShape shape;
  shape.n_layers = 1;
  shape.n_head_kv = 1;
  shape.n_ctx = n_pos;
  shape.n_ubatch = kUbatch;
  sjkv::SequenceCache cache(cfg, shape);
  if (!cache.status().ok()) {
    state.SkipWithError(("cache: " + cache.status().message()).c_str());
    return;
  }
  // Rows: fill_rows-like values, regenerated per ubatch from one stream.
  sjkv::XorShift64 rng(0x5EED5EEDull);
  std::vector<float> k(kD), v(kD);
  for (uint32_t pos0 = 0; pos0 < n_pos; pos0 += kUbatch) {
    const uint32_t n = n_pos - pos0 < kUbatch ? n_pos - pos0 : kUbatch;
    sjkv::Status st = cache.begin_ubatch(pos0, n);
    for (uint32_t p = pos0; st.ok() && p < pos0 + n; ++p) {
      const int32_t tf = 1 + static_cast<int32_t>(rng.next() & 3u);
      for (uint32_t i = 0; i < kD; ++i) k[i] = rng.value(1 + static_cast<int32_t>(i % 7 == 0) * 8, tf);
      for (uint32_t i = 0; i < kD; ++i) v[i] = rng.value(1, tf);
      st = cache.store(p, k.data(), v.data());
    }
    if (!st.ok()) {
      state.SkipWithError(("cache fill: " + st.message()).c_str());
      return;
    }
  }
  const sjkv::CacheView view = cache.view(0);
  std::vector<float> q(kD), out(kD), kbuf(kD), vbuf(kD);
  for (uint32_t i = 0; i < kD; ++i) q[i] = rng.value(1, 4);
  const float scale = 1.0f / 11.3137085f;  // 1/sqrt(128)
  state.SetLabel("4/4 D=128 N=" + std::to_string(view.N) + " body to " + std::to_string(view.B));

  const ThreadCpuTimer timer;
  for (auto _ : state) {
    sjkv::attention_ref(view, q.data(), 0, n_pos - 1, scale, out.data(), kbuf.data(), vbuf.data());
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  const double us = 1e6 * timer.seconds() / static_cast<double>(state.iterations());
  state.counters["us_per_query"] = us;
  state.counters["ns_per_position"] = 1e3 * us / n_pos;
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(n_pos));
}

BENCHMARK(BM_AttentionRef)->ArgName("N")->Arg(2048)->Unit(benchmark::kMicrosecond);

}  // namespace

int main(int argc, char** argv) {
  sjkv::settle_parallel_runtime(argv);  // OpenMP's wait, as the tools set it (sjkv/parallel.h)
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
