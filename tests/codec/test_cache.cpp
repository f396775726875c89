// Host cache driven like an engine (docs/SPEC.md §9.2-9.6): policy steps against an
// independent JournalPolicy, sealed records against the reference seal of the staged rows
// (§5.1), ring slots, sink entries, row resolution, reference attention (§9.1) against
// independent double-precision softmax, typed store errors, and bits-per-value accounting
// (the note, section 3).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "sjkv/cache.h"
#include "sjkv/cache_view.h"
#include "sjkv/hadamard.h"
#include "sjkv/policy.h"
#include "sjkv/seal.h"
#include "sjkv/staging.h"
#include "sjkv/testgen.h"

using namespace sjkv;

namespace {

constexpr uint32_t kLayers = 2;
constexpr uint32_t kHeads = 2;
constexpr uint32_t kUbatch = 64;

// The test_state geometry of §8.3 (sink 128, G 128, tail 256/512, n_ubatch 64 -> cap 768):
// small enough to seal several times and wrap the ring within ~1300 positions.
CodecConfig make_cfg(uint32_t D, uint32_t bk, uint32_t bv, StagingType st, SinkType sink_type,
                     uint32_t flush_chunk = 0) {
  CodecConfig c;
  c.head_dim = D;
  c.group = 128;
  c.bits_k = bk;
  c.bits_v = bv;
  c.body = Body::scalar;
  c.staging = st;
  c.sink_type = sink_type;
  c.sink = 128;
  c.tail = 256;
  c.tail_max = 512;
  c.flush_chunk = flush_chunk;
  return c;
}

CacheShape make_shape(uint32_t n_ctx) {
  CacheShape s;
  s.n_layers = kLayers;
  s.n_head_kv = kHeads;
  s.n_ctx = n_ctx;
  s.n_ubatch = kUbatch;
  return s;
}

// What an engine hands the cache: per (layer, head, channel) profiles with ~4% outlier key
// channels and channel biases, per-token factors, XorShift64::gauss values; every head
// rotated with the configuration's Hadamard block, as K and Q are before they reach the cache.
struct Rows {
  uint32_t D = 0, per_pos = 0, n = 0;  // per_pos = layers * heads * D
  std::vector<float> k, v;             // rotated [n][layer][head][D]
  std::vector<float> k_raw;            // unrotated keys, for building queries
  const float* kp(uint32_t p, uint32_t l = 0, uint32_t h = 0) const {
    return k.data() + static_cast<size_t>(p) * per_pos + (static_cast<size_t>(l) * kHeads + h) * D;
  }
  const float* vp(uint32_t p, uint32_t l = 0, uint32_t h = 0) const {
    return v.data() + static_cast<size_t>(p) * per_pos + (static_cast<size_t>(l) * kHeads + h) * D;
  }
};

Rows make_rows(uint32_t D, uint32_t rot, uint32_t n, uint64_t seed) {
  Rows r;
  r.D = D;
  r.per_pos = kLayers * kHeads * D;
  r.n = n;
  XorShift64 rng(0x9E3779B97F4A7C15ull ^ seed);
  std::vector<float> kf(r.per_pos), kb(r.per_pos), vf(r.per_pos), vb(r.per_pos);
  for (uint32_t i = 0; i < r.per_pos; ++i) {
    kf[i] = rng.next() % 100u < 4u ? 8.0f + static_cast<float>(rng.next() & 7u)
                                   : 1.0f + 0.25f * static_cast<float>(rng.next() & 3u);
    kb[i] = static_cast<float>(rng.gauss()) / 2048.0f;
    vf[i] = 1.0f + 0.25f * static_cast<float>(rng.next() & 3u);
    vb[i] = static_cast<float>(rng.gauss()) / 4096.0f;
  }
  const size_t total = static_cast<size_t>(n) * r.per_pos;
  r.k_raw.resize(total);
  r.v.resize(total);
  for (uint32_t p = 0; p < n; ++p) {
    const float tf = 0.75f + 0.25f * static_cast<float>(rng.next() & 3u);
    for (uint32_t i = 0; i < r.per_pos; ++i) {
      const size_t o = static_cast<size_t>(p) * r.per_pos + i;
      r.k_raw[o] = static_cast<float>(rng.gauss()) / 2048.0f * kf[i] * tf + kb[i];
      r.v[o] = static_cast<float>(rng.gauss()) / 2048.0f * vf[i] + vb[i];
    }
  }
  r.k = r.k_raw;
  for (uint32_t p = 0; p < n; ++p) {
    hadamard_blocks(r.k.data() + static_cast<size_t>(p) * r.per_pos, r.per_pos, rot);
    hadamard_blocks(r.v.data() + static_cast<size_t>(p) * r.per_pos, r.per_pos, rot);
  }
  return r;
}

std::vector<uint8_t> stage_row(StagingType t, const float* x, uint32_t D) {
  std::vector<uint8_t> out(staging_row_bytes(t, D));
  EXPECT_TRUE(staging_encode_row(t, x, D, out.data()));
  return out;
}

std::vector<float> decode_staged(StagingType t, const float* x, uint32_t D) {
  const std::vector<uint8_t> row = stage_row(t, x, D);
  std::vector<float> out(D);
  staging_decode_row(t, row.data(), D, out.data());
  return out;
}

// Reference record of (layer l, group g, head h). from_staged: the §5.1 input (staged row
// read back, rounded to fp16); otherwise the original floats rounded to fp16, which the
// cache must NOT use.
std::vector<uint8_t> reference_record(const CodecConfig& c, const Rows& r, uint32_t l, uint32_t g, uint32_t h,
                                      bool from_staged = true) {
  const uint32_t D = c.head_dim, G = c.group;
  std::vector<uint16_t> K(static_cast<size_t>(G) * D), V(static_cast<size_t>(G) * D);
  std::vector<float> tmp(D);
  for (uint32_t t = 0; t < G; ++t) {
    const uint32_t p = c.sink + g * G + t;
    const float* k = r.kp(p, l, h);
    const float* v = r.vp(p, l, h);
    if (from_staged) {
      const std::vector<uint8_t> sk = stage_row(c.staging, k, D), sv = stage_row(c.staging, v, D);
      staging_seal_input(c.staging, sk.data(), D, tmp.data(), K.data() + static_cast<size_t>(t) * D);
      staging_seal_input(c.staging, sv.data(), D, tmp.data(), V.data() + static_cast<size_t>(t) * D);
    } else {
      for (uint32_t d = 0; d < D; ++d) {
        K[static_cast<size_t>(t) * D + d] = f32_to_f16(k[d]);
        V[static_cast<size_t>(t) * D + d] = f32_to_f16(v[d]);
      }
    }
  }
  const RecordLayout lay = c.layout();
  std::vector<uint8_t> rec(lay.bytes, 0xCD);
  SealWorkspace ws;
  SealOptions o;
  o.iters = c.iters;
  o.balance = c.balance;
  const Status st = seal_record(lay, o, K.data(), V.data(), D, rec.data(), ws, SealPath::reference);
  EXPECT_TRUE(st.ok()) << st.message();
  return rec;
}

const uint8_t* record_at(const LayerCache& lc, uint32_t g, uint32_t h) {
  return lc.body().data() + (static_cast<size_t>(g) * kHeads + h) * lc.layout().bytes;
}

void expect_policy_eq(const JournalPolicy& a, const JournalPolicy& b, uint32_t step_pos) {
  EXPECT_EQ(a.B, b.B) << "at pos0 " << step_pos;
  EXPECT_EQ(a.B_prev, b.B_prev) << "at pos0 " << step_pos;
  EXPECT_EQ(a.B_pending, b.B_pending) << "at pos0 " << step_pos;
  EXPECT_EQ(a.draining, b.draining) << "at pos0 " << step_pos;
}

// One sequence driven like an engine, with an independent policy mirror and the reference
// records of every group sealed so far ([layer][group * heads + head]).
struct Engine {
  CodecConfig cfg;
  const Rows* rows;
  SequenceCache cache;
  JournalPolicy mirror{};
  uint32_t commits = 0;
  bool check_records;
  std::vector<std::vector<std::vector<uint8_t>>> expected;

