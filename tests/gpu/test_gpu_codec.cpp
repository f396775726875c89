// Device bytes against the CPU reference: staging rows, sealed records, decoded rows.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "gpu_test.h"
#include "sjkv/cuda/codec_cuda.h"
#include "sjkv/hadamard.h"
#include "sjkv/seal.h"
#include "sjkv/testgen.h"

using namespace sjkv;

TEST(GpuCodec, StagingRowsMatchCpu) {
  SJKV_REQUIRE_GPU();
  const uint32_t D = 256, n = 300;
  std::vector<float> x(static_cast<size_t>(n) * D);
  XorShift64 rng(5);
  for (uint32_t r = 0; r < n; ++r) {
    for (uint32_t d = 0; d < D; ++d) x[r * D + d] = static_cast<float>(rng.gauss()) / 900.0f * (d % 37 == 0 ? 9 : 1);
    hadamard_inplace(&x[r * D], D);
  }
  for (StagingType t : {StagingType::tq6_0, StagingType::q8_0, StagingType::f16}) {
    const uint32_t rb = staging_row_bytes(t, D);
    std::vector<uint8_t> cpu(static_cast<size_t>(n) * rb), gpu(cpu.size() + 64, 0xEE);
    for (uint32_t r = 0; r < n; ++r) staging_encode_row(t, &x[r * D], D, &cpu[r * rb]);
    ASSERT_EQ(cuda::staging_encode_rows(t, x.data(), n, D, gpu.data()), "");
    EXPECT_EQ(0, std::memcmp(cpu.data(), gpu.data(), cpu.size())) << staging_name(t);
    for (size_t i = cpu.size(); i < gpu.size(); ++i) ASSERT_EQ(gpu[i], 0xEE) << "guard overwritten";
  }
}

TEST(GpuCodec, SealedRecordsAndDecodeMatchCpu) {
  SJKV_REQUIRE_GPU();
  const uint32_t pairs[][2] = {{4, 4}, {4, 3}, {3, 3}, {3, 2}, {2, 2}, {2, 4}};
  for (uint32_t D : {64u, 128u, 256u, 512u}) {
    const size_t n = 6;
    std::vector<uint16_t> K(n * 128 * D), V(n * 128 * D);
    std::vector<int32_t> chf(D);
    for (size_t i = 0; i < n; ++i) fill_group(D, 128, 40 + i, &K[i * 128 * D], &V[i * 128 * D], chf.data());
    for (const auto& p : pairs)
      for (BalanceMode mode : {BalanceMode::final_scales, BalanceMode::best_of}) {
        const RecordLayout l = make_layout(D, 128, p[0], p[1], Body::scalar);
        const uint32_t iters = mode == BalanceMode::best_of ? 8 : 16;
        std::vector<const uint16_t*> kp(n), vp(n);
        for (size_t i = 0; i < n; ++i) {
          kp[i] = &K[i * 128 * D];
          vp[i] = &V[i * 128 * D];
        }
        SealOptions o;
        o.iters = iters;
        o.balance = mode;
        std::vector<uint8_t> cpu(n * l.bytes), gpu(n * l.bytes + 64, 0xEE);
        ASSERT_TRUE(seal_records(l, o, n, kp.data(), vp.data(), D, cpu.data()).ok());
        ASSERT_EQ(cuda::seal_records_ref(l, iters, mode, n, K.data(), V.data(), D, gpu.data()), "");
        ASSERT_EQ(0, std::memcmp(cpu.data(), gpu.data(), cpu.size()))
            << "D=" << D << " " << p[0] << "/" << p[1] << " mode " << int(mode);
        for (size_t i = cpu.size(); i < gpu.size(); ++i) ASSERT_EQ(gpu[i], 0xEE) << "guard overwritten";

        std::vector<float> dec(n * 2 * 128 * D);
        ASSERT_EQ(cuda::decode_records(l, n, cpu.data(), dec.data()), "");
        std::vector<float> row(D);
        for (size_t i = 0; i < n; ++i)
          for (uint32_t t = 0; t < 128; t += 7) {
            decode_k_row(l, &cpu[i * l.bytes], t, row.data());
            ASSERT_EQ(0, std::memcmp(row.data(), &dec[((i * 2) * 128 + t) * D], D * 4));
            decode_v_row(l, &cpu[i * l.bytes], t, row.data());
            ASSERT_EQ(0, std::memcmp(row.data(), &dec[((i * 2 + 1) * 128 + t) * D], D * 4));
          }
      }
  }
}

