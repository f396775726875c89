// KL scoring, statistics, the paired bootstrap, the results folder, and the record/score
// loops driven through a small deterministic model (a test double of the Model interface).
#include <gtest/gtest.h>
#include <omp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include "fake_logits.h"
#include "sjkv/fp16.h"
#include "sjkv/io/capture_file.h"
#include "sjkv/replay/results.h"
#include "sjkv/replay/run.h"
#include "sjkv/replay/score.h"

using namespace sjkv;
using namespace sjkv::replay;
using sjkv_test::kGemmaVocab;

namespace {

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "sjkv-score-" + std::to_string(::getpid()) + "-" + name;
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// ---- a small model and two cache arms ---------------------------------------------------
// One attention layer per LayerShape; the logits are a fixed random projection of the
// attention outputs, so that how the cache stores K/V changes the distribution.

class PlainKv : public LayerKv {
 public:
  PlainKv(const LayerShape& s, bool f16) : s_(s), f16_(f16) {}
  void begin_ubatch(uint32_t, uint32_t) override {}
  void store(uint32_t pos0, uint32_t n, const float* k, const float* v) override {
    const size_t row = static_cast<size_t>(s_.n_head_kv) * s_.head_dim;
    if (static_cast<size_t>(pos0) * row != k_.size()) throw std::logic_error("out of order");
    for (size_t i = 0; i < n * row; ++i) {
      k_.push_back(f16_ ? round_f16(k[i]) : k[i]);
      v_.push_back(f16_ ? round_f16(v[i]) : v[i]);
    }
  }
  void attend(uint32_t pos0, uint32_t n, const float* q, float scale, float* out) override {
    const uint32_t D = s_.head_dim, H = s_.n_head, G = s_.n_head / s_.n_head_kv;
    for (uint32_t i = 0; i < n; ++i)
      for (uint32_t h = 0; h < H; ++h) {
        const uint32_t last = pos0 + i, first = s_.window && last + 1 > s_.window ? last + 1 - s_.window : 0;
        std::vector<double> w;
        double mx = -INFINITY;
        for (uint32_t p = first; p <= last; ++p) {
          double dot = 0;
          for (uint32_t d = 0; d < D; ++d)
            dot += static_cast<double>(q[(static_cast<size_t>(i) * H + h) * D + d]) *
                   k_[(static_cast<size_t>(p) * s_.n_head_kv + h / G) * D + d];
          w.push_back(scale * dot);
          mx = std::max(mx, w.back());
        }
        double sum = 0;
        for (double& x : w) sum += x = std::exp(x - mx);
        for (uint32_t d = 0; d < D; ++d) {
          double acc = 0;
          for (uint32_t p = first; p <= last; ++p) acc += w[p - first] * v_[(static_cast<size_t>(p) * s_.n_head_kv + h / G) * D + d];
          out[(static_cast<size_t>(i) * H + h) * D + d] = static_cast<float>(acc / sum);
        }
      }
  }
  LayerBits bits() const override {
    const double b = f16_ ? 16.0 : 32.0;
    const double stored = static_cast<double>(k_.size()) / (static_cast<double>(s_.n_head_kv) * s_.head_dim);
    return {b, s_.n_ctx ? b * (stored > 0 ? 1.0 : 0.0) : 0.0};
  }

 private:
  LayerShape s_;
  bool f16_;
  std::vector<float> k_, v_;
};

class PlainArm : public KvArm {
 public:
  explicit PlainArm(bool f16) : f16_(f16) { spec_ = f16 ? "f16" : "f32"; }
  std::unique_ptr<LayerKv> make_layer(const LayerShape& s) const override { return std::make_unique<PlainKv>(s, f16_); }

 private:
  bool f16_;
};

class TinyModel : public Model {
 public:
  explicit TinyModel(uint32_t n_vocab) {
    info_.architecture = "tiny";
    info_.file_name = "tiny.gguf";
    info_.n_layer = 2;
    info_.n_vocab = n_vocab;
    info_.n_head = 2;
    info_.n_head_kv = 1;
    info_.head_dim = 32;
    LayerShape full, slide;
    full.layer = 0;
    full.n_head = 2;
    full.n_head_kv = 1;
    full.head_dim = 32;
    slide = full;
    slide.layer = 1;
    slide.full_attention = false;
    slide.window = 8;
    info_.layers = {slide, full};
    std::mt19937_64 g(99);
    std::normal_distribution<float> z(0.0f, 1.0f);
    emb_.resize(static_cast<size_t>(n_vocab) * 32);
    for (float& x : emb_) x = z(g);
    out_.resize(static_cast<size_t>(n_vocab) * 64);
    for (float& x : out_) x = 2.0f * z(g);
  }
  const ModelInfo& info() const override { return info_; }
  const GgufFile& gguf() const override { throw std::logic_error("no GGUF"); }

