// Recording and replaying trajectories through a Model and a cache arm.
#include "sjkv/replay/run.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <stdexcept>

#include "sjkv/fp16.h"
#include "sjkv/parallel.h"
#include "sjkv/replay/arms.h"

namespace sjkv {
namespace replay {

namespace {

// A full-attention layer that stores its own K/V: what arms compress, captures hold and
// cache_bits counts (a shared-KV layer reads another's).
bool stores_full(const LayerShape& s) { return s.full_attention && s.kv_source < 0; }

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
  LayerBits bits_at(uint32_t n) const override { return inner_->bits_at(n); }
  uint32_t decode_run(uint32_t pos0, uint32_t limit) const override { return inner_->decode_run(pos0, limit); }
  void idle(uint32_t keep_recent) override { inner_->idle(keep_recent); }

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

LayerBits cache_bits(const Model& m, const std::vector<std::unique_ptr<LayerKv>>& kv, uint32_t n) {
  const auto& layers = m.info().layers;
  bool any_full = false;
  for (const LayerShape& s : layers) any_full = any_full || stores_full(s);
  // Positions held: the attention layers', as recurrent layers the arms share with the
  // reference (score_arms) never run in the arm's own cache; none for an arm with no
  // inspectable layer (f32), which is charged no state.
  uint32_t positions = 0;
  for (size_t i = 0; i < layers.size() && i < kv.size(); ++i)
    if (const auto* ik = dynamic_cast<const InspectableKv*>(kv[i].get()))
      positions = std::max(positions, ik->n_stored());
  if (n != kAllStored && positions > 0) positions = n;
  double occ = 0, alloc = 0, weight = 0;
  for (size_t i = 0; i < layers.size() && i < kv.size(); ++i) {
    if (layers[i].recurrent) {  // a recurrent state's bits per position, charged to the K/V values
      const LayerBits b = kv[i]->bits_at(positions);
      if (positions) {
        occ += b.fixed / (2.0 * positions);
        alloc += b.fixed / (2.0 * positions);
      }
      continue;
    }
    if (layers[i].kv_source >= 0 || (any_full && !layers[i].full_attention)) continue;  // shared: no K/V of its own
    const double w = static_cast<double>(layers[i].n_head_kv) * layers[i].head_dim;
    const LayerBits b = n == kAllStored ? kv[i]->bits() : kv[i]->bits_at(n);
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
    if (!stores_full(L)) continue;
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
    if (stores_full(L)) c.layers.push_back(CaptureLayer{L.layer, {}, {}});
  try {
    c.check_consistent();
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    return "has K/V a capture cannot hold: " + (what.rfind("capture: ", 0) == 0 ? what.substr(9) : what);
  }
  return {};
}

namespace {

// The plan a recording follows: in.plan, or the version-2 pair.
std::vector<PlannedSegment> record_plan(const RecordInput& in) {
  if (!in.plan.empty()) return in.plan;
  if (in.prompt.empty()) throw std::invalid_argument("the prompt has no token");
  PlannedSegment given, turn;
  given.tokens = in.prompt;
  turn.kind = SegmentKind::generated;
  return {given, turn};
}

}  // namespace

Trajectory record_trajectory(Model& m, const KvArm& reference, const RecordInput& in, Capture* capture,
                             const ProgressFn& progress) {
  const TrajectorySettings& s = in.settings;
  const ModelInfo& info = m.info();
  const std::vector<PlannedSegment> plan = record_plan(in);
  if (s.generate == 0) throw std::invalid_argument("nothing to generate (--generate 0)");
  const uint32_t V = info.n_vocab;
  // The context: every given and answer token, and a full turn for each generated one.
  uint64_t ctx = 0, scored_max = 0;
  for (const PlannedSegment& p : plan) {
    if (p.kind == SegmentKind::idle) {
      if (!p.tokens.empty()) throw std::invalid_argument("plan: an idle segment holds tokens");
      continue;
    }
    if (p.kind == SegmentKind::generated) {
      if (!p.tokens.empty()) throw std::invalid_argument("plan: a generated segment holds tokens");
      ctx += s.generate;
      scored_max += s.generate;
      continue;
    }
    if (p.tokens.empty()) throw std::invalid_argument(p.kind == SegmentKind::given ? "the prompt has no token" : "plan: an empty answer");
    for (int32_t id : p.tokens)
      if (id < 0 || static_cast<uint32_t>(id) >= V)
        throw std::invalid_argument(std::string(p.kind == SegmentKind::given ? "prompt" : "answer") + " token " +
                                    std::to_string(id) + " is out of the vocabulary");
    ctx += p.tokens.size();
    if (p.kind == SegmentKind::answer) scored_max += p.tokens.size();
  }
  if (plan.front().kind != SegmentKind::given) throw std::invalid_argument("plan: the first segment is not given text");
  if (ctx > (1u << 24)) throw std::invalid_argument("plan: " + std::to_string(ctx) + " tokens exceed a trajectory's 2^24");
  const uint32_t n_ctx = static_cast<uint32_t>(ctx);
  m.set_context(n_ctx);

  Trajectory t;
  t.model_file = in.model_file;
  t.model_sha256 = in.model_sha256;
  t.architecture = info.architecture;
  t.n_vocab = V;
  t.prompt_tokens = static_cast<uint32_t>(plan.front().tokens.size());
  t.settings = s;
  t.encoding = in.encoding;
  if (!in.plan.empty()) t.context = n_ctx;
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
      if (!stores_full(L)) continue;
      if (capture->layers.empty()) {
        capture->head_dim = L.head_dim;
        capture->kv_heads = L.n_head_kv;
      }
      capture->layers.push_back(CaptureLayer{L.layer, {}, {}});
    }
    size_t c = 0;
    for (size_t i = 0; i < info.layers.size(); ++i)
      if (stores_full(info.layers[i]))
        kv[i] = std::make_unique<CapturingKv>(std::move(kv[i]), &capture->layers[c++],
                                              static_cast<size_t>(capture->kv_heads) * capture->head_dim);
  }

