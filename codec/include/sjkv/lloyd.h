// The per-entry statistics of one generalized Lloyd pass over trellis sequences (trellis
// codebook training, train/): the fixed summation order shared by the CPU trainer and the
// CUDA kernels, so both give the same binary64 sums and therefore the same table bits.
//
// Order: sequences are cut into chunks of kLloydChunk; inside a chunk, sequences in order and
// positions in order, every coded target y adds to the sum of its window w (and to the
// chunk's squared error); the chunks' partial sums are then added in chunk order, each total
// starting from 0.0.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "sjkv/hd.h"
#include "sjkv/trellis.h"

namespace sjkv {

constexpr size_t kLloydChunk = 512;  // sequences per partial sum; fixed so results do not depend on threads

// One squared error term (y - cbf[w])^2 in binary64.
SJKV_HD inline double lloyd_sq_err(float y, float c) {
  const double d = op::dsub(static_cast<double>(y), static_cast<double>(c));
  return op::dmul(d, d);
}

// One coded sequence: targets y[len] and their codes (Viterbi path from state 0). Adds to
// the chunk's error `e` (returned), and when sum/cnt are non-null to the chunk's per-window
// sums, in position order.
SJKV_HD inline double lloyd_accumulate(const float* y, const uint8_t* codes, uint32_t len, uint32_t bits,
                                       const float* cbf, double e, double* sum, uint32_t* cnt) {
  uint32_t st = 0;
  for (uint32_t i = 0; i < len; ++i) {
    const uint32_t w = st + kTrellisStates * codes[i];
    e = op::dadd(e, lloyd_sq_err(y[i], cbf[w]));
    if (sum) {
      sum[w] = op::dadd(sum[w], static_cast<double>(y[i]));
      ++cnt[w];
    }
    st = trellis::next_state(w, bits);
  }
  return e;
}

// One whole pass run elsewhere (the GPU: Device::lloyd_pass), in this order: the mean squared
// error of n sequences y[n][len] coded with the binary32 table cbf[2^(6+bits)] (NaN when n is
// 0) and, when sum is non-null, the per-window sums and counts (sum/cnt resized to the table).
using LloydPass = std::function<double(const float* y, size_t n, uint32_t len, uint32_t bits, const float* cbf,
                                       std::vector<double>* sum, std::vector<uint64_t>* cnt)>;

}  // namespace sjkv
