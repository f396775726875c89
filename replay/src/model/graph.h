// The forward pass's shared parts: the loader, driven by each architecture's table of tensor
// names and metadata keys, and the building blocks its graph is made of (norms, the RoPE
// variants, attention through the layer's cache with its window and soft-cap, the FFN kinds).
// Each architecture is one file (arch_*.cpp) holding its table and its layer graph, as
// llama.cpp's src/models/ does; graph facts are read from llama.cpp's source, not copied.
//
// Weights: every matrix stays in the mapped file as the GGUF stores it and is dequantized a
// panel at a time inside the products (gemm.h), so the products use the file's exact values
// and the weights take the file's size; norms and biases in f32; embedding rows are
// dequantized on lookup.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "sjkv/replay/gemm.h"
#include "sjkv/replay/model.h"

namespace sjkv {
namespace replay {
namespace graph {

using Mat = WeightMatrix;  // [rows][cols] in the mapping

struct Layer {
  std::vector<float> attn_norm, q_norm, k_norm, post_attn_norm, ffn_norm, post_ffw_norm;
  std::vector<float> bq, bk, bv, bo;  // biases, empty when absent
  Mat wq, wk, wv, wqkv, wo, gate, up, down;  // wqkv: fused q|k|v (then wq/wk/wv are empty)
  // Gated DeltaNet (recurrent layers of hybrids): the q|k|v projection that feeds the
  // convolution, the output gate z, the beta and decay projections, the output projection;
  // the convolution kernel [conv_dim][kernel], dt bias, A (negative) and the gated norm.
  Mat ssm_in, ssm_z, ssm_beta, ssm_alpha, ssm_out;
  std::vector<float> ssm_conv, ssm_dt, ssm_a, ssm_norm;
  // Mixture of experts: the router, each expert's gate/up/down, the shared expert and its gate.
  Mat router, gate_sh, up_sh, down_sh, gate_inp_sh;
  std::vector<Mat> gate_exps, up_exps, down_exps;
  // Gemma 4's experts: gate|up fused per expert (gate rows first; then gate_exps/up_exps are
  // empty), each expert's output scale [n_expert], the router's input scale [n_embd], and the
  // norms around the shared (dense) and routed branches.
  std::vector<Mat> gate_up_exps;
  std::vector<float> exp_scale, router_scale, post_ffw_norm_1, pre_ffw_norm_2, post_ffw_norm_2;
  std::vector<float> out_scale;  // Gemma 4's layer_output_scale: multiplies the residual stream, empty when absent
  // gpt-oss: the learned sink logit of each query head [n_head], the router's bias [n_expert] and
  // each expert's gate, up and down biases ([n_expert][ff_exp], [n_expert][ff_exp], [n_expert][n_embd]).
  std::vector<float> sinks, router_b, gate_exps_b, up_exps_b, down_exps_b;
  bool sliding = false;
  bool recurrent = false;
  uint32_t rope = 0;  // index into the model's RoPE configurations
  // This layer's attention shape (the model's, unless the table allows it per layer).
  uint32_t n_head_kv = 0, head_dim = 0;
  uint32_t n_ff = 0;     // FFN width (Gemma 4's may differ per layer)
  int32_t kv_src = -1;   // Gemma 4's shared-KV layers: the layer whose cache this one attends
  // Gemma 4's per-layer embedding: gate [P][n_embd], projection [n_embd][P], its post norm.
  Mat pe_gate, pe_proj;
  std::vector<float> pe_norm;
};

// A tensor dimension, in terms of the model's shape.
enum class Dim : uint8_t {
  embd,  // n_embd
  head,  // head size D
  q,     // n_head * D
  kv,    // n_head_kv * D
  qkv,   // q + 2 kv (fused projection)
  ff,    // n_ff
  ff2,   // 2 n_ff (fused gate|up)
  q2,    // 2 n_head * D (a query and its output gate per head)
  // Gated DeltaNet: conv_dim (the q|k|v channels the convolution runs on), the value width
  // (inner_size), value heads, head size, convolution taps.
  ssm_conv, ssm_inner, ssm_heads, ssm_state, ssm_kernel,
  ff_exp, ff_shexp, n_expert,  // an expert's width, the shared expert's, the expert count
  ff2_exp,                      // 2 ff_exp (an expert's fused gate|up)
  pe,     // Gemma 4's per-layer embedding width
  heads,  // n_head (one value per query head: gpt-oss's sinks)
  one,
};

// Which layers a slot belongs to: every layer, attention layers or recurrent ones (hybrids).
enum class LayerSel : uint8_t { all, attention, recurrent };

// A per-layer tensor "blk.N.<name>": a vector or a matrix [in, out] in GGUF's order.
// A vector slot with out != in is a small [in, out] tensor read whole into f32 (a kernel).
// An experts slot is [in, out, n_expert], one matrix per expert.
struct TensorSlot {
  const char* name;
  Dim in;
  Dim out;  // ignored for vectors
  std::vector<float> Layer::*vec = nullptr;
  Mat Layer::*mat = nullptr;
  bool required = true;
  std::vector<Mat> Layer::*experts = nullptr;
  LayerSel sel = LayerSel::all;
};
inline TensorSlot vec(const char* name, Dim n, std::vector<float> Layer::*f, bool required = true) {
  return {name, n, n, f, nullptr, required};
}
inline TensorSlot grid(const char* name, Dim in, Dim out, std::vector<float> Layer::*f) {
  return {name, in, out, f, nullptr, true};
}
inline TensorSlot mat(const char* name, Dim in, Dim out, Mat Layer::*f, bool required = true) {
  return {name, in, out, nullptr, f, required};
}
inline TensorSlot experts(const char* name, Dim in, Dim out, std::vector<Mat> Layer::*f, bool required = true) {
  return {name, in, out, nullptr, nullptr, required, f};
}
// The slots of `v` for the layers `sel` picks.
std::vector<TensorSlot> only(LayerSel sel, std::vector<TensorSlot> v);
// The slot groups the tables share. q/k/v: three matrices or the fused one (the loader needs
// one of the two), with optional biases when `biases`; the output projection; the gated FFN.
std::vector<TensorSlot> qkv_slots(bool biases);
std::vector<TensorSlot> gated_ffn_slots();
// A Gated DeltaNet layer's tensors (the Qwen 3.5 converter's names); the mixture of experts
// with a gated shared expert.
std::vector<TensorSlot> delta_net_slots();
std::vector<TensorSlot> moe_slots();
// The two parts of moe_slots: the router and the routed experts' gate/up/down (qwen3moe and
// Mixtral have only these), and the shared expert with its gate.
std::vector<TensorSlot> routed_expert_slots();
std::vector<TensorSlot> shared_expert_slots();
// The slots of `v`, none required (an architecture whose layers have one set or another checks
// them in check_arch).
std::vector<TensorSlot> not_required(std::vector<TensorSlot> v);
std::vector<TensorSlot> join(std::initializer_list<std::vector<TensorSlot>> parts);

// Float hyper-parameters read from "<arch>.<key>", with the architecture's defaults.
struct Hparams {
  float attn_scale = 0.0f;        // attention.scale (0: 1/sqrt(D))
  float attn_softcap = 0.0f;      // attn_logit_softcapping (0: none)
  float final_softcap = 0.0f;     // final_logit_softcapping (0: none)
  float rope_base = 10000.0f;     // rope.freq_base
  float rope_base_swa = 0.0f;     // rope.freq_base_swa (0: the table's SwaRope rule)
  float rope_attn_factor = 1.0f;  // rope.scaling.attn_factor (multiplies cos and sin)
};
struct KeySlot {
  const char* key;  // after "<arch>."
  float Hparams::*field;
  float dflt;
};

enum class RopeStyle : uint8_t { norm, neox };  // adjacent pairs (llama.cpp NORM) or halves (NEOX)
// The RoPE of sliding layers: the global one; gemma3's (freq_base_swa, default 10,000, never
// scaled: llama.cpp's rope_freq_scale_train_swa = 1); gemma2's (freq_base_swa, default the
// global base, scaled as the global one); or gemma4's (gemma3's base and scale, over
// rope.dimension_count_swa dims, default the global count, and without frequency factors).
enum class SwaRope : uint8_t { global, gemma3, gemma2, gemma4 };
// RoPE frequency factors: none, one rope_freqs tensor (llama 3), or Phi-3's long and short
// factors (long when the context exceeds rope.scaling.original_context_length).
enum class RopeFactors : uint8_t { none, freqs, long_short };

// Which files have experts (the keys <arch>.expert_count, expert_used_count and the experts'
// width): none (a file with expert_count > 0 is refused by name); every one (expert_count
// required: qwen35moe, qwen3moe); or those whose expert_count is above 0 (llama: Mixtral;
// gemma4: the 26B-A4B), the others dense.
enum class Moe : uint8_t { none, required, when_counted };
// How the router's logits weigh the experts: softmax over all experts, the top k renormalised
// (qwen3moe, Mixtral, Gemma 4); or the top k of the logits, then a softmax over those k
// (llama.cpp's SOFTMAX_WEIGHT: gpt-oss).
enum class MoeGating : uint8_t { softmax, softmax_top_k };

struct ArchTable {
  const char* name;
  RopeStyle rope;
  SwaRope swa_rope;
  RopeFactors factors;
  bool embd_scale;  // embeddings times sqrt(n_embd) (Gemma)
  std::vector<KeySlot> keys;
  std::vector<TensorSlot> tensors;  // per layer
  bool hybrid = false;  // recurrent layers (ssm.* keys) and trailing draft (nextn) layers allowed
  Moe moe = Moe::none;
  // Gemma 4: head size and KV heads may differ between sliding and full layers, and a layer
  // without attn_v takes V from the K projection.
  bool layer_shapes = false;
  // RoPE angles as ggml builds them (a running f32 product) rather than exact: Gemma 4's full
  // layers rotate only high frequencies, so at position 4096 every rotated pair carries
  // ggml's drift (test_arch: KL 1.9e-5 exact, 1.9e-6 so).
  bool ggml_angles = false;
  // The experts' width is feed_forward_length, as llama.cpp's llama architecture reads it
  // (Mixtral; it never reads expert_feed_forward_length); else expert_feed_forward_length,
  // default feed_forward_length / expert_used_count (qwen3moe, qwen35moe).
  bool experts_ff = false;
  // ggml's RoPE angles (as ggml_angles) when the file has experts: a routing decision is
  // discontinuous, so the drift of exact angles from llama.cpp's flips the experts of tokens
  // near a tie, whose keys every later position reads (Mixtral: KL 6.5e-5 past 4096 exact,
  // 1.9e-11 so; docs/design/moe.md). Dense files of the same architecture keep exact angles.
  bool ggml_angles_experts = false;
  // rope.scaling.type "yarn" accepted (Qwen 2.5 / 3 long-context files): llama.cpp's YaRN, with
  // the angles built as ggml builds them (docs/design/yarn.md). Elsewhere a YaRN file is refused.
  bool yarn = false;
  MoeGating gating = MoeGating::softmax;
};

// A hybrid's Gated DeltaNet shape (<arch>.ssm.*): Hk key heads and Hv value heads of S values,
// a convolution of `kernel` taps over conv_dim = 2 Hk S + Hv S channels.
struct SsmShape {
  uint32_t kernel = 0, state = 0, k_heads = 0, v_heads = 0, inner = 0;
  uint64_t key_dim() const { return uint64_t(k_heads) * state; }
  uint64_t conv_dim() const { return 2 * key_dim() + inner; }
};
struct MoeShape {
  uint32_t n_expert = 0, n_used = 0, ff_exp = 0, ff_shexp = 0;
};

class GraphModel : public Model {
 public:
  GraphModel(const std::string& path, const ArchTable& table, const LoadOptions& opt);
  const ModelInfo& info() const override { return info_; }
  const GgufFile& gguf() const override { return f_; }
  void set_context(uint32_t n_ctx) override;
  void eval_hidden(const int32_t* tokens, uint32_t n, uint32_t pos0, uint32_t n_ubatch,
                   std::vector<std::unique_ptr<LayerKv>>& kv, float* hidden, float* logits, bool all_logits) override;
  void project(const float* hidden, uint32_t rows, float* logits) const override;
  bool splits() const override { return true; }
  void eval_prefix(const int32_t* tokens, uint32_t n, uint32_t pos0, uint32_t n_ubatch, uint32_t layers,
                   std::vector<std::unique_ptr<LayerKv>>& kv, float* x) override;
  void eval_suffix(const float* x, uint32_t n, uint32_t pos0, uint32_t n_ubatch, uint32_t layers,
                   std::vector<std::unique_ptr<LayerKv>>& kv, float* hidden, float* logits, bool all_logits) override;