  Engine(const CodecConfig& c, const Rows& r, uint32_t n_ctx, bool check, SealPath path = SealPath::fast,
         int threads = 0)
      : cfg(c), rows(&r), cache(c, make_shape(n_ctx), SealOptions{}, path, threads), check_records(check),
        expected(kLayers) {
    mirror.init(c.sink, c.tail, c.tail_max, c.group, c.flush_chunk);
  }

  // Records of groups [g0, g1) against the reference seal of the staged rows.
  void check_new_records(uint32_t g0, uint32_t g1) {
    for (uint32_t l = 0; l < kLayers; ++l)
      for (uint32_t g = g0; g < g1; ++g)
        for (uint32_t h = 0; h < kHeads; ++h) {
          std::vector<uint8_t> ref = reference_record(cfg, *rows, l, g, h);
          EXPECT_EQ(0, std::memcmp(ref.data(), record_at(cache.layer(l), g, h), ref.size()))
              << cfg.name() << ": layer " << l << " group " << g << " head " << h;
          const size_t idx = static_cast<size_t>(g) * kHeads + h;
          if (expected[l].size() <= idx) expected[l].resize(idx + 1);
          expected[l][idx] = std::move(ref);
        }
  }

  void after_seal(uint32_t from, uint32_t to, uint32_t groups, uint32_t pos0) {
    EXPECT_EQ(groups, (to - from) / cfg.group) << "at pos0 " << pos0;
    if (to > from) ++commits;
    EXPECT_EQ(cache.commits(), commits);
    expect_policy_eq(cache.policy(), mirror, pos0);
    if (check_records && to > from) check_new_records((from - cfg.sink) / cfg.group, (to - cfg.sink) / cfg.group);
  }

  // Positions [n_stored, end) in ubatches of `ub`: begin_ubatch(pos0, n), then each position.
  void run(uint32_t end, uint32_t ub) {
    const uint32_t cap = cache.layer(0).cap();
    for (uint32_t p = cache.n_stored(); p < end;) {
      const uint32_t n = std::min(ub, end - p);
      const uint32_t from = mirror.B;
      const uint32_t to = mirror.begin_ubatch(p, n);
      mirror.commit();
      uint32_t groups = 12345;
      const Status st = cache.begin_ubatch(p, n, &groups);
      ASSERT_TRUE(st.ok()) << st.message();
      after_seal(from, to, groups, p);
      // The unsealed rows (and those a seal read this step) fit in the ring.
      EXPECT_LE(p + n, cache.policy().B_prev + cap) << "at pos0 " << p;
      for (uint32_t q = p; q < p + n; ++q) {
        const Status s = cache.store(q, rows->kp(q), rows->vp(q));
        ASSERT_TRUE(s.ok()) << s.message();
      }
      EXPECT_EQ(cache.n_stored(), p + n);
      p += n;
    }
  }

  void idle(uint32_t keep_recent) {
    const uint32_t from = mirror.B;
    const uint32_t to = mirror.idle(cache.n_stored(), keep_recent);
    mirror.commit();
    uint32_t groups = 12345;
    const Status st = cache.idle(keep_recent, &groups);
    ASSERT_TRUE(st.ok()) << st.message();
    after_seal(from, to > from ? to : from, groups, cache.n_stored());
  }
};

// The engine schedule of the tests: 64-token prefill ubatches, one short ubatch, more
// prefill, then one-token decode steps to `end`.
void run_schedule(Engine& e, uint32_t end) {
  ASSERT_NO_FATAL_FAILURE(e.run(704, kUbatch));
  ASSERT_NO_FATAL_FAILURE(e.run(741, kUbatch));  // 37 tokens
  ASSERT_NO_FATAL_FAILURE(e.run(1000, kUbatch));
  ASSERT_NO_FATAL_FAILURE(e.run(end, 1));
}

// Straightforward softmax attention in binary64 over given K/V rows [p][D].
std::vector<double> softmax_attention(const std::vector<float>& q, const float* K, const float* V, size_t stride,
                                      uint32_t end, uint32_t D, double scale) {
  std::vector<double> s(end);
  double m = -std::numeric_limits<double>::infinity();
  for (uint32_t p = 0; p < end; ++p) {
    double dot = 0.0;
    for (uint32_t d = 0; d < D; ++d) dot += static_cast<double>(q[d]) * K[p * stride + d];
    s[p] = dot * scale;
    m = std::max(m, s[p]);
  }
  double S = 0.0;
  std::vector<double> out(D, 0.0);
  for (uint32_t p = 0; p < end; ++p) {
    const double w = std::exp(s[p] - m);
    S += w;
    for (uint32_t d = 0; d < D; ++d) out[d] += w * V[p * stride + d];
  }
  for (auto& o : out) o /= S;
  return out;
}

double norm(const std::vector<double>& a) {
  double s = 0.0;
  for (double x : a) s += x * x;
  return std::sqrt(s);
}

template <typename A, typename B>
double dist(const A& a, const B& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = static_cast<double>(a[i]) - static_cast<double>(b[i]);
    s += d * d;
  }
  return std::sqrt(s);
}

// Rows of layer l, head h as resolve_row returns them: [N][D] for K and V.
void resolve_all(const CacheView& view, uint32_t h, std::vector<float>& K, std::vector<float>& V) {
  const uint32_t D = view.head_dim();
  K.assign(static_cast<size_t>(view.N) * D, 0.0f);
  V.assign(static_cast<size_t>(view.N) * D, 0.0f);
  for (uint32_t p = 0; p < view.N; ++p)
    resolve_row(view, p, h, K.data() + static_cast<size_t>(p) * D, V.data() + static_cast<size_t>(p) * D);
}

