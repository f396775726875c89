// Tuned CUDA seal, decode and staging kernels (one thread block per record for the seal).
//
// Every value goes through the same host-device formulas as the CPU reference (balance.h,
// record.h, trellis.h, staging.h); only the scheduling differs, and each reordering is one
// the format allows:
//  - sample stds follow the reduction contract: a row's std takes 8 lanes, one chunk per
//    lane, and the 8 chunk sums are combined by xor shuffles 1, 2, 4, which is exactly the
//    pairwise tree of docs/SPEC.md §6.3 (binary64 addition is commutative); a column's std
//    takes one thread with 8 independent chunk accumulators (coalesced reads);
//  - order-dependent scans (row min/max with strict min/max, refit sums, imbalance
//    max/min) run sequentially in the spec's order, one thread per row;
//  - RTN codes are OR-ed into zeroed 32-bit payload words (OR commutes, so any order);
//  - the Viterbi recursion runs one warp per sequence with two states per lane; each state's
//    branch loop is the reference's (j ascending, strict <), so ties resolve the same way.
#include <cuda_runtime.h>

#include <climits>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "sjkv/config.h"
#include "sjkv/cuda/codec_cuda.h"
#include "sjkv/hadamard.h"
#include "sjkv/record.h"
#include "sjkv/trellis.h"

