// Captured K/V of the compressed layers of one sequence, in memory. File form: docs/FORMAT.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sjkv {

struct CaptureLayer {
  uint32_t layer_id = 0;    // the model's layer index
  std::vector<uint16_t> k;  // fp16 bit patterns, [tokens][kv_heads][head_dim]
  std::vector<uint16_t> v;  // fp16 bit patterns, [tokens][kv_heads][head_dim]
};

struct Capture {
  std::string model;       // model name or file name; may be empty
  std::string source;      // where the values came from, e.g. "kvd:FILE", "llama.cpp-seq-state:FILE"
  uint32_t head_dim = 0;
  uint32_t kv_heads = 0;
  uint32_t tokens = 0;
  bool rotated = false;          // values already in the Hadamard-rotated basis
  uint32_t rotation_block = 0;   // when rotated: the Hadamard block used (0 = unknown)
  std::vector<int32_t> token_ids;  // empty or `tokens` entries
  std::vector<CaptureLayer> layers;

  size_t values_per_layer() const { return static_cast<size_t>(tokens) * kv_heads * head_dim; }
  // Throws std::invalid_argument naming the first inconsistency (sizes, dims, duplicate layers).
  void check_consistent() const;
};

}  // namespace sjkv
