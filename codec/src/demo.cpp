#include "sjkv/demo.h"

#include <chrono>
#include <cmath>

#include "sjkv/cache.h"
#include "sjkv/hadamard.h"
#include "sjkv/testgen.h"

namespace sjkv {

std::vector<CodecConfig> demo_configs(const std::vector<uint32_t>& head_dims) {
  const uint32_t pairs[][2] = {{4, 4}, {4, 3}, {4, 2}, {3, 4}, {3, 3}, {3, 2}, {2, 4}, {2, 3}, {2, 2}};
  std::vector<CodecConfig> out;
  for (uint32_t D : head_dims) {
    CodecConfig base;
    base.head_dim = D;
    base.body = Body::scalar;
    base.staging = D % 128 == 0 ? StagingType::tq6_0 : StagingType::q8_0;
    for (const auto& p : pairs) {
      CodecConfig c = base;
      c.bits_k = p[0];
      c.bits_v = p[1];
      out.push_back(c);
    }
    for (StagingType st : {StagingType::q8_0, StagingType::f16}) {
      if (st == base.staging) continue;
      CodecConfig c = base;
      c.staging = st;
      out.push_back(c);
    }
    if (D % 128 == 0) {  // trellis bodies (reference tables) beside the scalar ones of the same bits
      const uint32_t tpairs[][2] = {{3, 3}, {3, 2}, {2, 2}};
      for (const auto& p : tpairs) {
        CodecConfig c = base;
        c.bits_k = p[0];
        c.bits_v = p[1];
        c.body = Body::trellis;
        out.push_back(c);
      }
    }
    CodecConfig kv = kvarn_config(D, 4, 4, 0);
    out.push_back(kv);
  }
  return out;
}

namespace {

// Rotated rows of one KV head over one group: Gaussian values with 3% outlier channels in
// the model basis, rotated like an engine rotates K and V before staging them.
void make_rows(uint32_t D, uint32_t G, uint32_t rot, XorShift64& rng, std::vector<float>& K, std::vector<float>& V) {
  std::vector<float> chf(D);
  for (auto& c : chf) c = (rng.next() % 100u) < 3u ? 8.0f + static_cast<float>(rng.next() & 7u) : 1.0f;
  K.assign(static_cast<size_t>(G) * D, 0.0f);
  V.assign(static_cast<size_t>(G) * D, 0.0f);
  for (uint32_t t = 0; t < G; ++t) {
    for (uint32_t d = 0; d < D; ++d) {
      K[t * D + d] = static_cast<float>(rng.gauss()) / 1200.0f * chf[d];
      V[t * D + d] = static_cast<float>(rng.gauss()) / 1200.0f;
    }
    hadamard_blocks(&K[t * D], D, rot);
    hadamard_blocks(&V[t * D], D, rot);
  }
}

}  // namespace

std::vector<DemoRow> run_demo(const DemoOptions& opt, DemoProgress progress) {
  const auto configs = demo_configs(opt.head_dims);
  std::vector<DemoRow> rows;
  size_t done = 0;
  for (const CodecConfig& c : configs) {
    const uint32_t D = c.head_dim, G = c.group, n = opt.records;
    const RecordLayout l = c.layout();
    const uint32_t rb = staging_row_bytes(c.staging, D);
    XorShift64 rng(opt.seed * 0x9E3779B97F4A7C15ull + D);
    std::vector<std::vector<float>> Kf(n), Vf(n);
    std::vector<uint16_t> kin(static_cast<size_t>(n) * G * D), vin(static_cast<size_t>(n) * G * D);
    std::vector<uint8_t> staged(2 * rb);
    std::vector<float> tmp(D);
    std::vector<const uint16_t*> kp(n), vp(n);
    for (uint32_t r = 0; r < n; ++r) {
      make_rows(D, G, c.rotation(), rng, Kf[r], Vf[r]);
      for (uint32_t t = 0; t < G; ++t) {
        staging_encode_row(c.staging, &Kf[r][t * D], D, staged.data());
        staging_encode_row(c.staging, &Vf[r][t * D], D, staged.data() + rb);
        staging_seal_input(c.staging, staged.data(), D, tmp.data(), &kin[(static_cast<size_t>(r) * G + t) * D]);
        staging_seal_input(c.staging, staged.data() + rb, D, tmp.data(), &vin[(static_cast<size_t>(r) * G + t) * D]);
      }
      kp[r] = &kin[static_cast<size_t>(r) * G * D];
      vp[r] = &vin[static_cast<size_t>(r) * G * D];
    }
    SealOptions so;
    so.iters = c.iters;
    so.balance = c.balance;
    std::vector<uint8_t> recs(static_cast<size_t>(n) * l.bytes);
    const auto t0 = std::chrono::steady_clock::now();
    const Status st = seal_records(l, so, n, kp.data(), vp.data(), D, recs.data(), opt.path, opt.threads);
    const auto t1 = std::chrono::steady_clock::now();
    if (!st.ok()) continue;
    double ek = 0, nk = 0, ev = 0, nv = 0;
    std::vector<float> row(D);
    for (uint32_t r = 0; r < n; ++r)
      for (uint32_t t = 0; t < G; ++t) {
        decode_k_row(l, &recs[static_cast<size_t>(r) * l.bytes], t, row.data());
        for (uint32_t d = 0; d < D; ++d) {
          const double x = Kf[r][t * D + d];
          ek += (row[d] - x) * (row[d] - x);
          nk += x * x;
        }
        decode_v_row(l, &recs[static_cast<size_t>(r) * l.bytes], t, row.data());
        for (uint32_t d = 0; d < D; ++d) {
          const double x = Vf[r][t * D + d];
          ev += (row[d] - x) * (row[d] - x);
          nv += x * x;
        }
      }
    DemoRow dr;
    dr.config = c.name();
    dr.head_dim = D;
    dr.record_bytes = l.bytes;
    dr.body_bits = record_bits_per_value(l);
    dr.staging_bits = staging_bits_per_value(c.staging, D);
    dr.k_rel_rms = std::sqrt(ek / nk);
    dr.v_rel_rms = std::sqrt(ev / nv);
    dr.ms_per_record = std::chrono::duration<double, std::milli>(t1 - t0).count() / n;
    rows.push_back(dr);
    if (progress) progress(++done, configs.size());
  }
  return rows;
}

}  // namespace sjkv
