// The cache geometry of the model a GGUF file holds: which layers keep a KV cache (full
// attention, sliding window, recurrent, draft heads), their attention shape, and the state a
// hybrid model's recurrent layers keep per sequence.
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
  // Gemma 4's shared-KV layers store no K/V and attend the cache of this earlier layer; -1: its own.
  int32_t kv_source = -1;
};

// The state one sequence keeps in each recurrent (Gated DeltaNet) layer of the Qwen 3.5 family
// and qwen3next, as llama.cpp's recurrent memory holds it (docs/design/qwen35.md sections 3
// and 8; f32 there):
//   conv state   (conv_kernel - 1) x conv_dim values, conv_dim = 2 x group_count x state_size
//                + inner_size: the last conv_kernel - 1 inputs of the causal convolution, time
//                contiguous per channel ({Kc - 1, conv_dim} in ggml order)
//   delta state  state_size x inner_size values: one state_size x state_size matrix per value
//                head ({S, S, time_step_rank} in ggml order)
// All zero (known() false) for a model without recurrent layers, or whose family's state shape
// sjkv does not know.
struct RecurrentShape {
  uint32_t conv_kernel = 0;     // <arch>.ssm.conv_kernel (Kc, at least 2)
  uint32_t inner_size = 0;      // <arch>.ssm.inner_size (value_dim = time_step_rank x state_size)
  uint32_t state_size = 0;      // <arch>.ssm.state_size (S: head size of the linear k and v)
  uint32_t time_step_rank = 0;  // <arch>.ssm.time_step_rank (value heads)
  uint32_t group_count = 0;     // <arch>.ssm.group_count (key heads)

  bool known() const { return conv_kernel != 0; }
  uint64_t conv_dim() const;      // 2 x group_count x state_size + inner_size
  uint64_t conv_values() const;   // (conv_kernel - 1) x conv_dim: one layer's conv state
  uint64_t delta_values() const;  // state_size x inner_size: one layer's delta state
};

struct ModelGeometry {
  std::string architecture;       // general.architecture
  uint32_t n_layers = 0;          // <arch>.block_count
  uint64_t context_length = 0;    // <arch>.context_length (training context), 0 when absent
  uint32_t sliding_window = 0;    // <arch>.attention.sliding_window, 0 when absent
  std::string layer_rule;         // how the layer kinds were decided, for reports
  std::vector<LayerInfo> layers;  // n_layers entries
  RecurrentShape recurrent;       // the recurrent layers' state shape (known() when there are any)
  // llama.cpp gives the model a hybrid memory (qwen35, qwen35moe, qwen3next): its state files
  // hold one attention cache section (the full-attention layers) and then a recurrent state.
  bool hybrid_memory = false;
  // llama.cpp writes a per-cell position record (llama_kv_cell_ext) into the KV cache section of
  // this model's state files: true for the M-RoPE / iM-RoPE architectures (qwen35, qwen35moe).
  bool state_cell_ext = false;

  // Full-attention layers that store their own K/V (a shared-KV layer reads another's).
  std::vector<uint32_t> full_attention_layers() const;
  std::vector<uint32_t> recurrent_layers() const;
  // Layers outside the nextn draft blocks (llama.cpp's n_layer(): what a hybrid's recurrent
  // state section counts).
  uint32_t main_layers() const;
  // The full-attention layers as the planner's geometry.
  CacheGeometry cache_geometry() const;
  // One sequence's recurrent state over all recurrent layers: values, and bytes at
  // `bits_per_value` bits a value (32: llama.cpp's f32; 16: the note's setting), rounded up to
  // whole bytes. 0 without recurrent layers or a known shape. std::invalid_argument for a width
  // outside 1..64.
  uint64_t recurrent_state_values() const;
  uint64_t recurrent_state_bytes(uint32_t bits_per_value) const;
  // The sliding-window layers that keep their own cache (never compressed by sjkv): how many,
  // the K and V values one cell holds over all of them, and the cells llama.cpp gives one
  // sequence (llama-kv-cache-iswa.cpp): min(n_ctx, sliding_window + n_ubatch) rounded up to 256.
  // All 0 without such layers.
  std::vector<uint32_t> sliding_layers() const;
  uint64_t sliding_values_per_cell() const;
  uint64_t sliding_cells(uint64_t n_ctx, uint32_t n_ubatch) const;
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
//   shared KV      gemma4: the last <arch>.attention.shared_kv_layers layers keep no cache and
//                  read the last own-KV layer of their kind (llama.cpp: layer K0 - 2 for sliding,
//                  K0 - 1 for full, K0 = block_count - shared_kv_layers; refused unless those
//                  two are of those kinds and of the same shape); the pattern must be an array
//   recurrent state (qwen35, qwen35moe, qwen3next with recurrent layers; RecurrentShape):
//                  <arch>.ssm.conv_kernel, ssm.inner_size, ssm.state_size, ssm.time_step_rank,
//                  ssm.group_count, all required as llama.cpp requires them, non-zero, with
//                  conv_kernel >= 2, inner_size == time_step_rank x state_size, and each
//                  layer's conv and delta state under 2^32 values (llama.cpp's row sizes are
//                  32-bit)
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
