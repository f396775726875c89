// Qwen 3.5 MoE (GGUF architecture "qwen35moe", the 35B-A3B class): the qwen35 hybrid
// (arch_qwen35.cpp) whose every FFN is a mixture of experts: a softmax router, the top
// expert_used_count experts with their weights renormalised, plus a shared expert gated by
// sigmoid(ffn_gate_inp_shexp . x).
#include "qwen35_common.h"

namespace sjkv {
namespace replay {
namespace graph {

ArchEntry qwen35moe() {
  static const ArchTable t{"qwen35moe",
                          RopeStyle::neox,
                          SwaRope::global,
                          RopeFactors::none,
                          false,
                          {{"rope.freq_base", &Hparams::rope_base, 10000.0f}},
                          join({qwen35_attention_slots(), moe_slots()}),
                          true,
                          Moe::required};
  return {&t, [](const std::string& path, const LoadOptions& opt) { return make<Qwen35Model>(path, opt, t); }};
}

}  // namespace graph
}  // namespace replay
}  // namespace sjkv
