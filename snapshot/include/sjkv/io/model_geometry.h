// The cache geometry of the model a GGUF file holds: which layers keep a KV cache (full
// attention, sliding window, recurrent, draft heads) and their attention shape.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sjkv/io/gguf.h"
#include "sjkv/plan.h"

namespace sjkv {

enum class LayerKind : uint32_t {
  full_attention = 0,  // keeps a KV cache for the whole context: what sjkv compresses
  sliding_window = 1,  // keeps the last `sliding_window` positions only
  recurrent = 2,       // no KV cache (linear attention / SSM state)
  nextn = 3,           // multi-token-prediction draft block, outside the main stack
};
const char* layer_kind_name(LayerKind k);

struct LayerInfo {
  LayerKind kind = LayerKind::full_attention;
  uint32_t n_head = 0;
  uint32_t n_head_kv = 0;
  uint32_t head_dim_k = 0;
  uint32_t head_dim_v = 0;
};

struct ModelGeometry {
  std::string architecture;       // general.architecture
  uint32_t n_layers = 0;          // <arch>.block_count
  uint64_t context_length = 0;    // <arch>.context_length (training context), 0 when absent
  uint32_t sliding_window = 0;    // <arch>.attention.sliding_window, 0 when absent
  std::string layer_rule;         // how the layer kinds were decided, for reports
  std::vector<LayerInfo> layers;  // n_layers entries

  std::vector<uint32_t> full_attention_layers() const;
  // The full-attention layers as the planner's geometry.
  CacheGeometry cache_geometry() const;
};

// Reads the architecture and its per-layer attention shape:
//   n_layers       <arch>.block_count (1 to 65,536)
//   heads          <arch>.attention.head_count, required; head_count_kv, default head_count;
//                  either may be a scalar or an array with one entry per layer
//   head_dim       <arch>.attention.key_length / value_length, else embedding_length /
//                  head_count; sliding layers use key_length_swa / value_length_swa if present
//   layer kinds, first match wins:
//     nextn        the last <arch>.nextn_predict_layers layers (a draft head, not the stack)
//     recurrent    head_count_kv 0 on that layer; or, for hybrid models, every layer except
//                  each <arch>.full_attention_interval-th ((il + 1) % interval == 0), the key
//                  or llama.cpp's default 4 for qwen3next / qwen35 / qwen35moe
//     sliding      <arch>.attention.sliding_window_pattern: a per-layer bool array (true =
//                  sliding) or a period p (layer il slides unless il % p == p - 1, llama.cpp's
//                  set_swa_pattern); without the key, llama.cpp's built-in periods when
//                  <arch>.attention.sliding_window > 0: gemma3 6 (layers with (il + 1) % 6 == 0
//                  are global), gemma2 2, cohere2 4
//     full         every other layer
// Throws FileError for a missing or inconsistent key, and for an attention layer (full or
// sliding) whose head_count is 0 or not a multiple of its head_count_kv.
ModelGeometry geometry_from_gguf(const GgufFile& f);

// What a tool needs of a model file: its cache geometry (sjkv-encode plan and encode --model,
// sjkv-train --model) or its forward pass too (sjkv-replay).
enum class ModelUse { geometry, forward };
// The general.architecture names sjkv supports for that use: the forward pass's gemma2,
// gemma3, llama, phi3, qwen2, qwen3; for the geometry also the hybrid Qwen 3.5 family
// (qwen35, qwen35moe, qwen3next) and cohere2, whose layer layouts the rules above know.
std::vector<std::string> supported_architectures(ModelUse use);
// geometry_from_gguf for a model file a tool takes: FileError naming the file for an
// architecture not supported for `use` (the message lists them), or a layer without KV heads
// (read as recurrent) in an architecture that has none.
ModelGeometry supported_geometry(const GgufFile& f, ModelUse use);

}  // namespace sjkv
