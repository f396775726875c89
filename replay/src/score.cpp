// KL scoring, per-arm statistics and the paired bootstrap.
#include "sjkv/replay/score.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace sjkv {
namespace replay {

namespace {

// p (d + expm1(-d)), the outcome's share of KL(p||q) + sum q - sum p, with q = p exp(-d).
// d + expm1(-d) >= 0 exactly in real arithmetic; in doubles it can dip below 0 only by the
// rounding of expm1 (a few ulps of |d|). Those are set to 0; anything larger is returned as
// is, so a real negative shows up (the tests assert every KL >= 0).
double term(double p, double d) {
  double g = d + std::expm1(-d);
  if (g < 0.0 && g >= -4.0 * DBL_EPSILON * std::fabs(d)) g = 0.0;
  return p * g;
}

double nan() { return std::numeric_limits<double>::quiet_NaN(); }

}  // namespace

int32_t argmax(const float* row, uint32_t n) {
  uint32_t best = 0;
  for (uint32_t i = 1; i < n; ++i)
    if (row[i] > row[best]) best = i;
  return static_cast<int32_t>(best);
}

double kl_to_reference(const RefDist& p, const float* q, uint32_t n) {
  if (p.ids.empty() || p.ids.back() >= n) throw std::invalid_argument("reference does not fit the vocabulary");
  const double lz_q = log_sum_exp(q, n);
  double kl = 0.0;
  for (size_t i = 0; i < p.ids.size(); ++i) {
    const double lp = static_cast<double>(p.logits[i]) - p.log_z;
    const double lq = static_cast<double>(q[p.ids[i]]) - lz_q;
    kl += term(std::exp(lp), lp - lq);
  }
  const double rq = rest_mass(q, n, lz_q, p.ids);
  if (p.rest_mass > 0.0) {
    if (rq <= 0.0) return std::numeric_limits<double>::infinity();
    kl += term(p.rest_mass, std::log(p.rest_mass) - std::log(rq));
  } else {
    kl += rq;  // p puts nothing on the rest: the term is q's mass there
  }
  return kl;
}

double kl_full(const float* p, const float* q, uint32_t n) { return kl_full(p, log_sum_exp(p, n), q, n); }

double kl_full(const float* p, double lz_p, const float* q, uint32_t n) {
  const double lz_q = log_sum_exp(q, n);
  double kl = 0.0;
  for (uint32_t i = 0; i < n; ++i) {
    const double lp = static_cast<double>(p[i]) - lz_p, lq = static_cast<double>(q[i]) - lz_q;
    const double pi = std::exp(lp);
    // p_i underflowed to 0: the term p d + q - p is q's mass there (and 0 * expm1(huge) is NaN).
    kl += pi > 0.0 ? term(pi, lp - lq) : std::exp(lq);
  }
  return kl;
}

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return nan();
  std::sort(v.begin(), v.end());
  const double h = (static_cast<double>(v.size()) - 1.0) * q;
  const size_t lo = static_cast<size_t>(std::floor(h));
  if (lo + 1 >= v.size()) return v.back();
  const double frac = h - static_cast<double>(lo);
  if (frac == 0.0 || v[lo] == v[lo + 1]) return v[lo];
  return v[lo] + frac * (v[lo + 1] - v[lo]);
}

ArmStats arm_stats(const std::string& arm, const std::vector<std::vector<ScoreRow>>& rows) {
  ArmStats s;
  s.arm = arm;
  std::vector<double> kl;
  double sum = 0, occ = 0, alloc = 0;
  uint64_t same = 0;
  for (const auto& t : rows)
    for (const ScoreRow& r : t) {
      kl.push_back(r.kl);
      sum += r.kl;
      occ += r.bits_occupied;
      alloc += r.bits_allocated;
      same += r.same_top ? 1 : 0;
    }
  s.positions = kl.size();
  if (kl.empty()) {
    s.mean_kl = s.median_kl = s.p90_kl = s.p99_kl = s.max_kl = s.same_top = s.bits_occupied = s.bits_allocated = nan();
    return s;
  }
  const double n = static_cast<double>(kl.size());
  s.mean_kl = sum / n;
  s.median_kl = quantile(kl, 0.5);
  s.p90_kl = quantile(kl, 0.9);
  s.p99_kl = quantile(kl, 0.99);
  s.max_kl = *std::max_element(kl.begin(), kl.end());
  s.same_top = static_cast<double>(same) / n;
  s.bits_occupied = occ / n;
  s.bits_allocated = alloc / n;
  return s;
}

