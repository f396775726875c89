// The frontier's pick rule (frontier_rule) on synthetic tuning rows: each trajectory counts
// alike, a larger budget takes another arm only when it is better with confidence, the picks
// are nested and monotone, and the same rows give the same picks.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "sjkv/replay/frontier.h"

using namespace sjkv::replay;

namespace {

// Positions of one trajectory: level times a factor in [0.5, 1.5) (KL > 0, noisy).
std::vector<double> noisy(std::mt19937_64& g, double level, size_t n) {
  std::uniform_real_distribution<double> u(0.5, 1.5);
  std::vector<double> out(n);
  for (double& x : out) x = level * u(g);
  return out;
}

RuleCandidate candidate(std::mt19937_64& g, const std::string& arm, double bits, const std::vector<double>& levels,
                        size_t n = 200) {
  RuleCandidate c{arm, bits, {}};
  for (double l : levels) c.kl.push_back(noisy(g, l, n));
  return c;
}

double pooled(const RuleCandidate& c) {
  double s = 0, n = 0;
  for (const auto& t : c.kl)
    for (double x : t) {
      s += x;
      ++n;
    }
  return s / n;
}

BootstrapOptions fast() {
  BootstrapOptions o;
  o.replicates = 400;
  return o;
}

}  // namespace

TEST(FrontierRule, GeomeanCountsEveryTrajectoryAlike) {
  EXPECT_DOUBLE_EQ(geomean_kl({{1, 3}, {8, 8}}), 4.0);  // means 2 and 8
  // A harder trajectory (every arm's KL there x100) leaves the ranking of two arms as it was.
  const std::vector<std::vector<double>> a = {{0.01}, {0.03}}, b = {{0.02}, {0.02}};
  EXPECT_LT(geomean_kl(a), geomean_kl(b));
  EXPECT_LT(geomean_kl({{0.01}, {3.0}}), geomean_kl({{0.02}, {2.0}}));
  EXPECT_EQ(geomean_kl({{0.0, 0.0}, {1.0}}), 0.0);
  EXPECT_TRUE(std::isnan(geomean_kl({})));
  EXPECT_TRUE(std::isnan(geomean_kl({{1.0}, {}})));
}

// The heavy trajectory (KL 20x the others') would decide a pooled mean: the noisy arm wins it
// there and loses on the three others, so the pooled mean prefers it; the rule keeps the steady
// arm, and the noisy one is not better than the lower pick with confidence.
TEST(FrontierRule, NoisyWinnerOfOneTrajectoryIsNotPicked) {
  std::mt19937_64 g(42);
  const std::vector<double> base = {0.01, 0.012, 0.008, 0.2};
  auto times = [&](std::vector<double> f) {
    for (size_t t = 0; t < f.size(); ++t) f[t] *= base[t];
    return f;
  };
  const std::vector<RuleCandidate> c = {
      candidate(g, "base", 4, base),
      candidate(g, "steady", 6, times({0.7, 0.7, 0.7, 0.7})),
      candidate(g, "noisy", 7, times({1.4, 1.4, 1.4, 0.2})),
  };
  ASSERT_LT(pooled(c[2]), pooled(c[1]));  // what the old rule (lowest pooled mean) picked
  const FrontierRule r = frontier_rule({4, 8}, c, fast());
  ASSERT_EQ(r.picks.size(), 2u);
  EXPECT_EQ(r.picks[0], 0u);
  EXPECT_EQ(r.picks[1], 1u);
  EXPECT_LT(r.tests[1].high, 1.0);
  EXPECT_NEAR(r.tests[1].ratio, 0.7, 0.05);
  EXPECT_EQ(r.tests[1].budget, 8.0);
  EXPECT_GT(r.tests[2].high, 1.0);
  EXPECT_EQ(r.tests[2].budget, 8.0);
  // Alone beside the lower pick, the noisy arm is not taken either: the 8-bit pick stays.
  const FrontierRule alone = frontier_rule({4, 8}, {c[0], c[2]}, fast());
  EXPECT_EQ(alone.picks[1], 0u);
}

// An arm that is the lower pick plus noise (the same levels) does not replace it, even when its
// sample mean is lower; a clearly better arm does.
TEST(FrontierRule, NoiseBetterIsNotEnough) {
  std::mt19937_64 g(7);
  const std::vector<double> lv = {0.01, 0.02};
  std::vector<RuleCandidate> c = {candidate(g, "low", 4, lv, 60)};
  for (int i = 0; i < 8; ++i) c.push_back(candidate(g, "same" + std::to_string(i), 6, lv, 60));
  const FrontierRule r = frontier_rule({4, 6}, c, fast());
  EXPECT_EQ(r.picks[1], 0u) << c[r.picks[1]].arm;
  size_t lower_by_chance = 0;  // the test means something only if some sample means were lower
  for (size_t i = 1; i < c.size(); ++i) lower_by_chance += r.geomean[i] < r.geomean[0] ? 1 : 0;
  EXPECT_GT(lower_by_chance, 0u);
  c.push_back(candidate(g, "better", 5, {0.005, 0.01}, 60));
  const FrontierRule r2 = frontier_rule({4, 6}, c, fast());
  EXPECT_EQ(c[r2.picks[1]].arm, "better");
}

