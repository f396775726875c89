// Gemma 4, dense (GGUF architecture "gemma4"; docs/design/gemma4.md): embeddings times
// sqrt(n_embd); sliding and full layers from the per-layer sliding_window_pattern, each kind
// with its own head size (key_length_swa, key_length) and KV heads; q and k RMS-normed per head
// with their weights, V per head without one; a layer without attn_v takes V from the raw K
// projection (the 31B's full layers). RoPE on halves (NEOX): full layers over key_length dims
// with rope.freq_base, their angles divided by rope_freqs (proportional RoPE: factors of 1e30
// leave most pairs still), sliding layers over rope.dimension_count_swa dims with
// rope.freq_base_swa (default 10,000); the angles as ggml builds them. Attention logits are
// q.k (scale 1). Post-attention and post-FFN norms, a GELU-gated FFN (ggml's fp16 GELU table,
// as llama.cpp computes it on the CPU), then the whole residual stream times
// layer_output_scale when the layer has one. The final soft-cap defaults to 30 when the key is
// absent, as llama.cpp's. Gemma 4's norms multiply as stored (no +1 folded in, none needed).
#include <string>

#include "graph.h"

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
    // What the E-series and 26B-A4B files add, not run yet, is refused rather than ignored
    // (shared-KV layers by the loader).
    if (f_.has(p + "embedding_length_per_layer_input") && f_.get_uint(p + "embedding_length_per_layer_input") > 0)
      refuse("per-layer embeddings (" + p + "embedding_length_per_layer_input) are not supported yet");
    if (!f_.has(p + "attention.key_length_swa") || !f_.has(p + "attention.value_length_swa"))
      refuse("missing key '" + p + "attention.key_length_swa' or '" + p + "attention.value_length_swa'");
    bool any_full = false;
    for (uint32_t il = 0; il < info_.n_layer; ++il) {
      const std::string b = "blk." + std::to_string(il) + ".";
      if (f_.find_tensor(b + "ffn_gate_inp.weight")) refuse("tensor '" + b + "ffn_gate_inp.weight': mixture-of-experts layers are not supported yet");
      any_full = any_full || !layers_[il].sliding;
    }
    if (any_full && !f_.find_tensor("rope_freqs.weight")) refuse("missing tensor 'rope_freqs.weight'");
  }

  void layer(uint32_t il, Ubatch& u, Kv& kv) const override {
    const Layer& L = layers_[il];
    norm(u, L.attn_norm);
    qkv(L, u);
    head_norms(L, u);
    rms(u.v.data(), u.m * L.n_head_kv, L.head_dim);
    rope(L, u);
    attention(il, L, u, kv, 1.0f);
    norm_out(u, L.post_attn_norm);
    residual(u);
    norm(u, L.ffn_norm);
    ffn(L, Act::gelu_fp16, u);
    norm_out(u, L.post_ffw_norm);
    residual(u);
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
                                 vec("attn_k_norm.weight", Dim::head, &Layer::k_norm),
                                 vec("post_attention_norm.weight", Dim::embd, &Layer::post_attn_norm),
                                 vec("ffn_norm.weight", Dim::embd, &Layer::ffn_norm),
                                 vec("post_ffw_norm.weight", Dim::embd, &Layer::post_ffw_norm),
                                 vec("layer_output_scale.weight", Dim::one, &Layer::out_scale, false)},
                                gated_ffn_slots()}),
                          false,
                          false,
                          true,
                          true};
  return {&t, [](const std::string& path, const LoadOptions& opt) { return make<Gemma4Model>(path, opt, t); }};
}

}  // namespace graph
}  // namespace replay
}  // namespace sjkv