namespace sjkv {
namespace cuda {
namespace {


#define SJKV_DYN_SHARED(type, name) extern __shared__ type name[]
#include "sjkv/cuda/seal_device.cuh"

__global__ void status_fill_kernel(RecordStatus* status, size_t n, RecordStatus value) {
  const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i < n) status[i] = value;
}

std::string err_text(cudaError_t e, const char* what) {
  return std::string(what) + ": " + cudaGetErrorString(e);
}

#define SJKV_CU(call, what)                          \
  do {                                               \
    const cudaError_t e_ = (call);                   \
    if (e_ != cudaSuccess) return err_text(e_, what); \
  } while (0)

unsigned blocks_for(size_t n, unsigned threads) { return static_cast<unsigned>((n + threads - 1) / threads); }

// A growable device buffer.
struct DevBuf {
  void* p = nullptr;
  size_t n = 0;
  std::string ensure(size_t bytes) {
    if (bytes <= n) return "";
    if (p) cudaFree(p);
    p = nullptr;
    n = 0;
    SJKV_CU(cudaMalloc(&p, bytes), "cudaMalloc");
    n = bytes;
    return "";
  }
  ~DevBuf() {
    if (p) cudaFree(p);
  }
};

}  // namespace

Status to_status(const RecordStatus& s, size_t record) {
  Status st;
  st.code = static_cast<ErrorCode>(s.code);
  st.side = s.side ? Side::v : Side::k;
  st.token = s.token;
  st.channel = s.channel;
  if (!st.ok()) st.detail = "record " + std::to_string(record);
  return st;
}

struct Engine::Impl {
  DevBuf scratch, id4, cbk, cbv, k, v, out, status;
  bool shared_tile = true;
  bool row_lanes8 = false;
  std::vector<RecordStatus> host_status;
  // Upload of the 4-bit identity codebook (the built-in 4-bit table) for this engine.
  std::string identity4(const uint16_t** p) {
    if (!id4.p) {
      std::string e = id4.ensure(1024 * 2);
      if (!e.empty()) return e;
      std::vector<uint16_t> table(1024);
      identity_codebook(4, table.data());
      SJKV_CU(cudaMemcpy(id4.p, table.data(), 1024 * 2, cudaMemcpyHostToDevice), "codebook upload");
    }
    *p = static_cast<const uint16_t*>(id4.p);
    return "";
  }
  // Device codebooks for a layout: given (device) tables, else built-in ones.
  std::string resolve(const RecordLayout& l, TrellisCodebooks* cb) {
    if (l.body != Body::trellis) return "";
    if (!cb->k && l.bits_k == 4) {
      std::string e = identity4(&cb->k);
      if (!e.empty()) return e;
    }
    if (!cb->v && l.bits_v == 4) {
      std::string e = identity4(&cb->v);
      if (!e.empty()) return e;
    }
    return "";
  }
  // Host codebooks uploaded to device buffers (null stays null).
  std::string upload(const RecordLayout& l, const TrellisCodebooks& host, TrellisCodebooks* dev) {
    *dev = TrellisCodebooks{};
    if (l.body != Body::trellis) return "";
    if (host.k) {
      const size_t b = trellis_entries(l.bits_k) * 2;
      std::string e = cbk.ensure(b);
      if (!e.empty()) return e;
      SJKV_CU(cudaMemcpy(cbk.p, host.k, b, cudaMemcpyHostToDevice), "codebook upload");
      dev->k = static_cast<const uint16_t*>(cbk.p);
    }
    if (host.v) {
      const size_t b = trellis_entries(l.bits_v) * 2;
      std::string e = cbv.ensure(b);
      if (!e.empty()) return e;
      SJKV_CU(cudaMemcpy(cbv.p, host.v, b, cudaMemcpyHostToDevice), "codebook upload");
      dev->v = static_cast<const uint16_t*>(cbv.p);
    }
    return "";
  }
};

Engine::Engine() : impl_(new Impl) {}
Engine::~Engine() { delete impl_; }
void Engine::set_shared_tile(bool on) { impl_->shared_tile = on; }
void Engine::set_row_std_lanes8(bool on) { impl_->row_lanes8 = on; }

std::string Engine::seal_async(const RecordLayout& l, const SealOptions& opt, size_t n, const uint16_t* k,
                               const uint16_t* v, size_t row_stride, size_t record_stride, uint8_t* out,
                               RecordStatus* status, cudaStream_t stream) {
  if (n == 0) return "";
  if (record_stride == 0) record_stride = static_cast<size_t>(l.group) * row_stride;
  if (reinterpret_cast<uintptr_t>(out) % 4 != 0) return "seal output must be 4-byte aligned";
  Unsupported why = can_implement_record(l.head_dim, l.group, l.bits_k, l.bits_v, l.body, l.axis);
  if (why == Unsupported::none && opt.iters > 64) why = Unsupported::iters_out_of_range;
  Status cbst;
  TrellisCodebooks cb = opt.codebooks;
  if (why == Unsupported::none && l.body == Body::trellis && (cb.k || cb.v)) {
    // Validate device tables on the host (a few KiB), as check_codebooks does.
    std::vector<uint16_t> hk, hv;
    TrellisCodebooks host{};
    if (cb.k) {
      hk.resize(trellis_entries(l.bits_k));
      SJKV_CU(cudaMemcpy(hk.data(), cb.k, hk.size() * 2, cudaMemcpyDeviceToHost), "codebook check");
      host.k = hk.data();
    }
    if (cb.v) {
      hv.resize(trellis_entries(l.bits_v));
      SJKV_CU(cudaMemcpy(hv.data(), cb.v, hv.size() * 2, cudaMemcpyDeviceToHost), "codebook check");
      host.v = hv.data();
    }
    cbst = check_codebooks(l, host);
  }
  if (why != Unsupported::none || !cbst.ok()) {
    SJKV_CU(cudaMemsetAsync(out, 0, n * l.bytes, stream), "cudaMemsetAsync");
    const RecordStatus bad{static_cast<uint32_t>(ErrorCode::unsupported), static_cast<uint32_t>(cbst.side), 0, 0};
    status_fill_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(status, n, bad);
    SJKV_CU(cudaGetLastError(), "status kernel launch");
    return "";
  }
  {
    std::string e = impl_->resolve(l, &cb);
    if (!e.empty()) return e;
  }
  const size_t per = scratch_bytes(l.head_dim, l.group);
  // At most ~1 GiB of scratch (and 65535 blocks) per launch; more records run in chunks of
  // equal size, so no launch is a small tail.
  size_t chunk = (size_t{1} << 30) / per;
  if (chunk < 1) chunk = 1;
  if (chunk > 65535) chunk = 65535;
  const size_t n_chunks = (n + chunk - 1) / chunk;
  chunk = (n + n_chunks - 1) / n_chunks;
  {
    std::string e = impl_->scratch.ensure(chunk * per);
    if (!e.empty()) return e;
  }
  // The tile goes to shared memory when it fits the per-block opt-in limit (about D*G*4
  // bytes: 129 KiB at D = 256), else it stays in the global scratch; the fp16 copy of the
  // inputs (D*G*2 bytes) joins it when both fit.
  const size_t tbytes = tile_bytes(l.head_dim, l.group);
  const size_t mbytes = static_cast<size_t>(l.head_dim) * l.group * 2;
  bool in_shared = false, m_shared = false;
  {
    int dev = 0, optin = 0;
    SJKV_CU(cudaGetDevice(&dev), "cudaGetDevice");
    SJKV_CU(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev), "cudaDeviceGetAttribute");
    // Leave room for the kernel's static shared memory (codebook, Viterbi costs, partials).
    cudaFuncAttributes attr;
    SJKV_CU(cudaFuncGetAttributes(&attr, seal_kernel), "cudaFuncGetAttributes");
    const size_t cap = static_cast<size_t>(optin);
    const size_t room = cap > attr.sharedSizeBytes ? cap - attr.sharedSizeBytes : 0;
    in_shared = impl_->shared_tile && tbytes <= room;
    m_shared = (in_shared ? tbytes : 0) + mbytes <= room;
  }
  const size_t dyn = (in_shared ? tbytes : 0) + (m_shared ? mbytes : 0);
  if (dyn > 0)
    SJKV_CU(cudaFuncSetAttribute(seal_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(dyn)),
            "cudaFuncSetAttribute");
  for (size_t r0 = 0; r0 < n; r0 += chunk) {
    const size_t m = n - r0 < chunk ? n - r0 : chunk;
    seal_kernel<<<static_cast<unsigned>(m), kSealThreads, dyn, stream>>>(
        l, opt.iters, opt.balance, cb, k + r0 * record_stride, v + r0 * record_stride, row_stride, record_stride,
        out + r0 * l.bytes, status + r0, static_cast<uint8_t*>(impl_->scratch.p), per, in_shared,
        impl_->row_lanes8, m_shared);
    SJKV_CU(cudaGetLastError(), "seal kernel launch");
  }
  return "";
}