  void eval(const int32_t* tokens, uint32_t n, uint32_t pos0, uint32_t n_ubatch,
            std::vector<std::unique_ptr<LayerKv>>& kv, float* logits, bool all_logits) override {
    for (uint32_t b0 = 0; b0 < n; b0 += n_ubatch) {
      const uint32_t nb = std::min(n_ubatch, n - b0);
      std::vector<float> x(static_cast<size_t>(nb) * 32), q(static_cast<size_t>(nb) * 64), o(q.size());
      for (uint32_t i = 0; i < nb; ++i)
        for (uint32_t d = 0; d < 32; ++d)
          x[i * 32 + d] = emb_[static_cast<size_t>(tokens[b0 + i]) * 32 + d] + 0.1f * std::sin(0.3f * (pos0 + b0 + i) + d);
      std::vector<float> hidden(static_cast<size_t>(nb) * 64, 0.0f);
      for (size_t l = 0; l < kv.size(); ++l) {
        for (uint32_t i = 0; i < nb; ++i)
          for (uint32_t d = 0; d < 32; ++d) {
            q[i * 64 + d] = x[i * 32 + d];
            q[i * 64 + 32 + d] = x[i * 32 + (d + 1 + l) % 32];
          }
        kv[l]->begin_ubatch(pos0 + b0, nb);
        kv[l]->store(pos0 + b0, nb, x.data(), x.data());
        kv[l]->attend(pos0 + b0, nb, q.data(), 0.5f, o.data());
        for (size_t i = 0; i < hidden.size(); ++i) hidden[i] += o[i];
      }
      const uint32_t V = info_.n_vocab;
      for (uint32_t i = 0; i < nb; ++i) {
        if (!all_logits && b0 + i != n - 1) continue;
        float* row = all_logits ? logits + static_cast<size_t>(b0 + i) * V : logits;
        // Each row entry is one fixed-order dot product, so any thread count gives the same bits.
#pragma omp parallel for schedule(static)
        for (int64_t t = 0; t < static_cast<int64_t>(V); ++t) {
          float acc = 0;
          for (uint32_t d = 0; d < 64; ++d) acc += out_[static_cast<size_t>(t) * 64 + d] * hidden[i * 64 + d];
          row[t] = acc;
        }
      }
    }
  }

 private:
  ModelInfo info_;
  std::vector<float> emb_, out_;
};

RecordInput tiny_input(uint32_t generate) {
  RecordInput in;
  in.prompt = {1, 17, 300, 4095, 8, 9, 10, 11, 12, 13, 14};
  in.settings.generate = generate;
  in.settings.ubatch = 4;
  in.model_file = "tiny.gguf";
  in.model_sha256 = std::string(64, '0');
  return in;
}

}  // namespace

// ---- KL --------------------------------------------------------------------------------------

TEST(Kl, NonNegativeAndCloseToTheFullKlOnPerturbedRows) {
  std::mt19937_64 g(5);
  std::normal_distribution<double> z(0.0, 1.0);
  for (const auto& shape : sjkv_test::row_shapes()) {
    const auto row = sjkv_test::lm_logits(kGemmaVocab, shape, 31);
    const RefDist d = encode_reference(row.data(), kGemmaVocab, 5e-7);
    for (double sigma : {1e-6, 1e-3, 0.03, 0.3}) {
      std::vector<float> q(row);
      for (float& x : q) x = static_cast<float>(x + sigma * z(g));
      const double kl = kl_to_reference(d, q.data(), kGemmaVocab);
      const double full = sjkv_test::full_kl(row, q);
      EXPECT_GE(kl, 0.0) << sigma;
      // A lower bound of the full KL (to rounding), short of it by rest_mass times the
      // tails' KL, which for noise of this kind is about rest_mass * sigma^2 / 2.
      EXPECT_LE(kl, full * (1 + 1e-9) + 1e-15) << sigma;
      EXPECT_LE(full - kl, 1e-12 + 2 * d.rest_mass * sigma * sigma + 1e-6 * full) << sigma;
    }
  }
}

