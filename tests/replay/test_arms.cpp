// Cache arms of sjkv-replay: spec parsing, the ggml-style quantizers on hand-worked blocks,
// fused attention against a plain double-precision reference over each arm's own decoded
// K/V, the SJ arms against the codec's attention_ref, windows, ubatch splits, threads and
// the bits accounting.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "../../replay/src/attend_tile.h"
#include "../../replay/src/kv_arms_formats.h"
#include "sjkv/cache.h"
#include "sjkv/cache_view.h"
#include "sjkv/config.h"
#include "sjkv/fp16.h"
#include "sjkv/hadamard.h"
#include "sjkv/io/codebook.h"
#include "sjkv/io/table_set.h"
#include "sjkv/policy.h"
#include "sjkv/replay/arms.h"
#include "sjkv/replay/kv.h"
#include "sjkv/replay/model.h"
#include "sjkv/replay/run.h"
#include "sjkv/testgen.h"

namespace sjkv {
namespace replay {
namespace {

using fmt::RowFormat;

// ---------------------------------------------------------------- realistic inputs
// K: per-channel factors with 3% outlier channels (24..31x, as testgen's fill_group), a
// per-token factor, and RoPE applied at the token's position (pairs (i, i + D/2) turned by
// pos * 10000^(-2i/D)), so K has the positional structure attention sees. V: the same
// without RoPE. Q: the same generator, RoPE'd. Fixed seeds.
struct Data {
  uint32_t D, H, Hkv;
  std::vector<float> k, v, q;  // [N][Hkv][D], [N][Hkv][D], [N][H][D]
};

void rope(float* x, uint32_t D, uint32_t pos) {
  for (uint32_t i = 0; i < D / 2; ++i) {
    const double th = pos * std::pow(10000.0, -2.0 * i / D);
    const double c = std::cos(th), s = std::sin(th);
    const double a = x[i], b = x[i + D / 2];
    x[i] = static_cast<float>(a * c - b * s);
    x[i + D / 2] = static_cast<float>(a * s + b * c);
  }
}

Data make_data(uint32_t N, uint32_t D, uint32_t H, uint32_t Hkv, uint64_t seed) {
  Data d{D, H, Hkv, {}, {}, {}};
  XorShift64 rng(0x9E3779B97F4A7C15ull ^ seed);
  auto factors = [&](uint32_t n) {
    std::vector<int32_t> f(n);
    for (auto& c : f) c = (rng.next() % 100u) < 3u ? 24 + static_cast<int32_t>(rng.next() & 7u) : 1 + static_cast<int32_t>(rng.next() & 3u);
    return f;
  };
  std::vector<std::vector<int32_t>> kf, vf, qf;
  for (uint32_t h = 0; h < Hkv; ++h) {
    kf.push_back(factors(D));
    vf.push_back(factors(D));
  }
  for (uint32_t h = 0; h < H; ++h) qf.push_back(factors(D));
  d.k.resize(static_cast<size_t>(N) * Hkv * D);
  d.v.resize(d.k.size());
  d.q.resize(static_cast<size_t>(N) * H * D);
  for (uint32_t p = 0; p < N; ++p) {
    for (uint32_t h = 0; h < Hkv; ++h) {
      float* kr = &d.k[(static_cast<size_t>(p) * Hkv + h) * D];
      float* vr = &d.v[(static_cast<size_t>(p) * Hkv + h) * D];
      const int32_t tk = 1 + static_cast<int32_t>(rng.next() & 3u), tv = 1 + static_cast<int32_t>(rng.next() & 3u);
      for (uint32_t c = 0; c < D; ++c) kr[c] = rng.value(kf[h][c], tk) * 0.25f;
      for (uint32_t c = 0; c < D; ++c) vr[c] = rng.value(vf[h][c], tv) * 0.25f;
      rope(kr, D, p);
    }
    for (uint32_t h = 0; h < H; ++h) {
      float* qr = &d.q[(static_cast<size_t>(p) * H + h) * D];
      const int32_t tq = 1 + static_cast<int32_t>(rng.next() & 3u);
      for (uint32_t c = 0; c < D; ++c) qr[c] = rng.value(qf[h][c], tq) * 0.25f;
      rope(qr, D, p);
    }
  }
  return d;
}

LayerShape shape(uint32_t D, uint32_t H, uint32_t Hkv, uint32_t n_ctx, uint32_t window = 0, uint32_t layer = 3) {
  LayerShape s;
  s.layer = layer;
  s.full_attention = window == 0;
  s.window = window;
  s.n_head = H;
  s.n_head_kv = Hkv;
  s.head_dim = D;
  s.n_ctx = n_ctx;
  s.n_ubatch = 64;
  return s;
}

// Plain attention in double over the arm's decoded rows (model basis), causal, windowed, with
// the shape's learned sink logits in the softmax.
void naive_attend(const InspectableKv& kv, const LayerShape& s, uint32_t pos0, uint32_t n, const float* q, float scale,
                  std::vector<double>& out) {
  const uint32_t D = s.head_dim, H = s.n_head, gq = H / s.n_head_kv;
  out.assign(static_cast<size_t>(n) * H * D, 0.0);
  std::vector<float> k(D), v(D);
  for (uint32_t h = 0; h < s.n_head_kv; ++h) {
    const uint32_t end = pos0 + n;
    std::vector<float> K(static_cast<size_t>(end) * D), V(static_cast<size_t>(end) * D);
    for (uint32_t p = 0; p < end; ++p) kv.decode_row(h, p, &K[static_cast<size_t>(p) * D], &V[static_cast<size_t>(p) * D]);
    for (uint32_t i = 0; i < n; ++i)
      for (uint32_t g = 0; g < gq; ++g) {
        const uint32_t head = h * gq + g, qpos = pos0 + i;
        const uint32_t lo = s.window && qpos + 1 > s.window ? qpos + 1 - s.window : 0;
        const float* qv = q + (static_cast<size_t>(i) * H + head) * D;
        std::vector<double> lg(qpos + 1 - lo);
        double m = -INFINITY;
        for (uint32_t p = lo; p <= qpos; ++p) {
          double dot = 0.0;
          for (uint32_t d = 0; d < D; ++d) dot += static_cast<double>(qv[d]) * K[static_cast<size_t>(p) * D + d];
          lg[p - lo] = dot * scale;
          m = std::max(m, lg[p - lo]);
        }
        const bool sink = !s.sink_logits.empty();
        if (sink) m = std::max(m, static_cast<double>(s.sink_logits[head]));
        double S = sink ? std::exp(s.sink_logits[head] - m) : 0.0;
        double* o = &out[(static_cast<size_t>(i) * H + head) * D];
        for (uint32_t p = lo; p <= qpos; ++p) {
          const double w = std::exp(lg[p - lo] - m);
          S += w;
          for (uint32_t d = 0; d < D; ++d) o[d] += w * V[static_cast<size_t>(p) * D + d];
        }
        for (uint32_t d = 0; d < D; ++d) o[d] /= S;
      }
  }
}

InspectableKv* inspect(const std::unique_ptr<LayerKv>& l) {
  auto* p = dynamic_cast<InspectableKv*>(l.get());
  EXPECT_NE(p, nullptr);
  return p;
}

// Runs `spec` over N positions in ubatches of `ub`; at the ubatches listed in `check`
// attends and compares to the naive reference (and, for codec arms, attention_ref).
// Tolerance: |fused - ref| <= 2e-5 * max|V| + 1e-6: the fused pass is binary32 with an
// online softmax, the reference double; both read the same decoded values, so only
// rounding separates them (observed <= 5e-6 absolute at max|V| = 14, i.e. ~3e-7 relative).
struct RunResult {
  double max_err = 0, max_err_codec = 0, vmax = 0;
  uint32_t checks = 0;
  std::unique_ptr<LayerKv> layer;
};

RunResult run_arm(const std::string& spec, const Data& d, uint32_t N, uint32_t ub, const std::vector<uint32_t>& check,
                  uint32_t window = 0, const std::vector<float>& sinks = {}) {
  RunResult r;
  LayerShape s = shape(d.D, d.H, d.Hkv, N, window);
  s.sink_logits = sinks;
  auto arm = make_arm(spec);
  r.layer = arm->make_layer(s);
  InspectableKv* kv = inspect(r.layer);
  const float scale = 1.0f / std::sqrt(static_cast<float>(d.D));
  for (const float x : d.v) r.vmax = std::max(r.vmax, static_cast<double>(std::fabs(x)));
  std::vector<float> out;
  std::vector<double> ref;
  for (uint32_t pos0 = 0, u = 0; pos0 < N; pos0 += ub, ++u) {
    const uint32_t n = std::min(ub, N - pos0);
    r.layer->begin_ubatch(pos0, n);
    r.layer->store(pos0, n, &d.k[static_cast<size_t>(pos0) * d.Hkv * d.D], &d.v[static_cast<size_t>(pos0) * d.Hkv * d.D]);
    if (std::find(check.begin(), check.end(), u) == check.end()) continue;
    const float* q = &d.q[static_cast<size_t>(pos0) * d.H * d.D];
    out.assign(static_cast<size_t>(n) * d.H * d.D, 0.0f);
    r.layer->attend(pos0, n, q, scale, out.data());
    naive_attend(*kv, s, pos0, n, q, scale, ref);
    for (size_t i = 0; i < out.size(); ++i) r.max_err = std::max(r.max_err, std::fabs(out[i] - ref[i]));
    ++r.checks;
    if (const SequenceCache* c = sinks.empty() ? kv->codec_cache() : nullptr) {
      // attention_ref (which has no learned sinks) works in the rotated basis: rotate q, rotate its output back.
      const CacheView view = c->view(0);
      const uint32_t rot = kv->k_rotation(), gq = d.H / d.Hkv;
      std::vector<float> qr(d.D), o(d.D), kb(d.D), vb(d.D);
      for (uint32_t i = 0; i < n; i += 7)
        for (uint32_t head = 0; head < d.H; ++head) {
          std::copy(q + (static_cast<size_t>(i) * d.H + head) * d.D, q + (static_cast<size_t>(i) * d.H + head + 1) * d.D, qr.begin());
          hadamard_blocks(qr.data(), d.D, rot);
          attention_ref(view, qr.data(), head / gq, pos0 + i, scale, o.data(), kb.data(), vb.data());
          hadamard_blocks(o.data(), d.D, rot);
          for (uint32_t x = 0; x < d.D; ++x)
            r.max_err_codec = std::max(r.max_err_codec, static_cast<double>(std::fabs(o[x] - out[(static_cast<size_t>(i) * d.H + head) * d.D + x])));
        }
    }
  }
  return r;
}

// ---------------------------------------------------------------- specs

TEST(Arms, EverySpecRoundTrips) {
  for (const auto& spec : arm_examples()) {
    SCOPED_TRACE(spec);
    std::unique_ptr<KvArm> arm;
    ASSERT_NO_THROW(arm = make_arm(spec));
    EXPECT_EQ(arm->spec(), spec);
    auto layer = arm->make_layer(shape(128, 4, 2, 2048));
    ASSERT_NE(inspect(layer), nullptr);
    // A sliding layer of a compressed arm is fp16; the plain-type arms keep their type.
    auto slide = arm->make_layer(shape(128, 4, 2, 2048, 512, 0));
    const std::string sname = inspect(slide)->storage_name();
    if (spec == "f32" || spec == "bf16" || spec.find(":swa=same") != std::string::npos) EXPECT_EQ(sname, spec);
    else EXPECT_EQ(sname, "f16");
  }
  EXPECT_EQ(make_arm("sj:3/2t:axis=channel")->make_layer(shape(128, 4, 2, 2048))->bits().occupied, 0.0);
}

TEST(Arms, InvalidSpecsAreRejectedWithAReason) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "empty"},
      {"q4_2", "unknown arm"},
      {"f16:rot", "takes no ':rot'"},
      {"q4_0:rot:rot", "option 'rot' is given twice"},
      {"q4_0:fast", "unknown option"},
      {"f16:swa=same", "already stores sliding layers"},
      {"sj:4/4:swa=same", "swa=same: the sliding layers take a ggml block format"},  // same: row arms only
      {"tq5_0:rot", "takes no ':rot'"},
      {"sj", "missing widths"},
      {"sj:5/5", "bits"},
      {"sj:4/x", "widths"},
      {"sj:4/4:G=100", "G"},
      {"sj:4/4:tail=100", "tail"},
      {"sj:4/4:axis=channel", "trellis body"},
      {"sj:3/2t:axis=diagonal", "axis must be"},
      {"sj:4/4:staging=q4_0", "staging must be"},
      {"sj:4/4:tier=middle", "tier must be"},
      {"sj:4/4:bogus=1", "unknown option"},
      {"sj:4/4:sink=-1", "not a non-negative integer"},
      {"kvarn:3/3t", "scalar body"},
      {"kvarn:4/4:staging=q8_0", "only tail"},
      // Each option once and none empty: a repeat was taken silently (the last one won; wide=
      // and layers= added up), and an empty wide=/layers= named no layer.
      {"q8_0:rot:swa=same:swa=same", "option 'swa=same' is given twice"},
      {"q4_0::rot", "an empty option"},
      {"q4_0:rot:", "an empty option"},
      {"sj:4/4:", "an empty option"},
      {"sj:4/4::tail=0", "an empty option"},
      {"sj:4/4:tail=0:tail=512", "option 'tail=' is given twice"},
      {"kvarn:4/4:tail=0:tail=0", "option 'tail=' is given twice"},
      {"sj:3/2t:staging=q8_0:staging=f16", "option 'staging=' is given twice"},
      {"sj:4/4:wide=5:wide=11", "option 'wide=' is given twice"},
      {"sj:4/4:layers=5:layers=11", "option 'layers=' is given twice"},
      {"sj:4/4:kmean=sink:kmean=sink", "option 'kmean=' is given twice"},
      {"sj:3/2t:cb=reference:cb=gemma3-270m", "option 'cb=' is given twice"},
      {"sj:4/4:tier=edge:tier=edge", "option 'tier=' is given twice"},
      {"sj:4/4:wide=", "option 'wide=' has no value"},
      {"sj:4/4:layers=", "option 'layers=' has no value"},
      {"sj:4/4:tail=", "option 'tail=' has no value"},
      {"sj:4/4:sink=", "option 'sink=' has no value"},
      {"f16:state=q4_0", "state=q4_0: the recurrent state is f32, f16, bf16 or q8_0"},
      {"sj:4/4:state=f16:state=bf16", "option 'state=' is given twice"},
      {"q8_0:rot:state=f16:state=f16", "option 'state=' is given twice"},
      {"kvarn:4/4:state=", "option 'state=' has no value"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.first);
    try {
      make_arm(c.first);
      ADD_FAILURE() << "accepted";
    } catch (const std::invalid_argument& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(c.second), std::string::npos) << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
      EXPECT_EQ(msg.rfind("arm '" + c.first + "'", 0), 0u) << msg;
    }
  }
  // A configuration the codec cannot serve at this model's head_dim fails at make_layer.
  EXPECT_THROW(make_arm("sj:3/3t")->make_layer(shape(64, 4, 2, 1024)), std::invalid_argument);
  EXPECT_THROW(make_arm("turbo4")->make_layer(shape(64, 4, 2, 1024)), std::invalid_argument);
}