std::string Engine::seal(const RecordLayout& l, const SealOptions& opt, size_t n, const uint16_t* const* k_rows,
                         const uint16_t* const* v_rows, size_t row_stride, uint8_t* out,
                         std::vector<Status>* statuses) {
  statuses->assign(n, Status{});
  if (n == 0) return "";
  // Host-side checks first, with the CPU's messages: layout, iters, codebooks.
  Unsupported why = can_implement_record(l.head_dim, l.group, l.bits_k, l.bits_v, l.body, l.axis);
  if (why == Unsupported::none && opt.iters > 64) why = Unsupported::iters_out_of_range;
  Status pre;
  if (why != Unsupported::none) {
    pre.code = ErrorCode::unsupported;
    pre.detail = describe(why);
  } else {
    pre = check_codebooks(l, opt.codebooks);
  }
  if (!pre.ok()) {
    std::memset(out, 0, n * l.bytes);
    for (size_t i = 0; i < n; ++i) {
      (*statuses)[i] = pre;
      (*statuses)[i].detail = "record " + std::to_string(i) + ": " + pre.detail;
    }
    return "";
  }
  const size_t rows = static_cast<size_t>(l.group) * l.head_dim;  // packed on the device
  const size_t in_bytes = n * rows * 2;
  std::string e;
  if (!(e = impl_->k.ensure(in_bytes)).empty() || !(e = impl_->v.ensure(in_bytes)).empty() ||
      !(e = impl_->out.ensure(n * l.bytes)).empty() || !(e = impl_->status.ensure(n * sizeof(RecordStatus))).empty())
    return e;
  // Pack the records' rows (any stride) into contiguous [n][G][D] staging on the host side
  // of the copy: one cudaMemcpy2D per record and side.
  uint16_t* dk = static_cast<uint16_t*>(impl_->k.p);
  uint16_t* dv = static_cast<uint16_t*>(impl_->v.p);
  for (size_t i = 0; i < n; ++i) {
    SJKV_CU(cudaMemcpy2D(dk + i * rows, l.head_dim * 2, k_rows[i], row_stride * 2, l.head_dim * 2, l.group,
                         cudaMemcpyHostToDevice),
            "seal input upload");
    SJKV_CU(cudaMemcpy2D(dv + i * rows, l.head_dim * 2, v_rows[i], row_stride * 2, l.head_dim * 2, l.group,
                         cudaMemcpyHostToDevice),
            "seal input upload");
  }
  SealOptions dopt = opt;
  if (!(e = impl_->upload(l, opt.codebooks, &dopt.codebooks)).empty()) return e;
  if (!(e = seal_async(l, dopt, n, dk, dv, l.head_dim, rows, static_cast<uint8_t*>(impl_->out.p),
                       static_cast<RecordStatus*>(impl_->status.p), 0))
           .empty())
    return e;
  SJKV_CU(cudaDeviceSynchronize(), "seal kernel");
  SJKV_CU(cudaMemcpy(out, impl_->out.p, n * l.bytes, cudaMemcpyDeviceToHost), "seal output download");
  impl_->host_status.resize(n);
  SJKV_CU(cudaMemcpy(impl_->host_status.data(), impl_->status.p, n * sizeof(RecordStatus), cudaMemcpyDeviceToHost),
          "seal status download");
  for (size_t i = 0; i < n; ++i) (*statuses)[i] = to_status(impl_->host_status[i], i);
  return "";
}

