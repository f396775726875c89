#include "sjkv/replay/score_set.h"

#include <memory>
#include <stdexcept>

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

uint32_t score_ubatch(const ScorePlan& plan, const Trajectory& t) { return plan.ubatch ? plan.ubatch : t.settings.ubatch; }

Results score_set(Model& m, const std::string& model_file, const std::string& model_sha256, const ScoreSet& set,
                  const std::vector<const KvArm*>& arms, const ScorePlan& plan, const ScoreCallbacks& cb) {
  if (set.trajectories.empty() || set.paths.size() != set.trajectories.size())
    throw std::invalid_argument("score_set: one path per trajectory, at least one");
  if (arms.size() != plan.arms.size()) throw std::invalid_argument("score_set: one arm per spec");
  const std::vector<Trajectory>& trajs = set.trajectories;
  Results res;
  res.model_file = model_file;
  res.model_sha256 = model_sha256;
  res.settings = trajs[0].settings;
  res.baseline = plan.baseline;
  res.bootstrap = plan.bootstrap;
  for (size_t i = 0; i < trajs.size(); ++i)
    res.trajectories.push_back({base_name(set.paths[i]), trajs[i].prompt_tokens, trajs[i].generated()});
  for (const std::string& spec : plan.arms) res.arms.push_back(ArmRows{spec, {}, {}});

  std::vector<const KvArm*> run_arms;
  std::vector<size_t> run_index;
  for (size_t a = 0; a < arms.size(); ++a)
    if (arms[a]) {
      run_arms.push_back(arms[a]);
      run_index.push_back(a);
    }
  std::vector<size_t> unsealed(arms.size(), 0);
  for (size_t i = 0; i < trajs.size(); ++i) {
    // Hidden encoding: the reference rows recomputed once for all arms, checked bit for bit.
    std::unique_ptr<ReferenceRows> ref;
    try {
      ref = std::make_unique<ReferenceRows>(m, trajs[i]);
    } catch (const std::invalid_argument& e) {
      throw FileError(set.paths[i], e.what());
    }
    const bool last = i + 1 == trajs.size();
    score_arms(
        m, run_arms, trajs[i], score_ubatch(plan, trajs[i]),
        [&](size_t k, std::vector<ScoreRow>&& rows, const ScoreDetail& d) {
          const size_t a = run_index[k];
          res.arms[a].rows.push_back(std::move(rows));
          if (d.codec && !d.sealed) ++unsealed[a];
          if (last && unsealed[a])
            res.arms[a].note = "no group was sealed on " + std::to_string(unsealed[a]) + " of " +
                               std::to_string(trajs.size()) +
                               " trajectories (context shorter than sink + group + tail): those numbers compare the "
                               "exact sink and staging rows only, not the compressed body";
          if (cb.finished) cb.finished(i, a, res);
        },
        [&](size_t k) { return cb.start ? cb.start(i, run_index[k]) : ProgressFn(); }, ref.get());
  }
  return res;
}

}  // namespace replay
}  // namespace sjkv
