// Results by position in the context: TrajectoryInfo's absolute positions and answers, KL by
// depth (depth.csv, kl_by_depth.svg), answers.csv, and the nested bootstrap of the needle study.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <utility>

#include "tiny_model.h"
#include "sjkv/replay/results.h"
#include "sjkv/replay/run.h"
#include "sjkv/replay/score.h"
#include "sjkv/replay/score_set.h"

using namespace sjkv;
using namespace sjkv::replay;
using sjkv_test::PlainArm;
using sjkv_test::TinyModel;

namespace {

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "sjkv-results-" + std::to_string(::getpid()) + "-" + name;
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

PlannedSegment piece(SegmentKind kind, std::vector<int32_t> tokens = {}) {
  PlannedSegment p;
  p.kind = kind;
  p.tokens = std::move(tokens);
  return p;
}

std::vector<int32_t> run_of(int32_t first, uint32_t n) {
  std::vector<int32_t> v(n);
  for (uint32_t i = 0; i < n; ++i) v[i] = first + static_cast<int32_t>(i * 37 % 1000);
  return v;
}

// A multi-turn recording of the tiny model with f32: a turn of 8 generated tokens at 60, one of 6
// after 1,000 more given tokens, and an answer of 3 tokens at the end (segment 5).
Trajectory multi_turn(TinyModel& m, const KvArm& ref) {
  RecordInput in;
  in.settings.generate = 8;
  in.settings.ubatch = 16;
  in.settings.reference = ref.spec();
  in.model_file = "tiny.gguf";
  in.model_sha256 = std::string(64, '0');
  in.plan = {piece(SegmentKind::given, run_of(1000, 60)), piece(SegmentKind::generated),
             piece(SegmentKind::given, run_of(20, 1000)), piece(SegmentKind::generated),
             piece(SegmentKind::given, run_of(500, 10)), piece(SegmentKind::answer, {5, 6, 7})};
  return record_trajectory(m, ref, in);
}

}  // namespace

// ---- the scored positions and the answers of a multi-segment trajectory ---------------------

TEST(ResultsByPosition, TrajectoryInfoKeepsAbsolutePositionsAndAnswers) {
  TinyModel m(4096);
  const PlainArm f32(false), f16(true);
  const Trajectory t = multi_turn(m, f32);
  ASSERT_EQ(t.segments.size(), 6u);
  const uint32_t G = t.generated(), gen2 = t.segments[3].length;
  ASSERT_EQ(t.segments[1].length, 8u);
  ASSERT_GE(gen2, 1u);
  ASSERT_EQ(G, 8 + gen2 + 3);

  const TrajectoryInfo info = trajectory_info("s.h5", t);
  EXPECT_EQ(info.name, "s.h5");
  EXPECT_EQ(info.positions, t.scored_positions());
  EXPECT_EQ(info.generated(), G);
  EXPECT_EQ(info.positions[0], 60u);
  EXPECT_EQ(info.positions[8], 60u + 8 + 1000);
  ASSERT_EQ(info.answers.size(), 3u);
  for (uint32_t k = 0; k < 3; ++k) {
    const AnswerPosition& a = info.answers[k];
    EXPECT_EQ(a.index, G - 3 + k);
    EXPECT_EQ(a.segment, 5u);
    EXPECT_EQ(info.positions[a.index], t.n_tokens() - 3 + k);
    EXPECT_EQ(a.gold, 5 + static_cast<int32_t>(k));
    EXPECT_EQ(a.ref_top, t.top_token(a.index) == a.gold);
  }

  // A version-2 trajectory: prompt_tokens + j, and no answers.
  RecordInput v2;
  v2.prompt = run_of(3, 40);
  v2.settings.generate = 5;
  v2.settings.ubatch = 8;
  v2.model_file = "tiny.gguf";
  v2.model_sha256 = std::string(64, '0');
  const Trajectory t2 = record_trajectory(m, f32, v2);
  const TrajectoryInfo i2 = trajectory_info("v2.h5", t2);
  ASSERT_EQ(i2.positions.size(), t2.generated());
  for (uint32_t j = 0; j < t2.generated(); ++j) EXPECT_EQ(i2.positions[j], t2.prompt_tokens + j);
  EXPECT_TRUE(i2.answers.empty());
}

