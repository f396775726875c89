#include "sjkv/replay/score_set.h"

#include <memory>
#include <stdexcept>
#include <utility>

#include "sjkv/io/file_error.h"
#include "sjkv/io/paths.h"

namespace sjkv {
namespace replay {

void check_score_trajectory(const Trajectory& t, const std::string& path, const std::string& model_path,
                            const std::string& model_sha256, const Trajectory* first, const std::string& first_path) {
  if (t.model_sha256 != model_sha256)
    throw FileError(path, "recorded with model " + t.model_file + " (SHA-256 " + t.model_sha256 + "), but the model is " +
                              model_path + " (SHA-256 " + model_sha256 + ")");
  if (first && t.settings.reference != first->settings.reference)
    throw FileError(path, "recorded with reference arm '" + t.settings.reference + "', but " + first_path + " with '" +
                              first->settings.reference + "'; score trajectories of one reference together");
}

std::string trajectory_name_clash(const std::vector<std::string>& paths) {
  for (size_t i = 0; i < paths.size(); ++i)
    for (size_t j = 0; j < i; ++j) {
      if (base_name(paths[i]) != base_name(paths[j])) continue;
      if (paths[i] == paths[j]) return "trajectory " + paths[i] + " is given twice";
      return "trajectories " + paths[j] + " and " + paths[i] + " have one name, " + base_name(paths[i]) +
             ", which names their rows in the results; rename one";
    }
  return {};
}

uint32_t score_ubatch(const ScorePlan& plan, const Trajectory& t) { return plan.ubatch ? plan.ubatch : t.settings.ubatch; }

namespace {

// One job's rows between ranks: trajectory, arm, detail, then the rows.
void pack_job(cluster::Packer& o, size_t i, size_t a, const std::vector<ScoreRow>& rows, const ScoreDetail& d) {
  o.u64(i).u64(a).u64(d.codec).u64(d.sealed).u64(rows.size());
  for (const ScoreRow& r : rows)
    o.f64(r.kl).u64(r.same_top).u64(static_cast<uint32_t>(r.top)).f64(r.bits_occupied).f64(r.bits_allocated);
}

}  // namespace

Results score_set(Model& m, const std::string& model_file, const std::string& model_sha256, const ScoreSet& set,
                  const std::vector<const KvArm*>& arms, const ScorePlan& plan, const ScoreCallbacks& cb,
                  const cluster::Comm& comm) {
  if (set.trajectories.empty() || set.paths.size() != set.trajectories.size())
    throw std::invalid_argument("score_set: one path per trajectory, at least one");
  if (arms.size() != plan.arms.size()) throw std::invalid_argument("score_set: one arm per spec");
  const std::string clash = trajectory_name_clash(set.paths);
  if (!clash.empty()) throw std::invalid_argument("score_set: " + clash);
  const std::vector<Trajectory>& trajs = set.trajectories;
  Results res;
  res.model_file = model_file;
  res.model_sha256 = model_sha256;
  res.settings = trajs[0].settings;
  res.baseline = plan.baseline;
  res.bootstrap = plan.bootstrap;
  for (size_t i = 0; i < trajs.size(); ++i)
    res.trajectories.push_back(trajectory_info(base_name(set.paths[i]), trajs[i]));
  for (const std::string& spec : plan.arms) res.arms.push_back(ArmRows{spec, {}, {}});

  std::vector<const KvArm*> run_arms;
  std::vector<size_t> run_index;
  for (size_t a = 0; a < arms.size(); ++a)
    if (arms[a]) {
      run_arms.push_back(arms[a]);
      run_index.push_back(a);
    }
  // Arm a's rows of trajectory i into the results, in (i, a) order whoever scored them.
  std::vector<size_t> unsealed(arms.size(), 0);
  auto take = [&](size_t i, size_t a, std::vector<ScoreRow>&& rows, const ScoreDetail& d) {
    res.arms[a].rows.push_back(std::move(rows));
    if (d.codec && !d.sealed) ++unsealed[a];
    if (i + 1 == trajs.size() && unsealed[a])
      res.arms[a].note = "no group was sealed on " + std::to_string(unsealed[a]) + " of " + std::to_string(trajs.size()) +
                         " trajectories (context shorter than sink + group + tail): those numbers compare the exact "
                         "sink and staging rows only, not the compressed body";
    if (cb.finished) cb.finished(i, a, res);
  };
  // Hidden encoding: the reference rows recomputed once per trajectory for its arms, checked
  // bit for bit.
  auto reference = [&](size_t i) {
    try {
      return reference_rows(m, trajs[i], plan.run.profile);
    } catch (const std::invalid_argument& e) {
      throw FileError(set.paths[i], e.what());
    }
  };

  if (!comm.distributed()) {
    for (size_t i = 0; i < trajs.size(); ++i) {
      const std::unique_ptr<ReferenceRows> ref = reference(i);
      score_arms(
          m, run_arms, trajs[i], score_ubatch(plan, trajs[i]),
          [&](size_t k, std::vector<ScoreRow>&& rows, const ScoreDetail& d) { take(i, run_index[k], std::move(rows), d); },
          [&](size_t k) { return cb.start ? cb.start(i, run_index[k]) : ProgressFn(); }, ref.get(), plan.run);
    }
    return res;
  }

  // Job j = i * n + k (trajectory i, k-th arm that runs) belongs to rank j mod size.
  const size_t n = run_arms.size(), size = static_cast<size_t>(comm.size()), rank = static_cast<size_t>(comm.rank());
  cluster::Packer mine;
  comm.agree([&](uint64_t& key) {
    for (size_t i = 0; i < trajs.size(); ++i) {
      std::vector<const KvArm*> sub;
      std::vector<size_t> sub_index;  // into run_arms
      for (size_t k = 0; k < n; ++k)
        if ((i * n + k) % size == rank) {
          sub.push_back(run_arms[k]);
          sub_index.push_back(k);
        }
      if (sub.empty()) continue;
      key = i * n + sub_index[0];
      const std::unique_ptr<ReferenceRows> ref = reference(i);
      score_arms(
          m, sub, trajs[i], score_ubatch(plan, trajs[i]),
          [&](size_t s, std::vector<ScoreRow>&& rows, const ScoreDetail& d) {
            pack_job(mine, i, run_index[sub_index[s]], rows, d);
            if (s + 1 < sub.size()) key = i * n + sub_index[s + 1];
          },
          [&](size_t s) { return cb.start ? cb.start(i, run_index[sub_index[s]]) : ProgressFn(); }, ref.get(), plan.run);
    }
  });
  const std::vector<std::vector<uint8_t>> all = comm.gather(mine.bytes);
  if (!comm.root()) return res;
  std::vector<std::vector<ScoreRow>> rows(trajs.size() * arms.size());
  std::vector<ScoreDetail> detail(trajs.size() * arms.size());
  std::vector<uint8_t> have(trajs.size() * arms.size(), 0);
  for (const std::vector<uint8_t>& b : all) {
    cluster::Unpacker in(b);
    while (!in.done()) {
      const size_t i = in.u64(), a = in.u64(), j = i * arms.size() + a;
      if (i >= trajs.size() || a >= arms.size() || have[j]) throw std::runtime_error("score_set: a rank sent a bad job");
      have[j] = 1;
      detail[j].codec = in.u64() != 0;
      detail[j].sealed = in.u64() != 0;
      rows[j].resize(in.u64());
      for (ScoreRow& r : rows[j]) {
        r.kl = in.f64();
        r.same_top = in.u64() != 0;
        r.top = static_cast<int32_t>(static_cast<uint32_t>(in.u64()));
        r.bits_occupied = in.f64();
        r.bits_allocated = in.f64();
      }
    }
  }
  for (size_t i = 0; i < trajs.size(); ++i)
    for (size_t a : run_index) {
      const size_t j = i * arms.size() + a;
      if (!have[j]) throw std::runtime_error("score_set: no rank scored a job");
      take(i, a, std::move(rows[j]), detail[j]);
    }
  return res;
}

}  // namespace replay
}  // namespace sjkv
