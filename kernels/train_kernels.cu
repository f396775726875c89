// Trellis training on the GPU (see train_cuda.h).
#include <cuda_runtime.h>
#include <curand_kernel.h>

#include "sjkv/cuda/train_cuda.h"
#include "sjkv/lloyd.h"
#include "sjkv/trellis.h"

namespace sjkv {
namespace cuda {
namespace {

std::string text(cudaError_t e) { return e == cudaSuccess ? std::string() : std::string(cudaGetErrorString(e)); }

// Warps per block of the Viterbi kernel: each warp keeps len*64 branch choices in shared memory.
uint32_t viterbi_warps(uint32_t len) {
  const uint32_t per = len * kTrellisStates;
  uint32_t w = 32768 / per;
  if (w < 1) w = 1;
  if (w > 8) w = 8;
  return w;
}

size_t viterbi_smem(uint32_t len, uint32_t bits) {
  return static_cast<size_t>(trellis_entries(bits)) * sizeof(float) +
         viterbi_warps(len) * (2 * kTrellisStates * sizeof(float) + static_cast<size_t>(len) * kTrellisStates);
}

// One warp per sequence, lane owns states lane and lane + 32. The recursion, the branch
// order and the strict `<` are those of trellis::viterbi_ref, with the same float operations
// (branch_cost), so the codes are identical.
__global__ void viterbi_kernel(const float* __restrict__ y, size_t n, uint32_t len, uint32_t bits,
                               const float* __restrict__ cbf, uint8_t* codes, uint16_t* wins) {
  extern __shared__ float smem[];
  const uint32_t ne = trellis_entries(bits), nb = 1u << bits, W = blockDim.x / 32;
  float* tab = smem;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float* phi = tab + ne + warp * 2 * kTrellisStates;
  uint8_t* choice = reinterpret_cast<uint8_t*>(tab + ne + W * 2 * kTrellisStates) +
                    static_cast<size_t>(warp) * len * kTrellisStates;
  for (uint32_t i = threadIdx.x; i < ne; i += blockDim.x) tab[i] = cbf[i];
  __syncthreads();
  const size_t seq = static_cast<size_t>(blockIdx.x) * W + warp;
  if (seq >= n) return;
  const float* ys = y + seq * len;
  float* cur = phi;
  float* nxt = phi + kTrellisStates;
  cur[lane] = 0.0f;
  cur[lane + 32] = 0.0f;
  __syncwarp();
  for (uint32_t i = len; i-- > 0;) {
    const float yi = ys[i];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const uint32_t s = lane + 32 * half;
      float best = f32_from_bits(0x7f800000u);
      uint32_t bj = 0;
      for (uint32_t j = 0; j < nb; ++j) {
        const uint32_t w = s + kTrellisStates * j;
        const float cost = trellis::branch_cost(yi, tab[w], cur[trellis::next_state(w, bits)]);
        if (cost < best) {
          best = cost;
          bj = j;
        }
      }
      nxt[s] = best;
      choice[static_cast<size_t>(i) * kTrellisStates + s] = static_cast<uint8_t>(bj);
    }
    __syncwarp();
    float* t = cur;
    cur = nxt;
    nxt = t;
  }
  if (lane != 0) return;
  uint32_t s = 0;
  for (uint32_t i = 0; i < len; ++i) {
    const uint32_t c = choice[static_cast<size_t>(i) * kTrellisStates + s];
    const uint32_t w = s + kTrellisStates * c;
    if (codes) codes[seq * len + i] = static_cast<uint8_t>(c);
    if (wins) wins[seq * len + i] = static_cast<uint16_t>(w);
    s = trellis::next_state(w, bits);
  }
}

constexpr uint32_t kStatThreads = 256;
constexpr uint32_t kStatTile = 2048;  // positions staged in shared memory at a time

// One block per chunk of kLloydChunk sequences. Positions are visited in (sequence, position)
// order by every thread; thread t owns the windows w with w % kStatThreads == t, so each
// window's binary64 sum is built in exactly the order of lloyd_accumulate. Thread 0 also
// adds the squared errors in that order.
__global__ void __launch_bounds__(kStatThreads) lloyd_chunk_kernel(const float* __restrict__ y,
                                                                   const uint16_t* __restrict__ wins, size_t n,
                                                                   uint32_t len, uint32_t ne,
                                                                   const float* __restrict__ cbf, int stats,
                                                                   double* chunk_err, double* chunk_sum,
                                                                   uint32_t* chunk_cnt) {
  __shared__ double sum_s[kTrellisMaxEntries];
  __shared__ uint32_t cnt_s[kTrellisMaxEntries];
  __shared__ float cbf_s[kTrellisMaxEntries];
  __shared__ float y_s[kStatTile];
  __shared__ uint16_t w_s[kStatTile];
  const uint32_t t = threadIdx.x;
  for (uint32_t w = t; w < ne; w += kStatThreads) {
    sum_s[w] = 0.0;
    cnt_s[w] = 0;
    cbf_s[w] = cbf[w];
  }
  const size_t c0 = static_cast<size_t>(blockIdx.x) * kLloydChunk;
  const size_t c1 = c0 + kLloydChunk < n ? c0 + kLloydChunk : n;
  const size_t p0 = c0 * len, p1 = c1 * len;
  double e = 0.0;
  for (size_t base = p0; base < p1; base += kStatTile) {
    const uint32_t m = static_cast<uint32_t>(p1 - base < kStatTile ? p1 - base : kStatTile);
    __syncthreads();
    for (uint32_t i = t; i < m; i += kStatThreads) {
      y_s[i] = y[base + i];
      w_s[i] = wins[base + i];
    }
    __syncthreads();
    if (t == 0)
      for (uint32_t i = 0; i < m; ++i) e = op::dadd(e, lloyd_sq_err(y_s[i], cbf_s[w_s[i]]));
    if (stats)
      for (uint32_t i = 0; i < m; ++i) {
        const uint32_t w = w_s[i];
        if (w % kStatThreads == t) {
          sum_s[w] = op::dadd(sum_s[w], static_cast<double>(y_s[i]));
          ++cnt_s[w];
        }
      }
  }
  __syncthreads();
  if (t == 0) chunk_err[blockIdx.x] = e;
  if (stats)
    for (uint32_t w = t; w < ne; w += kStatThreads) {
      chunk_sum[static_cast<size_t>(blockIdx.x) * ne + w] = sum_s[w];
      chunk_cnt[static_cast<size_t>(blockIdx.x) * ne + w] = cnt_s[w];
    }
}

// Totals over chunks in chunk order, each from 0.0 (train.cpp's combine).
__global__ void lloyd_combine_kernel(size_t chunks, uint32_t ne, const double* chunk_sum, const uint32_t* chunk_cnt,
                                     double* sum, unsigned long long* cnt) {
  const uint32_t w = blockIdx.x * blockDim.x + threadIdx.x;
  if (w >= ne) return;
  double s = 0.0;
  unsigned long long c = 0;
  for (size_t ci = 0; ci < chunks; ++ci) {
    s = op::dadd(s, chunk_sum[ci * ne + w]);
    c += chunk_cnt[ci * ne + w];
  }
  sum[w] = s;
  cnt[w] = c;
}

// One thread per group of 4 stream elements: curand_init at the host generator's
// (subsequence, counter) of that group, one curand4.
__global__ void philox_uniform_kernel(uint64_t seed, uint64_t offset, size_t n, float* out) {
  const uint64_t g0 = offset / 4;
  const uint64_t g = g0 + blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x;
  const uint64_t first = g * 4;
  if (first >= offset + n) return;
  const PhiloxPosition pos = curand_host_philox_position(first);
  curandStatePhilox4_32_10_t st;
  curand_init(seed, pos.subsequence, 4 * pos.counter, &st);
  const uint4 r = curand4(&st);
  const uint32_t x[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
  for (uint32_t k = 0; k < 4; ++k) {
    const uint64_t e = first + k;
    if (e >= offset && e < offset + n) out[e - offset] = curand_uniform_from_bits(x[k]);
  }
}

__global__ void split_kernel(const float* u, size_t n, double fraction, uint8_t* held) {
  const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i < n) held[i] = static_cast<double>(u[i]) < fraction ? 1 : 0;
}

template <class T>
struct Dev {
  T* p = nullptr;
  cudaError_t alloc(size_t n) { return cudaMalloc(&p, n * sizeof(T) + 1); }
  ~Dev() {
    if (p) cudaFree(p);
  }
};

}  // namespace

std::string viterbi_batch(const float* y, size_t n, uint32_t len, uint32_t bits, const float* cbf, uint8_t* codes,
                          uint16_t* wins, void* stream) {
  if (bits < 1 || bits > 4) return "viterbi_batch: bits must be 1..4";
  if (len == 0 || n == 0) return "";
  const uint32_t W = viterbi_warps(len);
  const size_t smem = viterbi_smem(len, bits);
  if (smem > 48 * 1024) {
    const cudaError_t e =
        cudaFuncSetAttribute(viterbi_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (e != cudaSuccess) return "viterbi_batch: sequences too long for shared memory: " + text(e);
  }
  const size_t blocks = (n + W - 1) / W;
  if (blocks > 0x7fffffffu) return "viterbi_batch: too many sequences for one launch";
  viterbi_kernel<<<static_cast<unsigned>(blocks), W * 32, smem, static_cast<cudaStream_t>(stream)>>>(y, n, len, bits,
                                                                                                      cbf, codes, wins);
  return text(cudaGetLastError());
}

std::string viterbi_batch_host(const float* y, size_t n, uint32_t len, uint32_t bits, const float* cbf,
                               uint8_t* codes, uint16_t* wins) {
  const size_t total = n * len;
  Dev<float> dy, dc;
  Dev<uint8_t> dcodes;
  Dev<uint16_t> dwins;
  cudaError_t e = dy.alloc(total);
  if (e == cudaSuccess) e = dc.alloc(trellis_entries(bits));
  if (e == cudaSuccess) e = dcodes.alloc(total);
  if (e == cudaSuccess) e = dwins.alloc(total);
  if (e == cudaSuccess) e = cudaMemcpy(dy.p, y, total * sizeof(float), cudaMemcpyHostToDevice);
  if (e == cudaSuccess) e = cudaMemcpy(dc.p, cbf, trellis_entries(bits) * sizeof(float), cudaMemcpyHostToDevice);
  if (e != cudaSuccess) return text(e);
  const std::string err = viterbi_batch(dy.p, n, len, bits, dc.p, dcodes.p, dwins.p);
  if (!err.empty()) return err;
  e = cudaDeviceSynchronize();
  if (e == cudaSuccess && codes) e = cudaMemcpy(codes, dcodes.p, total, cudaMemcpyDeviceToHost);
  if (e == cudaSuccess && wins) e = cudaMemcpy(wins, dwins.p, total * sizeof(uint16_t), cudaMemcpyDeviceToHost);
  return text(e);
}

// ---- Lloyd pass ----------------------------------------------------------------------------

void LloydPass::release() {
  if (y_) cudaFree(y_);
  if (wins_) cudaFree(wins_);
  y_ = nullptr;
  wins_ = nullptr;
  n_ = 0;
}

LloydPass::~LloydPass() { release(); }

std::string LloydPass::upload(const float* y, size_t n, uint32_t len) {
  release();
  if (n == 0 || len == 0) return "";
  const size_t total = n * len;
  cudaError_t e = cudaMalloc(&y_, total * sizeof(float));
  if (e == cudaSuccess) e = cudaMalloc(&wins_, total * sizeof(uint16_t));
  if (e == cudaSuccess) e = cudaMemcpy(y_, y, total * sizeof(float), cudaMemcpyHostToDevice);
  if (e != cudaSuccess) {
    release();
    return text(e);
  }
  n_ = n;
  len_ = len;
  return "";
}

std::string LloydPass::run(uint32_t bits, const float* cbf, double* mse, std::vector<double>* sum,
                           std::vector<uint64_t>* cnt) {
  if (bits < 2 || bits > 4) return "LloydPass: bits must be 2, 3 or 4";
  const uint32_t ne = trellis_entries(bits);
  if (n_ == 0) {
    *mse = f64_from_bits(0x7ff8000000000000ull);  // NaN, as the CPU pass
    if (sum) {
      sum->assign(ne, 0.0);
      cnt->assign(ne, 0);
    }
    return "";
  }
  const size_t chunks = (n_ + kLloydChunk - 1) / kLloydChunk;
  const bool stats = sum != nullptr;
  Dev<float> dc;
  Dev<double> cerr, csum, tsum;
  Dev<uint32_t> ccnt;
  Dev<unsigned long long> tcnt;
  cudaError_t e = dc.alloc(ne);
  if (e == cudaSuccess) e = cerr.alloc(chunks);
  if (e == cudaSuccess && stats) e = csum.alloc(chunks * ne);
  if (e == cudaSuccess && stats) e = ccnt.alloc(chunks * ne);
  if (e == cudaSuccess && stats) e = tsum.alloc(ne);
  if (e == cudaSuccess && stats) e = tcnt.alloc(ne);
  if (e == cudaSuccess) e = cudaMemcpy(dc.p, cbf, ne * sizeof(float), cudaMemcpyHostToDevice);
  if (e != cudaSuccess) return text(e);
  std::string err = viterbi_batch(y_, n_, len_, bits, dc.p, nullptr, wins_);
  if (!err.empty()) return err;
  lloyd_chunk_kernel<<<static_cast<unsigned>(chunks), kStatThreads>>>(y_, wins_, n_, len_, ne, dc.p, stats ? 1 : 0,
                                                                      cerr.p, csum.p, ccnt.p);
  e = cudaGetLastError();
  if (e == cudaSuccess && stats) {
    lloyd_combine_kernel<<<(ne + 127) / 128, 128>>>(chunks, ne, csum.p, ccnt.p, tsum.p, tcnt.p);
    e = cudaGetLastError();
  }
  if (e == cudaSuccess) e = cudaDeviceSynchronize();
  std::vector<double> ce(chunks);
  if (e == cudaSuccess) e = cudaMemcpy(ce.data(), cerr.p, chunks * sizeof(double), cudaMemcpyDeviceToHost);
  if (e == cudaSuccess && stats) {
    sum->resize(ne);
    std::vector<unsigned long long> c(ne);
    e = cudaMemcpy(sum->data(), tsum.p, ne * sizeof(double), cudaMemcpyDeviceToHost);
    if (e == cudaSuccess) e = cudaMemcpy(c.data(), tcnt.p, ne * sizeof(unsigned long long), cudaMemcpyDeviceToHost);
    cnt->assign(c.begin(), c.end());
  }
  if (e != cudaSuccess) return text(e);
  double total = 0.0;  // chunk order, as the CPU pass
  for (double x : ce) total += x;
  *mse = total / static_cast<double>(n_ * len_);
  return "";
}

// ---- sampling ------------------------------------------------------------------------------

std::string philox_uniform(uint64_t seed, uint64_t offset, size_t n, float* out, void* stream) {
  if (n == 0) return "";
  const uint64_t groups = (offset + n + 3) / 4 - offset / 4;
  const uint64_t blocks = (groups + 255) / 256;
  if (blocks > 0x7fffffffu) return "philox_uniform: too many values for one launch";
  philox_uniform_kernel<<<static_cast<unsigned>(blocks), 256, 0, static_cast<cudaStream_t>(stream)>>>(seed, offset, n,
                                                                                                       out);
  return text(cudaGetLastError());
}

std::string philox_uniform_host(uint64_t seed, uint64_t offset, size_t n, float* out) {
  if (n == 0) return "";
  Dev<float> d;
  cudaError_t e = d.alloc(n);
  if (e != cudaSuccess) return text(e);
  const std::string err = philox_uniform(seed, offset, n, d.p);
  if (!err.empty()) return err;
  e = cudaDeviceSynchronize();
  if (e == cudaSuccess) e = cudaMemcpy(out, d.p, n * sizeof(float), cudaMemcpyDeviceToHost);
  return text(e);
}

std::string split_draw_host(uint64_t seed, uint64_t offset, size_t n, double fraction, uint8_t* held) {
  if (n == 0) return "";
  Dev<float> u;
  Dev<uint8_t> h;
  cudaError_t e = u.alloc(n);
  if (e == cudaSuccess) e = h.alloc(n);
  if (e != cudaSuccess) return text(e);
  std::string err = philox_uniform(seed, offset, n, u.p);
  if (!err.empty()) return err;
  split_kernel<<<static_cast<unsigned>((n + 255) / 256), 256>>>(u.p, n, fraction, h.p);
  e = cudaGetLastError();
  if (e == cudaSuccess) e = cudaDeviceSynchronize();
  if (e == cudaSuccess) e = cudaMemcpy(held, h.p, n, cudaMemcpyDeviceToHost);
  return text(e);
}

}  // namespace cuda
}  // namespace sjkv
