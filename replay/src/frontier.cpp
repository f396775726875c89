// sjkv-replay frontier: the search and the report (frontier.h); the store of scored rows is
// sjkv/io/frontier_store.h's.
#include "sjkv/replay/frontier.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <stdexcept>

#include "sjkv/cluster.h"
#include "sjkv/io/frontier_store.h"
#include "sjkv/io/paths.h"
#include "sjkv/io/sha256.h"
#include "sjkv/replay/arm_spec.h"
#include "sjkv/replay/arms.h"
#include "sjkv/replay/engine.h"
#include "sjkv/replay/run.h"

namespace sjkv {
namespace replay {
namespace {

std::string fmt(const char* f, double x) {
  char b[64];
  std::snprintf(b, sizeof b, f, x);
  return b;
}

double pooled_mean(const std::vector<std::vector<ScoreRow>>& rows) {
  double s = 0;
  uint64_t n = 0;
  for (const auto& t : rows)
    for (const ScoreRow& r : t) {
      s += r.kl;
      ++n;
    }
  return n ? s / static_cast<double>(n) : std::numeric_limits<double>::quiet_NaN();
}

std::vector<std::vector<double>> kl_of(const std::vector<std::vector<ScoreRow>>& rows) {
  std::vector<std::vector<double>> out;
  for (const auto& t : rows) {
    out.emplace_back();
    for (const ScoreRow& r : t) out.back().push_back(r.kl);
  }
  return out;
}

// The store's rows (sjkv/io/frontier_store.h) as the search keeps them, and back.
std::vector<ScoreRow> score_rows(const std::vector<PositionsCsvRow>& rows) {
  std::vector<ScoreRow> out;
  for (const PositionsCsvRow& r : rows) {
    ScoreRow x;
    x.kl = r.kl;
    x.same_top = r.same_top;
    x.bits_occupied = r.bits_occupied;
    x.bits_allocated = r.bits_allocated;
    out.push_back(x);
  }
  return out;
}

std::vector<PositionsCsvRow> store_rows(const std::string& arm, const Trajectory& t, const std::string& name,
                                        const std::vector<ScoreRow>& rows) {
  const TrajectoryInfo info = trajectory_info(name, t);
  std::vector<PositionsCsvRow> out;
  for (size_t j = 0; j < rows.size(); ++j) {
    PositionsCsvRow r;
    r.trajectory = info.name;
    r.position = info.positions[j];
    r.arm = arm;
    r.kl = rows[j].kl;
    r.same_top = rows[j].same_top;
    r.bits_occupied = rows[j].bits_occupied;
    r.bits_allocated = rows[j].bits_allocated;
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace

double geomean_kl(const std::vector<std::vector<double>>& kl) {
  if (kl.empty()) return std::numeric_limits<double>::quiet_NaN();
  double logs = 0;
  for (const std::vector<double>& t : kl) {
    if (t.empty()) return std::numeric_limits<double>::quiet_NaN();
    double s = 0;
    for (double x : t) s += x;
    if (!(s > 0)) return 0;
    logs += std::log(s / static_cast<double>(t.size()));
  }
  return std::exp(logs / static_cast<double>(kl.size()));
}

namespace {

LowerTest lower_test(double budget, const RuleCandidate& c, const RuleCandidate& lower, const BootstrapOptions& opt) {
  LowerTest t;
  t.budget = budget;
  t.ratio = t.high = std::numeric_limits<double>::quiet_NaN();
  if (c.kl.size() != lower.kl.size()) throw std::logic_error("frontier: candidates scored on different trajectories");
  // Each trajectory scaled to the lower pick's sum 1 there: compare_arms' ratio of sums is then
  // the mean of the per-trajectory ratios, and its bootstraps resample that.
  std::vector<std::vector<double>> a = c.kl, b = lower.kl;
  for (size_t k = 0; k < b.size(); ++k) {
    double s = 0;
    for (double x : b[k]) s += x;
    if (!(s > 0)) return t;  // nothing is below a KL of 0 there
    for (double& x : a[k]) x /= s;
    for (double& x : b[k]) x /= s;
  }
  const Comparison cmp = compare_arms(c.arm, lower.arm, a, b, opt);
  t.ratio = cmp.ratio;
  t.high = cmp.ci_high;
  if (std::isfinite(cmp.ci_high_traj)) t.high = std::max(t.high, cmp.ci_high_traj);
  return t;
}

}  // namespace

FrontierRule frontier_rule(const std::vector<double>& budgets, const std::vector<RuleCandidate>& candidates,
                           const BootstrapOptions& bootstrap) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  FrontierRule r;
  r.picks.assign(budgets.size(), kNoPick);
  r.tests.assign(candidates.size(), LowerTest{nan, nan, nan});
  for (const RuleCandidate& c : candidates) r.geomean.push_back(geomean_kl(c.kl));
  std::vector<uint8_t> tested(candidates.size(), 0);
  for (size_t k = 0; k < budgets.size(); ++k) {
    const size_t lower = k ? r.picks[k - 1] : kNoPick;
    size_t best = lower;
    std::vector<size_t> passed;  // better than the lower pick with confidence
    std::vector<LowerTest> passed_test(candidates.size());
    for (size_t i = 0; i < candidates.size(); ++i) {
      if (i == lower || !(candidates[i].bits <= budgets[k] + 1e-9) || std::isnan(r.geomean[i])) continue;
      if (lower == kNoPick) {
        if (best == kNoPick || r.geomean[i] < r.geomean[best]) best = i;
        continue;
      }
      const LowerTest t = lower_test(budgets[k], candidates[i], candidates[lower], bootstrap);
      if (!tested[i]) {
        r.tests[i] = t;
        tested[i] = 1;
      }
      if (t.high < 1 && r.geomean[i] < r.geomean[lower]) {
        passed.push_back(i);
        passed_test[i] = t;
      }
    }
    if (!passed.empty()) {
      // Of those, the one that spends the most bits (then lowest geomean_kl), unless a cheaper
      // one of them is better than it with confidence too (then the lowest geomean_kl of those).
      best = passed[0];
      for (size_t i : passed)
        if (candidates[i].bits > candidates[best].bits ||
            (candidates[i].bits == candidates[best].bits && r.geomean[i] < r.geomean[best]))
          best = i;
      const size_t most = best;
      for (size_t i : passed) {
        if (!(candidates[i].bits < candidates[most].bits) || !(r.geomean[i] < r.geomean[most])) continue;
        if (!(lower_test(budgets[k], candidates[i], candidates[most], bootstrap).high < 1)) continue;
        if (best == most || r.geomean[i] < r.geomean[best]) best = i;
      }
      r.tests[best] = passed_test[best];
      tested[best] = 1;
    } else if (best != lower) {
      r.tests[best] = LowerTest{budgets[k], nan, nan};
      tested[best] = 1;
    }
    r.picks[k] = best;
  }
  return r;
}

std::vector<std::string> frontier_candidates(bool quick) {
  if (quick)
    return {"f16", "q8_0", "q4_0", "q4_0:rot", "kvarn:4/4:tail=0", "sj:4/4:tail=128", "sj:3/2t:tail=128",
            "sj:4/4:tail=128:staging=q8_0"};
  return {"f16",        "q8_0",       "q8_0:rot",          "q5_1",          "q5_1:rot",           "q5_0",
          "q4_1",       "q4_0",       "q4_0:rot",          "iq4_nl",        "iq4_nl:rot",         "tq6_0",
          "tq5_0",      "turbo4",     "turbo3",            "kvarn:4/4:tail=0", "kvarn:3/3:tail=0", "kvarn:2/2:tail=0",
          "sj:4/4",     "sj:4/3",     "sj:4/2",            "sj:3/3",        "sj:3/3t",            "sj:3/2t",
          "sj:2/2t",    "sj:4/4:staging=q8_0", "sj:4/4:staging=f16", "sj:3/2t:staging=q8_0", "sj:4/4:kmean=sink",
          "sj:4/4:tail=1024/2048", "sj:4/4:tail=1024/2048:staging=q8_0", "sj:4/4:tail=512/1024",
          "sj:4/4:tail=512/1024:staging=q8_0", "sj:4/4:tail=256:staging=q8_0", "sj:3/3t:tail=1024/2048",
          "sj:3/2t:tail=1024/2048", "sj:3/2t:tail=512/1024:staging=q8_0", "sj:2/2t:tail=512/1024:staging=q8_0",
          "sj:3/3t:tier=edge", "sj:3/2t:tier=edge"};
}

std::vector<std::string> frontier_wide_candidates(bool quick, const std::vector<uint32_t>& full_layers) {
  std::vector<std::string> out;
  if (quick || full_layers.size() > kMaxWideLayers || full_layers.size() < 2) return out;
  for (const char* base : {"sj:3/2t:tail=512/1024:staging=q8_0", "sj:2/2t:tail=512/1024:staging=q8_0"})
    for (uint32_t l : full_layers) out.push_back(std::string(base) + ":wide=" + std::to_string(l));
  return out;
}

double allocated_bits(const Model& m, const KvArm& arm, uint32_t n_ctx, uint32_t n_ubatch) {
  // One stored position makes every arm reserve what it reserves for n_ctx (the codec caches
  // are made by their first ubatch; the row's values do not change the reservation). Allocated
  // bits are that reservation over the stored positions' values: over one position here, over
  // n_ctx once the sequence is full.
  std::vector<std::unique_ptr<LayerKv>> kv = make_cache(m, arm, n_ctx, n_ubatch);
  const ModelInfo& info = m.info();
  for (size_t i = 0; i < kv.size(); ++i) {
    const LayerShape& s = info.layers[i];
    if (s.recurrent) continue;  // a fixed size, no rows
    std::vector<float> row(size_t(s.n_head_kv) * s.head_dim);
    for (size_t j = 0; j < row.size(); ++j) row[j] = static_cast<float>(std::sin(0.7 * static_cast<double>(j) + 0.3));
    kv[i]->begin_ubatch(0, 1);
    kv[i]->store(0, 1, row.data(), row.data());
  }
  return cache_bits(m, kv).allocated / static_cast<double>(n_ctx);
}

namespace {

// One run_frontier call: its inputs, the result it fills and the scored rows it caches. The
// steps are the methods, called in order by run_frontier.
class FrontierRun {
 public:
  FrontierRun(Model& m, const std::string& model_file, const std::string& model_sha256, const ScoreSet& tuning,
              const ScoreSet& heldout, const FrontierOptions& opt, const FrontierProgress& progress,
              const cluster::Comm& comm)
      : m_(m), tuning_(tuning), heldout_(heldout), opt_(opt), progress_(progress), comm_(comm),
        store_(opt.store, model_sha256, kEngineVersion) {
    res_.model_file = model_file;
    res_.model_sha256 = model_sha256;
  }

  // The model's head size, the budgets, the trajectories' names and the context (checked).
  void describe() {
    for (const LayerShape& s : m_.info().layers)
      if (s.full_attention) res_.head_dim = res_.head_dim == 0 || res_.head_dim == s.head_dim ? s.head_dim : UINT32_MAX;
    if (res_.head_dim == UINT32_MAX) res_.head_dim = 0;
    res_.budgets = opt_.budgets;
    res_.default_arm = opt_.default_arm;
    for (const std::string& p : tuning_.paths) res_.tuning.push_back(base_name(p));
    for (const std::string& p : heldout_.paths) res_.heldout.push_back(base_name(p));
    res_.context = opt_.context;
    if (res_.context == 0)
      for (const Trajectory& t : heldout_.trajectories) res_.context = std::max(res_.context, t.n_ctx());
    // The caches of allocated_bits are reserved for the whole context.
    const uint64_t n_train = m_.info().n_ctx_train;
    if (res_.context > kMaxFrontierContext || (n_train > 0 && res_.context > n_train))
      throw std::invalid_argument("context " + std::to_string(res_.context) + " exceeds the model's training context (" +
                                  std::to_string(n_train) + ") or " + std::to_string(kMaxFrontierContext));
  }

  // Candidates (the default arm among them), their arms and bits at the context; no two may
  // share a store file.
  void make_candidates(const std::vector<std::string>& candidates) {
    std::vector<std::string> specs = candidates;
    if (std::find(specs.begin(), specs.end(), opt_.default_arm) == specs.end()) specs.push_back(opt_.default_arm);
    const uint32_t bits_ubatch = tuning_.trajectories[0].settings.ubatch;
    for (const std::string& s : specs) {
      if (arms_.count(s)) throw std::invalid_argument("candidate '" + s + "' is listed twice");
      arms_[s] = make_arm(s, opt_.sealers);
      FrontierPoint p;
      p.arm = s;
      const ArmSpec spec = ArmSpec::parse(s);
      p.family = spec.family_name();
      p.plain = spec.plain_format();
      p.bits = allocated_bits(m_, *arms_[s], res_.context, bits_ubatch);
      p.fits = p.bits <= opt_.budgets.back() + 1e-9;
      p.tuning_kl = p.tuning_geomean = std::numeric_limits<double>::quiet_NaN();
      p.test = LowerTest{p.tuning_kl, p.tuning_kl, p.tuning_kl};
      res_.points.push_back(p);
    }
    std::map<std::string, std::string> by_name;  // store name -> arm: a shared name would mix rows
    for (const std::string& s : specs) {
      const auto [it, fresh] = by_name.emplace(store_arm_name(s), s);
      if (!fresh) throw std::invalid_argument("candidates '" + it->second + "' and '" + s + "' would share a store file");
    }
  }

  // Every trajectory's SHA-256; a held-out one with a tuning one's bytes is refused.
  void hash_trajectories() {
    for (const ScoreSet* set : {&tuning_, &heldout_})
      for (const std::string& p : set->paths) sha_[p] = sha256_file_hex(p);
    for (const std::string& h : heldout_.paths)
      for (const std::string& t : tuning_.paths)
        if (sha_.at(h) == sha_.at(t))
          throw std::invalid_argument("held-out trajectory " + h + " has the bytes of tuning trajectory " + t);
  }

  // Successive halving over the tuning trajectories: round r scores the survivors on the first
  // min(n, 2^r), then keeps per budget the opt.keep best that fit and its best plain format.
  void halve() {
    std::vector<std::string> alive;
    for (const FrontierPoint& p : res_.points)
      if (p.fits) alive.push_back(p.arm);
    const size_t n_tune = tuning_.trajectories.size();
    using clock = std::chrono::steady_clock;
    for (size_t round = 0, used = 0; used < n_tune; ++round) {
      const size_t upto = std::min(n_tune, size_t(1) << round);
      const auto t0 = clock::now();
      for (size_t i = 0; i < upto; ++i) {
        rows_of(tuning_, i, alive);
        const double el = std::chrono::duration<double>(clock::now() - t0).count();
        const double left = el / static_cast<double>(i + 1) * static_cast<double>(upto - i - 1);
        say("round " + std::to_string(round + 1) + ": " + std::to_string(alive.size()) + " candidates, trajectory " +
            std::to_string(i + 1) + "/" + std::to_string(upto) + ", " + fmt("%.0f", el) + " s, about " +
            fmt("%.0f", left) + " s left in the round");
      }
      used = upto;
      for (const std::string& a : alive) {
        FrontierPoint& p = point(a);
        const auto rows = gathered(tuning_, upto, a);
        p.tuning_kl = pooled_mean(rows);
        p.tuning_geomean = geomean_kl(kl_of(rows));
        p.trajectories = static_cast<uint32_t>(upto);
      }
      if (used == n_tune) break;
      std::set<std::string> keep = {opt_.default_arm};
      for (double b : opt_.budgets) {
        std::vector<const FrontierPoint*> in;
        for (const std::string& a : alive)
          if (point(a).bits <= b + 1e-9) in.push_back(&point(a));
        std::stable_sort(in.begin(), in.end(), [](const FrontierPoint* x, const FrontierPoint* y) {
          return x->tuning_geomean < y->tuning_geomean;
        });
        for (size_t k = 0; k < in.size() && k < opt_.keep; ++k) keep.insert(in[k]->arm);
        // The budget's best plain format stays too: the held-out comparison needs it fully scored.
        for (const FrontierPoint* q : in)
          if (q->plain) {
            keep.insert(q->arm);
            break;
          }
      }
      std::vector<std::string> next;
      for (const std::string& a : alive)
        if (keep.count(a)) next.push_back(a);
      alive = next;
    }
  }

  // The frontier: frontier_rule over the fully scored candidates, and per budget the plain
  // format of lowest geomean_kl (the held-out comparison's baseline, not nested).
  void pick() {
    const size_t n_tune = tuning_.trajectories.size();
    std::vector<RuleCandidate> scored;
    std::vector<FrontierPoint*> scored_point;
    for (FrontierPoint& p : res_.points)
      if (p.trajectories == n_tune && std::isfinite(p.tuning_geomean)) {
        scored.push_back({p.arm, p.bits, kl_of(gathered(tuning_, n_tune, p.arm))});
        scored_point.push_back(&p);
      }
    const FrontierRule rule = frontier_rule(opt_.budgets, scored, opt_.bootstrap);
    for (size_t i = 0; i < scored.size(); ++i) scored_point[i]->test = rule.tests[i];
    for (size_t k = 0; k < opt_.budgets.size(); ++k) {
      FrontierPick pk;
      pk.budget = opt_.budgets[k];
      if (rule.picks[k] != kNoPick) pk.arm = scored[rule.picks[k]].arm;
      double best_plain = INFINITY;
      for (const FrontierPoint* p : scored_point)
        if (p->plain && p->bits <= pk.budget + 1e-9 && p->tuning_geomean < best_plain) {
          best_plain = p->tuning_geomean;
          pk.plain = p->arm;
        }
      res_.picks.push_back(pk);
    }
  }

  // The default arm, the picks and their plain formats on the held-out trajectories, with the
  // picks' ratios against the default and the plain format.
  void rescore_heldout() {
    std::vector<std::string> final_arms = {opt_.default_arm};
    for (const FrontierPick& pk : res_.picks)
      for (const std::string& a : {pk.arm, pk.plain})
        if (!a.empty() && std::find(final_arms.begin(), final_arms.end(), a) == final_arms.end()) final_arms.push_back(a);
    for (size_t i = 0; i < heldout_.trajectories.size(); ++i) {
      rows_of(heldout_, i, final_arms);
      say("held-out: trajectory " + std::to_string(i + 1) + "/" + std::to_string(heldout_.trajectories.size()) + ", " +
          std::to_string(final_arms.size()) + " arms");
    }
    const size_t n_held = heldout_.trajectories.size();
    const auto def_rows = gathered(heldout_, n_held, opt_.default_arm);
    res_.heldout_default = arm_stats(opt_.default_arm, def_rows);
    for (FrontierPick& pk : res_.picks) {
      if (pk.arm.empty()) continue;
      const auto rows = gathered(heldout_, n_held, pk.arm);
      pk.heldout = arm_stats(pk.arm, rows);
      pk.vs_default = compare_arms(pk.arm, opt_.default_arm, kl_of(rows), kl_of(def_rows), opt_.bootstrap);
      if (!pk.plain.empty()) {
        const auto prow = gathered(heldout_, n_held, pk.plain);
        pk.heldout_plain = arm_stats(pk.plain, prow);
        pk.vs_plain = compare_arms(pk.arm, pk.plain, kl_of(rows), kl_of(prow), opt_.bootstrap);
      }
    }
  }

  FrontierResult& result() { return res_; }

 private:
  void say(const std::string& s) const {
    if (progress_.line) progress_.line(s);
  }
  FrontierPoint& point(const std::string& s) {
    for (FrontierPoint& p : res_.points)
      if (p.arm == s) return p;
    throw std::logic_error("frontier: no point " + s);
  }
  const std::string& key_of(const std::string& path) {
    auto it = traj_key_.find(path);
    if (it != traj_key_.end()) return it->second;
    return traj_key_[path] = FrontierStore::trajectory_key(path, sha_.at(path));
  }
  // rows[arm] of trajectory i of `set` for every arm of `want`: from this run's cache, else the
  // store, else scored (over the ranks) and stored.
  void rows_of(const ScoreSet& set, size_t i, const std::vector<std::string>& want) {
    const Trajectory& t = set.trajectories[i];
    const std::string& path = set.paths[i];
    const std::string key = key_of(path);
    const uint32_t ub = opt_.ubatch ? opt_.ubatch : t.settings.ubatch;
    std::vector<std::string> missing;
    for (const std::string& a : want) {
      const std::string ck = a + "\t" + path;
      if (cache_.count(ck)) continue;
      std::vector<PositionsCsvRow> rows;
      if (store_.get(key, a, ub, t.generated(), &rows)) {
        cache_[ck] = score_rows(rows);
        ++res_.jobs_cached;
      } else {
        missing.push_back(a);
      }
    }
    if (missing.empty()) return;
    // Job k of this trajectory (the k-th missing arm) is scored by rank (jobs + k) mod size,
    // which stores its rows as soon as they are done; every rank receives every job's rows
    // (the ranking needs them), and rank 0 stores those its store lacks (a store no rank shares).
    const size_t size = static_cast<size_t>(comm_.size()), rank = static_cast<size_t>(comm_.rank());
    const uint64_t first_job = jobs_dealt_;
    jobs_dealt_ += missing.size();
    cluster::Packer mine;
    comm_.agree([&](uint64_t& jkey) {
      std::vector<const KvArm*> run;
      std::vector<size_t> index;
      for (size_t k = 0; k < missing.size(); ++k)
        if ((first_job + k) % size == rank) {
          run.push_back(arms_.at(missing[k]).get());
          index.push_back(k);
        }
      if (run.empty()) return;
      jkey = first_job + index[0];
      const auto t0 = std::chrono::steady_clock::now();
      score_arms(m_, run, t, ub, [&](size_t r, std::vector<ScoreRow>&& rows, const ScoreDetail&) {
        const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        say(base_name(path) + ": " + missing[index[r]] + " scored (" + std::to_string(r + 1) + "/" +
            std::to_string(run.size()) + ", " + fmt("%.0f", el) + " s, about " +
            fmt("%.0f", el / static_cast<double>(r + 1) * static_cast<double>(run.size() - r - 1)) +
            " s left on this trajectory)");
        // Stored at once by the rank that scored it: a run stopped now keeps every finished arm.
        store_.put(key, missing[index[r]], ub, store_rows(missing[index[r]], t, base_name(path), rows));
        mine.u64(index[r]).u64(rows.size());
        for (const ScoreRow& x : rows) mine.f64(x.kl).u64(x.same_top).f64(x.bits_occupied).f64(x.bits_allocated);
        if (r + 1 < run.size()) jkey = first_job + index[r + 1];
      });
    });
    std::vector<uint8_t> got(missing.size(), 0);
    for (const std::vector<uint8_t>& b : comm_.all_gather(mine.bytes)) {
      cluster::Unpacker in(b);
      while (!in.done()) {
        const size_t k = in.u64();
        std::vector<ScoreRow> rows(in.u64());
        if (k >= missing.size() || got[k] || rows.size() != t.generated())
          throw std::runtime_error("frontier: a rank sent a bad job");
        got[k] = 1;
        for (ScoreRow& x : rows) {
          x.kl = in.f64();
          x.same_top = in.u64() != 0;
          x.bits_occupied = in.f64();
          x.bits_allocated = in.f64();
        }
        if (comm_.root() && !store_.has(key, missing[k], ub))
          store_.put(key, missing[k], ub, store_rows(missing[k], t, base_name(path), rows));
        cache_[missing[k] + "\t" + path] = std::move(rows);
        ++res_.jobs_scored;
      }
    }
    if (std::count(got.begin(), got.end(), 0)) throw std::runtime_error("frontier: no rank scored a job");
  }
  // The cached rows of arm a on the first n trajectories of `set`.
  std::vector<std::vector<ScoreRow>> gathered(const ScoreSet& set, size_t n, const std::string& a) const {
    std::vector<std::vector<ScoreRow>> out;
    for (size_t i = 0; i < n; ++i) out.push_back(cache_.at(a + "\t" + set.paths[i]));
    return out;
  }

  Model& m_;
  const ScoreSet& tuning_;
  const ScoreSet& heldout_;
  const FrontierOptions& opt_;
  const FrontierProgress& progress_;
  const cluster::Comm& comm_;
  const FrontierStore store_;
  FrontierResult res_;
  std::map<std::string, std::unique_ptr<KvArm>> arms_;
  std::map<std::string, std::string> traj_key_;  // path -> store key
  std::map<std::string, std::string> sha_;       // path -> SHA-256 of its bytes
  std::map<std::string, std::vector<ScoreRow>> cache_;  // "arm\ttrajectory path" -> rows
  uint64_t jobs_dealt_ = 0;
};

}  // namespace

FrontierResult run_frontier(Model& m, const std::string& model_file, const std::string& model_sha256,
                            const ScoreSet& tuning, const ScoreSet& heldout, const std::vector<std::string>& candidates,
                            const FrontierOptions& opt, const FrontierProgress& progress, const cluster::Comm& comm) {
  if (opt.budgets.empty()) throw std::invalid_argument("no budget");
  if (!std::is_sorted(opt.budgets.begin(), opt.budgets.end())) throw std::invalid_argument("budgets must be ascending");
  if (tuning.trajectories.empty() || heldout.trajectories.empty())
    throw std::invalid_argument("the tuning and the held-out sets each need a trajectory");
  if (opt.keep == 0) throw std::invalid_argument("keep must be at least 1");
  FrontierRun run(m, model_file, model_sha256, tuning, heldout, opt, progress, comm);
  run.describe();
  run.make_candidates(candidates);
  run.hash_trajectories();
  run.halve();
  run.pick();
  run.rescore_heldout();
  return std::move(run.result());
}

std::string frontier_csv(const FrontierResult& r) {
  std::ostringstream o;
  o << "arm,family,bits_allocated,fits,tuning_trajectories,tuning_mean_kl,frontier_at,heldout_mean_kl,"
       "ratio_vs_default,ci_low,ci_high,ci_low_traj,ci_high_traj,tuning_geomean_kl,tested_at,vs_lower_pick,"
       "vs_lower_pick_high\n";
  auto num = [](double x) { return std::isfinite(x) ? fmt("%.9g", x) : std::string(); };
  for (const FrontierPoint& p : r.points) {
    std::string at;
    const FrontierPick* pick = nullptr;
    for (const FrontierPick& pk : r.picks)
      if (pk.arm == p.arm) {
        at += (at.empty() ? "" : "+") + fmt("%g", pk.budget);
        pick = &pk;
      }
    o << p.arm << "," << p.family << "," << num(p.bits) << "," << (p.fits ? 1 : 0) << "," << p.trajectories << ","
      << num(p.tuning_kl) << "," << at << ",";
    if (pick)
      o << num(pick->heldout.mean_kl) << "," << num(pick->vs_default.ratio) << "," << num(pick->vs_default.ci_low) << ","
        << num(pick->vs_default.ci_high) << "," << num(pick->vs_default.ci_low_traj) << ","
        << num(pick->vs_default.ci_high_traj);
    else if (p.arm == r.default_arm)
      o << num(r.heldout_default.mean_kl) << ",1,,,,";
    else
      o << ",,,,,";
    o << "," << num(p.tuning_geomean) << "," << (std::isfinite(p.test.budget) ? fmt("%g", p.test.budget) : "") << ","
      << num(p.test.ratio) << "," << num(p.test.high) << "\n";
  }
  return o.str();
}

std::string recommend_markdown(const FrontierResult& r) {
  std::ostringstream o;
  o << "# Cache format per budget: " << r.model_file << "\n\n"
    << "Model SHA-256 `" << r.model_sha256 << "`. "
    << "Allocated bits per value over the compressed layers at a context of " << r.context << " tokens. Chosen on "
    << r.tuning.size() << " tuning trajector" << (r.tuning.size() == 1 ? "y" : "ies") << " (";
  for (size_t i = 0; i < r.tuning.size(); ++i) o << (i ? ", " : "") << r.tuning[i];
  o << "), confirmed on " << r.heldout.size() << " held-out (";
  for (size_t i = 0; i < r.heldout.size(); ++i) o << (i ? ", " : "") << r.heldout[i];
  o << "). Ratios are held-out mean KL over the other arm's; 95% CIs by paired block bootstrap over positions "
       "(and over whole trajectories when there are several). Default: `"
    << r.default_arm << "`, held-out mean KL " << fmt("%.4g", r.heldout_default.mean_kl) << ".\n\n"
    << "The picks are nested: at the lowest budget with a candidate, the one of lowest geometric mean over the tuning "
       "trajectories of its mean KL (each trajectory counts alike); at each larger budget, the pick of the budget below "
       "stays unless a candidate that fits is better than it with confidence on the tuning trajectories (the 95% "
       "bootstrap interval of its KL over that pick's, the mean of the per-trajectory ratios, over positions and over "
       "trajectories, ends below 1); of those, the one of most bits is taken unless a cheaper one of them is better than "
       "it with confidence too (then the lowest geometric mean of those). So a larger budget never "
       "takes an arm that is better only by noise. The best plain format is the plain format of lowest geometric mean "
       "within the budget. `frontier.csv` has every candidate's statistic and test.\n\n";
  o << "| budget (bits) | arm | bits | held-out mean KL | vs default | 95% CI | best plain format | its mean KL | arm vs plain | "
       "95% CI | chosen on tuning |\n"
    << "|--:|---|--:|--:|--:|---|---|--:|--:|---|---|\n";
  auto ci = [](const Comparison& c) {
    std::string s = fmt("%.3f", c.ci_low) + " .. " + fmt("%.3f", c.ci_high);
    if (std::isfinite(c.ci_low_traj)) s += " (trajectories " + fmt("%.3f", c.ci_low_traj) + " .. " + fmt("%.3f", c.ci_high_traj) + ")";
    return s;
  };
  for (size_t k = 0; k < r.picks.size(); ++k) {
    const FrontierPick& pk = r.picks[k];
    if (pk.arm.empty()) {
      o << "| " << fmt("%g", pk.budget) << " | none fits | | | | | | | | | |\n";
      continue;
    }
    double bits = 0;
    const FrontierPoint* pt = nullptr;
    for (const FrontierPoint& p : r.points)
      if (p.arm == pk.arm) {
        bits = p.bits;
        pt = &p;
      }
    std::string why = "lowest geometric mean";
    if (k > 0 && r.picks[k - 1].arm == pk.arm)
      why = "the " + fmt("%g", r.picks[k - 1].budget) + "-bit pick: none better with confidence";
    else if (k > 0 && pt && std::isfinite(pt->test.ratio))
      why = fmt("%.3f", pt->test.ratio) + " of the " + fmt("%g", r.picks[k - 1].budget) + "-bit pick's (95% up to " +
            fmt("%.3f", pt->test.high) + ")";
    o << "| " << fmt("%g", pk.budget) << " | `" << pk.arm << "` | " << fmt("%.3f", bits) << " | "
      << fmt("%.4g", pk.heldout.mean_kl) << " | " << (pk.arm == r.default_arm ? "1" : fmt("%.3f", pk.vs_default.ratio))
      << " | " << (pk.arm == r.default_arm ? "" : ci(pk.vs_default)) << " | "
      << (pk.plain.empty() ? "none" : "`" + pk.plain + "`") << " | "
      << (pk.plain.empty() ? "" : fmt("%.4g", pk.heldout_plain.mean_kl)) << " | "
      << (pk.plain.empty() || pk.plain == pk.arm ? "" : fmt("%.3f", pk.vs_plain.ratio)) << " | "
      << (pk.plain.empty() || pk.plain == pk.arm ? "" : ci(pk.vs_plain)) << " | " << why << " |\n";
  }
  o << "\nWhat an engine needs for each pick:\n\n";
  std::set<std::string> said;
  for (const FrontierPick& pk : r.picks) {
    if (pk.arm.empty() || !said.insert(pk.arm).second) continue;
    const std::string e = arm_engine_settings(pk.arm, r.head_dim);
    o << "- `" << pk.arm << "`: "
      << (e.empty() ? "llama.cpp's cache type of that name (`-ctk/-ctv`; `:rot`: its default rotation of quantized caches)" : e)
      << ".\n";
  }
  o << "\nAn arm string is what `sjkv-replay score --arms` and docs/REPLAY.md's grammar take. An SJ-KVaRN arm's\n"
       "configuration string is docs/SPEC.md's; `cb=` names its trellis tables (a shipped set of data/tablesets/,\n"
       "`reference`, or raw table files), and without it the arm uses the format's tables.\n";
  return o.str();
}

}  // namespace replay
}  // namespace sjkv