// A query that attends mostly near a source key: the unrotated key of `src` plus noise,
// rotated like K, scaled so the exact logits over [0, end) have standard deviation 2.5
// (as the §9.2 sanity test does).
std::vector<float> make_query(const Rows& r, uint32_t rot, uint32_t l, uint32_t h, uint32_t end, XorShift64& rng) {
  const uint32_t D = r.D;
  const uint32_t src = rng.next() % end;
  const float* kr = r.k_raw.data() + static_cast<size_t>(src) * r.per_pos + (static_cast<size_t>(l) * kHeads + h) * D;
  std::vector<float> q(D);
  for (uint32_t d = 0; d < D; ++d) q[d] = kr[d] + static_cast<float>(rng.gauss()) / 4096.0f;
  hadamard_blocks(q.data(), D, rot);
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  double s1 = 0.0, s2 = 0.0;
  for (uint32_t p = 0; p < end; ++p) {
    const float* k = r.kp(p, l, h);
    double dot = 0.0;
    for (uint32_t d = 0; d < D; ++d) dot += static_cast<double>(q[d]) * k[d];
    dot *= scale;
    s1 += dot;
    s2 += dot * dot;
  }
  const double var = s2 / end - (s1 / end) * (s1 / end);
  const float f = var > 0.0 ? static_cast<float>(2.5 / std::sqrt(var)) : 1.0f;
  for (auto& x : q) x *= f;
  return q;
}

// Relative RMS error of the body's V rows against the original rows, over every layer and
// head: ||V_resolved - V|| / ||V|| on positions [sink, B).
double body_value_error(const Engine& e, const Rows& rows) {
  const uint32_t D = rows.D, S = e.cfg.sink, B = e.cache.policy().B;
  double err = 0.0, ref = 0.0;
  std::vector<float> K, V;
  for (uint32_t l = 0; l < kLayers; ++l)
    for (uint32_t h = 0; h < kHeads; ++h) {
      resolve_all(e.cache.view(l), h, K, V);
      for (uint32_t p = S; p < B; ++p)
        for (uint32_t d = 0; d < D; ++d) {
          const double x = rows.vp(p, l, h)[d], y = V[static_cast<size_t>(p) * D + d];
          err += (y - x) * (y - x);
          ref += x * x;
        }
    }
  return std::sqrt(err / ref);
}

struct EngineCase {
  const char* name;
  uint32_t D, bk, bv;
  StagingType staging;
  SinkType sink;
  uint32_t flush_chunk;
  SealPath path;
};

class CacheEngine : public ::testing::TestWithParam<EngineCase> {};

constexpr uint32_t kEnd = 1300;   // seals at 640 (-> 384), 933 (-> 640), 1152 (-> 896); ring wraps at 896
constexpr uint32_t kNctx = 1400;  // 10 body groups allocated

}  // namespace

// Full engine run: policy mirror at every step, every record against the reference seal of
// the staged rows, sink entries, ring slots, untouched body groups, row resolution and the
// reference attention against an independent softmax over the resolved rows.
TEST_P(CacheEngine, MatchesReferenceStepByStep) {
  const EngineCase ec = GetParam();
  const CodecConfig cfg = make_cfg(ec.D, ec.bk, ec.bv, ec.staging, ec.sink, ec.flush_chunk);
  const Rows rows = make_rows(ec.D, cfg.rotation(), kEnd, 11 + ec.D + ec.bk * 3 + ec.bv);
  Engine e(cfg, rows, kNctx, true, ec.path, ec.path == SealPath::reference ? 1 : 0);
  ASSERT_TRUE(e.cache.status().ok()) << e.cache.status().message();
  const uint32_t D = ec.D, S = cfg.sink, G = cfg.group;
  const uint32_t cap = e.cache.layer(0).cap();
  EXPECT_EQ(cap, 768u);  // §8.3: 128 * ceil((512 + 128 + 2*64) / 128)
  EXPECT_EQ(e.cache.layer(0).n_groups(), 10u);
  EXPECT_EQ(e.cache.layer(0).body().size(), size_t{10} * kHeads * cfg.layout().bytes);

  ASSERT_NO_FATAL_FAILURE(run_schedule(e, kEnd));
  EXPECT_EQ(e.cache.policy().B, 896u);
  EXPECT_EQ(e.cache.n_stored(), kEnd);
  EXPECT_EQ(e.cache.commits(), ec.flush_chunk ? 6u : 3u);  // chunk 1 spreads two seals over two steps each

  const uint32_t rb = staging_row_bytes(cfg.staging, D);
  const uint32_t B = e.cache.policy().B;
  const RecordLayout lay = cfg.layout();
  for (uint32_t l = 0; l < kLayers; ++l) {
    const LayerCache& lc = e.cache.layer(l);
    // Sealed records are still the reference bytes (nothing overwrote them); groups never
    // sealed are still zero.
    for (uint32_t g = 0; g < lc.n_groups(); ++g)
      for (uint32_t h = 0; h < kHeads; ++h) {
        const uint8_t* rec = record_at(lc, g, h);
        if (S + (g + 1) * G <= B) {
          EXPECT_EQ(0, std::memcmp(e.expected[l][g * kHeads + h].data(), rec, lay.bytes)) << "layer " << l << " g " << g;
        } else {
          EXPECT_TRUE(std::all_of(rec, rec + lay.bytes, [](uint8_t b) { return b == 0; })) << "layer " << l << " g " << g;
        }
      }
    // Sink: fp16 of the input, or staging rows of the input for `inherit`.
    for (uint32_t p = 0; p < S; ++p)
      for (uint32_t h = 0; h < kHeads; ++h) {
        if (cfg.sink_type == SinkType::f16) {
          ASSERT_TRUE(lc.sink_staged().empty());
          const uint16_t* ent = lc.sink_f16().data() + (static_cast<size_t>(p) * kHeads + h) * 2 * D;
          for (uint32_t d = 0; d < D; ++d) {
            ASSERT_EQ(ent[d], f32_to_f16(rows.kp(p, l, h)[d])) << "p " << p << " h " << h << " d " << d;
            ASSERT_EQ(ent[D + d], f32_to_f16(rows.vp(p, l, h)[d])) << "p " << p << " h " << h << " d " << d;
          }
        } else {
          ASSERT_TRUE(lc.sink_f16().empty());
          const uint8_t* ent = lc.sink_staged().data() + (static_cast<size_t>(p) * kHeads + h) * 2 * rb;
          EXPECT_EQ(0, std::memcmp(ent, stage_row(cfg.staging, rows.kp(p, l, h), D).data(), rb)) << "p " << p;
          EXPECT_EQ(0, std::memcmp(ent + rb, stage_row(cfg.staging, rows.vp(p, l, h), D).data(), rb)) << "p " << p;
        }
      }
    // Ring: position p lives at slot (p - sink) % cap; the last `cap` positions are live.
    for (uint32_t p = std::max(S, kEnd - cap); p < kEnd; ++p)
      for (uint32_t h = 0; h < kHeads; ++h) {
        const uint8_t* ent = lc.ring().data() + (static_cast<size_t>((p - S) % cap) * kHeads + h) * 2 * rb;
        ASSERT_EQ(0, std::memcmp(ent, stage_row(cfg.staging, rows.kp(p, l, h), D).data(), rb)) << "p " << p;
        ASSERT_EQ(0, std::memcmp(ent + rb, stage_row(cfg.staging, rows.vp(p, l, h), D).data(), rb)) << "p " << p;
      }
  }

  // Sealing sees only the staged rows: with a lossy staging type the record sealed from the
  // original floats differs from what the cache holds.
  if (cfg.staging != StagingType::f16) {
    const std::vector<uint8_t> from_orig = reference_record(cfg, rows, 0, 0, 0, false);
    EXPECT_NE(0, std::memcmp(from_orig.data(), record_at(e.cache.layer(0), 0, 0), lay.bytes));
  }

  // resolve_row: sink -> fp16 (or staged) values, body -> record decode, ring -> staged decode.
  std::vector<float> k(D), v(D), ek(D), ev(D);
  for (uint32_t l = 0; l < kLayers; ++l) {
    const CacheView view = e.cache.view(l);
    EXPECT_EQ(view.B, B);
    EXPECT_EQ(view.N, kEnd);
    EXPECT_EQ(view.cap, cap);
    EXPECT_EQ(view.sink, S);
    for (uint32_t p = 0; p < kEnd; ++p)
      for (uint32_t h = 0; h < kHeads; ++h) {
        resolve_row(view, p, h, k.data(), v.data());
        if (p < S && cfg.sink_type == SinkType::f16) {
          for (uint32_t d = 0; d < D; ++d) {
            ek[d] = round_f16(rows.kp(p, l, h)[d]);
            ev[d] = round_f16(rows.vp(p, l, h)[d]);
          }
        } else if (p >= S && p < B) {
          const uint8_t* rec = record_at(e.cache.layer(l), (p - S) / G, h);
          decode_k_row(lay, rec, (p - S) % G, ek.data());
          decode_v_row(lay, rec, (p - S) % G, ev.data());
          // The body row is the record decode, not the staged row still in the ring.
          if (p + cap >= kEnd) {
            EXPECT_NE(k, decode_staged(cfg.staging, rows.kp(p, l, h), D)) << "p " << p;
          }
        } else {
          ek = decode_staged(cfg.staging, rows.kp(p, l, h), D);
          ev = decode_staged(cfg.staging, rows.vp(p, l, h), D);
        }
        ASSERT_EQ(k, ek) << "layer " << l << " p " << p << " h " << h;
        ASSERT_EQ(v, ev) << "layer " << l << " p " << p << " h " << h;
      }
  }

  // attention_ref against a binary64 softmax over the same resolved rows (§9.1 tolerance).
  XorShift64 rng(777);
  std::vector<float> K, V, out(D), kbuf(D), vbuf(D);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  for (uint32_t l = 0; l < kLayers; ++l)
    for (uint32_t h = 0; h < kHeads; ++h) {
      const CacheView view = e.cache.view(l);
      resolve_all(view, h, K, V);
      for (uint32_t qpos : {40u, 127u, 300u, 895u, 896u, 1299u, 2000u}) {
        const uint32_t end = std::min(kEnd, qpos + 1);
        const std::vector<float> q = make_query(rows, cfg.rotation(), l, h, end, rng);
        attention_ref(view, q.data(), h, qpos, scale, out.data(), kbuf.data(), vbuf.data());
        const std::vector<double> ref = softmax_attention(q, K.data(), V.data(), D, end, D, scale);
        ASSERT_GT(norm(ref), 0.0);
        EXPECT_LE(dist(out, ref), 1e-4 * norm(ref)) << "layer " << l << " head " << h << " qpos " << qpos;
      }
    }
}

