// Gemma 3 (GGUF architecture "gemma3"): embeddings times sqrt(n_embd); RMS-normed q and k per
// head; post-attention and post-FFN norms; a GELU(tanh)-gated FFN; RoPE on halves (NEOX) with
// rope.freq_base on global layers and rope.freq_base_swa (default 10,000, never scaled) on
// sliding ones (five of six layers, llama.cpp's pattern); q times 1/sqrt(key_length)
// (1/sqrt(n_embd / n_head) for the 62-layer 27B model, after gemma_pytorch). The converter
// stores Gemma's norm weights with the +1 already added, so they multiply as they are.
#include <cmath>

#include "graph.h"

namespace sjkv {
namespace replay {
namespace graph {
namespace {

class Gemma3Model final : public GraphModel {
 public:
  using GraphModel::GraphModel;

 private:
  void check_arch() override {
    q_scale_ = info_.n_layer == 62 ? 1.0f / std::sqrt(static_cast<float>(info_.n_embd / info_.n_head))
                                   : 1.0f / std::sqrt(static_cast<float>(info_.head_dim));
  }
  void layer(uint32_t il, Ubatch& u, Kv& kv) const override {
    const Layer& L = layers_[il];
    norm(u, L.attn_norm);
    qkv(L, u);
    head_norms(L, u);
    rope(L, u);
    scale_q(u, q_scale_);
    attention(il, L, u, kv, 1.0f);
    norm_out(u, L.post_attn_norm);
    residual(u);
    norm(u, L.ffn_norm);
    ffn(L, Act::gelu_tanh, u);
    norm_out(u, L.post_ffw_norm);
    residual(u);
  }
  float q_scale_ = 1.0f;
};

}  // namespace

ArchEntry gemma3() {
  static const ArchTable t{"gemma3",
                          RopeStyle::neox,
                          SwaRope::gemma3,
                          RopeFactors::none,
                          true,
                          {{"rope.freq_base", &Hparams::rope_base, 10000.0f},
                           {"rope.freq_base_swa", &Hparams::rope_base_swa, 0.0f},
                           {"final_logit_softcapping", &Hparams::final_softcap, 0.0f}},
                          join({{vec("attn_norm.weight", Dim::embd, &Layer::attn_norm)},
                                qkv_slots(false),
                                {vec("attn_q_norm.weight", Dim::head, &Layer::q_norm),
                                 vec("attn_k_norm.weight", Dim::head, &Layer::k_norm),
                                 vec("post_attention_norm.weight", Dim::embd, &Layer::post_attn_norm),
                                 vec("ffn_norm.weight", Dim::embd, &Layer::ffn_norm),
                                 vec("post_ffw_norm.weight", Dim::embd, &Layer::post_ffw_norm)},
                                gated_ffn_slots()})};
  return {&t, [](const std::string& path, const LoadOptions& opt) { return make<Gemma3Model>(path, opt, t); }};
}

}  // namespace graph
}  // namespace replay
}  // namespace sjkv
