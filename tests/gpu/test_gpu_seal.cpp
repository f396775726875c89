// The tuned CUDA seal (cuda::Engine) against the CPU reference seal, byte for byte: every
// scalar bit pair (4-bit fragment order included), the trellis bodies on both axes, the
// 4-bit trellis, run-time codebooks, several geometries, thousands of records per launch,
// non-finite inputs and guard bytes after every output.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cstring>
#include <string>
#include <vector>

#include "gpu_test.h"
#include "sjkv/cuda/codec_cuda.h"
#include "sjkv/hadamard.h"
#include "sjkv/seal.h"
#include "sjkv/testgen.h"

using namespace sjkv;

namespace {

constexpr uint8_t kGuard = 0xEE;
constexpr size_t kGuardBytes = 64;

// n records of G rows of D fp16 values each (K then V), realistic tiles: fill_group's
// outlier channels and per-token factors; with `rotate` every row goes through the
// Hadamard rotation (the cache's basis) and is rounded back to fp16, as staging does.
struct Tiles {
  uint32_t D, G;
  size_t n;
  std::vector<uint16_t> K, V;
  Tiles(uint32_t d, uint32_t g, size_t count, uint64_t seed, bool rotate) : D(d), G(g), n(count) {
    K.resize(n * G * D);
    V.resize(n * G * D);
    std::vector<int32_t> chf(D);
    std::vector<float> row(D);
    for (size_t i = 0; i < n; ++i) {
      fill_group(D, G, seed + i, &K[i * G * D], &V[i * G * D], chf.data());
      if (!rotate) continue;
      for (uint16_t* side : {&K[i * G * D], &V[i * G * D]})
        for (uint32_t t = 0; t < G; ++t) {
          for (uint32_t c = 0; c < D; ++c) row[c] = f16_to_f32(side[t * D + c]);
          hadamard_inplace(row.data(), D);
          for (uint32_t c = 0; c < D; ++c) side[t * D + c] = f32_to_f16(row[c]);
        }
    }
  }
  std::vector<const uint16_t*> kp() const {
    std::vector<const uint16_t*> p(n);
    for (size_t i = 0; i < n; ++i) p[i] = &K[i * G * D];
    return p;
  }
  std::vector<const uint16_t*> vp() const {
    std::vector<const uint16_t*> p(n);
    for (size_t i = 0; i < n; ++i) p[i] = &V[i * G * D];
    return p;
  }
};

std::string name_of(const RecordLayout& l, const SealOptions& o) {
  return "D=" + std::to_string(l.head_dim) + " G=" + std::to_string(l.group) + " " + std::to_string(l.bits_k) + "/" +
         std::to_string(l.bits_v) + (l.body == Body::trellis ? "t" : "") +
         (l.channel_axis() ? " channel-axis" : "") + " mode " + std::to_string(static_cast<int>(o.balance)) +
         " iters " + std::to_string(o.iters);
}

// Seal on both sides and compare the bytes, the statuses and the guard.
void expect_same_seal(cuda::Engine& eng, const RecordLayout& l, const SealOptions& o, const Tiles& x,
                      SealPath cpu_path = SealPath::reference) {
  const auto kp = x.kp(), vp = x.vp();
  std::vector<uint8_t> cpu(x.n * l.bytes), gpu(x.n * l.bytes + kGuardBytes, kGuard);
  const Status cst = seal_records(l, o, x.n, kp.data(), vp.data(), x.D, cpu.data(), cpu_path);
  ASSERT_TRUE(cst.ok()) << cst.message();
  std::vector<Status> st;
  ASSERT_EQ(eng.seal(l, o, x.n, kp.data(), vp.data(), x.D, gpu.data(), &st), "");
  ASSERT_EQ(st.size(), x.n);
  for (size_t i = 0; i < x.n; ++i) ASSERT_TRUE(st[i].ok()) << st[i].message();
  for (size_t i = 0; i < x.n; ++i)
    ASSERT_EQ(0, std::memcmp(&cpu[i * l.bytes], &gpu[i * l.bytes], l.bytes)) << name_of(l, o) << " record " << i;
  for (size_t i = cpu.size(); i < gpu.size(); ++i) ASSERT_EQ(gpu[i], kGuard) << "guard overwritten";
}

// A run-time codebook of finite fp16 values (a trained table's shape: sorted-ish levels
// spread over the code range with noise), `bits` wide.
std::vector<uint16_t> runtime_codebook(uint32_t bits, uint64_t seed) {
  const uint32_t n = trellis_entries(bits);
  std::vector<uint16_t> t(n);
  XorShift64 rng(seed);
  for (uint32_t w = 0; w < n; ++w) {
    const float level = static_cast<float>(w >> 6) + static_cast<float>(rng.gauss()) / 4096.0f;
    t[w] = f32_to_f16(level);
  }
  return t;
}

}  // namespace