INSTANTIATE_TEST_SUITE_P(
    Configs, CacheEngine,
    ::testing::Values(EngineCase{"D128_4_4_tq6_sinkf16", 128, 4, 4, StagingType::tq6_0, SinkType::f16, 0, SealPath::fast},
                      EngineCase{"D128_3_2_tq6_sinkf16", 128, 3, 2, StagingType::tq6_0, SinkType::f16, 0, SealPath::fast},
                      EngineCase{"D128_4_4_tq6_inherit_refpath", 128, 4, 4, StagingType::tq6_0, SinkType::inherit, 0,
                                 SealPath::reference},
                      EngineCase{"D128_3_2_tq6_inherit_chunk1", 128, 3, 2, StagingType::tq6_0, SinkType::inherit, 1,
                                 SealPath::fast},
                      EngineCase{"D128_4_4_f16_sinkf16", 128, 4, 4, StagingType::f16, SinkType::f16, 0, SealPath::fast},
                      EngineCase{"D128_3_2_f16_inherit", 128, 3, 2, StagingType::f16, SinkType::inherit, 0, SealPath::fast},
                      EngineCase{"D128_4_4_q8_sinkf16", 128, 4, 4, StagingType::q8_0, SinkType::f16, 0, SealPath::fast},
                      EngineCase{"D64_4_4_q8_inherit", 64, 4, 4, StagingType::q8_0, SinkType::inherit, 0, SealPath::fast},
                      EngineCase{"D64_3_2_q8_sinkf16", 64, 3, 2, StagingType::q8_0, SinkType::f16, 0, SealPath::fast}),
    [](const ::testing::TestParamInfo<EngineCase>& i) { return std::string(i.param.name); });

// Compressed attention against attention over the original float rows: the error is real
// (> 0), bounded for 4/4, and 4/4 is no worse than 3/2 on the same data and queries.
TEST(CacheAttention, CodecErrorAgainstOriginalRows) {
  const uint32_t D = 128;
  const CodecConfig c44 = make_cfg(D, 4, 4, StagingType::tq6_0, SinkType::f16);
  const CodecConfig c32 = make_cfg(D, 3, 2, StagingType::tq6_0, SinkType::f16);
  const Rows rows = make_rows(D, c44.rotation(), kEnd, 4242);
  Engine e44(c44, rows, kNctx, false), e32(c32, rows, kNctx, false);
  ASSERT_NO_FATAL_FAILURE(run_schedule(e44, kEnd));
  ASSERT_NO_FATAL_FAILURE(run_schedule(e32, kEnd));
  ASSERT_EQ(e44.cache.policy().B, 896u);

  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  std::vector<float> out44(D), out32(D), kbuf(D), vbuf(D);
  XorShift64 rng(99);
  double sum44 = 0.0, sum32 = 0.0, max44 = 0.0, max_sink = 0.0;
  int n_body = 0;
  for (uint32_t l = 0; l < kLayers; ++l)
    for (uint32_t h = 0; h < kHeads; ++h) {
      const CacheView v44 = e44.cache.view(l), v32 = e32.cache.view(l);
      // qpos in the sink, the body and the ring.
      for (uint32_t qpos : {20u, 127u, 260u, 600u, 895u, 960u, 1150u, 1299u})
        for (int rep = 0; rep < 6; ++rep) {
          const uint32_t end = qpos + 1;
          const std::vector<float> q = make_query(rows, c44.rotation(), l, h, end, rng);
          const std::vector<double> exact =
              softmax_attention(q, rows.kp(0, l, h), rows.vp(0, l, h), rows.per_pos, end, D, scale);
          attention_ref(v44, q.data(), h, qpos, scale, out44.data(), kbuf.data(), vbuf.data());
          attention_ref(v32, q.data(), h, qpos, scale, out32.data(), kbuf.data(), vbuf.data());
          const double err44 = dist(out44, exact) / norm(exact), err32 = dist(out32, exact) / norm(exact);
          EXPECT_GT(err44, 0.0) << "qpos " << qpos;
          if (qpos < c44.sink) {
            // Only fp16 rounding of the sink: tiny, and identical for both bit widths.
            EXPECT_EQ(out44, out32) << "qpos " << qpos;
            max_sink = std::max(max_sink, err44);
          } else {
            sum44 += err44;
            sum32 += err32;
            max44 = std::max(max44, err44);
            ++n_body;
          }
        }
    }
  const double mean44 = sum44 / n_body, mean32 = sum32 / n_body;
  // The tolerance comes from the codec's own error on these rows: attention output is a
  // convex mix of V rows, so its relative error should not exceed the body's relative V
  // error by much (the logits are perturbed too, hence 2x for the worst query).
  const double ev44 = body_value_error(e44, rows), ev32 = body_value_error(e32, rows);
  std::printf("body V error 4/4 %.4f 3/2 %.4f; attention error vs original rows: sink max %.3g, 4/4 mean %.4f "
              "max %.4f, 3/2 mean %.4f\n", ev44, ev32, max_sink, mean44, max44, mean32);
  // 4-bit affine rounding of a ~Gaussian 128-value row: step ~ 5.2 sigma / 15, RMS error
  // step / sqrt(12) ~ 0.1 sigma; 2 bits: ~0.5 sigma.
  EXPECT_GT(ev44, 0.03);
  EXPECT_LT(ev44, 0.15);
  EXPECT_LT(ev44, ev32);
  EXPECT_LT(max_sink, 2e-3);
  EXPECT_GT(mean44, 0.1 * ev44);  // the body and the 6-bit staging really are lossy
  EXPECT_LT(mean44, ev44);
  EXPECT_LT(mean44, 0.10);
  EXPECT_LT(max44, 2.0 * ev44);
  EXPECT_LT(mean44, mean32);
  EXPECT_LT(mean32, ev32);
}