// ---------------------------------------------------------------- recurrent states

LayerShape recurrent_shape(uint32_t head_dim) {
  LayerShape s;
  s.layer = 0;
  s.full_attention = false;
  s.recurrent = true;
  s.state = {3, 2 * 2 * head_dim + 4 * head_dim, 4, head_dim};  // Hk 2, Hv 4
  s.n_ctx = 1024;
  return s;
}

// Every arm makes a recurrent layer's state store in its state= format (f32 by default): its
// bytes, the format's rounding of what it holds, the convolution window's shift, and no K/V.
TEST(ArmState, EveryArmKeepsTheStateInItsFormat) {
  const LayerShape rs = recurrent_shape(64);
  const uint64_t values = rs.state.values();
  ASSERT_EQ(values, 3u * 512 + 4u * 64 * 64);
  const struct {
    const char* spec;
    StateFormat f;
    uint64_t bytes;
  } cases[] = {{"f16", StateFormat::f32, values * 4},         {"q4_0:rot:state=f16", StateFormat::f16, values * 2},
               {"kvarn:4/4:tail=0:state=bf16", StateFormat::bf16, values * 2},
               {"sj:4/4:state=q8_0", StateFormat::q8_0, values / 32 * 34}, {"sj:3/2t:state=f32", StateFormat::f32, values * 4}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.spec);
    const auto arm = make_arm(c.spec);
    EXPECT_EQ(arm->state_format(), c.f);
    auto layer = arm->make_layer(rs);
    RecurrentState* st = layer->recurrent();
    ASSERT_NE(st, nullptr);
    EXPECT_EQ(st->format(), c.f);
    EXPECT_EQ(st->bytes(), c.bytes);
    EXPECT_EQ(layer->bits().fixed, 8.0 * c.bytes);
    EXPECT_EQ(layer->bits().occupied, 0.0);
    // Zeros at the start.
    std::vector<float> m(64 * 64, 1.0f), w(3 * 512, 1.0f);
    st->read_head(2, m.data());
    st->read_conv(w.data());
    for (float x : m) ASSERT_EQ(x, 0.0f);
    for (float x : w) ASSERT_EQ(x, 0.0f);
    // A head written and read back: exact in f32, the format's rounding otherwise.
    std::vector<float> in(64 * 64), back(64 * 64);
    for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i)) * (1 + i % 7));
    st->write_head(3, in.data());
    st->read_head(3, back.data());
    st->read_head(2, m.data());
    for (float x : m) ASSERT_EQ(x, 0.0f);  // another head untouched
    double worst = 0.0;
    for (size_t i = 0; i < in.size(); ++i) worst = std::max(worst, std::fabs(double(in[i]) - back[i]) / 7.0);
    // q8_0: half a step of the block's scale, which is itself rounded to fp16 (up to 127 x 2^-11
    // of a step more).
    const double tol = c.f == StateFormat::f32    ? 0.0
                       : c.f == StateFormat::q8_0 ? 1.0 / 254 * 1.125
                       : c.f == StateFormat::bf16 ? 1.0 / 256
                                                  : 1.0 / 2048;
    EXPECT_LE(worst, tol);
    if (c.f != StateFormat::f32) {
      EXPECT_GT(worst, 0.0);
    }
    // The window keeps the last three rows pushed, oldest first.
    for (int r = 1; r <= 4; ++r) {
      std::vector<float> row(512, static_cast<float>(r));
      st->push_conv(row.data());
    }
    st->read_conv(w.data());
    for (int r = 0; r < 3; ++r)
      for (int c2 = 0; c2 < 512; ++c2) ASSERT_NEAR(w[size_t(r) * 512 + c2], r + 2, (r + 2) * 1e-3);
    EXPECT_THROW(layer->store(0, 1, in.data(), in.data()), std::logic_error);
    EXPECT_THROW(layer->attend(0, 1, in.data(), 1.0f, back.data()), std::logic_error);
  }
  // q8_0 blocks need widths that are multiples of 32.
  try {
    (void)make_arm("f16:state=q8_0")->make_layer(recurrent_shape(48));
    ADD_FAILURE() << "accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("multiples of 32"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW((void)make_arm("f16:state=f16")->make_layer(recurrent_shape(48)));
  // The state format is part of what an arm is, and of whether it shares the reference's prefix.
  EXPECT_NE(arm_identity("sj:4/4:state=f16"), arm_identity("sj:4/4"));
  EXPECT_EQ(arm_identity("sj:4/4:state=f32"), arm_identity("sj:4/4"));
  EXPECT_TRUE(make_arm("sj:4/4")->plain_f16_sliding());
  EXPECT_FALSE(make_arm("sj:4/4:state=bf16")->plain_f16_sliding());
  EXPECT_FALSE(make_arm("f16:state=q8_0")->plain_f16_sliding());
}

// The codec part of an SJ spec is the codec's configuration grammar (config.h parse_config):
// its fields, values and refusals; head_dim stays the model's and KVarN arms keep a fixed tail.
TEST(Arms, CodecFieldsAreTheCodecGrammar) {
  auto name_of = [](const std::string& spec) {
    return inspect(make_arm(spec)->make_layer(shape(128, 4, 2, 2048)))->storage_name();
  };
  EXPECT_EQ(name_of("sj:4/4:tail=128"), "sj:4/4:D=128:G=128:staging=tq6_0:sink=128:tail=128/0:rot=128:iters=16");
  EXPECT_EQ(name_of("sj:3/2t:staging=q8_0:sink=128(inherit):tail=256/512:rot=64:iters=8"),
            "sj:3/2t:D=128:G=128:staging=q8_0:sink=128(inherit):tail=256/512:rot=64:iters=8");
  EXPECT_EQ(name_of("kvarn:4/4:tail=128"), kvarn_config(128, 4, 4, 128).name());
  // An inherited sink serves the codec's rows too.
  const uint32_t N = 400;
  const Data d = make_data(N, 128, 4, 2, 37);
  const RunResult r = run_arm("sj:4/4:sink=128(inherit):staging=q8_0:tail=128", d, N, 64, {});
  const InspectableKv* kv = dynamic_cast<const InspectableKv*>(r.layer.get());
  const CacheView view = kv->codec_cache()->view(0);
  ASSERT_EQ(view.sink_inherit, 1u);
  ASSERT_GT(view.B, view.sink);
  std::vector<float> K(static_cast<size_t>(N) * 128), V(K.size()), kr(128), vr(128);
  kv->stored_rows(1, 0, N, K.data(), V.data());
  for (uint32_t p = 0; p < N; ++p) {
    resolve_row(view, p, 1, kr.data(), vr.data());
    ASSERT_EQ(std::memcmp(kr.data(), &K[static_cast<size_t>(p) * 128], 128 * sizeof(float)), 0) << p;
    ASSERT_EQ(std::memcmp(vr.data(), &V[static_cast<size_t>(p) * 128], 128 * sizeof(float)), 0) << p;
  }
  for (const auto& c : std::vector<std::pair<std::string, std::string>>{
           {"sj:4/4:D=64", "unknown option 'D'"},
           {"sj:4/4:iters=8(best)", "(best)"},
           {"kvarn:4/4:tail=128/256", "tail=128/256 is not a non-negative integer"}}) {
    SCOPED_TRACE(c.first);
    try {
      make_arm(c.first);
      ADD_FAILURE() << "accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(c.second), std::string::npos) << e.what();
    }
  }
}

// ---------------------------------------------------------------- quantizers by hand

std::vector<uint8_t> enc(RowFormat f, const std::vector<float>& x) {
  std::vector<uint8_t> out(fmt::row_bytes(f, static_cast<uint32_t>(x.size())));
  EXPECT_TRUE(fmt::encode_row(f, x.data(), static_cast<uint32_t>(x.size()), out.data()));
  return out;
}

TEST(ArmQuantizers, Q4_0HandWorked) {
  // x = j - 16: the largest magnitude is -16, so d = -16 / -8 = 2 and code = trunc(x/2 + 8.5)
  // = (j + 1) / 2, the top code clamped to 15.
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = static_cast<float>(j - 16);
  const std::vector<uint8_t> want = {0x00, 0x40, 0x80, 0x91, 0x91, 0xA2, 0xA2, 0xB3, 0xB3,
                                     0xC4, 0xC4, 0xD5, 0xD5, 0xE6, 0xE6, 0xF7, 0xF7, 0xF8};
  EXPECT_EQ(enc(RowFormat::q4_0, x), want);
  std::vector<float> y(32);
  fmt::decode_row(RowFormat::q4_0, want.data(), 32, y.data());
  EXPECT_EQ(y[0], -16.0f);
  EXPECT_EQ(y[1], -14.0f);  // code 1: (1 - 8) * 2
  EXPECT_EQ(y[31], 14.0f);  // clamped code 15
}

TEST(ArmQuantizers, Q8_0HandWorked) {
  // amax 127 -> d = 1 exactly, codes round half away from zero.
  std::vector<float> x(32, 0.0f);
  x[0] = -127.0f;
  x[1] = 2.5f;
  x[2] = -2.5f;
  x[3] = 0.49f;
  x[4] = 100.0f;
  const auto b = enc(RowFormat::q8_0, x);
  ASSERT_EQ(b.size(), 34u);
  EXPECT_EQ(b[0], 0x00);
  EXPECT_EQ(b[1], 0x3C);  // fp16 1.0
  EXPECT_EQ(static_cast<int8_t>(b[2]), -127);
  EXPECT_EQ(static_cast<int8_t>(b[3]), 3);
  EXPECT_EQ(static_cast<int8_t>(b[4]), -3);
  EXPECT_EQ(static_cast<int8_t>(b[5]), 0);
  EXPECT_EQ(static_cast<int8_t>(b[6]), 100);
}

TEST(ArmQuantizers, Q5HandWorked) {
  // q5_0 of j - 16: d = -16/-16 = 1, code = j, so qs = j | j << 4 and every high bit of the
  // second half set; decode is exact.
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = static_cast<float>(j - 16);
  auto b = enc(RowFormat::q5_0, x);
  ASSERT_EQ(b.size(), 22u);
  EXPECT_EQ(b[0], 0x00);
  EXPECT_EQ(b[1], 0x3C);
  EXPECT_EQ(b[2], 0x00);
  EXPECT_EQ(b[3], 0x00);
  EXPECT_EQ(b[4], 0xFF);
  EXPECT_EQ(b[5], 0xFF);
  for (int j = 0; j < 16; ++j) EXPECT_EQ(b[6 + j], j | (j << 4));
  std::vector<float> y(32);
  fmt::decode_row(RowFormat::q5_0, b.data(), 32, y.data());
  EXPECT_EQ(y, x);
  // q5_1 of j: min 0, d = 31/31 = 1, code j; m = 0.
  for (int j = 0; j < 32; ++j) x[j] = static_cast<float>(j);
  b = enc(RowFormat::q5_1, x);
  ASSERT_EQ(b.size(), 24u);
  EXPECT_EQ(b[1], 0x3C);
  EXPECT_EQ(b[2], 0x00);
  EXPECT_EQ(b[3], 0x00);
  EXPECT_EQ(b[6], 0xFF);
  EXPECT_EQ(b[7], 0xFF);
  for (int j = 0; j < 16; ++j) EXPECT_EQ(b[8 + j], j | (j << 4));
  fmt::decode_row(RowFormat::q5_1, b.data(), 32, y.data());
  EXPECT_EQ(y, x);
}

TEST(ArmQuantizers, Q4_1HandWorked) {
  // x = j: min 0, d = 31/15, code = round(15 j / 31) (no exact ties for j < 31).
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = static_cast<float>(j);
  const auto b = enc(RowFormat::q4_1, x);
  ASSERT_EQ(b.size(), 20u);
  const uint16_t d = f32_to_f16(31.0f / 15.0f);
  EXPECT_EQ(b[0] | (b[1] << 8), d);
  EXPECT_EQ(b[2] | (b[3] << 8), 0);
  for (int j = 0; j < 16; ++j) {
    const int lo = static_cast<int>(std::floor(15.0 * j / 31.0 + 0.5));
    const int hi = static_cast<int>(std::floor(15.0 * (j + 16) / 31.0 + 0.5));
    EXPECT_EQ(b[4 + j], lo | (hi << 4)) << j;
  }
}

