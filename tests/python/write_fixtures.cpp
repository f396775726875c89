// sjkv_write_fixtures OUTDIR: writes capture.h5 and snapshot.h5 with values given by simple
// formulas, and expect.json with what a reader must find in them (shapes, attributes,
// sample fp16 bit patterns and bytes, a checksum of every dataset). test_h5py_read.py checks
// them with h5py, so files sjkv writes are known to open outside sjkv.
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "sjkv/fp16.h"
#include "sjkv/io/capture_file.h"
#include "sjkv/io/snapshot_file.h"
#include "sjkv/staging.h"

using namespace sjkv;

namespace {

float k_value(uint32_t layer, uint32_t t, uint32_t h, uint32_t d) {
  return static_cast<float>(static_cast<int32_t>((t * 31 + h * 7 + d * 3 + layer) % 97) - 48) / 16.0f;
}

// Sum of the values mod 2^32: cheap to recompute in numpy over the whole dataset.
template <class T>
uint32_t sum32(const std::vector<T>& v) {
  uint32_t s = 0;
  for (T x : v) s += static_cast<uint32_t>(x);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: sjkv_write_fixtures OUTDIR\n");
    return 1;
  }
  const std::string dir = argv[1];
  std::string cmd = "mkdir -p '" + dir + "'";
  if (std::system(cmd.c_str()) != 0) return 1;
  try {
    Capture c;
    c.model = "fixture-model";
    c.source = "sjkv_write_fixtures";
    c.head_dim = 64;
    c.kv_heads = 2;
    c.tokens = 300;
    c.rotated = true;
    c.rotation_block = 64;
    for (uint32_t t = 0; t < c.tokens; ++t) c.token_ids.push_back(static_cast<int32_t>(t * 7 + 1));
    for (uint32_t id : {3u, 7u}) {
      CaptureLayer l;
      l.layer_id = id;
      for (uint32_t t = 0; t < c.tokens; ++t)
        for (uint32_t h = 0; h < c.kv_heads; ++h)
          for (uint32_t d = 0; d < c.head_dim; ++d) {
            l.k.push_back(f32_to_f16(k_value(id, t, h, d)));
            l.v.push_back(f32_to_f16(-0.5f * k_value(id, t, h, d) + 0.125f));
          }
      c.layers.push_back(std::move(l));
    }
    c.layers[0].k[(5 * 2 + 1) * 64 + 7] = 0x7bff;  // 65504 at layer 3, token 5, head 1, channel 7
    write_capture(dir + "/capture.h5", c);

    Snapshot s;
    s.config.head_dim = 128;
    s.config.bits_k = 4;
    s.config.bits_v = 4;
    s.config.body = Body::scalar;
    s.config.staging = StagingType::tq6_0;
    s.config.tail = 256;
    s.config.tail_max = 512;
    s.kv_heads = 2;
    s.n_ubatch = 64;
    s.B = 384;
    s.B_prev = 256;
    s.N = 500;
    s.model = "fixture-model";
    s.source = "sjkv_write_fixtures";
    for (uint32_t t = 0; t < s.N; ++t) s.token_ids.push_back(static_cast<int32_t>(t * 3));
    const uint32_t D = 128, H = 2, rec = s.config.layout().bytes, row = staging_row_bytes(StagingType::tq6_0, D);
    for (uint32_t id : {0u, 4u}) {
      SnapshotLayer l;
      l.layer_id = id;
      for (uint32_t t = 0; t < s.n_sink(); ++t)
        for (uint32_t h = 0; h < H; ++h)
          for (uint32_t d = 0; d < D; ++d) {
            l.sink_k.push_back(f32_to_f16(k_value(id, t, h, d)));
            l.sink_v.push_back(f32_to_f16(0.25f * k_value(id, t, h, d)));
          }
      for (uint64_t i = 0; i < static_cast<uint64_t>(s.n_groups()) * H * rec; ++i)
        l.body.push_back(static_cast<uint8_t>((i * 7 + id) & 0xff));
      std::vector<float> x(D);
      std::vector<uint8_t> r(row);
      for (uint32_t p = s.ring_from(); p < s.N; ++p)
        for (uint32_t h = 0; h < H; ++h)
          for (int side = 0; side < 2; ++side) {
            for (uint32_t d = 0; d < D; ++d) x[d] = k_value(id + side, p, h, d);
            if (!staging_encode_row(StagingType::tq6_0, x.data(), D, r.data())) return 3;
            std::vector<uint8_t>& dst = side ? l.ring_v : l.ring_k;
            dst.insert(dst.end(), r.begin(), r.end());
          }
      s.layers.push_back(std::move(l));
    }
    write_snapshot(dir + "/snapshot.h5", s);

    const CaptureLayer& l3 = c.layers[0];
    const SnapshotLayer& s0 = s.layers[0];
    std::ofstream j(dir + "/expect.json");
    j << "{\n"
      << "  \"capture\": {\"file\": \"capture.h5\", \"model\": \"fixture-model\", \"head_dim\": 64, \"kv_heads\": 2,"
      << " \"tokens\": 300, \"rotated\": 1, \"rotation_block\": 64, \"layer_ids\": [3, 7],\n"
      << "    \"k_sample\": {\"layer\": 3, \"index\": [5, 1, 7], \"bits\": " << l3.k[(5 * 2 + 1) * 64 + 7] << "},\n"
      << "    \"v_sample\": {\"layer\": 7, \"index\": [299, 0, 63], \"bits\": " << c.layers[1].v[(299 * 2 + 0) * 64 + 63]
      << "},\n"
      << "    \"k_sum\": {\"layer\": 3, \"sum32\": " << sum32(l3.k) << "},\n"
      << "    \"v_sum\": {\"layer\": 7, \"sum32\": " << sum32(c.layers[1].v) << "},\n"
      << "    \"token_ids_sum\": " << sum32(c.token_ids) << "},\n"
      << "  \"snapshot\": {\"file\": \"snapshot.h5\", \"config_name\": \"" << s.config.name() << "\","
      << " \"B\": 384, \"B_prev\": 256, \"N\": 500, \"record_bytes\": " << rec << ", \"row_bytes\": " << row
      << ", \"layer_ids\": [0, 4],\n"
      << "    \"shapes\": {\"sink_k\": [128, 2, 128], \"body\": [" << s.n_groups() << ", 2, " << rec
      << "], \"ring_k\": [" << s.n_ring() << ", 2, " << row << "]},\n"
      << "    \"sink_k_sample\": {\"layer\": 0, \"index\": [100, 1, 5], \"bits\": " << s0.sink_k[(100 * 2 + 1) * 128 + 5]
      << "},\n"
      << "    \"body_sum\": {\"layer\": 0, \"sum32\": " << sum32(s0.body) << "},\n"
      << "    \"ring_v_sum\": {\"layer\": 4, \"sum32\": " << sum32(s.layers[1].ring_v) << "}}\n"
      << "}\n";
    if (!j) return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sjkv_write_fixtures: %s\n", e.what());
    return 1;
  }
  return 0;
}
