// CUDA twins of the codec: staging write, seal and decode, on the same host-device
// per-element code as the CPU (sjkv/hd.h, balance.h, record.h, trellis.h, staging.h).
//
// Two layers of API:
//  - the reference twins (one thread per record or row) that call the SJKV_HD reference
//    functions as they are: staging_encode_rows, seal_records_ref, decode_records;
//  - the tuned kernels (one thread block per record, warp-parallel reductions and Viterbi),
//    with a device-buffer API on a stream and a host-buffer convenience form. Both give the
//    bytes of seal_record(..., SealPath::reference).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "sjkv/balance.h"
#include "sjkv/layout.h"
#include "sjkv/seal.h"
#include "sjkv/staging.h"
#include "sjkv/status.h"

namespace sjkv {
namespace cuda {

// Number of usable CUDA devices (0 when there is no driver or no device).
int device_count();
std::string device_name(int device);

// ---- reference twins (host buffers) -------------------------------------------------------

// Host buffers in, host buffers out; returns an empty string on success, else the CUDA
// error text. Rows are [n_rows][D] floats; out is [n_rows][staging_row_bytes].
std::string staging_encode_rows(StagingType t, const float* x, size_t n_rows, uint32_t D, uint8_t* out);

// n records, record i from k + i*G*stride and v + i*G*stride (fp16 halves), written to
// out + i*layout.bytes. Scalar bodies only. Same bytes as the CPU reference seal.
std::string seal_records_ref(const RecordLayout& l, uint32_t iters, BalanceMode mode, size_t n, const uint16_t* k,
                             const uint16_t* v, size_t row_stride, uint8_t* out);

// All G K rows then all G V rows of each of n records: out [n][2][G][D] floats. Scalar
// bodies only (Engine::decode covers both bodies).
std::string decode_records(const RecordLayout& l, size_t n, const uint8_t* recs, float* out);

// ---- tuned kernels --------------------------------------------------------------------------

// Per-record outcome written by the device: code is an ErrorCode value; side/token/channel
// name the first non-finite input (K before V, tokens then channels), as the CPU does.
struct RecordStatus {
  uint32_t code;
  uint32_t side;
  uint32_t token;
  uint32_t channel;
};

Status to_status(const RecordStatus& s, size_t record);

// Device scratch, device copies of codebooks and staging buffers for repeated calls; not
// thread-safe (one per host thread / stream). Every call returns "" on success, else a
// one-line CUDA error text; per-record input problems come back as RecordStatus / Status.
class Engine {
 public:
  Engine();
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Seal with the balanced tile in shared memory when it fits (default), or always in global
  // memory (for benchmarks and tests of both paths). The bytes are the same.
  void set_shared_tile(bool on);
  // Row stds with 8 lanes per row combined by xor shuffles, or (default) a thread per row
  // with 8 chunk accumulators. The bytes are the same; benchmarks compare the two.
  void set_row_std_lanes8(bool on);

  // Device API. k / v: device fp16 halves, record i's row t at k + i*record_stride +
  // t*row_stride (record_stride 0: G*row_stride). out: device, n*l.bytes bytes, 4-byte
  // aligned. status: device, n entries. opt.codebooks: DEVICE pointers (null: built-in
  // tables; at 4 bits the identity codebook, uploaded once). Asynchronous on `stream`,
  // except for a small synchronous codebook check when tables are given.
  std::string seal_async(const RecordLayout& l, const SealOptions& opt, size_t n, const uint16_t* k,
                         const uint16_t* v, size_t row_stride, size_t record_stride, uint8_t* out,
                         RecordStatus* status, cudaStream_t stream);

  // Host API: the arguments of sjkv::seal_records (host pointers, host codebooks); one
  // Status per record in `statuses` (failed records are zero-filled, as on the CPU).
  std::string seal(const RecordLayout& l, const SealOptions& opt, size_t n, const uint16_t* const* k_rows,
                   const uint16_t* const* v_rows, size_t row_stride, uint8_t* out, std::vector<Status>* statuses);

  // Device API: decode n records (device) into out [n][2][G][D] floats (device), a warp per
  // row. cb: device pointers as for seal_async.
  std::string decode_async(const RecordLayout& l, const TrellisCodebooks& cb, size_t n, const uint8_t* recs,
                           float* out, cudaStream_t stream);
  // Host API of the same (host codebooks).
  std::string decode(const RecordLayout& l, const TrellisCodebooks& cb, size_t n, const uint8_t* recs, float* out);

  // Device API: staging write of n_rows rows of D floats (device): each row is rotated by
  // Hadamard blocks of `rot` values (rot 0: already rotated) and written as a staging row
  // (out: n_rows * staging_row_bytes). bad[r] (device, may be null) receives
  // staging_encode_row_checked's result (-1, or the first refused value's index).
  std::string staging_write_async(StagingType t, const float* x, size_t n_rows, uint32_t D, uint32_t rot,
                                  uint8_t* out, int32_t* bad, cudaStream_t stream);
  std::string staging_write(StagingType t, const float* x, size_t n_rows, uint32_t D, uint32_t rot, uint8_t* out,
                            int32_t* bad);

  // Device API: decode n_rows staging rows (ring rows) into floats, a thread per value.
  std::string staging_decode_async(StagingType t, const uint8_t* rows, size_t n_rows, uint32_t D, float* out,
                                   cudaStream_t stream);
  std::string staging_decode(StagingType t, const uint8_t* rows, size_t n_rows, uint32_t D, float* out);

 private:
  struct Impl;
  Impl* impl_;
};

}  // namespace cuda
}  // namespace sjkv
