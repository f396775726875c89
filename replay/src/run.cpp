// Recording and replaying trajectories through a Model and a cache arm.
#include "sjkv/replay/run.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

#include "sjkv/fp16.h"
#include "sjkv/replay/arms.h"

namespace sjkv {
namespace replay {

namespace {

// Passes everything to the arm's store and keeps an fp16 copy of what the model stored.
class CapturingKv : public LayerKv {
 public:
  CapturingKv(std::unique_ptr<LayerKv> inner, CaptureLayer* out, size_t row_values)
      : inner_(std::move(inner)), out_(out), row_(row_values) {}
  void begin_ubatch(uint32_t pos0, uint32_t n) override { inner_->begin_ubatch(pos0, n); }
  void store(uint32_t pos0, uint32_t n, const float* k, const float* v) override {
    if (static_cast<uint64_t>(pos0) * row_ != out_->k.size())
      throw std::logic_error("capture: positions must arrive in order");
    for (size_t i = 0; i < static_cast<size_t>(n) * row_; ++i) {
      out_->k.push_back(f32_to_f16(k[i]));
      out_->v.push_back(f32_to_f16(v[i]));
    }
    inner_->store(pos0, n, k, v);
  }
  void attend(uint32_t pos0, uint32_t n, const float* q, float scale, float* out) override {
    inner_->attend(pos0, n, q, scale, out);
  }
  LayerBits bits() const override { return inner_->bits(); }

