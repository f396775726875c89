// The study table (scripts/study, docs/RESULTS.md): the per-position rows of many results
// folders summarised per history (trajectory) and arm, and paired comparisons of arms with
// bootstrap CIs over positions and over histories.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "sjkv/replay/results.h"
#include "sjkv/replay/score.h"

namespace sjkv {
namespace replay {

struct PairSpec {
  PairSpec() = default;
  PairSpec(std::string a, std::string b, std::string src = {}, uint64_t at = 0)
      : arm(std::move(a)), baseline(std::move(b)), source(std::move(src)), line(at) {}
  std::string arm, baseline;
  std::string source;  // the pairs file it was read from (empty when made in memory)
  uint64_t line = 0;   // and its line there
};

// A pairs file: one "ARM BASELINE" per line (whitespace between), '#' comments, blank lines.
// FileError naming the file and line on a defect.
std::vector<PairSpec> read_pairs(const std::string& path);

// CSV with the columns history,arm,baseline,statistic,value (history "all": every history of
// the arm, or of the pair):
//  - each arm, per history and "all": positions, mean_kl, median_kl, p90_kl, p99_kl, max_kl,
//    same_top, bits_occupied, bits_allocated (baseline empty);
//  - each pair over the histories both arms have: ratio, ci_low_positions, ci_high_positions,
//    ci_low_histories, ci_high_histories, lower_at, of, histories_won, histories, and the ratio
//    of each history.
// Arms and histories in name order, so the bytes do not depend on the order of the inputs.
// Refused when a position appears twice, a pair names an arm with no rows, the two arms of a
// pair share no history or were scored at different positions: FileError naming the file the
// defect is in (the row's or the pair's source: the second of a position, the pairs file, the
// arm's positions.csv), std::invalid_argument for rows and pairs made in memory.
std::string study_csv(const std::vector<PositionRow>& rows, const std::vector<PairSpec>& pairs,
                      const BootstrapOptions& opt);

}  // namespace replay
}  // namespace sjkv
