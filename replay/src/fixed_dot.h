// A dot product in one fixed order, the same bits on every path and thread count: eight
// lanes (lane j the products of i = j, j + 8, ... in increasing i), the lanes summed in a fixed
// tree, then the last n % 8 products in order. Defined in kv_f32.cpp.
#pragma once

#include <cstdint>

namespace sjkv {
namespace replay {

float dot(const float* a, const float* b, uint32_t n);

}  // namespace replay
}  // namespace sjkv
