// The version of the replay engine's numbers: scripts/study keys its store of scores by it
// (`sjkv-replay engine` prints it), so scores made by an older engine are never reused.
#pragma once

namespace sjkv {
namespace replay {

// Bump it whenever the bits of the forward pass or of any arm can change (dequantizers,
// matrix products, attention, a codec arm's sealing or decoding, the reference encoding).
constexpr const char* kEngineVersion = "2";  // 2: products over the GGUF blocks (gemm.h)

}  // namespace replay
}  // namespace sjkv