  // Loads the tensors and keys; called once after construction (it calls check_arch).
  void load();

 protected:
  // One ubatch's working rows: x the residual stream, h the normed input of a block, a a
  // block's output, q/k/v/att [m][heads][D], g/u the FFN's [m][n_ff] (u [m][2 n_ff] when fused).
  struct Ubatch {
    uint32_t m = 0, pos = 0;
    std::vector<float> x, h, a, q, k, v, att, g, u;
    std::vector<std::vector<float>> rcos, rsin;  // per RoPE configuration: [m][n_rot / 2]
    const int32_t* tokens = nullptr;             // the ubatch's tokens (null when it starts from x rows)
    std::vector<float> ple;                      // Gemma 4: per-layer embedding inputs [m][n_layer][P]
  };
  using Kv = std::vector<std::unique_ptr<LayerKv>>;

  // The architecture's layer graph: from u.x to u.x.
  virtual void layer(uint32_t il, Ubatch& u, Kv& kv) const = 0;
  // Checks beyond the table's (shapes the graph needs); after every tensor is loaded.
  virtual void check_arch() {}

  // ---- building blocks ----
  // RMS norm of each row, times w (an empty w: no weight, llama.cpp's ggml_rms_norm alone).
  void norm(const float* x, float* y, uint32_t rows, uint32_t dim, const std::vector<float>& w) const;
  void norm(Ubatch& u, const std::vector<float>& w) const { norm(u.x.data(), u.h.data(), u.m, info_.n_embd, w); }
  void norm_out(Ubatch& u, const std::vector<float>& w) const { norm(u.a.data(), u.a.data(), u.m, info_.n_embd, w); }
  void matmul(const Mat& w, const float* x, uint32_t n, float* y) const { gemm(w, x, n, y, w.rows, opt_.n_threads); }
  // q, k, v from u.h: separate matrices or the fused one, then the biases.
  void qkv(const Layer& L, Ubatch& u) const;
  // RMS norm of each head of q and of k (Gemma 3, Qwen 3).
  void head_norms(const Layer& L, Ubatch& u) const;
  void rope(const Layer& L, Ubatch& u) const;
  void scale_q(Ubatch& u, float s) const;
  // Store k, v in the layer's cache and attend q over it (logits scale * q.k, soft-capped by
  // the layer's shape) into u.att; then the output projection (and its bias) into u.a.
  void attention(uint32_t il, const Layer& L, Ubatch& u, Kv& kv, float scale) const {
    attend(il, u, kv, scale);
    attn_output(L, u);
  }
  void attend(uint32_t il, Ubatch& u, Kv& kv, float scale) const;
  // A shared-KV layer (Gemma 4): q over its source layer's cache, which stores nothing new.
  void attend_shared(uint32_t il, Ubatch& u, Kv& kv, float scale) const;
  void attn_output(const Layer& L, Ubatch& u) const;
  // Qwen 3.5's gated attention from u.h into u.a: the query projection yields each head's
  // query and, after it, its output gate; q/k head norms, RoPE, attention, the attention output
  // times sigmoid(gate), the output projection.
  void gated_attention(uint32_t il, const Layer& L, Ubatch& u, Kv& kv) const;
  // The Gated DeltaNet from u.h into u.a (docs/design/qwen35.md section 3), the state in kv[il].
  void delta_net(uint32_t il, const Layer& L, Ubatch& u, Kv& kv) const;
  // gelu_fp16: ggml's CPU GELU, its input rounded to fp16 and looked up in an fp16 table of
  // the tanh GELU (GGML_GELU_FP16), identity from 10 and 0 from -10 down.
  // swiglu_oai: gpt-oss's clamped SwiGLU, x = min(gate, 7), y = clamp(up, -7, 7),
  // x sigmoid(1.702 x) (y + 1), in f32 as ggml's swiglu_oai (only for experts).
  enum class Act : uint8_t { silu, gelu_tanh, gelu_fp16, swiglu_oai };
  // From u.h into u.a: the routed experts (router logits plus the router's bias when the layer
  // has one; weights as table_.gating says) plus, when the layer has one, the shared expert
  // times sigmoid of its gate. act: the routed experts' unit.
  void moe_ffn(const Layer& L, Ubatch& u, Act act = Act::silu) const;
  // From u.h into u.a: down(act(gate h) * up h), or with the fused matrix act(first half) * second.
  void ffn(const Layer& L, Act act, Ubatch& u) const;
  // The two parts of moe_ffn that Gemma 4 shares. moe_route: router logits [m][n_expert] (in
  // place: their softmax) to each token's top n_used experts and weights (renormalised),
  // [m][n_used] in rank order; ties ordered as ggml's argsort orders them (docs/design/moe.md).
  // Under MoeGating::softmax_top_k the top n_used of the logits, weighted by their softmax.
  void moe_route(float* logits, uint32_t m, std::vector<uint32_t>& sel, std::vector<float>& wsel) const;
  // moe_experts: the routed experts on h [m][n_embd] into out [m][n_embd]: per selected expert
  // down(act(gate h) * up h) (gate|up fused or not; each product plus its bias when the layer has
  // expert biases), times its exp_scale when present, times its weight, summed in rank order.
  void moe_experts(const Layer& L, Act act, const float* h, uint32_t m, const std::vector<uint32_t>& sel,
                   const std::vector<float>& wsel, float* out) const;
  void residual(Ubatch& u) const;  // x += a
  // ggml's CPU GELU in place (the fp16 table of Act::gelu_fp16).
  void gelu_fp16_inplace(float* x, size_t n) const;

