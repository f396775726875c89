// Qwen 2 / 2.5 (GGUF architecture "qwen2"): the Llama block with q/k/v biases, RoPE on
// halves (NEOX) and the attention scale 1/sqrt(D).
#include "graph.h"

namespace sjkv {
namespace replay {
namespace graph {
namespace {

class Qwen2Model final : public GraphModel {
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

ArchEntry qwen2() {
  static const ArchTable t = [] {
    ArchTable a{"qwen2",
                RopeStyle::neox,
                SwaRope::global,
                RopeFactors::none,
                false,
                {{"rope.freq_base", &Hparams::rope_base, 10000.0f},
                 {"rope.scaling.attn_factor", &Hparams::rope_attn_factor, 1.0f}},
                join({{vec("attn_norm.weight", Dim::embd, &Layer::attn_norm)},
                      qkv_slots(true),
                      {vec("ffn_norm.weight", Dim::embd, &Layer::ffn_norm)},
                      gated_ffn_slots()})};
    a.yarn = true;  // Qwen 2.5 / 3 long-context files (rope.scaling.type "yarn")
    return a;
  }();
  return {&t, [](const std::string& path, const LoadOptions& opt) { return make<Qwen2Model>(path, opt, t); }};
}

}  // namespace graph
}  // namespace replay
}  // namespace sjkv
