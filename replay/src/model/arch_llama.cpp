// Llama 1-3 and Mistral (GGUF architecture "llama"): RMSNorm, q/k/v with optional biases,
// RoPE on adjacent pairs (llama.cpp's NORM; the converter permutes q and k for it), GQA, the
// attention scale from attention.scale or 1/sqrt(D), SwiGLU. Llama 3's RoPE scaling is the
// rope_freqs tensor (the converter computes the factors). A declared attention.sliding_window
// (Mistral 7B v0.1) is not applied: llama.cpp's llama graph attends over every position.
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
    ffn(L, Act::silu, u);
    residual(u);
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
                                gated_ffn_slots()})};
  return {&t, [](const std::string& path, const LoadOptions& opt) { return make<LlamaModel>(path, opt, t); }};
}

}  // namespace graph
}  // namespace replay
}  // namespace sjkv
