// results.json, positions.csv, summary.md and the results folder.
#include "sjkv/replay/results.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <memory>
#include <stdexcept>

#include "sjkv/io/atomic_file.h"
#include "sjkv/io/file_error.h"
#include "sjkv/io/paths.h"
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

}  // namespace

Report summarize(const Results& r) {
  Report rep;
  const ArmRows* base = nullptr;
  for (const ArmRows& a : r.arms) {
    if (a.rows.size() != r.trajectories.size())
      throw std::invalid_argument("arm " + a.arm + ": rows for " + std::to_string(a.rows.size()) + " trajectories, expected " +
                                  std::to_string(r.trajectories.size()));
    for (size_t t = 0; t < a.rows.size(); ++t)
      if (a.rows[t].size() != r.trajectories[t].generated)
        throw std::invalid_argument("arm " + a.arm + ": trajectory " + std::to_string(t) + " has " +
                                    std::to_string(a.rows[t].size()) + " scored positions, expected " +
                                    std::to_string(r.trajectories[t].generated));
    rep.arms.push_back(arm_stats(a.arm, a.rows));
    if (a.arm == r.baseline && !base) base = &a;
  }
  if (!base) throw std::invalid_argument("baseline arm '" + r.baseline + "' is not among the arms");
  auto kl_of = [](const ArmRows& a) {
    std::vector<std::vector<double>> v(a.rows.size());
    for (size_t t = 0; t < a.rows.size(); ++t)
      for (const ScoreRow& s : a.rows[t]) v[t].push_back(s.kl);
    return v;
  };
  const auto b = kl_of(*base);
  for (const ArmRows& a : r.arms)
    if (&a != base) rep.comparisons.push_back(compare_arms(a.arm, base->arm, kl_of(a), b, r.bootstrap));
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
    o += std::string(i ? ",\n    " : "\n    ") + "{\"file\": " + quoted(t.name) +
         ", \"prompt_tokens\": " + std::to_string(t.prompt_tokens) + ", \"generated\": " + std::to_string(t.generated) + "}";
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
  std::string o = "trajectory,position,arm,kl,same_top,bits_occupied,bits_allocated\n";
  for (size_t t = 0; t < r.trajectories.size(); ++t)
    for (const ArmRows& a : r.arms)
      for (size_t j = 0; j < a.rows[t].size(); ++j) {
        const ScoreRow& s = a.rows[t][j];
        o += csv_field(r.trajectories[t].name) + "," + std::to_string(r.trajectories[t].prompt_tokens + j) + "," +
             csv_field(a.arm) + "," + (std::isfinite(s.kl) ? num(s.kl, "%.17g") : std::string("inf")) + "," +
             (s.same_top ? "1" : "0") + "," + num(s.bits_occupied, "%.6g") + "," + num(s.bits_allocated, "%.6g") + "\n";
      }
  return o;
}

std::string summary_markdown(const Results& r, const Report& rep) {
  uint64_t positions = 0;
  for (const TrajectoryInfo& t : r.trajectories) positions += t.generated;
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
  o += "\nPlots: kl_by_position.svg, kl_cdf.svg, kl_vs_bits.svg. Per position: positions.csv.\n";
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

namespace {

// Splits one CSV line as csv_field() writes them (quoted fields with doubled quotes).
bool split_csv(const std::string& line, std::vector<std::string>& out) {
  out.clear();
  std::string f;
  size_t i = 0;
  while (true) {
    f.clear();
    if (i < line.size() && line[i] == '"') {
      ++i;
      while (true) {
        if (i >= line.size()) return false;  // unterminated quote
        if (line[i] == '"') {
          if (i + 1 < line.size() && line[i + 1] == '"') {
            f += '"';
            i += 2;
            continue;
          }
          ++i;
          break;
        }
        f += line[i++];
      }
      if (i < line.size() && line[i] != ',') return false;
    } else {
      while (i < line.size() && line[i] != ',') f += line[i++];
      if (f.find('"') != std::string::npos) return false;
    }
    out.push_back(f);
    if (i >= line.size()) return true;
    ++i;  // the comma
  }
}

bool parse_double(const std::string& s, double& v) {
  if (s.empty() || s.size() > 64) return false;
  char* end = nullptr;
  errno = 0;
  v = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size() && errno == 0;
}

std::string shown(const std::string& s) { return s.size() > 32 ? s.substr(0, 32) + "..." : s; }

}  // namespace

std::vector<PositionRow> read_positions_csv(const std::string& path) {
  check_input_file(path);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw FileError(path, std::string("cannot open: ") + std::strerror(errno));
  std::string line;
  const std::string header = "trajectory,position,arm,kl,same_top,bits_occupied,bits_allocated";
  if (!std::getline(in, line) || line != header) throw FileError(path, "not a positions.csv (its first line is not '" + header + "')");
  std::vector<PositionRow> rows;
  std::vector<std::string> f;
  for (uint64_t n = 2; std::getline(in, line); ++n) {
    const std::string at = "line " + std::to_string(n) + ": ";
    if (in.eof()) throw FileError(path, at + "no line end (the file is cut short)");
    if (!split_csv(line, f) || f.size() != 7) throw FileError(path, at + "not seven comma-separated fields");
    PositionRow r;
    r.trajectory = f[0];
    r.arm = f[2];
    if (r.trajectory.empty() || r.arm.empty()) throw FileError(path, at + "empty trajectory or arm name");
    double pos = 0, kl = 0, occ = 0, alc = 0;
    if (!parse_double(f[1], pos) || pos < 0 || pos > 4294967295.0 || pos != std::floor(pos))
      throw FileError(path, at + "position '" + shown(f[1]) + "' is not a whole number");
    if (f[3] == "inf") kl = std::numeric_limits<double>::infinity();
    else if (!parse_double(f[3], kl) || !std::isfinite(kl) || kl < 0)
      throw FileError(path, at + "KL '" + shown(f[3]) + "' is not a finite number >= 0 (or inf)");
    if (f[4] != "0" && f[4] != "1") throw FileError(path, at + "same_top is not 0 or 1");
    if (!parse_double(f[5], occ) || !std::isfinite(occ) || occ < 0 || !parse_double(f[6], alc) || !std::isfinite(alc) || alc < 0)
      throw FileError(path, at + "bits are not finite numbers >= 0");
    r.position = static_cast<uint32_t>(pos);
    r.row.kl = kl;
    r.row.same_top = f[4] == "1";
    r.row.bits_occupied = occ;
    r.row.bits_allocated = alc;
    r.source = path;
    r.line = n;
    rows.push_back(std::move(r));
  }
  if (in.bad()) throw FileError(path, std::string("read failed: ") + std::strerror(errno));
  return rows;
}

void write_results(const std::string& dir, const Results& r, const Report& rep, const std::vector<AtomicOutput*>& also) {
  MadeFolder folder(dir);  // removed again on a failure if this call made it
  // Every file to a temporary first, then all renamed: a failure leaves none of them, and
  // results.json is renamed last (its presence means complete).
  const std::string texts[] = {positions_csv(r),    svg_kl_by_position(r),    svg_kl_cdf(r),
                               svg_kl_vs_bits(rep), summary_markdown(r, rep), results_json(r, rep)};
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