// NaN/Inf and fp16 overflow are refused with typed errors naming side, token and channel,
// and leave the stored bytes as they were.
TEST(CacheStore, RefusesNonFiniteAndOverflowLeavingSlotUnchanged) {
  const uint32_t D = 128;
  const CodecConfig cfg = make_cfg(D, 4, 4, StagingType::tq6_0, SinkType::f16);
  const Rows rows = make_rows(D, cfg.rotation(), 200, 5);
  Engine e(cfg, rows, 1024, false);
  ASSERT_NO_FATAL_FAILURE(e.run(200, kUbatch));
  auto snapshot = [&]() {
    std::vector<std::vector<uint8_t>> s;
    for (uint32_t l = 0; l < kLayers; ++l) {
      const LayerCache& lc = e.cache.layer(l);
      const auto* sb = reinterpret_cast<const uint8_t*>(lc.sink_f16().data());
      s.emplace_back(sb, sb + lc.sink_f16().size() * 2);
      s.push_back(lc.ring());
      s.push_back(lc.body());
    }
    return s;
  };
  const auto before = snapshot();
  struct Bad {
    uint32_t p, l, h, d;
    bool on_k;
    float x;
    ErrorCode code;
  };
  const float inf = std::numeric_limits<float>::infinity();
  const Bad cases[] = {
      {30, 0, 1, 5, true, std::nanf(""), ErrorCode::non_finite_input},    // sink, K
      {150, 0, 0, 77, false, inf, ErrorCode::non_finite_input},          // ring, V
      {200, 0, 1, 127, true, -inf, ErrorCode::non_finite_input},         // new position
      {31, 0, 0, 9, true, 1e6f, ErrorCode::fp16_overflow},               // f16 sink
      {100, 0, 1, 64, false, 65520.0f, ErrorCode::fp16_overflow},        // rounds to fp16 inf (§1.1)
      {150, 0, 1, 0, false, 1e6f, ErrorCode::fp16_overflow},             // tq6_0 block norm
  };
  for (const Bad& b : cases) {
    std::vector<float> k(rows.kp(b.p % 200), rows.kp(b.p % 200) + rows.per_pos);
    std::vector<float> v(rows.vp(b.p % 200), rows.vp(b.p % 200) + rows.per_pos);
    (b.on_k ? k : v)[(b.l * kHeads + b.h) * D + b.d] = b.x;
    const Status st = e.cache.store(b.p, k.data(), v.data());
    EXPECT_EQ(st.code, b.code) << "p " << b.p << ": " << st.message();
    EXPECT_EQ(st.side, b.on_k ? Side::k : Side::v) << "p " << b.p;
    EXPECT_EQ(st.token, b.p);
    EXPECT_FALSE(st.message().empty());
    if (b.code == ErrorCode::non_finite_input || b.p < cfg.sink) {
      EXPECT_EQ(st.channel, b.h * D + b.d) << "p " << b.p;
    }
    EXPECT_EQ(e.cache.n_stored(), 200u) << "a refused store does not extend the sequence";
    EXPECT_TRUE(snapshot() == before) << "p " << b.p << " changed the cache";
  }
  // The largest value that still rounds to a finite half is accepted: 65504 = 0x7BFF.
  std::vector<float> k(rows.kp(100), rows.kp(100) + rows.per_pos);
  k[3] = 65519.0f;
  ASSERT_TRUE(e.cache.store(100, k.data(), rows.vp(100)).ok());
  EXPECT_EQ(e.cache.layer(0).sink_f16()[static_cast<size_t>(100) * kHeads * 2 * D + 3], 0x7BFFu);
}

// A refused store must not leave a position half written: a bad value in the last layer
// keeps the earlier layers' slot as it was too.
TEST(CacheStore, RefusedStoreLeavesEveryLayerUnchanged) {
  const uint32_t D = 128;
  const CodecConfig cfg = make_cfg(D, 4, 4, StagingType::tq6_0, SinkType::f16);
  const Rows rows = make_rows(D, cfg.rotation(), 200, 6);
  Engine e(cfg, rows, 1024, false);
  ASSERT_NO_FATAL_FAILURE(e.run(200, kUbatch));
  for (uint32_t p : {20u, 150u}) {  // sink and ring
    const std::vector<uint16_t> sink0 = e.cache.layer(0).sink_f16();
    const std::vector<uint8_t> ring0 = e.cache.layer(0).ring();
    // New contents for position p (another position's rows) with a NaN in layer 1's V.
    std::vector<float> k(rows.kp(p + 1), rows.kp(p + 1) + rows.per_pos);
    std::vector<float> v(rows.vp(p + 1), rows.vp(p + 1) + rows.per_pos);
    v[(1 * kHeads + 0) * D + 7] = std::nanf("");
    const Status st = e.cache.store(p, k.data(), v.data());
    EXPECT_EQ(st.code, ErrorCode::non_finite_input);
    EXPECT_EQ(st.side, Side::v);
    EXPECT_EQ(st.token, p);
    EXPECT_EQ(st.channel, 7u);
    EXPECT_TRUE(e.cache.layer(0).sink_f16() == sink0) << "layer 0 sink changed by a refused store at " << p;
    EXPECT_TRUE(e.cache.layer(0).ring() == ring0) << "layer 0 ring changed by a refused store at " << p;
  }
}