// Of the arms that pass the test, the one of most bits, though a cheaper one's sample mean is
// a little lower (two trajectories do not tell them apart)...
TEST(FrontierRule, OfThoseThatPassTheMostBits) {
  std::mt19937_64 g(11);
  const RuleCandidate low = candidate(g, "low", 4, {0.01, 0.02});
  const RuleCandidate cheap = candidate(g, "cheap", 5, {0.0058, 0.0116}), full = candidate(g, "full", 7, {0.006, 0.012});
  const FrontierRule r = frontier_rule({4, 8}, {low, cheap, full}, fast());
  ASSERT_LT(r.tests[1].high, 1.0);
  ASSERT_LT(r.tests[2].high, 1.0);
  ASSERT_LT(r.geomean[1], r.geomean[2]);
  EXPECT_EQ(r.picks[1], 2u);
  EXPECT_EQ(r.tests[2].budget, 8.0);
}

// ...unless the cheaper one is better than it with confidence too.
TEST(FrontierRule, CheaperBetterWithConfidenceWins) {
  std::mt19937_64 g(12);
  const RuleCandidate low = candidate(g, "low", 4, {0.01, 0.02});
  const RuleCandidate cheap = candidate(g, "cheap", 5, {0.003, 0.006}), full = candidate(g, "full", 7, {0.0085, 0.017});
  const FrontierRule r = frontier_rule({4, 8}, {low, cheap, full}, fast());
  ASSERT_LT(r.tests[2].high, 1.0);  // both pass
  EXPECT_EQ(r.picks[1], 1u);
  EXPECT_LT(r.tests[1].high, 1.0);
}

// Random candidate sets: every pick fits its budget, the lowest budget's is the lowest
// geomean_kl, a pick changes only by a confident test at that budget, the picks' geomean_kl
// never rises with the budget, and the same rows give the same result.
TEST(FrontierRule, NestedAndMonotone) {
  const std::vector<double> budgets = {4, 5, 6, 8, 9};
  size_t changed = 0, kept = 0;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    std::mt19937_64 g(seed);
    std::uniform_real_distribution<double> bits(3.5, 10), lvl(-7, -3), jit(-0.7, 0.7);
    std::vector<RuleCandidate> c;
    const size_t T = 2 + seed % 3;
    for (int i = 0; i < 14; ++i) {
      const double b = bits(g), center = lvl(g) - 0.3 * b;
      std::vector<double> levels;
      for (size_t t = 0; t < T; ++t) levels.push_back(std::exp(center + jit(g) + 0.8 * static_cast<double>(t)));
      c.push_back(candidate(g, "c" + std::to_string(i), b, levels, 40));
    }
    const FrontierRule r = frontier_rule(budgets, c, fast());
    ASSERT_EQ(r.picks.size(), budgets.size());
    double prev = std::numeric_limits<double>::infinity();
    for (size_t k = 0; k < budgets.size(); ++k) {
      const size_t p = r.picks[k];
      bool any = false;
      for (const RuleCandidate& x : c) any = any || x.bits <= budgets[k];
      ASSERT_EQ(p != kNoPick, any) << seed << " " << k;
      if (p == kNoPick) continue;
      EXPECT_LE(c[p].bits, budgets[k] + 1e-9);
      EXPECT_LE(r.geomean[p], prev) << seed << " " << k;
      prev = r.geomean[p];
      if (k == 0 || r.picks[k - 1] == kNoPick) {
        for (size_t i = 0; i < c.size(); ++i)
          if (c[i].bits <= budgets[k]) {
            EXPECT_LE(r.geomean[p], r.geomean[i]);
          }
      } else if (p != r.picks[k - 1]) {
        EXPECT_LT(r.tests[p].high, 1.0);
        EXPECT_EQ(r.tests[p].budget, budgets[k]);
        ++changed;
      } else {
        ++kept;
      }
    }
    const FrontierRule again = frontier_rule(budgets, c, fast());
    EXPECT_EQ(again.picks, r.picks);
    for (size_t i = 0; i < c.size(); ++i) {
      EXPECT_EQ(std::isnan(again.tests[i].high), std::isnan(r.tests[i].high));
      if (!std::isnan(r.tests[i].high)) {
        EXPECT_EQ(again.tests[i].high, r.tests[i].high);
      }
    }
  }
  EXPECT_GT(changed, 10u);  // both branches of the rule ran
  EXPECT_GT(kept, 10u);
}

// A lower pick with KL 0 on a trajectory cannot be beaten there; a budget with nothing below
// it picks by geomean_kl.
TEST(FrontierRule, EdgeCases) {
  std::mt19937_64 g(3);
  RuleCandidate zero = candidate(g, "zero", 4, {0.01, 0.01});
  for (double& x : zero.kl[1]) x = 0;
  const RuleCandidate better = candidate(g, "better", 6, {0.001, 0.001});
  const FrontierRule r = frontier_rule({4, 6}, {zero, better}, fast());
  EXPECT_EQ(r.picks[1], 0u);
  EXPECT_TRUE(std::isnan(r.tests[1].high));
  const FrontierRule r2 = frontier_rule({3, 6}, {zero, better}, fast());
  EXPECT_EQ(r2.picks[0], kNoPick);
  EXPECT_EQ(r2.picks[1], 0u);  // geomean 0: nothing below it
  EXPECT_EQ(r2.tests[0].budget, 6.0);
  EXPECT_TRUE(std::isnan(r2.tests[0].ratio));
}