TEST(ArmQuantizers, Iq4NlHandWorked) {
  // x = table/2: d0 = -63.5/-127 = 0.5 picks the table entries exactly; the least-squares
  // scale is exactly 0.5 (every numerator term is half its denominator term).
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = 0.5f * fmt::kIq4nlValues[j % 16];
  const auto b = enc(RowFormat::iq4_nl, x);
  ASSERT_EQ(b.size(), 18u);
  EXPECT_EQ(b[0], 0x00);
  EXPECT_EQ(b[1], 0x38);  // fp16 0.5
  for (int j = 0; j < 16; ++j) EXPECT_EQ(b[2 + j], j | (j << 4));
  std::vector<float> y(32);
  fmt::decode_row(RowFormat::iq4_nl, b.data(), 32, y.data());
  EXPECT_EQ(y, x);
}

TEST(ArmQuantizers, Bf16RoundsToNearestEven) {
  EXPECT_EQ(fmt::f32_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(fmt::f32_to_bf16(f32_from_bits(0x3F808000u)), 0x3F80);  // tie -> even
  EXPECT_EQ(fmt::f32_to_bf16(f32_from_bits(0x3F818000u)), 0x3F82);  // tie -> even (up)
  EXPECT_EQ(fmt::f32_to_bf16(f32_from_bits(0x3F808001u)), 0x3F81);
}

TEST(ArmQuantizers, TurboSignsAsTheForkPrintsThem) {
  // TURBO_WHT_SIGNS1 starts -1, 1, 1, -1, -1, 1, -1, 1; TURBO_WHT_SIGNS2 starts 1, 1, 1, 1, -1
  // and ends ..., -1, 1, -1; each has 64 +- 4 negative entries.
  auto neg = [](const uint32_t* w, int i) { return ((w[i / 32] >> (i % 32)) & 1u) != 0; };
  const bool s1[8] = {true, false, false, true, true, false, true, false};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(neg(fmt::kTurboSigns1, i), s1[i]) << i;
  const bool s2[5] = {false, false, false, false, true};
  for (int i = 0; i < 5; ++i) EXPECT_EQ(neg(fmt::kTurboSigns2, i), s2[i]) << i;
  EXPECT_TRUE(neg(fmt::kTurboSigns2, 125));
  EXPECT_FALSE(neg(fmt::kTurboSigns2, 126));
  EXPECT_TRUE(neg(fmt::kTurboSigns2, 127));
}

TEST(ArmQuantizers, Turbo3BlockHandWorked) {
  // A group on the centroids: 47 values at codes 1/6 and 81 at codes 2/5 make the centroid
  // vector's length 1.0012, so x = 3 c normalises to within 0.12% of the centroids and keeps
  // its codes; the corrected norm is |x| / |c| = 3. Layout (block_turbo3_0 of 128): fp16
  // norm, low two bits of code j at byte 2 + j/4 bits 2(j%4), high bit at byte 34 + j/8.
  std::vector<int> code(128);
  std::vector<float> x(128);
  for (int j = 0; j < 128; ++j) {
    code[j] = j < 47 ? (j % 2 ? 6 : 1) : (j % 2 ? 5 : 2);
    x[j] = 3.0f * fmt::kTurbo3Centroids[code[j]];
  }
  std::vector<uint8_t> b(50);
  ASSERT_TRUE(fmt::encode_row(RowFormat::turbo3, x.data(), 128, b.data()));
  EXPECT_EQ(load_u16(b.data()), 0x4200);  // fp16 3.0
  for (int j = 0; j < 128; ++j) {
    const int lo = (b[2 + j / 4] >> (2 * (j % 4))) & 3, hi = (b[34 + j / 8] >> (j % 8)) & 1;
    EXPECT_EQ(lo | (hi << 2), code[j]) << j;
  }
  std::vector<float> y(128);
  fmt::decode_row(RowFormat::turbo3, b.data(), 128, y.data());
  EXPECT_EQ(y, x);
}

// Mean of N(0, sigma^2) over [a, b), in double.
double gauss_cell_mean(double a, double b, double sigma) {
  const double pa = std::exp(-0.5 * (a / sigma) * (a / sigma)), pb = std::exp(-0.5 * (b / sigma) * (b / sigma));
  const double qa = 0.5 * std::erfc(a / sigma / std::sqrt(2.0)), qb = 0.5 * std::erfc(b / sigma / std::sqrt(2.0));
  return sigma / std::sqrt(2.0 * M_PI) * (pa - pb) / (qa - qb);
}

TEST(ArmQuantizers, Tq5TableIsLloydMaxForNormal128) {
  // Lloyd-Max's two conditions, checked here independently of the generator script: every
  // threshold is the midpoint of its neighbouring levels, every level the mean of
  // N(0, 1/128) over its cell. The same check on tq6_0's published table (six-decimal
  // literals, so a looser bound) ties the scale to the codec's format.
  const double sigma = 1.0 / std::sqrt(128.0);
  auto check = [&](uint32_t n, float (*cent)(uint32_t), float (*mid)(uint32_t), double tol_mid, double tol_mean) {
    for (uint32_t k = 0; k < n; ++k) {
      SCOPED_TRACE(k);
      EXPECT_EQ(cent(k), -cent(n - 1 - k));
      if (k + 1 < n) {
        EXPECT_LT(cent(k), mid(k));
        EXPECT_LT(mid(k), cent(k + 1));
        EXPECT_NEAR(mid(k), 0.5 * (static_cast<double>(cent(k)) + cent(k + 1)), tol_mid);
      }
      const double a = k == 0 ? -INFINITY : mid(k - 1), b = k + 1 == n ? INFINITY : mid(k);
      const double m = a < 0 && b <= 0 ? -gauss_cell_mean(-b, -a, sigma) : gauss_cell_mean(a, b, sigma);
      EXPECT_NEAR(cent(k), m, tol_mean * std::fabs(m));
    }
  };
  check(32, fmt::tq5_centroid, [](uint32_t k) { return f32_from_bits(fmt::kTq5MidpointBits[k]); }, 3e-8, 1e-6);
  check(64, tq6_centroid, tq6_midpoint, 1e-6, 1e-4);
  EXPECT_EQ(fmt::kTq5MidpointBits[15], 0u);
}

TEST(ArmQuantizers, Tq5BlockHandWorked) {
  // Codes 4 + (j mod 24): their centroid vector has length 1.025, so x = 3 c normalises to
  // within 2.5% of the centroids and keeps its codes (the cells of codes 4..27 are wider
  // than that); the corrected norm is |x| / |c| = 3. Layout: fp16 norm, then code j in bits
  // 5j .. 5j+4, little-endian. Codes 4..11 are 0b01011'01010'01001'01000'00111'00110'00101'00100
  // = bytes a4 98 83 92 5a; 12..19 give ac b9 07 a3 9c; 20..27 give b4 da 8b b3 de.
  std::vector<float> x(128);
  for (uint32_t j = 0; j < 128; ++j) x[j] = 3.0f * fmt::tq5_centroid(4 + j % 24);
  std::vector<uint8_t> b(82);
  ASSERT_TRUE(fmt::encode_row(RowFormat::tq5_0, x.data(), 128, b.data()));
  EXPECT_EQ(load_u16(b.data()), 0x4200);  // fp16 3.0
  const uint8_t groups[3][5] = {{0xa4, 0x98, 0x83, 0x92, 0x5a}, {0xac, 0xb9, 0x07, 0xa3, 0x9c}, {0xb4, 0xda, 0x8b, 0xb3, 0xde}};
  for (uint32_t g = 0; g < 16; ++g)
    for (uint32_t i = 0; i < 5; ++i) EXPECT_EQ(b[2 + 5 * g + i], groups[g % 3][i]) << g << " " << i;
  for (uint32_t j = 0; j < 128; ++j) EXPECT_EQ(fmt::tq5_block_code(b.data(), j), 4 + j % 24) << j;
  std::vector<float> y(128);
  fmt::decode_row(RowFormat::tq5_0, b.data(), 128, y.data());
  EXPECT_EQ(y, x);
  // An all-zero block: codes 16 (v = 0 sits on T[15] = 0 and takes the upper code), norm
  // 0x0000, decoded +0.0.
  std::vector<float> z(128, 0.0f);
  ASSERT_TRUE(fmt::encode_row(RowFormat::tq5_0, z.data(), 128, b.data()));
  EXPECT_EQ(load_u16(b.data()), 0u);
  for (uint32_t j = 0; j < 128; ++j) EXPECT_EQ(fmt::tq5_block_code(b.data(), j), 16u) << j;
  fmt::decode_row(RowFormat::tq5_0, b.data(), 128, y.data());
  for (const float v : y) EXPECT_EQ(f32_bits(v), 0u);
}

// Relative RMS error of the rows an arm stores and decodes (model basis), K and V together.
double row_error(const std::string& spec, const Data& d, uint32_t N) {
  auto layer = make_arm(spec)->make_layer(shape(d.D, d.H, d.Hkv, N));
  layer->begin_ubatch(0, N);
  layer->store(0, N, d.k.data(), d.v.data());
  const InspectableKv* kv = inspect(layer);
  std::vector<float> k(d.D), v(d.D);
  double num = 0, den = 0;
  for (uint32_t p = 0; p < N; ++p)
    for (uint32_t h = 0; h < d.Hkv; ++h) {
      kv->decode_row(h, p, k.data(), v.data());
      const size_t o = (static_cast<size_t>(p) * d.Hkv + h) * d.D;
      for (uint32_t i = 0; i < d.D; ++i) {
        num += (k[i] - d.k[o + i]) * static_cast<double>(k[i] - d.k[o + i]) + (v[i] - d.v[o + i]) * static_cast<double>(v[i] - d.v[o + i]);
        den += d.k[o + i] * static_cast<double>(d.k[o + i]) + d.v[o + i] * static_cast<double>(d.v[o + i]);
      }
    }
  return std::sqrt(num / den);
}

TEST(ArmQuantizers, Tq5ErrorSitsBetweenTurbo4AndTq6) {
  // One more bit per value than turbo4, one less than tq6_0: on realistic rows (outlier
  // channels, RoPE) the row error must fall strictly between theirs, with a margin (each bit
  // of a Lloyd-Max code roughly halves the RMS error).
  for (const uint32_t D : {128u, 256u}) {
    SCOPED_TRACE(D);
    const Data d = make_data(64, D, 2, 2, 29 + D);
    const double e4 = row_error("turbo4", d, 64), e5 = row_error("tq5_0", d, 64), e6 = row_error("tq6_0", d, 64);
    std::printf("  D %u: relative RMS row error turbo4 %.4f  tq5_0 %.4f  tq6_0 %.4f\n", D, e4, e5, e6);
    EXPECT_LT(e5 * 1.5, e4);
    EXPECT_LT(e6 * 1.5, e5);
  }
}

TEST(ArmQuantizers, Tq5ArmStoresTq5OfTheCodecRotation) {
  // tq5_0 rotates as tq6_0 does (the codec's Hadamard, block min(D, 256)) on K and V.
  for (const uint32_t D : {128u, 512u}) {
    SCOPED_TRACE(D);
    const uint32_t rot = D < 256 ? D : 256;
    const Data d = make_data(1, D, 1, 1, 37);
    auto layer = make_arm("tq5_0")->make_layer(shape(D, 1, 1, 16));
    layer->begin_ubatch(0, 1);
    layer->store(0, 1, d.k.data(), d.v.data());
    InspectableKv* kv = inspect(layer);
    EXPECT_EQ(kv->k_rotation(), rot);
    EXPECT_EQ(kv->v_rotation(), rot);
    for (int side = 0; side < 2; ++side) {
      std::vector<float> r(side == 0 ? d.k : d.v), want(D), got_k(D), got_v(D);
      hadamard_blocks(r.data(), D, rot);
      std::vector<uint8_t> bytes(fmt::row_bytes(RowFormat::tq5_0, D));
      ASSERT_EQ(bytes.size(), D / 128 * 82u);
      ASSERT_TRUE(fmt::encode_row(RowFormat::tq5_0, r.data(), D, bytes.data()));
      fmt::decode_row(RowFormat::tq5_0, bytes.data(), D, want.data());
      hadamard_blocks(want.data(), D, rot);
      kv->decode_row(0, 0, got_k.data(), got_v.data());
      EXPECT_EQ(side == 0 ? got_k : got_v, want);
    }
  }
}

TEST(ArmQuantizers, LlamaRotationSizes) {
  // K: the largest power of two >= 64 dividing D; V: 64; none unless D % 64 == 0.
  const uint32_t dims[][3] = {{64, 64, 64}, {128, 128, 64}, {192, 64, 64}, {256, 256, 64}, {512, 512, 64}, {96, 0, 0}};
  for (const auto& c : dims) {
    auto layer = make_arm("q8_0:rot")->make_layer(shape(c[0], 2, 1, 64));
    EXPECT_EQ(inspect(layer)->k_rotation(), c[1]) << c[0];
    EXPECT_EQ(inspect(layer)->v_rotation(), c[2]) << c[0];
  }
  EXPECT_EQ(inspect(make_arm("q8_0")->make_layer(shape(128, 2, 1, 64)))->k_rotation(), 0u);
}

TEST(ArmQuantizers, RotatedArmStoresTheRotatedRow) {
  // q4_0:rot at D = 128 holds q4_0 of H128 k (K) and of 64-blocks of H64 v (V).
  const Data d = make_data(1, 128, 1, 1, 7);
  auto layer = make_arm("q4_0:rot")->make_layer(shape(128, 1, 1, 16));
  layer->begin_ubatch(0, 1);
  layer->store(0, 1, d.k.data(), d.v.data());
  InspectableKv* kv = inspect(layer);
  EXPECT_EQ(kv->k_rotation(), 128u);
  EXPECT_EQ(kv->v_rotation(), 64u);
  std::vector<float> kr(d.k.begin(), d.k.begin() + 128), vr(d.v.begin(), d.v.begin() + 128);
  hadamard_blocks(kr.data(), 128, 128);
  hadamard_blocks(vr.data(), 128, 64);
  std::vector<uint8_t> bk(72), bv(72);
  fmt::encode_row(RowFormat::q4_0, kr.data(), 128, bk.data());
  fmt::encode_row(RowFormat::q4_0, vr.data(), 128, bv.data());
  std::vector<float> want_k(128), want_v(128), got_k(128), got_v(128);
  fmt::decode_row(RowFormat::q4_0, bk.data(), 128, want_k.data());
  fmt::decode_row(RowFormat::q4_0, bv.data(), 128, want_v.data());
  hadamard_blocks(want_k.data(), 128, 128);
  hadamard_blocks(want_v.data(), 128, 64);
  kv->decode_row(0, 0, got_k.data(), got_v.data());
  EXPECT_EQ(got_k, want_k);
  EXPECT_EQ(got_v, want_v);
}

// ---------------------------------------------------------------- attention

// Every arm, fused vs the naive reference over its own decoded rows; SJ/KVarN arms also vs
// the codec's attention_ref. SJ arms without a tail get tail=128 so the body is exercised
// within the test's 1408 positions; kvarn tail=1024 seals from position 1280 on.
TEST(ArmAttention, FusedMatchesReferenceForEveryArm) {
  const uint32_t N = 1408, ub = 64;
  const Data d = make_data(N, 128, 4, 2, 11);
  for (std::string spec : arm_examples()) {
    if (spec.rfind("sj:", 0) == 0 && spec.find("tail=") == std::string::npos) spec += ":tail=128";
    SCOPED_TRACE(spec);
    const RunResult r = run_arm(spec, d, N, ub, {0, 3, 21});
    EXPECT_EQ(r.checks, 3u);
    std::printf("  %-40s max |fused - ref| %.2e  vs attention_ref %.2e  (max|V| %.1f)\n", spec.c_str(), r.max_err,
                r.max_err_codec, r.vmax);
    EXPECT_LE(r.max_err, 2e-5 * r.vmax + 1e-6) << "vmax " << r.vmax;
    auto* kv = dynamic_cast<InspectableKv*>(r.layer.get());
    if (const SequenceCache* c = kv->codec_cache()) {
      EXPECT_LE(r.max_err_codec, 2e-5 * r.vmax + 1e-6);
      if (spec.rfind("sj:", 0) == 0 || spec.find("tail=0") != std::string::npos) {
        EXPECT_GT(c->policy().B, 128u) << "body not exercised";
      }
    }
  }
}

// Learned sink logits (gpt-oss) in every arm's fused attention, against the naive reference
// over the arm's decoded rows, full and sliding; the sinks change the answer (one head's sink
// far below every score must not, the others' above them must take most of the weight).
TEST(ArmAttention, LearnedSinksInEveryArm) {
  const uint32_t N = 704, ub = 64, H = 4;
  const Data d = make_data(N, 128, H, 2, 17);
  const std::vector<float> sinks{-200.0f, 6.0f, 4.0f, 40.0f};
  for (std::string spec : arm_examples()) {
    if (spec.rfind("sj:", 0) == 0 && spec.find("tail=") == std::string::npos) spec += ":tail=128";
    if (spec.find("kmean=") != std::string::npos) continue;  // refused beside sinks (ArmSinks below)
    SCOPED_TRACE(spec);
    for (uint32_t window : {0u, 128u}) {
      const RunResult r = run_arm(spec, d, N, ub, {0, 10}, window, sinks);
      EXPECT_EQ(r.checks, 2u);
      EXPECT_LE(r.max_err, 2e-5 * r.vmax + 1e-6) << "vmax " << r.vmax << ", window " << window;
      // Against the same arm without sinks: head 0 the same, head 3 (sink 40) near zero.
      auto plain = make_arm(spec)->make_layer(shape(d.D, d.H, d.Hkv, N, window));
      std::vector<float> a(static_cast<size_t>(ub) * H * d.D), b(a.size());
      for (uint32_t p0 = 0; p0 < N; p0 += ub) {
        plain->begin_ubatch(p0, ub);
        plain->store(p0, ub, &d.k[static_cast<size_t>(p0) * d.Hkv * d.D], &d.v[static_cast<size_t>(p0) * d.Hkv * d.D]);
      }
      const float scale = 1.0f / std::sqrt(static_cast<float>(d.D));
      const uint32_t p0 = N - ub;
      r.layer->attend(p0, ub, &d.q[static_cast<size_t>(p0) * H * d.D], scale, a.data());
      plain->attend(p0, ub, &d.q[static_cast<size_t>(p0) * H * d.D], scale, b.data());
      double diff1 = 0, big3 = 0, plain3 = 0;
      for (uint32_t i = 0; i < ub; ++i)
        for (uint32_t x = 0; x < d.D; ++x) {
          const size_t o0 = (static_cast<size_t>(i) * H) * d.D + x;
          EXPECT_EQ(a[o0], b[o0]) << "head 0, sink -200";
          diff1 = std::max(diff1, static_cast<double>(std::fabs(a[o0 + d.D] - b[o0 + d.D])));
          big3 = std::max(big3, static_cast<double>(std::fabs(a[o0 + 3 * d.D])));
          plain3 = std::max(plain3, static_cast<double>(std::fabs(b[o0 + 3 * d.D])));
        }
      EXPECT_GT(diff1, 1e-3);
      EXPECT_LT(big3, 1e-6 * plain3);
    }
  }
}

// kmean=sink shifts the keys, which moves every score of a query by q.mean: invisible to a
// softmax over the stored rows, not to a learned sink beside them. Refused by name.
TEST(ArmSinks, KMeanIsRefusedBesideLearnedSinks) {
  std::vector<LayerShape> layers{shape(64, 4, 2, 256)};
  layers[0].sink_logits = {1.0f, 2.0f, 3.0f, 4.0f};
  try {
    make_arm("sj:4/4:kmean=sink")->check_layers(layers);
    FAIL() << "kmean=sink accepted beside sinks";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("learned attention sinks"), std::string::npos) << e.what();
  }
  layers[0].sink_logits.clear();
  EXPECT_NO_THROW(make_arm("sj:4/4:kmean=sink")->check_layers(layers));
}

