// The reference encoding of a trajectory (sjkv/io/trajectory.h holds the file) and the row
// arithmetic the recorder and the scorer share, so that identical rows give identical bits.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sjkv/io/trajectory.h"

namespace sjkv {
namespace replay {

// log(sum_i exp(row[i])) in double, in index order: max + log(sum exp(row[i] - max)).
double log_sum_exp(const float* row, uint32_t n);
// sum over i not in `kept` (ascending ids) of exp(row[i] - log_z), in index order. The
// recorder and the scorer call this same function, so identical rows give identical bits.
double rest_mass(const float* row, uint32_t n, double log_z, const std::vector<uint32_t>& kept);

// FNV-1a (64 bit) over the row's float32 bit patterns taken as u32 words, in index order: a
// cheap check that a recomputed row equals the recorded one bit for bit.
uint64_t logits_hash(const float* row, uint32_t n);
// The hidden encoding's record of one position: its logits row (n_vocab), log_z, hash, and
// the top min(top_n, n) tokens. Throws std::invalid_argument on a non-finite entry.
HiddenRef encode_hidden(const float* hidden, uint32_t n_embd, const float* row, uint32_t n,
                        uint32_t top_n = kHiddenTopTokens);
// Why `row` (recomputed from h.hidden) is not the row h was recorded from, or "" when it is.
std::string hidden_mismatch(const HiddenRef& h, const float* row, uint32_t n);

// Keeps the fewest top tokens (by logit, lowest id first on ties) whose self_kl is at most
// `target` nats. Throws std::invalid_argument on a non-finite logit.
RefDist encode_reference(const float* row, uint32_t n, double target);
// KL(p || p_hat) in nats, where p is the row's softmax and p_hat keeps the kept tokens' exact
// probabilities and spreads rest_mass evenly over the other tokens: what the stored form loses.
double self_kl(const float* row, uint32_t n, const RefDist& d);

}  // namespace replay
}  // namespace sjkv