namespace {

// Rows of D floats in the model basis: heavy-tailed values with outlier channels and a few
// zero rows (the staging write rotates them itself).
std::vector<float> model_rows(uint32_t n, uint32_t D, uint64_t seed) {
  std::vector<float> x(static_cast<size_t>(n) * D);
  XorShift64 rng(seed);
  for (uint32_t r = 0; r < n; ++r)
    for (uint32_t d = 0; d < D; ++d) {
      const int32_t g = rng.gauss();
      const float heavy = (rng.next() % 97u == 0) ? 40.0f : 1.0f;
      x[static_cast<size_t>(r) * D + d] =
          r % 53 == 7 ? 0.0f : static_cast<float>(g) / 700.0f * heavy * (d % 41 == 3 ? 12.0f : 1.0f);
    }
  return x;
}

}  // namespace

TEST(GpuCodec, TunedStagingWriteRotatesAndMatchesCpu) {
  SJKV_REQUIRE_GPU();
  cuda::Engine eng;
  for (uint32_t D : {64u, 128u, 256u, 512u})
    for (uint32_t rot : {0u, 32u, D}) {
      const uint32_t n = 4096 / (D / 64);
      std::vector<float> x = model_rows(n, D, 17 + D + rot);
      // Refused values: a NaN, an infinity and an fp16 overflow in three rows.
      x[5 * D + 3] = std::numeric_limits<float>::quiet_NaN();
      x[9 * D + D - 1] = std::numeric_limits<float>::infinity();
      x[11 * D + 2] = 3.0e9f;
      for (StagingType t : {StagingType::tq6_0, StagingType::q8_0, StagingType::f16}) {
        if (D % staging_block_values(t) != 0) continue;
        const uint32_t rb = staging_row_bytes(t, D);
        std::vector<uint8_t> cpu(static_cast<size_t>(n) * rb), gpu(cpu.size() + 64, 0xEE);
        std::vector<int32_t> cbad(n), gbad(n, 12345);
        std::vector<float> row(D);
        for (uint32_t r = 0; r < n; ++r) {
          std::memcpy(row.data(), &x[static_cast<size_t>(r) * D], D * 4);
          if (rot) hadamard_blocks(row.data(), D, rot);
          cbad[r] = staging_encode_row_checked(t, row.data(), D, &cpu[static_cast<size_t>(r) * rb]);
        }
        ASSERT_EQ(eng.staging_write(t, x.data(), n, D, rot, gpu.data(), gbad.data()), "");
        for (uint32_t r = 0; r < n; ++r) {
          ASSERT_EQ(cbad[r], gbad[r]) << staging_name(t) << " D=" << D << " rot=" << rot << " row " << r;
          // A refused row's bytes are defined too (the CPU writes the whole row): compare all.
          ASSERT_EQ(0, std::memcmp(&cpu[static_cast<size_t>(r) * rb], &gpu[static_cast<size_t>(r) * rb], rb))
              << staging_name(t) << " D=" << D << " rot=" << rot << " row " << r;
        }
        EXPECT_GE(cbad[5], 0);
        for (size_t i = cpu.size(); i < gpu.size(); ++i) ASSERT_EQ(gpu[i], 0xEE) << "guard overwritten";

        // Ring rows decoded back.
        std::vector<float> dec(static_cast<size_t>(n) * D + 16);
        std::memset(dec.data(), 0xEE, dec.size() * 4);
        ASSERT_EQ(eng.staging_decode(t, cpu.data(), n, D, dec.data()), "");
        for (uint32_t r = 0; r < n; ++r) {
          staging_decode_row(t, &cpu[static_cast<size_t>(r) * rb], D, row.data());
          // Same bits, except that a refused row may decode to NaN, whose payload is the
          // platform's (x86 makes 0xFFC00000, CUDA 0x7FFFFFFF): any NaN equals any NaN there.
          for (uint32_t d = 0; d < D; ++d) {
            const float a = row[d], b = dec[static_cast<size_t>(r) * D + d];
            if (cbad[r] >= 0 && std::isnan(a) && std::isnan(b)) continue;
            ASSERT_EQ(0, std::memcmp(&a, &b, 4)) << "decode row " << r << " channel " << d << ": " << a << " vs " << b;
          }
        }
        const uint8_t* g = reinterpret_cast<const uint8_t*>(&dec[static_cast<size_t>(n) * D]);
        for (size_t i = 0; i < 64; ++i) ASSERT_EQ(g[i], 0xEE) << "decode guard overwritten";
      }
    }
}