TEST(GpuSeal, ScalarEveryBitPairAndHeadDim) {
  SJKV_REQUIRE_GPU();
  cuda::Engine eng;
  for (uint32_t D : {64u, 128u, 256u, 512u}) {
    const Tiles x(D, 128, D >= 512 ? 2 : 3, 100 + D, true);
    for (uint32_t bk : {2u, 3u, 4u})
      for (uint32_t bv : {2u, 3u, 4u}) {
        SealOptions o;
        expect_same_seal(eng, make_layout(D, 128, bk, bv, Body::scalar), o, x);
      }
  }
}

TEST(GpuSeal, ScalarBestOfAndIterationCounts) {
  SJKV_REQUIRE_GPU();
  cuda::Engine eng;
  const Tiles x(128, 128, 4, 7, true);
  for (uint32_t iters : {0u, 1u, 8u, 64u})
    for (BalanceMode mode : {BalanceMode::final_scales, BalanceMode::best_of}) {
      SealOptions o;
      o.iters = iters;
      o.balance = mode;
      expect_same_seal(eng, make_layout(128, 128, 4, 4, Body::scalar), o, x);
      expect_same_seal(eng, make_layout(128, 128, 3, 2, Body::scalar), o, x);
    }
}

TEST(GpuSeal, ScalarOtherGroupSizes) {
  SJKV_REQUIRE_GPU();
  cuda::Engine eng;
  for (uint32_t G : {16u, 32u, 64u, 256u})
    for (uint32_t D : {32u, 128u, 256u}) {
      const Tiles x(D, G, 3, 300 + G + D, false);
      SealOptions o;
      expect_same_seal(eng, make_layout(D, G, 4, 4, Body::scalar), o, x);
      expect_same_seal(eng, make_layout(D, G, 2, 3, Body::scalar), o, x);
      expect_same_seal(eng, make_layout(D, G, 3, 4, Body::scalar), o, x);
    }
}

TEST(GpuSeal, TrellisBothAxesEveryHeadDim) {
  SJKV_REQUIRE_GPU();
  cuda::Engine eng;
  const uint32_t pairs[][2] = {{3, 3}, {3, 2}, {2, 2}, {4, 4}};
  for (uint32_t D : {128u, 256u, 512u}) {
    const Tiles x(D, 128, 2, 500 + D, true);
    for (const auto& p : pairs)
      for (TrellisAxis axis : {TrellisAxis::token, TrellisAxis::channel}) {
        SealOptions o;
        expect_same_seal(eng, make_layout(D, 128, p[0], p[1], Body::trellis, axis), o, x);
      }
  }
}

TEST(GpuSeal, TrellisBestOfBalancing) {
  SJKV_REQUIRE_GPU();
  cuda::Engine eng;
  const Tiles x(256, 128, 2, 77, true);
  SealOptions o;
  o.iters = 8;
  o.balance = BalanceMode::best_of;
  expect_same_seal(eng, make_layout(256, 128, 3, 2, Body::trellis), o, x);
  expect_same_seal(eng, make_layout(256, 128, 3, 3, Body::trellis, TrellisAxis::channel), o, x);
}

