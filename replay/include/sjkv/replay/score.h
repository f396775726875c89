// Scoring a replayed logits row against a stored reference distribution, per-arm statistics
// and paired comparisons between arms (docs/FORMAT.md section 9 for what is stored).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sjkv/replay/reference.h"

namespace sjkv {
namespace replay {

// KL(p || q) in nats over the partition {each kept token, all other tokens}: p is the stored
// reference, q the softmax of `q_logits` (n_vocab entries). Each outcome adds
// p (d + expm1(-d)) with d = log p - log q, which is >= 0 term by term; a bit-identical row
// gives d = 0 everywhere and exactly 0. This is a lower bound of the full-vocabulary KL, short
// of it by at most rest_mass times the KL between the two rests (docs/FORMAT.md 9.2).
// +infinity when q gives an outcome probability 0 that p does not.
double kl_to_reference(const RefDist& p, const float* q_logits, uint32_t n_vocab);
// Full-vocabulary KL(p || q) in nats between the softmaxes of two logits rows (the hidden
// encoding keeps p exactly): the same log-sum-exp and terms as above over every token, so
// >= 0 term by term and exactly 0 for a bit-identical row.
double kl_full(const float* p_logits, const float* q_logits, uint32_t n_vocab);
// The same with p's log-sum-exp given (a hidden reference's recorded log_z, which the scorer
// checked bit for bit against log_sum_exp of the recomputed row): the same value, one pass fewer.
double kl_full(const float* p_logits, double p_log_z, const float* q_logits, uint32_t n_vocab);
// The lowest id among the largest logits.
int32_t argmax(const float* row, uint32_t n);

// One scored position of one arm.
struct ScoreRow {
  double kl = 0.0;
  bool same_top = false;        // the arm's top token is the reference's
  double bits_occupied = 0.0;   // bits per value over the compressed layers, at this position
  double bits_allocated = 0.0;
  int32_t top = -1;             // the arm's top token (argmax); -1 where not kept (read from a CSV)
};

struct ArmStats {
  std::string arm;
  uint64_t positions = 0;
  double mean_kl = 0, median_kl = 0, p90_kl = 0, p99_kl = 0, max_kl = 0;
  double same_top = 0;          // fraction of positions
  double bits_occupied = 0, bits_allocated = 0;  // means over positions
};

// rows: every trajectory's positions of one arm.
ArmStats arm_stats(const std::string& arm, const std::vector<std::vector<ScoreRow>>& rows);
// The q-quantile (0..1) with linear interpolation between order statistics (Hyndman-Fan type 7).
double quantile(std::vector<double> v, double q);

struct Comparison {
  std::string arm, baseline;
  double ratio = 0;             // mean KL of arm / mean KL of baseline (NaN when the baseline's is 0)
  double ci_low = 0, ci_high = 0;          // paired block bootstrap over positions, 95%
  double ci_low_traj = 0, ci_high_traj = 0;  // resampling whole trajectories, 95%; NaN with one
  uint64_t lower_at = 0, of = 0;  // positions where the arm's KL is below the baseline's
  uint32_t replicates = 0;
};

struct BootstrapOptions {
  uint32_t replicates = 2000;
  uint64_t seed = 0x5eed2026ull;
};

// Paired comparison of KL rows: a[t][i] and b[t][i] are the same position i of trajectory t.
// Position bootstrap: per trajectory, circular blocks of ceil(sqrt(n_t)) positions, drawn
// with replacement until n_t are taken; the ratio of the resampled sums. The same draws for
// any thread count (one sequential generator).
Comparison compare_arms(const std::string& arm, const std::string& baseline, const std::vector<std::vector<double>>& a,
                        const std::vector<std::vector<double>>& b, const BootstrapOptions& opt = {});

// One unit (a needle: its answer tokens) of a cluster (a document): the KL summed over its
// positions, of the arm and of the baseline.
struct UnitKl {
  double arm = 0, baseline = 0;
};

struct NestedRatio {
  double ratio = 0;             // sum of the arm's KL / sum of the baseline's (NaN when that is 0)
  double ci_low = 0, ci_high = 0;  // 95% percentile interval; NaN with no replicate to take
  uint32_t replicates = 0;      // replicates whose baseline sum was > 0 (the others are left out)
};

// Nested (two-stage) cluster bootstrap of a ratio of summed KL: each of opt.replicates draws
// the clusters with replacement (as many as there are), then within each drawn cluster its
// units with replacement (as many as it has), and takes the ratio of the drawn units' sums.
// Empty clusters add nothing. One sequential generator seeded with opt.seed: the same
// interval on every run and platform.
NestedRatio nested_bootstrap(const std::vector<std::vector<UnitKl>>& clusters, const BootstrapOptions& opt = {});

// SplitMix64, and an unbiased-enough index below n (multiply-high), the same on every platform.
struct SplitMix64 {
  uint64_t s;
  explicit SplitMix64(uint64_t seed) : s(seed) {}
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  uint64_t below(uint64_t n) { return static_cast<uint64_t>((static_cast<unsigned __int128>(next()) * n) >> 64); }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
};

}  // namespace replay
}  // namespace sjkv
