// Snapshot files (docs/FORMAT.md section 3).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sjkv/io/file_error.h"
#include "sjkv/io/snapshot.h"

namespace sjkv {

// The largest group (tokens per record) a snapshot file holds (FORMAT.md section 3).
constexpr uint32_t kMaxSnapshotGroup = 1024;

// The trellis tables a snapshot was sealed with, embedded under /codebooks (FORMAT.md 3.1).
struct EmbeddedCodebooks {
  std::string axis = "token";     // trellis sequence axis: "token" or "channel"
  uint32_t bits_k = 0, bits_v = 0;
  std::vector<uint16_t> k_table;  // fp16 bit patterns, 2^(6 + bits_k) entries
  std::vector<uint16_t> v_table;  // fp16 bit patterns, 2^(6 + bits_v) entries
};

// docs/SPEC.md §12.3 codebook identity: FNV-1a-64 (non-standard basis) over the K table as
// little-endian uint16, continued over the V table.
uint64_t codebook_id_of(const std::vector<uint16_t>& k_table, const std::vector<uint16_t>& v_table);

// The tables a snapshot carries (codebook_k, codebook_v; empty for a scalar body) as embedded.
EmbeddedCodebooks carried_codebooks(const Snapshot& snap);

// Throws std::invalid_argument naming the first inconsistency: configuration, policy state,
// region sizes of every layer, non-finite fp16 values, codebooks (required for a trellis
// body, with a matching id; absent for scalar). The same rules as the reader's.
void check_snapshot_consistent(const Snapshot& snap, const EmbeddedCodebooks* codebooks = nullptr);
// The rules of check_snapshot_consistent that need no layers: configuration, policy state
// (the ring within its capacity at n_ubatch) and codebooks. Empty when they hold.
std::string snapshot_header_defect(const Snapshot& snap, const EmbeddedCodebooks* codebooks);

// Writes `snap` atomically. The file stores the resolved body and rotation block, so
// `config.body` = automatic and `config.rotation_block` = 0 read back resolved. Throws
// std::invalid_argument when check_snapshot_consistent() fails (nothing is created),
// FileError when the file cannot be written (no output is left behind).
void write_snapshot(const std::string& path, const Snapshot& snap, int zstd_level = 3,
                    const EmbeddedCodebooks* codebooks = nullptr);

// Reads and validates a snapshot like hostile input; throws FileError(path, defect). When
// `codebooks` is given it receives the embedded tables (cleared for a scalar body).
Snapshot read_snapshot(const std::string& path, EmbeddedCodebooks* codebooks = nullptr);

}  // namespace sjkv