TEST(GpuCodec, TunedDecodeMatchesCpuBothBodies) {
  SJKV_REQUIRE_GPU();
  cuda::Engine eng;
  for (uint32_t D : {64u, 128u, 256u, 512u}) {
    const size_t n = 8;  // 8 heads of one group
    std::vector<uint16_t> K(n * 128 * D), V(n * 128 * D);
    std::vector<int32_t> chf(D);
    for (size_t i = 0; i < n; ++i) fill_group(D, 128, 700 + i, &K[i * 128 * D], &V[i * 128 * D], chf.data());
    std::vector<const uint16_t*> kp(n), vp(n);
    for (size_t i = 0; i < n; ++i) {
      kp[i] = &K[i * 128 * D];
      vp[i] = &V[i * 128 * D];
    }
    std::vector<RecordLayout> layouts;
    for (uint32_t bk : {2u, 3u, 4u})
      for (uint32_t bv : {2u, 3u, 4u}) layouts.push_back(make_layout(D, 128, bk, bv, Body::scalar));
    if (D % 128 == 0)
      for (TrellisAxis a : {TrellisAxis::token, TrellisAxis::channel}) {
        layouts.push_back(make_layout(D, 128, 3, 3, Body::trellis, a));
        layouts.push_back(make_layout(D, 128, 3, 2, Body::trellis, a));
        layouts.push_back(make_layout(D, 128, 2, 2, Body::trellis, a));
        layouts.push_back(make_layout(D, 128, 4, 4, Body::trellis, a));
      }
    for (const RecordLayout& l : layouts) {
      std::vector<uint8_t> rec(n * l.bytes);
      ASSERT_TRUE(seal_records(l, SealOptions{}, n, kp.data(), vp.data(), D, rec.data()).ok());
      std::vector<float> dec(n * 2 * 128 * D + 16);
      std::memset(dec.data(), 0xEE, dec.size() * 4);
      ASSERT_EQ(eng.decode(l, TrellisCodebooks{}, n, rec.data(), dec.data()), "");
      std::vector<float> row(D);
      for (size_t i = 0; i < n; ++i)
        for (uint32_t t = 0; t < 128; ++t) {
          decode_k_row(l, &rec[i * l.bytes], t, row.data());
          ASSERT_EQ(0, std::memcmp(row.data(), &dec[((i * 2) * 128 + t) * D], D * 4)) << "K D=" << D << " t=" << t;
          decode_v_row(l, &rec[i * l.bytes], t, row.data());
          ASSERT_EQ(0, std::memcmp(row.data(), &dec[((i * 2 + 1) * 128 + t) * D], D * 4)) << "V D=" << D << " t=" << t;
        }
      const uint8_t* g = reinterpret_cast<const uint8_t*>(&dec[n * 2 * 128 * D]);
      for (size_t i = 0; i < 64; ++i) ASSERT_EQ(g[i], 0xEE) << "guard overwritten";
    }
  }
}

