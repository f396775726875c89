// Fuzz target: positions.csv read back (read_positions_csv), the input of sjkv-replay compare
// and of the study. A file that passes must give rows the study table can use: names not
// empty, KL >= 0 and not NaN, bits finite and >= 0; and study_csv over them refuses only
// with a FileError naming the file (a position twice), or std::invalid_argument for the pair
// made here.
#include <cmath>
#include <cstdlib>

#include "fuzz_common.h"
#include "sjkv/io/file_error.h"
#include "sjkv/replay/compare.h"
#include "sjkv/replay/results.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = sjkv_fuzz::write_input("positions", data, size);
  try {
    const std::vector<sjkv::replay::PositionRow> rows = sjkv::replay::read_positions_csv(path);
    sjkv_fuzz::expect_consistent([&] {
      for (const auto& r : rows) {
        if (r.trajectory.empty() || r.arm.empty()) throw std::invalid_argument("empty name accepted");
        if (std::isnan(r.row.kl) || r.row.kl < 0) throw std::invalid_argument("bad KL accepted");
        if (!std::isfinite(r.row.bits_occupied) || r.row.bits_occupied < 0 || !std::isfinite(r.row.bits_allocated) ||
            r.row.bits_allocated < 0)
          throw std::invalid_argument("bad bits accepted");
      }
    });
    try {
      sjkv::replay::BootstrapOptions opt;
      opt.replicates = 100;
      std::vector<sjkv::replay::PairSpec> pairs;
      if (rows.size() >= 2) pairs.push_back({rows[0].arm, rows[1].arm});
      (void)sjkv::replay::study_csv(rows, pairs, opt);
    } catch (const sjkv::FileError& e) {
      if (e.path() != path) std::abort();  // a row's defect names the file it came from
    } catch (const std::invalid_argument&) {  // the pair made here, in memory
    }
  } catch (const sjkv::FileError&) {
  }
  return 0;
}
