// The replay forward pass as a measuring instrument: logits for given token ids (to compare
// with another engine) and prefill / decode speed, on the exact f32 cache or any arm.
//   replay_logits MODEL [--ids 1,2,3 | --ids-file F] [--out F] [--ubatch N] [--threads T]
//                 [--decode N] [--arm SPEC] [--info] [--profile]
// --profile splits the time: attention (attend calls) and cache writes (store, which seals
// for the compressed arms) of the full-attention and the sliding layers, and the rest (the
// matrix products, norms, RoPE), with multiply-add rates.
// --out writes raw little-endian f32 logits, [n][n_vocab], for every position. --decode N then
// times N greedy one-token steps after the prompt. Timings go to stderr.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "sjkv/parallel.h"
#include "sjkv/replay/kv.h"
#include "sjkv/replay/kv_f32.h"
#include "sjkv/replay/model.h"

using namespace sjkv::replay;

static std::vector<int32_t> parse_ids(const std::string& s) {
  std::vector<int32_t> ids;
  std::stringstream ss(s);
  std::string tok;
  while (std::getline(ss, tok, ',')) {
    std::stringstream ws(tok);
    std::string w;
    while (ws >> w) ids.push_back(static_cast<int32_t>(std::stol(w)));
  }
  return ids;
}

// Seconds and multiply-adds of one kind of layer (full attention, sliding window).
struct Phase {
  double attend_s = 0, store_s = 0;
  double attend_macs = 0;  // q.k and weight x v: 2 x rows x head_dim per query head
};

// A layer that times its inner layer's calls (--profile).
class TimedKv final : public LayerKv {
 public:
  TimedKv(std::unique_ptr<LayerKv> in, const LayerShape& s, Phase* p) : in_(std::move(in)), s_(s), p_(p) {}
  void begin_ubatch(uint32_t pos0, uint32_t n) override {
    const auto t = std::chrono::steady_clock::now();
    in_->begin_ubatch(pos0, n);
    p_->store_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  }
  void store(uint32_t pos0, uint32_t n, const float* k, const float* v) override {
    const auto t = std::chrono::steady_clock::now();
    in_->store(pos0, n, k, v);
    p_->store_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  }
  void attend(uint32_t pos0, uint32_t n, const float* q, float scale, float* out) override {
    const auto t = std::chrono::steady_clock::now();
    in_->attend(pos0, n, q, scale, out);
    p_->attend_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
    for (uint32_t i = 0; i < n; ++i) {
      const double rows = s_.window ? std::min<double>(pos0 + i + 1, s_.window) : pos0 + i + 1.0;
      p_->attend_macs += 2.0 * rows * s_.head_dim * s_.n_head;
    }
  }
  LayerBits bits() const override { return in_->bits(); }
  LayerBits bits_at(uint32_t n) const override { return in_->bits_at(n); }
  uint32_t decode_run(uint32_t pos0, uint32_t limit) const override { return in_->decode_run(pos0, limit); }
  void idle(uint32_t keep_recent) override { in_->idle(keep_recent); }

 private:
  std::unique_ptr<LayerKv> in_;
  LayerShape s_;
  Phase* p_;
};

// arm == nullptr: the exact f32 cache (make_f32_layer), as before arms existed.
static std::vector<std::unique_ptr<LayerKv>> make_cache(const ModelInfo& info, const KvArm* arm, uint32_t n_ctx,
                                                        uint32_t n_ubatch, Phase* full = nullptr,
                                                        Phase* sliding = nullptr) {
  std::vector<std::unique_ptr<LayerKv>> kv;
  for (LayerShape s : info.layers) {
    s.n_ctx = n_ctx;
    s.n_ubatch = n_ubatch;
    std::unique_ptr<LayerKv> l = arm ? arm->make_layer(s) : make_f32_layer(s);
    // A recurrent layer's store is not timed (its work is the layer's own, in "rest").
    if (full && !s.recurrent) l = std::make_unique<TimedKv>(std::move(l), s, s.full_attention ? full : sliding);
    kv.push_back(std::move(l));
  }
  return kv;
}