  std::vector<float> logits(V), hidden(hidden_enc ? E : 0);
  float* hid = hidden_enc ? hidden.data() : nullptr;
  SplitMix64 rng(s.seed);
  // The distribution in `logits` is the next scored position's reference.
  auto keep_reference = [&] {
    if (hidden_enc) {
      t.hid.push_back(encode_hidden(hid, E, logits.data(), V));
    } else {
      RefDist d = encode_reference(logits.data(), V, s.self_kl_target);
      t.self_kl_max = std::max(t.self_kl_max, self_kl(logits.data(), V, d));
      t.ref.push_back(std::move(d));
    }
    if (progress) progress(t.generated(), scored_max);
  };
  uint32_t at = 0;             // next token to evaluate; tokens [at, size) are pending
  bool ended_by_eog = false;   // the last generated turn stopped after an end-of-generation token
  for (const PlannedSegment& p : plan) {
    if (p.kind == SegmentKind::idle) {
      for (auto& l : kv) l->idle(p.keep_recent);
      t.segments.push_back(Segment{SegmentKind::idle, 0, p.keep_recent});
      continue;
    }
    if (p.kind == SegmentKind::given) {
      auto first = p.tokens.begin();
      if (ended_by_eog && *first == t.tokens.back()) ++first;
      if (first == p.tokens.end()) throw std::invalid_argument("plan: a given piece holds only the end-of-turn marker");
      const uint32_t piece = static_cast<uint32_t>(t.tokens.size());
      t.tokens.insert(t.tokens.end(), first, p.tokens.end());
      const uint32_t end = static_cast<uint32_t>(t.tokens.size());
      t.segments.push_back(Segment{SegmentKind::given, end - piece, 0});
      m.eval_hidden(&t.tokens[at], end - at, at, s.ubatch, kv, hid, logits.data(), false);
      at = end;
      ended_by_eog = false;
      continue;
    }
    const uint32_t start = static_cast<uint32_t>(t.tokens.size());
    const uint32_t n = p.kind == SegmentKind::answer ? static_cast<uint32_t>(p.tokens.size()) : s.generate;
    for (uint32_t j = 0; j < n; ++j) {
      keep_reference();
      const int32_t tok = p.kind == SegmentKind::answer ? p.tokens[j] : pick_token(logits.data(), V, s, rng);
      t.tokens.push_back(tok);
      const bool eog = p.kind == SegmentKind::generated && in.is_eog && in.is_eog(tok);
      if (j + 1 == n || eog) {
        ended_by_eog = eog;
        break;
      }
      m.eval_hidden(&t.tokens.back(), 1, at, s.ubatch, kv, hid, logits.data(), false);
      ++at;
    }
    t.segments.push_back(Segment{p.kind, static_cast<uint32_t>(t.tokens.size()) - start, 0});
  }
  if (in.plan.empty()) t.segments.clear();  // version 2
  if (capture) {
    // Every position the model stored: all tokens but the pending last one.
    capture->tokens = static_cast<uint32_t>(capture->layers.empty() ? 0 : capture->layers[0].k.size() /
                                                                                 (static_cast<size_t>(capture->kv_heads) * capture->head_dim));
    capture->token_ids.assign(t.tokens.begin(), t.tokens.begin() + capture->tokens);
  }
  t.check_consistent();
  return t;
}

// The rows a chunk of scored positions projects at once: 32 of Gemma's 262,144-entry rows are
// 32 MiB, and 32 rows keep the wide product tiles busy where one row would use the one-token ones.
constexpr uint32_t kProjectRows = 32;

ReferenceRows::ReferenceRows(const Model& m, const Trajectory& t, size_t keep_bytes) : m_(m), t_(t) {
  if (t.encoding != RefEncoding::hidden) return;
  const uint32_t V = t.n_vocab, G = t.generated();
  if (m.info().n_vocab != V || m.info().n_embd != t.n_embd)
    throw std::invalid_argument("the model's vocabulary or hidden size (" + std::to_string(m.info().n_vocab) + ", " +
                                std::to_string(m.info().n_embd) + ") differs from the trajectory's (" +
                                std::to_string(V) + ", " + std::to_string(t.n_embd) + ")");
  kept_ = static_cast<uint64_t>(G) * V * sizeof(float) <= keep_bytes;
  rows_.resize(static_cast<size_t>(kept_ ? G : std::min(G, kProjectRows)) * V);
  std::vector<std::string> why;
  for (uint32_t j0 = 0; j0 < G; j0 += kProjectRows) {
    const uint32_t n = std::min(kProjectRows, G - j0);
    float* r = rows_.data() + (kept_ ? static_cast<size_t>(j0) * V : 0);
    project(j0, n, r);
    why.assign(n, std::string());
    parallel_for(n, 0, [&](long i) { why[i] = hidden_mismatch(t.hid[j0 + i], r + static_cast<size_t>(i) * V, V); });
    for (uint32_t i = 0; i < n; ++i)
      if (!why[i].empty())
        throw std::invalid_argument("reference position " + std::to_string(j0 + i) + ": this build's output projection "
                                    "does not reproduce the recorded logits (" + why[i] + "); it differs from the "
                                    "recording's engine build or instruction set");
  }
}

void ReferenceRows::project(uint32_t j0, uint32_t n, float* out) {
  const uint32_t E = t_.n_embd;
  hidden_.resize(static_cast<size_t>(n) * E);
  for (uint32_t i = 0; i < n; ++i)
    std::copy(t_.hid[j0 + i].hidden.begin(), t_.hid[j0 + i].hidden.end(), hidden_.begin() + static_cast<std::ptrdiff_t>(i) * E);
  m_.project(hidden_.data(), n, out);
}

std::unique_ptr<ReferenceRows> reference_rows(const Model& m, const Trajectory& t, ScoreProfile* profile) {
  const auto t0 = std::chrono::steady_clock::now();
  auto r = std::make_unique<ReferenceRows>(m, t);
  if (profile) profile->reference_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

const float* ReferenceRows::row(uint32_t j) { return rows(j, 1); }

const float* ReferenceRows::rows(uint32_t j0, uint32_t n) {
  const uint32_t V = t_.n_vocab;
  if (t_.encoding != RefEncoding::hidden || n == 0 || j0 >= t_.generated() || n > t_.generated() - j0)
    throw std::logic_error("ReferenceRows::rows: no such rows");
  if (kept_) return rows_.data() + static_cast<size_t>(j0) * V;
  rows_.resize(std::max(rows_.size(), static_cast<size_t>(n) * V));
  project(j0, n, rows_.data());
  for (uint32_t i = 0; i < n; ++i)
    if (logits_hash(rows_.data() + static_cast<size_t>(i) * V, V) != t_.hid[j0 + i].logits_hash)
      throw std::logic_error("ReferenceRows::rows: the output projection is not deterministic");
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

// Walks t's schedule (FORMAT.md 9.4) over kv, as record ran it. eval(q, n, every_row, scored)
// evaluates tokens [q, q + n) in ubatches of n_ubatch (scored: a scored segment's tokens, not a
// given one's); rows(j0, n, every_row) then scores positions j0 ..
// j0 + n - 1 from its rows (every_row: all n, else the last row, n = 1). A given segment runs
// from the pending token (the last of the scored segment before it); a scored segment's first
// position takes the row before it, then its tokens but the last run one per ubatch, or with
// `blocked` in runs that end before any layer's journal would seal (LayerKv::decode_run), which
// gives one-token decoding's bits; an idle segment is every layer's idle step.
template <class Eval, class Rows>
void walk_schedule(const Trajectory& t, std::vector<std::unique_ptr<LayerKv>>& kv, uint32_t n_ubatch, bool blocked,
                   Eval eval, Rows rows) {
  uint32_t at = 0, pos = 0, j = 0;  // next token to evaluate, the segment's start, next scored position
  for (const Segment& s : t.schedule()) {
    const uint32_t end = pos + s.length;
    if (s.kind == SegmentKind::idle) {
      for (auto& l : kv) l->idle(s.keep_recent);
    } else if (s.kind == SegmentKind::given) {
      eval(at, end - at, false, false);
      at = end;
    } else {
      rows(j++, 1u, false);
      for (uint32_t q = pos; q + 1 < end;) {
        uint32_t r = 1;
        if (blocked) {
          r = std::min(n_ubatch, end - 1 - q);
          for (const auto& l : kv) r = std::min(r, l->decode_run(q, r));
        }
        eval(q, r, blocked, true);
        rows(j, r, blocked);
        j += r;
        q += r;
      }
      at = end - 1;
    }
    pos = end;
  }
}

// The scored positions of one replay. `eval(q, n, hidden, logits)` evaluates tokens [q, q + n)
// and writes the last row's logits (hidden null) or every row's final hidden state ([n][n_embd],
// logits null). Blocked unless opt.stepwise; the stepwise walk is kept as the reference the
// tests hold the blocks to.
template <class Eval>
std::vector<ScoreRow> score_loop(const Model& m, const Trajectory& t, ReferenceRows* ref,
                                 std::vector<std::unique_ptr<LayerKv>>& kv, uint32_t n_ubatch, const ScoreOptions& opt,
                                 const ProgressFn& progress, Eval eval) {
  const uint32_t V = m.info().n_vocab, G = t.generated(), E = m.info().n_embd;
  const std::vector<uint32_t> at = t.scored_positions();
  std::vector<ScoreRow> rows(G);
  // Position j's KL and top token from its logits and the reference's row (null: sparse).
  auto compare = [&](uint32_t j, const float* lg, const float* ref_row) {
    ScoreRow& r = rows[j];
    r.kl = t.encoding == RefEncoding::sparse ? kl_to_reference(t.ref[j], lg, V) : kl_full(ref_row, t.hid[j].log_z, lg, V);
    r.same_top = (r.top = argmax(lg, V)) == t.top_token(j);
  };
  // Then its bits: the cache held the positions before it.
  auto charge = [&](uint32_t j) {
    const LayerBits b = cache_bits(m, kv, at[j]);
    rows[j].bits_occupied = b.occupied;
    rows[j].bits_allocated = b.allocated;
    if (progress) progress(j + 1, G);
  };
  const bool blocked = !opt.stepwise && E > 0;
  std::vector<float> logits(static_cast<size_t>(V) * (blocked ? std::min(kProjectRows, n_ubatch) : 1));
  std::vector<float> hidden;
  ScoreProfile local;
  ScoreProfile& prof = opt.profile ? *opt.profile : local;
  using clock = std::chrono::steady_clock;
  auto since = [](clock::time_point t0) { return std::chrono::duration<double>(clock::now() - t0).count(); };
  walk_schedule(
      t, kv, n_ubatch, blocked,
      [&](uint32_t q, uint32_t n, bool every_row, bool scoring) {
        const clock::time_point t0 = clock::now();
        if (!every_row) {
          eval(q, n, nullptr, logits.data());
        } else {
          hidden.resize(static_cast<size_t>(n) * E);
          eval(q, n, hidden.data(), nullptr);
        }
        (scoring ? prof.forward_s : prof.given_s) += since(t0);
        if (!scoring) prof.given_tokens += n;
      },
      [&](uint32_t j0, uint32_t n, bool every_row) {
        prof.scored += n;
        if (!every_row) {
          clock::time_point t0 = clock::now();
          const float* ref_row = t.encoding == RefEncoding::sparse ? nullptr : ref->row(j0);
          prof.reference_s += since(t0);
          t0 = clock::now();
          compare(j0, logits.data(), ref_row);
          charge(j0);
          prof.compare_s += since(t0);
          return;
        }
        for (uint32_t c = 0; c < n; c += kProjectRows) {
          const uint32_t nc = std::min(kProjectRows, n - c), jc = j0 + c;
          clock::time_point t0 = clock::now();
          m.project(hidden.data() + static_cast<size_t>(c) * E, nc, logits.data());
          prof.project_s += since(t0);
          t0 = clock::now();
          const float* ref_rows = t.encoding == RefEncoding::sparse ? nullptr : ref->rows(jc, nc);
          prof.reference_s += since(t0);
          t0 = clock::now();
          // Rows on the pool, each row's sums in its one sequential order: the same bits.
          parallel_for(nc, 0, [&](long i) {
            compare(jc + static_cast<uint32_t>(i), logits.data() + static_cast<size_t>(i) * V,
                    ref_rows ? ref_rows + static_cast<size_t>(i) * V : nullptr);
          });
          for (uint32_t i = 0; i < nc; ++i) charge(jc + i);
          prof.compare_s += since(t0);
        }
      });
  return rows;
}

}  // namespace

std::vector<ScoreRow> score_trajectory(Model& m, const KvArm& arm, const Trajectory& t, uint32_t n_ubatch,
                                       const ProgressFn& progress, ReferenceRows* ref, ScoreDetail* detail,
                                       const ScoreOptions& opt) {
  check_vocab(m, t);
  m.set_context(t.n_ctx());  // the context it was recorded with
  std::unique_ptr<ReferenceRows> own;
  if (t.encoding == RefEncoding::hidden && !ref) {
    own = reference_rows(m, t, opt.profile);
    ref = own.get();
  }
  std::vector<std::unique_ptr<LayerKv>> kv = make_cache(m, arm, t.n_tokens(), n_ubatch);
  std::vector<ScoreRow> rows =
      score_loop(m, t, ref, kv, n_ubatch, opt, progress, [&](uint32_t q, uint32_t n, float* hidden, float* logits) {
        m.eval_hidden(&t.tokens[q], n, q, n_ubatch, kv, hidden, logits, hidden != nullptr);
      });
  if (detail) *detail = detail_of(kv);
  return rows;
}

void score_arms(Model& m, const std::vector<const KvArm*>& arms, const Trajectory& t, uint32_t n_ubatch,
                const ArmDoneFn& done, const std::function<ProgressFn(size_t)>& progress, ReferenceRows* ref,
                const ScoreOptions& opt) {
  check_vocab(m, t);
  const uint32_t T = t.n_tokens(), G = t.generated(), E = m.info().n_embd;
  m.set_context(t.n_ctx());  // the context it was recorded with
  std::unique_ptr<ReferenceRows> own;
  if (t.encoding == RefEncoding::hidden && !ref) {
    own = reference_rows(m, t, opt.profile);
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
  std::vector<float> x;  // residual stream after layer L, one row per evaluated token (all but the last)
  if (L > 0 && m.splits() && any_shared && G > 0) {
    const auto f16 = make_arm("f16");
    std::vector<std::unique_ptr<LayerKv>> kv = make_cache(m, *f16, T, n_ubatch);
    x.resize(static_cast<size_t>(T - 1) * E);
    walk_schedule(
        t, kv, n_ubatch, !opt.stepwise,
        [&](uint32_t q, uint32_t n, bool, bool) {
          m.eval_prefix(&t.tokens[q], n, q, n_ubatch, L, kv, x.data() + static_cast<size_t>(q) * E);
        },
        [](uint32_t, uint32_t, bool) {});
  }
  for (size_t a = 0; a < arms.size(); ++a) {
    const ProgressFn pf = progress ? progress(a) : ProgressFn();
    if (x.empty() || !arms[a]->plain_f16_sliding()) {
      ScoreDetail d;
      std::vector<ScoreRow> rows = score_trajectory(m, *arms[a], t, n_ubatch, pf, ref, &d, opt);
      done(a, std::move(rows), d);
      continue;
    }
    std::vector<std::unique_ptr<LayerKv>> kv = make_cache(m, *arms[a], T, n_ubatch);
    std::vector<ScoreRow> rows =
        score_loop(m, t, ref, kv, n_ubatch, opt, pf, [&](uint32_t q, uint32_t n, float* hidden, float* logits) {
          m.eval_suffix(x.data() + static_cast<size_t>(q) * E, n, q, n_ubatch, L, kv, hidden, logits, hidden != nullptr);
        });
    done(a, std::move(rows), detail_of(kv));
  }
}

}  // namespace replay
}  // namespace sjkv
