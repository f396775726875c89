// results.json, positions.csv, depth.csv, answers.csv, summary.md and the results folder
// (positions.csv's lines are written and read by sjkv/io/positions_csv.h).
#include "sjkv/replay/results.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <stdexcept>

#include "sjkv/io/atomic_file.h"
#include "sjkv/io/file_error.h"
#include "sjkv/io/paths.h"
#include "sjkv/io/positions_csv.h"
#include "sjkv/io/text.h"

namespace sjkv {
namespace replay {

namespace {

std::string num(double x, const char* f = "%.9g") {
  if (!std::isfinite(x)) return "null";
  char b[64];
  std::snprintf(b, sizeof b, f, x);
  return b;
}

std::string quoted(const std::string& s) { return json_string(s); }

std::string text_or_dash(double x, const char* f) { return std::isfinite(x) ? num(x, f) : std::string("-"); }

// A CSV number: empty where it does not exist (NaN), "inf" for an infinite KL.
std::string csv_num(double x, const char* f = "%.9g") {
  if (std::isnan(x)) return "";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  return num(x, f);
}

std::string kl_text(double kl) { return std::isfinite(kl) ? num(kl, "%.17g") : std::string("inf"); }

double nan() { return std::numeric_limits<double>::quiet_NaN(); }

// "0-1K", "1K-2K", "200K+".
std::string bin_label(uint32_t from, uint32_t to) {
  auto k = [](uint32_t v) { return v == 0 ? std::string("0") : v % 1000 == 0 ? std::to_string(v / 1000) + "K" : std::to_string(v); };
  return to ? k(from) + "-" + k(to) : k(from) + "+";
}

// Whether scored position j of trajectory t is of a generated segment (not an answer's).
std::vector<std::vector<char>> generated_mask(const Results& r) {
  std::vector<std::vector<char>> m(r.trajectories.size());
  for (size_t t = 0; t < r.trajectories.size(); ++t) {
    m[t].assign(r.trajectories[t].positions.size(), 1);
    for (const AnswerPosition& a : r.trajectories[t].answers)
      if (a.index < m[t].size()) m[t][a.index] = 0;
  }
  return m;
}

}  // namespace

TrajectoryInfo trajectory_info(const std::string& name, const Trajectory& t) {
  TrajectoryInfo info;
  info.name = name;
  info.positions = t.scored_positions();
  const std::vector<Segment> schedule = t.schedule();
  const uint32_t G = std::min<uint32_t>(static_cast<uint32_t>(info.positions.size()), t.generated());
  uint32_t j = 0;
  for (size_t s = 0; s < schedule.size(); ++s) {
    if (!schedule[s].scored()) continue;
    for (uint32_t k = 0; k < schedule[s].length && j < G; ++k, ++j) {
      if (schedule[s].kind != SegmentKind::answer) continue;
      AnswerPosition a;
      a.index = j;
      a.segment = static_cast<uint32_t>(s);
      const uint32_t p = info.positions[j];
      a.gold = p < t.tokens.size() ? t.tokens[p] : -1;
      a.ref_top = t.top_token(j) == a.gold;
      info.answers.push_back(a);
    }
  }
  return info;
}

std::vector<DepthRow> depth_rows(const Results& r) {
  std::vector<DepthRow> out;
  const ArmRows* base = nullptr;
  for (const ArmRows& a : r.arms)
    if (a.arm == r.baseline && !base) base = &a;
  const std::vector<std::vector<char>> gen = generated_mask(r);
  const size_t nb = sizeof kDepthEdges / sizeof kDepthEdges[0], T = r.trajectories.size();
  for (size_t b = 0; b < nb; ++b) {
    const uint32_t from = kDepthEdges[b], to = b + 1 < nb ? kDepthEdges[b + 1] : 0;
    // The bin's scored positions of each trajectory, in stream order.
    std::vector<std::vector<uint32_t>> idx(T);
    uint64_t count = 0, with = 0;
    double pos_sum = 0;
    for (size_t t = 0; t < T; ++t) {
      const std::vector<uint32_t>& p = r.trajectories[t].positions;
      for (uint32_t j = 0; j < p.size(); ++j)
        if (gen[t][j] && p[j] >= from && (to == 0 || p[j] < to)) {
          idx[t].push_back(j);
          pos_sum += p[j];
        }
      count += idx[t].size();
      with += idx[t].empty() ? 0 : 1;
    }
    if (count == 0) continue;
    auto kl_of = [&](const ArmRows& a) {
      std::vector<std::vector<double>> v(T);
      for (size_t t = 0; t < T; ++t)
        for (uint32_t j : idx[t]) v[t].push_back(a.rows[t][j].kl);
      return v;
    };
    const std::vector<std::vector<double>> bkl = base ? kl_of(*base) : std::vector<std::vector<double>>();
    for (const ArmRows& a : r.arms) {
      DepthRow d;
      d.from = from;
      d.to = to;
      d.arm = a.arm;
      d.positions = count;
      d.trajectories = with;
      d.mean_position = pos_sum / static_cast<double>(count);
      double sum = 0;
      uint64_t same = 0;
      for (size_t t = 0; t < T; ++t)
        for (uint32_t j : idx[t]) {
          sum += a.rows[t][j].kl;
          same += a.rows[t][j].same_top ? 1 : 0;
        }
      d.mean_kl = sum / static_cast<double>(count);
      d.same_top = static_cast<double>(same) / static_cast<double>(count);
      d.ratio = d.ci_low = d.ci_high = nan();
      if (base && &a != base) {
        const Comparison c = compare_arms(a.arm, base->arm, kl_of(a), bkl, r.bootstrap);
        d.ratio = c.ratio;
        d.ci_low = c.ci_low;
        d.ci_high = c.ci_high;
      }
      out.push_back(d);
    }
  }
  return out;
}

namespace {

void answer_stats(const Results& r, Report& rep) {
  rep.answers.clear();
  rep.ref_gold_top = nan();
  uint64_t n = 0, ref = 0;
  for (const TrajectoryInfo& t : r.trajectories)
    for (const AnswerPosition& a : t.answers) {
      ++n;
      ref += a.ref_top ? 1 : 0;
    }
  if (n == 0) return;
  rep.ref_gold_top = static_cast<double>(ref) / static_cast<double>(n);
  const ArmRows* base = nullptr;
  for (const ArmRows& a : r.arms)
    if (a.arm == r.baseline && !base) base = &a;
  // Per trajectory with answers (a document), per answer segment (a needle), the KL sum.
  auto needles = [&](const ArmRows& a) {
    std::vector<std::vector<double>> c;
    for (size_t t = 0; t < r.trajectories.size(); ++t) {
      const std::vector<AnswerPosition>& ans = r.trajectories[t].answers;
      if (ans.empty()) continue;
      c.emplace_back();
      for (size_t k = 0; k < ans.size(); ++k) {
        if (k == 0 || ans[k].segment != ans[k - 1].segment) c.back().push_back(0.0);
        c.back().back() += a.rows[t][ans[k].index].kl;
      }
    }
    return c;
  };
  const std::vector<std::vector<double>> bn = needles(*base);
  for (const ArmRows& a : r.arms) {
    AnswerStats s;
    s.arm = a.arm;
    double sum = 0;
    uint64_t gold = 0;
    for (size_t t = 0; t < r.trajectories.size(); ++t)
      for (const AnswerPosition& x : r.trajectories[t].answers) {
        const ScoreRow& row = a.rows[t][x.index];
        sum += row.kl;
        gold += row.top == x.gold ? 1 : 0;
      }
    s.positions = n;
    s.mean_kl = sum / static_cast<double>(n);
    s.gold_top = static_cast<double>(gold) / static_cast<double>(n);
    const std::vector<std::vector<double>> an = needles(a);
    std::vector<std::vector<UnitKl>> clusters(an.size());
    for (size_t c = 0; c < an.size(); ++c) {
      s.needles += an[c].size();
      for (size_t u = 0; u < an[c].size(); ++u) clusters[c].push_back(UnitKl{an[c][u], bn[c][u]});
    }
    s.ratio = s.ci_low = s.ci_high = nan();
    if (&a != base) {
      const NestedRatio nr = nested_bootstrap(clusters, r.bootstrap);
      s.ratio = nr.ratio;
      s.ci_low = nr.ci_low;
      s.ci_high = nr.ci_high;
    }
    rep.answers.push_back(s);
  }
}

}  // namespace

Report summarize(const Results& r) {
  Report rep;
  const ArmRows* base = nullptr;
  for (const ArmRows& a : r.arms) {
    if (a.rows.size() != r.trajectories.size())
      throw std::invalid_argument("arm " + a.arm + ": rows for " + std::to_string(a.rows.size()) + " trajectories, expected " +
                                  std::to_string(r.trajectories.size()));
    for (size_t t = 0; t < a.rows.size(); ++t)
      if (a.rows[t].size() != r.trajectories[t].generated())
        throw std::invalid_argument("arm " + a.arm + ": trajectory " + std::to_string(t) + " has " +
                                    std::to_string(a.rows[t].size()) + " scored positions, expected " +
                                    std::to_string(r.trajectories[t].generated()));
    if (a.arm == r.baseline && !base) base = &a;
  }
  if (!base) throw std::invalid_argument("baseline arm '" + r.baseline + "' is not among the arms");
  // The statistics and comparisons are over the generated positions: answers (a needle's gold
  // tokens) are the answers table's. Results of answers alone (the needle study) keep them here,
  // so that the table is never empty.
  const std::vector<std::vector<char>> gen = generated_mask(r);
  bool any_generated = false;
  for (const auto& m : gen)
    for (char c : m) any_generated = any_generated || c;
  auto kept = [&](size_t t, size_t j) { return !any_generated || gen[t][j]; };
  for (const ArmRows& a : r.arms) {
    std::vector<std::vector<ScoreRow>> rows(a.rows.size());
    for (size_t t = 0; t < a.rows.size(); ++t)
      for (size_t j = 0; j < a.rows[t].size(); ++j)
        if (kept(t, j)) rows[t].push_back(a.rows[t][j]);
    rep.arms.push_back(arm_stats(a.arm, rows));
  }
  auto kl_of = [&](const ArmRows& a) {
    std::vector<std::vector<double>> v(a.rows.size());
    for (size_t t = 0; t < a.rows.size(); ++t)
      for (size_t j = 0; j < a.rows[t].size(); ++j)
        if (kept(t, j)) v[t].push_back(a.rows[t][j].kl);
    return v;
  };
  const auto b = kl_of(*base);
  for (const ArmRows& a : r.arms)
    if (&a != base) rep.comparisons.push_back(compare_arms(a.arm, base->arm, kl_of(a), b, r.bootstrap));
  rep.depth = depth_rows(r);
  answer_stats(r, rep);
  return rep;
}

std::string results_json(const Results& r, const Report& rep) {
  const TrajectorySettings& s = r.settings;
  std::string o = "{\n";
  o += "  \"model\": {\"file\": " + quoted(r.model_file) + ", \"sha256\": " + quoted(r.model_sha256) + "},\n";
  o += "  \"settings\": {\"generate\": " + std::to_string(s.generate) + ", \"sample\": " + (s.sample ? "true" : "false") +
       ", \"seed\": " + std::to_string(s.seed) + ", \"temperature\": " + num(s.temperature) +
       ", \"top_k\": " + std::to_string(s.top_k) + ", \"top_p\": " + num(s.top_p) +
       ", \"reference\": " + quoted(s.reference) + ", \"ubatch\": " + std::to_string(s.ubatch) +
       ", \"baseline\": " + quoted(r.baseline) +
       ", \"bootstrap_replicates\": " + std::to_string(r.bootstrap.replicates) +
       ", \"bootstrap_seed\": " + std::to_string(r.bootstrap.seed) + "},\n";
  o += "  \"trajectories\": [";
  for (size_t i = 0; i < r.trajectories.size(); ++i) {
    const TrajectoryInfo& t = r.trajectories[i];
    // prompt_tokens: the first scored position (a version-2 trajectory's prompt length).
    o += std::string(i ? ",\n    " : "\n    ") + "{\"file\": " + quoted(t.name) + ", \"prompt_tokens\": " +
         std::to_string(t.positions.empty() ? 0u : t.positions.front()) + ", \"generated\": " +
         std::to_string(t.generated()) + ", \"last_position\": " +
         std::to_string(t.positions.empty() ? 0u : t.positions.back()) +
         ", \"answer_positions\": " + std::to_string(t.answers.size()) + "}";
  }
  o += "\n  ],\n  \"arms\": [";
  for (size_t i = 0; i < rep.arms.size(); ++i) {
    const ArmStats& a = rep.arms[i];
    o += std::string(i ? ",\n    " : "\n    ") + "{\"arm\": " + quoted(a.arm) + ", \"positions\": " + std::to_string(a.positions) +
         ", \"mean_kl\": " + num(a.mean_kl) + ", \"median_kl\": " + num(a.median_kl) + ", \"p90_kl\": " + num(a.p90_kl) +
         ", \"p99_kl\": " + num(a.p99_kl) + ", \"max_kl\": " + num(a.max_kl) + ", \"same_top\": " + num(a.same_top) +
         ", \"bits_occupied\": " + num(a.bits_occupied) + ", \"bits_allocated\": " + num(a.bits_allocated) +
         (i < r.arms.size() && !r.arms[i].note.empty() ? ", \"note\": " + quoted(r.arms[i].note) : std::string()) + "}";
  }
  o += "\n  ],\n  \"comparisons\": [";
  for (size_t i = 0; i < rep.comparisons.size(); ++i) {
    const Comparison& c = rep.comparisons[i];
    o += std::string(i ? ",\n    " : "\n    ") + "{\"arm\": " + quoted(c.arm) + ", \"baseline\": " + quoted(c.baseline) +
         ", \"ratio\": " + num(c.ratio) + ", \"ci_low\": " + num(c.ci_low) + ", \"ci_high\": " + num(c.ci_high) +
         ", \"ci_low_trajectories\": " + num(c.ci_low_traj) + ", \"ci_high_trajectories\": " + num(c.ci_high_traj) +
         ", \"lower_at\": " + std::to_string(c.lower_at) + ", \"of\": " + std::to_string(c.of) + "}";
  }
  o += "\n  ]\n}\n";
  return o;
}

std::string positions_csv(const Results& r) {
  std::string o = std::string(kPositionsCsvHeader) + "\n";
  PositionsCsvRow line;
  for (size_t t = 0; t < r.trajectories.size(); ++t)
    for (const ArmRows& a : r.arms)
      for (size_t j = 0; j < a.rows[t].size(); ++j) {
        const ScoreRow& s = a.rows[t][j];
        line.trajectory = r.trajectories[t].name;
        line.position = r.trajectories[t].positions[j];
        line.arm = a.arm;
        line.kl = s.kl;
        line.same_top = s.same_top;
        line.bits_occupied = s.bits_occupied;
        line.bits_allocated = s.bits_allocated;
        o += positions_csv_line(line);
      }
  return o;
}

std::string depth_csv(const Report& rep) {
  std::string o = "from,to,arm,positions,trajectories,mean_position,mean_kl,same_top,ratio,ci_low,ci_high\n";
  for (const DepthRow& d : rep.depth)
    o += std::to_string(d.from) + "," + (d.to ? std::to_string(d.to) : std::string()) + "," + csv_field(d.arm) + "," +
         std::to_string(d.positions) + "," + std::to_string(d.trajectories) + "," + csv_num(d.mean_position, "%.1f") +
         "," + csv_num(d.mean_kl) + "," + csv_num(d.same_top, "%.6g") + "," + csv_num(d.ratio, "%.6g") + "," +
         csv_num(d.ci_low, "%.6g") + "," + csv_num(d.ci_high, "%.6g") + "\n";
  return o;
}

std::string answers_csv(const Results& r) {
  std::string o = "trajectory,segment,position,arm,kl,gold_top,ref_gold_top\n";
  for (size_t t = 0; t < r.trajectories.size(); ++t) {
    const TrajectoryInfo& ti = r.trajectories[t];
    for (const ArmRows& a : r.arms)
      for (const AnswerPosition& x : ti.answers) {
        const ScoreRow& s = a.rows[t][x.index];
        o += csv_field(ti.name) + "," + std::to_string(x.segment) + "," + std::to_string(ti.positions[x.index]) + "," +
             csv_field(a.arm) + "," + kl_text(s.kl) + "," + (s.top == x.gold ? "1" : "0") + "," + (x.ref_top ? "1" : "0") +
             "\n";
      }
  }
  return o;
}

std::string summary_markdown(const Results& r, const Report& rep) {
  uint64_t positions = 0;
  for (const TrajectoryInfo& t : r.trajectories) positions += t.generated();
  std::string o = "# sjkv-replay results\n\n";
  o += "Model `" + r.model_file + "` (SHA-256 `" + r.model_sha256 + "`), " + std::to_string(r.trajectories.size()) +
       " trajectory(ies), " + std::to_string(positions) + " scored positions, reference arm `" + r.settings.reference +
       "`. KL(p||q) in nats against the reference distribution.\n\n";
  o += "| arm | positions | mean KL | median | p90 | p99 | max | same top | bits occupied | bits allocated |\n";
  o += "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  std::string notes;
  for (size_t i = 0; i < rep.arms.size(); ++i) {
    const ArmStats& a = rep.arms[i];
    std::string mark;
    if (i < r.arms.size() && !r.arms[i].note.empty()) {
      const size_t n = static_cast<size_t>(std::count(notes.begin(), notes.end(), '\n')) + 1;
      mark = " [" + std::to_string(n) + "]";
      notes += "[" + std::to_string(n) + "] `" + a.arm + "`: " + r.arms[i].note + "\n";
    }
    o += "| `" + a.arm + "`" + mark + " | " + std::to_string(a.positions) + " | " + text_or_dash(a.mean_kl, "%.4g") + " | " +
         text_or_dash(a.median_kl, "%.4g") + " | " + text_or_dash(a.p90_kl, "%.4g") + " | " +
         text_or_dash(a.p99_kl, "%.4g") + " | " + text_or_dash(a.max_kl, "%.4g") + " | " +
         text_or_dash(100.0 * a.same_top, "%.1f%%") + " | " + text_or_dash(a.bits_occupied, "%.3f") + " | " +
         text_or_dash(a.bits_allocated, "%.3f") + " |\n";
  }
  if (!notes.empty()) o += "\n" + notes;
  if (!rep.comparisons.empty()) {
    o += "\nAgainst `" + r.baseline + "` (ratio of mean KL; 95% CI: paired circular block bootstrap over positions, "
         "blocks of ceil(sqrt(n)) per trajectory, " + std::to_string(r.bootstrap.replicates) + " replicates";
    o += r.trajectories.size() >= 2 ? "; and resampling trajectories)\n\n" : ")\n\n";
    o += "| arm | ratio | 95% CI (positions) | 95% CI (trajectories) | lower at |\n|---|---:|---:|---:|---:|\n";
    for (const Comparison& c : rep.comparisons)
      o += "| `" + c.arm + "` | " + text_or_dash(c.ratio, "%.3f") + " | " + text_or_dash(c.ci_low, "%.3f") + " .. " +
           text_or_dash(c.ci_high, "%.3f") + " | " +
           (std::isfinite(c.ci_low_traj) ? num(c.ci_low_traj, "%.3f") + " .. " + num(c.ci_high_traj, "%.3f") : "-") +
           " | " + std::to_string(c.lower_at) + " of " + std::to_string(c.of) + " |\n";
  }
  if (!rep.depth.empty()) {
    o += "\nKL by depth: the generated positions (not the answers') by absolute position in the context, in bins "
         "of a 1-2-5 series of tokens; ratio to `" + r.baseline + "` with the block bootstrap above, within each bin.\n\n";
    o += "| positions | arm | n | trajectories | mean position | mean KL | same top | ratio | 95% CI |\n"
         "|---|---|---:|---:|---:|---:|---:|---:|---:|\n";
    for (const DepthRow& d : rep.depth)
      o += "| " + bin_label(d.from, d.to) + " | `" + d.arm + "` | " + std::to_string(d.positions) + " | " +
           std::to_string(d.trajectories) + " | " + text_or_dash(d.mean_position, "%.0f") + " | " +
           text_or_dash(d.mean_kl, "%.4g") + " | " + text_or_dash(100.0 * d.same_top, "%.1f%%") + " | " +
           text_or_dash(d.ratio, "%.3f") + " | " +
           (std::isfinite(d.ci_low) ? num(d.ci_low, "%.3f") + " .. " + num(d.ci_high, "%.3f") : "-") + " |\n";
  }
  if (!rep.answers.empty()) {
    uint64_t docs = 0;
    for (const TrajectoryInfo& t : r.trajectories) docs += t.answers.empty() ? 0 : 1;
    o += "\nAnswer positions: " + std::to_string(rep.answers[0].positions) + " in " +
         std::to_string(rep.answers[0].needles) + " answer segments of " + std::to_string(docs) +
         " trajectory(ies); the reference's own top token is the answer at " +
         text_or_dash(100.0 * rep.ref_gold_top, "%.1f%%") + " of them. Ratio of summed KL to `" + r.baseline +
         "`, 95% CI: nested bootstrap (trajectories with replacement, then answer segments within each), " +
         std::to_string(r.bootstrap.replicates) + " replicates.\n\n";
    o += "| arm | mean KL | gold top | ratio | 95% CI |\n|---|---:|---:|---:|---:|\n";
    for (const AnswerStats& a : rep.answers)
      o += "| `" + a.arm + "` | " + text_or_dash(a.mean_kl, "%.4g") + " | " + text_or_dash(100.0 * a.gold_top, "%.1f%%") +
           " | " + text_or_dash(a.ratio, "%.3f") + " | " +
           (std::isfinite(a.ci_low) ? num(a.ci_low, "%.3f") + " .. " + num(a.ci_high, "%.3f") : "-") + " |\n";
  }
  o += "\nPlots: kl_by_position.svg, kl_cdf.svg, kl_vs_bits.svg, kl_by_depth.svg. Per position: positions.csv; per "
       "depth bin: depth.csv; per answer position: answers.csv.\n";
  return o;
}

std::string summary_text(const Report& rep) {
  int w = 3;
  for (const ArmStats& a : rep.arms) w = std::max(w, static_cast<int>(a.arm.size()));
  int wb = 0;
  for (const Comparison& c : rep.comparisons) wb = std::max(wb, static_cast<int>(c.baseline.size()));
  std::string o;
  char b[1024];
  std::snprintf(b, sizeof b, "%-*s %9s %11s %11s %11s %11s %11s %8s %8s %8s\n", w, "arm", "positions", "mean KL", "median",
                "p90", "p99", "max", "same top", "bits occ", "bits alc");
  o += b;
  for (const ArmStats& a : rep.arms) {
    std::snprintf(b, sizeof b, "%-*s %9llu %11.4g %11.4g %11.4g %11.4g %11.4g %7.1f%% %8.3f %8.3f\n", w, a.arm.c_str(),
                  static_cast<unsigned long long>(a.positions), a.mean_kl, a.median_kl, a.p90_kl, a.p99_kl, a.max_kl,
                  100.0 * a.same_top, a.bits_occupied, a.bits_allocated);
    o += b;
  }
  for (const Comparison& c : rep.comparisons) {
    std::snprintf(b, sizeof b, "%-*s vs %-*s ratio %8s  95%% CI %8s .. %-8s", w, c.arm.c_str(), wb, c.baseline.c_str(),
                  text_or_dash(c.ratio, "%.3f").c_str(), text_or_dash(c.ci_low, "%.3f").c_str(),
                  text_or_dash(c.ci_high, "%.3f").c_str());
    o += b;
    if (std::isfinite(c.ci_low_traj)) {  // several trajectories
      std::snprintf(b, sizeof b, "  trajectories %8s .. %-8s", text_or_dash(c.ci_low_traj, "%.3f").c_str(),
                    text_or_dash(c.ci_high_traj, "%.3f").c_str());
      o += b;
    }
    std::snprintf(b, sizeof b, "  lower at %llu of %llu\n", static_cast<unsigned long long>(c.lower_at),
                  static_cast<unsigned long long>(c.of));
    o += b;
  }
  return o;
}

std::vector<PositionRow> read_positions_csv(const std::string& path) {
  std::vector<PositionRow> rows;
  for (PositionsCsvRow& f : read_positions_csv_rows(path)) {
    PositionRow r;
    r.trajectory = std::move(f.trajectory);
    r.arm = std::move(f.arm);
    r.position = f.position;
    r.row.kl = f.kl;
    r.row.same_top = f.same_top;
    r.row.bits_occupied = f.bits_occupied;
    r.row.bits_allocated = f.bits_allocated;
    r.source = std::move(f.source);
    r.line = f.line;
    rows.push_back(std::move(r));
  }
  return rows;
}

void write_results(const std::string& dir, const Results& r, const Report& rep, const std::vector<AtomicOutput*>& also) {
  MadeFolder folder(dir);  // removed again on a failure if this call made it
  // Every file to a temporary first, then all renamed: a failure leaves none of them, and
  // results.json is renamed last (its presence means complete).
  const std::string texts[] = {positions_csv(r),         depth_csv(rep),          answers_csv(r),
                               svg_kl_by_position(r),    svg_kl_cdf(r),           svg_kl_vs_bits(rep),
                               svg_kl_by_depth(rep),     summary_markdown(r, rep), results_json(r, rep)};
  static_assert(sizeof texts / sizeof texts[0] == sizeof kResultFiles / sizeof kResultFiles[0], "one text a file");
  std::vector<std::unique_ptr<AtomicOutput>> outs;  // destroyed before the folder
  std::vector<AtomicOutput*> order = also;
  for (size_t i = 0; i < sizeof texts / sizeof texts[0]; ++i) {
    const std::string path = dir + "/" + kResultFiles[i];
    outs.push_back(std::make_unique<AtomicOutput>(path));
    write_file_bytes(outs.back()->temp_path(), texts[i].data(), texts[i].size(), path);
    order.push_back(outs.back().get());
  }
  commit_all(order);
  folder.keep();
}

}  // namespace replay
}  // namespace sjkv
