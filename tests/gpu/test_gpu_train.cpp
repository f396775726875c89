// Trellis training on the GPU against the codec-level CPU functions: Viterbi codes equal to
// trellis::viterbi_ref and viterbi_fast, Lloyd per-window sums, counts and error equal bit
// for bit to the CPU pass (sjkv/lloyd.h order, as train.cpp), and device Philox uniforms
// equal to cuRAND's host generator. The stream-layout test runs on the CPU (cuRAND's host
// generator needs no GPU).
#include <gtest/gtest.h>
#include <curand.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "gpu_test.h"
#include "sjkv/cuda/codec_cuda.h"
#include "sjkv/cuda/train_cuda.h"
#include "sjkv/philox.h"
#include "sjkv/lloyd.h"
#include "sjkv/seal.h"
#include "sjkv/testgen.h"
#include "sjkv/trellis.h"

using namespace sjkv;

namespace {

// Viterbi targets of realistic tiles: fill_group rows, per-row affine of §5.4 over each
// sequence (len values along the tokens of a channel, or the channels of a token when
// len == D), target (x - lo) / step as the seal computes it.
std::vector<float> make_targets(size_t n, uint32_t len, uint32_t bits, uint64_t seed) {
  const uint32_t D = len == 128 ? 128 : len, G = 128;
  std::vector<float> y;
  y.reserve(n * len);
  std::vector<uint16_t> K(static_cast<size_t>(G) * D), V(K.size());
  std::vector<int32_t> chf(D);
  const uint32_t qmax = (1u << bits) - 1u;
  for (uint64_t rec = 0; y.size() < n * len; ++rec) {
    fill_group(D, G, seed * 1000 + rec, K.data(), V.data(), chf.data());
    const uint32_t seqs = len == G ? D : G;
    for (uint32_t s = 0; s < seqs && y.size() < n * len; ++s) {
      float v[1024];
      for (uint32_t i = 0; i < len; ++i)
        v[i] = f16_to_f32(len == G ? K[static_cast<size_t>(i) * D + s] : V[static_cast<size_t>(s) * D + i]);
      float lo = v[0], hi = v[0];
      for (uint32_t i = 1; i < len; ++i) {
        lo = op::minS(lo, v[i]);
        hi = op::maxS(hi, v[i]);
      }
      const float step = bal::affine_step(lo, hi, qmax);
      for (uint32_t i = 0; i < len; ++i) y.push_back(trellis::target(v[i], lo, step));
    }
  }
  return y;
}

// Decoded tables: the reference table at 2/3 bits, identity at 4, and a "trained-like" one
// (reference scaled per entry) so ties and non-monotone tables both occur.
std::vector<float> table(uint32_t bits, Side side, bool perturbed) {
  const uint16_t* t = reference_codebook(side, bits);
  std::vector<float> f(trellis_entries(bits));
  for (uint32_t w = 0; w < f.size(); ++w)
    f[w] = f16_to_f32(t[w]) * (perturbed ? 1.0f + static_cast<float>((w * 37) % 11) / 40.0f : 1.0f);
  return f;
}

// The CPU pass of train.cpp on codec functions: chunks of kLloydChunk, viterbi_fast,
// lloyd_accumulate, chunk partials added in chunk order.
double cpu_pass(const std::vector<float>& y, size_t n, uint32_t len, uint32_t bits, const float* cbf,
                std::vector<double>& sum, std::vector<uint64_t>& cnt) {
  const uint32_t ne = trellis_entries(bits);
  const size_t chunks = (n + kLloydChunk - 1) / kLloydChunk;
  std::vector<uint8_t> scratch(viterbi_scratch_bytes(len)), codes(len);
  std::vector<uint16_t> wins(len);
  sum.assign(ne, 0.0);
  cnt.assign(ne, 0);
  double e_tot = 0.0;
  for (size_t ci = 0; ci < chunks; ++ci) {
    std::vector<double> cs(ne, 0.0);
    std::vector<uint32_t> cc(ne, 0);
    double e = 0.0;
    for (size_t s = ci * kLloydChunk; s < std::min(n, (ci + 1) * kLloydChunk); ++s) {
      viterbi_fast(&y[s * len], len, bits, cbf, scratch.data(), codes.data(), wins.data());
      e = lloyd_accumulate(&y[s * len], codes.data(), len, bits, cbf, e, cs.data(), cc.data());
    }
    e_tot += e;
    for (uint32_t w = 0; w < ne; ++w) {
      sum[w] += cs[w];
      cnt[w] += cc[w];
    }
  }
  return e_tot / static_cast<double>(n * len);
}

// Successive curandGenerateUniform calls of the host generator, as SplitDrawer makes them.
std::vector<float> host_stream(uint64_t seed, const std::vector<size_t>& calls) {
  curandGenerator_t g = nullptr;
  EXPECT_EQ(curandCreateGeneratorHost(&g, CURAND_RNG_PSEUDO_PHILOX4_32_10), CURAND_STATUS_SUCCESS);
  EXPECT_EQ(curandSetPseudoRandomGeneratorSeed(g, seed), CURAND_STATUS_SUCCESS);
  std::vector<float> out;
  for (size_t n : calls) {
    std::vector<float> u(n);
    EXPECT_EQ(curandGenerateUniform(g, u.data(), n), CURAND_STATUS_SUCCESS);
    out.insert(out.end(), u.begin(), u.end());
  }
  curandDestroyGenerator(g);
  return out;
}

const std::vector<size_t> kCalls = {5, 300001, 7, 1000003, 262147};

}  // namespace