Comparison compare_arms(const std::string& arm, const std::string& baseline, const std::vector<std::vector<double>>& a,
                        const std::vector<std::vector<double>>& b, const BootstrapOptions& opt) {
  if (a.size() != b.size()) throw std::invalid_argument("compare_arms: trajectory counts differ");
  Comparison c;
  c.arm = arm;
  c.baseline = baseline;
  c.replicates = opt.replicates;
  const size_t T = a.size();
  std::vector<double> sum_a(T, 0.0), sum_b(T, 0.0);
  for (size_t t = 0; t < T; ++t) {
    if (a[t].size() != b[t].size()) throw std::invalid_argument("compare_arms: position counts differ");
    for (size_t i = 0; i < a[t].size(); ++i) {
      sum_a[t] += a[t][i];
      sum_b[t] += b[t][i];
      c.lower_at += a[t][i] < b[t][i] ? 1 : 0;
    }
    c.of += a[t].size();
  }
  double ta = 0, tb = 0;
  for (size_t t = 0; t < T; ++t) {
    ta += sum_a[t];
    tb += sum_b[t];
  }
  auto ratio = [](double x, double y) { return y > 0.0 ? x / y : nan(); };
  c.ratio = ratio(ta, tb);
  c.ci_low = c.ci_high = c.ci_low_traj = c.ci_high_traj = nan();
  if (c.of == 0 || !(tb > 0.0) || opt.replicates == 0) return c;

  // Positions, circular blocks within each trajectory.
  SplitMix64 rng(opt.seed);
  std::vector<double> reps;
  reps.reserve(opt.replicates);
  for (uint32_t r = 0; r < opt.replicates; ++r) {
    double ra = 0, rb = 0;
    for (size_t t = 0; t < T; ++t) {
      const size_t n = a[t].size();
      if (n == 0) continue;
      const size_t L = static_cast<size_t>(std::ceil(std::sqrt(static_cast<double>(n))));
      for (size_t taken = 0; taken < n;) {
        const size_t start = static_cast<size_t>(rng.below(n));
        for (size_t k = 0; k < L && taken < n; ++k, ++taken) {
          const size_t i = (start + k) % n;
          ra += a[t][i];
          rb += b[t][i];
        }
      }
    }
    const double v = ratio(ra, rb);
    if (!std::isnan(v)) reps.push_back(v);
  }
  c.ci_low = quantile(reps, 0.025);
  c.ci_high = quantile(reps, 0.975);

  if (T >= 2) {
    reps.clear();
    SplitMix64 rt(opt.seed ^ 0x7261a3c4e5f60789ull);
    for (uint32_t r = 0; r < opt.replicates; ++r) {
      double ra = 0, rb = 0;
      for (size_t k = 0; k < T; ++k) {
        const size_t t = static_cast<size_t>(rt.below(T));
        ra += sum_a[t];
        rb += sum_b[t];
      }
      const double v = ratio(ra, rb);
      if (!std::isnan(v)) reps.push_back(v);
    }
    c.ci_low_traj = quantile(reps, 0.025);
    c.ci_high_traj = quantile(reps, 0.975);
  }
  return c;
}

NestedRatio nested_bootstrap(const std::vector<std::vector<UnitKl>>& clusters, const BootstrapOptions& opt) {
  auto ratio = [](double x, double y) { return y > 0.0 ? x / y : nan(); };
  NestedRatio n;
  double ta = 0, tb = 0;
  for (const auto& c : clusters)
    for (const UnitKl& u : c) {
      ta += u.arm;
      tb += u.baseline;
    }
  n.ratio = ratio(ta, tb);
  n.ci_low = n.ci_high = nan();
  if (clusters.empty() || opt.replicates == 0) return n;
  SplitMix64 rng(opt.seed);
  std::vector<double> reps;
  reps.reserve(opt.replicates);
  const size_t C = clusters.size();
  for (uint32_t r = 0; r < opt.replicates; ++r) {
    double ra = 0, rb = 0;
    for (size_t k = 0; k < C; ++k) {
      const std::vector<UnitKl>& c = clusters[static_cast<size_t>(rng.below(C))];
      for (size_t i = 0; i < c.size(); ++i) {
        const UnitKl& u = c[static_cast<size_t>(rng.below(c.size()))];
        ra += u.arm;
        rb += u.baseline;
      }
    }
    const double v = ratio(ra, rb);
    if (!std::isnan(v)) reps.push_back(v);
  }
  n.replicates = static_cast<uint32_t>(reps.size());
  if (!reps.empty()) {
    n.ci_low = quantile(reps, 0.025);
    n.ci_high = quantile(reps, 0.975);
  }
  return n;
}

}  // namespace replay
}  // namespace sjkv
