// The KL-per-bit frontier of sjkv-replay frontier: which cache configuration is best for a
// model at a budget of allocated bits per value, chosen on tuning trajectories and confirmed on
// held-out ones.
//
// Search: successive halving over the tuning trajectories. A replay's cost is mostly its
// prefill, so a round adds trajectories, not positions: round r scores the surviving
// candidates on the first min(n, 2^r) tuning trajectories (each (arm, trajectory) once: the
// store keeps its rows), ranks them by the geometric mean over those trajectories of each one's
// mean KL (every trajectory counts alike: a pooled mean follows the trajectory of largest KL),
// and keeps, for each budget, the `keep` best candidates that fit it. Candidates above the
// largest budget are never scored. The frontier is nested (frontier_rule): a budget keeps the
// pick of the budget below unless a fully scored candidate that fits is better than it with
// confidence on the tuning trajectories. The picks are rescored on the held-out trajectories
// beside the default arm and the best plain (block or f16) format of the same budget, with
// bootstrap CIs over positions and trajectories.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "sjkv/cluster.h"
#include "sjkv/replay/kv.h"
#include "sjkv/replay/model.h"
#include "sjkv/replay/results.h"
#include "sjkv/replay/score_set.h"

namespace sjkv {
namespace replay {

// The candidate arms: every format family at each width (quick: a short list for tests).
std::vector<std::string> frontier_candidates(bool quick);
// A width per full-attention layer: each low-width trellis base with one of the model's
// full-attention layers at 4/4 (wide=L), when it has at most kMaxWideLayers of them (more would
// multiply the list; name such arms with --also). Empty under --quick.
constexpr size_t kMaxWideLayers = 4;
std::vector<std::string> frontier_wide_candidates(bool quick, const std::vector<uint32_t>& full_layers);
// An arm's family (FrontierPoint::family) and whether it is a plain format are ArmSpec's
// (sjkv/replay/arm_spec.h: family_name, plain_format).

// Bits per value the arm allocates over the model's compressed layers for a sequence of n_ctx
// positions (cache_bits' allocated), from the caches' reservations: the model does not run.
double allocated_bits(const Model& m, const KvArm& arm, uint32_t n_ctx, uint32_t n_ubatch);

// The largest context budgets are allocated for (a model's training context bounds it too):
// the bits come from caches reserved for that many positions.
constexpr uint32_t kMaxFrontierContext = 1u << 24;

// The store of scored rows (FrontierOptions::store) and its file names (store_arm_name) are
// sjkv/io/frontier_store.h's.

// The geometric mean over trajectories of each one's mean KL, kl[t][i] being position i of
// trajectory t: scaling one trajectory's KL for every arm (a harder history) moves every arm's
// score by the same factor, so the ranking is each trajectory counting alike. 0 when a
// trajectory's mean is 0; NaN with no trajectory or an empty one.
double geomean_kl(const std::vector<std::vector<double>>& kl);

// A fully scored candidate of the pick rule: its allocated bits and its tuning KL rows.
struct RuleCandidate {
  std::string arm;
  double bits = 0;
  std::vector<std::vector<double>> kl;  // [tuning trajectory][position]
};

// A candidate against the pick of the budget below (the lower pick), on the tuning rows: ratio
// is the mean over trajectories of its mean KL over the lower pick's (each trajectory alike),
// high the upper end of its 95% paired block-bootstrap interval (compare_arms on the rows
// scaled by 1 / the lower pick's sum on each trajectory), the larger of the interval over
// positions and, with two trajectories or more, over whole trajectories. NaN: not compared.
struct LowerTest {
  double budget = 0;  // where it was compared (NaN: never)
  double ratio = 0, high = 0;
};

struct FrontierRule {
  std::vector<size_t> picks;    // per budget, an index into the candidates (kNoPick: none fits)
  std::vector<double> geomean;  // per candidate, geomean_kl
  // Per candidate: for a pick, the test that made it the pick (ratio and high NaN where it was
  // taken by geomean_kl, nothing being picked below); for any other, its first test.
  std::vector<LowerTest> tests;
};
constexpr size_t kNoPick = static_cast<size_t>(-1);

// The pick rule. Where no budget below has a pick (the lowest budget, or only empty ones below),
// the candidate of lowest geomean_kl that fits. Above that, the budget below's pick stays
// unless a candidate that fits has high < 1 and a lower geomean_kl than it (it passes). Of
// those that pass, the one of most bits (then lowest geomean_kl), unless cheaper ones that pass
// are better than it with the same test: then the lowest geomean_kl of those. Between arms that
// all beat the lower pick, two tuning trajectories rarely tell a few percent apart, and within a
// family more bits (a wider code, a longer full-precision tail) is the lower KL. So a larger
// budget never takes an arm that is better only by noise, and the picks' geomean_kl falls (or
// stays) as the budget grows. Deterministic: the bootstrap's fixed seed; ties: list order.
FrontierRule frontier_rule(const std::vector<double>& budgets, const std::vector<RuleCandidate>& candidates,
                           const BootstrapOptions& bootstrap);

struct FrontierOptions {
  std::vector<double> budgets;        // allocated bits per value, ascending
  uint32_t context = 0;               // n_ctx of the budgets (0: the longest held-out trajectory)
  uint32_t keep = 3;                  // candidates per budget each round keeps
  std::string default_arm = "sj:4/4"; // the note's default, always rescored
  BootstrapOptions bootstrap;
  std::string store;                  // folder of the scored rows (resumable)
  uint32_t ubatch = 0;                // prompt ubatch of the replays (0: each trajectory's)
  SealerSource sealers;               // where the SJ arms seal (Device::sealers; empty: the CPU)
};

struct FrontierPoint {
  std::string arm, family;
  double bits = 0;                    // allocated at the context
  double tuning_kl = 0;               // mean over its scored tuning positions (NaN: never scored)
  double tuning_geomean = 0;          // geomean_kl over its scored tuning trajectories (NaN: never)
  LowerTest test;                     // frontier_rule's test (NaN fields: none; fully scored only)
  uint32_t trajectories = 0;          // tuning trajectories it was scored on
  bool fits = true;                   // bits <= the largest budget
  bool plain = false;                 // a plain row format (ArmSpec::plain_format), the pick's rival
};

struct FrontierPick {
  double budget = 0;
  std::string arm;                    // frontier_rule's pick (empty: none fits)
  std::string plain;                  // the plain format of lowest geomean_kl within the budget (empty: none)
  ArmStats heldout, heldout_plain;
  Comparison vs_default, vs_plain;    // held-out mean-KL ratios with CIs
};

struct FrontierResult {
  std::string model_file, model_sha256;
  uint32_t head_dim = 0;  // of the model's full-attention layers (0: they differ), for engine settings
  uint32_t context = 0;
  std::vector<double> budgets;
  std::string default_arm;
  ArmStats heldout_default;
  std::vector<FrontierPoint> points;  // every candidate, in the given order
  std::vector<FrontierPick> picks;    // one per budget
  std::vector<std::string> tuning, heldout;  // trajectory names
  uint64_t jobs_scored = 0, jobs_cached = 0;
};

struct FrontierProgress {
  // A line of progress (round, jobs done, elapsed, time left in the round).
  std::function<void(const std::string& line)> line;
};

// Runs the search and the held-out rescoring. std::invalid_argument on bad options (no
// budget, a candidate spec the arms refuse, a context above the model's training context or
// kMaxFrontierContext, a held-out trajectory with a tuning one's bytes); the store's files are
// checked as hostile input.
// With `comm` over several ranks (every rank calls it with the same arguments), each
// trajectory's missing (arm, trajectory) jobs are dealt out in order, job j to rank j mod size,
// every rank gets every job's rows (so all rank the same way); the scoring rank stores each
// job's rows as it finishes (and rank 0 any its store lacks): the result is the one process's
// on every rank. A failure on any rank is every rank's.
FrontierResult run_frontier(Model& m, const std::string& model_file, const std::string& model_sha256,
                            const ScoreSet& tuning, const ScoreSet& heldout, const std::vector<std::string>& candidates,
                            const FrontierOptions& opt, const FrontierProgress& progress = {},
                            const cluster::Comm& comm = {});

std::string frontier_csv(const FrontierResult& r);
std::string frontier_svg(const FrontierResult& r);
std::string recommend_markdown(const FrontierResult& r);

}  // namespace replay
}  // namespace sjkv
