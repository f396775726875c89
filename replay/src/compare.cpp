// The study table: summaries per history and arm, paired comparisons (compare.h).
#include "sjkv/replay/compare.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <tuple>

#include "sjkv/io/file_error.h"
#include "sjkv/io/paths.h"
#include "sjkv/io/text.h"

namespace sjkv {
namespace replay {

namespace {

using ByHistory = std::map<std::string, std::map<uint32_t, ScoreRow>>;  // history -> position -> row

std::string num(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  char b[64];
  std::snprintf(b, sizeof b, "%.9g", x);
  return b;
}

void line(std::string& o, const std::string& h, const std::string& arm, const std::string& base, const char* stat,
          double v) {
  o += csv_field(h) + "," + csv_field(arm) + "," + csv_field(base) + "," + stat + "," + num(v) + "\n";
}

void stats_lines(std::string& o, const std::string& h, const std::string& arm,
                 const std::vector<std::vector<ScoreRow>>& rows) {
  const ArmStats s = arm_stats(arm, rows);
  line(o, h, arm, "", "positions", static_cast<double>(s.positions));
  line(o, h, arm, "", "mean_kl", s.mean_kl);
  line(o, h, arm, "", "median_kl", s.median_kl);
  line(o, h, arm, "", "p90_kl", s.p90_kl);
  line(o, h, arm, "", "p99_kl", s.p99_kl);
  line(o, h, arm, "", "max_kl", s.max_kl);
  line(o, h, arm, "", "same_top", s.same_top);
  line(o, h, arm, "", "bits_occupied", s.bits_occupied);
  line(o, h, arm, "", "bits_allocated", s.bits_allocated);
}

// A defect of the study's inputs, named by the file it is in when the rows came from one.
[[noreturn]] void refuse(const std::string& source, uint64_t line, const std::string& what) {
  if (source.empty()) throw std::invalid_argument(what);
  throw FileError(source, (line ? "line " + std::to_string(line) + ": " : std::string()) + what);
}

std::string at(const PositionRow& r) {
  return r.source.empty() ? std::string() : " (" + r.source + (r.line ? " line " + std::to_string(r.line) : "") + ")";
}

std::vector<ScoreRow> values(const std::map<uint32_t, ScoreRow>& m) {
  std::vector<ScoreRow> v;
  for (const auto& [p, r] : m) v.push_back(r);
  return v;
}

}  // namespace

std::vector<PairSpec> read_pairs(const std::string& path) {
  check_input_file(path);
  std::ifstream in(path);
  if (!in) throw FileError(path, "cannot open");
  std::vector<PairSpec> pairs;
  std::string text;
  for (uint64_t n = 1; std::getline(in, text); ++n) {
    const size_t hash = text.find('#');
    if (hash != std::string::npos) text.resize(hash);
    std::istringstream ls(text);
    std::string a, b, extra;
    if (!(ls >> a)) continue;
    if (!(ls >> b) || (ls >> extra))
      throw FileError(path, "line " + std::to_string(n) + ": expected two fields, ARM BASELINE");
    pairs.push_back({a, b, path, n});
  }
  if (in.bad()) throw FileError(path, "read failed");
  return pairs;
}

std::string study_csv(const std::vector<PositionRow>& rows, const std::vector<PairSpec>& pairs,
                      const BootstrapOptions& opt) {
  std::map<std::string, ByHistory> arms;
  // Where each row came from: a duplicate is the second row's defect, and a mismatch is named
  // by the positions.csv that holds the arm's rows of that history.
  std::map<std::tuple<std::string, std::string, uint32_t>, const PositionRow*> first;
  std::map<std::pair<std::string, std::string>, std::string> file_of;  // (arm, history) -> source
  for (const PositionRow& r : rows) {
    const auto [it, fresh] = first.emplace(std::make_tuple(r.arm, r.trajectory, r.position), &r);
    if (!fresh)
      refuse(r.source, r.line, "arm " + r.arm + ", history " + r.trajectory + ": position " +
                                   std::to_string(r.position) + " appears twice" +
                                   (it->second->source.empty() ? "" : ", first" + at(*it->second)));
    arms[r.arm][r.trajectory].emplace(r.position, r.row);
    file_of.emplace(std::make_pair(r.arm, r.trajectory), r.source);
  }
  std::string o = "history,arm,baseline,statistic,value\n";
  for (const auto& [arm, hist] : arms) {
    std::vector<std::vector<ScoreRow>> all;
    for (const auto& [h, m] : hist) {
      all.push_back(values(m));
      stats_lines(o, h, arm, {all.back()});
    }
    stats_lines(o, "all", arm, all);
  }
  for (const PairSpec& p : pairs) {
    const auto ia = arms.find(p.arm), ib = arms.find(p.baseline);
    const std::string pair = "pair " + p.arm + " vs " + p.baseline;
    if (ia == arms.end()) refuse(p.source, p.line, pair + ": no rows of " + p.arm);
    if (ib == arms.end()) refuse(p.source, p.line, pair + ": no rows of " + p.baseline);
    std::vector<std::string> names;
    std::vector<std::vector<double>> a, b;
    for (const auto& [h, ma] : ia->second) {
      const auto jb = ib->second.find(h);
      if (jb == ib->second.end()) continue;
      const auto& mb = jb->second;
      auto different = [&] {
        const std::string& fa = file_of[{p.arm, h}];
        const std::string& fb = file_of[{p.baseline, h}];
        refuse(fa, 0, pair + ", history " + h + ": scored at different positions" +
                          (fb.empty() || fb == fa ? "" : " than in " + fb));
      };
      if (ma.size() != mb.size()) different();
      a.emplace_back();
      b.emplace_back();
      for (auto x = ma.begin(), y = mb.begin(); x != ma.end(); ++x, ++y) {
        if (x->first != y->first) different();
        a.back().push_back(x->second.kl);
        b.back().push_back(y->second.kl);
      }
      names.push_back(h);
    }
    if (names.empty()) refuse(p.source, p.line, pair + ": no history has both");
    const Comparison c = compare_arms(p.arm, p.baseline, a, b, opt);
    uint64_t won = 0;
    for (size_t t = 0; t < names.size(); ++t) {
      double sa = 0, sb = 0;
      for (size_t i = 0; i < a[t].size(); ++i) {
        sa += a[t][i];
        sb += b[t][i];
      }
      won += sa < sb ? 1 : 0;
      line(o, names[t], p.arm, p.baseline, "ratio", sb > 0 ? sa / sb : std::nan(""));
    }
    line(o, "all", p.arm, p.baseline, "ratio", c.ratio);
    line(o, "all", p.arm, p.baseline, "ci_low_positions", c.ci_low);
    line(o, "all", p.arm, p.baseline, "ci_high_positions", c.ci_high);
    line(o, "all", p.arm, p.baseline, "ci_low_histories", c.ci_low_traj);
    line(o, "all", p.arm, p.baseline, "ci_high_histories", c.ci_high_traj);
    line(o, "all", p.arm, p.baseline, "lower_at", static_cast<double>(c.lower_at));
    line(o, "all", p.arm, p.baseline, "of", static_cast<double>(c.of));
    line(o, "all", p.arm, p.baseline, "histories_won", static_cast<double>(won));
    line(o, "all", p.arm, p.baseline, "histories", static_cast<double>(names.size()));
  }
  return o;
}

}  // namespace replay
}  // namespace sjkv
