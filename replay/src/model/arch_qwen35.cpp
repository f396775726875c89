// Qwen 3.5 (GGUF architecture "qwen35"), the hybrid of the note's headline model: three of
// every four layers a Gated DeltaNet (recurrent, a fixed-size state), the others gated full
// attention (a query projection that also yields each head's output gate, q/k head norms, RoPE
// on halves over the first rope.dimension_count values of each head, scale 1/sqrt(D)). Every
// layer's FFN input goes through post_attention_norm. Which layers are recurrent comes from the
// file (attention.recurrent_layers, else full_attention_interval); trailing draft (nextn)
// layers are not run, as llama.cpp does not run them. The converter folds Qwen's "1 + w" into
// the norm weights, so they multiply as they are. docs/design/qwen35.md has the details.
#include "qwen35_common.h"

namespace sjkv {
namespace replay {
namespace graph {

std::vector<TensorSlot> qwen35_attention_slots() {
  return join({{vec("attn_norm.weight", Dim::embd, &Layer::attn_norm),
                vec("post_attention_norm.weight", Dim::embd, &Layer::post_attn_norm)},
               only(LayerSel::attention,
                    {mat("attn_q.weight", Dim::embd, Dim::q2, &Layer::wq), mat("attn_k.weight", Dim::embd, Dim::kv, &Layer::wk),
                     mat("attn_v.weight", Dim::embd, Dim::kv, &Layer::wv),
                     mat("attn_output.weight", Dim::q, Dim::embd, &Layer::wo),
                     vec("attn_q_norm.weight", Dim::head, &Layer::q_norm),
                     vec("attn_k_norm.weight", Dim::head, &Layer::k_norm)}),
               delta_net_slots()});
}

void check_text_rope_sections(const GgufFile& f, const std::string& arch, uint32_t head_dim) {
  const std::string key = arch + ".rope.dimension_sections";
  const GgufValue* v = f.find(key);
  if (!v) throw FileError(f.path(), "missing key '" + key + "'");
  if (!v->is_array() || v->count() != 4) throw FileError(f.path(), "key '" + key + "' is not an array of 4 integers");
  int64_t sec[4], total = 0;
  for (uint64_t i = 0; i < 4; ++i) {
    const std::optional<int64_t> s = v->to_signed(i);
    if (!s || *s < 0 || *s > 65536) throw FileError(f.path(), "key '" + key + "' holds a section out of range");
    total += sec[i] = *s;
  }
  const std::string nk = arch + ".rope.dimension_count";
  const uint64_t n_rot = f.has(nk) ? f.get_uint(nk) : head_dim;
  if (total == 0) throw FileError(f.path(), "key '" + key + "' has no dimensions");
  // llama.cpp's interleaved rule: pair p is in section (p mod total) mod 3 of the first three
  // while that section still has pairs left, else in the fourth.
  for (uint64_t p = 0; p < n_rot / 2; ++p) {
    const int64_t s = static_cast<int64_t>(p % static_cast<uint64_t>(total));
    const bool text = (s % 3 == 0 && s < 3 * sec[0]) || (s % 3 == 1 && s < 3 * sec[1]) || (s % 3 == 2 && s < 3 * sec[2]);
    if (!text)
      throw FileError(f.path(), "rope pair " + std::to_string(p) + " falls in the fourth section of '" + key +
                                    "' (not rotated for text); only sections that rotate every pair are supported");
  }
}

ArchEntry qwen35() {
  static const ArchTable t{"qwen35",
                          RopeStyle::neox,
                          SwaRope::global,
                          RopeFactors::none,
                          false,
                          {{"rope.freq_base", &Hparams::rope_base, 10000.0f}},
                          join({qwen35_attention_slots(), gated_ffn_slots()}),
                          true,
                          Moe::none};
  return {&t, [](const std::string& path, const LoadOptions& opt) { return make<Qwen35Model>(path, opt, t); }};
}

}  // namespace graph
}  // namespace replay
}  // namespace sjkv
