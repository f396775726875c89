// CPU forward pass of Gemma 3 and Llama-family GGUF models.
//
// Graph facts follow llama.cpp's src/models/gemma3.cpp and src/models/llama.cpp (read, not
// copied): Gemma 3 scales the embeddings by sqrt(n_embd), RMS-norms q and k per head, applies
// post-attention and post-FFN norms, a GELU(tanh)-gated FFN, NEOX-style RoPE with base
// rope.freq_base on global layers and rope.freq_base_swa (default 10,000, scale 1) on sliding
// ones, and multiplies q by 1/sqrt(key_length) (1/sqrt(n_embd/n_head) for the 62-layer 27B).
// The converter stores Gemma's norm weights with the +1 already added, so they multiply as is.
// Llama: RMSNorm, SwiGLU, RoPE on adjacent pairs, GQA, optional biases and rope_freqs.
//
// Weights: every matrix stays in the mapped file as the GGUF stores it and is dequantized a
// panel at a time inside the products (gemm.h), so the products use the file's exact values
// and the weights take the file's size; norms in f32; embedding rows are dequantized on lookup.
#include <omp.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "sjkv/fp16.h"
#include "sjkv/io/paths.h"
#include "sjkv/replay/dequant.h"
#include "sjkv/replay/gemm.h"
#include "sjkv/replay/model.h"

namespace sjkv {
namespace replay {
namespace {

enum class Arch { gemma3, llama };

using Mat = WeightMatrix;  // [rows][cols] in the mapping

struct RopeConfig {
  double base = 10000.0;
  double scale = 1.0;  // multiplies positions (1 / linear scaling factor)
  bool operator==(const RopeConfig& o) const { return base == o.base && scale == o.scale; }
};

struct Layer {
  std::vector<float> attn_norm, q_norm, k_norm, post_attn_norm, ffn_norm, post_ffw_norm;
  std::vector<float> bq, bk, bv, bo;  // optional biases (llama)
  Mat wq, wk, wv, wo, gate, up, down;
  bool sliding = false;
  uint32_t rope = 0;  // index into rope configs
};

class GgufModel final : public Model {
 public:
  GgufModel(const std::string& path, const LoadOptions& opt) : f_(GgufFile::open(path)), opt_(opt) { load(); }
  const ModelInfo& info() const override { return info_; }
  const GgufFile& gguf() const override { return f_; }
  void eval_hidden(const int32_t* tokens, uint32_t n, uint32_t pos0, uint32_t n_ubatch,
                   std::vector<std::unique_ptr<LayerKv>>& kv, float* hidden, float* logits, bool all_logits) override;
  void project(const float* hidden, uint32_t rows, float* logits) const override;
  bool splits() const override { return true; }
  void eval_prefix(const int32_t* tokens, uint32_t n, uint32_t pos0, uint32_t n_ubatch, uint32_t layers,
                   std::vector<std::unique_ptr<LayerKv>>& kv, float* x) override;
  void eval_suffix(const float* x, uint32_t n, uint32_t pos0, uint32_t n_ubatch, uint32_t layers,
                   std::vector<std::unique_ptr<LayerKv>>& kv, float* hidden, float* logits, bool all_logits) override;

