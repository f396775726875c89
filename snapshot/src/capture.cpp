// Capture::check_consistent(): the rules of docs/FORMAT.md section 2 on the in-memory form.
#include <stdexcept>
#include <string>
#include <unordered_set>

#include "h5util.h"
#include "sjkv/io/capture.h"

namespace sjkv {
namespace h5 {

std::string capture_header_defect(const Capture& c) {
  if (!is_pow2_u64(c.head_dim)) return "head_dim = " + std::to_string(c.head_dim) + " is not a power of two";
  if (c.head_dim < kMinHeadDim || c.head_dim > kMaxHeadDim)
    return "head_dim = " + std::to_string(c.head_dim) + " is outside [32, 1024]";
  if (c.kv_heads < 1 || c.kv_heads > kMaxKvHeads)
    return "kv_heads = " + std::to_string(c.kv_heads) + " is outside [1, 256]";
  if (!c.rotated && c.rotation_block != 0)
    return "rotation_block = " + std::to_string(c.rotation_block) + " but the values are not rotated (must be 0)";
  if (c.rotated && c.rotation_block != 0 &&
      (!is_pow2_u64(c.rotation_block) || c.rotation_block < 32 || c.rotation_block > c.head_dim))
    return "rotation_block = " + std::to_string(c.rotation_block) +
           " is not a power of two >= 32 dividing head_dim = " + std::to_string(c.head_dim);
  std::string d = string_defect("model", c.model);
  if (d.empty()) d = string_defect("source", c.source);
  if (!d.empty()) return d;
  if (!c.token_ids.empty() && c.token_ids.size() != c.tokens)
    return "token_ids has " + std::to_string(c.token_ids.size()) + " entries, expected 0 or tokens = " +
           std::to_string(c.tokens);
  for (size_t i = 0; i < c.token_ids.size(); ++i)
    if (c.token_ids[i] < 0) return "token_ids[" + std::to_string(i) + "] = " + std::to_string(c.token_ids[i]) + " is negative";
  if (c.layers.empty()) return "no layers";
  if (c.layers.size() > kMaxLayers) return "more than 65536 layers";
  std::unordered_set<uint32_t> seen;
  for (const CaptureLayer& l : c.layers)
    if (!seen.insert(l.layer_id).second) return "layer id " + std::to_string(l.layer_id) + " appears twice";
  return {};
}

std::string capture_layer_defect(const Capture& c, size_t li) {
  const CaptureLayer& l = c.layers[li];
  const std::string base = "layers/" + std::to_string(l.layer_id) + "/";
  uint64_t n = 0;
  if (mul_overflows(static_cast<uint64_t>(c.tokens) * c.kv_heads, c.head_dim, &n))
    return "tokens x kv_heads x head_dim overflows";
  const std::vector<uint16_t>* sides[2] = {&l.k, &l.v};
  const char* names[2] = {"k", "v"};
  for (int s = 0; s < 2; ++s) {
    if (sides[s]->size() != n)
      return base + names[s] + " has " + std::to_string(sides[s]->size()) +
             " values, expected tokens x kv_heads x head_dim = " + std::to_string(n);
    const int64_t bad = first_non_finite(sides[s]->data(), sides[s]->size());
    if (bad >= 0)
      return base + names[s] + ": NaN or infinity at " +
             where3(static_cast<uint64_t>(bad), c.kv_heads, c.head_dim, "token", "channel");
  }
  return {};
}

}  // namespace h5

void Capture::check_consistent() const {
  std::string d = h5::capture_header_defect(*this);
  for (size_t i = 0; d.empty() && i < layers.size(); ++i) d = h5::capture_layer_defect(*this, i);
  if (!d.empty()) throw std::invalid_argument("capture: " + d);
}

}  // namespace sjkv