// score_set fills the results from the trajectory: positions.csv at the absolute positions,
// answers.csv with each arm's top token against the answer, depth.csv over the generated
// positions only; the reference arm's gold_top is the reference's own.
TEST(ResultsByPosition, ScoredSessionWritesPositionsAnswersAndDepth) {
  TinyModel m(4096);
  const PlainArm f32(false), f16(true);
  ScoreSet set;
  set.paths = {"dir/s.h5"};
  set.trajectories.push_back(multi_turn(m, f32));
  const Trajectory& t = set.trajectories[0];
  ScorePlan plan;
  plan.arms = {"f32", "f16"};
  plan.baseline = "f32";
  plan.bootstrap.replicates = 200;
  const Results r = score_set(m, "tiny.gguf", std::string(64, '0'), set, {&f32, &f16}, plan, {});
  ASSERT_EQ(r.trajectories.size(), 1u);
  const TrajectoryInfo& info = r.trajectories[0];
  EXPECT_EQ(info.positions, t.scored_positions());
  ASSERT_EQ(info.answers.size(), 3u);
  for (const ArmRows& a : r.arms)
    for (uint32_t j = 0; j < t.generated(); ++j) {
      const ScoreRow& row = a.rows[0][j];
      EXPECT_GE(row.top, 0);
      EXPECT_EQ(row.same_top, row.top == t.top_token(j)) << a.arm << " " << j;
    }

  const std::vector<PositionRow> back = [&] {
    const std::string p = temp_path("positions.csv");
    std::ofstream(p, std::ios::binary) << positions_csv(r);
    std::vector<PositionRow> v = read_positions_csv(p);
    std::remove(p.c_str());
    return v;
  }();
  ASSERT_EQ(back.size(), 2u * t.generated());
  for (size_t i = 0; i < back.size(); ++i) EXPECT_EQ(back[i].position, info.positions[i % t.generated()]) << i;

  const std::vector<std::string> ans = lines(answers_csv(r));
  ASSERT_EQ(ans.size(), 1u + 2 * 3);
  EXPECT_EQ(ans[0], "trajectory,segment,position,arm,kl,gold_top,ref_gold_top");
  size_t line = 1;
  for (const ArmRows& a : r.arms)
    for (const AnswerPosition& x : info.answers) {
      const ScoreRow& row = a.rows[0][x.index];
      char kl[64];
      std::snprintf(kl, sizeof kl, "%.17g", row.kl);
      const std::string want = "s.h5,5," + std::to_string(info.positions[x.index]) + "," + a.arm + "," + kl + "," +
                               (row.top == x.gold ? "1" : "0") + "," + (x.ref_top ? "1" : "0");
      EXPECT_EQ(ans[line++], want);
      if (a.arm == "f32") {  // the reference replaying itself: its top is the reference's
        EXPECT_EQ(row.kl, 0.0);
        EXPECT_EQ(row.top == x.gold, x.ref_top);
      }
    }

  const Report rep = summarize(r);
  // 8 generated positions at 60-67 (0-1K), the second turn at 1068.. (1K-2K); the answers at
  // the end of the 1K-2K bin are not counted there.
  ASSERT_EQ(rep.depth.size(), 4u);
  const uint32_t gen2 = t.segments[3].length;
  for (size_t k = 0; k < 4; ++k) {
    const DepthRow& d = rep.depth[k];
    EXPECT_EQ(d.arm, k % 2 ? "f16" : "f32");
    EXPECT_EQ(d.from, k < 2 ? 0u : 1000u);
    EXPECT_EQ(d.to, k < 2 ? 1000u : 2000u);
    EXPECT_EQ(d.positions, k < 2 ? 8u : gen2);
    EXPECT_EQ(d.trajectories, 1u);
    EXPECT_DOUBLE_EQ(d.mean_position, k < 2 ? 63.5 : 1068.0 + (gen2 - 1) / 2.0);
    if (k % 2 == 0) {
      EXPECT_EQ(d.mean_kl, 0.0);
      EXPECT_TRUE(std::isnan(d.ratio));
    } else {
      EXPECT_GT(d.mean_kl, 0.0);
      EXPECT_TRUE(std::isnan(d.ratio));  // the baseline's KL there sums to 0
    }
  }
  ASSERT_EQ(rep.answers.size(), 2u);
  EXPECT_EQ(rep.answers[0].positions, 3u);
  EXPECT_EQ(rep.answers[0].needles, 1u);
  EXPECT_EQ(rep.answers[0].mean_kl, 0.0);
  uint64_t ref_gold = 0;
  for (const AnswerPosition& x : info.answers) ref_gold += x.ref_top;
  EXPECT_DOUBLE_EQ(rep.ref_gold_top, ref_gold / 3.0);
  EXPECT_DOUBLE_EQ(rep.answers[0].gold_top, rep.ref_gold_top);
}

