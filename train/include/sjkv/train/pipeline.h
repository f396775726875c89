// sjkv-train's work as one call: the starting tables, the inputs read with their provenance,
// the train / held-out split, generalized Lloyd on both sides (with checkpoints), the
// held-out comparison, and the codebook files committed together (docs/FORMAT.md section 8).
// The caller parses and checks the options and prints; this prints nothing.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "sjkv/io/load.h"
#include "sjkv/lloyd.h"
#include "sjkv/io/codebook.h"
#include "sjkv/io/lloyd_checkpoint.h"
#include "sjkv/train/train.h"

namespace sjkv::train {

// The train and held-out sets over all ranks.
struct SetSize {
  uint64_t train_tiles = 0, heldout_tiles = 0;
  uint64_t train_sequences = 0, heldout_sequences = 0;  // per side
};

// What train_and_evaluate reports while it works, for progress and messages (on rank 0 only).
struct TrainEvents {
  std::function<void(size_t done, size_t total)> reading;  // before each input, and once at the end
  std::function<void(const SetSize&)> read;                // every input read, before training
  std::function<void(Side)> side;                          // a side's training starts
  // --checkpoint: the side goes on from `path`, stopped at `state` (history.back(), stop) ...
  std::function<void(Side, const std::string& path, const LloydState& state)> resumed;
  // ... or `path` is from another run (other inputs or options) and the side starts over.
  std::function<void(Side, const std::string& path)> other_run;
  std::function<void(Side, const LloydIteration&)> iteration;
};

struct TrainRun {
  std::vector<std::string> inputs;  // captures, .kvd dumps or llama.cpp state files
  ImportOptions io;
  std::string prefix;               // the files of train_output_names(prefix, axis)
  uint32_t bits = 3;
  TrellisAxis axis = TrellisAxis::token;
  std::string init;                 // "" or "identity", "reference", a shipped table set's name, or a codebook file
  uint64_t seed = 1;                // of the split
  double heldout = 0.2;             // fraction of tiles held out
  double tol = LloydOptions{}.tol;
  uint32_t max_iters = LloydOptions{}.max_iters;
  int threads = 0;
  StagingType staging = StagingType::tq6_0;
  uint32_t sink = 128, iters = 16;
  bool assume_rotated = false;
  // Each side's Lloyd state goes to PREFIX.{k,v}.ckpt after every update; a run with the same
  // inputs and options goes on from there with the same bytes. Removed at the end.
  bool checkpoint = false;
  std::string tool_version;         // provenance, the C header's comment, the checkpoint key
  // One GPU pass per side (Device::lloyd_pass); empty, or returning empty: the CPU. Not used
  // on more than one rank.
  std::function<LloydPass()> lloyd_passes;
  // The ranks the work is spread over (null: this process alone). Input i is checked and
  // hashed by rank i mod size, every rank computes the targets of its whole chunks of the
  // train and held-out sequences, the Lloyd sums are combined in chunk order, and rank 0
  // writes the outputs: the same bytes for any number of ranks. A failure on any rank fails
  // every rank (cluster::Comm::agree), and nothing is written.
  const cluster::Comm* comm = nullptr;
  TrainEvents events;
};

// PREFIX.sjcb, PREFIX.bin and, for a token-axis table, PREFIX.h (the header's macro names are
// the reference generator's token-axis tables).
std::vector<std::string> train_output_names(const std::string& prefix, TrellisAxis axis);

// Held-out MSE of one side by table: scalar RTN, identity, the format's reference (none at 4
// bits), trained. NaN where there is no such number.
struct HeldoutRow {
  double scalar = std::numeric_limits<double>::quiet_NaN(), identity = scalar, reference = scalar, trained = scalar;
};

struct TrainReport {
  CodebookContainer codebook;          // what PREFIX.sjcb holds; codebook_id and raw_sha256 set
  std::vector<std::string> outputs;    // train_output_names, committed
  std::string init_name;               // the starting tables, as provenance names them
  LloydResult result[2];               // K, V
  HeldoutRow heldout[2];               // on the trellis targets y (units of the row step)
  HeldoutRow heldout_real[2];          // on the real values (sealed, refit, decoded); no scalar
  uint64_t train_tiles = 0, heldout_tiles = 0;
};

// Throws FileError for an input or init file that cannot be used, std::invalid_argument when
// the inputs hold no tile to train on; writes nothing then. With comm, every rank calls it and
// gets the report.
TrainReport train_and_evaluate(const TrainRun& run);

}  // namespace sjkv::train