// An overflow in a ring row names the value, or the block whose scale overflows: for f16
// staging the exact channel, for q8_0 a channel inside the offending 32-value block.
TEST(CacheStore, RingOverflowNamesTheOffendingBlock) {
  const uint32_t D = 128;
  for (StagingType st : {StagingType::f16, StagingType::q8_0, StagingType::tq6_0}) {
    const CodecConfig cfg = make_cfg(D, 4, 4, st, SinkType::f16);
    const Rows rows = make_rows(D, cfg.rotation(), 200, 8);
    Engine e(cfg, rows, 1024, false);
    ASSERT_NO_FATAL_FAILURE(e.run(200, kUbatch));
    const std::vector<uint8_t> ring = e.cache.layer(0).ring();
    std::vector<float> k(rows.kp(150), rows.kp(150) + rows.per_pos);
    const uint32_t h = 1, d = 100;
    k[h * D + d] = 1e6f;
    const Status s = e.cache.store(150, k.data(), rows.vp(150));
    EXPECT_EQ(s.code, ErrorCode::fp16_overflow) << staging_name(st);
    EXPECT_EQ(s.side, Side::k);
    EXPECT_EQ(s.token, 150u);
    const uint32_t bv = staging_block_values(st);
    const uint32_t block0 = h * D + (d / bv) * bv;
    EXPECT_GE(s.channel, block0) << staging_name(st) << ": " << s.message();
    EXPECT_LT(s.channel, block0 + bv) << staging_name(st) << ": " << s.message();
    EXPECT_TRUE(e.cache.layer(0).ring() == ring) << staging_name(st);
  }
}

// Whatever store() accepts must be sealable later: the seal input is the staged row read
// back and rounded to fp16 (§5.1), so a q8_0 row whose decoded values reach 65520 must be
// refused at store time rather than wedge a later begin_ubatch.
TEST(CacheStore, AcceptedRowsCanBeSealed) {
  const uint32_t D = 128;
  const CodecConfig cfg = make_cfg(D, 4, 4, StagingType::q8_0, SinkType::f16);
  const Rows rows = make_rows(D, cfg.rotation(), 700, 13);
  Engine e(cfg, rows, 1024, false);
  ASSERT_NO_FATAL_FAILURE(e.run(200, kUbatch));
  std::vector<float> k(rows.kp(150), rows.kp(150) + rows.per_pos);
  k[100] = 1e5f;  // finite in binary32, infinite in fp16; q8_0 scale 1e5/127 is a finite half
  const Status st = e.cache.store(150, k.data(), rows.vp(150));
  if (!st.ok()) {
    EXPECT_EQ(st.code, ErrorCode::fp16_overflow) << st.message();
    return;
  }
  // Accepted: then the seal of [128, 384) at pos0 640 must go through.
  for (uint32_t p = 200; p < 640; p += kUbatch) {
    const uint32_t n = std::min(kUbatch, 640 - p);
    ASSERT_TRUE(e.cache.begin_ubatch(p, n).ok());
    for (uint32_t q = p; q < p + n; ++q) ASSERT_TRUE(e.cache.store(q, rows.kp(q), rows.vp(q)).ok());
  }
  const Status seal = e.cache.begin_ubatch(640, kUbatch);
  EXPECT_TRUE(seal.ok()) << "store accepted position 150 but sealing it fails: " << seal.message();
}

TEST(CacheConfig, UnsupportedConfigAndUbatchPastTheEnd) {
  const Rows rows = make_rows(128, 128, 80, 9);
  {
    CodecConfig bad = make_cfg(96, 4, 4, StagingType::f16, SinkType::f16);  // not a power of two
    SequenceCache c(bad, make_shape(1024));
    EXPECT_EQ(c.status().code, ErrorCode::unsupported);
    EXPECT_FALSE(c.status().detail.empty());
    EXPECT_EQ(c.begin_ubatch(0, 64).code, ErrorCode::unsupported);
    EXPECT_EQ(c.store(0, rows.kp(0), rows.vp(0)).code, ErrorCode::unsupported);
    EXPECT_EQ(c.idle(0).code, ErrorCode::unsupported);
    EXPECT_EQ(c.n_stored(), 0u);
  }
  {
    CodecConfig bad = make_cfg(64, 4, 4, StagingType::tq6_0, SinkType::f16);  // tq6_0 needs D % 128 == 0
    EXPECT_EQ(SequenceCache(bad, make_shape(1024)).status().code, ErrorCode::unsupported);
    bad = make_cfg(128, 4, 4, StagingType::tq6_0, SinkType::f16);
    bad.sink = 100;  // sink % 64 != 0
    EXPECT_EQ(SequenceCache(bad, make_shape(1024)).status().code, ErrorCode::unsupported);
    bad = make_cfg(128, 3, 4, StagingType::tq6_0, SinkType::f16);
    bad.body = Body::trellis;  // a trellis V side may not be wider than K
    EXPECT_EQ(SequenceCache(bad, make_shape(1024)).status().code, ErrorCode::unsupported);
  }
  {
    const CodecConfig cfg = make_cfg(128, 4, 4, StagingType::tq6_0, SinkType::f16);
    SequenceCache c(cfg, make_shape(1024));
    ASSERT_TRUE(c.status().ok());
    ASSERT_TRUE(c.begin_ubatch(0, 64).ok());
    for (uint32_t p = 0; p < 64; ++p) ASSERT_TRUE(c.store(p, rows.kp(p), rows.vp(p)).ok());
    const JournalPolicy before = c.policy();
    EXPECT_FALSE(c.begin_ubatch(65, 1).ok());  // position 64 was never stored
    EXPECT_FALSE(c.begin_ubatch(1000, 64).ok());
    expect_policy_eq(c.policy(), before, 65);
    EXPECT_TRUE(c.begin_ubatch(64, 16).ok());  // continuing at the stored end is fine
    EXPECT_TRUE(c.begin_ubatch(10, 16).ok());  // re-prefill inside the stored range too
  }
}

