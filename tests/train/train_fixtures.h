// Test captures shared by the train/ tests.
#pragma once

#include <cstdint>
#include <vector>

#include "sjkv/io/capture.h"
#include "sjkv/testgen.h"

namespace sjkv::train_test {

// One layer, `heads` KV heads, `groups` groups of 128 tokens, D = 128, model basis: the
// format's fill_group tiles (3% outlier channels with 24-31x spread, per-token factors),
// which the pipeline rotates into heavy-tailed rotated channels.
inline Capture make_capture(uint32_t heads, uint32_t groups, uint64_t seed) {
  Capture cap;
  cap.head_dim = 128;
  cap.kv_heads = heads;
  cap.tokens = groups * 128;
  cap.layers.resize(1);
  auto& L = cap.layers[0];
  L.k.resize(cap.values_per_layer());
  L.v.resize(cap.values_per_layer());
  std::vector<uint16_t> K(128 * 128), V(128 * 128);
  std::vector<int32_t> chf(128);
  for (uint32_t g = 0; g < groups; ++g)
    for (uint32_t h = 0; h < heads; ++h) {
      fill_group(128, 128, seed + 1000 * g + h, K.data(), V.data(), chf.data());
      for (uint32_t t = 0; t < 128; ++t)
        for (uint32_t d = 0; d < 128; ++d) {
          const size_t i = (static_cast<size_t>(g * 128 + t) * heads + h) * 128 + d;
          L.k[i] = K[t * 128 + d];
          L.v[i] = V[t * 128 + d];
        }
    }
  return cap;
}

}  // namespace sjkv::train_test