// CPU only: sjkv/philox.h's stream (the documented layout of the host generator and Philox4x32-10),
// which SplitDrawer draws in a build without cuRAND, reproduces curandGenerateUniform bit for
// bit, across call boundaries.
TEST(CurandHostLayout, SharedStreamReproducesHostGenerator) {
  for (uint64_t seed : {0ull, 7ull, 0x5eedull, 0xDEADBEEFCAFEull}) {
    const std::vector<float> u = host_stream(seed, kCalls);
    for (size_t n = 0; n < u.size(); ++n) {
      const float m = philox_stream_uniform(seed, n);
      ASSERT_EQ(0, std::memcmp(&m, &u[n], 4)) << "seed " << seed << " element " << n;
    }
  }
}

TEST(GpuTrain, DevicePhiloxEqualsHostGenerator) {
  SJKV_REQUIRE_GPU();
  for (uint64_t seed : {0ull, 7ull, 0xDEADBEEFCAFEull}) {
    const std::vector<float> u = host_stream(seed, kCalls);
    size_t off = 0;
    for (size_t n : kCalls) {
      std::vector<float> d(n + 8, -1.0f);
      ASSERT_EQ(cuda::philox_uniform_host(seed, off, n, d.data()), "");
      ASSERT_EQ(0, std::memcmp(d.data(), &u[off], n * 4)) << "seed " << seed << " call at offset " << off;
      for (size_t i = n; i < d.size(); ++i) ASSERT_EQ(d[i], -1.0f) << "guard overwritten";
      std::vector<uint8_t> held(n);
      ASSERT_EQ(cuda::split_draw_host(seed, off, n, 0.25, held.data()), "");
      size_t h = 0;
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(held[i], static_cast<double>(u[off + i]) < 0.25 ? 1 : 0) << i;
        h += held[i];
      }
      if (n > 1000) {
        EXPECT_NEAR(static_cast<double>(h) / n, 0.25, 0.01);
      }
      off += n;
    }
  }
}

TEST(GpuTrain, ViterbiCodesEqualCpu) {
  SJKV_REQUIRE_GPU();
  for (uint32_t bits : {2u, 3u, 4u})
    for (uint32_t len : {128u, 256u})
      for (bool perturbed : {false, true}) {
        const size_t n = 700;
        const std::vector<float> y = make_targets(n, len, bits, bits * 10 + len);
        const std::vector<float> cbf = table(bits, Side::k, perturbed);
        std::vector<uint8_t> codes(n * len + 64, 0xEE);
        std::vector<uint16_t> wins(n * len);
        ASSERT_EQ(cuda::viterbi_batch_host(y.data(), n, len, bits, cbf.data(), codes.data(), wins.data()), "");
        for (size_t i = n * len; i < codes.size(); ++i) ASSERT_EQ(codes[i], 0xEE) << "guard overwritten";
        std::vector<float> phi(2 * kTrellisStates);
        std::vector<uint8_t> choice(static_cast<size_t>(len) * kTrellisStates), ref(len), fast(len);
        std::vector<uint8_t> scratch(viterbi_scratch_bytes(len));
        std::vector<uint16_t> fw(len);
        for (size_t s = 0; s < n; ++s) {
          trellis::viterbi_ref(&y[s * len], len, bits, cbf.data(), phi.data(), choice.data(), ref.data());
          viterbi_fast(&y[s * len], len, bits, cbf.data(), scratch.data(), fast.data(), fw.data());
          ASSERT_EQ(0, std::memcmp(ref.data(), &codes[s * len], len)) << "bits " << bits << " len " << len << " seq " << s;
          ASSERT_EQ(0, std::memcmp(fw.data(), &wins[s * len], len * 2)) << "windows, seq " << s;
        }
      }
}

TEST(GpuTrain, LloydPassEqualsCpuBitForBit) {
  SJKV_REQUIRE_GPU();
  for (uint32_t bits : {2u, 3u, 4u})
    for (uint32_t len : {128u, 256u}) {
      const size_t n = 1500;  // three chunks, the last one partial
      const std::vector<float> y = make_targets(n, len, bits, 77 + bits + len);
      const std::vector<float> cbf = table(bits, Side::v, true);
      std::vector<double> cs, gs, gs2;
      std::vector<uint64_t> cc, gc, gc2;
      const double cm = cpu_pass(y, n, len, bits, cbf.data(), cs, cc);
      cuda::LloydPass pass;
      ASSERT_EQ(pass.upload(y.data(), n, len), "");
      double gm = 0, gm2 = 0, gm3 = 0;
      ASSERT_EQ(pass.run(bits, cbf.data(), &gm, &gs, &gc), "");
      ASSERT_EQ(pass.run(bits, cbf.data(), &gm2, &gs2, &gc2), "");
      ASSERT_EQ(pass.run(bits, cbf.data(), &gm3, nullptr, nullptr), "");
      EXPECT_EQ(f64_bits(cm), f64_bits(gm)) << "mse " << cm << " vs " << gm;
      EXPECT_EQ(f64_bits(gm), f64_bits(gm2));
      EXPECT_EQ(f64_bits(gm), f64_bits(gm3));
      ASSERT_EQ(cs.size(), gs.size());
      uint64_t total = 0;
      for (size_t w = 0; w < cs.size(); ++w) {
        ASSERT_EQ(f64_bits(cs[w]), f64_bits(gs[w])) << "bits " << bits << " len " << len << " window " << w;
        ASSERT_EQ(cc[w], gc[w]) << "window " << w;
        ASSERT_EQ(f64_bits(gs[w]), f64_bits(gs2[w])) << "not deterministic, window " << w;
        total += gc[w];
      }
      EXPECT_EQ(total, n * len);
    }
}
