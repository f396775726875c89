// Llama 1-3 and Mistral (GGUF architecture "llama"): RMSNorm, q/k/v with optional biases,
// RoPE on adjacent pairs (llama.cpp's NORM; the converter permutes q and k for it), GQA, the
// attention scale from attention.scale or 1/sqrt(D), SwiGLU. Llama 3's RoPE scaling is the
// rope_freqs tensor (the converter computes the factors). A declared attention.sliding_window
// (Mistral 7B v0.1) is not applied: llama.cpp's llama graph attends over every position.
// With expert_count > 0 (Mixtral) every layer's FFN is a mixture of experts instead: softmax
// router, the top expert_used_count experts with their weights renormalised, each a SwiGLU of
// feed_forward_length (docs/design/moe.md); no shared expert (llama.cpp's llama graph has none).
#include <string>

#include "graph.h"

namespace sjkv {
namespace replay {
namespace graph {
namespace {

class LlamaModel final : public GraphModel {
 public:
  using GraphModel::GraphModel;

 private:
  void layer(uint32_t il, Ubatch& u, Kv& kv) const override {
    const Layer& L = layers_[il];
    norm(u, L.attn_norm);
    qkv(L, u);
    rope(L, u);
    attention(il, L, u, kv, default_attn_scale());
    residual(u);
    norm(u, L.ffn_norm);
    if (moe_.n_expert) moe_ffn(L, u);
    else ffn(L, Act::silu, u);
    residual(u);
  }
  // A dense file needs every layer's FFN, a Mixtral file every layer's router and experts
  // (llama.cpp loads one set or the other, by expert_count).
  void check_arch() override {
    for (uint32_t il = 0; il < layers_.size(); ++il) {
      const Layer& L = layers_[il];
      const char* missing = nullptr;
      if (moe_.n_expert) {
        if (!L.router.rows) missing = "ffn_gate_inp.weight";
        else if (L.gate_exps.empty()) missing = "ffn_gate_exps.weight";
        else if (L.up_exps.empty()) missing = "ffn_up_exps.weight";
        else if (L.down_exps.empty()) missing = "ffn_down_exps.weight";
      } else {
        if (!L.gate.rows) missing = "ffn_gate.weight";
        else if (!L.up.rows) missing = "ffn_up.weight";
        else if (!L.down.rows) missing = "ffn_down.weight";
      }
      if (missing)
        throw FileError(f_.path(), "missing tensor 'blk." + std::to_string(il) + "." + missing + "'" +
                                       (moe_.n_expert ? " (expert_count " + std::to_string(moe_.n_expert) + ")" : ""));
    }
  }
};

}  // namespace

ArchEntry llama() {
  static const ArchTable t{"llama",
                          RopeStyle::norm,
                          SwaRope::global,
                          RopeFactors::freqs,
                          false,
                          {{"attention.scale", &Hparams::attn_scale, 0.0f}, {"rope.freq_base", &Hparams::rope_base, 10000.0f}},
                          join({{vec("attn_norm.weight", Dim::embd, &Layer::attn_norm)},
                                qkv_slots(true),
                                {vec("attn_output.bias", Dim::embd, &Layer::bo, false),
                                 vec("ffn_norm.weight", Dim::embd, &Layer::ffn_norm)},
                                not_required(gated_ffn_slots()),
                                not_required(routed_expert_slots())}),
                          false,
                          Moe::when_counted,
                          false,
                          false,
                          true,   // the experts' width is feed_forward_length
                          true};  // ggml's RoPE angles when the file has experts
  return {&t, [](const std::string& path, const LoadOptions& opt) { return make<LlamaModel>(path, opt, t); }};
}

}  // namespace graph
}  // namespace replay
}  // namespace sjkv
