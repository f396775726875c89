// The codec demo behind `sjkv-encode demo`: seal generated tiles in every scalar
// configuration (and the trellis ones) through the real staging path and measure size,
// error and speed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sjkv/config.h"
#include "sjkv/seal.h"

namespace sjkv {

struct DemoOptions {
  std::vector<uint32_t> head_dims{64, 128, 256, 512};
  uint32_t records = 8;  // groups per configuration (one KV head each)
  uint64_t seed = 1;
  int threads = 1;
  SealPath path = SealPath::fast;
};

struct DemoRow {
  std::string config;
  uint32_t head_dim = 0;
  uint32_t record_bytes = 0;
  double body_bits = 0;        // record bits per value
  double staging_bits = 0;     // bits per value of the staging rows the seal reads
  double k_rel_rms = 0, v_rel_rms = 0;  // decoded vs the float rows before staging
  double ms_per_record = 0;    // wall time of seal_records / records
};

// Progress callback: (done, total) after each configuration.
using DemoProgress = void (*)(size_t done, size_t total);

std::vector<CodecConfig> demo_configs(const std::vector<uint32_t>& head_dims);
std::vector<DemoRow> run_demo(const DemoOptions& opt, DemoProgress progress = nullptr);

}  // namespace sjkv
