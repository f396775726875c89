// Phi-3 (GGUF architecture "phi3"): q|k|v from one fused matrix (or three), RoPE on halves
// (NEOX) with the long or short frequency factors ("longrope": the long ones when the context
// exceeds rope.scaling.original_context_length, as llama.cpp picks them) and cos/sin times
// rope.scaling.attn_factor, q times 1/sqrt(D), a SwiGLU whose gate and up halves come from one
// fused matrix. A declared sliding window is not applied (llama.cpp disables Phi-3's).
#include <cmath>

#include "graph.h"

namespace sjkv {
namespace replay {
namespace graph {
namespace {

class Phi3Model final : public GraphModel {
 public:
  using GraphModel::GraphModel;

 private:
  void layer(uint32_t il, Ubatch& u, Kv& kv) const override {
    const Layer& L = layers_[il];
    norm(u, L.attn_norm);
    qkv(L, u);
    rope(L, u);
    scale_q(u, 1.0f / std::sqrt(static_cast<float>(info_.head_dim)));
    attention(il, L, u, kv, 1.0f);
    residual(u);
    norm(u, L.ffn_norm);
    ffn(L, Act::silu, u);
    residual(u);
  }
};

}  // namespace

ArchEntry phi3() {
  static const ArchTable t{"phi3",
                          RopeStyle::neox,
                          SwaRope::global,
                          RopeFactors::long_short,
                          false,
                          {{"rope.freq_base", &Hparams::rope_base, 10000.0f},
                           {"rope.scaling.attn_factor", &Hparams::rope_attn_factor, 1.0f}},
                          join({{vec("attn_norm.weight", Dim::embd, &Layer::attn_norm)},
                                qkv_slots(false),
                                {vec("ffn_norm.weight", Dim::embd, &Layer::ffn_norm),
                                 mat("ffn_up.weight", Dim::embd, Dim::ff2, &Layer::up),
                                 mat("ffn_down.weight", Dim::ff, Dim::embd, &Layer::down)}})};
  return {&t, [](const std::string& path, const LoadOptions& opt) { return make<Phi3Model>(path, opt, t); }};
}

}  // namespace graph
}  // namespace replay
}  // namespace sjkv