// A version-2 set has no answers: answers.csv is its header alone, the summary has no answers
// table, and results.json keeps the keys its readers know.
TEST(ResultsByPosition, Version2ResultsKeepTheirShape) {
  TinyModel m(4096);
  const PlainArm f32(false), f16(true);
  RecordInput in;
  in.prompt = run_of(3, 40);
  in.settings.generate = 6;
  in.settings.ubatch = 8;
  in.model_file = "tiny.gguf";
  in.model_sha256 = std::string(64, '0');
  in.settings.reference = f16.spec();
  ScoreSet set;
  set.paths = {"a.h5"};
  set.trajectories.push_back(record_trajectory(m, f16, in));
  ScorePlan plan;
  plan.arms = {"f32", "f16"};
  plan.baseline = "f32";
  plan.bootstrap.replicates = 100;
  const Results r = score_set(m, "tiny.gguf", std::string(64, '0'), set, {&f32, &f16}, plan, {});
  const Report rep = summarize(r);
  EXPECT_EQ(answers_csv(r), "trajectory,segment,position,arm,kl,gold_top,ref_gold_top\n");
  EXPECT_TRUE(rep.answers.empty());
  const std::string md = summary_markdown(r, rep);
  EXPECT_EQ(md.find("Answer positions"), std::string::npos);
  EXPECT_NE(md.find("KL by depth"), std::string::npos);
  EXPECT_NE(md.find("| 0-1K | `f16` | 6 | 1 |"), std::string::npos) << md;
  const std::string json = results_json(r, rep);
  EXPECT_NE(json.find("\"prompt_tokens\": 40, \"generated\": 6,"), std::string::npos) << json;
  // The f16 arm replays the f16 recording exactly: its ratio to f32 in the bin is 0.
  ASSERT_EQ(rep.depth.size(), 2u);
  EXPECT_GT(rep.depth[0].mean_kl, 0.0);
  EXPECT_EQ(rep.depth[1].ratio, 0.0);
  EXPECT_EQ(rep.depth[1].ci_low, 0.0);
  EXPECT_EQ(rep.depth[1].ci_high, 0.0);

  const std::string dir = temp_path("folder");
  write_results(dir, r, rep);
  for (const char* f : kResultFiles) {
    const std::string p = dir + "/" + f;
    EXPECT_FALSE(slurp(p).empty()) << f;
    std::remove(p.c_str());
  }
  EXPECT_EQ(::rmdir(dir.c_str()), 0);  // nothing else was written
}

// ---- KL by depth on rows made by hand -------------------------------------------------------

