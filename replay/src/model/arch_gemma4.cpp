// Gemma 4 (GGUF architecture "gemma4"; docs/design/gemma4.md), dense and E-series: embeddings
// times sqrt(n_embd); sliding and full layers from the per-layer sliding_window_pattern, each
// kind with its own head size (key_length_swa, key_length) and KV heads; q and k RMS-normed per
// head with their weights, V per head without one; a layer without attn_v takes V from the raw
// K projection (the 31B's full layers). RoPE on halves (NEOX): full layers over key_length dims
// with rope.freq_base, their angles divided by rope_freqs (proportional RoPE: factors of 1e30
// leave most pairs still), sliding layers over rope.dimension_count_swa dims with
// rope.freq_base_swa (default 10,000); the angles as ggml builds them. Attention logits are
// q.k (scale 1). Post-attention and post-FFN norms, a GELU-gated FFN (ggml's fp16 GELU table,
// as llama.cpp computes it on the CPU) of the layer's own width, then (E2B/E4B) the per-layer
// embedding block, then the whole residual stream times layer_output_scale when the layer has
// one. The E-series' last attention.shared_kv_layers layers project q alone and attend the
// cache of the last own-KV layer of their kind (model_geometry). The final soft-cap defaults
// to 30 when the key is absent, as llama.cpp's. Gemma 4's norms multiply as stored (no +1
// folded in, none needed). The 26B-A4B's expert layers (those with ffn_gate_inp) add routed
// experts to the dense FFN, which serves as their shared expert.
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "graph.h"
#include "sjkv/replay/dequant.h"

namespace sjkv {
namespace replay {
namespace graph {
namespace {

class Gemma4Model final : public GraphModel {
 public:
  using GraphModel::GraphModel;

 private:
  void check_arch() override {
    const std::string p = info_.architecture + ".";
    auto refuse = [&](const std::string& what) { throw FileError(f_.path(), what); };
    // llama.cpp requires the key (0: no per-layer embeddings) and both swa lengths.
    if (!f_.has(p + "embedding_length_per_layer_input"))
      refuse("missing key '" + p + "embedding_length_per_layer_input'");
    if (!f_.has(p + "attention.key_length_swa") || !f_.has(p + "attention.value_length_swa"))
      refuse("missing key '" + p + "attention.key_length_swa' or '" + p + "attention.value_length_swa'");
    bool any_full = false;
    for (uint32_t il = 0; il < info_.n_layer; ++il) {
      const std::string b = "blk." + std::to_string(il) + ".";
      const Layer& L = layers_[il];
      if (L.router.rows) {  // the 26B-A4B's expert layers: llama.cpp requires all of these
        if (L.router_scale.empty() || L.pre_ffw_norm_2.empty() || L.post_ffw_norm_1.empty() || L.post_ffw_norm_2.empty())
          refuse("missing tensor '" + b + "ffn_gate_inp.scale', '" + b + "pre_ffw_norm_2.weight', '" + b +
                 "post_ffw_norm_1.weight' or '" + b + "post_ffw_norm_2.weight'");
        if (L.down_exps.empty() || (L.gate_up_exps.empty() && (L.gate_exps.empty() || L.up_exps.empty())))
          refuse("missing tensor '" + b + "ffn_down_exps.weight', or '" + b + "ffn_gate_up_exps.weight' and '" + b +
                 "ffn_gate_exps.weight' / '" + b + "ffn_up_exps.weight'");
      }
      any_full = any_full || !L.sliding;
      if (L.kv_src < 0 && L.wqkv.rows == 0 && L.wk.rows == 0) refuse("missing tensor '" + b + "attn_k.weight'");
      if (L.kv_src < 0 && L.k_norm.empty()) refuse("missing tensor '" + b + "attn_k_norm.weight'");
      if (L.kv_src >= 0 && L.wq.rows == 0)
        refuse("missing tensor '" + b + "attn_q.weight' (a shared-KV layer projects q alone)");
      if (n_pe_ && (L.pe_gate.rows == 0 || L.pe_proj.rows == 0 || L.pe_norm.empty()))
        refuse("missing tensor '" + b + "inp_gate.weight', '" + b + "proj.weight' or '" + b + "post_norm.weight'");
    }
    if (any_full && !f_.find_tensor("rope_freqs.weight")) refuse("missing tensor 'rope_freqs.weight'");
    // llama.cpp multiplies products by optional per-tensor '.scale' tensors (NVFP4 files) that
    // this pass does not apply: refused rather than ignored. The router's and the experts'
    // output scales are the 26B-A4B's own (applied).
    auto ends = [](const std::string& s, const std::string& e) {
      return s.size() >= e.size() && s.compare(s.size() - e.size(), e.size(), e) == 0;
    };
    for (const GgufTensorInfo& t : f_.tensors())
      if (ends(t.name, ".scale") && !ends(t.name, ".ffn_gate_inp.scale") && !ends(t.name, ".ffn_down_exps.scale"))
        refuse("tensor '" + t.name + "': per-tensor scales are not supported");
  }