std::string Engine::decode_async(const RecordLayout& l, const TrellisCodebooks& cb_in, size_t n, const uint8_t* recs,
                                 float* out, cudaStream_t stream) {
  if (n == 0) return "";
  TrellisCodebooks cb = cb_in;
  std::string e = impl_->resolve(l, &cb);
  if (!e.empty()) return e;
  const size_t rows = n * 2 * l.group;
  const unsigned threads = 256;
  decode_rows_kernel<<<blocks_for(rows * 32, threads), threads, 0, stream>>>(l, cb, n, recs, out);
  SJKV_CU(cudaGetLastError(), "decode kernel launch");
  return "";
}

std::string Engine::decode(const RecordLayout& l, const TrellisCodebooks& cb, size_t n, const uint8_t* recs,
                           float* out) {
  if (n == 0) return "";
  DevBuf drec, dout;
  std::string e;
  const size_t out_n = n * 2 * l.group * l.head_dim;
  if (!(e = drec.ensure(n * l.bytes)).empty() || !(e = dout.ensure(out_n * sizeof(float))).empty()) return e;
  SJKV_CU(cudaMemcpy(drec.p, recs, n * l.bytes, cudaMemcpyHostToDevice), "record upload");
  TrellisCodebooks dcb;
  if (!(e = impl_->upload(l, cb, &dcb)).empty()) return e;
  if (!(e = decode_async(l, dcb, n, static_cast<const uint8_t*>(drec.p), static_cast<float*>(dout.p), 0)).empty())
    return e;
  SJKV_CU(cudaDeviceSynchronize(), "decode kernel");
  SJKV_CU(cudaMemcpy(out, dout.p, out_n * sizeof(float), cudaMemcpyDeviceToHost), "decode download");
  return "";
}