// The cache holds [0, n_ctx) in ubatches of at most n_ubatch (issue 40, item 1): past either
// it refuses, changing nothing, where it once sealed records past the body (64-row ubatches
// at sink 64, tail 0, n_ctx 128: the one at 320 wrote 17,920 bytes past it).
TEST(CacheBounds, GrowthPastNctxOrNubatchIsRefused) {
  const Rows rows = make_rows(128, 128, 400, 21);
  CodecConfig cfg = make_cfg(128, 4, 4, StagingType::tq6_0, SinkType::f16);
  cfg.sink = 64;
  cfg.tail = 0;
  cfg.tail_max = 0;
  SequenceCache c(cfg, make_shape(128));
  ASSERT_TRUE(c.status().ok()) << c.status().message();
  for (uint32_t p0 = 0; p0 < 128; p0 += kUbatch) {
    ASSERT_TRUE(c.begin_ubatch(p0, kUbatch).ok());
    ASSERT_TRUE(c.store_ubatch(p0, kUbatch, rows.kp(p0), rows.vp(p0)).ok());
  }
  const std::vector<uint8_t> body = c.layer(0).body();
  const JournalPolicy before = c.policy();
  for (uint32_t p0 : {128u, 192u, 256u, 320u}) {
    const Status st = c.begin_ubatch(128, kUbatch);
    EXPECT_EQ(st.code, ErrorCode::unsupported) << "at " << p0;
    EXPECT_NE(st.detail.find("n_ctx 128"), std::string::npos) << st.message();
    EXPECT_FALSE(c.store_ubatch(128, kUbatch, rows.kp(128), rows.vp(128)).ok());
    EXPECT_FALSE(c.store(128, rows.kp(128), rows.vp(128)).ok());
  }
  EXPECT_FALSE(c.begin_ubatch(100, 29).ok());  // ends at 129
  EXPECT_EQ(c.n_stored(), 128u);
  expect_policy_eq(c.policy(), before, 128);
  EXPECT_TRUE(c.layer(0).body() == body);
  EXPECT_TRUE(c.idle(0).ok());  // sealing what is stored still fits the body

  // A ubatch larger than n_ubatch would overwrite ring rows not yet sealed.
  SequenceCache d(cfg, make_shape(1000));
  ASSERT_TRUE(d.status().ok());
  const Status big = d.begin_ubatch(0, kUbatch + 1);
  EXPECT_EQ(big.code, ErrorCode::unsupported);
  EXPECT_NE(big.detail.find("n_ubatch"), std::string::npos) << big.message();
  EXPECT_FALSE(d.store_ubatch(0, kUbatch + 1, rows.kp(0), rows.vp(0)).ok());
  EXPECT_EQ(d.n_stored(), 0u);

  // The layer cache itself: no store at n_ctx, no seal past its body.
  LayerCache lc(cfg, kHeads, 128, 256);
  EXPECT_TRUE(lc.store(127, rows.kp(127), rows.vp(127)).ok());
  EXPECT_EQ(lc.store(128, rows.kp(128), rows.vp(128)).code, ErrorCode::unsupported);
  EXPECT_TRUE(lc.check_seal_range(64, 192).ok());
  EXPECT_EQ(lc.check_seal_range(192, 320).code, ErrorCode::unsupported);
  EXPECT_EQ(lc.seal(256, 384, SealOptions{}, SealPath::fast, 1).code, ErrorCode::unsupported);
}

// Shapes with no layer, head or position are refused at construction (they once reached
// memcpy with null buffers), as is an allocation whose size overflows 64 bits.
TEST(CacheBounds, EmptyAndOverflowingShapesAreRefused) {
  const CodecConfig cfg = make_cfg(128, 4, 4, StagingType::tq6_0, SinkType::f16);
  for (int which = 0; which < 3; ++which) {
    CacheShape s = make_shape(1024);
    (which == 0 ? s.n_layers : which == 1 ? s.n_head_kv : s.n_ctx) = 0;
    SequenceCache c(cfg, s);
    EXPECT_EQ(c.status().code, ErrorCode::unsupported) << which;
    EXPECT_NE(c.status().detail.find(which == 0 ? "n_layers" : which == 1 ? "n_head_kv" : "n_ctx"), std::string::npos)
        << c.status().message();
  }
  CacheShape huge = make_shape(0xFFFFFFFFu);
  huge.n_layers = 0xFFFFFFFFu;
  huge.n_head_kv = 0xFFFFFFFFu;
  EXPECT_EQ(cache_allocation_bytes(cfg, huge), UINT64_MAX);
  EXPECT_EQ(SequenceCache(cfg, huge).status().code, ErrorCode::unsupported);
  // The count is the allocation: one layer's sink, ring and body.
  CacheShape one = make_shape(1024);
  one.n_layers = 1;
  SequenceCache c(cfg, one);
  ASSERT_TRUE(c.status().ok());
  const LayerCache& l = c.layer(0);
  EXPECT_EQ(cache_allocation_bytes(cfg, one),
            l.sink_f16().size() * 2 + l.sink_staged().size() + l.ring().size() + l.body().size());
}

// Bits per value by region against hand-computed numbers, and the note's formula.
TEST(CacheAccounting, BitsPerValueByRegion) {
  // Record bytes G*D*(bk+bv)/8 + 2*(3D+3G), bits 8*bytes/(2*D*G) (§4.2).
  CodecConfig c = make_cfg(256, 4, 4, StagingType::tq6_0, SinkType::f16);
  EXPECT_EQ(c.layout().bytes, 35072u);
  EXPECT_DOUBLE_EQ(record_bits_per_value(c.layout()), 4.28125);
  EXPECT_DOUBLE_EQ(record_bits_per_value(make_layout(256, 128, 3, 2, Body::scalar)), 2.78125);
  EXPECT_DOUBLE_EQ(record_bits_per_value(make_layout(128, 128, 4, 4, Body::scalar)), 4.375);  // 17920 B
  EXPECT_DOUBLE_EQ(staging_bits_per_value(StagingType::tq6_0, 256), 6.125);  // 2 * 98 B
  EXPECT_DOUBLE_EQ(staging_bits_per_value(StagingType::tq6_0, 128), 6.125);
  EXPECT_DOUBLE_EQ(staging_bits_per_value(StagingType::f16, 128), 16.0);
  EXPECT_DOUBLE_EQ(staging_bits_per_value(StagingType::q8_0, 64), 8.5);  // 34 B per 32 values

  // N = 100 inside the sink: 100 fp16 entries of 4*256 bytes, nothing else.
  RegionBits r = occupied_bits(c, 128, 100);
  EXPECT_EQ(r.sink_bytes, 102400u);
  EXPECT_EQ(r.values, 51200u);
  EXPECT_EQ(r.body_bytes + r.ring_bytes, 0u);
  EXPECT_DOUBLE_EQ(r.sink_density(), 16.0);
  EXPECT_DOUBLE_EQ(r.total_bits(), 16.0);

  // B = 128, N = 300: full sink (131072 B) + 172 ring rows of 2*196 B.
  r = occupied_bits(c, 128, 300);
  EXPECT_EQ(r.sink_bytes, 131072u);
  EXPECT_EQ(r.ring_bytes, 67424u);
  EXPECT_EQ(r.ring_values, 172u * 512u);
  EXPECT_DOUBLE_EQ(r.ring_density(), 6.125);
  EXPECT_NEAR(r.total_bits(), 8.0 * 198496 / 153600, 1e-12);  // 10.3383...

  // B = 640, N = 1000: 4 records, 360 ring rows.
  r = occupied_bits(c, 640, 1000);
  EXPECT_EQ(r.body_bytes, 4u * 35072u);
  EXPECT_EQ(r.body_values, 4u * 128u * 512u);
  EXPECT_EQ(r.ring_bytes, 360u * 392u);
  EXPECT_EQ(r.values, 512000u);
  EXPECT_DOUBLE_EQ(r.sink_density(), 16.0);
  EXPECT_DOUBLE_EQ(r.body_density(), 4.28125);
  EXPECT_DOUBLE_EQ(r.ring_density(), 6.125);
  EXPECT_NEAR(r.sink_share(), 2.048, 1e-12);
  EXPECT_NEAR(r.body_share(), 2.192, 1e-12);
  EXPECT_NEAR(r.ring_share(), 2.205, 1e-12);
  EXPECT_NEAR(r.total_bits(), 6.445, 1e-12);
  EXPECT_NEAR(r.sink_share() + r.body_share() + r.ring_share(), r.total_bits(), 1e-12);
  // The note counts a staged copy of the sink beside the fp16 one: +128*6.125/N.
  EXPECT_NEAR(note_effective_bits(1000, 128, 360, 4.28125, 6.125), 6.445 + 128 * 6.125 / 1000, 1e-12);

  // Allocated for n_ctx 1400 (10 groups) and cap 768, charged to N = 1000.
  const RegionBits a = allocated_bits(c, 1400, 768, 640, 1000);
  EXPECT_EQ(a.sink_bytes, 131072u);
  EXPECT_EQ(a.body_bytes, 10u * 35072u);
  EXPECT_EQ(a.ring_bytes, 768u * 392u);
  EXPECT_EQ(a.values, 512000u);
  EXPECT_DOUBLE_EQ(a.body_density(), 10.703125);  // 10 records over 4 groups' values
  EXPECT_NEAR(a.total_bits(), 12.232, 1e-12);
  EXPECT_NEAR(a.sink_share() + a.body_share() + a.ring_share(), a.total_bits(), 1e-12);
  EXPECT_GE(a.total_bits(), r.total_bits());

  // Inherit sink: the sink costs the staging density.
  c.sink_type = SinkType::inherit;
  r = occupied_bits(c, 128, 128);
  EXPECT_DOUBLE_EQ(r.sink_density(), 6.125);
  EXPECT_DOUBLE_EQ(r.total_bits(), 6.125);

  // The note's formula at N = 16384: [(N-128-t)*4.28125 + t*6.125 + 128*(6.125+16)]/N.
  EXPECT_DOUBLE_EQ(note_effective_bits(16384, 128, 4096, 4.28125, 6.125), 79980.0 / 16384);  // 4.8816
  EXPECT_DOUBLE_EQ(note_effective_bits(16384, 128, 8192, 4.28125, 6.125), 87532.0 / 16384);  // 5.3425
  EXPECT_DOUBLE_EQ(note_effective_bits(0, 128, 0, 4.28125, 6.125), 0.0);
}