namespace {

ScoreRow row(double kl, bool same = true) {
  ScoreRow s;
  s.kl = kl;
  s.same_top = same;
  return s;
}

// Two trajectories, arms "a" and "b" (the baseline); trajectory 0's position 500 is an answer.
Results hand_results() {
  Results r;
  r.model_file = "m.gguf";
  r.baseline = "b";
  r.bootstrap.replicates = 300;
  TrajectoryInfo t0, t1;
  t0.name = "t0.h5";
  t0.positions = {10, 500, 1500, 25000};
  AnswerPosition ans;
  ans.index = 1;
  ans.segment = 3;
  ans.gold = 42;
  ans.ref_top = true;
  t0.answers = {ans};
  t1.name = "t1.h5";
  t1.positions = {999, 1000, 250000};
  r.trajectories = {t0, t1};
  r.arms = {{"a", {{row(0.2), row(9.0), row(0.3, false), row(0.5)}, {row(0.4), row(0.1), row(0.6)}}, ""},
            {"b", {{row(0.1), row(1.0), row(0.1), row(0.25)}, {row(0.1), row(0.2), row(0.2)}}, ""}};
  r.arms[0].rows[0][1].top = 42;
  r.arms[1].rows[0][1].top = 7;
  return r;
}

}  // namespace

// The summary's statistics and comparisons leave the answer positions to the answers table;
// results of answers alone keep them (the table is never empty).
TEST(ResultsByPosition, MainStatisticsAreOverTheGeneratedPositions) {
  Results r = hand_results();
  Report rep = summarize(r);
  ASSERT_EQ(rep.arms.size(), 2u);
  EXPECT_EQ(rep.arms[0].positions, 6u);  // 7 scored, one an answer
  EXPECT_DOUBLE_EQ(rep.arms[0].mean_kl, (0.2 + 0.3 + 0.5 + 0.4 + 0.1 + 0.6) / 6);  // not the answer's 9.0
  EXPECT_DOUBLE_EQ(rep.arms[0].max_kl, 0.6);
  ASSERT_EQ(rep.comparisons.size(), 1u);
  EXPECT_EQ(rep.comparisons[0].of, 6u);
  // Every scored position an answer: they stay in the main table.
  for (TrajectoryInfo& t : r.trajectories) {
    t.answers.clear();
    for (uint32_t j = 0; j < t.positions.size(); ++j) {
      AnswerPosition a;
      a.index = j;
      t.answers.push_back(a);
    }
  }
  rep = summarize(r);
  EXPECT_EQ(rep.arms[0].positions, 7u);
  EXPECT_DOUBLE_EQ(rep.arms[0].max_kl, 9.0);
}

