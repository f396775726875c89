// Capture -> snapshot exactly as an engine would hold the cache at the capture's length,
// snapshot -> capture, and the error of one against the other.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "sjkv/cache.h"
#include "sjkv/config.h"
#include "sjkv/io/capture.h"
#include "sjkv/io/snapshot.h"
#include "sjkv/seal.h"
#include "sjkv/trellis.h"

namespace sjkv {

struct EncodeOptions {
  CodecConfig config;       // head_dim is taken from the capture
  uint32_t n_ubatch = 512;  // positions per ubatch the engine processes
  bool assume_rotated = false;  // treat the capture's values as rotated even if not marked so
  int threads = 0;          // 0: all cores
  SealPath path = SealPath::fast;
  // Seals each commit's records instead of the CPU sealer (path, threads), e.g. a GPU sealer
  // from Device::sealer (all records of a commit in one launch); the bytes are the same.
  RecordSealer sealer;
  // Trellis tables (null: the built-in reference tables); the snapshot carries a copy.
  TrellisCodebooks codebooks{};
  // Called after each ubatch with (positions done, total positions).
  std::function<void(uint64_t, uint64_t)> progress;
};

// Replays the capture through staging and the journal policy in ubatches of n_ubatch
// positions (begin_ubatch, then store), then takes the policy step an engine takes before
// a next single-token ubatch at position N. Throws std::invalid_argument for a
// configuration the codec cannot serve, and for values the staging cannot hold (naming the
// position, side and value).
Snapshot encode_capture(const Capture& cap, const EncodeOptions& opt);

// The cache's state as a snapshot: its configuration (rotation block resolved), ubatch, policy
// state, regions and (trellis) the tables it seals with; layer ids 0, 1, ... No model, source
// or tokens.
Snapshot snapshot_of_cache(const SequenceCache& seq);

// Every stored position of every layer decoded (sink, body records, ring rows), in the
// model basis unless keep_rotated (the inverse Hadamard uses the snapshot's rotation block).
// std::invalid_argument when a decoded value does not fit fp16 (the capture cannot hold it).
Capture decode_snapshot(const Snapshot& snap, bool keep_rotated);

struct ErrorStats {
  uint64_t values = 0;
  double mse = 0, snr_db = 0, max_abs = 0, cosine = 0;
};

struct RegionComparison {
  uint32_t layer_id = 0;
  ErrorStats sink, body, ring, all;
};

// Decoded snapshot against a reference capture of the same geometry (K and V together),
// per layer and region. The reference may be rotated or not; both are compared in the
// rotated basis. Throws std::invalid_argument when the geometries differ.
std::vector<RegionComparison> compare_snapshot(const Snapshot& snap, const Capture& reference);

enum class Region { sink, body, ring };
// Raw bytes of one region of one layer: sink as stored (fp16 K then V halves per position
// and head, or staging rows), body in [group][head] record order, ring rows in position
// order (K row then V row per position and head).
std::vector<uint8_t> dump_region(const Snapshot& snap, uint32_t layer_index, Region r);

}  // namespace sjkv
