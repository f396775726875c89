// Trellis codebook training (token axis): the Viterbi targets y of every sealed tile of a
// capture, exactly as the seal computes them, and generalized Lloyd over those sequences.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "sjkv/cluster.h"
#include "sjkv/config.h"
#include "sjkv/lloyd.h"
#include "sjkv/io/capture.h"
#include "sjkv/io/lloyd_checkpoint.h"

namespace sjkv::train {

// Sequences of one side: n sequences of `len` targets each, back to back.
struct Targets {
  uint32_t len = 128;
  std::vector<float> y;
  size_t sequences() const { return len ? y.size() / len : 0; }
};

// Train and held-out sequences of both sides, and how many tiles (records) fed each set.
// Under MPI (train_and_evaluate) a rank's set holds a slice: whole chunks of kLloydChunk
// sequences of the train and of the held-out order, and the functions below given the
// cluster::Comm combine the slices in that order.
struct TrainingSet {
  Targets train_k, train_v, heldout_k, heldout_v;
  uint64_t train_records = 0, heldout_records = 0;
  // Held-out records' seal inputs (staged rows read back as fp16, rotated basis),
  // [record][G][D] per side, and the configuration they are sealed with; for heldout_real_mse.
  std::vector<uint16_t> heldout_k_rows, heldout_v_rows;
  CodecConfig seal_config;
  bool have_config = false;
};

// Draws the train / held-out split of records: one uniform per record, in record order over
// all inputs; u < heldout_fraction puts the record in the held-out set. With cuRAND
// (SJKV_TRAIN_HAVE_CURAND) the draw is curandGenerateUniform from a host generator of type
// CURAND_RNG_PSEUDO_PHILOX4_32_10 seeded with `seed`; without it, the same stream from
// sjkv/philox.h (tested equal to cuRAND's, tests/gpu/test_gpu_train.cpp), so both builds split
// alike and rng_name() is the same.
class SplitDrawer {
 public:
  SplitDrawer(uint64_t seed, double heldout_fraction);
  ~SplitDrawer();
  SplitDrawer(const SplitDrawer&) = delete;
  SplitDrawer& operator=(const SplitDrawer&) = delete;
  std::vector<uint8_t> draw(size_t n);  // 1 = held out
  static const char* rng_name();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  double frac_;
};

struct TargetOptions {
  // Geometry and seal settings: head_dim comes from the capture; group must be 128; the
  // widths bits_k = bits_v = the trained width; staging, iters, balance, rotation and sink
  // as the engine seals. Records sealed: every full group of `group` positions after the
  // sink (what a cache with tail 0 seals; a longer tail only delays the same groups).
  CodecConfig config;
  bool assume_rotated = false;  // treat the capture as rotated even if not marked so
  int threads = 0;              // 0: all cores
};

// Records of one capture: layers x full groups after the sink x heads.
uint64_t capture_records(const Capture& cap, const TargetOptions& opt);
// The configuration records of a capture with this head size are sealed with (throws
// std::invalid_argument for one the trainer cannot use).
CodecConfig target_config(uint32_t head_dim, const TargetOptions& opt);
// Sequences one record gives: head_dim on the token axis, the group on the channel axis.
uint32_t sequences_per_record(const CodecConfig& c);
// The records [first, last) of a set of n that `rank` of `size` holds: whole chunks of
// kLloydChunk sequences, spread evenly, in order.
struct RecordRange {
  uint64_t first = 0, last = 0;
};
RecordRange shard_records(uint64_t n, uint32_t seqs_per_record, int rank, int size);
// keep[r] for the records of one input (held[r]: its split draws) that fall in a rank's train
// and held-out ranges; n_train / n_heldout count the records of each set before this input and
// are advanced past it.
std::vector<uint8_t> records_in_shard(const std::vector<uint8_t>& held, const RecordRange& train,
                                      const RecordRange& heldout, uint64_t* n_train, uint64_t* n_heldout);

// The inputs of one run share a head size: the error when an input's (`here`) differs from
// the first one's (`before`).
std::string head_dim_mismatch(uint32_t before, uint32_t here);

// Appends the targets of every sealed record of `cap` to `set`, split by `split`. Throws
// std::invalid_argument for a capture the configuration cannot seal or a value the staging
// cannot hold.
void append_capture_targets(const Capture& cap, const TargetOptions& opt, SplitDrawer& split, TrainingSet& set);
// The same for the records r (in the capture's record order) with keep[r] (all when keep is
// empty), held[r] the split's draw for record r.
void append_capture_targets(const Capture& cap, const TargetOptions& opt, const std::vector<uint8_t>& held,
                            const std::vector<uint8_t>& keep, TrainingSet& set);

// Mean squared error of targets coded by the trellis with decoded table `cbf` (Viterbi per
// sequence). Deterministic for any thread count. With `comm`, t is this rank's slice and the
// result is the whole set's (every rank takes part).
double trellis_mse(const Targets& t, uint32_t bits, const float* cbf, int threads, const cluster::Comm& comm = {});
// Scalar RTN at `bits`: every target to the nearest level 0..2^bits - 1.
double scalar_mse(const Targets& t, uint32_t bits, const cluster::Comm& comm = {});

// MSE on the real values of the held-out records: every held-out record sealed (the fast
// sealer: Viterbi, "norm" refit, column scales) with `k_table` / `v_table` (fp16, 2^(6+bits)
// entries), decoded, and compared with its seal input, per side. NaN without held-out records.
void heldout_real_mse(const TrainingSet& set, const uint16_t* k_table, const uint16_t* v_table, int threads,
                      double* mse_k, double* mse_v, const cluster::Comm& comm = {});

// The Lloyd history and resumable state live with their checkpoint file (sjkv/io).
using sjkv::LloydIteration;
using sjkv::LloydState;

struct LloydOptions {
  // Stops when an iteration's relative train-MSE gain (prev - cur) / prev falls below tol
  // (converged); max_iters is a safety cap, not the rule.
  uint32_t max_iters = 300;
  double tol = 1e-3;
  int threads = 0;
  std::function<void(const LloydIteration&)> on_iteration;
  // Optional: MSE on real values of this iteration's table rounded to fp16 (heldout_real_mse).
  std::function<double(const std::vector<uint16_t>&)> real_mse;
  // Optional: the encode + sum pass on another device (the GPU, Device::lloyd_pass), given
  // each Targets' y, sequences() and len. Same contract as the CPU pass (sjkv/lloyd.h).
  LloydPass pass;
  // Optional: start from this state instead of `init` (its iterations are not reported
  // again through on_iteration). Its last train MSE must be the data's with its table.
  const LloydState* resume = nullptr;
  // Optional: called with the state after every accepted update and once more when training
  // stops (stop set), for a checkpoint.
  std::function<void(const LloydState&)> on_state;
  // The ranks the train and held-out Targets are slices of (null: this process holds them);
  // not with `pass`.
  const cluster::Comm* comm = nullptr;
};

struct LloydResult {
  std::vector<float> table;         // last accepted table, binary32
  std::vector<uint16_t> table_f16;  // rounded to fp16
  std::vector<LloydIteration> history;
  uint32_t iterations = 0;          // updates accepted
  // Why it stopped: "converged" (gain below tol), "cap" (max_iters), "no gain" (an update
  // would have raised the train MSE; not taken) or "empty" (max_iters 0).
  std::string stop = "empty";
  double train_mse_f16 = 0, heldout_mse_f16 = 0;  // with the fp16 table
};

// Generalized Lloyd from `init` (2^(6+bits) fp16 entries): Viterbi-encode every train
// sequence, set each entry to the mean (binary64, summed in sequence order, partial sums per
// fixed chunk of sequences added in chunk order) of the targets coded through its window;
// an entry no target uses keeps its value. An update that would raise the train MSE is not
// taken and training stops there. The result is the same for any thread count.
LloydResult lloyd_train(const Targets& train, const Targets& heldout, uint32_t bits, const uint16_t* init,
                        const LloydOptions& opt);

}  // namespace sjkv::train
