// Qwen 3 MoE (GGUF architecture "qwen3moe", the 30B-A3B class): the Qwen 3 attention block
// (arch_qwen3.cpp: q/k head norms, RoPE on halves, scale 1/sqrt(D)), then after ffn_norm a
// mixture of experts in every layer: a softmax router over expert_count experts, the top
// expert_used_count with their weights renormalised (llama.cpp always renormalises for
// qwen3moe), each a SwiGLU of expert_feed_forward_length; no shared expert (docs/design/moe.md).
#include "graph.h"

namespace sjkv {
namespace replay {
namespace graph {
namespace {

class Qwen3MoeModel final : public GraphModel {
 public:
  using GraphModel::GraphModel;

 private:
  void layer(uint32_t il, Ubatch& u, Kv& kv) const override {
    const Layer& L = layers_[il];
    norm(u, L.attn_norm);
    qkv(L, u);
    head_norms(L, u);
    rope(L, u);
    attention(il, L, u, kv, default_attn_scale());
    residual(u);
    norm(u, L.ffn_norm);
    moe_ffn(L, u);
    residual(u);
  }
};

}  // namespace

ArchEntry qwen3moe() {
  static const ArchTable t{"qwen3moe",
                          RopeStyle::neox,
                          SwaRope::global,
                          RopeFactors::none,
                          false,
                          {{"rope.freq_base", &Hparams::rope_base, 10000.0f}},
                          join({{vec("attn_norm.weight", Dim::embd, &Layer::attn_norm)},
                                qkv_slots(false),
                                {vec("attn_q_norm.weight", Dim::head, &Layer::q_norm),
                                 vec("attn_k_norm.weight", Dim::head, &Layer::k_norm),
                                 vec("ffn_norm.weight", Dim::embd, &Layer::ffn_norm)},
                                routed_expert_slots()}),
                          false,
                          Moe::required,
                          false,
                          true};  // ggml's RoPE angles (docs/design/moe.md)
  return {&t, [](const std::string& path, const LoadOptions& opt) { return make<Qwen3MoeModel>(path, opt, t); }};
}

}  // namespace graph
}  // namespace replay
}  // namespace sjkv