TEST(ResultsByPosition, DepthBinsHoldGeneratedPositionsByAbsolutePosition) {
  const Results r = hand_results();
  const Report rep = summarize(r);
  // Bins 0-1K (10, 999; 500 is an answer), 1K-2K (1500, 1000), 20K-50K (25000), 200K+ (250000).
  ASSERT_EQ(rep.depth.size(), 8u);
  const uint32_t from[] = {0, 1000, 20000, 200000}, to[] = {1000, 2000, 50000, 0};
  const uint64_t n[] = {2, 2, 1, 1}, traj[] = {2, 2, 1, 1};
  const double pos[] = {504.5, 1250, 25000, 250000};
  const double kl_a[] = {0.3, 0.2, 0.5, 0.6}, kl_b[] = {0.1, 0.15, 0.25, 0.2};
  for (size_t b = 0; b < 4; ++b)
    for (size_t k = 0; k < 2; ++k) {
      const DepthRow& d = rep.depth[2 * b + k];
      EXPECT_EQ(d.arm, k ? "b" : "a");
      EXPECT_EQ(d.from, from[b]);
      EXPECT_EQ(d.to, to[b]);
      EXPECT_EQ(d.positions, n[b]);
      EXPECT_EQ(d.trajectories, traj[b]);
      EXPECT_DOUBLE_EQ(d.mean_position, pos[b]);
      EXPECT_DOUBLE_EQ(d.mean_kl, k ? kl_b[b] : kl_a[b]) << b;
      if (k) {
        EXPECT_TRUE(std::isnan(d.ratio));
      } else {
        EXPECT_DOUBLE_EQ(d.ratio, kl_a[b] / kl_b[b]) << b;
        EXPECT_LE(d.ci_low, d.ci_high);
      }
    }
  EXPECT_DOUBLE_EQ(rep.depth[2].same_top, 0.5);  // a's 1500 is not the reference's top

  // The block bootstrap of the bin: compare_arms over the bin's rows of each trajectory.
  const Comparison c = compare_arms("a", "b", {{0.2}, {0.4}}, {{0.1}, {0.1}}, r.bootstrap);
  EXPECT_EQ(rep.depth[0].ci_low, c.ci_low);
  EXPECT_EQ(rep.depth[0].ci_high, c.ci_high);

  const std::vector<std::string> csv = lines(depth_csv(rep));
  ASSERT_EQ(csv.size(), 9u);
  EXPECT_EQ(csv[0], "from,to,arm,positions,trajectories,mean_position,mean_kl,same_top,ratio,ci_low,ci_high");
  EXPECT_EQ(csv[1].rfind("0,1000,a,2,2,504.5,0.3,1,3,", 0), 0u) << csv[1];
  EXPECT_EQ(csv[2], "0,1000,b,2,2,504.5,0.1,1,,,");
  EXPECT_EQ(csv[8], "200000,,b,1,1,250000.0,0.2,1,,,");

  // answers.csv and the answers table: one needle of one document.
  const std::vector<std::string> ans = lines(answers_csv(r));
  ASSERT_EQ(ans.size(), 3u);
  EXPECT_EQ(ans[1], "t0.h5,3,500,a,9,1,1");
  EXPECT_EQ(ans[2], "t0.h5,3,500,b,1,0,1");
  ASSERT_EQ(rep.answers.size(), 2u);
  EXPECT_EQ(rep.answers[0].gold_top, 1.0);
  EXPECT_EQ(rep.answers[1].gold_top, 0.0);
  EXPECT_EQ(rep.ref_gold_top, 1.0);
  EXPECT_DOUBLE_EQ(rep.answers[0].ratio, 9.0);
  EXPECT_DOUBLE_EQ(rep.answers[0].ci_low, 9.0);  // one document of one needle: nothing varies
  EXPECT_DOUBLE_EQ(rep.answers[0].ci_high, 9.0);
  EXPECT_TRUE(std::isnan(rep.answers[1].ratio));

  const std::string md = summary_markdown(r, rep);
  EXPECT_NE(md.find("| 200K+ | `a` | 1 | 1 | 250000 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| 1K-2K | `b` |"), std::string::npos) << md;
  EXPECT_NE(md.find("Answer positions: 1 in 1 answer segments of 1 trajectory(ies)"), std::string::npos) << md;
  EXPECT_NE(md.find("| `a` | 9 | 100.0% | 9.000 | 9.000 .. 9.000 |"), std::string::npos) << md;

  const std::string svg = svg_kl_by_depth(rep);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_EQ(svg.find("nan"), std::string::npos);
  EXPECT_EQ(svg.find("inf"), std::string::npos);
  size_t polylines = 0;
  for (size_t at = svg.find("<polyline"); at != std::string::npos; at = svg.find("<polyline", at + 1)) ++polylines;
  EXPECT_EQ(polylines, 2u);  // one per arm
  // No generated position at all: an empty plot, still well formed.
  Report none;
  const std::string empty = svg_kl_by_depth(none);
  EXPECT_NE(empty.find("no generated positions"), std::string::npos);
  EXPECT_EQ(empty.find("nan"), std::string::npos);
}

// ---- the nested bootstrap ---------------------------------------------------------------------