// The rows attend reads for the codec arms are the codec's own (resolve_row), bit for bit,
// across sink, body records (scalar, trellis, channel axis) and ring.
TEST(ArmAttention, CodecArmRowsEqualResolveRow) {
  const uint32_t N = 700;
  const Data d = make_data(N, 128, 4, 2, 31);
  for (const std::string spec : {"sj:4/4:tail=128", "sj:4/2:tail=128", "sj:3/2t:tail=128", "sj:3/3t:axis=channel:tail=128",
                                 "sj:4/4:sink=192:tail=128", "kvarn:4/4:tail=0", "sj:3/3t:staging=q8_0:tail=128"}) {
    SCOPED_TRACE(spec);
    const RunResult r = run_arm(spec, d, N, 64, {});
    const InspectableKv* kv = dynamic_cast<const InspectableKv*>(r.layer.get());
    const CacheView view = kv->codec_cache()->view(0);
    ASSERT_GT(view.B, view.sink);
    std::vector<float> K(static_cast<size_t>(N) * 128), V(K.size()), kr(128), vr(128);
    for (uint32_t h = 0; h < 2; ++h) {
      kv->stored_rows(h, 0, N, K.data(), V.data());
      for (uint32_t p = 0; p < N; ++p) {
        resolve_row(view, p, h, kr.data(), vr.data());
        ASSERT_EQ(std::memcmp(kr.data(), &K[static_cast<size_t>(p) * 128], 128 * sizeof(float)), 0) << p;
        ASSERT_EQ(std::memcmp(vr.data(), &V[static_cast<size_t>(p) * 128], 128 * sizeof(float)), 0) << p;
      }
      // An unaligned range starting inside a record reads the same rows.
      kv->stored_rows(h, 200, 333, K.data(), V.data());
      resolve_row(view, 250, h, kr.data(), vr.data());
      EXPECT_EQ(std::memcmp(kr.data(), &K[50 * 128], 128 * sizeof(float)), 0);
    }
  }
}

// Gemma 4's full-attention heads hold 512 values. Every arm at D = 512 with a GQA group of 4
// over one KV head (the gemma4 test model's full layers), fused against the reference over its
// own rows; one arm of each rotation and body again over two KV heads and at D = 256 (where the
// codec's rotation is one block). SJ arms without a tail get tail=128 so their bodies seal
// within the 640 positions (tail=512/1024 and KVarN's tail=1024 only stage).
TEST(ArmAttention, FusedMatchesReferenceAtHeadSize512) {
  const uint32_t N = 640, ub = 64;
  struct Case {
    uint32_t D, H, Hkv;
  };
  for (const Case c : {Case{512, 4, 1}, Case{512, 4, 2}, Case{256, 4, 1}}) {
    const Data d = make_data(N, c.D, c.H, c.Hkv, 71 + c.D + c.Hkv);
    // Every arm on the first case; the others (CPU time) take one of each kind of rotation and body.
    std::vector<std::string> specs = {"f16", "q8_0:rot", "q4_0:rot", "turbo4", "tq6_0", "kvarn:4/4:tail=0", "sj:4/4",
                                      "sj:3/2t", "sj:3/2t:staging=q8_0:tail=128"};
    if (c.Hkv == 1 && c.D == 512) {
      specs = arm_examples();
      for (const char* s : {"sj:4/4:staging=q8_0:tail=128", "sj:3/2t:staging=q8_0:tail=128", "kvarn:2/2:tail=0", "sj:4/4:rot=512:tail=128"})
        specs.push_back(s);
    }
    for (std::string spec : specs) {
      if (spec.rfind("sj:", 0) == 0 && spec.find("tail=") == std::string::npos) spec += ":tail=128";
      if (spec.find("rot=512") != std::string::npos && c.D != 512) continue;
      SCOPED_TRACE(spec + " D " + std::to_string(c.D) + " Hkv " + std::to_string(c.Hkv));
      const RunResult r = run_arm(spec, d, N, ub, {0, 4, 9});
      EXPECT_EQ(r.checks, 3u);
      if (c.Hkv == 1)
        std::printf("  D %u  %-40s max |fused - ref| %.2e  vs attention_ref %.2e  (max|V| %.1f)\n", c.D, spec.c_str(),
                    r.max_err, r.max_err_codec, r.vmax);
      EXPECT_LE(r.max_err, 2e-5 * r.vmax + 1e-6) << "vmax " << r.vmax;
      const auto* kv = dynamic_cast<const InspectableKv*>(r.layer.get());
      if (const SequenceCache* cc = kv->codec_cache()) {
        EXPECT_LE(r.max_err_codec, 2e-5 * r.vmax + 1e-6);
        const bool seals = spec.find("tail=128") != std::string::npos || spec.find("tail=0") != std::string::npos;
        if (seals) {
          EXPECT_GT(cc->policy().B, 128u) << "body not exercised";
        }
        // Two 256-point rotations per 512-value head unless the spec asks for one (rot=512).
        EXPECT_EQ(kv->k_rotation(), spec.find("rot=512") != std::string::npos ? 512u : 256u);
        EXPECT_NE(kv->storage_name().find(":D=" + std::to_string(c.D) + ":"), std::string::npos) << kv->storage_name();
      }
      // The arm's rows are near the inputs (nothing lost or shifted between the halves).
      std::vector<float> k(c.D), v(c.D);
      double num = 0, den = 0;
      for (uint32_t p = 0; p < N; p += 5) {
        kv->decode_row(c.Hkv - 1, p, k.data(), v.data());
        const size_t o = (static_cast<size_t>(p) * c.Hkv + c.Hkv - 1) * c.D;
        for (uint32_t i = 0; i < c.D; ++i) {
          num += (k[i] - d.k[o + i]) * static_cast<double>(k[i] - d.k[o + i]) +
                 (v[i] - d.v[o + i]) * static_cast<double>(v[i] - d.v[o + i]);
          den += d.k[o + i] * static_cast<double>(d.k[o + i]) + d.v[o + i] * static_cast<double>(d.v[o + i]);
        }
      }
      EXPECT_LT(std::sqrt(num / den), 0.5) << "relative RMS row error";
      EXPECT_GT(kv->bits().occupied, 0.0);
    }
  }
  // rot=512 is a spec of its own (checked at D = 512, not 128) that a 128-value head refuses;
  // a block that is no power of two is refused by name.
  EXPECT_THROW(make_arm("sj:4/4:rot=512")->make_layer(shape(128, 4, 2, 1024)), std::invalid_argument);
  EXPECT_THROW(make_arm("sj:4/4:rot=1024")->make_layer(shape(512, 4, 2, 1024)), std::invalid_argument);
  for (const char* bad : {"sj:4/4:rot=384", "sj:4/4:rot=16"}) {
    try {
      make_arm(bad);
      ADD_FAILURE() << bad << " accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("rotation block"), std::string::npos) << e.what();
    }
  }
}