TEST(GpuSeal, TrellisRuntimeCodebooks) {
  SJKV_REQUIRE_GPU();
  cuda::Engine eng;
  const Tiles x(128, 128, 3, 900, true);
  const uint32_t pairs[][2] = {{3, 3}, {3, 2}, {2, 2}, {4, 4}};
  for (const auto& p : pairs)
    for (TrellisAxis axis : {TrellisAxis::token, TrellisAxis::channel}) {
      const auto tk = runtime_codebook(p[0], 11 + p[0]);
      const auto tv = runtime_codebook(p[1], 23 + p[1]);
      SealOptions o;
      o.codebooks.k = tk.data();
      o.codebooks.v = tv.data();
      const RecordLayout l = make_layout(128, 128, p[0], p[1], Body::trellis, axis);
      expect_same_seal(eng, l, o, x);
      // And decode with the same tables.
      const auto kp = x.kp(), vp = x.vp();
      std::vector<uint8_t> rec(x.n * l.bytes);
      ASSERT_TRUE(seal_records(l, o, x.n, kp.data(), vp.data(), x.D, rec.data(), SealPath::reference).ok());
      std::vector<float> dec(x.n * 2 * 128 * 128 + kGuardBytes / 4);
      std::memset(dec.data(), kGuard, dec.size() * 4);
      ASSERT_EQ(eng.decode(l, o.codebooks, x.n, rec.data(), dec.data()), "");
      std::vector<float> row(128);
      for (size_t i = 0; i < x.n; ++i)
        for (uint32_t t = 0; t < 128; ++t) {
          decode_k_row(l, &rec[i * l.bytes], t, row.data(), o.codebooks);
          ASSERT_EQ(0, std::memcmp(row.data(), &dec[((i * 2) * 128 + t) * 128], 128 * 4));
          decode_v_row(l, &rec[i * l.bytes], t, row.data(), o.codebooks);
          ASSERT_EQ(0, std::memcmp(row.data(), &dec[((i * 2 + 1) * 128 + t) * 128], 128 * 4));
        }
      const uint8_t* g = reinterpret_cast<const uint8_t*>(&dec[x.n * 2 * 128 * 128]);
      for (size_t i = 0; i < kGuardBytes; ++i) ASSERT_EQ(g[i], kGuard);
    }
}

// The tile in global memory (the path D*G too large for shared memory takes) gives the
// same bytes as the shared-memory path.
TEST(GpuSeal, GlobalMemoryTilePath) {
  SJKV_REQUIRE_GPU();
  cuda::Engine eng;
  eng.set_shared_tile(false);
  const Tiles x(256, 128, 3, 1234, true);
  SealOptions o;
  expect_same_seal(eng, make_layout(256, 128, 4, 4, Body::scalar), o, x);
  expect_same_seal(eng, make_layout(256, 128, 3, 3, Body::scalar), o, x);
  expect_same_seal(eng, make_layout(256, 128, 3, 2, Body::trellis), o, x);
  expect_same_seal(eng, make_layout(256, 128, 2, 2, Body::trellis, TrellisAxis::channel), o, x);
  o.balance = BalanceMode::best_of;
  o.iters = 8;
  expect_same_seal(eng, make_layout(256, 128, 4, 2, Body::scalar), o, x);
}

// Row stds with 8 lanes per row and xor shuffles (the other schedule), both tile places.
TEST(GpuSeal, ShuffleRowStdSchedule) {
  SJKV_REQUIRE_GPU();
  cuda::Engine eng;
  eng.set_row_std_lanes8(true);
  const Tiles x(256, 128, 3, 4321, true);
  for (bool shared : {true, false}) {
    eng.set_shared_tile(shared);
    SealOptions o;
    expect_same_seal(eng, make_layout(256, 128, 4, 4, Body::scalar), o, x);
    expect_same_seal(eng, make_layout(256, 128, 3, 2, Body::trellis), o, x);
    o.balance = BalanceMode::best_of;
    o.iters = 8;
    expect_same_seal(eng, make_layout(256, 128, 2, 3, Body::scalar), o, x);
  }
  const Tiles y(512, 128, 2, 99, true);
  expect_same_seal(eng, make_layout(512, 128, 3, 3, Body::trellis, TrellisAxis::channel), SealOptions{}, y);
}

