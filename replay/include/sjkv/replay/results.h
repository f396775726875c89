// The results folder of sjkv-replay score/run: results.json, positions.csv, depth.csv,
// answers.csv, summary.md and four SVG plots, each file written atomically (temp + rename)
// into the folder.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sjkv/io/atomic_file.h"
#include "sjkv/replay/score.h"
#include "sjkv/replay/reference.h"

namespace sjkv {
namespace replay {

// A scored position of an answer segment (FORMAT.md 9.4: given text decoded and scored).
struct AnswerPosition {
  uint32_t index = 0;     // the scored position: an index into TrajectoryInfo::positions and the rows
  uint32_t segment = 0;   // its segment's index in the trajectory's schedule()
  int32_t gold = 0;       // the answer token there
  bool ref_top = false;   // the reference's own top token is the answer token
};

struct TrajectoryInfo {
  std::string name;                  // file base name
  std::vector<uint32_t> positions;   // absolute position of each scored position, in stream order
  std::vector<AnswerPosition> answers;  // the scored positions of answer segments, in stream order
  uint32_t generated() const { return static_cast<uint32_t>(positions.size()); }  // scored positions
};

// `name` and what the results keep of trajectory `t`.
TrajectoryInfo trajectory_info(const std::string& name, const Trajectory& t);

struct ArmRows {
  std::string arm;
  std::vector<std::vector<ScoreRow>> rows;  // [trajectory][scored position]
  std::string note;  // a caveat on this arm's numbers (empty: none), e.g. its body never sealed
};

struct Results {
  std::string model_file, model_sha256;
  TrajectorySettings settings;  // the first trajectory's
  std::vector<TrajectoryInfo> trajectories;
  std::vector<ArmRows> arms;
  std::string baseline;         // one of the arms
  BootstrapOptions bootstrap;
};

// KL by depth: the generated positions (answer positions are left to answers.csv) in bins of
// absolute position, [kDepthEdges[i], kDepthEdges[i + 1]) in tokens (a 1-2-5 series), the last
// bin open.
constexpr uint32_t kDepthEdges[] = {0, 1000, 2000, 5000, 10000, 20000, 50000, 100000, 200000};
struct DepthRow {
  uint32_t from = 0, to = 0;   // [from, to); to 0: no upper end
  std::string arm;
  uint64_t positions = 0, trajectories = 0;  // generated positions in the bin, trajectories with any
  double mean_position = 0;                  // their mean absolute position
  double mean_kl = 0, same_top = 0;
  // Against the baseline over the bin's positions (compare_arms' block bootstrap within each
  // trajectory); NaN for the baseline itself or where the baseline's KL there sums to 0.
  double ratio = 0, ci_low = 0, ci_high = 0;
};
// Bins with no generated position are left out; within a bin the arms in Results order.
std::vector<DepthRow> depth_rows(const Results& r);

// The answer positions per arm: documents (trajectories) and needles (answer segments) for
// the nested bootstrap of the ratio to the baseline.
struct AnswerStats {
  std::string arm;
  uint64_t positions = 0, needles = 0;
  double mean_kl = 0;
  double gold_top = 0;          // fraction of answer positions whose top token is the answer
  double ratio = 0, ci_low = 0, ci_high = 0;  // summed KL / the baseline's; NaN for the baseline
};

struct Report {
  std::vector<ArmStats> arms;
  std::vector<Comparison> comparisons;  // every arm but the baseline, against it
  std::vector<DepthRow> depth;          // depth_rows()
  std::vector<AnswerStats> answers;     // per arm; empty when no trajectory has answer segments
  double ref_gold_top = 0;              // the reference's own gold top-1 rate over them
};

// Statistics and comparisons, the depth bins and the answers; std::invalid_argument when the
// baseline is not an arm or the arms' rows do not line up with the trajectories.
Report summarize(const Results& r);

std::string results_json(const Results& r, const Report& rep);
// positions.csv: trajectory,position,arm,kl,same_top,bits_occupied,bits_allocated, position
// the absolute one (TrajectoryInfo::positions).
std::string positions_csv(const Results& r);
// depth.csv: from,to,arm,positions,trajectories,mean_position,mean_kl,same_top,ratio,ci_low,
// ci_high (an empty field for the open end and for a number that does not exist).
std::string depth_csv(const Report& rep);
// answers.csv: trajectory,segment,position,arm,kl,gold_top,ref_gold_top, a line per answer
// position and arm (gold_top: the arm's top token is the answer token; ref_gold_top: the
// reference's); only the header when no trajectory has answer segments.
std::string answers_csv(const Results& r);
std::string summary_markdown(const Results& r, const Report& rep);
// A fixed-width table for the terminal (the arm column as wide as the longest name); the
// comparison lines show the CI over trajectories when there are several.
std::string summary_text(const Report& rep);

// Hand-written SVG (svg.cpp): KL against position per arm (log y), the KL CDF per arm (log x),
// mean KL against bits per value occupied (one labelled point per arm), mean KL per depth bin
// against the bin's mean absolute position per arm (log x, log y).
std::string svg_kl_by_position(const Results& r);
std::string svg_kl_cdf(const Results& r);
std::string svg_kl_vs_bits(const Report& rep);
std::string svg_kl_by_depth(const Report& rep);

// The files of a results folder, in the order they are committed (results.json last: its
// presence means complete).
constexpr const char* kResultFiles[] = {"positions.csv", "depth.csv",    "answers.csv",
                                        "kl_by_position.svg", "kl_cdf.svg", "kl_vs_bits.svg",
                                        "kl_by_depth.svg", "summary.md", "results.json"};

// Creates `dir` when missing and writes the nine files, all or none; FileError when it cannot.
// `also` are other outputs already written to their temporaries (the trajectory of a run),
// committed with them, before them.
void write_results(const std::string& dir, const Results& r, const Report& rep,
                   const std::vector<AtomicOutput*>& also = {});

// One line of positions.csv read back.
struct PositionRow {
  std::string trajectory, arm;
  uint32_t position = 0;
  ScoreRow row;
  std::string source;  // the positions.csv it was read from (empty when made in memory)
  uint64_t line = 0;   // and its line there
};
// Reads a positions.csv that positions_csv() wrote, checked as sjkv/io/positions_csv.h's
// read_positions_csv_rows checks it (FileError naming the file and the line on a defect).
std::vector<PositionRow> read_positions_csv(const std::string& path);

}  // namespace replay
}  // namespace sjkv
