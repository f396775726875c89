// Qwen 3 (GGUF architecture "qwen3"): the Llama block without biases, each head of q and k
// RMS-normed before RoPE on halves (NEOX), the head size from attention.key_length (it need not
// be n_embd / n_head), the attention scale 1/sqrt(D).
// Qwen 3 MoE ("qwen3moe", the 30B-A3B class) is the same block with a mixture of experts after
// ffn_norm in every layer: a softmax router over expert_count experts, the top
// expert_used_count with their weights renormalised (llama.cpp always renormalises for
// qwen3moe), each a SwiGLU of expert_feed_forward_length; no shared expert (docs/design/moe.md).
#include "graph.h"

namespace sjkv {
namespace replay {
namespace graph {
namespace {

class Qwen3Model final : public GraphModel {
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
    if (moe_.n_expert) moe_ffn(L, u);  // qwen3moe
    else ffn(L, Act::silu, u);
    residual(u);
  }
};

// The attention block's tensors and ffn_norm, the same in qwen3 and qwen3moe.
std::vector<TensorSlot> attention_slots() {
  return join({{vec("attn_norm.weight", Dim::embd, &Layer::attn_norm)},
               qkv_slots(false),
               {vec("attn_q_norm.weight", Dim::head, &Layer::q_norm),
                vec("attn_k_norm.weight", Dim::head, &Layer::k_norm),
                vec("ffn_norm.weight", Dim::embd, &Layer::ffn_norm)}});
}

}  // namespace

ArchEntry qwen3() {
  static const ArchTable t = [] {
    ArchTable a{"qwen3",
                RopeStyle::neox,
                SwaRope::global,
                RopeFactors::none,
                false,
                {{"rope.freq_base", &Hparams::rope_base, 10000.0f},
                 {"rope.scaling.attn_factor", &Hparams::rope_attn_factor, 1.0f}},
                join({attention_slots(), gated_ffn_slots()})};
    a.yarn = true;  // Qwen 2.5 / 3 long-context files (rope.scaling.type "yarn")
    return a;
  }();
  return {&t, [](const std::string& path, const LoadOptions& opt) { return make<Qwen3Model>(path, opt, t); }};
}

ArchEntry qwen3moe() {
  static const ArchTable t = [] {
    ArchTable a{"qwen3moe",
                RopeStyle::neox,
                SwaRope::global,
                RopeFactors::none,
                false,
                {{"rope.freq_base", &Hparams::rope_base, 10000.0f},
                 {"rope.scaling.attn_factor", &Hparams::rope_attn_factor, 1.0f}},
                join({attention_slots(), routed_expert_slots()}),
                false,
                Moe::required,
                false,
                true};  // ggml's RoPE angles (docs/design/moe.md)
    a.yarn = true;  // Qwen3-30B-A3B's long-context files
    return a;
  }();
  return {&t, [](const std::string& path, const LoadOptions& opt) { return make<Qwen3Model>(path, opt, t); }};
}

}  // namespace graph
}  // namespace replay
}  // namespace sjkv
