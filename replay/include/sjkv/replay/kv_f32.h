// The exact f32 cache: every K/V row kept as given, attention in f32 with a double-precision
// softmax denominator. The reference the other arms are measured against, and the cache the
// model's own tests run on.
#pragma once

#include <memory>

#include "sjkv/replay/kv.h"

namespace sjkv {
namespace replay {

std::unique_ptr<LayerKv> make_f32_layer(const LayerShape& s);

}  // namespace replay
}  // namespace sjkv
