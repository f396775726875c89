// CUDA twins of the codec's reference paths, built on the same host-device headers as the
// CPU code (one thread per record or per row). They exist so that the shared per-element
// code is compiled for the device from the start; the tuned kernels (warp-parallel
// balancing and Viterbi, fused attention) come with the GPU work.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "sjkv/balance.h"
#include "sjkv/layout.h"
#include "sjkv/staging.h"

namespace sjkv {
namespace cuda {

// Number of usable CUDA devices (0 when there is no driver or no device).
int device_count();
std::string device_name(int device);

// Host buffers in, host buffers out; returns an empty string on success, else the CUDA
// error text. Rows are [n_rows][D] floats; out is [n_rows][staging_row_bytes].
std::string staging_encode_rows(StagingType t, const float* x, size_t n_rows, uint32_t D, uint8_t* out);

// n records, record i from k + i*G*stride and v + i*G*stride (fp16 halves), written to
// out + i*layout.bytes. Same bytes as the CPU reference seal.
std::string seal_records_ref(const RecordLayout& l, uint32_t iters, BalanceMode mode, size_t n, const uint16_t* k,
                             const uint16_t* v, size_t row_stride, uint8_t* out);

// All G K rows then all G V rows of each of n records: out [n][2][G][D] floats.
std::string decode_records(const RecordLayout& l, size_t n, const uint8_t* recs, float* out);

}  // namespace cuda
}  // namespace sjkv
