// Gemma 2 (GGUF architecture "gemma2"): Gemma 3's block without the q/k norms, with the
// attention logits soft-capped (attn_logit_softcapping, default 50: tanh(s / cap) * cap before
// the softmax) and the final logits too (final_logit_softcapping, default 30); even layers
// slide (llama.cpp's pattern 2, window attention.sliding_window, default 4096) with the global
// RoPE unless rope.freq_base_swa is given; q times 1/sqrt(key_length) (1/sqrt(n_embd / n_head)
// for the 46-layer 27B model).
#include <cmath>

#include "graph.h"

namespace sjkv {
namespace replay {
namespace graph {
namespace {

class Gemma2Model final : public GraphModel {
 public:
  using GraphModel::GraphModel;

 private:
  void check_arch() override {
    q_scale_ = info_.n_layer == 46 ? 1.0f / std::sqrt(static_cast<float>(info_.n_embd / info_.n_head))
                                   : 1.0f / std::sqrt(static_cast<float>(info_.head_dim));
  }
  void layer(uint32_t il, Ubatch& u, Kv& kv) const override {
    const Layer& L = layers_[il];
    norm(u, L.attn_norm);
    qkv(L, u);
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

ArchEntry gemma2() {
  static const ArchTable t{"gemma2",
                          RopeStyle::neox,
                          SwaRope::gemma2,
                          RopeFactors::none,
                          true,
                          {{"rope.freq_base", &Hparams::rope_base, 10000.0f},
                           {"rope.freq_base_swa", &Hparams::rope_base_swa, 0.0f},
                           {"attn_logit_softcapping", &Hparams::attn_softcap, 50.0f},
                           {"final_logit_softcapping", &Hparams::final_softcap, 30.0f}},
                          join({{vec("attn_norm.weight", Dim::embd, &Layer::attn_norm)},
                                qkv_slots(false),
                                {vec("post_attention_norm.weight", Dim::embd, &Layer::post_attn_norm),
                                 vec("ffn_norm.weight", Dim::embd, &Layer::ffn_norm),
                                 vec("post_ffw_norm.weight", Dim::embd, &Layer::post_ffw_norm)},
                                gated_ffn_slots()})};
  return {&t, [](const std::string& path, const LoadOptions& opt) { return make<Gemma2Model>(path, opt, t); }};
}

}  // namespace graph
}  // namespace replay
}  // namespace sjkv
