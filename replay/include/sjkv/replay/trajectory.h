// Trajectory files (docs/FORMAT.md section 9): the token ids of one recorded generation and
// the reference model's next-token distribution at every generated position, kept compactly
// so that scoring needs no second run of the reference.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sjkv {
namespace replay {

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

struct TrajectorySettings {
  uint32_t generate = 0;       // tokens asked for (fewer are recorded after an end-of-generation token)
  bool sample = false;         // false: greedy
  uint64_t seed = 0;
  double temperature = 1.0, top_p = 1.0;
  uint32_t top_k = 0;          // 0: no top-k cut
  std::string reference = "f32";
  uint32_t ubatch = 512;
  uint32_t threads = 0;        // 0: OpenMP's default
  double self_kl_target = 5e-7;
};

struct Trajectory {
  std::string model_file;       // base name of the model file
  std::string model_sha256;     // lower-case hex of the whole file
  std::string architecture;
  uint32_t n_vocab = 0;
  uint32_t prompt_tokens = 0;
  std::vector<int32_t> tokens;  // prompt then generated, [prompt_tokens + ref.size()]
  TrajectorySettings settings;
  // ref[j]: the distribution of token prompt_tokens + j, given the tokens before it.
  std::vector<RefDist> ref;
  double self_kl_max = 0.0;     // largest self_kl() over the recorded positions

  uint32_t generated() const { return static_cast<uint32_t>(ref.size()); }
  // Throws std::invalid_argument naming the first inconsistency.
  void check_consistent() const;
};

// Writes atomically (temp + rename). std::invalid_argument when inconsistent or the zstd level
// is bad (nothing created); FileError when the file cannot be written.
void write_trajectory(const std::string& path, const Trajectory& t, int zstd_level = 3);
// Reads and validates like hostile input; FileError(path, defect).
Trajectory read_trajectory(const std::string& path);

// ---- the reference encoding and the shared row arithmetic ---------------------------------

// log(sum_i exp(row[i])) in double, in index order: max + log(sum exp(row[i] - max)).
double log_sum_exp(const float* row, uint32_t n);
// sum over i not in `kept` (ascending ids) of exp(row[i] - log_z), in index order. The
// recorder and the scorer call this same function, so identical rows give identical bits.
double rest_mass(const float* row, uint32_t n, double log_z, const std::vector<uint32_t>& kept);

// Keeps the fewest top tokens (by logit, lowest id first on ties) whose self_kl is at most
// `target` nats. Throws std::invalid_argument on a non-finite logit.
RefDist encode_reference(const float* row, uint32_t n, double target);
// KL(p || p_hat) in nats, where p is the row's softmax and p_hat keeps the kept tokens' exact
// probabilities and spreads rest_mass evenly over the other tokens: what the stored form loses.
double self_kl(const float* row, uint32_t n, const RefDist& d);

}  // namespace replay
}  // namespace sjkv
