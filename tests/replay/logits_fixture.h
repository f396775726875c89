// llama.cpp logits fixtures (scripts/make-arch-fixtures.py) and the KL and sjkv logits the
// agreement tests compare them with: test_arch (architectures) and test_quant_models (weight
// types) read the same files the same way.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "sjkv/replay/kv.h"
#include "sjkv/replay/model.h"
#include "sjkv/replay/run.h"

namespace sjkv {
namespace replay {
namespace testfx {

struct Fixture {
  uint32_t n_vocab = 0, n_ctx = 0;
  std::string model;
  std::vector<int32_t> tokens;
  std::vector<uint32_t> positions;
  std::vector<std::vector<float>> logits;
};

// The fixture format of scripts/make-arch-fixtures.py (little-endian): "SJKVLGT1", n_vocab,
// n_ctx, n_tokens, n_rows (u32), model[32], tokens (i32), then per row: position (u32), logits.
inline Fixture read_fixture(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("missing fixture " + path);
  auto u32 = [&] {
    uint32_t v = 0;
    in.read(reinterpret_cast<char*>(&v), 4);
    return v;
  };
  char magic[8] = {};
  in.read(magic, 8);
  if (std::memcmp(magic, "SJKVLGT1", 8) != 0) throw std::runtime_error(path + ": not a logits fixture");
  Fixture f;
  f.n_vocab = u32();
  f.n_ctx = u32();
  const uint32_t n_tokens = u32(), n_rows = u32();
  if (f.n_vocab == 0 || f.n_vocab > 1000000 || n_tokens > 1000000 || n_rows > n_tokens)
    throw std::runtime_error(path + ": sizes out of range");
  char model[32] = {};
  in.read(model, 32);
  f.model.assign(model, strnlen(model, 32));
  f.tokens.resize(n_tokens);
  in.read(reinterpret_cast<char*>(f.tokens.data()), std::streamsize(n_tokens) * 4);
  for (uint32_t r = 0; r < n_rows; ++r) {
    f.positions.push_back(u32());
    f.logits.emplace_back(f.n_vocab);
    in.read(reinterpret_cast<char*>(f.logits.back().data()), std::streamsize(f.n_vocab) * 4);
  }
  if (!in) throw std::runtime_error(path + ": truncated");
  return f;
}

// KL(p || q) in nats of the softmaxes of two logit rows.
inline double kl(const float* p_logits, const float* q_logits, uint32_t n) {
  auto log_softmax = [n](const float* l) {
    std::vector<double> out(l, l + n);
    const double mx = *std::max_element(out.begin(), out.end());
    double s = 0.0;
    for (double x : out) s += std::exp(x - mx);
    const double lse = mx + std::log(s);
    for (double& x : out) x -= lse;
    return out;
  };
  const std::vector<double> lp = log_softmax(p_logits), lq = log_softmax(q_logits);
  double d = 0.0;
  for (uint32_t i = 0; i < n; ++i) d += std::exp(lp[i]) * (lp[i] - lq[i]);
  return std::max(0.0, d);
}

// sjkv's logits at every position of the fixture's tokens, f32 cache, ubatches of 512.
inline std::vector<float> sjkv_logits(Model& m, const Fixture& f) {
  const uint32_t n = static_cast<uint32_t>(f.tokens.size()), V = m.info().n_vocab;
  m.set_context(f.n_ctx);
  const auto arm = make_arm("f32");
  auto kv = make_cache(m, *arm, n, 512);
  std::vector<float> logits(size_t(n) * V);
  m.eval(f.tokens.data(), n, 0, 512, kv, logits.data(), true);
  return logits;
}

}  // namespace testfx
}  // namespace replay
}  // namespace sjkv