// At D = 512 the codec's rows are its own (resolve_row) bit for bit across sink, every body and
// ring, and a sink row is the f16 of the row rotated by two 256-point Hadamard blocks (not one
// 512-point block).
TEST(ArmAttention, CodecArmRowsEqualResolveRowAt512) {
  const uint32_t N = 520, D = 512;
  const Data d = make_data(N, D, 4, 2, 83);
  for (const std::string spec : {"sj:4/4:tail=128", "sj:4/2:tail=128", "sj:3/2t:tail=128", "sj:2/2t:tail=128",
                                 "sj:3/3t:axis=channel:tail=128", "kvarn:4/4:tail=0", "sj:3/3t:staging=q8_0:tail=128"}) {
    SCOPED_TRACE(spec);
    const RunResult r = run_arm(spec, d, N, 64, {});
    const InspectableKv* kv = dynamic_cast<const InspectableKv*>(r.layer.get());
    const CacheView view = kv->codec_cache()->view(0);
    ASSERT_GT(view.B, view.sink);
    std::vector<float> K(static_cast<size_t>(N) * D), V(K.size()), kr(D), vr(D);
    for (uint32_t h = 0; h < 2; ++h) {
      kv->stored_rows(h, 0, N, K.data(), V.data());
      for (uint32_t p = 0; p < N; ++p) {
        resolve_row(view, p, h, kr.data(), vr.data());
        ASSERT_EQ(std::memcmp(kr.data(), &K[static_cast<size_t>(p) * D], D * sizeof(float)), 0) << p;
        ASSERT_EQ(std::memcmp(vr.data(), &V[static_cast<size_t>(p) * D], D * sizeof(float)), 0) << p;
      }
    }
    std::vector<float> want(d.k.begin() + D, d.k.begin() + 2 * D), got_k(D), got_v(D);  // position 0, head 1
    hadamard_blocks(want.data(), D, 256);
    for (float& x : want) x = f16_to_f32(f32_to_f16(x));
    hadamard_blocks(want.data(), D, 256);
    kv->decode_row(1, 0, got_k.data(), got_v.data());
    for (uint32_t i = 0; i < D; ++i) ASSERT_NEAR(got_k[i], want[i], 1e-5f * (1.0f + std::fabs(want[i]))) << i;
  }
}

// cb=: the arm seals with the named tables (here the Gemma 3 270M ones data/codebooks ships),
// its rows are the codec's rows decoded with those tables, and they differ from the reference
// tables' rows.
TEST(ArmAttention, CodebookFilesSealAndDecodeWithTheirTables) {
  const std::string dir = std::string(SJKV_SOURCE_DIR) + "/data/codebooks/";
  const std::string cb3 = dir + "gemma3-270m-3bit.bin", cb2 = dir + "gemma3-270m-2bit.bin";
  const uint32_t N = 700;
  const Data d = make_data(N, 128, 4, 1, 41);
  const RawCodebook t3 = read_raw_codebook(cb3), t2 = read_raw_codebook(cb2);
  for (const auto& [spec, ref_spec] : {std::pair<std::string, std::string>{"sj:3/2t:tail=128:cb=" + cb3 + "+" + cb2, "sj:3/2t:tail=128"},
                                       {"sj:3/3t:tail=128:cb=" + cb3, "sj:3/3t:tail=128"}}) {
    SCOPED_TRACE(spec);
    const RunResult r = run_arm(spec, d, N, 64, {}), ref = run_arm(ref_spec, d, N, 64, {});
    const InspectableKv* kv = dynamic_cast<const InspectableKv*>(r.layer.get());
    const InspectableKv* rk = dynamic_cast<const InspectableKv*>(ref.layer.get());
    const CacheView view = kv->codec_cache()->view(0);
    ASSERT_GT(view.B, view.sink);
    ASSERT_NE(view.codebooks.k, nullptr);
    EXPECT_EQ(0, std::memcmp(view.codebooks.k, t3.k.data(), t3.k.size() * 2));
    const RawCodebook& tv = spec.find("3/2t") != std::string::npos ? t2 : t3;
    EXPECT_EQ(0, std::memcmp(view.codebooks.v, tv.v.data(), tv.v.size() * 2));
    std::vector<float> K(static_cast<size_t>(N) * 128), V(K.size()), K0(K.size()), V0(K.size()), kr(128), vr(128);
    kv->stored_rows(0, 0, N, K.data(), V.data());
    rk->stored_rows(0, 0, N, K0.data(), V0.data());
    for (uint32_t p = 0; p < N; p += 7) {
      resolve_row(view, p, 0, kr.data(), vr.data());
      ASSERT_EQ(std::memcmp(kr.data(), &K[static_cast<size_t>(p) * 128], 128 * sizeof(float)), 0) << p;
      ASSERT_EQ(std::memcmp(vr.data(), &V[static_cast<size_t>(p) * 128], 128 * sizeof(float)), 0) << p;
    }
    const size_t body = static_cast<size_t>(view.B) * 128;
    EXPECT_NE(std::memcmp(K.data() + 128 * 128, K0.data() + 128 * 128, (body - 128 * 128) * sizeof(float)), 0);
    EXPECT_NE(std::memcmp(V.data() + 128 * 128, V0.data() + 128 * 128, (body - 128 * 128) * sizeof(float)), 0);
  }
  for (const std::string& bad : {"sj:4/4:cb=" + cb3, "sj:3/3t:cb=" + cb2, "sj:3/3t:cb=" + cb3 + "+" + cb3,
                                 "sj:3/3t:cb=" + dir + "missing.bin", "sj:3/3t:axis=channel:cb=" + cb3, std::string("sj:3/3t:cb=")})
    EXPECT_THROW(make_arm(bad), std::invalid_argument) << bad;
}

// cb= reads every form sjkv-train writes: the .sjcb container and the C header give the raw
// files' rows; a channel-axis container is refused by name.
TEST(ArmAttention, CodebookFilesInEveryFormGiveTheSameRows) {
  const std::string dir = std::string(SJKV_SOURCE_DIR) + "/data/codebooks/gemma3-270m-";
  const uint32_t N = 600;
  const Data d = make_data(N, 128, 4, 1, 45);
  auto rows = [&](const std::string& ext) {
    const RunResult r = run_arm("sj:3/2t:tail=128:cb=" + dir + "3bit" + ext + "+" + dir + "2bit" + ext, d, N, 64, {});
    std::vector<float> K(static_cast<size_t>(N) * 128), V(K.size());
    dynamic_cast<const InspectableKv*>(r.layer.get())->stored_rows(0, 0, N, K.data(), V.data());
    K.insert(K.end(), V.begin(), V.end());
    return K;
  };
  const std::vector<float> raw = rows(".bin");
  EXPECT_TRUE(raw == rows(".sjcb"));
  EXPECT_TRUE(raw == rows(".h"));

  CodebookContainer channel = read_codebook_container(dir + "3bit.sjcb");
  channel.axis = CodebookAxis::channel;
  const std::string path = ::testing::TempDir() + "sjkv_channel_3bit.sjcb";
  write_codebook_container(path, channel);
  try {
    make_arm("sj:3/3t:cb=" + path);
    ADD_FAILURE() << "a channel-axis table was taken";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("a channel-axis table; cb= takes token-axis tables"), std::string::npos) << e.what();
  }
  std::remove(path.c_str());
}

// cb=SET and cb=reference (sjkv/io/table_set.h): a shipped set seals with its tables, the same
// rows as its table files given with cb=; cb=reference is the bare arm; arm_with_tables adds a
// set only for the model it serves and the width pairs it is the default for (the shipped one
// is the default for none).
TEST(ArmAttention, ShippedTableSetsAreTheirFilesAndResolvePerModel) {
  const std::string dir = std::string(SJKV_SOURCE_DIR) + "/study/codebooks/";
  const std::string files = dir + "gemma3-270m-3bit.bin+" + dir + "gemma3-270m-2bit.bin";
  const uint32_t N = 700;
  const Data d = make_data(N, 128, 4, 1, 43);
  auto rows = [&](const std::string& spec) {
    const RunResult r = run_arm(spec, d, N, 64, {});
    std::vector<float> K(static_cast<size_t>(N) * 128), V(K.size());
    dynamic_cast<const InspectableKv*>(r.layer.get())->stored_rows(0, 0, N, K.data(), V.data());
    K.insert(K.end(), V.begin(), V.end());
    return K;
  };
  const std::vector<float> set = rows("sj:3/2t:tail=128:cb=gemma3-270m");
  EXPECT_TRUE(set == rows("sj:3/2t:tail=128:cb=" + files));
  EXPECT_TRUE(set == rows("sj:3/2t:tail=128:cb=" + dir + "gemma3-270m-3bit.sjcb+" + dir + "gemma3-270m-2bit.sjcb"));
  EXPECT_TRUE(rows("sj:3/2t:tail=128:cb=reference") == rows("sj:3/2t:tail=128"));
  EXPECT_FALSE(set == rows("sj:3/2t:tail=128"));
  EXPECT_THROW(make_arm("sj:4/4t:cb=gemma3-270m"), std::invalid_argument);  // no 4-bit table
  EXPECT_THROW(make_arm("sj:4/4:cb=reference"), std::invalid_argument);     // scalar body

  ModelGeometry g;
  g.architecture = "gemma3";
  g.n_layers = 18;
  g.layers.resize(18);
  for (uint32_t l = 0; l < 18; ++l) {
    g.layers[l].kind = (l + 1) % 6 == 0 ? LayerKind::full_attention : LayerKind::sliding_window;
    g.layers[l].n_head_kv = 1;
    g.layers[l].head_dim_k = g.layers[l].head_dim_v = 256;
  }
  const TableChoice r = TableChoice::parse("reference");
  TableChoice a = TableChoice::parse("auto");
  // The shipped set is the default for no width (docs/RESULTS.md finding 11): auto keeps the
  // format's tables. Were it the default for 3/2t and 2/2t (as until then), auto names it there.
  for (const char* spec : {"sj:3/2t", "sj:2/2t", "sj:3/3t"}) EXPECT_EQ(arm_with_tables(spec, a, &g), spec);
  std::vector<TableSet> sets = {*find_table_set("gemma3-270m")};
  sets[0].default_for = {{3, 2}, {2, 2}};
  a.sets = &sets;
  EXPECT_EQ(arm_with_tables("sj:3/2t", a, &g), "sj:3/2t:cb=gemma3-270m");
  EXPECT_EQ(arm_with_tables("sj:2/2t:tail=512/1024:staging=q8_0", a, &g), "sj:2/2t:tail=512/1024:staging=q8_0:cb=gemma3-270m");
  for (const std::string& same : {std::string("sj:3/3t"), std::string("sj:4/4"), std::string("sj:3/2t:axis=channel"),
                                  std::string("sj:3/2t:cb=reference"), std::string("q8_0"),
                                  std::string("kvarn:4/4:tail=0"), "sj:3/2t:cb=" + files})
    EXPECT_EQ(arm_with_tables(same, a, &g), same) << same;
  EXPECT_EQ(arm_with_tables("sj:3/2t", r, &g), "sj:3/2t");
  EXPECT_EQ(arm_with_tables("sj:3/2t", a, nullptr), "sj:3/2t");
  g.layers[11].head_dim_k = g.layers[11].head_dim_v = 128;  // another model: no set
  EXPECT_EQ(arm_with_tables("sj:3/2t", a, &g), "sj:3/2t");
  EXPECT_EQ(arm_with_tables("sj:3/3t", TableChoice::parse("gemma3-270m"), &g), "sj:3/3t:cb=gemma3-270m");
  EXPECT_NE(arm_engine_settings("sj:3/2t:cb=gemma3-270m").find("shipped set gemma3-270m"), std::string::npos);
  EXPECT_NE(arm_engine_settings("sj:3/2t").find("the format's trellis tables"), std::string::npos);
  EXPECT_EQ(arm_engine_settings("q8_0"), "");
}

// swa=FMT: a sliding-window layer of any arm holds the rows of that block format, unrotated (as
// q8_0:swa=same), with attention over them; full-attention layers are the arm's own.
TEST(ArmAttention, SwaFormatStoresTheSlidingLayersInIt) {
  const uint32_t N = 300, W = 48;
  const Data d = make_data(N, 128, 4, 1, 47);
  auto rows = [&](const std::string& spec, uint32_t window) {
    const RunResult r = run_arm(spec, d, N, 64, {0, 2, 4}, window);
    EXPECT_EQ(r.checks, 3) << spec;
    EXPECT_LE(r.max_err, 2e-5 * r.vmax + 1e-6) << spec;
    std::vector<float> K(static_cast<size_t>(N) * 128), V(K.size());
    dynamic_cast<const InspectableKv*>(r.layer.get())->stored_rows(0, 0, N, K.data(), V.data());
    K.insert(K.end(), V.begin(), V.end());
    return K;
  };
  const std::vector<float> q8 = rows("q8_0:swa=same", W), f16 = rows("f16", W);
  EXPECT_FALSE(q8 == f16);
  for (const char* spec : {"sj:4/4:swa=q8_0", "sj:3/2t:tail=128:swa=q8_0", "kvarn:4/4:tail=0:swa=q8_0", "f16:swa=q8_0",
                           "f32:swa=q8_0"})
    EXPECT_TRUE(rows(spec, W) == q8) << spec;
  EXPECT_TRUE(rows("sj:4/4", W) == f16);
  EXPECT_TRUE(rows("sj:4/4:swa=q4_0", W) == rows("q4_0:swa=same", W));
  EXPECT_TRUE(rows("sj:4/4:tail=128:swa=q8_0", 0) == rows("sj:4/4:tail=128", 0));  // a full layer: the arm's
  EXPECT_FALSE(make_arm("sj:4/4:swa=q8_0")->plain_f16_sliding());
  EXPECT_TRUE(make_arm("sj:4/4")->plain_f16_sliding());
}