 private:
  // One ubatch through layers [l0, l1): from the tokens' embeddings, or from x_in
  // ([m][n_embd]) when given; the residual stream after l1 goes to x_out when given, and when l1 is
  // the last layer, the final norm and the output step to hidden / logits.
  struct Span {
    const int32_t* tokens = nullptr;
    const float* x_in = nullptr;
    uint32_t l0 = 0, l1 = 0;
    float* x_out = nullptr;
  };
  void check_eval(const int32_t* tokens, uint32_t n, uint32_t n_ubatch, const std::vector<std::unique_ptr<LayerKv>>& kv) const;
  void run_ubatches(const int32_t* tokens, const float* x_in, uint32_t n, uint32_t pos0, uint32_t n_ubatch, uint32_t l0,
                    uint32_t l1, std::vector<std::unique_ptr<LayerKv>>& kv, float* x_out, float* hidden, float* logits,
                    bool all_logits);
  [[noreturn]] void fail(const std::string& what) const { throw FileError(f_.path(), what); }
  const GgufTensorInfo& need(const std::string& name, std::vector<uint64_t> dims) const;
  const GgufTensorInfo* optional(const std::string& name, std::vector<uint64_t> dims) const;
  std::vector<float> load_vec(const GgufTensorInfo& t) const;
  Mat load_mat(const GgufTensorInfo& t);
  std::vector<float> vec(const std::string& name, uint64_t n) { return load_vec(need(name, {n})); }
  Mat mat(const std::string& name, uint64_t cols, uint64_t rows) { return load_mat(need(name, {cols, rows})); }
  std::vector<float> opt_vec(const std::string& name, uint64_t n) {
    const GgufTensorInfo* t = optional(name, {n});
    return t ? load_vec(*t) : std::vector<float>();
  }
  float key_f32(const std::string& k, float dflt) const { return f_.has(k) ? f_.get_f32(k) : dflt; }
  void load();
  void ubatch(const Span& sp, uint32_t m, uint32_t pos, std::vector<std::unique_ptr<LayerKv>>& kv, float* hidden,
              float* logits, bool all_logits);
  int threads() const { return opt_.n_threads > 0 ? opt_.n_threads : omp_get_max_threads(); }
  void rms_norm(const float* x, float* y, uint32_t rows, uint32_t dim, const std::vector<float>& w) const;
  void matmul(const Mat& m, const float* x, uint32_t n, float* y) const { gemm(m, x, n, y, m.rows, opt_.n_threads); }