// The device APIs write exactly their outputs: 0xEE guard bytes after each device buffer
// stay as they were.
TEST(GpuCodec, DeviceOutputsKeepTheirGuards) {
  SJKV_REQUIRE_GPU();
  const size_t guard = 64;
  auto dev = [](size_t bytes) {
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, bytes), cudaSuccess);
    return static_cast<uint8_t*>(p);
  };
  auto guard_ok = [&](const uint8_t* d, size_t used) {
    std::vector<uint8_t> h(guard);
    EXPECT_EQ(cudaMemcpy(h.data(), d + used, guard, cudaMemcpyDeviceToHost), cudaSuccess);
    for (uint8_t b : h)
      if (b != 0xEE) return false;
    return true;
  };
  cuda::Engine eng;
  const uint32_t D = 256, n_rows = 333;
  const std::vector<float> x = model_rows(n_rows, D, 3);
  float* dx = reinterpret_cast<float*>(dev(x.size() * 4));
  ASSERT_EQ(cudaMemcpy(dx, x.data(), x.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  for (StagingType t : {StagingType::tq6_0, StagingType::q8_0, StagingType::f16}) {
    const size_t rb = staging_row_bytes(t, D);
    uint8_t* rows = dev(n_rows * rb + guard);
    uint8_t* bad = dev(n_rows * 4 + guard);
    uint8_t* dec = dev(static_cast<size_t>(n_rows) * D * 4 + guard);
    ASSERT_EQ(cudaMemset(rows, 0xEE, n_rows * rb + guard), cudaSuccess);
    ASSERT_EQ(cudaMemset(bad, 0xEE, n_rows * 4 + guard), cudaSuccess);
    ASSERT_EQ(cudaMemset(dec, 0xEE, static_cast<size_t>(n_rows) * D * 4 + guard), cudaSuccess);
    ASSERT_EQ(eng.staging_write_async(t, dx, n_rows, D, D, rows, reinterpret_cast<int32_t*>(bad), 0), "");
    ASSERT_EQ(eng.staging_decode_async(t, rows, n_rows, D, reinterpret_cast<float*>(dec), 0), "");
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_TRUE(guard_ok(rows, n_rows * rb)) << staging_name(t);
    EXPECT_TRUE(guard_ok(bad, n_rows * 4)) << staging_name(t);
    EXPECT_TRUE(guard_ok(dec, static_cast<size_t>(n_rows) * D * 4)) << staging_name(t);
    cudaFree(rows);
    cudaFree(bad);
    cudaFree(dec);
  }
  cudaFree(dx);
  // Record decode.
  const size_t n = 5;
  std::vector<uint16_t> K(n * 128 * D), V(n * 128 * D);
  std::vector<int32_t> chf(D);
  std::vector<const uint16_t*> kp(n), vp(n);
  for (size_t i = 0; i < n; ++i) {
    fill_group(D, 128, 60 + i, &K[i * 128 * D], &V[i * 128 * D], chf.data());
    kp[i] = &K[i * 128 * D];
    vp[i] = &V[i * 128 * D];
  }
  for (const RecordLayout& l : {make_layout(D, 128, 4, 4, Body::scalar), make_layout(D, 128, 3, 2, Body::trellis)}) {
    std::vector<uint8_t> rec(n * l.bytes);
    ASSERT_TRUE(seal_records(l, SealOptions{}, n, kp.data(), vp.data(), D, rec.data()).ok());
    uint8_t* drec = dev(rec.size());
    const size_t out_bytes = n * 2 * 128 * D * 4;
    uint8_t* dout = dev(out_bytes + guard);
    ASSERT_EQ(cudaMemcpy(drec, rec.data(), rec.size(), cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemset(dout, 0xEE, out_bytes + guard), cudaSuccess);
    ASSERT_EQ(eng.decode_async(l, TrellisCodebooks{}, n, drec, reinterpret_cast<float*>(dout), 0), "");
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_TRUE(guard_ok(dout, out_bytes));
    cudaFree(drec);
    cudaFree(dout);
  }
}
