// Lloyd iterations across MPI ranks: the time of one generalized-Lloyd iteration over many
// 128-value sequences, sharded in whole chunks as sjkv-train shards them, and the time of one
// ordered combine of the table sums (the only communication of an iteration). Run it under
// mpirun with 1, 2, ... ranks; rank 0 prints one Markdown row, and the train MSE and table
// hash, which are the same for any number of ranks.
//
//   mpirun -n 2 bench_mpi_lloyd [--sequences 4194304] [--bits 3] [--threads 1] [--iters 1]
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "sjkv/parallel.h"
#include "sjkv/cluster.h"
#include "sjkv/io/sha256.h"
#include "sjkv/lloyd.h"
#include "sjkv/testgen.h"
#include "sjkv/train/train.h"
#include "sjkv/trellis.h"

using namespace sjkv;
using clk = std::chrono::steady_clock;

static double secs(clk::time_point a, clk::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// Sequences [first, last) of a synthetic set: chunk c drawn from its own seed, so a rank's slice
// holds the values one process holds there. Targets spread over [0, qmax] like balanced rows.
static train::Targets make_slice(size_t first, size_t last, uint32_t bits, uint64_t seed) {
  train::Targets t;
  t.len = 128;
  t.y.resize((last - first) * t.len);
  const float qmax = static_cast<float>((1u << bits) - 1), mid = qmax / 2;
#pragma omp parallel for schedule(static)
  for (long long ci = static_cast<long long>(first / kLloydChunk); ci < static_cast<long long>((last + kLloydChunk - 1) / kLloydChunk); ++ci) {
    XorShift64 rng(seed * 1000003 + static_cast<uint64_t>(ci));
    const size_t c0 = static_cast<size_t>(ci) * kLloydChunk;
    for (size_t s = c0; s < c0 + kLloydChunk && s < last; ++s)
      for (size_t j = 0; j < t.len; ++j) {
        const float v = mid + static_cast<float>(rng.gauss()) / 1182.0f * (qmax / 4.0f);
        if (s >= first) t.y[(s - first) * t.len + j] = v < 0 ? 0 : v > qmax ? qmax : v;
      }
  }
  return t;
}

int main(int argc, char** argv) {
  sjkv::settle_parallel_runtime(argv);  // OpenMP's wait, before anything else (sjkv/parallel.h)
  cluster::Session mpi(&argc, &argv);
  const cluster::Comm& comm = cluster::Comm::world();
  size_t n = size_t{1} << 22;
  uint32_t bits = 3, iters = 1;
  int threads = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--sequences") n = std::stoull(argv[i + 1]);
    else if (k == "--bits") bits = static_cast<uint32_t>(std::stoul(argv[i + 1]));
    else if (k == "--threads") threads = std::stoi(argv[i + 1]);
    else if (k == "--iters") iters = static_cast<uint32_t>(std::stoul(argv[i + 1]));
    else { std::fprintf(stderr, "unknown option %s\n", argv[i]); return 1; }
  }
  // This rank's whole chunks, spread evenly (train::shard_records with one sequence a record).
  const train::RecordRange tr = train::shard_records(n, 1, comm.rank(), comm.size());
  const size_t n_ho = 4 * kLloydChunk;
  const train::RecordRange hr = train::shard_records(n_ho, 1, comm.rank(), comm.size());
  const train::Targets y = make_slice(tr.first, tr.last, bits, 11 + bits);
  const train::Targets ho = make_slice(hr.first, hr.last, bits, 99);
  const uint32_t ne = trellis_entries(bits);
  std::vector<uint16_t> id(ne);
  identity_codebook(bits, id.data());

  train::LloydOptions o;
  o.max_iters = iters;
  o.tol = 0;
  o.threads = threads;
  o.comm = &comm;
  cluster::Accumulator sync{{0.0}, {0}};
  comm.ordered(sync, [](cluster::Accumulator&) {});  // every rank has its data
  const auto t0 = clk::now();
  const train::LloydResult r = train::lloyd_train(y, ho, bits, id.data(), o);
  const double total = secs(t0, clk::now());
  // Train-set passes: the first, one per iteration, the last on the fp16 table.
  const double per_iter = total / static_cast<double>(r.iterations + 2);

  // One combine of an iteration's sums alone: 1 + ne doubles and counts handed rank to rank.
  cluster::Accumulator acc;
  acc.d.assign(1 + ne, 1.0);
  acc.u.assign(1 + ne, 1);
  const int reps = 200;
  const auto c0 = clk::now();
  for (int i = 0; i < reps; ++i) comm.ordered(acc, [](cluster::Accumulator& a) { a.d[0] += 1.0; });
  const double combine = secs(c0, clk::now()) / reps;

  if (comm.root()) {
    const std::string hex = sha256_hex(r.table_f16.data(), r.table_f16.size() * 2).substr(0, 16);
    std::printf("| %u | %d | %d | %zu | %.2f | %.1f | %zu | %.6f | %s |\n", bits, comm.size(), threads, n, per_iter,
                combine * 1e6, (1 + static_cast<size_t>(ne)) * 16, r.history.back().train_mse, hex.c_str());
  }
  return 0;
}