// Multiply-adds of the layer matrices per token (q, k, v, o, gate, up, down; a recurrent
// layer's q|k|v, gate, beta, alpha and output projections instead of the attention's). A
// hybrid's query projection also yields the output gate (twice q).
static double matrix_macs_per_token(const ModelInfo& i) {
  const double E = i.n_embd, q = double(i.n_head) * i.head_dim, kv = double(i.n_head_kv) * i.head_dim;
  bool hybrid = false;
  for (const LayerShape& s : i.layers) hybrid = hybrid || s.recurrent;
  double macs = 0;
  for (const LayerShape& s : i.layers) {
    macs += 3 * E * i.n_ff;
    if (s.recurrent) {
      const double vd = double(s.state.heads) * s.state.head_dim;
      macs += E * (s.state.conv_dim + vd + 2.0 * s.state.heads) + vd * E;
    } else {
      macs += E * q * (hybrid ? 2 : 1) + 2 * E * kv + q * E;
    }
  }
  return macs;
}

static void print_profile(const char* what, double total_s, uint32_t tokens, const ModelInfo& info, const Phase& full,
                          const Phase& sliding) {
  const double rest = total_s - full.attend_s - full.store_s - sliding.attend_s - sliding.store_s;
  const double mm = matrix_macs_per_token(info) * tokens;
  std::fprintf(stderr,
               "profile %s: full-attention layers attend %.3f s (%.2f GMAC/s) store %.3f s; sliding layers attend "
               "%.3f s (%.2f GMAC/s) store %.3f s; rest %.3f s (matrix products %.2f GMAC/s)\n",
               what, full.attend_s, full.attend_s > 0 ? full.attend_macs / full.attend_s / 1e9 : 0.0, full.store_s,
               sliding.attend_s, sliding.attend_s > 0 ? sliding.attend_macs / sliding.attend_s / 1e9 : 0.0,
               sliding.store_s, rest, rest > 0 ? mm / rest / 1e9 : 0.0);
}