TEST(Kl, ExactlyZeroOnlyForTheIdenticalRow) {
  const auto row = sjkv_test::lm_logits(kGemmaVocab, sjkv_test::row_shapes()[1], 8);
  const RefDist d = encode_reference(row.data(), kGemmaVocab, 5e-7);
  EXPECT_EQ(kl_to_reference(d, row.data(), kGemmaVocab), 0.0);
  std::vector<float> shifted(row);
  for (float& x : shifted) x += 3.0f;  // softmax is shift-invariant: tiny rounding only
  EXPECT_LT(kl_to_reference(d, shifted.data(), kGemmaVocab), 1e-9);
  std::vector<float> one_off(row);
  one_off[static_cast<size_t>(d.top())] = std::nextafter(one_off[static_cast<size_t>(d.top())], 100.0f);
  const double tiny = kl_to_reference(d, one_off.data(), kGemmaVocab);
  EXPECT_GE(tiny, 0.0);
  EXPECT_LT(tiny, 1e-12);
}

TEST(Kl, ArgmaxTakesTheLowestIdOnTies) {
  const float row[] = {1.0f, 3.0f, 2.0f, 3.0f};
  EXPECT_EQ(argmax(row, 4), 1);
}

// ---- statistics ------------------------------------------------------------------------------

TEST(Stats, QuantilesAndMeans) {
  EXPECT_DOUBLE_EQ(quantile({3, 1, 2, 4}, 0.5), 2.5);
  EXPECT_DOUBLE_EQ(quantile({5}, 0.99), 5);
  EXPECT_DOUBLE_EQ(quantile({0, 10}, 0.9), 9);
  std::vector<std::vector<ScoreRow>> rows(2);
  for (int i = 1; i <= 100; ++i) rows[i % 2].push_back({static_cast<double>(i), i % 4 == 0, 4.5, 5.0});
  const ArmStats s = arm_stats("x", rows);
  EXPECT_EQ(s.positions, 100u);
  EXPECT_DOUBLE_EQ(s.mean_kl, 50.5);
  EXPECT_DOUBLE_EQ(s.median_kl, 50.5);
  EXPECT_NEAR(s.p90_kl, 90.1, 1e-9);
  EXPECT_NEAR(s.p99_kl, 99.01, 1e-9);
  EXPECT_DOUBLE_EQ(s.max_kl, 100);
  EXPECT_DOUBLE_EQ(s.same_top, 0.25);
  EXPECT_DOUBLE_EQ(s.bits_occupied, 4.5);
  EXPECT_DOUBLE_EQ(s.bits_allocated, 5.0);
}

namespace {

// Paired positions with autocorrelated difficulty; E[a] / E[b] = ratio exactly.
void paired(std::mt19937_64& g, size_t T, size_t n, double ratio, std::vector<std::vector<double>>* a,
            std::vector<std::vector<double>>* b) {
  std::normal_distribution<double> z(0.0, 1.0);
  a->assign(T, {});
  b->assign(T, {});
  for (size_t t = 0; t < T; ++t) {
    double h = z(g);
    for (size_t i = 0; i < n; ++i) {
      h = 0.8 * h + 0.6 * z(g);
      const double base = std::exp(h - 0.5);
      (*b)[t].push_back(base * std::exp(0.3 * z(g) - 0.045));
      (*a)[t].push_back(ratio * base * std::exp(0.3 * z(g) - 0.045));
    }
  }
}

}  // namespace

TEST(Bootstrap, DeterministicAndConsistent) {
  std::mt19937_64 g(1);
  std::vector<std::vector<double>> a, b;
  paired(g, 1, 256, 1.5, &a, &b);
  const Comparison c1 = compare_arms("a", "b", a, b), c2 = compare_arms("a", "b", a, b);
  EXPECT_EQ(c1.ci_low, c2.ci_low);
  EXPECT_EQ(c1.ci_high, c2.ci_high);
  EXPECT_LT(c1.ci_low, c1.ratio);
  EXPECT_GT(c1.ci_high, c1.ratio);
  EXPECT_TRUE(std::isnan(c1.ci_low_traj));  // one trajectory: no trajectory CI
  EXPECT_EQ(c1.of, 256u);
  uint64_t lower = 0;
  for (size_t i = 0; i < 256; ++i) lower += a[0][i] < b[0][i];
  EXPECT_EQ(c1.lower_at, lower);
  BootstrapOptions other;
  other.seed = 7;
  const Comparison c3 = compare_arms("a", "b", a, b, other);
  EXPECT_NE(c3.ci_low, c1.ci_low);
  EXPECT_NEAR(c3.ci_low, c1.ci_low, 0.1 * c1.ratio);
}