  float default_attn_scale() const;  // hp_.attn_scale, else 1/sqrt(D)

  GgufFile f_;
  const ArchTable& table_;
  LoadOptions opt_;
  ModelInfo info_;
  Hparams hp_;
  float eps_ = 1e-6f;
  std::vector<Layer> layers_;
  SsmShape ssm_;
  MoeShape moe_;
  // Gemma 4's per-layer embeddings (embedding_length_per_layer_input P > 0): the token table
  // [n_vocab][n_layer P] read a row at a time, the projection [n_layer P][n_embd], its norm [P].
  uint32_t n_pe_ = 0;
  const GgufTensorInfo* pe_tok_ = nullptr;
  size_t pe_row_bytes_ = 0;
  Mat pe_model_proj_;
  std::vector<float> pe_proj_norm_;

 private:
  struct Span {
    const int32_t* tokens = nullptr;
    const float* x_in = nullptr;
    uint32_t l0 = 0, l1 = 0;
    float* x_out = nullptr;
  };
  struct RopeConfig {
    double base = 10000.0;
    double scale = 1.0;  // multiplies positions (1 / linear scaling factor)
    uint32_t n_rot = 0;
    bool factors = true;  // the frequency factors in use apply
    // YaRN: pair j turns by the extrapolated angle (unscaled) below yarn_low, by the interpolated
    // one (times scale) above yarn_high, and by a linear ramp between; cos and sin are multiplied
    // by yarn_mscale (llama.cpp's yarn_attn_factor times 1 + 0.1 ln(1 / scale)).
    bool yarn = false;
    float yarn_low = 0.0f, yarn_high = 0.0f, yarn_mscale = 1.0f;
    bool operator==(const RopeConfig& o) const {
      return base == o.base && scale == o.scale && n_rot == o.n_rot && factors == o.factors && yarn == o.yarn &&
             yarn_low == o.yarn_low && yarn_high == o.yarn_high && yarn_mscale == o.yarn_mscale;
    }
  };
  [[noreturn]] void fail(const std::string& what) const { throw FileError(f_.path(), what); }
  const GgufTensorInfo* optional(const std::string& name, std::vector<uint64_t> dims) const;
  const GgufTensorInfo& need(const std::string& name, std::vector<uint64_t> dims) const;
  std::vector<float> load_vec(const GgufTensorInfo& t) const;
  Mat load_mat(const GgufTensorInfo& t);
  std::vector<Mat> load_experts(const GgufTensorInfo& t);
  void load_hybrid(const std::string& p, const ModelGeometry& g);
  void load_moe(const std::string& p);
  uint64_t dim(Dim d, const Layer* L = nullptr) const;  // L: that layer's attention shape and FFN width
  void load_rope(const std::string& p, const ModelGeometry& g);
  void load_yarn(const std::string& p, float factor, RopeConfig& rc) const;
  void check_eval(const int32_t* tokens, uint32_t n, uint32_t n_ubatch, const Kv& kv) const;
  void run_ubatches(const int32_t* tokens, const float* x_in, uint32_t n, uint32_t pos0, uint32_t n_ubatch,
                    uint32_t l0, uint32_t l1, Kv& kv, float* x_out, float* hidden, float* logits, bool all_logits);
  void ubatch(const Span& sp, uint32_t m, uint32_t pos, Kv& kv, float* hidden, float* logits, bool all_logits);
  int threads() const;