  GgufFile f_;
  LoadOptions opt_;
  ModelInfo info_;
  Arch arch_ = Arch::llama;
  float eps_ = 1e-6f;
  float attn_scale_ = 1.0f;  // gemma3: applied to q before attention; llama: the attention scale
  float softcap_ = 0.0f;
  uint32_t n_rot_ = 0;
  bool neox_ = false;
  std::vector<RopeConfig> ropes_;
  std::vector<float> rope_ff_;  // llama rope_freqs (divides the angle), empty when absent
  const GgufTensorInfo* tok_embd_ = nullptr;
  size_t embd_row_bytes_ = 0;
  std::vector<float> out_norm_;
  Mat output_;  // output.weight, or the tied token embedding
  std::vector<Layer> layers_;
  mutable size_t weight_bytes_ = 0;
};

std::string dims_str(const std::vector<uint64_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

const GgufTensorInfo* GgufModel::optional(const std::string& name, std::vector<uint64_t> dims) const {
  const GgufTensorInfo* t = f_.find_tensor(name);
  if (!t) return nullptr;
  if (t->dims != dims) fail("tensor '" + name + "' has shape " + dims_str(t->dims) + ", expected " + dims_str(dims));
  if (!dequant_supported(t->type))
    fail(std::string("tensor '") + name + "' has type " + t->type_name() + ", which sjkv-replay cannot dequantize");
  return t;
}

const GgufTensorInfo& GgufModel::need(const std::string& name, std::vector<uint64_t> dims) const {
  const GgufTensorInfo* t = optional(name, dims);
  if (!t) fail("missing tensor '" + name + "'");
  return *t;
}

std::vector<float> GgufModel::load_vec(const GgufTensorInfo& t) const {
  std::vector<float> v(t.n_elements);
  dequantize_row(t.type, f_.tensor_data(t), v.data(), v.size());
  for (float x : v)
    if (!std::isfinite(x)) fail("tensor '" + t.name + "' holds a non-finite value");
  weight_bytes_ += v.size() * 4;
  return v;
}

Mat GgufModel::load_mat(const GgufTensorInfo& t) {
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

void GgufModel::load() {
  const std::string arch = f_.get_string("general.architecture");
  if (arch == "gemma3") arch_ = Arch::gemma3;
  else if (arch == "llama") arch_ = Arch::llama;
  else fail("architecture '" + arch + "' is not supported (gemma3, llama)");
  const std::string p = arch + ".";
  const ModelGeometry g = geometry_from_gguf(f_);

  info_.architecture = arch;
  info_.file_name = base_name(f_.path());
  const uint64_t n_layer = g.n_layers, n_embd = f_.get_uint(p + "embedding_length"),
                 n_ff = f_.get_uint(p + "feed_forward_length");
  if (n_embd == 0 || n_embd > 65536) fail("embedding_length " + std::to_string(n_embd) + " out of range");
  if (n_ff == 0 || n_ff > 1048576) fail("feed_forward_length " + std::to_string(n_ff) + " out of range");
  const LayerInfo& l0 = g.layers.at(0);
  for (const LayerInfo& li : g.layers) {
    if (li.kind != LayerKind::full_attention && li.kind != LayerKind::sliding_window)
      fail(std::string("layer kind '") + layer_kind_name(li.kind) + "' is not supported");
    if (li.n_head != l0.n_head || li.n_head_kv != l0.n_head_kv || li.head_dim_k != l0.head_dim_k ||
        li.head_dim_v != l0.head_dim_v)
      fail("layers with differing attention shapes are not supported");
  }
  const uint32_t H = l0.n_head, Hkv = l0.n_head_kv, D = l0.head_dim_k;
  if (H == 0 || Hkv == 0 || H % Hkv != 0) fail("head_count " + std::to_string(H) + " is not a multiple of head_count_kv " + std::to_string(Hkv));
  if (l0.head_dim_v != D) fail("key_length and value_length differ; not supported");
  if (D == 0 || D % 2 != 0 || D > 1024) fail("head dimension " + std::to_string(D) + " out of range");

  eps_ = f_.get_f32(p + "attention.layer_norm_rms_epsilon");
  if (!(eps_ > 0.0f) || !std::isfinite(eps_)) fail("attention.layer_norm_rms_epsilon must be positive");
  n_rot_ = f_.has(p + "rope.dimension_count") ? static_cast<uint32_t>(f_.get_uint(p + "rope.dimension_count")) : D;
  if (n_rot_ == 0 || n_rot_ > D || n_rot_ % 2 != 0) fail("rope.dimension_count " + std::to_string(n_rot_) + " out of range");
  neox_ = arch_ == Arch::gemma3;  // llama.cpp: LLAMA_ROPE_TYPE_NEOX for gemma3, NORM for llama

  std::string scaling = f_.has(p + "rope.scaling.type") ? f_.get_string(p + "rope.scaling.type") : "linear";
  float factor = key_f32(p + "rope.scaling.factor", 0.0f);
  if (factor == 0.0f) factor = key_f32(p + "rope.scale_linear", 0.0f);
  if (scaling == "none") factor = 0.0f;
  else if (scaling != "linear") fail("rope scaling '" + scaling + "' is not supported (none, linear)");
  if (factor != 0.0f && !(factor > 0.0f && std::isfinite(factor))) fail("rope.scaling.factor must be positive");
  RopeConfig global;
  global.base = key_f32(p + "rope.freq_base", 10000.0f);
  global.scale = factor == 0.0f ? 1.0 : 1.0 / static_cast<double>(factor);
  RopeConfig local;
  local.base = key_f32(p + "rope.freq_base_swa", 10000.0f);
  if (!(global.base > 1.0) || !(local.base > 1.0) || !std::isfinite(global.base) || !std::isfinite(local.base))
    fail("rope.freq_base must be finite and above 1");
  ropes_ = {global};
  if (!(local == global)) ropes_.push_back(local);

  softcap_ = key_f32(p + "final_logit_softcapping", 0.0f);
  if (softcap_ < 0.0f || !std::isfinite(softcap_)) fail("final_logit_softcapping must be non-negative");
  if (arch_ == Arch::gemma3) {
    // llama.cpp after gemma_pytorch: 1/sqrt(head_dim), except the 62-layer 27B model.
    attn_scale_ = n_layer == 62 ? 1.0f / std::sqrt(static_cast<float>(n_embd / H))
                                : 1.0f / std::sqrt(static_cast<float>(D));
  } else {
    attn_scale_ = key_f32(p + "attention.scale", 0.0f);
    if (attn_scale_ == 0.0f) attn_scale_ = 1.0f / std::sqrt(static_cast<float>(D));
  }

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
  embd_row_bytes_ = tok_embd_->n_bytes / V;
  weight_bytes_ += tok_embd_->n_bytes;  // mapped, read row by row

  if (arch_ == Arch::llama && f_.find_tensor("rope_freqs.weight")) rope_ff_ = vec("rope_freqs.weight", n_rot_ / 2);
  for (float x : rope_ff_)
    if (!(x > 0.0f)) fail("tensor 'rope_freqs.weight' holds a non-positive factor");

  out_norm_ = vec("output_norm.weight", n_embd);
  const GgufTensorInfo* out = optional("output.weight", {n_embd, V});
  if (out) {
    output_ = load_mat(*out);
  } else {  // tied: the embedding, already counted in weight_bytes_
    const size_t counted = weight_bytes_;
    output_ = load_mat(*tok_embd_);
    weight_bytes_ = counted;
  }

  layers_.resize(n_layer);
  for (uint32_t il = 0; il < n_layer; ++il) {
    Layer& L = layers_[il];
    const std::string b = "blk." + std::to_string(il) + ".";
    L.sliding = g.layers[il].kind == LayerKind::sliding_window;
    // Sliding layers use the local base and never the linear scaling (llama.cpp's
    // rope_freq_scale_train_swa = 1).
    L.rope = (L.sliding && arch_ == Arch::gemma3 && ropes_.size() > 1) ? 1 : 0;
    L.attn_norm = vec(b + "attn_norm.weight", n_embd);
    L.wq = mat(b + "attn_q.weight", n_embd, uint64_t(H) * D);
    L.wk = mat(b + "attn_k.weight", n_embd, uint64_t(Hkv) * D);
    L.wv = mat(b + "attn_v.weight", n_embd, uint64_t(Hkv) * D);
    L.wo = mat(b + "attn_output.weight", uint64_t(H) * D, n_embd);
    L.ffn_norm = vec(b + "ffn_norm.weight", n_embd);
    L.gate = mat(b + "ffn_gate.weight", n_embd, n_ff);
    L.up = mat(b + "ffn_up.weight", n_embd, n_ff);
    L.down = mat(b + "ffn_down.weight", n_ff, n_embd);
    if (arch_ == Arch::gemma3) {
      L.q_norm = vec(b + "attn_q_norm.weight", D);
      L.k_norm = vec(b + "attn_k_norm.weight", D);
      L.post_attn_norm = vec(b + "post_attention_norm.weight", n_embd);
      L.post_ffw_norm = vec(b + "post_ffw_norm.weight", n_embd);
    } else {
      L.bq = opt_vec(b + "attn_q.bias", uint64_t(H) * D);
      L.bk = opt_vec(b + "attn_k.bias", uint64_t(Hkv) * D);
      L.bv = opt_vec(b + "attn_v.bias", uint64_t(Hkv) * D);
      L.bo = opt_vec(b + "attn_output.bias", n_embd);
    }
  }

  info_.n_layer = static_cast<uint32_t>(n_layer);
  info_.n_embd = static_cast<uint32_t>(n_embd);
  info_.n_head = H;
  info_.n_head_kv = Hkv;
  info_.head_dim = D;
  info_.n_vocab = static_cast<uint32_t>(V);
  info_.n_ff = static_cast<uint32_t>(n_ff);
  info_.n_ctx_train = g.context_length;
  for (uint32_t il = 0; il < n_layer; ++il) {
    LayerShape s;
    s.layer = il;
    s.full_attention = !layers_[il].sliding;
    s.window = layers_[il].sliding ? g.sliding_window : 0;
    s.n_head = H;
    s.n_head_kv = Hkv;
    s.head_dim = D;
    info_.layers.push_back(s);
  }
  info_.weight_bytes = weight_bytes_;
}

void GgufModel::rms_norm(const float* x, float* y, uint32_t rows, uint32_t dim, const std::vector<float>& w) const {
#pragma omp parallel for schedule(static) num_threads(threads()) if (rows > 1)
  for (long r = 0; r < static_cast<long>(rows); ++r) {
    const float* xr = x + static_cast<size_t>(r) * dim;
    float* yr = y + static_cast<size_t>(r) * dim;
    double s = 0.0;
    for (uint32_t i = 0; i < dim; ++i) s += static_cast<double>(xr[i]) * xr[i];
    const float mean = static_cast<float>(s / dim);
    const float sc = 1.0f / std::sqrt(mean + eps_);
    for (uint32_t i = 0; i < dim; ++i) yr[i] = (xr[i] * sc) * w[i];
  }
}

float gelu_tanh(float x) {
  const double xd = x;
  return static_cast<float>(0.5 * xd * (1.0 + std::tanh(0.7978845608028654 * (xd + 0.044715 * xd * xd * xd))));
}
float silu(float x) { return static_cast<float>(static_cast<double>(x) / (1.0 + std::exp(-static_cast<double>(x)))); }

void GgufModel::check_eval(const int32_t* tokens, uint32_t n, uint32_t n_ubatch,
                           const std::vector<std::unique_ptr<LayerKv>>& kv) const {
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
void GgufModel::run_ubatches(const int32_t* tokens, const float* x_in, uint32_t n, uint32_t pos0, uint32_t n_ubatch,
                             uint32_t l0, uint32_t l1, std::vector<std::unique_ptr<LayerKv>>& kv, float* x_out,
                             float* hidden, float* logits, bool all_logits) {
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

void GgufModel::eval_hidden(const int32_t* tokens, uint32_t n, uint32_t pos0, uint32_t n_ubatch,
                            std::vector<std::unique_ptr<LayerKv>>& kv, float* hidden, float* logits, bool all_logits) {
  run_ubatches(tokens, nullptr, n, pos0, n_ubatch, 0, info_.n_layer, kv, nullptr, hidden, logits, all_logits);
}

void GgufModel::eval_prefix(const int32_t* tokens, uint32_t n, uint32_t pos0, uint32_t n_ubatch, uint32_t layers,
                            std::vector<std::unique_ptr<LayerKv>>& kv, float* x) {
  run_ubatches(tokens, nullptr, n, pos0, n_ubatch, 0, layers, kv, x, nullptr, nullptr, false);
}

void GgufModel::eval_suffix(const float* x, uint32_t n, uint32_t pos0, uint32_t n_ubatch, uint32_t layers,
                            std::vector<std::unique_ptr<LayerKv>>& kv, float* hidden, float* logits, bool all_logits) {
  if (layers > info_.n_layer) throw std::invalid_argument("Model::eval: more layers than the model has");
  run_ubatches(nullptr, x, n, pos0, n_ubatch, layers, info_.n_layer, kv, nullptr, hidden, logits, all_logits);
}

void GgufModel::ubatch(const Span& sp, uint32_t m, uint32_t pos, std::vector<std::unique_ptr<LayerKv>>& kv,
                       float* hidden, float* logits, bool all_logits) {
  const uint32_t E = info_.n_embd, H = info_.n_head, Hkv = info_.n_head_kv, D = info_.head_dim, F = info_.n_ff;
  const int nt = threads();
  std::vector<float> x(size_t(m) * E), h(size_t(m) * E), a(size_t(m) * E);
  std::vector<float> q(size_t(m) * H * D), k(size_t(m) * Hkv * D), v(size_t(m) * Hkv * D), att(size_t(m) * H * D);
  std::vector<float> g(size_t(m) * F), u(size_t(m) * F);

  if (!sp.x_in) {
    const float emb_scale = arch_ == Arch::gemma3 ? std::sqrt(static_cast<float>(E)) : 1.0f;
    const uint8_t* emb = f_.tensor_data(*tok_embd_);
    for (uint32_t i = 0; i < m; ++i) {
      float* xr = x.data() + size_t(i) * E;
      dequantize_row(tok_embd_->type, emb + size_t(sp.tokens[i]) * embd_row_bytes_, xr, E);
      if (arch_ == Arch::gemma3)
        for (uint32_t c = 0; c < E; ++c) xr[c] = xr[c] * emb_scale;
    }
  } else {
    std::copy(sp.x_in, sp.x_in + x.size(), x.begin());
  }

  // RoPE tables per configuration: [m][n_rot / 2] cos and sin.
  const uint32_t half = n_rot_ / 2;
  std::vector<std::vector<float>> rcos(ropes_.size()), rsin(ropes_.size());
  for (size_t c = 0; c < ropes_.size(); ++c) {
    rcos[c].resize(size_t(m) * half);
    rsin[c].resize(size_t(m) * half);
    for (uint32_t i = 0; i < m; ++i)
      for (uint32_t j = 0; j < half; ++j) {
        double theta = static_cast<double>(pos + i) * ropes_[c].scale *
                       std::pow(ropes_[c].base, -2.0 * j / static_cast<double>(n_rot_));
        if (!rope_ff_.empty()) theta /= rope_ff_[j];
        rcos[c][size_t(i) * half + j] = static_cast<float>(std::cos(theta));
        rsin[c][size_t(i) * half + j] = static_cast<float>(std::sin(theta));
      }
  }
  auto rope = [&](float* rows, uint32_t heads, uint32_t cfg) {
    for (uint32_t i = 0; i < m; ++i)
      for (uint32_t hh = 0; hh < heads; ++hh) {
        float* r = rows + (size_t(i) * heads + hh) * D;
        const float* cs = rcos[cfg].data() + size_t(i) * half;
        const float* sn = rsin[cfg].data() + size_t(i) * half;
        for (uint32_t j = 0; j < half; ++j) {
          const uint32_t i0 = neox_ ? j : 2 * j, i1 = neox_ ? j + half : 2 * j + 1;
          const float x0 = r[i0], x1 = r[i1];
          r[i0] = x0 * cs[j] - x1 * sn[j];
          r[i1] = x0 * sn[j] + x1 * cs[j];
        }
      }
  };
  auto add_bias = [&](float* rows, uint32_t width, const std::vector<float>& b) {
    if (b.empty()) return;
    for (uint32_t i = 0; i < m; ++i)
      for (uint32_t c = 0; c < width; ++c) rows[size_t(i) * width + c] += b[c];
  };

  for (uint32_t il = sp.l0; il < sp.l1; ++il) {
    const Layer& L = layers_[il];
    rms_norm(x.data(), h.data(), m, E, L.attn_norm);
    matmul(L.wq, h.data(), m, q.data());
    matmul(L.wk, h.data(), m, k.data());
    matmul(L.wv, h.data(), m, v.data());
    add_bias(q.data(), H * D, L.bq);
    add_bias(k.data(), Hkv * D, L.bk);
    add_bias(v.data(), Hkv * D, L.bv);
    float scale = attn_scale_;
    if (arch_ == Arch::gemma3) {
      rms_norm(q.data(), q.data(), m * H, D, L.q_norm);
      rms_norm(k.data(), k.data(), m * Hkv, D, L.k_norm);
    }
    rope(q.data(), H, L.rope);
    rope(k.data(), Hkv, L.rope);
    if (arch_ == Arch::gemma3) {
      for (float& e : q) e = e * attn_scale_;
      scale = 1.0f;
    }
    kv[il]->begin_ubatch(pos, m);
    kv[il]->store(pos, m, k.data(), v.data());
    kv[il]->attend(pos, m, q.data(), scale, att.data());
    matmul(L.wo, att.data(), m, a.data());
    add_bias(a.data(), E, L.bo);
    if (arch_ == Arch::gemma3) rms_norm(a.data(), a.data(), m, E, L.post_attn_norm);
    for (size_t i = 0; i < x.size(); ++i) x[i] = x[i] + a[i];

    rms_norm(x.data(), h.data(), m, E, L.ffn_norm);
    matmul(L.gate, h.data(), m, g.data());
    matmul(L.up, h.data(), m, u.data());
    const long gn = static_cast<long>(g.size());
    if (arch_ == Arch::gemma3) {
#pragma omp parallel for schedule(static) num_threads(nt)
      for (long i = 0; i < gn; ++i) g[i] = gelu_tanh(g[i]) * u[i];
    } else {
#pragma omp parallel for schedule(static) num_threads(nt)
      for (long i = 0; i < gn; ++i) g[i] = silu(g[i]) * u[i];
    }
    matmul(L.down, g.data(), m, a.data());
    if (arch_ == Arch::gemma3) rms_norm(a.data(), a.data(), m, E, L.post_ffw_norm);
    for (size_t i = 0; i < x.size(); ++i) x[i] = x[i] + a[i];
  }

  if (sp.x_out) std::copy(x.begin(), x.end(), sp.x_out);
  if (!logits || sp.l1 != info_.n_layer) return;
  const uint32_t first = all_logits ? 0 : m - 1, rows = m - first;
  rms_norm(x.data() + size_t(first) * E, h.data(), rows, E, out_norm_);
  if (hidden) std::copy(h.begin(), h.begin() + static_cast<std::ptrdiff_t>(size_t(rows) * E), hidden);
  project(h.data(), rows, logits);
}

void GgufModel::project(const float* hidden, uint32_t rows, float* logits) const {
  const uint32_t V = info_.n_vocab;
  gemm(output_, hidden, rows, logits, V, opt_.n_threads);
  if (softcap_ > 0.0f) {
    const size_t total = size_t(rows) * V;
    for (size_t i = 0; i < total; ++i) logits[i] = softcap_ * std::tanh(logits[i] / softcap_);
  }
}

}  // namespace

std::unique_ptr<Model> Model::load(const std::string& gguf_path, const LoadOptions& opt) {
  return std::make_unique<GgufModel>(gguf_path, opt);
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