TEST(Bootstrap, CoversTheTrueRatio) {
  std::mt19937_64 g(2);
  int covered = 0, covered_traj = 0;
  const int runs = 200;
  BootstrapOptions opt;
  opt.replicates = 500;
  for (int r = 0; r < runs; ++r) {
    std::vector<std::vector<double>> a, b;
    paired(g, 4, 128, 1.3, &a, &b);
    const Comparison c = compare_arms("a", "b", a, b, opt);
    covered += c.ci_low <= 1.3 && 1.3 <= c.ci_high;
    covered_traj += c.ci_low_traj <= 1.3 && 1.3 <= c.ci_high_traj;
    ASSERT_FALSE(std::isnan(c.ci_low_traj));
  }
  // Nominal 95%; block bootstraps of short autocorrelated series run a little narrow, and
  // four trajectories make a coarse trajectory bootstrap.
  EXPECT_GE(covered, runs * 85 / 100) << covered;
  EXPECT_LE(covered, runs);
  EXPECT_GE(covered_traj, runs * 70 / 100) << covered_traj;
}

TEST(Bootstrap, ZeroBaselineGivesNoRatio) {
  const std::vector<std::vector<double>> a = {{0.1, 0.2}}, b = {{0.0, 0.0}};
  const Comparison c = compare_arms("a", "b", a, b);
  EXPECT_TRUE(std::isnan(c.ratio));
  EXPECT_TRUE(std::isnan(c.ci_low));
  EXPECT_EQ(c.lower_at, 0u);
}

// ---- the loops through the tiny model --------------------------------------------------------

TEST(Replay, SameArmReplayIsExactlyZeroAndOthersAreNot) {
  TinyModel m(4096);
  const PlainArm f32(false), f16(true);
  for (const KvArm* ref : {static_cast<const KvArm*>(&f32), static_cast<const KvArm*>(&f16)}) {
    RecordInput in = tiny_input(24);
    in.settings.reference = ref->spec();
    const Trajectory t = record_trajectory(m, *ref, in);
    ASSERT_EQ(t.generated(), 24u);
    t.check_consistent();
    const std::vector<ScoreRow> same = score_trajectory(m, *ref, t, in.settings.ubatch);
    for (const ScoreRow& r : same) {
      EXPECT_EQ(r.kl, 0.0);
      EXPECT_TRUE(r.same_top);
    }
    const KvArm& other = ref == &f32 ? static_cast<const KvArm&>(f16) : static_cast<const KvArm&>(f32);
    const std::vector<ScoreRow> diff = score_trajectory(m, other, t, in.settings.ubatch);
    double sum = 0;
    for (const ScoreRow& r : diff) {
      EXPECT_GE(r.kl, 0.0);
      sum += r.kl;
    }
    EXPECT_GT(sum, 0.0);
    EXPECT_EQ(diff[0].bits_occupied, other.spec() == "f16" ? 16.0 : 32.0);
  }
}

TEST(Replay, IdenticalForOneAndTwoThreads) {
  TinyModel m(4096);
  const PlainArm f32(false), f16(true);
  RecordInput in = tiny_input(16);
  in.settings.sample = true;
  in.settings.seed = 42;
  in.settings.temperature = 0.8;
  in.settings.top_k = 50;
  in.settings.top_p = 0.9;
  std::vector<std::vector<ScoreRow>> rows;
  std::vector<std::vector<int32_t>> tokens;
  for (int threads : {1, 2}) {
    omp_set_num_threads(threads);
    const Trajectory t = record_trajectory(m, f32, in);
    tokens.push_back(t.tokens);
    rows.push_back(score_trajectory(m, f16, t, 3));
  }
  EXPECT_EQ(tokens[0], tokens[1]);
  ASSERT_EQ(rows[0].size(), rows[1].size());
  for (size_t j = 0; j < rows[0].size(); ++j) EXPECT_EQ(rows[0][j].kl, rows[1][j].kl);
}

