#include <cuda_runtime.h>

#include <vector>

#include "sjkv/cuda/codec_cuda.h"
#include "sjkv/record.h"

namespace sjkv {
namespace cuda {
namespace {

struct Error {
  cudaError_t e = cudaSuccess;
  bool check(cudaError_t r) {
    if (e == cudaSuccess && r != cudaSuccess) e = r;
    return e == cudaSuccess;
  }
  std::string text() const { return e == cudaSuccess ? std::string() : std::string(cudaGetErrorString(e)); }
};

template <class T>
struct DeviceBuffer {
  T* p = nullptr;
  explicit DeviceBuffer(size_t n, Error& err) { err.check(cudaMalloc(&p, n * sizeof(T) + 1)); }
  ~DeviceBuffer() { if (p) cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

__global__ void staging_encode_kernel(StagingType t, const float* x, size_t n_rows, uint32_t D, uint8_t* out) {
  const size_t r = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (r >= n_rows) return;
  staging_encode_row(t, x + r * D, D, out + r * staging_row_bytes(t, D));
}

__global__ void seal_ref_kernel(RecordLayout l, uint32_t iters, BalanceMode mode, size_t n, const uint16_t* k,
                                const uint16_t* v, size_t stride, uint8_t* out, float* fscratch, double* dscratch) {
  const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const size_t tile = static_cast<size_t>(l.head_dim) * l.group;
  const size_t vec = l.head_dim > l.group ? l.head_dim : l.group;
  float* f = fscratch + i * (2 * tile + 6 * vec);
  double* d = dscratch + i * (2 * vec);
  RecordScratch s;
  s.M = f;
  s.bal = BalanceScratch{f + tile, f + 2 * tile, f + 2 * tile + vec, d, d + vec, f + 2 * tile + 2 * vec,
                         f + 2 * tile + 3 * vec};
  s.lo = f + 2 * tile + 4 * vec;
  s.step = f + 2 * tile + 5 * vec;
  const size_t rows = static_cast<size_t>(l.group) * stride;
  seal_record_scalar_ref(l, k + i * rows, v + i * rows, stride, iters, mode, s, out + i * l.bytes);
}

__global__ void decode_kernel(RecordLayout l, size_t n, const uint8_t* recs, float* out) {
  const size_t idx = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  const size_t per = 2 * static_cast<size_t>(l.group);
  if (idx >= n * per) return;
  const size_t r = idx / per, j = idx % per;
  const uint8_t* rec = recs + r * l.bytes;
  float* o = out + idx * l.head_dim;
  if (j < l.group) decode_k_row_scalar(l, rec, static_cast<uint32_t>(j), o);
  else decode_v_row_scalar(l, rec, static_cast<uint32_t>(j - l.group), o);
}

unsigned blocks_for(size_t n, unsigned threads) { return static_cast<unsigned>((n + threads - 1) / threads); }

}  // namespace

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

std::string device_name(int device) {
  cudaDeviceProp p;
  if (cudaGetDeviceProperties(&p, device) != cudaSuccess) return "unknown";
  return p.name;
}

std::string staging_encode_rows(StagingType t, const float* x, size_t n_rows, uint32_t D, uint8_t* out) {
  Error err;
  const size_t in_n = n_rows * D, out_n = n_rows * staging_row_bytes(t, D);
  DeviceBuffer<float> dx(in_n, err);
  DeviceBuffer<uint8_t> dout(out_n, err);
  if (err.check(cudaMemcpy(dx.p, x, in_n * sizeof(float), cudaMemcpyHostToDevice))) {
    staging_encode_kernel<<<blocks_for(n_rows, 128), 128>>>(t, dx.p, n_rows, D, dout.p);
    err.check(cudaGetLastError());
    err.check(cudaMemcpy(out, dout.p, out_n, cudaMemcpyDeviceToHost));
  }
  return err.text();
}

std::string seal_records_ref(const RecordLayout& l, uint32_t iters, BalanceMode mode, size_t n, const uint16_t* k,
                             const uint16_t* v, size_t stride, uint8_t* out) {
  Error err;
  const size_t rows = static_cast<size_t>(l.group) * stride * n;
  const size_t tile = static_cast<size_t>(l.head_dim) * l.group;
  const size_t vec = l.head_dim > l.group ? l.head_dim : l.group;
  DeviceBuffer<uint16_t> dk(rows, err), dv(rows, err);
  DeviceBuffer<uint8_t> dout(n * l.bytes, err);
  DeviceBuffer<float> fs(n * (2 * tile + 6 * vec), err);
  DeviceBuffer<double> ds(n * 2 * vec, err);
  if (err.check(cudaMemcpy(dk.p, k, rows * 2, cudaMemcpyHostToDevice)) &&
      err.check(cudaMemcpy(dv.p, v, rows * 2, cudaMemcpyHostToDevice))) {
    seal_ref_kernel<<<blocks_for(n, 32), 32>>>(l, iters, mode, n, dk.p, dv.p, stride, dout.p, fs.p, ds.p);
    err.check(cudaGetLastError());
    err.check(cudaMemcpy(out, dout.p, n * l.bytes, cudaMemcpyDeviceToHost));
  }
  return err.text();
}

std::string decode_records(const RecordLayout& l, size_t n, const uint8_t* recs, float* out) {
  Error err;
  const size_t rows = n * 2 * l.group;
  DeviceBuffer<uint8_t> drec(n * l.bytes, err);
  DeviceBuffer<float> dout(rows * l.head_dim, err);
  if (err.check(cudaMemcpy(drec.p, recs, n * l.bytes, cudaMemcpyHostToDevice))) {
    decode_kernel<<<blocks_for(rows, 128), 128>>>(l, n, drec.p, dout.p);
    err.check(cudaGetLastError());
    err.check(cudaMemcpy(out, dout.p, rows * l.head_dim * sizeof(float), cudaMemcpyDeviceToHost));
  }
  return err.text();
}

}  // namespace cuda
}  // namespace sjkv
