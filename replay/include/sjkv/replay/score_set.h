// Scoring a set of trajectories with a set of arms into one Results: what `sjkv-replay score`
// computes, without the printing and the files.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "sjkv/cluster.h"
#include "sjkv/io/trajectory.h"
#include "sjkv/replay/kv.h"
#include "sjkv/replay/model.h"
#include "sjkv/replay/results.h"
#include "sjkv/replay/run.h"

namespace sjkv {
namespace replay {

// FileError(path) when `t` was recorded with another model than the one of `model_sha256`
// (at model_path), or, when `first` is given (the set's first trajectory, read from
// first_path), with another reference arm: the KL of one set is against one reference.
void check_score_trajectory(const Trajectory& t, const std::string& path, const std::string& model_path,
                            const std::string& model_sha256, const Trajectory* first = nullptr,
                            const std::string& first_path = {});

// Results name a trajectory by its base name, so two paths with one (or one path given twice)
// would merge their rows: a message naming both, or empty when every name differs.
std::string trajectory_name_clash(const std::vector<std::string>& paths);

struct ScoreSet {
  std::vector<std::string> paths;        // one per trajectory: where it was read (results name its base name)
  std::vector<Trajectory> trajectories;  // checked with check_score_trajectory
};

struct ScorePlan {
  std::vector<std::string> arms;  // the arms' specs, in results order
  std::string baseline;           // one of them
  BootstrapOptions bootstrap;
  uint32_t ubatch = 0;            // 0: each trajectory's recorded ubatch
  ScoreOptions run;               // blocked (default) or stepwise decoding: the same bits
};

struct ScoreCallbacks {
  // Arm a starts on trajectory i: its progress callback (may be empty).
  std::function<ProgressFn(size_t i, size_t a)> start;
  // Arm a finished trajectory i; `so_far` holds its rows up to i (and, after the last
  // trajectory, its note).
  std::function<void(size_t i, size_t a, const Results& so_far)> finished;
};

// The ubatch trajectory t is replayed with under `plan`.
uint32_t score_ubatch(const ScorePlan& plan, const Trajectory& t);

// Replays every trajectory with every arm a for which arms[a] is not null (a null arm keeps an
// empty row list: --per-arm's arms already scored), in order, trajectory by trajectory. An arm
// that kept a codec cache but sealed no group on some trajectories gets a note saying so.
// FileError(paths[i]) when the model does not reproduce trajectory i's hidden reference.
//
// With `comm` over several ranks (every rank calls it with the same arguments), the
// (trajectory, arm) jobs are dealt out in order, job j to rank j mod size; each rank scores
// its own (cb.start is called for those), and rank 0 gathers the rows and builds the Results
// one process builds, calling cb.finished in the same order; the other ranks return the
// Results with no rows. A failure on any rank is every rank's (cluster::Failed): the one of
// the lowest job.
Results score_set(Model& m, const std::string& model_file, const std::string& model_sha256, const ScoreSet& set,
                  const std::vector<const KvArm*>& arms, const ScorePlan& plan, const ScoreCallbacks& cb = {},
                  const cluster::Comm& comm = {});

}  // namespace replay
}  // namespace sjkv
