// The study table (scripts/study, docs/RESULTS.md): the per-position rows of many results
// folders summarised per history (trajectory) and arm, and paired comparisons of arms with
// bootstrap CIs over positions and over histories.
#pragma once

#include <string>
#include <vector>

#include "sjkv/replay/results.h"
#include "sjkv/replay/score.h"

namespace sjkv {
namespace replay {

struct PairSpec {
  std::string arm, baseline;
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
// std::invalid_argument when a position appears twice, a pair names an arm with no rows, the
// two arms of a pair share no history or were scored at different positions.
std::string study_csv(const std::vector<PositionRow>& rows, const std::vector<PairSpec>& pairs,
                      const BootstrapOptions& opt);

}  // namespace replay
}  // namespace sjkv