 private:
  std::unique_ptr<LayerKv> inner_;
  CaptureLayer* out_;
  size_t row_;
};

}  // namespace

std::vector<std::unique_ptr<LayerKv>> make_cache(const Model& m, const KvArm& arm, uint32_t n_ctx, uint32_t n_ubatch) {
  arm.check_layers(m.info().layers);
  std::vector<std::unique_ptr<LayerKv>> kv;
  for (LayerShape s : m.info().layers) {
    s.n_ctx = n_ctx;
    s.n_ubatch = n_ubatch;
    kv.push_back(arm.make_layer(s));
  }
  return kv;
}

LayerBits cache_bits(const Model& m, const std::vector<std::unique_ptr<LayerKv>>& kv) {
  const auto& layers = m.info().layers;
  bool any_full = false;
  for (const LayerShape& s : layers) any_full = any_full || s.full_attention;
  // Positions held: the attention layers', as recurrent layers the arms share with the
  // reference (score_arms) never run in the arm's own cache.
  uint32_t positions = 0;
  for (size_t i = 0; i < layers.size() && i < kv.size(); ++i)
    if (const auto* ik = dynamic_cast<const InspectableKv*>(kv[i].get()))
      positions = std::max(positions, ik->n_stored());
  double occ = 0, alloc = 0, weight = 0;
  for (size_t i = 0; i < layers.size() && i < kv.size(); ++i) {
    if (layers[i].recurrent) {  // a recurrent state's bits per position, charged to the K/V values
      const LayerBits b = kv[i]->bits();
      if (positions) {
        occ += b.fixed / (2.0 * positions);
        alloc += b.fixed / (2.0 * positions);
      }
      continue;
    }
    if (any_full && !layers[i].full_attention) continue;
    const double w = static_cast<double>(layers[i].n_head_kv) * layers[i].head_dim;
    const LayerBits b = kv[i]->bits();
    occ += w * b.occupied;
    alloc += w * b.allocated;
    weight += w;
  }
  LayerBits out;
  if (weight > 0) {
    out.occupied = occ / weight;
    out.allocated = alloc / weight;
  }
  return out;
}

int32_t pick_token(const float* logits, uint32_t n, const TrajectorySettings& s, SplitMix64& rng) {
  if (!s.sample) return argmax(logits, n);
  std::vector<uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0u);
  auto better = [logits](uint32_t a, uint32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  const size_t k = s.top_k && s.top_k < n ? s.top_k : n;
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(), better);
  std::vector<double> w(k);
  const double top = logits[order[0]];
  double total = 0;
  for (size_t i = 0; i < k; ++i) total += w[i] = std::exp((static_cast<double>(logits[order[i]]) - top) / s.temperature);
  size_t keep = k;
  if (s.top_p < 1.0) {
    double cum = 0;
    for (size_t i = 0; i < k; ++i) {
      cum += w[i];
      if (cum >= s.top_p * total) {
        keep = i + 1;
        break;
      }
    }
    total = 0;
    for (size_t i = 0; i < keep; ++i) total += w[i];
  }
  double u = rng.uniform() * total;
  for (size_t i = 0; i < keep; ++i) {
    if (u < w[i]) return static_cast<int32_t>(order[i]);
    u -= w[i];
  }
  return static_cast<int32_t>(order[keep - 1]);
}

std::string capture_refusal(const ModelInfo& info) {
  const LayerShape* first = nullptr;
  for (const LayerShape& L : info.layers) {
    if (!L.full_attention) continue;
    if (!first) first = &L;
    else if (L.head_dim != first->head_dim || L.n_head_kv != first->n_head_kv)
      return "has full-attention layers of different shapes (layer " + std::to_string(first->layer) + ": " +
             std::to_string(first->n_head_kv) + " kv heads x " + std::to_string(first->head_dim) + ", layer " +
             std::to_string(L.layer) + ": " + std::to_string(L.n_head_kv) + " x " + std::to_string(L.head_dim) +
             "); a capture holds one shape";
  }
  if (!first) return "has no full-attention layer to capture (every layer has a sliding window)";
  // The capture file's own rules (docs/FORMAT.md section 2: a head size that is a power of two
  // in [32, 1024], not too many heads), which its writer would apply only after the generation.
  Capture c;
  c.head_dim = first->head_dim;
  c.kv_heads = first->n_head_kv;
  for (const LayerShape& L : info.layers)
    if (L.full_attention) c.layers.push_back(CaptureLayer{L.layer, {}, {}});
  try {
    c.check_consistent();
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    return "has K/V a capture cannot hold: " + (what.rfind("capture: ", 0) == 0 ? what.substr(9) : what);
  }
  return {};
}

Trajectory record_trajectory(Model& m, const KvArm& reference, const RecordInput& in, Capture* capture,
                             const ProgressFn& progress) {
  const TrajectorySettings& s = in.settings;
  const ModelInfo& info = m.info();
  if (in.prompt.empty()) throw std::invalid_argument("the prompt has no token");
  if (s.generate == 0) throw std::invalid_argument("nothing to generate (--generate 0)");
  const uint32_t P = static_cast<uint32_t>(in.prompt.size()), V = info.n_vocab;
  for (int32_t id : in.prompt)
    if (id < 0 || static_cast<uint32_t>(id) >= V) throw std::invalid_argument("prompt token " + std::to_string(id) + " is out of the vocabulary");
  const uint32_t n_ctx = P + s.generate;
  m.set_context(n_ctx);

  Trajectory t;
  t.model_file = in.model_file;
  t.model_sha256 = in.model_sha256;
  t.architecture = info.architecture;
  t.n_vocab = V;
  t.prompt_tokens = P;
  t.tokens = in.prompt;
  t.settings = s;
  t.encoding = in.encoding;
  const bool hidden_enc = in.encoding == RefEncoding::hidden;
  const uint32_t E = info.n_embd;
  if (hidden_enc) {
    if (E == 0) throw std::invalid_argument("the model reports no hidden size (n_embd 0)");
    t.n_embd = E;
  }

  if (capture) {
    const std::string why = capture_refusal(info);
    if (!why.empty()) throw std::invalid_argument("capture: the model " + why);
  }
  std::vector<std::unique_ptr<LayerKv>> kv = make_cache(m, reference, n_ctx, s.ubatch);
  if (capture) {
    *capture = Capture{};
    capture->model = in.model_file;
    capture->source = "sjkv-replay:" + in.model_file;
    for (size_t i = 0; i < info.layers.size(); ++i) {
      const LayerShape& L = info.layers[i];
      if (!L.full_attention) continue;
      if (capture->layers.empty()) {
        capture->head_dim = L.head_dim;
        capture->kv_heads = L.n_head_kv;
      }
      capture->layers.push_back(CaptureLayer{L.layer, {}, {}});
    }
    size_t c = 0;
    for (size_t i = 0; i < info.layers.size(); ++i)
      if (info.layers[i].full_attention)
        kv[i] = std::make_unique<CapturingKv>(std::move(kv[i]), &capture->layers[c++],
                                              static_cast<size_t>(capture->kv_heads) * capture->head_dim);
  }

  std::vector<float> logits(V), hidden(hidden_enc ? E : 0);
  float* hid = hidden_enc ? hidden.data() : nullptr;
  SplitMix64 rng(s.seed);
  m.eval_hidden(in.prompt.data(), P, 0, s.ubatch, kv, hid, logits.data(), false);
  for (uint32_t j = 0; j < s.generate; ++j) {
    if (hidden_enc) {
      t.hid.push_back(encode_hidden(hid, E, logits.data(), V));
    } else {
      RefDist d = encode_reference(logits.data(), V, s.self_kl_target);
      t.self_kl_max = std::max(t.self_kl_max, self_kl(logits.data(), V, d));
      t.ref.push_back(std::move(d));
    }
    const int32_t tok = pick_token(logits.data(), V, s, rng);
    t.tokens.push_back(tok);
    if (progress) progress(j + 1, s.generate);
    if (j + 1 == s.generate || (in.is_eog && in.is_eog(tok))) break;
    m.eval_hidden(&t.tokens.back(), 1, P + j, s.ubatch, kv, hid, logits.data(), false);
  }
  if (capture) {
    // Every position the model stored: the prompt and all generated tokens but the last.
    capture->tokens = static_cast<uint32_t>(capture->layers.empty() ? 0 : capture->layers[0].k.size() /
                                                                                 (static_cast<size_t>(capture->kv_heads) * capture->head_dim));
    capture->token_ids.assign(t.tokens.begin(), t.tokens.begin() + capture->tokens);
  }
  return t;
}

ReferenceRows::ReferenceRows(const Model& m, const Trajectory& t, size_t keep_bytes) : m_(m), t_(t) {
  if (t.encoding != RefEncoding::hidden) return;
  const uint32_t V = t.n_vocab, G = t.generated();
  if (m.info().n_vocab != V || m.info().n_embd != t.n_embd)
    throw std::invalid_argument("the model's vocabulary or hidden size (" + std::to_string(m.info().n_vocab) + ", " +
                                std::to_string(m.info().n_embd) + ") differs from the trajectory's (" +
                                std::to_string(V) + ", " + std::to_string(t.n_embd) + ")");
  kept_ = static_cast<uint64_t>(G) * V * sizeof(float) <= keep_bytes;
  rows_.resize(static_cast<size_t>(kept_ ? G : 1) * V);
  for (uint32_t j = 0; j < G; ++j) {
    float* r = rows_.data() + (kept_ ? static_cast<size_t>(j) * V : 0);
    m.project(t.hid[j].hidden.data(), 1, r);
    const std::string why = hidden_mismatch(t.hid[j], r, V);
    if (!why.empty())
      throw std::invalid_argument("reference position " + std::to_string(j) + ": this build's output projection does "
                                  "not reproduce the recorded logits (" + why + "); it differs from the recording's "
                                  "engine build or instruction set");
  }
}

const float* ReferenceRows::row(uint32_t j) {
  const uint32_t V = t_.n_vocab;
  if (t_.encoding != RefEncoding::hidden || j >= t_.generated()) throw std::logic_error("ReferenceRows::row: no such row");
  if (kept_) return rows_.data() + static_cast<size_t>(j) * V;
  m_.project(t_.hid[j].hidden.data(), 1, rows_.data());
  if (logits_hash(rows_.data(), V) != t_.hid[j].logits_hash)
    throw std::logic_error("ReferenceRows::row: the output projection is not deterministic");
  return rows_.data();
}

namespace {

void check_vocab(const Model& m, const Trajectory& t) {
  if (m.info().n_vocab != t.n_vocab)
    throw std::invalid_argument("the model's vocabulary (" + std::to_string(m.info().n_vocab) +
                                ") differs from the trajectory's (" + std::to_string(t.n_vocab) + ")");
}

ScoreDetail detail_of(const std::vector<std::unique_ptr<LayerKv>>& kv) {
  ScoreDetail d;
  for (const auto& l : kv) {
    const auto* ik = dynamic_cast<const InspectableKv*>(l.get());
    const SequenceCache* c = ik ? ik->codec_cache() : nullptr;
    if (!c) continue;
    d.codec = true;
    d.sealed = d.sealed || c->policy().B > c->policy().sink;
  }
  return d;
}

// The positions of one replay: `step(j)` leaves position j's logits in `logits` (j = 0 after
// the prompt, then one decoded token each).
template <class Step>
std::vector<ScoreRow> score_loop(const Model& m, const Trajectory& t, ReferenceRows* ref,
                                 const std::vector<std::unique_ptr<LayerKv>>& kv, std::vector<float>& logits,
                                 const ProgressFn& progress, Step step) {
  const uint32_t V = m.info().n_vocab, G = t.generated();
  std::vector<ScoreRow> rows(G);
  step(0u);
  for (uint32_t j = 0; j < G; ++j) {
    ScoreRow& r = rows[j];
    r.kl = t.encoding == RefEncoding::sparse ? kl_to_reference(t.ref[j], logits.data(), V)
                                             : kl_full(ref->row(j), logits.data(), V);
    r.same_top = argmax(logits.data(), V) == t.top_token(j);
    const LayerBits b = cache_bits(m, kv);
    r.bits_occupied = b.occupied;
    r.bits_allocated = b.allocated;
    if (progress) progress(j + 1, G);
    if (j + 1 < G) step(j + 1);
  }
  return rows;
}

}  // namespace

std::vector<ScoreRow> score_trajectory(Model& m, const KvArm& arm, const Trajectory& t, uint32_t n_ubatch,
                                       const ProgressFn& progress, ReferenceRows* ref, ScoreDetail* detail) {
  check_vocab(m, t);
  const uint32_t P = t.prompt_tokens, G = t.generated();
  m.set_context(P + t.settings.generate);  // the context it was recorded with
  std::unique_ptr<ReferenceRows> own;
  if (t.encoding == RefEncoding::hidden && !ref) {
    own = std::make_unique<ReferenceRows>(m, t);
    ref = own.get();
  }
  std::vector<std::unique_ptr<LayerKv>> kv = make_cache(m, arm, P + G, n_ubatch);
  std::vector<float> logits(m.info().n_vocab);
  std::vector<ScoreRow> rows = score_loop(m, t, ref, kv, logits, progress, [&](uint32_t j) {
    if (j == 0) m.eval(t.tokens.data(), P, 0, n_ubatch, kv, logits.data(), false);
    else m.eval(&t.tokens[P + j - 1], 1, P + j - 1, n_ubatch, kv, logits.data(), false);
  });
  if (detail) *detail = detail_of(kv);
  return rows;
}

void score_arms(Model& m, const std::vector<const KvArm*>& arms, const Trajectory& t, uint32_t n_ubatch,
                const ArmDoneFn& done, const std::function<ProgressFn(size_t)>& progress, ReferenceRows* ref) {
  check_vocab(m, t);
  const uint32_t P = t.prompt_tokens, G = t.generated(), E = m.info().n_embd;
  m.set_context(P + t.settings.generate);  // the context it was recorded with
  std::unique_ptr<ReferenceRows> own;
  if (t.encoding == RefEncoding::hidden && !ref) {
    own = std::make_unique<ReferenceRows>(m, t);
    ref = own.get();
  }
  // Layers before the first full-attention layer are sliding ones: shared by the arms that
  // store them as plain f16.
  uint32_t L = 0;
  const auto& layers = m.info().layers;
  while (L < layers.size() && !layers[L].full_attention) ++L;
  if (L == layers.size()) L = 0;  // no full-attention layer: nothing to share
  bool any_shared = false;
  for (const KvArm* a : arms) any_shared = any_shared || a->plain_f16_sliding();
  std::vector<float> x;  // residual stream after layer L: prompt rows, then each decoded token's
  if (L > 0 && m.splits() && any_shared && G > 0) {
    const auto f16 = make_arm("f16");
    std::vector<std::unique_ptr<LayerKv>> kv = make_cache(m, *f16, P + G, n_ubatch);
    x.resize(static_cast<size_t>(P + G - 1) * E);
    m.eval_prefix(t.tokens.data(), P, 0, n_ubatch, L, kv, x.data());
    for (uint32_t j = 0; j + 1 < G; ++j)
      m.eval_prefix(&t.tokens[P + j], 1, P + j, n_ubatch, L, kv, x.data() + static_cast<size_t>(P + j) * E);
  }
  std::vector<float> logits(m.info().n_vocab);
  for (size_t a = 0; a < arms.size(); ++a) {
    const ProgressFn pf = progress ? progress(a) : ProgressFn();
    if (x.empty() || !arms[a]->plain_f16_sliding()) {
      ScoreDetail d;
      std::vector<ScoreRow> rows = score_trajectory(m, *arms[a], t, n_ubatch, pf, ref, &d);
      done(a, std::move(rows), d);
      continue;
    }
    std::vector<std::unique_ptr<LayerKv>> kv = make_cache(m, *arms[a], P + G, n_ubatch);
    std::vector<ScoreRow> rows = score_loop(m, t, ref, kv, logits, pf, [&](uint32_t j) {
      const uint32_t p0 = j == 0 ? 0 : P + j - 1, n = j == 0 ? P : 1;
      m.eval_suffix(x.data() + static_cast<size_t>(p0) * E, n, p0, n_ubatch, L, kv, nullptr, logits.data(), false);
    });
    done(a, std::move(rows), detail_of(kv));
  }
}

}  // namespace replay
}  // namespace sjkv