// A 4096-token commit of 16 layers x 4 kv heads at D = 256: 2,048 records in one call.
TEST(GpuSeal, ThousandsOfRecordsPerLaunch) {
  SJKV_REQUIRE_GPU();
  cuda::Engine eng;
  const Tiles x(256, 128, 2048, 4242, false);
  SealOptions o;
  // The vectorised CPU path (byte-equal to the reference, see test_seal) keeps this quick.
  expect_same_seal(eng, make_layout(256, 128, 4, 4, Body::scalar), o, x, SealPath::fast);
  expect_same_seal(eng, make_layout(256, 128, 3, 2, Body::trellis), o, x, SealPath::fast);
}

TEST(GpuSeal, NonFiniteInputsAreReportedAndZeroFilled) {
  SJKV_REQUIRE_GPU();
  cuda::Engine eng;
  for (Body body : {Body::scalar, Body::trellis}) {
    Tiles x(128, 128, 5, 31, true);
    const uint32_t D = 128;
    x.K[1 * 128 * D + 17 * D + 5] = 0x7e00;  // NaN in record 1, K token 17 channel 5
    x.K[1 * 128 * D + 90 * D + 3] = 0x7c00;  // a later Inf in the same record
    x.V[3 * 128 * D + 0 * D + 100] = 0xfc00; // -Inf in record 3, V token 0 channel 100
    x.V[3 * 128 * D + 2 * D + 1] = 0x7c01;   // a later NaN
    const RecordLayout l = make_layout(D, 128, 3, 3, body);
    SealOptions o;
    const auto kp = x.kp(), vp = x.vp();
    std::vector<uint8_t> gpu(x.n * l.bytes + kGuardBytes, kGuard), cpu(l.bytes);
    std::vector<Status> st;
    ASSERT_EQ(eng.seal(l, o, x.n, kp.data(), vp.data(), D, gpu.data(), &st), "");
    SealWorkspace ws;
    for (size_t i = 0; i < x.n; ++i) {
      const Status c = seal_record(l, o, kp[i], vp[i], D, cpu.data(), ws, SealPath::reference);
      EXPECT_EQ(st[i].code, c.code) << i;
      EXPECT_EQ(st[i].side, c.side) << i;
      EXPECT_EQ(st[i].token, c.token) << i;
      EXPECT_EQ(st[i].channel, c.channel) << i;
      ASSERT_EQ(0, std::memcmp(cpu.data(), &gpu[i * l.bytes], l.bytes)) << "record " << i;
    }
    EXPECT_EQ(st[1].code, ErrorCode::non_finite_input);
    EXPECT_EQ(st[1].side, Side::k);
    EXPECT_EQ(st[1].token, 17u);
    EXPECT_EQ(st[1].channel, 5u);
    EXPECT_EQ(st[3].side, Side::v);
    EXPECT_EQ(st[3].token, 0u);
    EXPECT_EQ(st[3].channel, 100u);
    for (size_t i = 0; i < l.bytes; ++i) ASSERT_EQ(gpu[1 * l.bytes + i], 0) << "failed record not zero-filled";
    for (size_t i = x.n * l.bytes; i < gpu.size(); ++i) ASSERT_EQ(gpu[i], kGuard);
  }
}