std::string Engine::staging_write_async(StagingType t, const float* x, size_t n_rows, uint32_t D, uint32_t rot,
                                        uint8_t* out, int32_t* bad, cudaStream_t stream) {
  if (n_rows == 0) return "";
  if (D == 0 || D % staging_block_values(t) != 0) return "staging write: D is not a multiple of the block size";
  if (rot > 1 && (!is_pow2(rot) || D % rot != 0)) return "staging write: bad rotation block";
  if (n_rows > 0x7fffffffu) return "staging write: too many rows";
  const unsigned threads = staging_threads(D);
  const size_t dyn = staging_dyn_bytes(D);
  if (staging_tq6_fast(t, D))
    staging_write_tq6_kernel<<<static_cast<unsigned>(n_rows), threads, dyn, stream>>>(x, n_rows, D, rot, out, bad);
  else
    staging_write_kernel<<<static_cast<unsigned>(n_rows), threads, dyn, stream>>>(t, x, n_rows, D, rot, out, bad);
  SJKV_CU(cudaGetLastError(), "staging kernel launch");
  return "";
}

std::string Engine::staging_write(StagingType t, const float* x, size_t n_rows, uint32_t D, uint32_t rot,
                                  uint8_t* out, int32_t* bad) {
  if (n_rows == 0) return "";
  DevBuf dx, dout, dbad;
  std::string e;
  const size_t rb = staging_row_bytes(t, D);
  if (!(e = dx.ensure(n_rows * D * sizeof(float))).empty() || !(e = dout.ensure(n_rows * rb)).empty() ||
      !(e = dbad.ensure(n_rows * sizeof(int32_t))).empty())
    return e;
  SJKV_CU(cudaMemcpy(dx.p, x, n_rows * D * sizeof(float), cudaMemcpyHostToDevice), "staging upload");
  if (!(e = staging_write_async(t, static_cast<const float*>(dx.p), n_rows, D, rot, static_cast<uint8_t*>(dout.p),
                                static_cast<int32_t*>(dbad.p), 0))
           .empty())
    return e;
  SJKV_CU(cudaDeviceSynchronize(), "staging kernel");
  SJKV_CU(cudaMemcpy(out, dout.p, n_rows * rb, cudaMemcpyDeviceToHost), "staging download");
  if (bad) SJKV_CU(cudaMemcpy(bad, dbad.p, n_rows * sizeof(int32_t), cudaMemcpyDeviceToHost), "staging download");
  return "";
}

std::string Engine::staging_decode_async(StagingType t, const uint8_t* rows, size_t n_rows, uint32_t D, float* out,
                                         cudaStream_t stream) {
  if (n_rows == 0) return "";
  const size_t n = n_rows * D;
  staging_decode_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(t, rows, n_rows, D, out);
  SJKV_CU(cudaGetLastError(), "staging decode launch");
  return "";
}

std::string Engine::staging_decode(StagingType t, const uint8_t* rows, size_t n_rows, uint32_t D, float* out) {
  if (n_rows == 0) return "";
  DevBuf drows, dout;
  std::string e;
  const size_t rb = staging_row_bytes(t, D);
  if (!(e = drows.ensure(n_rows * rb)).empty() || !(e = dout.ensure(n_rows * D * sizeof(float))).empty()) return e;
  SJKV_CU(cudaMemcpy(drows.p, rows, n_rows * rb, cudaMemcpyHostToDevice), "staging upload");
  if (!(e = staging_decode_async(t, static_cast<const uint8_t*>(drows.p), n_rows, D, static_cast<float*>(dout.p), 0))
           .empty())
    return e;
  SJKV_CU(cudaDeviceSynchronize(), "staging decode");
  SJKV_CU(cudaMemcpy(out, dout.p, n_rows * D * sizeof(float), cudaMemcpyDeviceToHost), "staging download");
  return "";
}

}  // namespace cuda
}  // namespace sjkv