  uint32_t n_rot_ = 0;
  bool ggml_angles_ = false;  // the table's ggml_angles, or ggml_angles_experts on a file with experts
  std::vector<RopeConfig> ropes_;
  std::vector<float> rope_ff_;                 // frequency factors in use (divide the angle), empty: none
  std::vector<float> rope_long_, rope_short_;  // Phi-3's two sets
  uint64_t rope_orig_ctx_ = 0;                 // Phi-3: the long factors above this context
  const GgufTensorInfo* tok_embd_ = nullptr;
  size_t embd_row_bytes_ = 0;
  std::vector<float> out_norm_;
  Mat output_;  // output.weight, or the tied token embedding
  mutable size_t weight_bytes_ = 0;
};

// The architectures, by general.architecture: one entry function per arch_*.cpp.
struct ArchEntry {
  const ArchTable* table;
  std::unique_ptr<GraphModel> (*make)(const std::string& path, const LoadOptions& opt);
};
const std::vector<ArchEntry>& architectures();
ArchEntry gemma2();
ArchEntry gemma3();
ArchEntry gemma4();
ArchEntry gptoss();
ArchEntry llama();
ArchEntry phi3();
ArchEntry qwen2();
ArchEntry qwen3();
ArchEntry qwen3moe();
ArchEntry qwen35();
ArchEntry qwen35moe();
// An entry's constructor.
template <class M>
std::unique_ptr<GraphModel> make(const std::string& path, const LoadOptions& opt, const ArchTable& t) {
  return std::make_unique<M>(path, t, opt);
}

}  // namespace graph
}  // namespace replay
}  // namespace sjkv
