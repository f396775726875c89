// The loader and the building blocks of every architecture's forward pass (graph.h).
#include "graph.h"

#include <omp.h>
#include <sys/stat.h>

#include <algorithm>
#include <numeric>
#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "sjkv/fp16.h"
#include "sjkv/io/model_geometry.h"
#include "sjkv/io/paths.h"
#include "sjkv/parallel.h"
#include "sjkv/replay/dequant.h"

namespace sjkv {
namespace replay {
namespace graph {
namespace {

std::string dims_str(const std::vector<uint64_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

float gelu_tanh(float x) {
  const double xd = x;
  return static_cast<float>(0.5 * xd * (1.0 + std::tanh(0.7978845608028654 * (xd + 0.044715 * xd * xd * xd))));
}
// ggml's table: gelu of each fp16 value, computed in f32 as ggml_gelu_f32 does, stored as fp16.
float gelu_fp16(float x) {
  static const std::vector<uint16_t> table = [] {
    std::vector<uint16_t> t(65536);
    for (uint32_t i = 0; i < 65536; ++i) {
      const float f = f16_to_f32(static_cast<uint16_t>(i));
      const float a = 0.79788456080286535587989211986876f * f * (1.0f + 0.044715f * f * f);
      t[i] = f32_to_f16(0.5f * f * (1.0f + std::tanh(a)));
    }
    return t;
  }();
  if (x <= -10.0f) return 0.0f;
  if (x >= 10.0f) return x;
  return f16_to_f32(table[f32_to_f16(x)]);
}
float silu(float x) { return static_cast<float>(static_cast<double>(x) / (1.0 + std::exp(-static_cast<double>(x)))); }
float sigmoid(float x) { return static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(x)))); }
// gpt-oss's clamped SwiGLU as ggml's swiglu_oai computes it, in f32 (alpha 1.702, limit 7:
// llama.cpp's constants for LLM_FFN_SWIGLU_OAI_MOE).
float swiglu_oai(float gate, float up) {
  const float x = std::min(gate, 7.0f);
  const float y = std::min(std::max(up, -7.0f), 7.0f);
  return x / (1.0f + std::exp(1.702f * (-x))) * (y + 1.0f);
}
// One row r of a value head's state, one token of the delta rule: r = decay r; then
// r += ((v - r.k) beta) k; returns r.q. Each dot in one fixed order (eight lanes, lane j the
// products of i = j, j + 8, ..., the lanes summed in a fixed tree, the rest in order), fused
// with the pass that writes r; without contraction or reassociation both clones give the same
// bits.
__attribute__((target_clones("avx2", "default"))) float delta_row(float* r, const float* k, const float* q, float decay,
                                                                   float v, float beta, uint32_t n) {
  const uint32_t n8 = n / 8 * 8;
  float l[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (uint32_t i = 0; i < n8; i += 8)
    for (uint32_t j = 0; j < 8; ++j) {
      r[i + j] = r[i + j] * decay;
      l[j] = l[j] + r[i + j] * k[i + j];
    }
  float s = ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
  for (uint32_t i = n8; i < n; ++i) {
    r[i] = r[i] * decay;
    s = s + r[i] * k[i];
  }
  const float delta = (v - s) * beta;
  float m[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (uint32_t i = 0; i < n8; i += 8)
    for (uint32_t j = 0; j < 8; ++j) {
      r[i + j] = r[i + j] + delta * k[i + j];
      m[j] = m[j] + r[i + j] * q[i + j];
    }
  float o = ((m[0] + m[4]) + (m[2] + m[6])) + ((m[1] + m[5]) + (m[3] + m[7]));
  for (uint32_t i = n8; i < n; ++i) {
    r[i] = r[i] + delta * k[i];
    o = o + r[i] * q[i];
  }
  return o;
}

// ggml's softplus: the identity above 20.
float softplus(float x) { return x > 20.0f ? x : static_cast<float>(std::log1p(std::exp(static_cast<double>(x)))); }

}  // namespace

GraphModel::GraphModel(const std::string& path, const ArchTable& table, const LoadOptions& opt)
    : f_(GgufFile::open(path)), table_(table), opt_(opt) {}

int GraphModel::threads() const { return opt_.n_threads > 0 ? opt_.n_threads : omp_get_max_threads(); }

const GgufTensorInfo* GraphModel::optional(const std::string& name, std::vector<uint64_t> dims) const {
  const GgufTensorInfo* t = f_.find_tensor(name);
  if (!t) return nullptr;
  if (t->dims != dims) fail("tensor '" + name + "' has shape " + dims_str(t->dims) + ", expected " + dims_str(dims));
  if (!dequant_supported(t->type))
    fail(std::string("tensor '") + name + "' has type " + t->type_name() + ", which sjkv-replay cannot dequantize");
  return t;
}

const GgufTensorInfo& GraphModel::need(const std::string& name, std::vector<uint64_t> dims) const {
  const GgufTensorInfo* t = optional(name, dims);
  if (!t) fail("missing tensor '" + name + "'");
  return *t;
}

std::vector<float> GraphModel::load_vec(const GgufTensorInfo& t) const {
  std::vector<float> v(t.n_elements);
  dequantize_row(t.type, f_.tensor_data(t), v.data(), v.size());
  for (float x : v)
    if (!std::isfinite(x)) fail("tensor '" + t.name + "' holds a non-finite value");
  weight_bytes_ += v.size() * 4;
  return v;
}

Mat GraphModel::load_mat(const GgufTensorInfo& t) {
  const uint8_t* base = f_.tensor_data(t);
  const Mat m = WeightMatrix::of(t.type, t.dims[1], t.dims[0], base);
  if (m.bytes() != t.n_bytes) fail("tensor '" + t.name + "' has " + std::to_string(t.n_bytes) + " bytes, expected " + std::to_string(m.bytes()));
  // Checked once here so that no product meets a non-finite weight; rows in parallel.
  int bad = 0;
#pragma omp parallel for schedule(static) num_threads(threads()) reduction(| : bad)
  for (long r = 0; r < static_cast<long>(m.rows); ++r)
    if (!dequant_finite(t.type, base + static_cast<size_t>(r) * m.row_bytes, m.cols)) bad = 1;
  if (bad) fail("tensor '" + t.name + "' holds a non-finite value");
  weight_bytes_ += m.bytes();
  return m;
}

uint64_t GraphModel::dim(Dim d, const Layer* L) const {
  const uint64_t D = L ? L->head_dim : info_.head_dim, Hkv = L ? L->n_head_kv : info_.n_head_kv;
  switch (d) {
    case Dim::embd: return info_.n_embd;
    case Dim::head: return D;
    case Dim::q: return uint64_t(info_.n_head) * D;
    case Dim::kv: return Hkv * D;
    case Dim::qkv: return (info_.n_head + 2 * Hkv) * D;
    case Dim::ff: return L ? L->n_ff : info_.n_ff;
    case Dim::ff2: return uint64_t(2) * info_.n_ff;
    case Dim::q2: return uint64_t(2) * info_.n_head * D;
    case Dim::ssm_conv: return ssm_.conv_dim();
    case Dim::ssm_inner: return ssm_.inner;
    case Dim::ssm_heads: return ssm_.v_heads;
    case Dim::ssm_state: return ssm_.state;
    case Dim::ssm_kernel: return ssm_.kernel;
    case Dim::ff_exp: return moe_.ff_exp;
    case Dim::ff_shexp: return moe_.ff_shexp;
    case Dim::n_expert: return moe_.n_expert;
    case Dim::ff2_exp: return uint64_t(2) * moe_.ff_exp;
    case Dim::pe: return n_pe_;
    case Dim::heads: return info_.n_head;
    case Dim::one: return 1;
  }
  return 0;
}

std::vector<Mat> GraphModel::load_experts(const GgufTensorInfo& t) {
  // [in, out, n_expert]: checked and counted as one [n_expert * out][in] matrix, then one
  // view per expert.
  GgufTensorInfo flat = t;
  flat.dims = {t.dims[0], t.dims[1] * t.dims[2]};
  const Mat all = load_mat(flat);
  std::vector<Mat> out;
  for (uint64_t e = 0; e < t.dims[2]; ++e) {
    Mat m = all;
    m.rows = t.dims[1];
    m.data = all.data + e * t.dims[1] * all.row_bytes;
    out.push_back(m);
  }
  return out;
}

// The Gated DeltaNet's shape, as llama.cpp reads it for qwen35 / qwen35moe.
void GraphModel::load_hybrid(const std::string& p, const ModelGeometry& g) {
  auto key = [&](const char* k, uint64_t hi) {
    const std::string name = p + k;
    if (!f_.has(name)) fail("missing key '" + name + "' (a hybrid model's recurrent layers need it)");
    const uint64_t v = f_.get_uint(name);
    if (v == 0 || v > hi) fail("key '" + name + "' is " + std::to_string(v) + ", outside [1, " + std::to_string(hi) + "]");
    return static_cast<uint32_t>(v);
  };
  bool any = false;
  for (const LayerInfo& li : g.layers) any = any || li.kind == LayerKind::recurrent;
  if (!any) return;
  ssm_.kernel = key("ssm.conv_kernel", 64);
  ssm_.state = key("ssm.state_size", 1024);
  ssm_.k_heads = key("ssm.group_count", 4096);
  ssm_.v_heads = key("ssm.time_step_rank", 4096);
  ssm_.inner = key("ssm.inner_size", 1u << 20);
  if (uint64_t(ssm_.v_heads) * ssm_.state != ssm_.inner)
    fail(p + "ssm.inner_size " + std::to_string(ssm_.inner) + " is not ssm.time_step_rank x ssm.state_size (" +
         std::to_string(ssm_.v_heads) + " x " + std::to_string(ssm_.state) + ")");
  if (ssm_.v_heads % ssm_.k_heads != 0)
    fail(p + "ssm.time_step_rank " + std::to_string(ssm_.v_heads) + " is not a multiple of ssm.group_count " +
         std::to_string(ssm_.k_heads));
}

void GraphModel::load_moe(const std::string& p) {
  auto key = [&](const std::string& k, uint64_t dflt, uint64_t hi) {
    const uint64_t v = f_.has(p + k) ? f_.get_uint(p + k) : dflt;
    if (v == 0 || v > hi) fail("key '" + p + k + "' is " + std::to_string(v) + ", outside [1, " + std::to_string(hi) + "]");
    return static_cast<uint32_t>(v);
  };
  if (!f_.has(p + "expert_count")) fail("missing key '" + p + "expert_count'");
  moe_.n_expert = key("expert_count", 0, 4096);
  moe_.n_used = key("expert_used_count", 0, moe_.n_expert);
  moe_.ff_exp = table_.experts_ff ? info_.n_ff : key("expert_feed_forward_length", info_.n_ff / moe_.n_used, 1u << 20);
  moe_.ff_shexp = key("expert_shared_feed_forward_length", info_.n_ff, 1u << 20);
}

// RoPE: rotated dimensions, the global and sliding configurations, the linear scaling, the
// frequency factors and the attention factor, as llama.cpp reads them.
void GraphModel::load_rope(const std::string& p, const ModelGeometry& g) {
  const uint32_t D = info_.head_dim;
  n_rot_ = f_.has(p + "rope.dimension_count") ? static_cast<uint32_t>(f_.get_uint(p + "rope.dimension_count")) : D;
  if (n_rot_ == 0 || n_rot_ > D || n_rot_ % 2 != 0) fail("rope.dimension_count " + std::to_string(n_rot_) + " out of range");

  const std::string scaling = f_.has(p + "rope.scaling.type") ? f_.get_string(p + "rope.scaling.type") : "linear";
  float factor = f_.has(p + "rope.scaling.factor") ? f_.get_f32(p + "rope.scaling.factor") : 0.0f;
  if (factor == 0.0f && f_.has(p + "rope.scale_linear")) factor = f_.get_f32(p + "rope.scale_linear");
  const bool yarn = scaling == "yarn";
  if (scaling == "none") factor = 0.0f;
  else if (scaling == "longrope") {
    if (table_.factors != RopeFactors::long_short) fail("rope scaling 'longrope' is not supported for " + info_.architecture);
  } else if (yarn) {
    if (!table_.yarn) fail("rope scaling 'yarn' is not supported for " + info_.architecture);
  } else if (scaling != "linear") {
    fail("rope scaling '" + scaling + "' is not supported (none, linear" +
         std::string(table_.factors == RopeFactors::long_short ? ", longrope" : "") +
         std::string(table_.yarn ? ", yarn" : "") + ")");
  }
  if (factor != 0.0f && !(factor > 0.0f && std::isfinite(factor))) fail("rope.scaling.factor must be positive");
  if (!(hp_.rope_attn_factor > 0.0f) || !std::isfinite(hp_.rope_attn_factor))
    fail("rope.scaling.attn_factor must be positive");

  RopeConfig global;
  global.base = hp_.rope_base;
  global.scale = factor == 0.0f ? 1.0 : 1.0 / static_cast<double>(factor);
  global.n_rot = n_rot_;
  if (yarn) load_yarn(p, factor, global);
  RopeConfig local = global;
  if (table_.swa_rope == SwaRope::gemma3 || table_.swa_rope == SwaRope::gemma4) {
    local.base = hp_.rope_base_swa != 0.0f ? hp_.rope_base_swa : 10000.0f;
    local.scale = 1.0;
  }
  if (table_.swa_rope == SwaRope::gemma4) {
    // Sliding layers have their own head size; llama.cpp defaults their rotated dims to the
    // full layers' count, which a smaller head cannot hold.
    local.factors = false;
    local.n_rot = f_.has(p + "rope.dimension_count_swa") ? static_cast<uint32_t>(f_.get_uint(p + "rope.dimension_count_swa"))
                                                         : n_rot_;
    uint32_t d_swa = 0;
    for (const LayerInfo& li : g.layers)
      if (li.kind == LayerKind::sliding_window) d_swa = li.head_dim_k;
    if (d_swa && (local.n_rot == 0 || local.n_rot > d_swa || local.n_rot % 2 != 0))
      fail("rope.dimension_count_swa " + std::to_string(local.n_rot) + " out of range for sliding heads of " +
           std::to_string(d_swa));
  } else if (table_.swa_rope == SwaRope::gemma2 && hp_.rope_base_swa != 0.0f) {
    local.base = hp_.rope_base_swa;
    if (yarn) load_yarn(p, factor, local);  // YaRN's corrections depend on the base
  }
  if (!(global.base > 1.0) || !(local.base > 1.0) || !std::isfinite(global.base) || !std::isfinite(local.base))
    fail("rope.freq_base must be finite and above 1");
  ropes_ = {global};
  if (!(local == global)) ropes_.push_back(local);

  auto factors = [&](const char* name) {
    std::vector<float> v = load_vec(need(name, {n_rot_ / 2}));
    for (float x : v)
      if (!(x > 0.0f)) fail(std::string("tensor '") + name + "' holds a non-positive factor");
    return v;
  };
  if (table_.factors == RopeFactors::freqs && f_.find_tensor("rope_freqs.weight")) {
    rope_ff_ = factors("rope_freqs.weight");
  } else if (table_.factors == RopeFactors::long_short) {
    const bool has_long = f_.find_tensor("rope_factors_long.weight") != nullptr;
    const bool has_short = f_.find_tensor("rope_factors_short.weight") != nullptr;
    if (has_long != has_short) fail("one of 'rope_factors_long.weight' and 'rope_factors_short.weight' is missing");
    if (has_long) {
      rope_long_ = factors("rope_factors_long.weight");
      rope_short_ = factors("rope_factors_short.weight");
      rope_orig_ctx_ = f_.has(p + "rope.scaling.original_context_length")
                           ? f_.get_uint(p + "rope.scaling.original_context_length")
                           : info_.n_ctx_train;
    }
  }
}

// YaRN as llama.cpp 0.3.36 computes it (docs/design/yarn.md): every quantity in f32, in
// llama.cpp's order of operations, so the angle table holds ggml's bits.
void GraphModel::load_yarn(const std::string& p, float factor, RopeConfig& rc) const {
  if (!(factor >= 1.0f) || !std::isfinite(factor))
    fail(p + "rope.scaling.factor must be finite and at least 1 for YaRN (" +
         (factor == 0.0f ? std::string("absent") : std::to_string(factor)) + ")");
  const std::string orig_key = p + "rope.scaling.original_context_length";
  const uint64_t orig = f_.has(orig_key) ? f_.get_uint(orig_key) : info_.n_ctx_train;
  if (orig == 0 || orig > (uint64_t(1) << 24))
    fail(orig_key + " " + std::to_string(orig) + " out of range (1 to 2^24)");
  // Read by llama.cpp for no qwen2/qwen3 file (it takes ext_factor 1, beta_fast 32, beta_slow 1
  // and the attention factor below whatever they say): checked, then left unused as there.
  auto in_range = [&](const char* key, float lo, float hi) {
    if (!f_.has(p + key)) return;
    const float v = f_.get_f32(p + key);
    if (!(v >= lo && v <= hi))
      fail(p + key + " " + std::to_string(v) + " out of range (" + std::to_string(lo) + " to " + std::to_string(hi) + ")");
  };
  in_range("rope.scaling.yarn_ext_factor", 0.0f, 1.0f);
  in_range("rope.scaling.yarn_attn_factor", 1e-3f, 1e3f);
  in_range("rope.scaling.yarn_beta_fast", 1e-3f, 1e6f);
  in_range("rope.scaling.yarn_beta_slow", 1e-3f, 1e6f);

  // llama_model: freq_scale = 1 / factor; llama_context: factor = 1 / freq_scale again.
  const float freq_scale = 1.0f / factor;
  const float s = 1.0f / freq_scale;
  rc.yarn = true;
  rc.scale = static_cast<double>(freq_scale);
  // ggml_rope_yarn_corr_dims with beta_fast 32 and beta_slow 1: the pair that turns 32 times,
  // and the one that turns once, over the original context.
  const float base = static_cast<float>(rc.base), pi = static_cast<float>(3.14159265358979323846);
  auto corr_dim = [&](float turns) {
    return static_cast<float>(rc.n_rot) * std::log(static_cast<float>(orig) / (turns * 2.0f * pi)) /
           (2.0f * std::log(base));
  };
  rc.yarn_low = std::max(0.0f, std::floor(corr_dim(32.0f)));
  rc.yarn_high = std::min(static_cast<float>(rc.n_rot - 1), std::ceil(corr_dim(1.0f)));
  // llama_context: yarn_attn_factor = get_mscale(s) / (1 + 0.1 ln s) times rope.scaling.attn_factor;
  // rope_yarn multiplies it by 1 + 0.1 ln(1 / freq_scale) again.
  float attn = s <= 1.0f ? 1.0f : 0.1f * std::log(s) + 1.0f;
  attn = attn * (1.0f / (1.0f + 0.1f * std::log(s)));
  attn = attn * hp_.rope_attn_factor;
  rc.yarn_mscale = attn * (1.0f + 0.1f * std::log(1.0f / freq_scale));
}

void GraphModel::set_context(uint32_t n_ctx) {
  if (rope_long_.empty()) return;
  // llama.cpp: the long factors when the sequence's context exceeds the original one.
  rope_ff_ = n_ctx > rope_orig_ctx_ ? rope_long_ : rope_short_;
}

void GraphModel::load() {
  const std::string arch = table_.name;
  const std::string p = arch + ".";
  const bool counted = f_.has(p + "expert_count") && f_.get_uint(p + "expert_count") > 0;
  if (table_.moe == Moe::none && counted)
    fail("a mixture-of-experts model (" + p + "expert_count " + std::to_string(f_.get_uint(p + "expert_count")) +
         ") is not supported");
  const ModelGeometry g = geometry_from_gguf(f_);

  info_.architecture = arch;
  info_.file_name = base_name(f_.path());
  // Draft (multi-token-prediction) layers close the stack; the forward pass stops before
  // them, as llama.cpp's does.
  uint64_t n_layer = g.n_layers;
  while (table_.hybrid && n_layer > 0 && g.layers[n_layer - 1].kind == LayerKind::nextn) --n_layer;
  const uint64_t n_embd = f_.get_uint(p + "embedding_length");
  const bool ff_key = f_.has(p + "feed_forward_length");
  if (!ff_key && (table_.moe == Moe::none || table_.experts_ff)) fail("missing key '" + p + "feed_forward_length'");
  // Gemma 4 (E2B) writes one width per layer; the model's is the widest.
  std::vector<uint64_t> ff_layers;
  if (table_.layer_shapes && ff_key && f_.find(p + "feed_forward_length")->is_array()) {
    const GgufValue& v = *f_.find(p + "feed_forward_length");
    if (v.count() != g.n_layers) fail("key '" + p + "feed_forward_length' has " + std::to_string(v.count()) + " entries for " +
                                      std::to_string(g.n_layers) + " layers");
    for (uint64_t i = 0; i < v.count(); ++i) {
      const std::optional<uint64_t> u = v.to_unsigned(i);
      if (!u || *u == 0 || *u > 1048576) fail("feed_forward_length entry " + std::to_string(i) + " out of range");
      ff_layers.push_back(*u);
    }
  }
  const uint64_t n_ff = !ff_layers.empty() ? *std::max_element(ff_layers.begin(), ff_layers.end())
                        : ff_key           ? f_.get_uint(p + "feed_forward_length")
                                           : 0;
  if (n_embd == 0 || n_embd > 65536) fail("embedding_length " + std::to_string(n_embd) + " out of range");
  if ((ff_key && n_ff == 0) || n_ff > 1048576) fail("feed_forward_length " + std::to_string(n_ff) + " out of range");
  const LayerInfo* first = nullptr;
  for (uint64_t il = 0; il < n_layer; ++il) {
    const LayerInfo& li = g.layers[il];
    if (li.kind == LayerKind::recurrent && table_.hybrid) continue;
    if (li.kind != LayerKind::full_attention && li.kind != LayerKind::sliding_window)
      fail("layer " + std::to_string(il) + " is a " + layer_kind_name(li.kind) + " layer, which " + arch +
           " does not have");
    if (table_.layer_shapes) {  // per layer, checked below; the model's shape is the first full layer's
      if (li.head_dim_v != li.head_dim_k) fail("layer " + std::to_string(il) + ": key and value head sizes differ; not supported");
      if (li.head_dim_k == 0 || li.head_dim_k % 2 != 0 || li.head_dim_k > 1024)
        fail("layer " + std::to_string(il) + ": head dimension " + std::to_string(li.head_dim_k) + " out of range");
      if (li.n_head != g.layers[0].n_head) fail("layers with differing head_count are not supported");
      if (!first || (first->kind != LayerKind::full_attention && li.kind == LayerKind::full_attention)) first = &li;
      continue;
    }
    if (!first) first = &li;
    if (li.n_head != first->n_head || li.n_head_kv != first->n_head_kv || li.head_dim_k != first->head_dim_k ||
        li.head_dim_v != first->head_dim_v)
      fail("layers with differing attention shapes are not supported");
  }
  if (!first) fail("no attention layer (every layer is recurrent)");
  const LayerInfo& l0 = *first;
  const uint32_t H = l0.n_head, Hkv = l0.n_head_kv, D = l0.head_dim_k;  // checked by geometry_from_gguf
  if (l0.head_dim_v != D) fail("key_length and value_length differ; not supported");
  if (D == 0 || D % 2 != 0 || D > 1024) fail("head dimension " + std::to_string(D) + " out of range");
  info_.n_layer = static_cast<uint32_t>(n_layer);
  info_.n_embd = static_cast<uint32_t>(n_embd);
  info_.n_head = H;
  info_.n_head_kv = Hkv;
  info_.head_dim = D;
  info_.n_ff = static_cast<uint32_t>(n_ff);
  info_.n_ctx_train = g.context_length;
  if (table_.hybrid) load_hybrid(p, g);
  if (table_.moe == Moe::required || (table_.moe == Moe::when_counted && counted)) load_moe(p);
  ggml_angles_ = table_.ggml_angles || (table_.ggml_angles_experts && moe_.n_expert > 0);

  eps_ = f_.get_f32(p + "attention.layer_norm_rms_epsilon");
  if (!(eps_ > 0.0f) || !std::isfinite(eps_)) fail("attention.layer_norm_rms_epsilon must be positive");
  for (const KeySlot& k : table_.keys) {
    const float v = f_.has(p + k.key) ? f_.get_f32(p + k.key) : k.dflt;
    if (!std::isfinite(v) || v < 0.0f) fail(p + k.key + " must be finite and non-negative");
    hp_.*k.field = v;
  }
  load_rope(p, g);

  // Embeddings: [n_embd, n_vocab].
  tok_embd_ = f_.find_tensor("token_embd.weight");
  if (!tok_embd_) fail("missing tensor 'token_embd.weight'");
  if (tok_embd_->dims.size() != 2 || tok_embd_->dims[0] != n_embd || tok_embd_->dims[1] == 0 ||
      tok_embd_->dims[1] > (1u << 24))
    fail("tensor 'token_embd.weight' has shape " + dims_str(tok_embd_->dims) + ", expected [" +
         std::to_string(n_embd) + ", n_vocab]");
  if (!dequant_supported(tok_embd_->type))
    fail(std::string("tensor 'token_embd.weight' has type ") + tok_embd_->type_name() + ", which sjkv-replay cannot dequantize");
  const uint64_t V = tok_embd_->dims[1];
  // Every token the tokenizer can emit needs an embedding row; checked here so that a
  // mismatched file fails at load, not at the first such token.
  if (const GgufValue* vocab = f_.find("tokenizer.ggml.tokens"); vocab && vocab->is_array() && vocab->count() > V)
    fail("the vocabulary has " + std::to_string(vocab->count()) + " tokens but 'token_embd.weight' only " +
         std::to_string(V) + " rows");
  info_.n_vocab = static_cast<uint32_t>(V);
  // Checked as every matrix is, tied or not: its rows are dequantized on lookup, where a
  // non-finite value would surface only as a cache arm's internal error.
  const Mat emb = load_mat(*tok_embd_);
  embd_row_bytes_ = emb.row_bytes;

  out_norm_ = load_vec(need("output_norm.weight", {n_embd}));
  if (const GgufTensorInfo* out = optional("output.weight", {n_embd, V})) output_ = load_mat(*out);
  else output_ = emb;  // tied: already counted in weight_bytes_

  // Gemma 4's per-layer embeddings: the token table is read a row at a time, as llama.cpp reads
  // it lazily; checked here like the token embeddings.
  if (table_.layer_shapes && f_.has(p + "embedding_length_per_layer_input")) {
    const uint64_t P = f_.get_uint(p + "embedding_length_per_layer_input");
    if (P > 65536) fail("embedding_length_per_layer_input " + std::to_string(P) + " out of range");
    n_pe_ = static_cast<uint32_t>(P);
    if (P) {
      pe_tok_ = &need("per_layer_token_embd.weight", {P * n_layer, V});
      const Mat t = load_mat(*pe_tok_);
      pe_row_bytes_ = t.row_bytes;
      pe_model_proj_ = load_mat(need("per_layer_model_proj.weight", {n_embd, P * n_layer}));
      pe_proj_norm_ = load_vec(need("per_layer_proj_norm.weight", {P}));
    }
  }

  layers_.resize(n_layer);
  for (uint32_t il = 0; il < n_layer; ++il) {
    Layer& L = layers_[il];
    const std::string b = "blk." + std::to_string(il) + ".";
    L.sliding = g.layers[il].kind == LayerKind::sliding_window;
    L.recurrent = g.layers[il].kind == LayerKind::recurrent;
    L.rope = (L.sliding && ropes_.size() > 1) ? 1 : 0;
    L.n_head_kv = Hkv;
    L.head_dim = D;
    L.n_ff = static_cast<uint32_t>(ff_layers.empty() ? n_ff : ff_layers[il]);
    if (table_.layer_shapes && !L.recurrent) {
      L.n_head_kv = g.layers[il].n_head_kv;
      L.head_dim = g.layers[il].head_dim_k;
      L.kv_src = g.layers[il].kv_source;
    }
    for (const TensorSlot& s : table_.tensors) {
      if ((s.sel == LayerSel::attention && L.recurrent) || (s.sel == LayerSel::recurrent && !L.recurrent)) continue;
      const std::string name = b + s.name;
      std::vector<uint64_t> dims{dim(s.in, &L)};
      if (s.experts) dims = {dim(s.in, &L), dim(s.out, &L), dim(Dim::n_expert)};
      else if (s.mat ? s.out != Dim::one : s.out != s.in) dims.push_back(dim(s.out, &L));
      const GgufTensorInfo* t = optional(name, dims);
      if (!t) {
        if (s.required) fail("missing tensor '" + name + "'");
        continue;
      }
      if (s.vec) L.*s.vec = load_vec(*t);
      else if (s.experts) L.*s.experts = load_experts(*t);
      else if (s.out == Dim::one) {
        GgufTensorInfo row = *t;
        row.dims = {t->dims[0], 1};
        L.*s.mat = load_mat(row);
      } else L.*s.mat = load_mat(*t);
    }
    if (L.recurrent) continue;
    // Gemma 4: V from K where attn_v is absent; a shared-KV layer projects only q.
    if (L.wqkv.rows == 0 && (L.wq.rows == 0 || (L.wk.rows == 0 && L.kv_src < 0) || (L.wv.rows == 0 && !table_.layer_shapes)))
      fail("missing tensor '" + b + "attn_q.weight', '" + b + "attn_k.weight', '" + b + "attn_v.weight' or '" + b +
           "attn_qkv.weight'");
  }
  check_arch();

  for (uint32_t il = 0; il < n_layer; ++il) {
    LayerShape s;
    s.layer = il;
    s.recurrent = layers_[il].recurrent;
    if (s.recurrent) s.state = {ssm_.kernel - 1, static_cast<uint32_t>(ssm_.conv_dim()), ssm_.v_heads, ssm_.state};
    // A shared-KV layer's own cache is never written (it attends its source's), so no arm compresses it.
    s.full_attention = !layers_[il].sliding && !s.recurrent && layers_[il].kv_src < 0;
    s.window = layers_[il].sliding ? g.sliding_window : 0;
    s.kv_source = layers_[il].kv_src;  // its store keeps nothing: attention reads the source layer's
    s.n_head = H;
    s.n_head_kv = layers_[il].n_head_kv;
    s.head_dim = layers_[il].head_dim;
    s.softcap = hp_.attn_softcap;
    s.sink_logits = layers_[il].sinks;
    info_.layers.push_back(s);
  }
  set_context(opt_.n_ctx ? opt_.n_ctx : static_cast<uint32_t>(std::min<uint64_t>(info_.n_ctx_train, UINT32_MAX)));
  info_.weight_bytes = weight_bytes_;
}

float GraphModel::default_attn_scale() const {
  return hp_.attn_scale != 0.0f ? hp_.attn_scale : 1.0f / std::sqrt(static_cast<float>(info_.head_dim));
}

// ---- building blocks -------------------------------------------------------------------------

// Elements an item of the elementwise loops at least: a decoded token's norms stay on one
// thread (waking another costs more than they take), a ubatch's are shared; the activations
// (a tanh or exp each) are worth sharing from a token's 2,048 on.
constexpr long kParallelGrain = 16384;
constexpr long kActivationGrain = 1024;

// Rows of `width` elements an item at least `grain` elements takes (at least one).
static long rows_per_item(long grain, uint32_t width) { return std::max<long>(1, grain / std::max<uint32_t>(width, 1)); }

void GraphModel::norm(const float* x, float* y, uint32_t rows, uint32_t dim, const std::vector<float>& w) const {
  // Rows to whichever thread is free (sjkv/parallel.h), enough of them an item to be worth it.
  parallel_for_ranges(rows, rows_per_item(kParallelGrain, dim), threads(), [&](long r0, long r1) {
    for (long r = r0; r < r1; ++r) {
      const float* xr = x + static_cast<size_t>(r) * dim;
      float* yr = y + static_cast<size_t>(r) * dim;
      double s = 0.0;
      for (uint32_t i = 0; i < dim; ++i) s += static_cast<double>(xr[i]) * xr[i];
      const float mean = static_cast<float>(s / dim);
      const float sc = 1.0f / std::sqrt(mean + eps_);
      if (w.empty()) {
        for (uint32_t i = 0; i < dim; ++i) yr[i] = xr[i] * sc;
      } else {
        for (uint32_t i = 0; i < dim; ++i) yr[i] = (xr[i] * sc) * w[i];
      }
    }
  });
}

void GraphModel::qkv(const Layer& L, Ubatch& u) const {
  const uint32_t m = u.m;
  const size_t nq = dim(Dim::q, &L), nkv = dim(Dim::kv, &L);
  if (L.wqkv.rows) {
    std::vector<float> f(size_t(m) * (nq + 2 * nkv));
    matmul(L.wqkv, u.h.data(), m, f.data());
    for (uint32_t i = 0; i < m; ++i) {
      const float* r = f.data() + size_t(i) * (nq + 2 * nkv);
      std::copy(r, r + nq, u.q.data() + size_t(i) * nq);
      std::copy(r + nq, r + nq + nkv, u.k.data() + size_t(i) * nkv);
      std::copy(r + nq + nkv, r + nq + 2 * nkv, u.v.data() + size_t(i) * nkv);
    }
  } else {
    matmul(L.wq, u.h.data(), m, u.q.data());
    matmul(L.wk, u.h.data(), m, u.k.data());
    if (L.wv.rows) matmul(L.wv, u.h.data(), m, u.v.data());
    else std::copy_n(u.k.data(), size_t(m) * nkv, u.v.data());  // Gemma 4: V is the K projection
  }
  auto add_bias = [m](float* rows, size_t width, const std::vector<float>& b) {
    if (b.empty()) return;
    for (uint32_t i = 0; i < m; ++i)
      for (size_t c = 0; c < width; ++c) rows[i * width + c] += b[c];
  };
  add_bias(u.q.data(), nq, L.bq);
  add_bias(u.k.data(), nkv, L.bk);
  add_bias(u.v.data(), nkv, L.bv);
}

void GraphModel::head_norms(const Layer& L, Ubatch& u) const {
  const uint32_t D = L.head_dim;
  norm(u.q.data(), u.q.data(), u.m * info_.n_head, D, L.q_norm);
  norm(u.k.data(), u.k.data(), u.m * L.n_head_kv, D, L.k_norm);
}

void GraphModel::rope(const Layer& L, Ubatch& u) const {
  const uint32_t D = L.head_dim, half = ropes_[L.rope].n_rot / 2;
  const bool neox = table_.rope == RopeStyle::neox;
  auto apply = [&](float* rows, uint32_t heads) {
    for (uint32_t i = 0; i < u.m; ++i)
      for (uint32_t hh = 0; hh < heads; ++hh) {
        float* r = rows + (size_t(i) * heads + hh) * D;
        const float* cs = u.rcos[L.rope].data() + size_t(i) * half;
        const float* sn = u.rsin[L.rope].data() + size_t(i) * half;
        for (uint32_t j = 0; j < half; ++j) {
          const uint32_t i0 = neox ? j : 2 * j, i1 = neox ? j + half : 2 * j + 1;
          const float x0 = r[i0], x1 = r[i1];
          r[i0] = x0 * cs[j] - x1 * sn[j];
          r[i1] = x0 * sn[j] + x1 * cs[j];
        }
      }
  };
  apply(u.q.data(), info_.n_head);
  apply(u.k.data(), L.n_head_kv);
}

void GraphModel::scale_q(Ubatch& u, float s) const {
  for (float& e : u.q) e = e * s;
}

void GraphModel::attend(uint32_t il, Ubatch& u, Kv& kv, float scale) const {
  // Finite weights can still overflow binary32 (values near the type's limit): that is the
  // model file's defect, named here before an arm meets the rows and calls it its own.
  const size_t row = dim(Dim::kv, &layers_[il]);
  for (const std::vector<float>* side : {&u.k, &u.v})
    for (size_t i = 0; i < size_t(u.m) * row; ++i)
      if (!std::isfinite((*side)[i]))
        fail("layer " + std::to_string(il) + " computes a non-finite " + (side == &u.k ? "K" : "V") +
             " value at position " + std::to_string(u.pos + i / row) + " (weights out of range)");
  kv[il]->begin_ubatch(u.pos, u.m);
  kv[il]->store(u.pos, u.m, u.k.data(), u.v.data());
  kv[il]->attend(u.pos, u.m, u.q.data(), scale, u.att.data());
}

void GraphModel::attend_shared(uint32_t il, Ubatch& u, Kv& kv, float scale) const {
  const int32_t src = layers_[il].kv_src;
  kv[static_cast<size_t>(src)]->attend(u.pos, u.m, u.q.data(), scale, u.att.data());
}

void GraphModel::gelu_fp16_inplace(float* x, size_t n) const {
  parallel_for_ranges(static_cast<long>(n), kActivationGrain, threads(), [&](long i0, long i1) {
    for (long i = i0; i < i1; ++i) x[i] = gelu_fp16(x[i]);
  });
}

void GraphModel::attn_output(const Layer& L, Ubatch& u) const {
  matmul(L.wo, u.att.data(), u.m, u.a.data());
  if (!L.bo.empty())
    for (uint32_t i = 0; i < u.m; ++i)
      for (uint32_t c = 0; c < info_.n_embd; ++c) u.a[size_t(i) * info_.n_embd + c] += L.bo[c];
}

void GraphModel::ffn(const Layer& L, Act act, Ubatch& u) const {
  if (act == Act::swiglu_oai) throw std::logic_error("ffn: swiglu_oai is only an experts' unit");
  const int nt = threads();
  const uint32_t F = L.n_ff;
  if (L.gate.rows) {
    matmul(L.gate, u.h.data(), u.m, u.g.data());
    matmul(L.up, u.h.data(), u.m, u.u.data());
    const long gn = static_cast<long>(size_t(u.m) * F);
    float* g = u.g.data();
    const float* up = u.u.data();
    if (act == Act::gelu_tanh) {
      parallel_for_ranges(gn, kActivationGrain, nt, [&](long i0, long i1) {
        for (long i = i0; i < i1; ++i) g[i] = gelu_tanh(g[i]) * up[i];
      });
    } else if (act == Act::gelu_fp16) {
      parallel_for_ranges(gn, kActivationGrain, nt, [&](long i0, long i1) {
        for (long i = i0; i < i1; ++i) g[i] = gelu_fp16(g[i]) * up[i];
      });
    } else {
      parallel_for_ranges(gn, kActivationGrain, nt, [&](long i0, long i1) {
        for (long i = i0; i < i1; ++i) g[i] = silu(g[i]) * up[i];
      });
    }
  } else {  // fused [gate | up] per row
    matmul(L.up, u.h.data(), u.m, u.u.data());
    const long rows = static_cast<long>(u.m);
    float* g = u.g.data();
    const float* up = u.u.data();
    parallel_for_ranges(rows, rows_per_item(kActivationGrain, F), nt, [&](long i0, long i1) {
      for (long i = i0; i < i1; ++i)
        for (uint32_t c = 0; c < F; ++c) {
          const float gv = up[size_t(i) * 2 * F + c], uv = up[size_t(i) * 2 * F + F + c];
          g[size_t(i) * F + c] = (act == Act::gelu_tanh ? gelu_tanh(gv) : act == Act::gelu_fp16 ? gelu_fp16(gv) : silu(gv)) * uv;
        }
    });
  }
  matmul(L.down, u.g.data(), u.m, u.a.data());
}

void GraphModel::gated_attention(uint32_t il, const Layer& L, Ubatch& u, Kv& kv) const {
  const uint32_t H = info_.n_head, D = info_.head_dim;
  std::vector<float> qg(size_t(u.m) * 2 * H * D);
  matmul(L.wq, u.h.data(), u.m, qg.data());
  matmul(L.wk, u.h.data(), u.m, u.k.data());
  matmul(L.wv, u.h.data(), u.m, u.v.data());
  // Per head: the query's D values, then its gate's D values.
  for (size_t r = 0; r < size_t(u.m) * H; ++r) std::copy_n(qg.data() + r * 2 * D, D, u.q.data() + r * D);
  head_norms(L, u);
  rope(L, u);
  attend(il, u, kv, 1.0f / std::sqrt(static_cast<float>(D)));
  for (size_t r = 0; r < size_t(u.m) * H; ++r) {
    const float* g = qg.data() + r * 2 * D + D;
    float* o = u.att.data() + r * D;
    for (uint32_t d = 0; d < D; ++d) o[d] = o[d] * sigmoid(g[d]);
  }
  attn_output(L, u);
}

void GraphModel::delta_net(uint32_t il, const Layer& L, Ubatch& u, Kv& kv) const {
  RecurrentState* st = kv[il]->recurrent();
  if (!st) throw std::invalid_argument("Model::eval: layer " + std::to_string(il) + " is recurrent but its cache store is not");
  const uint32_t m = u.m, S = ssm_.state, Hk = ssm_.k_heads, Hv = ssm_.v_heads, K = ssm_.kernel;
  const size_t C = ssm_.conv_dim(), KD = ssm_.key_dim(), VD = ssm_.inner;
  const RecurrentShape& rs = st->shape();
  if (rs.conv_rows != K - 1 || rs.conv_dim != C || rs.heads != Hv || rs.head_dim != S)
    throw std::invalid_argument("Model::eval: layer " + std::to_string(il) + "'s state store has another shape");
  kv[il]->begin_ubatch(u.pos, m);

  std::vector<float> mixed(m * C), z(m * VD), b(size_t(m) * Hv), a(size_t(m) * Hv);
  matmul(L.ssm_in, u.h.data(), m, mixed.data());
  matmul(L.ssm_z, u.h.data(), m, z.data());
  matmul(L.ssm_beta, u.h.data(), m, b.data());
  matmul(L.ssm_alpha, u.h.data(), m, a.data());
  // beta and the decay factor per token and value head.
  for (size_t i = 0; i < b.size(); ++i) {
    const uint32_t h = static_cast<uint32_t>(i % Hv);
    b[i] = sigmoid(b[i]);
    a[i] = std::exp(softplus(a[i] + L.ssm_dt[h]) * L.ssm_a[h]);
  }

  // The causal convolution over each channel: the state's K - 1 earlier inputs, then this
  // token's (tap K - 1); SiLU after. hist holds the window's rows as the state gives them back
  // (the state's, then each token's once stored: rounded by its format), so a token reads
  // the inputs before it as one-token ubatches would.
  std::vector<float> hist(size_t(K - 1 + m) * C), conv(m * C);
  st->read_conv(hist.data());
  if (st->format() == StateFormat::f32) {
    std::copy(mixed.begin(), mixed.end(), hist.begin() + static_cast<std::ptrdiff_t>(size_t(K - 1) * C));
    for (uint32_t t = m > K - 1 ? m - (K - 1) : 0; t < m; ++t) st->push_conv(mixed.data() + size_t(t) * C);
  } else {
    std::vector<float> win(size_t(K - 1) * C);
    for (uint32_t t = 0; t < m; ++t) {
      st->push_conv(mixed.data() + size_t(t) * C);
      st->read_conv(win.data());
      std::copy_n(win.data() + size_t(K - 2) * C, C, hist.data() + size_t(K - 1 + t) * C);
    }
  }
  parallel_for_ranges(static_cast<long>(C), kActivationGrain / K, threads(), [&](long c0, long c1) {
    for (uint32_t t = 0; t < m; ++t) {
      const float* cur = mixed.data() + size_t(t) * C;
      const float* win = hist.data() + size_t(t) * C;
      float* out = conv.data() + size_t(t) * C;
      for (long c = c0; c < c1; ++c) {
        const float* w = L.ssm_conv.data() + size_t(c) * K;
        float acc = 0.0f;
        for (uint32_t i = 0; i + 1 < K; ++i) acc = acc + w[i] * win[i * C + size_t(c)];
        acc = acc + w[K - 1] * cur[c];
        out[c] = silu(acc);
      }
    }
  });

  // q and k heads L2-normalised over S (llama.cpp: an RMS norm with eps / S, then 1 / sqrt(S)).
  const float inv_s = 1.0f / std::sqrt(static_cast<float>(S));
  parallel_for_ranges(static_cast<long>(m) * 2 * Hk, rows_per_item(kParallelGrain, S), threads(), [&](long r0, long r1) {
    for (long r = r0; r < r1; ++r) {
      float* x = conv.data() + size_t(r / (2 * Hk)) * C + size_t(r % (2 * Hk)) * S;
      double ss = 0.0;
      for (uint32_t i = 0; i < S; ++i) ss += static_cast<double>(x[i]) * x[i];
      const float sc = 1.0f / std::sqrt(static_cast<float>(ss / S) + eps_ / static_cast<float>(S));
      for (uint32_t i = 0; i < S; ++i) x[i] = (x[i] * sc) * inv_s;
    }
  });

  // The delta rule, token by token, each value head on its own (h reads q/k head h mod Hk):
  // M = exp(g) M; M += beta (v - M k) k^T; o = (M q) / sqrt(S).
  std::vector<float> o(m * VD);
  const bool exact = st->format() == StateFormat::f32;
  parallel_for(static_cast<long>(Hv), threads(), [&](long hl) {
    const uint32_t h = static_cast<uint32_t>(hl), hk = h % Hk;
    std::vector<float> M(size_t(S) * S);
    st->read_head(h, M.data());
    for (uint32_t t = 0; t < m; ++t) {
      const float* row = conv.data() + size_t(t) * C;
      const float* q = row + size_t(hk) * S;
      const float* k = row + KD + size_t(hk) * S;
      const float* v = row + 2 * KD + size_t(h) * S;
      const float decay = a[size_t(t) * Hv + h], beta = b[size_t(t) * Hv + h];
      float* out = o.data() + size_t(t) * VD + size_t(h) * S;
      for (uint32_t j = 0; j < S; ++j) out[j] = delta_row(M.data() + size_t(j) * S, k, q, decay, v[j], beta, S) * inv_s;
      if (!exact) {  // stored in the arm's format between tokens
        st->write_head(h, M.data());
        st->read_head(h, M.data());
      }
    }
    if (exact) st->write_head(h, M.data());
  });

  // The gated RMS norm per value head (weight shared by the heads), then the output projection.
  parallel_for_ranges(static_cast<long>(m) * Hv, rows_per_item(kActivationGrain, S), threads(), [&](long r0, long r1) {
    for (long r = r0; r < r1; ++r) {
      float* x = o.data() + size_t(r) * S;
      const float* zz = z.data() + size_t(r) * S;
      double ss = 0.0;
      for (uint32_t i = 0; i < S; ++i) ss += static_cast<double>(x[i]) * x[i];
      const float sc = 1.0f / std::sqrt(static_cast<float>(ss / S) + eps_);
      for (uint32_t i = 0; i < S; ++i) x[i] = ((x[i] * sc) * L.ssm_norm[i]) * silu(zz[i]);
    }
  });
  matmul(L.ssm_out, o.data(), m, u.a.data());
}

void GraphModel::moe_route(float* logits, uint32_t m, std::vector<uint32_t>& sel, std::vector<float>& wsel) const {
  const uint32_t NE = moe_.n_expert, K = moe_.n_used;
  // Per token: softmax over the experts, the top K, weights renormalised to sum 1 (summed in
  // double as ggml_sum_rows does, floored at 2^-14 as llama.cpp clamps it). The top K as
  // ggml's CPU argsort finds them: std::sort of the indices by descending probability, whose
  // order of equal values is the library's (up to 16 experts an insertion sort: ties to the
  // lower index).
  sel.resize(size_t(m) * K);
  wsel.resize(size_t(m) * K);
  std::vector<uint32_t> order(NE);
  auto argsort = [&order](const float* v) {  // descending, as ggml's CPU argsort
    std::iota(order.begin(), order.end(), 0u);
    std::sort(order.begin(), order.end(), [v](uint32_t x, uint32_t y) { return v[x] > v[y]; });
  };
  for (uint32_t t = 0; t < m; ++t) {
    float* p = logits + size_t(t) * NE;
    if (table_.gating == MoeGating::softmax_top_k) {
      // gpt-oss: the top K of the logits, then a softmax over those K (max, e^(x - max) summed
      // in double, times the f32 reciprocal, as ggml_soft_max); no renormalising.
      argsort(p);
      const float top = p[order[0]];
      double sum = 0.0;
      for (uint32_t r = 0; r < K; ++r) {
        sel[size_t(t) * K + r] = order[r];
        sum += wsel[size_t(t) * K + r] = std::exp(p[order[r]] - top);
      }
      const float inv = static_cast<float>(1.0 / sum);
      for (uint32_t r = 0; r < K; ++r) wsel[size_t(t) * K + r] *= inv;
      continue;
    }
    float mx = p[0];
    for (uint32_t e = 1; e < NE; ++e) mx = std::max(mx, p[e]);
    double sum = 0.0;
    for (uint32_t e = 0; e < NE; ++e) sum += p[e] = std::exp(p[e] - mx);
    const float inv = static_cast<float>(1.0 / sum);
    for (uint32_t e = 0; e < NE; ++e) p[e] = p[e] * inv;
    argsort(p);  // by probability: rounding can tie logits that differ
    double wsum = 0.0;
    for (uint32_t r = 0; r < K; ++r) wsum += p[order[r]];
    const float ws = std::max(static_cast<float>(wsum), 6.103515625e-5f);
    for (uint32_t r = 0; r < K; ++r) {
      sel[size_t(t) * K + r] = order[r];
      wsel[size_t(t) * K + r] = p[order[r]] / ws;
    }
  }
}

void GraphModel::moe_experts(const Layer& L, Act act, const float* h, uint32_t m, const std::vector<uint32_t>& sel,
                             const std::vector<float>& wsel, float* out) const {
  const uint32_t E = info_.n_embd, NE = moe_.n_expert, K = moe_.n_used, F = moe_.ff_exp;
  const bool fused = !L.gate_up_exps.empty();
  // Each expert on the rows routed to it; y[t][rank] its weighted output.
  std::vector<float> y(size_t(m) * K * E);
  std::vector<float> xin, g, up, o;
  std::vector<size_t> slots;
  auto glu = [act](float gv, float uv) {  // one gated unit
    switch (act) {
      case Act::gelu_fp16: return gelu_fp16(gv) * uv;
      case Act::gelu_tanh: return gelu_tanh(gv) * uv;
      case Act::swiglu_oai: return swiglu_oai(gv, uv);
      case Act::silu: break;
    }
    return silu(gv) * uv;
  };
  for (uint32_t e = 0; e < NE; ++e) {
    slots.clear();
    for (size_t s = 0; s < sel.size(); ++s)
      if (sel[s] == e) slots.push_back(s);
    if (slots.empty()) continue;
    const size_t n = slots.size();
    xin.resize(n * E);
    for (size_t i = 0; i < n; ++i) std::copy_n(h + (slots[i] / K) * E, E, xin.data() + i * E);
    g.resize(n * F);
    o.resize(n * E);
    // gpt-oss's experts add their biases to gate and up before the unit (ggml_add_id).
    const float* gb = L.gate_exps_b.empty() ? nullptr : L.gate_exps_b.data() + size_t(e) * F;
    const float* ub = L.up_exps_b.empty() ? nullptr : L.up_exps_b.data() + size_t(e) * F;
    if (fused) {
      up.resize(n * 2 * F);
      matmul(L.gate_up_exps[e], xin.data(), static_cast<uint32_t>(n), up.data());
      for (size_t i = 0; i < n; ++i)
        for (uint32_t c = 0; c < F; ++c) g[i * F + c] = glu(up[i * 2 * F + c], up[i * 2 * F + F + c]);
    } else {
      up.resize(n * F);
      matmul(L.gate_exps[e], xin.data(), static_cast<uint32_t>(n), g.data());
      matmul(L.up_exps[e], xin.data(), static_cast<uint32_t>(n), up.data());
      for (size_t i = 0; i < n; ++i)
        for (uint32_t c = 0; c < F; ++c) {
          const size_t j = i * F + c;
          g[j] = gb ? glu(g[j] + gb[c], up[j] + ub[c]) : glu(g[j], up[j]);
        }
    }
    matmul(L.down_exps[e], g.data(), static_cast<uint32_t>(n), o.data());
    if (!L.down_exps_b.empty())
      for (size_t i = 0; i < n; ++i)
        for (uint32_t c = 0; c < E; ++c) o[i * E + c] = o[i * E + c] + L.down_exps_b[size_t(e) * E + c];
    // llama.cpp: the expert's scale multiplies its product, then the routing weight.
    if (!L.exp_scale.empty())
      for (float& v : o) v = v * L.exp_scale[e];
    for (size_t i = 0; i < n; ++i) {
      const float w = wsel[slots[i]];
      float* dst = y.data() + slots[i] * E;
      for (uint32_t c = 0; c < E; ++c) dst[c] = o[i * E + c] * w;
    }
  }
  for (uint32_t t = 0; t < m; ++t)
    for (uint32_t c = 0; c < E; ++c) {
      float acc = y[(size_t(t) * K) * E + c];
      for (uint32_t r = 1; r < K; ++r) acc = acc + y[(size_t(t) * K + r) * E + c];
      out[size_t(t) * E + c] = acc;
    }
}

void GraphModel::moe_ffn(const Layer& L, Ubatch& u, Act act) const {
  const uint32_t m = u.m, E = info_.n_embd, NE = moe_.n_expert;
  std::vector<float> logits(size_t(m) * NE);
  matmul(L.router, u.h.data(), m, logits.data());
  if (!L.router_b.empty())  // gpt-oss
    for (uint32_t t = 0; t < m; ++t)
      for (uint32_t e = 0; e < NE; ++e) logits[size_t(t) * NE + e] = logits[size_t(t) * NE + e] + L.router_b[e];
  std::vector<uint32_t> sel;
  std::vector<float> wsel;
  moe_route(logits.data(), m, sel, wsel);
  if (L.gate_sh.rows == 0) {  // routed experts only (qwen3moe, Mixtral, gpt-oss)
    moe_experts(L, act, u.h.data(), m, sel, wsel, u.a.data());
    return;
  }
  std::vector<float> routed(size_t(m) * E);
  moe_experts(L, act, u.h.data(), m, sel, wsel, routed.data());
  // The shared expert, gated by sigmoid(gate_inp_sh . h).
  const uint32_t FS = moe_.ff_shexp;
  std::vector<float> gs(size_t(m) * FS), us(size_t(m) * FS), sh(size_t(m) * E), sg(m);
  matmul(L.gate_sh, u.h.data(), m, gs.data());
  matmul(L.up_sh, u.h.data(), m, us.data());
  for (size_t i = 0; i < gs.size(); ++i) gs[i] = silu(gs[i]) * us[i];
  matmul(L.down_sh, gs.data(), m, sh.data());
  matmul(L.gate_inp_sh, u.h.data(), m, sg.data());
  for (uint32_t t = 0; t < m; ++t) {
    const float gate = sigmoid(sg[t]);
    float* dst = u.a.data() + size_t(t) * E;
    for (uint32_t c = 0; c < E; ++c) dst[c] = routed[size_t(t) * E + c] + sh[size_t(t) * E + c] * gate;
  }
}

void GraphModel::residual(Ubatch& u) const {
  for (size_t i = 0; i < u.x.size(); ++i) u.x[i] = u.x[i] + u.a[i];
}

// ---- the ubatch loop -------------------------------------------------------------------------

void GraphModel::check_eval(const int32_t* tokens, uint32_t n, uint32_t n_ubatch, const Kv& kv) const {
  if (kv.size() != info_.n_layer)
    throw std::invalid_argument("Model::eval: " + std::to_string(kv.size()) + " cache layers for a " +
                                std::to_string(info_.n_layer) + "-layer model");
  if (n_ubatch == 0) throw std::invalid_argument("Model::eval: n_ubatch is 0");
  if (!tokens) return;
  for (uint32_t i = 0; i < n; ++i)
    if (tokens[i] < 0 || static_cast<uint32_t>(tokens[i]) >= info_.n_vocab)
      throw std::invalid_argument("Model::eval: token id " + std::to_string(tokens[i]) + " outside the vocabulary of " +
                                  std::to_string(info_.n_vocab));
}

// The ubatch loop of the three entry points: tokens (or x rows) in ubatches of n_ubatch through
// layers [l0, l1); the residual stream to x_out, the last rows' hidden state and logits (every
// row's with all_logits) when l1 is the last layer.
void GraphModel::run_ubatches(const int32_t* tokens, const float* x_in, uint32_t n, uint32_t pos0, uint32_t n_ubatch,
                              uint32_t l0, uint32_t l1, Kv& kv, float* x_out, float* hidden, float* logits,
                              bool all_logits) {
  check_eval(tokens, n, n_ubatch, kv);
  if (l1 > info_.n_layer) throw std::invalid_argument("Model::eval: more layers than the model has");
  const size_t E = info_.n_embd;
  for (uint32_t s = 0; s < n; s += n_ubatch) {
    const uint32_t m = std::min(n_ubatch, n - s);
    const bool last = s + m == n;
    float* dst = !logits ? nullptr : all_logits ? logits + static_cast<size_t>(s) * info_.n_vocab : (last ? logits : nullptr);
    float* hdst = !hidden ? nullptr : all_logits ? hidden + s * E : (last ? hidden : nullptr);
    Span sp;
    sp.tokens = tokens ? tokens + s : nullptr;
    sp.x_in = x_in ? x_in + s * E : nullptr;
    sp.l0 = l0;
    sp.l1 = l1;
    sp.x_out = x_out ? x_out + s * E : nullptr;
    ubatch(sp, m, pos0 + s, kv, hdst, dst, all_logits);
  }
}

void GraphModel::eval_hidden(const int32_t* tokens, uint32_t n, uint32_t pos0, uint32_t n_ubatch, Kv& kv, float* hidden,
                             float* logits, bool all_logits) {
  run_ubatches(tokens, nullptr, n, pos0, n_ubatch, 0, info_.n_layer, kv, nullptr, hidden, logits, all_logits);
}

void GraphModel::eval_prefix(const int32_t* tokens, uint32_t n, uint32_t pos0, uint32_t n_ubatch, uint32_t layers,
                             Kv& kv, float* x) {
  run_ubatches(tokens, nullptr, n, pos0, n_ubatch, 0, layers, kv, x, nullptr, nullptr, false);
}

void GraphModel::eval_suffix(const float* x, uint32_t n, uint32_t pos0, uint32_t n_ubatch, uint32_t layers, Kv& kv,
                             float* hidden, float* logits, bool all_logits) {
  if (layers > info_.n_layer) throw std::invalid_argument("Model::eval: more layers than the model has");
  run_ubatches(nullptr, x, n, pos0, n_ubatch, layers, info_.n_layer, kv, nullptr, hidden, logits, all_logits);
}

void GraphModel::ubatch(const Span& sp, uint32_t m, uint32_t pos, Kv& kv, float* hidden, float* logits, bool all_logits) {
  const size_t E = info_.n_embd, F = info_.n_ff;
  Ubatch u;
  u.m = m;
  u.pos = pos;
  u.tokens = sp.tokens;
  u.x.resize(m * E);
  u.h.resize(m * E);
  u.a.resize(m * E);
  size_t nq = dim(Dim::q), nkv = dim(Dim::kv);  // the widest layer's
  for (const Layer& L : layers_) {
    nq = std::max<size_t>(nq, dim(Dim::q, &L));
    nkv = std::max<size_t>(nkv, dim(Dim::kv, &L));
  }
  u.q.resize(m * nq);
  u.att.resize(m * nq);
  u.k.resize(m * nkv);
  u.v.resize(m * nkv);
  u.g.resize(m * F);
  u.u.resize(m * F * (layers_.empty() || layers_[0].gate.rows ? 1 : 2));

  if (!sp.x_in) {
    const float emb_scale = table_.embd_scale ? std::sqrt(static_cast<float>(E)) : 1.0f;
    const uint8_t* emb = f_.tensor_data(*tok_embd_);
    for (uint32_t i = 0; i < m; ++i) {
      float* xr = u.x.data() + size_t(i) * E;
      dequantize_row(tok_embd_->type, emb + size_t(sp.tokens[i]) * embd_row_bytes_, xr, E);
      if (table_.embd_scale)
        for (size_t c = 0; c < E; ++c) xr[c] = xr[c] * emb_scale;
    }
  } else {
    std::copy(sp.x_in, sp.x_in + u.x.size(), u.x.begin());
  }

  // RoPE tables per configuration: [m][n_rot / 2] cos and sin.
  const float mscale = hp_.rope_attn_factor;
  u.rcos.resize(ropes_.size());
  u.rsin.resize(ropes_.size());
  for (size_t c = 0; c < ropes_.size(); ++c) {
    const uint32_t n_rot = ropes_[c].n_rot, half = n_rot / 2;
    const bool ff = ropes_[c].factors && !rope_ff_.empty();
    u.rcos[c].resize(size_t(m) * half);
    u.rsin[c].resize(size_t(m) * half);
    if (ropes_[c].yarn) {
      // ggml_rope_cache_init and rope_yarn (ext_factor 1): the running f32 angle, its
      // interpolated form, the two mixed by the ramp over pairs yarn_low..yarn_high.
      const RopeConfig& rc = ropes_[c];
      const float step = std::pow(static_cast<float>(rc.base), -2.0f / static_cast<float>(n_rot));
      const float fscale = static_cast<float>(rc.scale);
      const float width = std::max(0.001f, rc.yarn_high - rc.yarn_low);
      for (uint32_t i = 0; i < m; ++i) {
        float th = static_cast<float>(pos + i);
        for (uint32_t j = 0; j < half; ++j, th = th * step) {
          const float extrap = ff ? th / rope_ff_[j] : th;
          const float interp = fscale * extrap;
          const float y = (static_cast<float>(j) - rc.yarn_low) / width;
          const float mix = 1.0f - std::min(1.0f, std::max(0.0f, y));
          const float theta = interp * (1.0f - mix) + extrap * mix;
          u.rcos[c][size_t(i) * half + j] = std::cos(theta) * rc.yarn_mscale;
          u.rsin[c][size_t(i) * half + j] = std::sin(theta) * rc.yarn_mscale;
        }
      }
      continue;
    }
    if (ggml_angles_) {
      // ggml_rope_cache_init: theta_j = p * s^j as a running f32 product, s = powf(base, -2 / n_rot),
      // divided by the factor, times the scale, then cosf/sinf.
      const float step = std::pow(static_cast<float>(ropes_[c].base), -2.0f / static_cast<float>(n_rot));
      const float fscale = static_cast<float>(ropes_[c].scale);
      for (uint32_t i = 0; i < m; ++i) {
        float th = static_cast<float>(pos + i);
        for (uint32_t j = 0; j < half; ++j, th = th * step) {
          const float theta = (ff ? th / rope_ff_[j] : th) * fscale;
          u.rcos[c][size_t(i) * half + j] = std::cos(theta) * mscale;
          u.rsin[c][size_t(i) * half + j] = std::sin(theta) * mscale;
        }
      }
      continue;
    }
    for (uint32_t i = 0; i < m; ++i)
      for (uint32_t j = 0; j < half; ++j) {
        double theta = static_cast<double>(pos + i) * ropes_[c].scale *
                       std::pow(ropes_[c].base, -2.0 * j / static_cast<double>(n_rot));
        if (ff) theta /= rope_ff_[j];
        float cs = static_cast<float>(std::cos(theta)), sn = static_cast<float>(std::sin(theta));
        if (mscale != 1.0f) {
          cs = cs * mscale;
          sn = sn * mscale;
        }
        u.rcos[c][size_t(i) * half + j] = cs;
        u.rsin[c][size_t(i) * half + j] = sn;
      }
  }

  for (uint32_t il = sp.l0; il < sp.l1; ++il) layer(il, u, kv);

  if (sp.x_out) std::copy(u.x.begin(), u.x.end(), sp.x_out);
  if ((!logits && !hidden) || sp.l1 != info_.n_layer) return;
  const uint32_t first = all_logits ? 0 : m - 1, rows = m - first;
  norm(u.x.data() + size_t(first) * E, u.h.data(), rows, static_cast<uint32_t>(E), out_norm_);
  if (hidden) std::copy(u.h.begin(), u.h.begin() + static_cast<std::ptrdiff_t>(size_t(rows) * E), hidden);
  if (logits) project(u.h.data(), rows, logits);
}

void GraphModel::project(const float* hidden, uint32_t rows, float* logits) const {
  const uint32_t V = info_.n_vocab;
  gemm(output_, hidden, rows, logits, V, opt_.n_threads);
  const float cap = hp_.final_softcap;
  if (cap > 0.0f) {  // as llama.cpp: tanh(x * (1 / cap)) * cap
    const float inv = 1.0f / cap;
    const size_t total = size_t(rows) * V;
    for (size_t i = 0; i < total; ++i) logits[i] = std::tanh(logits[i] * inv) * cap;
  }
  for (size_t i = 0; i < size_t(rows) * V; ++i)  // as attention(): an overflow is the file's
    if (!std::isfinite(logits[i])) fail("the output layer computes a non-finite logit (weights out of range)");
}

std::vector<TensorSlot> qkv_slots(bool biases) {
  std::vector<TensorSlot> v{mat("attn_q.weight", Dim::embd, Dim::q, &Layer::wq, false),
                            mat("attn_k.weight", Dim::embd, Dim::kv, &Layer::wk, false),
                            mat("attn_v.weight", Dim::embd, Dim::kv, &Layer::wv, false),
                            mat("attn_qkv.weight", Dim::embd, Dim::qkv, &Layer::wqkv, false),
                            mat("attn_output.weight", Dim::q, Dim::embd, &Layer::wo)};
  if (biases)
    v.insert(v.end(), {vec("attn_q.bias", Dim::q, &Layer::bq, false), vec("attn_k.bias", Dim::kv, &Layer::bk, false),
                       vec("attn_v.bias", Dim::kv, &Layer::bv, false)});
  return v;
}

std::vector<TensorSlot> gated_ffn_slots() {
  return {mat("ffn_gate.weight", Dim::embd, Dim::ff, &Layer::gate), mat("ffn_up.weight", Dim::embd, Dim::ff, &Layer::up),
          mat("ffn_down.weight", Dim::ff, Dim::embd, &Layer::down)};
}

std::vector<TensorSlot> delta_net_slots() {
  return only(LayerSel::recurrent,
              {mat("attn_qkv.weight", Dim::embd, Dim::ssm_conv, &Layer::ssm_in),
               mat("attn_gate.weight", Dim::embd, Dim::ssm_inner, &Layer::ssm_z),
               grid("ssm_conv1d.weight", Dim::ssm_kernel, Dim::ssm_conv, &Layer::ssm_conv),
               vec("ssm_dt.bias", Dim::ssm_heads, &Layer::ssm_dt), vec("ssm_a", Dim::ssm_heads, &Layer::ssm_a),
               mat("ssm_beta.weight", Dim::embd, Dim::ssm_heads, &Layer::ssm_beta),
               mat("ssm_alpha.weight", Dim::embd, Dim::ssm_heads, &Layer::ssm_alpha),
               vec("ssm_norm.weight", Dim::ssm_state, &Layer::ssm_norm),
               mat("ssm_out.weight", Dim::ssm_inner, Dim::embd, &Layer::ssm_out)});
}

std::vector<TensorSlot> routed_expert_slots() {
  return {mat("ffn_gate_inp.weight", Dim::embd, Dim::n_expert, &Layer::router),
          experts("ffn_gate_exps.weight", Dim::embd, Dim::ff_exp, &Layer::gate_exps),
          experts("ffn_up_exps.weight", Dim::embd, Dim::ff_exp, &Layer::up_exps),
          experts("ffn_down_exps.weight", Dim::ff_exp, Dim::embd, &Layer::down_exps)};
}

std::vector<TensorSlot> shared_expert_slots() {
  return {mat("ffn_gate_inp_shexp.weight", Dim::embd, Dim::one, &Layer::gate_inp_sh),
          mat("ffn_gate_shexp.weight", Dim::embd, Dim::ff_shexp, &Layer::gate_sh),
          mat("ffn_up_shexp.weight", Dim::embd, Dim::ff_shexp, &Layer::up_sh),
          mat("ffn_down_shexp.weight", Dim::ff_shexp, Dim::embd, &Layer::down_sh)};
}

std::vector<TensorSlot> moe_slots() { return join({routed_expert_slots(), shared_expert_slots()}); }

std::vector<TensorSlot> not_required(std::vector<TensorSlot> v) {
  for (TensorSlot& s : v) s.required = false;
  return v;
}

std::vector<TensorSlot> only(LayerSel sel, std::vector<TensorSlot> v) {
  for (TensorSlot& s : v) s.sel = sel;
  return v;
}

std::vector<TensorSlot> join(std::initializer_list<std::vector<TensorSlot>> parts) {
  std::vector<TensorSlot> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

const std::vector<ArchEntry>& architectures() {
  static const std::vector<ArchEntry> all{gemma2(), gemma3(), llama(), phi3(),      qwen2(), qwen3(),
                                          qwen3moe(), qwen35(), qwen35moe(), gemma4(), gptoss()};
  return all;
}

}  // namespace graph

std::unique_ptr<Model> Model::load(const std::string& gguf_path, const LoadOptions& opt) {
  std::string arch;
  {
    const GgufFile f = GgufFile::open(gguf_path);
    // The architecture and the attention shapes, refused as the other tools' --model refuses them.
    (void)supported_geometry(f, ModelUse::forward);
    arch = f.get_string("general.architecture");
  }
  for (const graph::ArchEntry& e : graph::architectures()) {
    if (arch == e.table->name) {
      std::unique_ptr<graph::GraphModel> m = e.make(gguf_path, opt);
      m->load();
      return m;
    }
  }
  throw std::logic_error("architecture '" + arch + "' is listed as supported but has no forward pass");
}

std::vector<std::string> supported_architectures() {
  std::vector<std::string> out;
  for (const graph::ArchEntry& e : graph::architectures()) out.push_back(e.table->name);
  return out;
}

std::string default_model_path() {
  if (const char* e = std::getenv("SJKV_MODEL"); e && *e) return e;
  std::string dir;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) dir = x;
  else if (const char* home = std::getenv("HOME"); home && *home) dir = std::string(home) + "/.cache";
  else return "";
  const std::string p = dir + "/sjkv/models/default.gguf";
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 ? p : "";
}

}  // namespace replay
}  // namespace sjkv