// ---------------------------------------------------------------- shared-KV layers

// The layer shapes of a model and nothing else (make_cache, cache_bits and check_layers read
// no more).
class ShapesOnly final : public Model {
 public:
  explicit ShapesOnly(std::vector<LayerShape> layers) {
    info_.architecture = "shapes";
    info_.n_layer = static_cast<uint32_t>(layers.size());
    info_.layers = std::move(layers);
  }
  const ModelInfo& info() const override { return info_; }
  const GgufFile& gguf() const override { throw std::logic_error("ShapesOnly has no file"); }
  void eval_hidden(const int32_t*, uint32_t, uint32_t, uint32_t, std::vector<std::unique_ptr<LayerKv>>&, float*, float*,
                   bool) override {
    throw std::logic_error("ShapesOnly does not run");
  }
  void project(const float*, uint32_t, float*) const override { throw std::logic_error("ShapesOnly does not run"); }

 private:
  ModelInfo info_;
};

// A shared-KV layer (Gemma 4's E series) keeps no cache in any arm: its store holds nothing,
// costs nothing and cannot be attended (the forward pass attends its source's); cache_bits
// counts only the layers that store K/V, so a model with shared layers is charged what its
// own-KV layers hold, whether or not the shared layer is marked full-attention.
TEST(ArmShared, SharedKvLayersKeepNoCacheAndCostNoBits) {
  const uint32_t N = 520;
  const Data d = make_data(N, 512, 4, 1, 91);
  std::vector<LayerShape> own = {shape(128, 4, 1, N, 48, 0), shape(512, 4, 1, N, 0, 1)};
  std::vector<LayerShape> with = own;
  with.push_back(shape(128, 4, 1, N, 48, 2));
  with.back().kv_source = 0;
  with.push_back(shape(512, 4, 1, N, 0, 3));
  with.back().kv_source = 1;  // marked full: still not counted
  for (const std::string spec : {"f16", "q8_0", "sj:4/4:tail=128", "kvarn:4/4:tail=0"}) {
    SCOPED_TRACE(spec);
    const auto arm = make_arm(spec);
    double bits[2][2];
    for (int w = 0; w < 2; ++w) {
      const ShapesOnly m(w ? with : own);
      std::vector<std::unique_ptr<LayerKv>> kv = make_cache(m, *arm, N, 64);
      ASSERT_EQ(kv.size(), m.info().layers.size());
      std::vector<float> k128(static_cast<size_t>(64) * 128, 0.5f);
      for (uint32_t pos0 = 0; pos0 < N; pos0 += 64) {
        const uint32_t n = std::min(64u, N - pos0);
        for (size_t i = 0; i < kv.size(); ++i) {
          const bool wide = m.info().layers[i].head_dim == 512;
          const float* k = wide ? &d.k[static_cast<size_t>(pos0) * 512] : k128.data();
          const float* v = wide ? &d.v[static_cast<size_t>(pos0) * 512] : k128.data();
          kv[i]->begin_ubatch(pos0, n);
          kv[i]->store(pos0, n, k, v);  // dropped by a shared layer
        }
      }
      const LayerBits b = cache_bits(m, kv);
      bits[w][0] = b.occupied;
      bits[w][1] = b.allocated;
      if (!w) continue;
      for (size_t i = 2; i < 4; ++i) {
        EXPECT_EQ(dynamic_cast<InspectableKv*>(kv[i].get()), nullptr);  // no rows to inspect
        EXPECT_EQ(kv[i]->bits().occupied, 0.0);
        EXPECT_EQ(kv[i]->bits().allocated, 0.0);
        EXPECT_EQ(kv[i]->decode_run(N, 7), 7u);
        std::vector<float> q(static_cast<size_t>(4) * 512), out(q.size());
        EXPECT_THROW(kv[i]->attend(N - 1, 1, q.data(), 1.0f, out.data()), std::logic_error);
      }
    }
    EXPECT_GT(bits[0][0], 0.0);
    EXPECT_EQ(bits[1][0], bits[0][0]);
    EXPECT_EQ(bits[1][1], bits[0][1]);
  }
  LayerShape bad = shape(512, 4, 1, N, 0, 3);
  for (const int32_t src : {3, 7}) {
    bad.kv_source = src;
    EXPECT_THROW(make_arm("f16")->make_layer(bad), std::invalid_argument) << src;
  }
}

// wide=L: those full-attention layers at 4/4 scalar, the others at the arm's widths; a layer
// the model lacks (or a sliding one) is refused by check_layers.
TEST(ArmTier, WideLayersRunAt44) {
  auto arm = make_arm("sj:3/2t:wide=11");
  std::vector<LayerShape> shapes;
  std::vector<std::unique_ptr<LayerKv>> layers;
  for (uint32_t l = 0; l < 18; ++l) {
    shapes.push_back(shape(128, 2, 1, 256, (l + 1) % 6 == 0 ? 0 : 64, l));
    layers.push_back(arm->make_layer(shapes.back()));
  }
  arm->check_layers(shapes);
  for (auto& l : layers) l->begin_ubatch(0, 1);
  EXPECT_EQ(inspect(layers[5])->storage_name().rfind("sj:3/2t:", 0), 0u);
  EXPECT_EQ(inspect(layers[11])->storage_name().rfind("sj:4/4:", 0), 0u);
  EXPECT_EQ(inspect(layers[17])->storage_name().rfind("sj:3/2t:", 0), 0u);
  EXPECT_THROW(make_arm("sj:3/2t:wide=7")->check_layers(shapes), std::invalid_argument);    // sliding
  EXPECT_THROW(make_arm("sj:3/2t:layers=40")->check_layers(shapes), std::invalid_argument);  // absent
  EXPECT_THROW(make_arm("sj:3/2t:wide=5+5"), std::invalid_argument);
  EXPECT_NE(arm_engine_settings("sj:3/2t:wide=11").find("layer 11 at 4/4 scalar"), std::string::npos);
}

// kmean=sink: keys stored less their per-head mean (from the first sink keys, f16), which
// attention does not see: the fused output still matches attention over the decoded rows
// (mean added back) and over the codec's own rows. On keys that sit mostly along one mean
// vector (as Gemma 3's do), the stored rows lose several times less of K than without it.
TEST(ArmExtensions, KMeanSubtractionIsInvisibleToAttentionAndCutsTheKeyError) {
  const uint32_t N = 700;
  Data d = make_data(N, 128, 4, 2, 53);
  std::vector<float> mean(2 * 128);
  XorShift64 rng(7);
  for (float& m : mean) m = static_cast<float>(static_cast<int32_t>(rng.next() % 41u) - 20);  // |mean| >> the rows' spread
  for (uint32_t p = 0; p < N; ++p)
    for (uint32_t i = 0; i < 2 * 128; ++i) d.k[static_cast<size_t>(p) * 256 + i] += mean[i];
  double err[2] = {0, 0};
  for (int with = 0; with < 2; ++with) {
    const std::string spec = with ? "sj:4/4:tail=128:kmean=sink" : "sj:4/4:tail=128";
    SCOPED_TRACE(spec);
    const RunResult r = run_arm(spec, d, N, 64, {2, 10});
    EXPECT_LE(r.max_err, 2e-5 * r.vmax + 1e-6);
    EXPECT_LE(r.max_err_codec, 2e-5 * r.vmax + 1e-6);
    const InspectableKv* kv = dynamic_cast<const InspectableKv*>(r.layer.get());
    std::vector<float> k(128), v(128);
    for (uint32_t h = 0; h < 2; ++h)
      for (uint32_t p = 0; p < N; ++p) {
        kv->decode_row(h, p, k.data(), v.data());
        for (uint32_t c = 0; c < 128; ++c) {
          const double e = k[c] - d.k[(static_cast<size_t>(p) * 2 + h) * 128 + c];
          err[with] += e * e;
        }
      }
    EXPECT_EQ(kv->storage_name().find(":kmean=sink") != std::string::npos, with == 1);
    EXPECT_GT(kv->bits().occupied, 0.0);
  }
  EXPECT_LT(err[1] * 3.0, err[0]) << "K squared error without " << err[0] << ", with kmean " << err[1];
}

// exact=k|v serves that side as f16 rows (the other from the codec, bit for bit the plain
// arm's); layers=A+B compresses only those layers.
TEST(ArmExtensions, ExactSideAndLayerSelection) {
  const uint32_t N = 700;
  const Data d = make_data(N, 128, 4, 2, 61);
  const RunResult plain = run_arm("sj:3/2t:tail=128", d, N, 64, {});
  const auto* pk = dynamic_cast<const InspectableKv*>(plain.layer.get());
  std::vector<float> K0(static_cast<size_t>(N) * 128), V0(K0.size()), K(K0.size()), V(K0.size());
  pk->stored_rows(1, 0, N, K0.data(), V0.data());
  for (const char side : {'k', 'v'}) {
    const std::string spec = std::string("sj:3/2t:tail=128:exact=") + side;
    SCOPED_TRACE(spec);
    const RunResult r = run_arm(spec, d, N, 64, {3, 10});
    EXPECT_LE(r.max_err, 2e-5 * r.vmax + 1e-6);
    const auto* kv = dynamic_cast<const InspectableKv*>(r.layer.get());
    kv->stored_rows(1, 0, N, K.data(), V.data());
    const std::vector<float>& codec = side == 'k' ? V : K;
    const std::vector<float>& codec0 = side == 'k' ? V0 : K0;
    EXPECT_EQ(0, std::memcmp(codec.data(), codec0.data(), codec.size() * sizeof(float)));
    const std::vector<float>& ex = side == 'k' ? K : V;
    const std::vector<float>& src = side == 'k' ? d.k : d.v;
    for (uint32_t p = 0; p < N; p += 13) {
      std::vector<float> row(src.begin() + (static_cast<size_t>(p) * 2 + 1) * 128, src.begin() + (static_cast<size_t>(p) * 2 + 2) * 128);
      hadamard_blocks(row.data(), 128, kv->k_rotation());
      for (uint32_t c = 0; c < 128; ++c) ASSERT_EQ(ex[static_cast<size_t>(p) * 128 + c], f16_to_f32(f32_to_f16(row[c]))) << p;
    }
  }
  const auto arm = make_arm("sj:4/4:layers=5+17");
  EXPECT_EQ(inspect(arm->make_layer(shape(128, 4, 2, 512, 0, 11)))->storage_name(), "f16");
  EXPECT_NE(inspect(arm->make_layer(shape(128, 4, 2, 512, 0, 17)))->storage_name(), "f16");
  for (const char* bad : {"sj:4/4:exact=x", "sj:4/4:kmean=mean", "sj:4/4:layers=5+5", "kvarn:4/4:kmean=sink", "sj:4/4:layers=a"})
    EXPECT_THROW(make_arm(bad), std::invalid_argument) << bad;
}

TEST(ArmAttention, SlidingWindowIsHonoured) {
  const uint32_t N = 320, W = 48;
  const Data d = make_data(N, 64, 2, 1, 5);
  const RunResult r = run_arm("f16", d, N, 64, {0, 2, 4}, W);
  EXPECT_LE(r.max_err, 2e-5 * r.vmax + 1e-6);
  // The window changes the answer: the same arm without it differs.
  const RunResult full = run_arm("f16", d, N, 64, {4}, 0);
  std::vector<float> a(64 * 2 * 64), b(a.size());
  r.layer->attend(256, 64, &d.q[256 * 2 * 64], 0.125f, a.data());
  full.layer->attend(256, 64, &d.q[256 * 2 * 64], 0.125f, b.data());
  EXPECT_NE(a, b);
}

std::vector<float> run_outputs(const std::string& spec, const Data& d, uint32_t N, uint32_t ub, uint32_t window = 0) {
  auto layer = make_arm(spec)->make_layer(shape(d.D, d.H, d.Hkv, N, window));
  std::vector<float> all(static_cast<size_t>(N) * d.H * d.D);
  for (uint32_t pos0 = 0; pos0 < N; pos0 += ub) {
    const uint32_t n = std::min(ub, N - pos0);
    layer->begin_ubatch(pos0, n);
    layer->store(pos0, n, &d.k[static_cast<size_t>(pos0) * d.Hkv * d.D], &d.v[static_cast<size_t>(pos0) * d.Hkv * d.D]);
    layer->attend(pos0, n, &d.q[static_cast<size_t>(pos0) * d.H * d.D], 0.088f, &all[static_cast<size_t>(pos0) * d.H * d.D]);
  }
  return all;
}

// One token a ubatch reads f32, f16 and bf16 rows in place (no decoded tile) on any number of
// threads; 64 a ubatch decodes tiles: the same bits.
TEST(ArmAttention, UbatchOfOneEqualsUbatchOf64) {
  const Data d = make_data(300, 128, 4, 2, 13);
  const int saved = omp_get_max_threads();
  for (const std::string spec : {"f32", "f16", "bf16"}) {
    SCOPED_TRACE(spec);
    const auto b = run_outputs(spec, d, 300, 64);
    // Also with a window: tiles sit on absolute positions.
    const auto e = run_outputs(spec, d, 300, 64, 100);
    for (int threads : {1, 2}) {
      omp_set_num_threads(threads);
      const auto a = run_outputs(spec, d, 300, 1);
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << threads << " threads";
      const auto c = run_outputs(spec, d, 300, 1, 100);
      EXPECT_EQ(std::memcmp(c.data(), e.data(), c.size() * sizeof(float)), 0) << threads << " threads, window";
    }
    omp_set_num_threads(saved);
  }
}

