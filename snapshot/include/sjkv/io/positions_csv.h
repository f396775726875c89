// positions.csv (docs/FORMAT.md section 10): one line per scored position of each trajectory and
// arm, written by sjkv-replay score and run into every results folder and into the frontier's
// store, read back by compare, the frontier store and scripts/study. Written and read here only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sjkv {

// The header line, without its line end.
constexpr const char* kPositionsCsvHeader = "trajectory,position,arm,kl,same_top,bits_occupied,bits_allocated";

struct PositionsCsvRow {
  std::string trajectory, arm;  // the trajectory file's base name, the arm spec
  uint32_t position = 0;        // absolute position in the trajectory
  double kl = 0;                // finite >= 0, or +inf
  bool same_top = false;
  double bits_occupied = 0, bits_allocated = 0;
  std::string source;  // the file it was read from (empty when made in memory)
  uint64_t line = 0;   // and its line there
};

// One line with its line end: names as CSV fields (csv_field), the KL with 17 significant digits
// (it reads back to the same double) or "inf", the bits with 6.
std::string positions_csv_line(const PositionsCsvRow& r);

// Reads a positions.csv: the header, seven fields a line, a finite KL >= 0 (or "inf"), same_top 0
// or 1, finite bits >= 0, a line end after the last row (a file cut inside its last number is
// refused). FileError naming the file and the line on a defect; a FIFO or other non-regular file
// is refused without blocking.
std::vector<PositionsCsvRow> read_positions_csv_rows(const std::string& path);

}  // namespace sjkv
