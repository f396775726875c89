// An SJ-KVaRN cache state of one sequence at length N, in memory. File form: docs/FORMAT.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sjkv/config.h"

namespace sjkv {

// The record and staging format version (docs/SPEC.md §0), in snapshot files and streams.
constexpr uint32_t kRecordFormatVersion = 1;

struct SnapshotLayer {
  uint32_t layer_id = 0;
  // sink_type f16: positions [0, min(N, sink)), fp16 bit patterns [n_sink][kv_heads][head_dim]
  std::vector<uint16_t> sink_k, sink_v;
  // sink_type inherit: the same positions as staging rows [n_sink][kv_heads][row_bytes]
  std::vector<uint8_t> sink_k_staged, sink_v_staged;
  // sealed records [groups][kv_heads][record_bytes], groups = (B - sink) / G
  std::vector<uint8_t> body;
  // staging rows of positions [max(B, sink), N): [n_ring][kv_heads][row_bytes]
  std::vector<uint8_t> ring_k, ring_v;
};

struct Snapshot {
  CodecConfig config;
  uint32_t kv_heads = 0;
  uint32_t n_ubatch = 0;  // the ubatch the policy was driven with (ring capacity depends on it)
  // policy state (docs/SPEC.md §9.5) and stored end N
  uint32_t B = 0, B_prev = 0, N = 0, draining = 0;
  uint64_t codebook_id = 0;  // 0 for scalar bodies
  // Trellis bodies: the tables the records were sealed with (fp16 bit patterns, K and V),
  // carried so a snapshot decodes on its own; empty for scalar bodies. File: /codebooks.
  std::vector<uint16_t> codebook_k, codebook_v;
  // The shipped table set those tables are (sjkv/io/table_set.h), or empty: the format's or a
  // file's tables (codebook_id tells which). File: /codebooks attribute set, absent when empty.
  std::string codebook_set;
  std::string model, source;
  std::vector<int32_t> token_ids;
  std::vector<SnapshotLayer> layers;

  uint32_t n_sink() const { return N < config.sink ? N : config.sink; }
  uint32_t n_groups() const { return B > config.sink ? (B - config.sink) / config.group : 0; }
  uint32_t ring_from() const { return B > config.sink ? B : config.sink; }
  uint32_t n_ring() const { return N > ring_from() ? N - ring_from() : 0; }
};

}  // namespace sjkv