TEST(ArmAttention, SameBytesForOneAndTwoThreads) {
  const Data d = make_data(512, 128, 4, 2, 17);
  for (const std::string spec : {"q4_0:rot", "sj:3/2t:tail=128", "kvarn:4/4:tail=0", "f16"}) {
    SCOPED_TRACE(spec);
    const int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    const auto a = run_outputs(spec, d, 512, 64);
    omp_set_num_threads(2);
    const auto b = run_outputs(spec, d, 512, 64);
    omp_set_num_threads(saved);
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
  }
}

// make_arm's sealer source (Device::sealers in the tools) gives each SJ / KVarN layer cache its
// own sealer, which then seals every commit; the CPU sealer stands in for the GPU here.
TEST(ArmAttention, SealerSourceSealsEveryCommitWithTheSameBytes) {
  const Data d = make_data(512, 128, 4, 2, 19);
  for (const std::string spec : {"sj:3/2t:tail=128", "kvarn:4/4:tail=0"}) {
    SCOPED_TRACE(spec);
    size_t made = 0, calls = 0;
    const SealerSource sealers = [&]() -> RecordSealer {
      ++made;
      return [&](const RecordLayout& l, const SealOptions& so, size_t n, const uint16_t* const* k,
                 const uint16_t* const* v, size_t stride, uint8_t* out) {
        ++calls;
        return seal_records(l, so, n, k, v, stride, out);
      };
    };
    const auto plain = run_outputs(spec, d, 512, 64);
    auto layer = make_arm(spec, sealers)->make_layer(shape(d.D, d.H, d.Hkv, 512));
    std::vector<float> all(static_cast<size_t>(512) * d.H * d.D);
    for (uint32_t pos0 = 0; pos0 < 512; pos0 += 64) {
      layer->begin_ubatch(pos0, 64);
      layer->store(pos0, 64, &d.k[static_cast<size_t>(pos0) * d.Hkv * d.D], &d.v[static_cast<size_t>(pos0) * d.Hkv * d.D]);
      layer->attend(pos0, 64, &d.q[static_cast<size_t>(pos0) * d.H * d.D], 0.088f, &all[static_cast<size_t>(pos0) * d.H * d.D]);
    }
    EXPECT_EQ(made, 1u);
    EXPECT_GT(calls, 0u);
    EXPECT_EQ(std::memcmp(plain.data(), all.data(), all.size() * sizeof(float)), 0);
  }
}

TEST(ArmAttention, QuantizedArmsAreCloseToF32) {
  // Sanity of the formats end to end: the attention output of every arm stays near f32's
  // (relative RMS), tighter for more bits.
  const uint32_t N = 640;
  const Data d = make_data(N, 128, 4, 2, 19);
  const auto ref = run_outputs("f32", d, N, 64);
  auto rel = [&](const std::string& spec) {
    const auto o = run_outputs(spec, d, N, 64);
    double num = 0, den = 0;
    for (size_t i = 0; i < o.size(); ++i) {
      num += (o[i] - ref[i]) * static_cast<double>(o[i] - ref[i]);
      den += ref[i] * static_cast<double>(ref[i]);
    }
    return std::sqrt(num / den);
  };
  const double e_f16 = rel("f16"), e_q8 = rel("q8_0"), e_q4 = rel("q4_0"), e_q4r = rel("q4_0:rot"), e_sj = rel("sj:4/4:tail=128");
  EXPECT_LT(e_f16, 1e-3);
  EXPECT_LT(e_q8, 2e-2);
  EXPECT_LT(e_q8, e_q4);
  EXPECT_LT(e_q4r, e_q4) << "rotation should help q4_0 on outlier channels";
  EXPECT_LT(e_sj, 0.2);
  for (const std::string spec : {"q4_1", "q5_0", "q5_1", "iq4_nl", "turbo3", "turbo4", "tq5_0", "tq6_0", "bf16", "sj:3/2t:tail=128"})
    EXPECT_LT(rel(spec), 0.3) << spec;
}

TEST(ArmAttention, OversizedUbatchIsRefused) {
  auto layer = make_arm("sj:4/4")->make_layer(shape(128, 2, 1, 1024));  // n_ubatch 64
  EXPECT_THROW(layer->begin_ubatch(0, 65), std::runtime_error);
  EXPECT_THROW(layer->begin_ubatch(1000, 64), std::runtime_error);  // past n_ctx
}

TEST(ArmAttention, NonFiniteRowsAreRefused) {
  for (const std::string spec : {"q4_0", "f16", "sj:4/4"}) {
    auto layer = make_arm(spec)->make_layer(shape(128, 2, 1, 64));
    std::vector<float> k(128, 1.0f), v(128, 1.0f);
    k[5] = NAN;
    layer->begin_ubatch(0, 1);
    EXPECT_THROW(layer->store(0, 1, k.data(), v.data()), std::runtime_error) << spec;
  }
}

// ---------------------------------------------------------------- bits

TEST(ArmBits, BlockFormatsHandComputed) {
  const std::vector<std::pair<std::string, double>> cases = {
      {"f32", 32}, {"f16", 16}, {"bf16", 16}, {"q8_0", 8.5}, {"q4_0", 4.5}, {"q4_0:rot", 4.5}, {"q4_1", 5.0},
      {"q5_0", 5.5}, {"q5_1", 6.0}, {"iq4_nl", 4.5}, {"turbo3", 3.125}, {"turbo4", 4.125}, {"tq5_0", 5.125}, {"tq6_0", 6.125}};
  const Data d = make_data(100, 128, 2, 1, 23);
  for (const auto& c : cases) {
    SCOPED_TRACE(c.first);
    auto layer = make_arm(c.first)->make_layer(shape(128, 2, 1, 400));
    EXPECT_EQ(layer->bits().occupied, 0.0);
    layer->begin_ubatch(0, 100);
    layer->store(0, 100, d.k.data(), d.v.data());
    EXPECT_DOUBLE_EQ(layer->bits().occupied, c.second);
    EXPECT_DOUBLE_EQ(layer->bits().allocated, c.second * 4.0);  // 400 reserved over 100 stored
  }
}

TEST(ArmBits, Sj44OccupiedAtAKnownLength) {
  // sj:4/4:tail=256 (fixed tail), D = 128, 1024 positions in ubatches of 64. The last
  // policy step (pos0 = 960) seals to 128 + 128 * floor((960 - 256 - 128) / 128) = 640.
  // Bytes per head: sink 128 * 2 * 128 * 2 = 65536; body 4 records * 17920 (payload
  // 2 * 64 * 128 + scales 6 * 256) = 71680; ring 384 rows * 2 * 98 (tq6_0) = 75264.
  // 212480 bytes * 8 / (1024 * 256 values) = 6.484375 bits.
  const uint32_t N = 1024;
  const Data d = make_data(N, 128, 2, 1, 29);
  auto layer = make_arm("sj:4/4:tail=256")->make_layer(shape(128, 2, 1, N));
  for (uint32_t pos0 = 0; pos0 < N; pos0 += 64) {
    layer->begin_ubatch(pos0, 64);
    layer->store(pos0, 64, &d.k[static_cast<size_t>(pos0) * 128], &d.v[static_cast<size_t>(pos0) * 128]);
  }
  EXPECT_EQ(inspect(layer)->codec_cache()->policy().B, 640u);
  EXPECT_DOUBLE_EQ(layer->bits().occupied, 6.484375);
  EXPECT_GT(layer->bits().allocated, layer->bits().occupied);
}

// ---------------------------------------------------------------- blocked decoding, idle

// A layer decoded in blocks of decode_run's length (each block one ubatch) attends as one
// token per ubatch does, bit for bit, and bits_at gives each position the bits the stepwise
// layer had then; for arms without a journal decode_run is the whole limit.
TEST(ArmJournal, BlocksOfDecodeRunAreTheOneTokenSteps) {
  const uint32_t N = 900, P = 300, D = 128, H = 4, Hkv = 2;
  const Data d = make_data(N, D, H, Hkv, 41);
  for (const std::string spec : {"sj:4/4:G=16:sink=64:tail=32/128", "sj:3/2t:tail=128", "sj:4/4:staging=q8_0:tail=128/256:flush=1",
                                 "kvarn:4/4:tail=0", "sj:4/4:kmean=sink:exact=k:tail=128/256", "q4_0:rot", "f16"}) {
    SCOPED_TRACE(spec);
    auto arm = make_arm(spec);
    LayerShape s = shape(D, H, Hkv, N);
    s.n_ubatch = 64;
    auto one = arm->make_layer(s), blk = arm->make_layer(s);
    const size_t kv_row = static_cast<size_t>(Hkv) * D, q_row = static_cast<size_t>(H) * D;
    auto feed = [&](LayerKv& l, uint32_t pos0, uint32_t n, float* out) {
      l.begin_ubatch(pos0, n);
      l.store(pos0, n, &d.k[pos0 * kv_row], &d.v[pos0 * kv_row]);
      l.attend(pos0, n, &d.q[pos0 * q_row], 0.088f, out);
    };
    std::vector<float> a(static_cast<size_t>(N) * q_row), b(a.size());
    std::vector<LayerBits> bits(N + 1);
    for (uint32_t p = 0; p < P; p += 64) {
      const uint32_t n = std::min(64u, P - p);
      feed(*one, p, n, &a[p * q_row]);
      feed(*blk, p, n, &b[p * q_row]);
    }
    for (uint32_t p = P; p < N; ++p) {
      feed(*one, p, 1, &a[p * q_row]);
      bits[p + 1] = one->bits();
    }
    uint32_t blocks = 0, longest = 0;
    for (uint32_t p = P; p < N;) {
      const uint32_t r = blk->decode_run(p, std::min(64u, N - p));
      ASSERT_GE(r, 1u);
      feed(*blk, p, r, &b[p * q_row]);
      for (uint32_t i = 1; i <= r; ++i) {
        const LayerBits x = blk->bits_at(p + i);
        ASSERT_EQ(0, std::memcmp(&x.occupied, &bits[p + i].occupied, sizeof(double))) << "position " << p + i;
        ASSERT_EQ(0, std::memcmp(&x.allocated, &bits[p + i].allocated, sizeof(double))) << "position " << p + i;
      }
      ++blocks;
      longest = std::max(longest, r);
      p += r;
    }
    ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
    EXPECT_GT(longest, 1u);
    if (inspect(one)->codec_cache()) {
      EXPECT_EQ(inspect(one)->codec_cache()->policy().B, inspect(blk)->codec_cache()->policy().B);
      EXPECT_GT(blocks, (N - P + 63) / 64) << "no block was cut at a seal";
    } else {
      EXPECT_EQ(blocks, (N - P + 63) / 64);
    }
  }
}

// idle(keep_recent): an SJ layer seals as its policy's idle step says, and attends over the
// records after it as the codec decodes them; a layer without a journal (or a fixed tail) does
// nothing, its next outputs unchanged.
TEST(ArmJournal, IdleSealsAsThePolicySays) {
  const uint32_t N = 800, D = 128, H = 4, Hkv = 2;
  const Data d = make_data(N, D, H, Hkv, 43);
  const size_t kv_row = static_cast<size_t>(Hkv) * D, q_row = static_cast<size_t>(H) * D;
  for (const std::string spec : {"sj:4/4:tail=128/1024", "sj:3/2t:tail=128/1024", "kvarn:4/4:tail=0", "q8_0", "f32"}) {
    for (uint32_t keep : {0u, 300u}) {
      SCOPED_TRACE(spec + " keep_recent " + std::to_string(keep));
      auto arm = make_arm(spec);
      auto idle = arm->make_layer(shape(D, H, Hkv, N)), busy = arm->make_layer(shape(D, H, Hkv, N));
      idle->idle(keep);  // before any ubatch: nothing stored, nothing to do
      for (uint32_t p = 0; p < 700; p += 64)
        for (auto* l : {idle.get(), busy.get()}) {
          const uint32_t n = std::min(64u, 700 - p);
          l->begin_ubatch(p, n);
          l->store(p, n, &d.k[p * kv_row], &d.v[p * kv_row]);
        }
      const SequenceCache* c = inspect(idle) ? inspect(idle)->codec_cache() : nullptr;
      uint32_t want = 0;
      if (c) {
        JournalPolicy pol = c->policy();
        want = pol.idle(700, keep);
      }
      idle->idle(keep);
      std::vector<float> a(64 * q_row), b(a.size());
      for (auto* l : {idle.get(), busy.get()}) {
        l->begin_ubatch(700, 64);
        l->store(700, 64, &d.k[700 * kv_row], &d.v[700 * kv_row]);
      }
      idle->attend(700, 64, &d.q[700 * q_row], 0.088f, a.data());
      busy->attend(700, 64, &d.q[700 * q_row], 0.088f, b.data());
      const bool acts = c && spec.rfind("sj:", 0) == 0;
      if (!acts) {
        EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
        continue;
      }
      // The idle seal (CODEC-SPEC 8.4): keep 0 seals back to the tail, 300 keeps 300 exact.
      EXPECT_EQ(want, keep == 0 ? 128u + 128u * ((700u - 128u - 128u) / 128u) : 128u + 128u * ((700u - 300u - 128u) / 128u));
      EXPECT_GT(want, 128u);
      EXPECT_GE(c->policy().B, want);
      std::vector<double> ref;
      LayerShape s = shape(D, H, Hkv, N);
      naive_attend(*inspect(idle), s, 700, 64, &d.q[700 * q_row], 0.088f, ref);
      double err = 0, vmax = 0;
      for (size_t i = 0; i < a.size(); ++i) err = std::max(err, std::fabs(a[i] - ref[i]));
      for (const float x : d.v) vmax = std::max(vmax, static_cast<double>(std::fabs(x)));
      EXPECT_LE(err, 2e-5 * vmax + 1e-6);  // run_arm's tolerance: rounding only
      EXPECT_NE(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << "the idle seal changed nothing";
    }
  }
}

TEST(ArmTier, EdgeLayersRunAt44) {
  auto arm = make_arm("sj:3/3t:tier=edge");
  std::vector<std::unique_ptr<LayerKv>> layers;
  for (uint32_t l = 0; l < 12; ++l) {
    LayerShape s = shape(128, 2, 1, 256, (l % 6 == 5) ? 0 : 64, l);
    layers.push_back(arm->make_layer(s));
  }
  for (auto& l : layers) l->begin_ubatch(0, 1);
  EXPECT_EQ(inspect(layers[0])->storage_name(), "f16");  // sliding
  EXPECT_EQ(inspect(layers[5])->storage_name().rfind("sj:4/4:", 0), 0u);   // first full layer
  EXPECT_EQ(inspect(layers[11])->storage_name().rfind("sj:4/4:", 0), 0u);  // last full layer
  auto mid = make_arm("sj:3/3t:tier=edge");
  std::vector<std::unique_ptr<LayerKv>> three;
  for (uint32_t l : {2u, 5u, 8u}) three.push_back(mid->make_layer(shape(128, 2, 1, 256, 0, l)));
  for (auto& l : three) l->begin_ubatch(0, 1);
  EXPECT_EQ(inspect(three[1])->storage_name().rfind("sj:3/3t:", 0), 0u);  // middle layer keeps 3/3t
  EXPECT_EQ(inspect(three[0])->storage_name().rfind("sj:4/4:", 0), 0u);
  // A new edge layer after the tiers were chosen is a caller bug, not a silent mis-tiering;
  // the same layers again (a second sequence) are fine and tier the same way.
  EXPECT_THROW(mid->make_layer(shape(128, 2, 1, 256, 0, 11)), std::logic_error);
  auto again = mid->make_layer(shape(128, 2, 1, 256, 0, 5));
  again->begin_ubatch(0, 1);
  EXPECT_EQ(inspect(again)->storage_name().rfind("sj:3/3t:", 0), 0u);
}

}  // namespace
}  // namespace replay
}  // namespace sjkv

