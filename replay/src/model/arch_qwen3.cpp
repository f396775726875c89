// Qwen 3 (GGUF architecture "qwen3"): the Llama block without biases, each head of q and k
// RMS-normed before RoPE on halves (NEOX), the head size from attention.key_length (it need not
// be n_embd / n_head), the attention scale 1/sqrt(D).
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
    ffn(L, Act::silu, u);
    residual(u);
  }
};

}  // namespace

const ArchTable& qwen3_table() {
  static const ArchTable t{"qwen3",
                           RopeStyle::neox,
                           SwaRope::global,
                           RopeFactors::none,
                           false,
                           {{"rope.freq_base", &Hparams::rope_base, 10000.0f}},
                           {vec("attn_norm.weight", Dim::embd, &Layer::attn_norm),
                            mat("attn_q.weight", Dim::embd, Dim::q, &Layer::wq, false),
                            mat("attn_k.weight", Dim::embd, Dim::kv, &Layer::wk, false),
                            mat("attn_v.weight", Dim::embd, Dim::kv, &Layer::wv, false),
                            mat("attn_qkv.weight", Dim::embd, Dim::qkv, &Layer::wqkv, false),
                            vec("attn_q_norm.weight", Dim::head, &Layer::q_norm),
                            vec("attn_k_norm.weight", Dim::head, &Layer::k_norm),
                            mat("attn_output.weight", Dim::q, Dim::embd, &Layer::wo),
                            vec("ffn_norm.weight", Dim::embd, &Layer::ffn_norm),
                            mat("ffn_gate.weight", Dim::embd, Dim::ff, &Layer::gate),
                            mat("ffn_up.weight", Dim::embd, Dim::ff, &Layer::up),
                            mat("ffn_down.weight", Dim::ff, Dim::embd, &Layer::down)}};
  return t;
}

std::unique_ptr<GraphModel> make_qwen3(const std::string& path, const LoadOptions& opt) {
  return std::make_unique<Qwen3Model>(path, qwen3_table(), opt);
}

}  // namespace graph
}  // namespace replay
}  // namespace sjkv