// allocated_bits matches the buffers a real cache holds, and occupied_bits its regions.
TEST(CacheAccounting, AllocatedMatchesCacheBuffers) {
  for (SinkType sink : {SinkType::f16, SinkType::inherit}) {
    const CodecConfig cfg = make_cfg(128, 4, 4, StagingType::tq6_0, sink);
    const Rows rows = make_rows(128, 128, 700, 10);
    Engine e(cfg, rows, kNctx, false);
    ASSERT_NO_FATAL_FAILURE(e.run(700, kUbatch));
    const uint32_t B = e.cache.policy().B, N = e.cache.n_stored();
    ASSERT_EQ(B, 384u);
    const LayerCache& lc = e.cache.layer(1);
    const RegionBits a = allocated_bits(cfg, kNctx, lc.cap(), B, N);
    EXPECT_EQ(a.sink_bytes * kHeads, lc.sink_f16().size() * 2 + lc.sink_staged().size());
    EXPECT_EQ(a.body_bytes * kHeads, lc.body().size());
    EXPECT_EQ(a.ring_bytes * kHeads, lc.ring().size());
    const RegionBits o = occupied_bits(cfg, B, N);
    EXPECT_EQ(o.body_bytes, 2u * cfg.layout().bytes);   // groups [128, 384)
    EXPECT_EQ(o.ring_values, (N - B) * 2ull * 128);     // [B, N) in the ring
    EXPECT_EQ(o.sink_values + o.body_values + o.ring_values, o.values);
  }
}

// Idle steps seal back per the policy (keep_recent clamps), and the records they write are
// the reference seal of the staged rows.
TEST(CacheIdle, SealsBackPerPolicyWithReferenceRecords) {
  const uint32_t D = 128;
  const CodecConfig cfg = make_cfg(D, 4, 4, StagingType::tq6_0, SinkType::f16);
  const Rows rows = make_rows(D, cfg.rotation(), 1100, 12);
  Engine e(cfg, rows, kNctx, true);
  ASSERT_NO_FATAL_FAILURE(e.run(880, kUbatch));
  ASSERT_EQ(e.cache.policy().B, 384u);
  // (end 880, tail 256): full target 512; keep_recent 600 -> 256 and 400 -> 384 seal nothing.
  ASSERT_NO_FATAL_FAILURE(e.idle(600));
  EXPECT_EQ(e.cache.policy().B, 384u);
  ASSERT_NO_FATAL_FAILURE(e.idle(400));
  EXPECT_EQ(e.cache.policy().B, 384u);
  ASSERT_NO_FATAL_FAILURE(e.idle(300));  // keep_from 580 -> 512
  EXPECT_EQ(e.cache.policy().B, 512u);
  ASSERT_NO_FATAL_FAILURE(e.idle(0));  // already at the full target
  EXPECT_EQ(e.cache.policy().B, 512u);
  // More requests (last ubatch at 1008: 1008 - 512 < tail_max, no seal), then a 1.x-style
  // idle: 128 + 128*floor((1060 - 384)/128) = 768.
  ASSERT_NO_FATAL_FAILURE(e.run(1060, kUbatch));
  EXPECT_EQ(e.cache.policy().B, 512u);
  ASSERT_NO_FATAL_FAILURE(e.idle(0));
  EXPECT_EQ(e.cache.policy().B, 768u);
  EXPECT_EQ(e.commits, 3u);
  // Rows sealed by idle now resolve from the body.
  const CacheView view = e.cache.view(0);
  std::vector<float> k(D), v(D), ek(D), ev(D);
  resolve_row(view, 700, 1, k.data(), v.data());
  const uint8_t* rec = record_at(e.cache.layer(0), (700 - 128) / 128, 1);
  decode_k_row(cfg.layout(), rec, (700 - 128) % 128, ek.data());
  decode_v_row(cfg.layout(), rec, (700 - 128) % 128, ev.data());
  EXPECT_EQ(k, ek);
  EXPECT_EQ(v, ev);

  // A fixed tail (tail_max 0) already seals at every ubatch; idle never acts.
  CodecConfig fixed = cfg;
  fixed.tail_max = 0;
  Engine f(fixed, rows, kNctx, false);
  ASSERT_NO_FATAL_FAILURE(f.run(1000, kUbatch));
  const uint32_t B = f.cache.policy().B;
  EXPECT_EQ(B, 640u);  // last ubatch at 960: 128 + 128*floor((960-256-128)/128)
  uint32_t groups = 99;
  ASSERT_TRUE(f.cache.idle(0, &groups).ok());
  EXPECT_EQ(groups, 0u);
  EXPECT_EQ(f.cache.policy().B, B);
}