TEST(GpuSeal, UnsupportedInputsAreRefused) {
  SJKV_REQUIRE_GPU();
  cuda::Engine eng;
  const Tiles x(128, 64, 2, 5, false);
  const auto kp = x.kp(), vp = x.vp();
  std::vector<Status> st;
  // Trellis needs G = 128.
  RecordLayout l = make_layout(128, 64, 3, 3, Body::trellis);
  std::vector<uint8_t> out(2 * l.bytes, 0x55);
  ASSERT_EQ(eng.seal(l, SealOptions{}, 2, kp.data(), vp.data(), 128, out.data(), &st), "");
  for (const Status& s : st) EXPECT_EQ(s.code, ErrorCode::unsupported);
  for (uint8_t b : out) ASSERT_EQ(b, 0);
  // A non-finite codebook entry.
  const Tiles y(128, 128, 2, 6, false);
  const auto ykp = y.kp(), yvp = y.vp();
  auto tk = runtime_codebook(3, 1);
  tk[77] = 0x7c00;
  SealOptions o;
  o.codebooks.k = tk.data();
  l = make_layout(128, 128, 3, 3, Body::trellis);
  out.assign(2 * l.bytes, 0x55);
  ASSERT_EQ(eng.seal(l, o, 2, ykp.data(), yvp.data(), 128, out.data(), &st), "");
  for (const Status& s : st) {
    EXPECT_EQ(s.code, ErrorCode::unsupported);
    EXPECT_NE(s.detail.find("entry 77"), std::string::npos) << s.detail;
  }
  for (uint8_t b : out) ASSERT_EQ(b, 0);
  // iters above 64.
  o = SealOptions{};
  o.iters = 65;
  l = make_layout(128, 128, 4, 4, Body::scalar);
  out.assign(2 * l.bytes, 0x55);
  ASSERT_EQ(eng.seal(l, o, 2, ykp.data(), yvp.data(), 128, out.data(), &st), "");
  for (const Status& s : st) EXPECT_EQ(s.code, ErrorCode::unsupported);
}

// The device API directly: strided rows and records, device outputs with a device guard.
TEST(GpuSeal, DeviceApiWithStridesAndGuard) {
  SJKV_REQUIRE_GPU();
  const uint32_t D = 128, G = 128, stride = 160;
  const size_t n = 40, rec_stride = static_cast<size_t>(G) * stride + 64;
  const Tiles x(D, G, n, 64, true);
  std::vector<uint16_t> hk(n * rec_stride, 0x7e00), hv(n * rec_stride, 0x7e00);  // NaN padding must not be read
  for (size_t i = 0; i < n; ++i)
    for (uint32_t t = 0; t < G; ++t) {
      std::memcpy(&hk[i * rec_stride + t * stride], &x.K[(i * G + t) * D], D * 2);
      std::memcpy(&hv[i * rec_stride + t * stride], &x.V[(i * G + t) * D], D * 2);
    }
  for (const RecordLayout& l : {make_layout(D, G, 4, 4, Body::scalar), make_layout(D, G, 3, 2, Body::trellis)}) {
    SealOptions o;
    uint16_t *dk = nullptr, *dv = nullptr;
    uint8_t* dout = nullptr;
    cuda::RecordStatus* dst = nullptr;
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&dk), hk.size() * 2), cudaSuccess);
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&dv), hv.size() * 2), cudaSuccess);
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&dout), n * l.bytes + kGuardBytes), cudaSuccess);
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&dst), n * sizeof(cuda::RecordStatus)), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(dk, hk.data(), hk.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(dv, hv.data(), hv.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemset(dout, kGuard, n * l.bytes + kGuardBytes), cudaSuccess);
    cudaStream_t s;
    ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
    cuda::Engine eng;
    ASSERT_EQ(eng.seal_async(l, o, n, dk, dv, stride, rec_stride, dout, dst, s), "");
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    std::vector<uint8_t> gpu(n * l.bytes + kGuardBytes);
    std::vector<cuda::RecordStatus> hst(n);
    ASSERT_EQ(cudaMemcpy(gpu.data(), dout, gpu.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(hst.data(), dst, n * sizeof(cuda::RecordStatus), cudaMemcpyDeviceToHost), cudaSuccess);
    cudaStreamDestroy(s);
    cudaFree(dk);
    cudaFree(dv);
    cudaFree(dout);
    cudaFree(dst);
    const auto kp = x.kp(), vp = x.vp();
    std::vector<uint8_t> cpu(n * l.bytes);
    ASSERT_TRUE(seal_records(l, o, n, kp.data(), vp.data(), D, cpu.data(), SealPath::reference).ok());
    for (size_t i = 0; i < n; ++i) EXPECT_TRUE(cuda::to_status(hst[i], i).ok()) << cuda::to_status(hst[i], i).message();
    ASSERT_EQ(0, std::memcmp(cpu.data(), gpu.data(), cpu.size()));
    for (size_t i = cpu.size(); i < gpu.size(); ++i) ASSERT_EQ(gpu[i], kGuard) << "guard overwritten";
  }
}
