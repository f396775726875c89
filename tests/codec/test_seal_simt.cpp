// The CUDA seal, decode and staging kernels run on the CPU under an emulation of the CUDA
// execution model: every lane is an OS thread, __syncthreads / __syncwarp are barriers of
// the block / warp, warp shuffles go through a per-warp exchange between two barriers,
// atomics are host atomics, __shared__ is storage shared by the block's threads. The kernel
// bodies are the very code nvcc compiles (sjkv/cuda/seal_device.cuh), so their indexing,
// synchronisation and bytes are checked against the CPU reference on machines without a
// GPU. (Timing, occupancy and the device's own libm are what this cannot check.)
#include <gtest/gtest.h>

#include <climits>
#include <limits>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "sjkv/config.h"
#include "sjkv/hadamard.h"
#include "sjkv/record.h"
#include "sjkv/seal.h"
#include "sjkv/staging.h"
#include "sjkv/testgen.h"
#include "sjkv/trellis.h"

namespace emu {

struct Dim3 {
  unsigned x = 0, y = 0, z = 0;
};

class Barrier {
 public:
  explicit Barrier(unsigned n) : n_(n) {}
  void wait() {
    std::unique_lock<std::mutex> lock(m_);
    const unsigned long gen = gen_;
    if (++count_ == n_) {
      count_ = 0;
      ++gen_;
      cv_.notify_all();
      return;
    }
    cv_.wait(lock, [&] { return gen_ != gen; });
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  unsigned n_, count_ = 0;
  unsigned long gen_ = 0;
};

struct Block {
  Barrier block;
  std::vector<std::unique_ptr<Barrier>> warps;
  std::vector<double> exchange;
  std::vector<uint64_t> dyn;
  Block(unsigned threads, size_t dyn_bytes) : block(threads), exchange(threads), dyn(dyn_bytes / 8 + 1) {
    for (unsigned w = 0; w < (threads + 31) / 32; ++w)
      warps.emplace_back(new Barrier(threads - 32 * w < 32 ? threads - 32 * w : 32));
  }
};

thread_local Dim3 tl_thread;
Dim3 g_block, g_dim;
Block* g_blk = nullptr;

// Runs `body` as a grid of `grid` blocks of `threads` lanes, one block after the other.
template <class F>
void launch(unsigned grid, unsigned threads, size_t dyn_bytes, F body) {
  for (unsigned b = 0; b < grid; ++b) {
    Block blk(threads, dyn_bytes);
    g_blk = &blk;
    g_block.x = b;
    g_dim.x = threads;
    std::vector<std::thread> ts;
    ts.reserve(threads);
    for (unsigned t = 0; t < threads; ++t)
      ts.emplace_back([&body, t] {
        tl_thread.x = t;
        body();
      });
    for (auto& t : ts) t.join();
    g_blk = nullptr;
  }
}

template <class T>
T shfl_xor(T v, int mask) {
  const unsigned tid = tl_thread.x, w = tid / 32;
  g_blk->exchange[tid] = v;
  g_blk->warps[w]->wait();
  const T r = g_blk->exchange[tid ^ static_cast<unsigned>(mask)];
  g_blk->warps[w]->wait();
  return r;
}

// __shfl_sync: every lane reads lane `src` of its warp.
template <class T>
T shfl(T v, unsigned src) {
  const unsigned tid = tl_thread.x, w = tid / 32;
  g_blk->exchange[tid] = static_cast<double>(v);
  g_blk->warps[w]->wait();
  const T r = static_cast<T>(g_blk->exchange[w * 32 + (src & 31u)]);
  g_blk->warps[w]->wait();
  return r;
}

inline unsigned atomic_or(uint32_t* p, uint32_t v) { return __atomic_fetch_or(p, v, __ATOMIC_SEQ_CST); }

template <class T>
T atomic_min(T* p, T v) {
  T old = __atomic_load_n(p, __ATOMIC_SEQ_CST);
  while (v < old && !__atomic_compare_exchange_n(p, &old, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
  }
  return old;
}

}  // namespace emu

#define __device__
#define __global__
#define __host__
#define __launch_bounds__(...)
#define __shared__ static
#define threadIdx emu::tl_thread
#define blockIdx emu::g_block
#define blockDim emu::g_dim
#define __syncthreads() emu::g_blk->block.wait()
#define __syncwarp(...) emu::g_blk->warps[emu::tl_thread.x / 32]->wait()
#define __shfl_xor_sync(mask, v, lane) ((void)(mask), emu::shfl_xor(v, lane))
#define __shfl_sync(mask, v, lane) ((void)(mask), emu::shfl(v, lane))
#define atomicOr(p, v) emu::atomic_or(p, v)
#define atomicMin(p, v) emu::atomic_min(p, v)
#define SJKV_DYN_SHARED(type, name) type* name = reinterpret_cast<type*>(emu::g_blk->dyn.data())

namespace sjkv {
namespace cuda {
// As in sjkv/cuda/codec_cuda.h (not included here: it needs the CUDA runtime headers).
struct RecordStatus {
  uint32_t code;
  uint32_t side;
  uint32_t token;
  uint32_t channel;
};
namespace {
#include "sjkv/cuda/seal_device.cuh"
}  // namespace
}  // namespace cuda
}  // namespace sjkv

using namespace sjkv;

namespace {

struct Records {
  uint32_t D, G;
  size_t n;
  std::vector<uint16_t> K, V;
  Records(uint32_t d, uint32_t g, size_t count, uint64_t seed) : D(d), G(g), n(count), K(count * g * d), V(count * g * d) {
    std::vector<int32_t> chf(D);
    std::vector<float> row(D);
    for (size_t i = 0; i < n; ++i) {
      fill_group(D, G, seed + i, &K[i * G * D], &V[i * G * D], chf.data());
      for (uint16_t* side : {&K[i * G * D], &V[i * G * D]})  // rotated, as the cache stages them
        for (uint32_t t = 0; t < G; ++t) {
          for (uint32_t c = 0; c < D; ++c) row[c] = f16_to_f32(side[t * D + c]);
          hadamard_inplace(row.data(), D);
          for (uint32_t c = 0; c < D; ++c) side[t * D + c] = f32_to_f16(row[c]);
        }
    }
  }
};

// The emulated seal kernel over all records against seal_record(reference), with a guard.
void check_seal(const RecordLayout& l, const SealOptions& o, Records& x, bool tile_in_shared, bool lanes8 = false,
                bool m_in_shared = true) {
  const size_t per = cuda::scratch_bytes(x.D, x.G);
  std::vector<uint64_t> scratch(x.n * per / 8 + 1);
  std::vector<uint32_t> out_words((x.n * l.bytes + 64) / 4, 0xEEEEEEEEu);
  uint8_t* out = reinterpret_cast<uint8_t*>(out_words.data());
  std::vector<cuda::RecordStatus> status(x.n, cuda::RecordStatus{99, 99, 99, 99});
  const size_t dyn = (tile_in_shared ? cuda::tile_bytes(x.D, x.G) : 0) + (m_in_shared ? size_t{2} * x.D * x.G : 0);
  emu::launch(static_cast<unsigned>(x.n), cuda::kSealThreads, dyn, [&] {
    cuda::seal_kernel(l, o.iters, o.balance, o.codebooks, x.K.data(), x.V.data(), x.D,
                      static_cast<size_t>(x.G) * x.D, out, status.data(), reinterpret_cast<uint8_t*>(scratch.data()),
                      per, tile_in_shared, lanes8, m_in_shared);
  });
  std::vector<uint8_t> cpu(l.bytes);
  SealWorkspace ws;
  for (size_t i = 0; i < x.n; ++i) {
    const Status st = seal_record(l, o, &x.K[i * x.G * x.D], &x.V[i * x.G * x.D], x.D, cpu.data(), ws,
                                  SealPath::reference);
    EXPECT_EQ(static_cast<uint32_t>(st.code), status[i].code) << "record " << i;
    if (!st.ok()) {
      EXPECT_EQ(static_cast<uint32_t>(st.side), status[i].side);
      EXPECT_EQ(st.token, status[i].token);
      EXPECT_EQ(st.channel, status[i].channel);
    }
    ASSERT_EQ(0, std::memcmp(cpu.data(), out + i * l.bytes, l.bytes))
        << "record " << i << " D=" << l.head_dim << " G=" << l.group << " " << l.bits_k << "/" << l.bits_v
        << (l.body == Body::trellis ? "t" : "") << (l.channel_axis() ? " channel axis" : "");
  }
  for (size_t i = x.n * l.bytes; i < x.n * l.bytes + 64; ++i) ASSERT_EQ(out[i], 0xEE) << "guard overwritten";
}

}  // namespace

TEST(SealSimt, ScalarRecordsMatchTheReference) {
  Records x(64, 128, 2, 5);
  check_seal(make_layout(64, 128, 4, 4, Body::scalar), SealOptions{}, x, true);
  check_seal(make_layout(64, 128, 3, 2, Body::scalar), SealOptions{}, x, false, true);
  check_seal(make_layout(64, 128, 3, 2, Body::scalar), SealOptions{}, x, true, false, false);  // inputs from global
  Records y(32, 16, 2, 9);
  check_seal(make_layout(32, 16, 2, 4, Body::scalar), SealOptions{}, y, true);
  SealOptions o;
  o.balance = BalanceMode::best_of;
  o.iters = 8;
  Records z(64, 32, 1, 13);
  check_seal(make_layout(64, 32, 4, 3, Body::scalar), o, z, false, true);
  Records w(32, 256, 1, 17);  // G > D: the scratch vectors sized by G
  check_seal(make_layout(32, 256, 3, 3, Body::scalar), SealOptions{}, w, true);
}

TEST(SealSimt, TrellisRecordsMatchTheReference) {
  Records x(128, 128, 1, 21);
  check_seal(make_layout(128, 128, 3, 2, Body::trellis), SealOptions{}, x, true);
  check_seal(make_layout(128, 128, 2, 2, Body::trellis, TrellisAxis::channel), SealOptions{}, x, false, true, false);
  check_seal(make_layout(128, 128, 4, 4, Body::trellis), SealOptions{}, x, true);
}

TEST(SealSimt, NonFiniteInputIsReportedAndZeroFilled) {
  Records x(64, 16, 3, 31);
  x.K[1 * 16 * 64 + 7 * 64 + 9] = 0x7e00;
  x.V[2 * 16 * 64 + 3 * 64 + 60] = 0xfc00;
  check_seal(make_layout(64, 16, 4, 4, Body::scalar), SealOptions{}, x, false);
}

TEST(SealSimt, DecodeRowsMatchTheReference) {
  Records x(128, 128, 2, 41);
  for (const RecordLayout& l : {make_layout(128, 128, 4, 4, Body::scalar), make_layout(128, 128, 3, 3, Body::trellis),
                                make_layout(128, 128, 2, 3, Body::scalar)}) {
    std::vector<const uint16_t*> kp = {&x.K[0], &x.K[128 * 128]}, vp = {&x.V[0], &x.V[128 * 128]};
    std::vector<uint8_t> rec(2 * l.bytes);
    ASSERT_TRUE(seal_records(l, SealOptions{}, 2, kp.data(), vp.data(), 128, rec.data()).ok());
    const size_t rows = 2 * 2 * 128;
    std::vector<float> out(rows * 128 + 16);
    std::memset(out.data(), 0xEE, out.size() * 4);
    const TrellisCodebooks cb{};
    emu::launch(static_cast<unsigned>(rows * 32 / 256), 256, 0,
                [&] { cuda::decode_rows_kernel(l, cb, 2, rec.data(), out.data()); });
    std::vector<float> row(128);
    for (size_t i = 0; i < 2; ++i)
      for (uint32_t t = 0; t < 128; ++t) {
        decode_k_row(l, &rec[i * l.bytes], t, row.data());
        ASSERT_EQ(0, std::memcmp(row.data(), &out[((i * 2) * 128 + t) * 128], 128 * 4));
        decode_v_row(l, &rec[i * l.bytes], t, row.data());
        ASSERT_EQ(0, std::memcmp(row.data(), &out[((i * 2 + 1) * 128 + t) * 128], 128 * 4));
      }
    const uint8_t* g = reinterpret_cast<const uint8_t*>(&out[rows * 128]);
    for (int i = 0; i < 64; ++i) ASSERT_EQ(g[i], 0xEE);
  }
}

TEST(SealSimt, StagingWriteAndDecodeMatchTheReference) {
  for (uint32_t D : {64u, 256u, 1024u})
    for (uint32_t rot : {0u, 32u, D})
      for (StagingType t : {StagingType::tq6_0, StagingType::q8_0, StagingType::f16}) {
        if (D % staging_block_values(t) != 0) continue;
        const uint32_t n = 6;
        std::vector<float> x(n * D);
        XorShift64 rng(D + rot);
        for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(rng.gauss()) / 300.0f * (i % 29 == 1 ? 30 : 1);
        x[2 * D + 5] = std::numeric_limits<float>::quiet_NaN();
        x[4 * D + 1] = 1e9f;
        const uint32_t rb = staging_row_bytes(t, D);
        std::vector<uint8_t> cpu(n * rb), gpu(n * rb + 64, 0xEE);
        std::vector<int32_t> cbad(n), gbad(n, 777);
        std::vector<float> row(D);
        for (uint32_t r = 0; r < n; ++r) {
          std::memcpy(row.data(), &x[r * D], D * 4);
          if (rot) hadamard_blocks(row.data(), D, rot);
          cbad[r] = staging_encode_row_checked(t, row.data(), D, &cpu[r * rb]);
        }
        emu::launch(n, cuda::staging_threads(D), cuda::staging_dyn_bytes(D),
                    [&] {
                      if (cuda::staging_tq6_fast(t, D))
                        cuda::staging_write_tq6_kernel(x.data(), n, D, rot, gpu.data(), gbad.data());
                      else
                        cuda::staging_write_kernel(t, x.data(), n, D, rot, gpu.data(), gbad.data());
                    });
        for (uint32_t r = 0; r < n; ++r) {
          EXPECT_EQ(cbad[r], gbad[r]) << staging_name(t) << " row " << r;
          ASSERT_EQ(0, std::memcmp(&cpu[r * rb], &gpu[r * rb], rb)) << staging_name(t) << " D=" << D << " rot=" << rot;
        }
        for (size_t i = cpu.size(); i < gpu.size(); ++i) ASSERT_EQ(gpu[i], 0xEE);
        std::vector<float> dec(n * D);
        emu::launch((n * D + 255) / 256, 256, 0, [&] { cuda::staging_decode_kernel(t, cpu.data(), n, D, dec.data()); });
        for (uint32_t r = 0; r < n; ++r) {
          staging_decode_row(t, &cpu[r * rb], D, row.data());
          ASSERT_EQ(0, std::memcmp(row.data(), &dec[r * D], D * 4));
        }
      }
}
