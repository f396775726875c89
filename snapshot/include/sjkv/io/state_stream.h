// The sequence-state stream (docs/SPEC.md §11, state version 1; file form docs/FORMAT.md §12):
// how an engine built on the reference library saves and restores one sequence. A 128-byte
// header, per layer the sink, the sealed records and the tail rows, and an FNV-1a-64 checksum.
// sjkv reads it into a Snapshot and writes one from a Snapshot, byte for byte the reference's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sjkv/io/codebook.h"
#include "sjkv/io/snapshot.h"

namespace sjkv {

constexpr uint32_t kStateVersion = 1;
constexpr uint32_t kStateHeaderBytes = 128;
constexpr uint32_t kStateChecksumBytes = 8;
constexpr char kStateMagic[8] = {'S', 'J', 'K', 'V', 'S', 'E', 'Q', '\0'};

// The header fields, as stored (docs/SPEC.md §11 table).
struct StateHeader {
  uint32_t state_version = 0, format_version = 0, header_bytes = 0;
  uint32_t head_dim = 0, n_head_kv = 0, group = 0, sink = 0, sink_type = 0, bits_k = 0, bits_v = 0;
  uint32_t body = 0, iters = 0, staging = 0, tail = 0, tail_max = 0, flush_chunk = 0;
  uint32_t rotation_id = 0, rotation_size = 0;
  uint64_t codebook_id = 0;
  uint32_t n_layers = 0, N = 0, B = 0, B_prev = 0, draining = 0;
  uint64_t payload_bytes = 0;
  uint64_t checksum = 0;  // the stream's last 8 bytes
};

// Why `snap` cannot be written as a state-version-1 stream (one line, e.g. "q8_0 staging is
// an sjkv extension that state version 1 cannot express"); empty when it can.
std::string state_stream_refusal(const Snapshot& snap);

// The stream of `snap`: std::invalid_argument with state_stream_refusal() when it cannot be
// expressed, or with check_snapshot_consistent()'s defect. Layer ids, model, source, tokens
// and n_ubatch are not part of the stream.
std::vector<uint8_t> state_stream_bytes(const Snapshot& snap);
// The same, written atomically (nothing is created when it throws).
void write_state_stream(const std::string& path, const Snapshot& snap);

// What the stream does not hold, needed to make a snapshot of it.
struct StateImportOptions {
  // The ubatch the sequence runs with: the ring capacity depends on it (docs/SPEC.md §9.4).
  uint32_t n_ubatch = 512;
  // Trellis tables whose identity the header may name (one per bit width); the built-in
  // reference tables are always known.
  std::vector<RawCodebook> codebooks;
};

// The header checks of docs/SPEC.md §11 step 1 (size, magic, version, header bytes, payload
// bytes, checksum, format version), in that order; FileError(name, defect) on the first that
// fails.
StateHeader peek_state_stream(const uint8_t* data, uint64_t size, const std::string& name);
// Every check: the header, the configuration (one the stream can express and sjkv can serve),
// the codebook identity, the policy state, the exact size, the ring capacity at n_ubatch, then
// the regions (finite fp16, staging scales). Layers get ids 0, 1, ...; source names `name`.
Snapshot parse_state_stream(const uint8_t* data, uint64_t size, const std::string& name,
                            const StateImportOptions& opt = {});
Snapshot read_state_stream(const std::string& path, const StateImportOptions& opt = {});
// read_snapshot_any (either container, by its first bytes) is in sjkv/io/load.h, with the
// other readers that sniff their input.

}  // namespace sjkv