namespace {

// Documents with their own difficulty, needles within them with theirs: the arm's KL is
// `ratio` times the baseline's, times noise of mean 1 per needle.
std::vector<std::vector<UnitKl>> synthetic_clusters(uint64_t seed, size_t docs, size_t needles, double ratio) {
  std::mt19937_64 g(seed);
  std::lognormal_distribution<double> doc(0.0, 1.0), needle(0.0, 0.8);
  std::gamma_distribution<double> noise(4.0, 0.25);  // mean 1
  std::vector<std::vector<UnitKl>> c(docs);
  for (auto& d : c) {
    const double level = doc(g);
    for (size_t u = 0; u < needles; ++u) {
      const double base = level * needle(g);
      d.push_back(UnitKl{ratio * base * noise(g), base});
    }
  }
  return c;
}

}  // namespace

TEST(NestedBootstrap, IsDeterministicAndTheRatioOfSums) {
  const auto c = synthetic_clusters(11, 6, 8, 1.3);
  BootstrapOptions opt;
  opt.replicates = 2000;
  const NestedRatio a = nested_bootstrap(c, opt), b = nested_bootstrap(c, opt);
  EXPECT_EQ(a.ratio, b.ratio);
  EXPECT_EQ(a.ci_low, b.ci_low);
  EXPECT_EQ(a.ci_high, b.ci_high);
  EXPECT_EQ(a.replicates, 2000u);
  double sa = 0, sb = 0;
  for (const auto& d : c)
    for (const UnitKl& u : d) {
      sa += u.arm;
      sb += u.baseline;
    }
  EXPECT_EQ(a.ratio, sa / sb);
  EXPECT_LT(a.ci_low, a.ratio);
  EXPECT_GT(a.ci_high, a.ratio);
  // Another seed draws other replicates.
  opt.seed ^= 1;
  const NestedRatio o = nested_bootstrap(c, opt);
  EXPECT_EQ(o.ratio, a.ratio);
  EXPECT_NE(o.ci_low, a.ci_low);

  // Nothing to compare: a baseline of 0, no clusters, no replicates.
  const NestedRatio zero = nested_bootstrap({{UnitKl{1.0, 0.0}}}, opt);
  EXPECT_TRUE(std::isnan(zero.ratio));
  EXPECT_TRUE(std::isnan(zero.ci_low));
  EXPECT_EQ(zero.replicates, 0u);
  EXPECT_TRUE(std::isnan(nested_bootstrap({}, opt).ratio));
  opt.replicates = 0;
  const NestedRatio no_reps = nested_bootstrap(c, opt);
  EXPECT_EQ(no_reps.ratio, a.ratio);
  EXPECT_TRUE(std::isnan(no_reps.ci_high));
  // An empty document adds nothing.
  opt.replicates = 500;
  std::vector<std::vector<UnitKl>> with_empty = c;
  with_empty.push_back({});
  EXPECT_EQ(nested_bootstrap(with_empty, opt).ratio, a.ratio);
}

// Over many synthetic studies (6 documents of 8 needles, as the note's) the 95% interval holds
// the true ratio nearly always.
TEST(NestedBootstrap, CoversTheTrueRatioOnSyntheticClusters) {
  BootstrapOptions opt;
  opt.replicates = 1000;
  const double truth = 0.7;
  int covered = 0;
  const int studies = 40;
  for (int s = 0; s < studies; ++s) {
    const auto c = synthetic_clusters(100 + static_cast<uint64_t>(s), 6, 8, truth);
    const NestedRatio n = nested_bootstrap(c, opt);
    ASSERT_TRUE(std::isfinite(n.ci_low) && std::isfinite(n.ci_high)) << s;
    EXPECT_LE(n.ci_low, n.ratio);
    EXPECT_GE(n.ci_high, n.ratio);
    covered += n.ci_low <= truth && truth <= n.ci_high;
  }
  EXPECT_GE(covered, 34) << covered << " of " << studies;  // 95% nominal; 38 expected
  // And it is narrow enough to tell the true 0.7 from no difference.
  const NestedRatio n = nested_bootstrap(synthetic_clusters(7, 6, 8, truth), opt);
  EXPECT_GT(n.ci_low, 0.4);
  EXPECT_LT(n.ci_high, 1.0);
}