int main(int argc, char** argv) {
  sjkv::settle_parallel_runtime(argv);  // OpenMP's wait, before anything else (sjkv/parallel.h)
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL [--ids a,b,c | --ids-file F] [--out F] [--ubatch N] [--threads T] [--decode N] [--arm SPEC] [--info] [--profile] [--lookup w1|w2]\n", argv[0]);
    return 1;
  }
  std::string model_path = argv[1], out, ids_arg, arm_spec;
  uint32_t n_ubatch = 512, n_decode = 0;
  int threads = 0;
  bool show_info = false, profile = false;
  std::string lookup;  // "|"-separated exact vocabulary strings to print the ids of
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "missing value for %s\n", a.c_str());
        std::exit(1);
      }
      return argv[++i];
    };
    if (a == "--ids") ids_arg = next();
    else if (a == "--ids-file") {
      std::ifstream f(next());
      std::stringstream ss;
      ss << f.rdbuf();
      ids_arg = ss.str();
    } else if (a == "--out") out = next();
    else if (a == "--ubatch") n_ubatch = static_cast<uint32_t>(std::stoul(next()));
    else if (a == "--threads") threads = std::stoi(next());
    else if (a == "--decode") n_decode = static_cast<uint32_t>(std::stoul(next()));
    else if (a == "--arm") arm_spec = next();
    else if (a == "--info") show_info = true;
    else if (a == "--profile") profile = true;
    else if (a == "--lookup") lookup = next();
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 1;
    }
  }
  if (threads > 0) omp_set_num_threads(threads);
  std::unique_ptr<KvArm> arm;
  if (!arm_spec.empty() && arm_spec != "f32") {
    try {
      arm = make_arm(arm_spec);
    } catch (const std::invalid_argument& e) {
      std::fprintf(stderr, "replay_logits: %s\n", e.what());
      return 1;
    }
  }
  try {
    using clk = std::chrono::steady_clock;
    auto t0 = clk::now();
    auto model = Model::load(model_path);
    const ModelInfo& info = model->info();
    std::fprintf(stderr, "loaded %s (%s, %u layers, n_embd %u, heads %u/%u x %u, vocab %u, weights %.1f MiB) in %.2f s\n",
                 info.file_name.c_str(), info.architecture.c_str(), info.n_layer, info.n_embd, info.n_head,
                 info.n_head_kv, info.head_dim, info.n_vocab, info.weight_bytes / 1048576.0,
                 std::chrono::duration<double>(clk::now() - t0).count());
    if (show_info) {
      std::map<std::string, std::pair<size_t, uint64_t>> types;
      for (const auto& t : model->gguf().tensors()) {
        auto& e = types[t.type_name()];
        e.first += 1;
        e.second += t.n_bytes;
      }
      for (const auto& [name, e] : types) std::printf("type %s: %zu tensors, %.1f MiB\n", name.c_str(), e.first, e.second / 1048576.0);
      if (const auto* t = model->gguf().find_tensor("token_embd.weight")) std::printf("token_embd.weight %s\n", t->type_name());
    }
    if (show_info)
      for (const auto& l : info.layers)
        std::printf("layer %u %s window %u\n", l.layer, l.full_attention ? "full" : "sliding", l.window);
    const auto& vocab = model->gguf().get_array("tokenizer.ggml.tokens").strings();
    if (!lookup.empty()) {
      std::stringstream ls(lookup);
      std::string w;
      while (std::getline(ls, w, '|')) {
        int found = -1;
        for (size_t v = 0; v < vocab.size(); ++v)
          if (vocab[v] == w) found = static_cast<int>(v);
        std::printf("%s %d\n", w.c_str(), found);
      }
    }
    const std::vector<int32_t> ids = parse_ids(ids_arg);
    if (ids.empty()) return 0;
    const uint32_t n = static_cast<uint32_t>(ids.size());
    Phase full, sliding;
    model->set_context(n + n_decode);
    auto kv = make_cache(info, arm.get(), n + n_decode, n_ubatch, profile ? &full : nullptr, &sliding);
    std::fprintf(stderr, "cache arm %s\n", arm ? arm->spec().c_str() : "f32");
    // Every position's logits only when they are written (--out); else the last one.
    std::vector<float> logits(static_cast<size_t>(out.empty() ? 1 : n) * info.n_vocab);
    t0 = clk::now();
    std::clock_t c0 = std::clock();
    model->eval(ids.data(), n, 0, n_ubatch, kv, logits.data(), !out.empty());
    const double tp = std::chrono::duration<double>(clk::now() - t0).count();
    std::fprintf(stderr, "prefill %u tokens: %.3f s, %.1f tokens/s, cpu %.3f s\n", n, tp, n / tp,
                 double(std::clock() - c0) / CLOCKS_PER_SEC);
    if (profile) print_profile("prefill", tp, n, info, full, sliding);
    full = Phase{};
    sliding = Phase{};
    if (!out.empty()) {
      std::ofstream f(out, std::ios::binary);
      f.write(reinterpret_cast<const char*>(logits.data()), static_cast<std::streamsize>(logits.size() * 4));
      if (!f) throw std::runtime_error("cannot write " + out);
    }
    const float* last = out.empty() ? logits.data() : logits.data() + static_cast<size_t>(n - 1) * info.n_vocab;
    std::vector<float> step(last, last + info.n_vocab);
    t0 = clk::now();
    c0 = std::clock();
    std::vector<int32_t> gen;
    for (uint32_t i = 0; i < n_decode; ++i) {
      int32_t best = 0;
      for (uint32_t v = 1; v < info.n_vocab; ++v)
        if (step[v] > step[best]) best = static_cast<int32_t>(v);
      gen.push_back(best);
      model->eval(&best, 1, n + i, 1, kv, step.data(), false);
    }
    if (n_decode) {
      const double td = std::chrono::duration<double>(clk::now() - t0).count();
      std::fprintf(stderr, "decode %u tokens: %.3f s, %.1f tokens/s, cpu %.3f s\n", n_decode, td, n_decode / td,
                   double(std::clock() - c0) / CLOCKS_PER_SEC);
      if (profile) print_profile("decode", td, n_decode, info, full, sliding);
      for (int32_t g : gen) std::printf("%d:%s ", g, static_cast<size_t>(g) < vocab.size() ? vocab[g].c_str() : "?");
      std::printf("\n");
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "replay_logits: %s\n", e.what());
    return 2;
  }
  return 0;
}