// ---- the blocked tile step of the fused attention ------------------------------------------

namespace {

struct TileCase {
  uint32_t D, n, nb;
  bool ragged;  // per-query row ranges as on a diagonal tile and at a window's start
};

// The case's queries [nb][D] and two tiles of K and V rows [2 n][D].
void tile_inputs(const TileCase& c, std::vector<float>& q, std::vector<float>& k, std::vector<float>& v) {
  std::mt19937 rng(c.D * 131 + c.n * 7 + c.nb);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  q.resize(static_cast<size_t>(c.nb) * c.D);
  k.resize(2 * static_cast<size_t>(c.n) * c.D);
  v.resize(k.size());
  for (auto& x : q) x = nd(rng);
  for (auto& x : k) x = 3.0f * nd(rng);
  for (auto& x : v) x = nd(rng);
}

// Query g's rows of a tile; ragged: the end steps back by one per query, the start forward every third.
void tile_range(const TileCase& c, uint32_t g, uint32_t& lo, uint32_t& hi) {
  lo = c.ragged ? std::min(c.n - 1, g / 3) : 0;
  hi = c.ragged ? std::max(lo + 1, c.n - std::min(c.n, (c.nb - 1 - g) % c.n)) : c.n;
}

// Runs two tiles through the step for nb queries at once, or one query at a time, with the
// portable or the dispatched (AVX2 where present) build; returns acc, m and s of every query.
std::vector<float> run_tiles(const TileCase& c, bool blocked, bool portable) {
  std::vector<float> q, k, v;
  tile_inputs(c, q, k, v);
  std::vector<float> acc(static_cast<size_t>(c.nb) * c.D, 0.0f), m(c.nb, -INFINITY), s(c.nb, 0.0f);
  std::vector<float> scratch(static_cast<size_t>(sjkv::replay::detail::kMaxBlock) * sjkv::replay::detail::kTileRows);
  for (uint32_t t = 0; t < 2; ++t) {
    const float* kt = k.data() + static_cast<size_t>(t) * c.n * c.D;
    const float* vt = v.data() + static_cast<size_t>(t) * c.n * c.D;
    for (uint32_t q0 = 0; q0 < c.nb; q0 += blocked ? c.nb : 1) {
      sjkv::replay::detail::TileBlock b;
      b.nq = blocked ? c.nb : 1;
      for (uint32_t j = 0; j < b.nq; ++j) {
        tile_range(c, q0 + j, b.lo[j], b.hi[j]);
      }
      b.q = q.data() + static_cast<size_t>(q0) * c.D;
      b.acc = acc.data() + static_cast<size_t>(q0) * c.D;
      b.m = m.data() + q0;
      b.s = s.data() + q0;
      const float scale = 1.0f / std::sqrt(static_cast<float>(c.D));
      if (portable) sjkv::replay::detail::tile_block_update_portable(b, kt, vt, c.D, scale, scratch.data());
      else sjkv::replay::detail::tile_block_update(b, kt, vt, c.D, scale, scratch.data());
    }
  }
  acc.insert(acc.end(), m.begin(), m.end());
  acc.insert(acc.end(), s.begin(), s.end());
  return acc;
}

// The same step written out for one query in doubles: where the blocked build's floats
// should be, to rounding.
std::vector<double> tiles_in_double(const TileCase& c) {
  std::vector<float> q, k, v;
  tile_inputs(c, q, k, v);
  std::vector<double> out;
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.D));
  for (uint32_t g = 0; g < c.nb; ++g) {
    uint32_t lo, hi;
    tile_range(c, g, lo, hi);
    std::vector<double> sc, o(c.D, 0.0);
    std::vector<const float*> vs;
    for (uint32_t t = 0; t < 2; ++t)
      for (uint32_t p = lo; p < hi; ++p) {
        const float* kr = k.data() + (static_cast<size_t>(t) * c.n + p) * c.D;
        double d = 0;
        for (uint32_t i = 0; i < c.D; ++i) d += static_cast<double>(q[g * c.D + i]) * kr[i];
        sc.push_back(d * scale);
        vs.push_back(v.data() + (static_cast<size_t>(t) * c.n + p) * c.D);
      }
    const double mx = *std::max_element(sc.begin(), sc.end());
    double den = 0;
    for (size_t r = 0; r < sc.size(); ++r) {
      const double w = std::exp(sc[r] - mx);
      den += w;
      for (uint32_t d = 0; d < c.D; ++d) o[d] += w * vs[r][d];
    }
    for (uint32_t d = 0; d < c.D; ++d) out.push_back(o[d] / den);
  }
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

// The AVX2 build equals the portable one bit for bit, and a query's floats do not depend on
// the block it is computed in (decode uses blocks of one, prefill a GQA group).
TEST(AttendTile, BuildsAndBlockingGiveTheSameBits) {
  if (!sjkv::replay::detail::tile_block_uses_avx2()) std::printf("no AVX2 here: the portable build only\n");
  for (const TileCase c : {TileCase{256, 256, 4, false}, TileCase{256, 256, 64, true}, TileCase{64, 256, 3, false},
                           TileCase{64, 37, 8, true}, TileCase{40, 9, 5, true}, TileCase{128, 1, 1, false},
                           TileCase{256, 200, 2, false}, TileCase{128, 256, 48, true}, TileCase{96, 17, 13, true},
                           TileCase{64, 40, 40, true}}) {  // the last: ranges with no row in common
    const std::vector<float> ref = run_tiles(c, true, true);
    EXPECT_TRUE(same_bits(ref, run_tiles(c, true, false))) << "D " << c.D << " n " << c.n << " nb " << c.nb;
    EXPECT_TRUE(same_bits(ref, run_tiles(c, false, false))) << "D " << c.D << " n " << c.n << " nb " << c.nb;
    EXPECT_TRUE(same_bits(ref, run_tiles(c, false, true))) << "D " << c.D << " n " << c.n << " nb " << c.nb;
    // And the floats are the attention they stand for: acc / s against doubles.
    const std::vector<double> want = tiles_in_double(c);
    double worst = 0;
    for (uint32_t g = 0; g < c.nb; ++g)
      for (uint32_t d = 0; d < c.D; ++d) {
        const double got = ref[static_cast<size_t>(g) * c.D + d] / ref[static_cast<size_t>(c.nb) * c.D + c.nb + g];
        worst = std::max(worst, std::fabs(got - want[static_cast<size_t>(g) * c.D + d]));
      }
    EXPECT_LT(worst, 1e-4) << "D " << c.D << " n " << c.n << " nb " << c.nb;
  }
}

// The tile step over rows read in place (f16 and bf16 rows, a row stride wider than a row)
// gives the bits of the same values decoded into an f32 tile, on both builds.
TEST(AttendTile, RowsInPlaceEqualADecodedTile) {
  for (const uint32_t type : {sjkv::replay::kGgmlF16, sjkv::replay::kGgmlBF16})
    for (const TileCase c : {TileCase{256, 256, 4, false}, TileCase{128, 100, 3, true}, TileCase{64, 256, 2, false},
                             TileCase{40, 9, 5, true}, TileCase{96, 17, 13, true}}) {
      std::vector<float> q, k, v;
      tile_inputs(c, q, k, v);
      // Stored rows: 2 bytes a value, rows D + 8 values apart (a second KV head between them).
      const size_t stride = 2 * (static_cast<size_t>(c.D) + 8);
      std::vector<uint8_t> ks(k.size() / c.D * stride), vs(ks.size());
      std::vector<float> kd(k.size()), vd(v.size());  // the decoded tile: the stored values as floats
      for (size_t r = 0; r < k.size() / c.D; ++r)
        for (uint32_t i = 0; i < c.D; ++i)
          for (int side = 0; side < 2; ++side) {
            const float x = (side ? v : k)[r * c.D + i];
            uint16_t h;
            float back;
            if (type == sjkv::replay::kGgmlF16) {
              h = sjkv::f32_to_f16(x);
              back = sjkv::f16_to_f32(h);
            } else {
              uint32_t u;
              std::memcpy(&u, &x, 4);
              h = static_cast<uint16_t>(u >> 16);  // truncation is a bf16 value as good as any
              u = static_cast<uint32_t>(h) << 16;
              std::memcpy(&back, &u, 4);
            }
            uint8_t* dst = (side ? vs : ks).data() + r * stride + 2 * i;
            dst[0] = static_cast<uint8_t>(h & 0xff);
            dst[1] = static_cast<uint8_t>(h >> 8);
            (side ? vd : kd)[r * c.D + i] = back;
          }
      for (const bool portable : {true, false}) {
        std::vector<float> out[2];
        for (int in_place = 0; in_place < 2; ++in_place) {
          std::vector<float> acc(static_cast<size_t>(c.nb) * c.D, 0.0f), m(c.nb, -INFINITY), s(c.nb, 0.0f);
          std::vector<float> scratch(static_cast<size_t>(sjkv::replay::detail::kMaxBlock) * sjkv::replay::detail::kTileRows);
          for (uint32_t t = 0; t < 2; ++t) {
            sjkv::replay::detail::TileBlock b;
            b.nq = c.nb;
            for (uint32_t j = 0; j < b.nq; ++j) tile_range(c, j, b.lo[j], b.hi[j]);
            b.q = q.data();
            b.acc = acc.data();
            b.m = m.data();
            b.s = s.data();
            const size_t r0 = static_cast<size_t>(t) * c.n;
            const sjkv::replay::detail::TileRows rows =
                in_place ? sjkv::replay::detail::TileRows{type, ks.data() + r0 * stride, vs.data() + r0 * stride, stride}
                         : sjkv::replay::detail::TileRows::f32(kd.data() + r0 * c.D, vd.data() + r0 * c.D, c.D);
            if (portable) sjkv::replay::detail::tile_block_update_portable(b, rows, c.D, 0.0625f, scratch.data());
            else sjkv::replay::detail::tile_block_update(b, rows, c.D, 0.0625f, scratch.data());
          }
          acc.insert(acc.end(), m.begin(), m.end());
          acc.insert(acc.end(), s.begin(), s.end());
          out[in_place] = acc;
        }
        EXPECT_TRUE(same_bits(out[0], out[1])) << "type " << type << " D " << c.D << " n " << c.n << " nb " << c.nb
                                               << (portable ? " portable" : " dispatched");
      }
    }
}

// exp_nonpos against the double-precision exponential: within 2 float ulps on [-87, 0], 0 below.
TEST(AttendTile, ExpNonposIsAccurate) {
  float worst = 0.0f;
  for (float x = 0.0f; x > -87.0f; x = x * 1.0001f - 1e-4f) {
    const double want = std::exp(static_cast<double>(x));
    const float got = sjkv::replay::detail::exp_nonpos(x);
    const float ulp = std::nextafter(static_cast<float>(want), INFINITY) - static_cast<float>(want);
    worst = std::max(worst, static_cast<float>(std::fabs(got - want) / ulp));
  }
  EXPECT_LT(worst, 2.0f);
  EXPECT_EQ(sjkv::replay::detail::exp_nonpos(0.0f), 1.0f);
  EXPECT_EQ(sjkv::replay::detail::exp_nonpos(-88.0f), 0.0f);
  EXPECT_EQ(sjkv::replay::detail::exp_nonpos(-INFINITY), 0.0f);
}
