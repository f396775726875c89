// cuRAND's host Philox stream (CURAND_RNG_PSEUDO_PHILOX4_32_10, default ordering) as
// curandGenerateUniform gives it: where element n comes from, the Philox4x32-10 block
// (Salmon et al. 2011) and the uniform conversion. The training split draws it: through cuRAND
// where the toolkit is, through philox_stream_uniform elsewhere (the same floats, tested
// against cuRAND in tests/train), and on the device (kernels/train_kernels.cu).
#pragma once

#include <cstdint>

#include "sjkv/hd.h"

namespace sjkv {

// Where element n of the host generator's stream comes from (measured against
// curandGenerateUniform / curandGenerate): the host generator runs 65536 Philox subsequences
// side by side, each producing 4 values per counter step, so with g = n / 4 the value is output
// word n % 4 of the subsequence g % 65536 at counter g / 65536. On the device that is
// curand_init(seed, g % 65536, 4 * (g / 65536)) and curand4(). Successive host calls continue
// at the next element.
constexpr uint64_t kCurandPhiloxHostSubsequences = 65536;
struct PhiloxPosition {
  uint64_t subsequence, counter;
  uint32_t word;
};
SJKV_HD inline PhiloxPosition curand_host_philox_position(uint64_t n) {
  const uint64_t g = n / 4;
  return PhiloxPosition{g % kCurandPhiloxHostSubsequences, g / kCurandPhiloxHostSubsequences,
                        static_cast<uint32_t>(n % 4)};
}
// The uniform conversion of curandGenerateUniform: x * 2^-32 + 2^-33 in binary32, two roundings.
SJKV_HD inline float curand_uniform_from_bits(uint32_t x) {
  return op::fadd(op::fmul(static_cast<float>(x), 2.3283064e-10f), 1.1641532e-10f);
}

// Philox4x32-10: ten rounds over the 128-bit counter {x, y, z, w} with the 64-bit key, the
// key bumped by the Weyl constants between rounds. cuRAND's state at (subsequence s, counter c)
// is the counter {lo(c), hi(c), lo(s), hi(s)} under the key {lo(seed), hi(seed)}.
SJKV_HD inline void philox4x32_10(const uint32_t ctr_in[4], uint64_t seed, uint32_t out[4]) {
  uint32_t c[4] = {ctr_in[0], ctr_in[1], ctr_in[2], ctr_in[3]};
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int r = 0; r < 10; ++r) {
    const uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c[0];
    const uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * c[2];
    const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c[1] ^ k0;
    const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c[3] ^ k1;
    c[0] = n0;
    c[1] = static_cast<uint32_t>(p1);
    c[2] = n2;
    c[3] = static_cast<uint32_t>(p0);
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  for (int i = 0; i < 4; ++i) out[i] = c[i];
}

// Element n of the stream as curandGenerateUniform returns it.
SJKV_HD inline float philox_stream_uniform(uint64_t seed, uint64_t n) {
  const PhiloxPosition pos = curand_host_philox_position(n);
  const uint32_t ctr[4] = {static_cast<uint32_t>(pos.counter), static_cast<uint32_t>(pos.counter >> 32),
                           static_cast<uint32_t>(pos.subsequence), static_cast<uint32_t>(pos.subsequence >> 32)};
  uint32_t out[4];
  philox4x32_10(ctr, seed, out);
  return curand_uniform_from_bits(out[pos.word]);
}

}  // namespace sjkv
