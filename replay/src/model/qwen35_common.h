// What the two Qwen 3.5 architectures share (arch_qwen35.cpp defines it): their layer tensors
// and the check that their multi-section RoPE is, for text, RoPE on halves.
#pragma once

#include <string>
#include <vector>

#include "graph.h"

namespace sjkv {
namespace replay {
namespace graph {

// Every layer's two norms; a full-attention layer's query-and-gate, k, v, output and q/k head
// norms; a recurrent layer's Gated DeltaNet.
std::vector<TensorSlot> qwen35_attention_slots();

// llama.cpp rotates Qwen 3.5 with four position streams over rope.dimension_sections; text
// feeds the position to the first three and 0 to the fourth, so a rotated pair whose section is
// the fourth keeps its values. sjkv runs text only: FileError unless every pair of the first
// rope.dimension_count values falls in the first three sections.
void check_text_rope_sections(const GgufFile& f, const std::string& arch, uint32_t head_dim);

// The layer graph of both: the block (Gated DeltaNet or gated attention), then the FFN after
// post_attention_norm (the mixture of experts when the model has experts).
class Qwen35Model final : public GraphModel {
 public:
  using GraphModel::GraphModel;

 private:
  void check_arch() override { check_text_rope_sections(f_, info_.architecture, info_.head_dim); }
  void layer(uint32_t il, Ubatch& u, Kv& kv) const override {
    const Layer& L = layers_[il];
    norm(u, L.attn_norm);
    if (L.recurrent) delta_net(il, L, u, kv);
    else gated_attention(il, L, u, kv);
    residual(u);
    norm(u, L.post_attn_norm);
    if (moe_.n_expert) moe_ffn(L, u);
    else ffn(L, Act::silu, u);
    residual(u);
  }
};

}  // namespace graph
}  // namespace replay
}  // namespace sjkv
