// Device bytes against the CPU reference: staging rows, sealed records, decoded rows.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "sjkv/cuda/codec_cuda.h"
#include "sjkv/hadamard.h"
#include "sjkv/seal.h"
#include "sjkv/testgen.h"

using namespace sjkv;

namespace {

#define SJKV_REQUIRE_GPU()                                                    \
  do {                                                                        \
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device present"; \
  } while (0)

}  // namespace

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
