#include "sjkv/replay/reference.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <string>

#include "sjkv/hd.h"

namespace sjkv {
namespace replay {
namespace {

uint64_t f64_bits(double f) {
  uint64_t u;
  std::memcpy(&u, &f, 8);
  return u;
}

}  // namespace

double log_sum_exp(const float* row, uint32_t n) {
  float m = -INFINITY;
  for (uint32_t i = 0; i < n; ++i) m = std::max(m, row[i]);
  double s = 0.0;
  for (uint32_t i = 0; i < n; ++i) s += std::exp(static_cast<double>(row[i]) - static_cast<double>(m));
  return static_cast<double>(m) + std::log(s);
}

double rest_mass(const float* row, uint32_t n, double log_z, const std::vector<uint32_t>& kept) {
  double s = 0.0;
  size_t k = 0;
  for (uint32_t i = 0; i < n; ++i) {
    if (k < kept.size() && kept[k] == i) {
      ++k;
      continue;
    }
    s += std::exp(static_cast<double>(row[i]) - log_z);
  }
  return s;
}

uint64_t logits_hash(const float* row, uint32_t n) {
  uint64_t h = 14695981039346656037ull;
  for (uint32_t i = 0; i < n; ++i) {
    h ^= f32_bits(row[i]);
    h *= 1099511628211ull;
  }
  return h;
}

namespace {

// The k largest logits' ids, best first (larger logit, then lower id): one pass keeping them in
// order, since nearly every logit falls below the k-th at once (a full partial sort cost as much
// as the rest of the check).
std::vector<uint32_t> top_ids(const float* row, uint32_t n, uint32_t k) {
  std::vector<uint32_t> best;
  best.reserve(k + 1);
  for (uint32_t i = 0; i < n; ++i) {
    // Ids come in increasing order, so a later id equal to the k-th is not better.
    if (best.size() == k && !(row[i] > row[best.back()])) continue;
    size_t at = best.size();
    while (at > 0 && row[i] > row[best[at - 1]]) --at;
    best.insert(best.begin() + static_cast<std::ptrdiff_t>(at), i);
    if (best.size() > k) best.pop_back();
  }
  return best;
}

}  // namespace

HiddenRef encode_hidden(const float* hidden, uint32_t n_embd, const float* row, uint32_t n, uint32_t top_n) {
  if (n == 0) throw std::invalid_argument("reference row is empty");
  for (uint32_t i = 0; i < n_embd; ++i)
    if (!std::isfinite(hidden[i])) throw std::invalid_argument("hidden state value " + std::to_string(i) + " is not finite");
  for (uint32_t i = 0; i < n; ++i)
    if (!std::isfinite(row[i])) throw std::invalid_argument("logit " + std::to_string(i) + " is not finite");
  HiddenRef h;
  h.hidden.assign(hidden, hidden + n_embd);
  h.log_z = log_sum_exp(row, n);
  h.logits_hash = logits_hash(row, n);
  h.top_ids = top_ids(row, n, std::min(n, top_n));
  for (uint32_t id : h.top_ids) h.top_logprobs.push_back(static_cast<float>(static_cast<double>(row[id]) - h.log_z));
  return h;
}

std::string hidden_mismatch(const HiddenRef& h, const float* row, uint32_t n) {
  if (logits_hash(row, n) != h.logits_hash) return "the logits row differs (hash)";
  if (h.top_ids.empty() || h.top_ids.size() > n || h.top_logprobs.size() != h.top_ids.size())
    return "the recorded top tokens do not fit the vocabulary";
  // What encode_hidden would store for this row, without its copies and finiteness pass (the row
  // came from project(), which refuses a non-finite logit).
  const double log_z = log_sum_exp(row, n);
  if (f64_bits(log_z) != f64_bits(h.log_z)) return "log_z differs";
  if (top_ids(row, n, static_cast<uint32_t>(h.top_ids.size())) != h.top_ids) return "the top tokens differ";
  for (size_t i = 0; i < h.top_ids.size(); ++i)
    if (f32_bits(static_cast<float>(static_cast<double>(row[h.top_ids[i]]) - log_z)) != f32_bits(h.top_logprobs[i]))
      return "the log-probability of top token " + std::to_string(h.top_ids[i]) + " differs";
  return {};
}

double self_kl(const float* row, uint32_t n, const RefDist& d) {
  const size_t k = d.ids.size();
  if (k >= n || d.rest_mass <= 0.0) return 0.0;
  const double log_u = std::log(d.rest_mass / static_cast<double>(n - k));
  double kl = 0.0;
  size_t j = 0;
  for (uint32_t i = 0; i < n; ++i) {
    if (j < k && d.ids[j] == i) {
      ++j;
      continue;
    }
    const double lp = static_cast<double>(row[i]) - d.log_z;
    const double p = std::exp(lp);
    if (p > 0.0) kl += p * (lp - log_u);
  }
  return std::max(kl, 0.0);
}

RefDist encode_reference(const float* row, uint32_t n, double target) {
  if (n == 0) throw std::invalid_argument("reference row is empty");
  for (uint32_t i = 0; i < n; ++i)
    if (!std::isfinite(row[i])) throw std::invalid_argument("logit " + std::to_string(i) + " is not finite");
  RefDist d;
  d.log_z = log_sum_exp(row, n);

  // Tail sums maintained while tokens move, best first, from the tail to the kept set:
  // self_kl(k) = sum_tail p log p - r log(r / (n - k)).
  double tail_plogp = 0.0, tail_mass = 0.0;
  for (uint32_t i = 0; i < n; ++i) {
    const double lp = static_cast<double>(row[i]) - d.log_z, p = std::exp(lp);
    if (p > 0.0) tail_plogp += p * lp;
    tail_mass += p;
  }
  std::vector<uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0u);
  auto better = [row](uint32_t a, uint32_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); };
  size_t sorted = std::min<size_t>(n, 2048);
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(sorted), order.end(), better);

  size_t k = 0;
  std::vector<uint32_t> kept;
  while (k < n) {
    if (k == sorted) {  // rarely: a flat row needs more than the first sorted block
      std::sort(order.begin() + static_cast<std::ptrdiff_t>(k), order.end(), better);
      sorted = n;
    }
    const uint32_t id = order[k++];
    const double lp = static_cast<double>(row[id]) - d.log_z, p = std::exp(lp);
    if (p > 0.0) tail_plogp -= p * lp;
    tail_mass -= p;
    const double est = (k == n || tail_mass <= 0.0)
                           ? 0.0
                           : tail_plogp - tail_mass * std::log(tail_mass / static_cast<double>(n - k));
    if (est > target) continue;
    // The running sums cancel; confirm with the exact computation before stopping.
    kept.assign(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k));
    std::sort(kept.begin(), kept.end());
    d.ids = kept;
    d.rest_mass = rest_mass(row, n, d.log_z, d.ids);
    if (k == n || self_kl(row, n, d) <= target) break;
  }
  d.logits.resize(d.ids.size());
  for (size_t i = 0; i < d.ids.size(); ++i) d.logits[i] = row[d.ids[i]];
  if (d.ids.size() == n) d.rest_mass = 0.0;
  return d;
}

}  // namespace replay
}  // namespace sjkv
