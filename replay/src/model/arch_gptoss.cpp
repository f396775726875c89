// gpt-oss (GGUF architecture "gpt-oss", llama.cpp's OPENAI_MOE): RMSNorm, q/k/v and the output
// projection with biases, RoPE on halves (NEOX) with YaRN as the converter writes it (factor 32
// over 4,096 for the published files), attention scale 1/sqrt(D), a learned sink logit per query
// head in every layer's softmax (attn_sinks), a 128-token sliding window on the even layers
// (llama.cpp's pattern 2 unless the file gives one), and in every layer a mixture of experts
// after post_attention_norm: the router with its bias, the top expert_used_count logits weighted
// by their softmax, each expert a clamped SwiGLU (gate and up with biases, ggml's swiglu_oai)
// and a down projection with its bias; no shared expert (docs/design/moe.md section 7).
#include "graph.h"

namespace sjkv {
namespace replay {
namespace graph {
namespace {

class GptOssModel final : public GraphModel {
 public:
  using GraphModel::GraphModel;

 private:
  void layer(uint32_t il, Ubatch& u, Kv& kv) const override {
    const Layer& L = layers_[il];
    norm(u, L.attn_norm);
    qkv(L, u);
    rope(L, u);
    attention(il, L, u, kv, default_attn_scale());  // the sinks travel in the layer's shape
    residual(u);
    norm(u, L.post_attn_norm);
    moe_ffn(L, u, Act::swiglu_oai);
    residual(u);
  }
};

}  // namespace

ArchEntry gptoss() {
  static const ArchTable t = [] {
    ArchTable a{"gpt-oss",
                RopeStyle::neox,
                SwaRope::gemma2,  // rope.freq_base_swa, default the global base, scaled as the global one
                RopeFactors::none,
                false,
                {{"rope.freq_base", &Hparams::rope_base, 10000.0f},
                 {"rope.freq_base_swa", &Hparams::rope_base_swa, 0.0f},
                 {"rope.scaling.attn_factor", &Hparams::rope_attn_factor, 1.0f}},
                join({{vec("attn_norm.weight", Dim::embd, &Layer::attn_norm)},
                      qkv_slots(true),
                      {vec("attn_output.bias", Dim::embd, &Layer::bo),
                       vec("attn_sinks.weight", Dim::heads, &Layer::sinks),
                       vec("post_attention_norm.weight", Dim::embd, &Layer::post_attn_norm)},
                      routed_expert_slots(),
                      {vec("ffn_gate_inp.bias", Dim::n_expert, &Layer::router_b),
                       grid("ffn_gate_exps.bias", Dim::ff_exp, Dim::n_expert, &Layer::gate_exps_b),
                       grid("ffn_up_exps.bias", Dim::ff_exp, Dim::n_expert, &Layer::up_exps_b),
                       grid("ffn_down_exps.bias", Dim::embd, Dim::n_expert, &Layer::down_exps_b)}}),
                false,
                Moe::required};
    a.ggml_angles = true;  // a routing decision is discontinuous (docs/design/moe.md)
    a.yarn = true;
    a.gating = MoeGating::softmax_top_k;
    return a;
  }();
  return {&t, [](const std::string& path, const LoadOptions& opt) { return make<GptOssModel>(path, opt, t); }};
}

}  // namespace graph
}  // namespace replay
}  // namespace sjkv
