// The results folder of sjkv-replay score/run: results.json, positions.csv, summary.md and
// three SVG plots, each file written atomically (temp + rename) into the folder.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sjkv/io/atomic_file.h"
#include "sjkv/replay/score.h"
#include "sjkv/replay/reference.h"

namespace sjkv {
namespace replay {

struct TrajectoryInfo {
  std::string name;             // file base name
  uint32_t prompt_tokens = 0;   // scored positions are prompt_tokens .. prompt_tokens + generated - 1
  uint32_t generated = 0;
};

struct ArmRows {
  std::string arm;
  std::vector<std::vector<ScoreRow>> rows;  // [trajectory][generated position]
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

struct Report {
  std::vector<ArmStats> arms;
  std::vector<Comparison> comparisons;  // every arm but the baseline, against it
};

// Statistics and comparisons; std::invalid_argument when the baseline is not an arm or the
// arms' rows do not line up with the trajectories.
Report summarize(const Results& r);

std::string results_json(const Results& r, const Report& rep);
std::string positions_csv(const Results& r);
std::string summary_markdown(const Results& r, const Report& rep);
// A fixed-width table for the terminal (the arm column as wide as the longest name); the
// comparison lines show the CI over trajectories when there are several.
std::string summary_text(const Report& rep);

// Hand-written SVG (svg.cpp): KL against position per arm (log y), the KL CDF per arm (log x),
// mean KL against bits per value occupied (one labelled point per arm).
std::string svg_kl_by_position(const Results& r);
std::string svg_kl_cdf(const Results& r);
std::string svg_kl_vs_bits(const Report& rep);

// The files of a results folder, in the order they are committed (results.json last: its
// presence means complete).
constexpr const char* kResultFiles[] = {"positions.csv", "kl_by_position.svg", "kl_cdf.svg",
                                        "kl_vs_bits.svg", "summary.md",        "results.json"};

// Creates `dir` when missing and writes the six files, all or none; FileError when it cannot.
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
// Reads a positions.csv that positions_csv() wrote: the header, seven fields a line, a finite
// KL >= 0 (or "inf"), same_top 0 or 1, finite bits >= 0, a line end after the last row (a file
// cut inside its last number is refused). FileError naming the file and the line on a defect;
// a FIFO or other non-regular file is refused without blocking.
std::vector<PositionRow> read_positions_csv(const std::string& path);

}  // namespace replay
}  // namespace sjkv