  // Per-layer inputs and shared-KV layers read beyond the residual stream (the tokens, earlier
  // layers' caches), so the pass does not split there.
  bool splits() const override {
    for (const Layer& L : layers_)
      if (L.kv_src >= 0) return false;
    return n_pe_ == 0;
  }

  // The per-layer embedding inputs of every layer, from the tokens and the scaled embeddings x0
  // (docs/design/gemma4.md section 3): ((norm(proj x0 / sqrt(E)) * w) + row * sqrt(P)) / sqrt(2).
  void per_layer_inputs(Ubatch& u) const {
    if (!u.tokens) throw std::logic_error("gemma4: per-layer embeddings need the ubatch's tokens");
    const uint32_t m = u.m, P = n_pe_;
    const size_t row = size_t(info_.n_layer) * P;
    u.ple.resize(m * row);
    matmul(pe_model_proj_, u.x.data(), m, u.ple.data());
    const float s_proj = 1.0f / std::sqrt(static_cast<float>(info_.n_embd));
    for (float& x : u.ple) x = x * s_proj;
    norm(u.ple.data(), u.ple.data(), m * info_.n_layer, P, pe_proj_norm_);
    const float s_tok = std::sqrt(static_cast<float>(P)), s_sum = 1.0f / std::sqrt(2.0f);
    std::vector<float> t(row);
    const uint8_t* table = f_.tensor_data(*pe_tok_);
    for (uint32_t i = 0; i < m; ++i) {
      dequantize_row(pe_tok_->type, table + size_t(u.tokens[i]) * pe_row_bytes_, t.data(), row);
      float* r = u.ple.data() + i * row;
      for (size_t j = 0; j < row; ++j) r[j] = (r[j] + t[j] * s_tok) * s_sum;
    }
  }

  // The 26B-A4B's FFN from u.x into u.a (docs/design/gemma4.md section 6): the dense FFN as
  // an ungated shared expert with its own post norm, plus the routed experts on their own
  // normed input, routed from the weightless-normed residual / sqrt(E) times the router scale.
  void experts(const Layer& L, Ubatch& u) const {
    const uint32_t m = u.m, E = info_.n_embd;
    const size_t n = size_t(m) * E;
    norm(u, L.ffn_norm);
    ffn(L, Act::gelu_fp16, u);
    norm_out(u, L.post_ffw_norm_1);
    const std::vector<float> shared(u.a.begin(), u.a.begin() + n);
    std::vector<float> r(u.x.begin(), u.x.begin() + n);
    norm(r.data(), r.data(), m, E, {});
    const float s = 1.0f / std::sqrt(static_cast<float>(E));
    for (size_t i = 0; i < n; ++i) r[i] = (r[i] * s) * L.router_scale[i % E];
    std::vector<float> logits(size_t(m) * moe_.n_expert);
    matmul(L.router, r.data(), m, logits.data());
    std::vector<uint32_t> sel;
    std::vector<float> wsel;
    moe_route(logits.data(), m, sel, wsel);
    norm(u, L.pre_ffw_norm_2);
    moe_experts(L, Act::gelu_fp16, u.h.data(), m, sel, wsel, u.a.data());
    norm_out(u, L.post_ffw_norm_2);
    for (size_t i = 0; i < n; ++i) u.a[i] = shared[i] + u.a[i];
  }

