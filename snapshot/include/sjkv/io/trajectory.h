// Trajectory files (docs/FORMAT.md section 9): the token ids of one recorded generation and
// the reference model's next-token distribution at every generated position, kept compactly
// so that scoring needs no second run of the reference. Two encodings: `hidden` (default)
// keeps the final hidden state, from which the scorer recomputes the exact logits with the
// same model's output step; `sparse` keeps the top logits themselves (no model needed).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sjkv/io/atomic_file.h"

namespace sjkv {

// How the reference distribution of one position is kept (FORMAT.md section 9.2): the top
// tokens exactly (their float32 logits), every other token as one "rest" outcome. Scoring
// uses the partition {each kept token, the rest}; a bit-identical logits row scores exactly 0.
struct RefDist {
  double log_z = 0.0;          // log-sum-exp of the full row in double (log_sum_exp below)
  double rest_mass = 0.0;      // probability of the tokens not kept (rest_mass below)
  std::vector<uint32_t> ids;   // kept token ids, strictly ascending
  std::vector<float> logits;   // their logits, exactly as the model produced them
  int32_t top() const;         // the kept id of the largest logit (the lowest id on a tie)
};

// Hidden encoding, one position: the normed final hidden state the output projection
// multiplies, and what the recording run saw, so that a scorer can check its recomputation
// bit for bit and a reader without the model can inspect the file.
struct HiddenRef {
  std::vector<float> hidden;         // [n_embd]
  double log_z = 0.0;                // log_sum_exp of the logits row
  uint64_t logits_hash = 0;          // logits_hash() of the row
  std::vector<uint32_t> top_ids;     // the top tokens, best first (larger logit, then lower id)
  std::vector<float> top_logprobs;   // float(logit - log_z) of each, in the same order
};

enum class RefEncoding { sparse, hidden };
const char* encoding_name(RefEncoding e);  // "sparse", "hidden"
// Throws std::invalid_argument on another name.
RefEncoding parse_encoding(const std::string& name);

// Top tokens the hidden encoding lists per position (fewer when the vocabulary is smaller).
constexpr uint32_t kHiddenTopTokens = 32;

// Largest ubatch a trajectory may record (sjkv-replay's --ubatch range).
constexpr uint32_t kMaxTrajectoryUbatch = 1u << 16;

struct TrajectorySettings {
  uint32_t generate = 0;       // tokens asked for (fewer are recorded after an end-of-generation token)
  bool sample = false;         // false: greedy
  uint64_t seed = 0;
  double temperature = 1.0, top_p = 1.0;
  uint32_t top_k = 0;          // 0: no top-k cut
  std::string reference = "f32";
  uint32_t ubatch = 512;
  uint32_t threads = 0;        // 0: OpenMP's default
  double self_kl_target = 5e-7;  // sparse encoding only
};

struct Trajectory {
  std::string model_file;       // base name of the model file
  std::string model_sha256;     // lower-case hex of the whole file
  std::string architecture;
  uint32_t n_vocab = 0;
  uint32_t prompt_tokens = 0;
  std::vector<int32_t> tokens;  // prompt then generated, [prompt_tokens + ref.size()]
  TrajectorySettings settings;
  RefEncoding encoding = RefEncoding::hidden;
  // Position j is the distribution of token prompt_tokens + j, given the tokens before it.
  // sparse: ref[j]; hidden: hid[j] (the other vector is empty).
  std::vector<RefDist> ref;
  double self_kl_max = 0.0;     // sparse: largest self_kl() over the recorded positions; hidden: 0
  uint32_t n_embd = 0;          // hidden: the hidden state's length
  std::vector<HiddenRef> hid;

  uint32_t generated() const {
    return static_cast<uint32_t>(encoding == RefEncoding::sparse ? ref.size() : hid.size());
  }
  // The generated token at position j: the reference's top token when greedy.
  int32_t top_token(uint32_t j) const {
    return encoding == RefEncoding::sparse ? ref[j].top() : static_cast<int32_t>(hid[j].top_ids[0]);
  }
  // Throws std::invalid_argument naming the first inconsistency.
  void check_consistent() const;
};

// Writes atomically (temp + rename). std::invalid_argument when inconsistent or the zstd level
// is bad (nothing created); FileError when the file cannot be written.
void write_trajectory(const std::string& path, const Trajectory& t, int zstd_level = 3);
// The same into `out`'s temporary, not committed: for outputs committed together (commit_all).
void write_trajectory(AtomicOutput& out, const Trajectory& t, int zstd_level = 3);
// Reads and validates like hostile input; FileError(path, defect).
Trajectory read_trajectory(const std::string& path);

}  // namespace sjkv
