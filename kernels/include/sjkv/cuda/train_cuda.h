// Trellis codebook training on the GPU: batched Viterbi encodes, the per-window sums of a
// Lloyd pass in the order of sjkv/lloyd.h (the same binary64 bits as the CPU trainer), and
// uniforms from cuRAND's device Philox4_32_10 laid out as the host generator lays them out.
// Needs only the codec headers and the CUDA toolkit (no HDF5), so it builds and runs where
// the snapshot and train libraries do not.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "sjkv/hd.h"
#include "sjkv/philox.h"

namespace sjkv {
namespace cuda {

// Viterbi (trellis::viterbi_ref's recursion and float operations) of n sequences of `len`
// targets: y [n][len] and cbf [2^(6+bits)] device arrays; codes [n][len] and wins [n][len]
// (the window of each code) device outputs, either may be null. Enqueued on `stream`.
std::string viterbi_batch(const float* y, size_t n, uint32_t len, uint32_t bits, const float* cbf, uint8_t* codes,
                          uint16_t* wins, void* stream = nullptr);

// Host buffers in and out (tests); synchronous.
std::string viterbi_batch_host(const float* y, size_t n, uint32_t len, uint32_t bits, const float* cbf,
                               uint8_t* codes, uint16_t* wins);

// One Lloyd pass over targets kept on the device: Viterbi of every sequence, then per chunk
// of kLloydChunk sequences the squared error and (optionally) per-window sums and counts,
// chunks combined in chunk order. Same results as the CPU pass of train.cpp, bit for bit.
class LloydPass {
 public:
  LloydPass() = default;
  ~LloydPass();
  LloydPass(const LloydPass&) = delete;
  LloydPass& operator=(const LloydPass&) = delete;
  // Copies n sequences of len targets (host y [n][len]) to the device.
  std::string upload(const float* y, size_t n, uint32_t len);
  // Mean squared error into *mse (NaN when there are no sequences); when sum is non-null,
  // sum/cnt receive 2^(6+bits) entries. cbf: host table, 2^(6+bits) binary32 entries.
  std::string run(uint32_t bits, const float* cbf, double* mse, std::vector<double>* sum,
                  std::vector<uint64_t>* cnt);
  size_t sequences() const { return n_; }

 private:
  void release();
  float* y_ = nullptr;
  uint16_t* wins_ = nullptr;
  size_t n_ = 0;
  uint32_t len_ = 0;
};

// The host generator's stream (where element n comes from, the uniform conversion) is
// sjkv/philox.h's.

// Elements [offset, offset + n) of that stream as uniforms, generated on the device with
// curand_init / curand4 (Philox4_32_10); out is a device array of n floats.
std::string philox_uniform(uint64_t seed, uint64_t offset, size_t n, float* out, void* stream = nullptr);
// Host output (tests); synchronous.
std::string philox_uniform_host(uint64_t seed, uint64_t offset, size_t n, float* out);
// The train / held-out split of SplitDrawer::draw on the device: held[i] = u[i] < fraction
// (compared in binary64), u the elements [offset, offset + n). Host output.
std::string split_draw_host(uint64_t seed, uint64_t offset, size_t n, double fraction, uint8_t* held);

}  // namespace cuda
}  // namespace sjkv
