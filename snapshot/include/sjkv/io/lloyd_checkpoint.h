// Training checkpoint files (docs/FORMAT.md section 11), read and written here only: one
// side's Lloyd state, written by `sjkv-train --checkpoint` after every update so a stopped
// run can go on where it was. The state types are the trainer's (sjkv/train/train.h uses them).
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace sjkv {

struct LloydIteration {
  uint32_t iter = 0;          // 0: the starting table
  double train_mse = 0;       // of the table of this iteration, on the train set
  double heldout_mse = 0;     // same table, held-out set (NaN when empty)
  uint32_t entries_used = 0;  // windows some train target went through
  double heldout_real_mse = std::numeric_limits<double>::quiet_NaN();  // LloydOptions::real_mse of the fp16 table
};

// What lloyd_train needs to go on where it stopped: the accepted table (binary32) after
// history.back().iter updates, and why it stopped ("" while still running). Resuming from a
// state gives the same bits as a run never interrupted (each iteration depends only on the
// table and the data).
struct LloydState {
  std::vector<float> table;
  std::vector<LloydIteration> history;
  std::string stop;
};

// `run_key` (32 bytes) identifies the run: inputs, options and side.
struct LloydCheckpoint {
  uint32_t bits = 0;
  uint32_t side = 0;  // 0 K, 1 V
  std::array<uint8_t, 32> run_key{};
  LloydState state;
};
std::vector<uint8_t> lloyd_checkpoint_bytes(const LloydCheckpoint& c);
void write_lloyd_checkpoint(const std::string& path, const LloydCheckpoint& c);
LloydCheckpoint read_lloyd_checkpoint(const std::string& path);
LloydCheckpoint parse_lloyd_checkpoint(const std::string& path, const std::vector<uint8_t>& bytes);

}  // namespace sjkv