TEST(Replay, CaptureHoldsTheFullAttentionLayers) {
  TinyModel m(4096);
  const PlainArm f32(false);
  Capture cap;
  const RecordInput in = tiny_input(6);
  const Trajectory t = record_trajectory(m, f32, in, &cap);
  cap.check_consistent();
  EXPECT_EQ(cap.tokens, t.tokens.size() - 1);
  ASSERT_EQ(cap.layers.size(), 1u);
  EXPECT_EQ(cap.layers[0].layer_id, 0u);
  EXPECT_EQ(cap.kv_heads, 1u);
  EXPECT_EQ(cap.head_dim, 32u);
  const std::string path = temp_path("capture.h5");
  write_capture(path, cap);
  EXPECT_EQ(read_capture(path).layers[0].k, cap.layers[0].k);
  std::remove(path.c_str());
}

TEST(Results, FolderHasEveryFile) {
  TinyModel m(4096);
  const PlainArm f32(false), f16(true);
  Results res;
  res.model_file = "tiny.gguf";
  res.model_sha256 = std::string(64, '0');
  res.baseline = "f32";
  res.bootstrap.replicates = 200;
  res.arms = {{"f32", {}}, {"f16", {}}};
  for (uint64_t seed : {1, 2}) {
    RecordInput in = tiny_input(12);
    in.prompt[0] = static_cast<int32_t>(seed);
    const Trajectory t = record_trajectory(m, f16, in);
    res.settings = t.settings;
    res.trajectories.push_back({"t" + std::to_string(seed) + ".h5", t.prompt_tokens, t.generated()});
    res.arms[0].rows.push_back(score_trajectory(m, f32, t, 4));
    res.arms[1].rows.push_back(score_trajectory(m, f16, t, 4));
  }
  const Report rep = summarize(res);
  ASSERT_EQ(rep.arms.size(), 2u);
  EXPECT_EQ(rep.arms[1].mean_kl, 0.0);  // f16 replay of an f16 trajectory
  ASSERT_EQ(rep.comparisons.size(), 1u);
  EXPECT_EQ(rep.comparisons[0].arm, "f16");
  EXPECT_EQ(rep.comparisons[0].ratio, 0.0);
  EXPECT_EQ(rep.comparisons[0].lower_at, 24u);
  EXPECT_FALSE(std::isnan(rep.comparisons[0].ci_low_traj));

  const std::string dir = temp_path("results");
  write_results(dir, res, rep);
  const std::string json = slurp(dir + "/results.json");
  for (const char* key : {"\"arms\"", "\"comparisons\"", "\"mean_kl\"", "\"median_kl\"", "\"p90_kl\"", "\"p99_kl\"",
                          "\"max_kl\"", "\"same_top\"", "\"bits_occupied\"", "\"bits_allocated\"", "\"ratio\"",
                          "\"ci_low\"", "\"ci_high\"", "\"lower_at\"", "\"of\"", "\"trajectories\"", "\"settings\""})
    EXPECT_NE(json.find(key), std::string::npos) << key;
  const std::string csv = slurp(dir + "/positions.csv");
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 1 + 2 * 2 * 12);
  EXPECT_EQ(csv.rfind("trajectory,position,arm,kl,same_top,bits_occupied,bits_allocated\n", 0), 0u);
  EXPECT_NE(slurp(dir + "/summary.md").find("| `f16` |"), std::string::npos);
  for (const char* svg : {"/kl_by_position.svg", "/kl_cdf.svg", "/kl_vs_bits.svg"}) {
    const std::string s = slurp(dir + svg);
    EXPECT_EQ(s.rfind("<svg", 0), 0u) << svg;
    EXPECT_NE(s.find("</svg>"), std::string::npos) << svg;
    EXPECT_EQ(s.find("nan"), std::string::npos) << svg;
    std::remove((dir + svg).c_str());
  }
  for (const char* f : {"/results.json", "/positions.csv", "/summary.md"}) std::remove((dir + f).c_str());
  ::rmdir(dir.c_str());

  res.baseline = "q4_0";
  EXPECT_THROW(summarize(res), std::invalid_argument);
}