  void layer(uint32_t il, Ubatch& u, Kv& kv) const override {
    const Layer& L = layers_[il];
    if (il == 0 && n_pe_) per_layer_inputs(u);
    norm(u, L.attn_norm);
    if (L.kv_src < 0) {
      qkv(L, u);
      head_norms(L, u);
      norm(u.v.data(), u.v.data(), u.m * L.n_head_kv, L.head_dim, {});
      rope(L, u);
      attend(il, u, kv, 1.0f);
    } else {  // q alone, over the source layer's cache
      matmul(L.wq, u.h.data(), u.m, u.q.data());
      norm(u.q.data(), u.q.data(), u.m * info_.n_head, L.head_dim, L.q_norm);
      rope(L, u);
      attend_shared(il, u, kv, 1.0f);
    }
    attn_output(L, u);
    norm_out(u, L.post_attn_norm);
    residual(u);
    if (L.router.rows) {
      experts(L, u);
    } else {
      norm(u, L.ffn_norm);
      ffn(L, Act::gelu_fp16, u);
    }
    norm_out(u, L.post_ffw_norm);
    residual(u);
    if (n_pe_) {  // x += norm(proj(gelu(gate x) * ple[il])) * post_norm
      const uint32_t P = n_pe_;
      std::vector<float> g(size_t(u.m) * P);
      matmul(L.pe_gate, u.x.data(), u.m, g.data());
      gelu_fp16_inplace(g.data(), g.size());
      for (uint32_t i = 0; i < u.m; ++i) {
        const float* e = u.ple.data() + (size_t(i) * info_.n_layer + il) * P;
        for (uint32_t j = 0; j < P; ++j) g[size_t(i) * P + j] = g[size_t(i) * P + j] * e[j];
      }
      matmul(L.pe_proj, g.data(), u.m, u.a.data());
      norm_out(u, L.pe_norm);
      residual(u);
    }
    if (!L.out_scale.empty()) {
      const float s = L.out_scale[0];
      for (float& x : u.x) x = x * s;
    }
  }
};

}  // namespace

ArchEntry gemma4() {
  static const ArchTable t{"gemma4",
                          RopeStyle::neox,
                          SwaRope::gemma4,
                          RopeFactors::freqs,
                          true,
                          {{"rope.freq_base", &Hparams::rope_base, 10000.0f},
                           {"rope.freq_base_swa", &Hparams::rope_base_swa, 0.0f},
                           {"final_logit_softcapping", &Hparams::final_softcap, 30.0f}},
                          join({{vec("attn_norm.weight", Dim::embd, &Layer::attn_norm)},
                                qkv_slots(false),
                                {vec("attn_q_norm.weight", Dim::head, &Layer::q_norm),
                                 vec("attn_k_norm.weight", Dim::head, &Layer::k_norm, false),
                                 vec("post_attention_norm.weight", Dim::embd, &Layer::post_attn_norm),
                                 vec("ffn_norm.weight", Dim::embd, &Layer::ffn_norm),
                                 vec("post_ffw_norm.weight", Dim::embd, &Layer::post_ffw_norm),
                                 vec("layer_output_scale.weight", Dim::one, &Layer::out_scale, false),
                                 mat("inp_gate.weight", Dim::embd, Dim::pe, &Layer::pe_gate, false),
                                 mat("proj.weight", Dim::pe, Dim::embd, &Layer::pe_proj, false),
                                 vec("post_norm.weight", Dim::embd, &Layer::pe_norm, false)},
                                gated_ffn_slots(),
                                {mat("ffn_gate_inp.weight", Dim::embd, Dim::n_expert, &Layer::router, false),
                                 vec("ffn_gate_inp.scale", Dim::embd, &Layer::router_scale, false),
                                 vec("post_ffw_norm_1.weight", Dim::embd, &Layer::post_ffw_norm_1, false),
                                 vec("pre_ffw_norm_2.weight", Dim::embd, &Layer::pre_ffw_norm_2, false),
                                 vec("post_ffw_norm_2.weight", Dim::embd, &Layer::post_ffw_norm_2, false),
                                 experts("ffn_gate_up_exps.weight", Dim::embd, Dim::ff2_exp, &Layer::gate_up_exps, false),
                                 experts("ffn_gate_exps.weight", Dim::embd, Dim::ff_exp, &Layer::gate_exps, false),
                                 experts("ffn_up_exps.weight", Dim::embd, Dim::ff_exp, &Layer::up_exps, false),
                                 experts("ffn_down_exps.weight", Dim::ff_exp, Dim::embd, &Layer::down_exps, false),
                                 vec("ffn_down_exps.scale", Dim::n_expert, &Layer::exp_scale, false)}}),
                          false,
                          Moe::when_counted,  // the 26B-A4B's experts
                          true,
                          true};
  return {&t, [](const std::string& path, const LoadOptions& opt) { return make<Gemma4Model>(path, opt, t); }};
}

}  // namespace graph
}  // namespace replay
}  // namespace sjkv
