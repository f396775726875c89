// train_and_evaluate (sjkv/train/pipeline.h), the work behind sjkv-train: on a small capture of
// realistic tiles it writes the bytes the tool writes and reports the numbers the tool prints.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sjkv/io/capture_file.h"
#include "sjkv/io/paths.h"
#include "sjkv/testgen.h"
#include "sjkv/train/pipeline.h"

using namespace sjkv;
using namespace sjkv::train;

namespace {

// Two layers, two KV heads, D = 128, a sink and five full groups, model basis: the format's
// fill_group tiles (outlier channels, per-token factors), as real K/V look after rotation.
Capture realistic_capture() {
  Capture cap;
  cap.model = "test-model";
  cap.source = "test_train_evaluate";
  cap.head_dim = 128;
  cap.kv_heads = 2;
  cap.tokens = 6 * 128;
  std::vector<uint16_t> K(128 * 128), V(128 * 128);
  std::vector<int32_t> chf(128);
  for (uint32_t l = 0; l < 2; ++l) {
    CaptureLayer L;
    L.layer_id = 5 + 6 * l;
    L.k.resize(cap.values_per_layer());
    L.v.resize(cap.values_per_layer());
    for (uint32_t g = 0; g < 6; ++g)
      for (uint32_t h = 0; h < 2; ++h) {
        fill_group(128, 128, 31 + 1000 * g + 100 * l + h, K.data(), V.data(), chf.data());
        for (uint32_t t = 0; t < 128; ++t)
          for (uint32_t d = 0; d < 128; ++d) {
            const size_t i = (static_cast<size_t>(g * 128 + t) * 2 + h) * 128 + d;
            L.k[i] = K[t * 128 + d];
            L.v[i] = V[t * 128 + d];
          }
      }
    cap.layers.push_back(std::move(L));
  }
  return cap;
}

struct Scratch {
  std::string dir;
  Scratch() {
    char t[] = "/tmp/sjkv-train-evaluate-XXXXXX";
    if (!::mkdtemp(t)) throw std::runtime_error("mkdtemp failed");
    dir = t;
  }
  ~Scratch() { (void)std::system(("rm -rf '" + dir + "'").c_str()); }
};

std::string bytes_of(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// The numbers as the tool prints them (%.9g, null for NaN).
std::string printed(double v) {
  if (!std::isfinite(v)) return "null";
  char b[64];
  std::snprintf(b, sizeof b, "%.9g", v);
  return b;
}
std::string printed(const nlohmann::json& j) { return j.is_null() ? "null" : printed(j.get<double>()); }

TrainRun small_run(const std::string& input, const std::string& prefix) {
  TrainRun r;
  r.inputs = {input};
  r.prefix = prefix;
  r.bits = 2;
  r.seed = 5;
  r.heldout = 0.25;
  r.max_iters = 3;
  r.threads = 1;
  r.tool_version = "sjkv-train 0.1.0";  // the tool's, so that the files can be compared
  return r;
}

TEST(TrainAndEvaluate, ReportsItsWorkThroughTheEvents) {
  Scratch s;
  const std::string in = s.dir + "/cap.h5";
  write_capture(in, realistic_capture());
  TrainRun run = small_run(in, s.dir + "/cb");
  std::vector<std::pair<size_t, size_t>> reading;
  std::vector<Side> sides;
  std::vector<LloydIteration> its[2];
  uint64_t read_train = 0;
  int reads = 0;
  run.events.reading = [&](size_t d, size_t n) { reading.push_back({d, n}); };
  uint64_t read_heldout = 0, read_seqs = 0;
  run.events.read = [&](const SetSize& set) {
    ++reads;
    read_train = set.train_tiles;
    read_heldout = set.heldout_tiles;
    read_seqs = set.train_sequences;
  };
  run.events.side = [&](Side side) { sides.push_back(side); };
  run.events.iteration = [&](Side side, const LloydIteration& it) { its[side == Side::k ? 0 : 1].push_back(it); };
  const TrainReport rep = train_and_evaluate(run);
  EXPECT_EQ(reading, (std::vector<std::pair<size_t, size_t>>{{0, 1}, {1, 1}}));
  EXPECT_EQ(reads, 1);
  EXPECT_EQ(read_train, rep.train_tiles);
  EXPECT_EQ(read_heldout, rep.heldout_tiles);
  EXPECT_EQ(read_seqs, rep.train_tiles * 128);  // head_dim (128) sequences per tile on the token axis
  EXPECT_EQ(rep.train_tiles + rep.heldout_tiles, 2u * 5 * 2);  // layers x groups after the sink x heads
  EXPECT_GT(rep.heldout_tiles, 0u);
  EXPECT_EQ(sides, (std::vector<Side>{Side::k, Side::v}));
  for (int side = 0; side < 2; ++side) {
    ASSERT_EQ(its[side].size(), rep.result[side].history.size());
    for (size_t i = 0; i < its[side].size(); ++i) EXPECT_EQ(its[side][i].train_mse, rep.result[side].history[i].train_mse);
    EXPECT_LT(rep.heldout[side].trained, rep.heldout[side].scalar);
    EXPECT_TRUE(std::isnan(rep.heldout_real[side].scalar));
    EXPECT_TRUE(std::isfinite(rep.heldout_real[side].trained));
  }
  EXPECT_EQ(rep.outputs, train_output_names(s.dir + "/cb", TrellisAxis::token));
  for (const std::string& o : rep.outputs) EXPECT_TRUE(path_exists(o)) << o;
  EXPECT_EQ(rep.codebook.provenance.inputs.size(), 1u);
  EXPECT_EQ(rep.codebook.table.k, rep.result[0].table_f16);
  EXPECT_EQ(rep.codebook.raw_sha256, raw_codebook_sha256(rep.codebook.table));
}

TEST(TrainAndEvaluate, SameFilesAndNumbersAsTheTool) {
#if !defined(SJKV_TRAIN_TOOL)
  GTEST_SKIP() << "built without the tools";
#else
  Scratch s;
  const std::string in = s.dir + "/cap.h5";
  write_capture(in, realistic_capture());
  for (const char* axis : {"token", "channel"}) {
    SCOPED_TRACE(axis);
    const bool channel = std::string(axis) == "channel";
    TrainRun run = small_run(in, s.dir + "/lib-" + axis);
    run.axis = channel ? TrellisAxis::channel : TrellisAxis::token;
    const TrainReport rep = train_and_evaluate(run);

    const std::string tool_prefix = s.dir + "/tool-" + axis, json_path = s.dir + "/tool-" + axis + ".json";
    const std::string cmd = std::string("'") + SJKV_TRAIN_TOOL + "' '" + in + "' --bits 2 -o '" + tool_prefix +
                            "' --max-iters 3 --seed 5 --heldout 0.25 --threads 1 --axis " + axis + " --json -q > '" +
                            json_path + "'";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    const std::vector<std::string> tool_out = train_output_names(tool_prefix, run.axis);
    ASSERT_EQ(rep.outputs.size(), channel ? 2u : 3u);
    ASSERT_EQ(tool_out.size(), rep.outputs.size());
    for (size_t i = 0; i < tool_out.size(); ++i) {
      const std::string a = bytes_of(rep.outputs[i]), b = bytes_of(tool_out[i]);
      EXPECT_FALSE(a.empty()) << rep.outputs[i];
      EXPECT_TRUE(a == b) << rep.outputs[i] << " differs from " << tool_out[i];
    }
    EXPECT_FALSE(path_exists(s.dir + "/lib-" + axis + ".h") && channel);

    const nlohmann::json j = nlohmann::json::parse(bytes_of(json_path));
    char id[24];
    std::snprintf(id, sizeof id, "%016" PRIx64, rep.codebook.codebook_id);
    EXPECT_EQ(j["codebook_id"], id);
    EXPECT_EQ(j["raw_sha256"], rep.codebook.raw_sha256);
    EXPECT_EQ(j["train_tiles"], rep.train_tiles);
    EXPECT_EQ(j["heldout_tiles"], rep.heldout_tiles);
    EXPECT_EQ(j["init"], rep.init_name);
    EXPECT_EQ(j["outputs"].get<std::vector<std::string>>(), tool_out);
    const char* side[2] = {"k", "v"};
    for (int t = 0; t < 2; ++t) {
      SCOPED_TRACE(side[t]);
      EXPECT_EQ(j["stop"][side[t]], rep.result[t].stop);
      EXPECT_EQ(printed(j["train_mse"][side[t]]), printed(rep.result[t].train_mse_f16));
      const auto& hist = j["iterations"][side[t]];
      ASSERT_EQ(hist.size(), rep.result[t].history.size());
      for (size_t i = 0; i < hist.size(); ++i) {
        EXPECT_EQ(hist[i]["iter"], rep.result[t].history[i].iter);
        EXPECT_EQ(printed(hist[i]["train_mse"]), printed(rep.result[t].history[i].train_mse));
        EXPECT_EQ(printed(hist[i]["heldout_real_mse"]), printed(rep.result[t].history[i].heldout_real_mse));
      }
      const auto& h = j["heldout_mse"][side[t]];
      EXPECT_EQ(printed(h["scalar"]), printed(rep.heldout[t].scalar));
      EXPECT_EQ(printed(h["identity"]), printed(rep.heldout[t].identity));
      EXPECT_EQ(printed(h["reference"]), printed(rep.heldout[t].reference));
      EXPECT_EQ(printed(h["trained"]), printed(rep.heldout[t].trained));
      const auto& r = j["heldout_real_mse"][side[t]];
      EXPECT_EQ(printed(r["identity"]), printed(rep.heldout_real[t].identity));
      EXPECT_EQ(printed(r["reference"]), printed(rep.heldout_real[t].reference));
      EXPECT_EQ(printed(r["trained"]), printed(rep.heldout_real[t].trained));
    }
  }
#endif
}

TEST(TrainAndEvaluate, InputsWithoutATileWriteNothing) {
  Scratch s;
  Capture cap = realistic_capture();
  cap.tokens = 200;  // the sink and a part of a group
  for (CaptureLayer& l : cap.layers) {
    l.k.resize(cap.values_per_layer());
    l.v.resize(cap.values_per_layer());
  }
  const std::string in = s.dir + "/short.h5";
  write_capture(in, cap);
  const TrainRun run = small_run(in, s.dir + "/cb");
  EXPECT_THROW((void)train_and_evaluate(run), std::invalid_argument);
  for (const std::string& o : train_output_names(run.prefix, run.axis)) EXPECT_FALSE(path_exists(o)) << o;
}

TEST(TrainAndEvaluate, ACheckpointOfAnotherRunIsReportedAndReplaced) {
  Scratch s;
  const std::string in = s.dir + "/cap.h5";
  write_capture(in, realistic_capture());
  TrainRun run = small_run(in, s.dir + "/cb");
  run.checkpoint = true;
  const TrainReport plain = train_and_evaluate(small_run(in, s.dir + "/plain"));
  // A checkpoint of the same run stopped at another seed: not taken up.
  TrainRun other = small_run(in, s.dir + "/cb");
  other.seed = 6;
  other.checkpoint = true;
  other.events.side = [&](Side side) {
    if (side == Side::v) throw std::runtime_error("stop");  // leaves the K checkpoint behind
  };
  EXPECT_THROW((void)train_and_evaluate(other), std::runtime_error);
  ASSERT_TRUE(path_exists(s.dir + "/cb.k.ckpt"));
  std::vector<std::string> stale;
  run.events.other_run = [&](Side, const std::string& p) { stale.push_back(p); };
  run.events.resumed = [&](Side, const std::string& p, const LloydState&) { ADD_FAILURE() << "resumed from " << p; };
  const TrainReport rep = train_and_evaluate(run);
  EXPECT_EQ(stale, std::vector<std::string>{s.dir + "/cb.k.ckpt"});
  EXPECT_EQ(rep.codebook.table.k, plain.codebook.table.k);
  EXPECT_EQ(rep.codebook.table.v, plain.codebook.table.v);
  EXPECT_FALSE(path_exists(s.dir + "/cb.k.ckpt"));
  EXPECT_FALSE(path_exists(s.dir + "/cb.v.ckpt"));
}

}  // namespace
