// Host sealing API: one record or many, scalar or trellis body, reference or vectorised,
// same bytes either way.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "sjkv/config.h"
#include "sjkv/record.h"
#include "sjkv/status.h"

namespace sjkv {

struct SealOptions {
  uint32_t iters = 16;
  BalanceMode balance = BalanceMode::final_scales;
  // Trellis bodies only: the K- and V-side tables (sjkv/trellis.h). The default (null
  // pointers) is the built-in reference codebooks; tables given here must hold
  // 2^(6+bits) finite fp16 entries per side and outlive the call.
  TrellisCodebooks codebooks{};
};

// Which implementation seals. `fast` picks the widest instruction set this CPU has; the
// named ISAs exist for tests and benchmarks that pin one.
enum class SealPath { reference, fast, fast_baseline, fast_avx2, fast_avx512 };

const char* seal_path_name(SealPath p);
bool seal_path_available(SealPath p);

// Buffers for one seal at a time; reuse one per thread to avoid allocation per record.
class SealWorkspace {
 public:
  SealWorkspace() = default;
  void reserve(uint32_t head_dim, uint32_t group);
  RecordScratch reference_scratch();
  TrellisScratch trellis_scratch();                 // reference trellis seal
  uint8_t* choice() { return choice_.data(); }      // max(D,G)*64*4 bytes: Viterbi branch choices
  float* cbf() { return cbf_.data(); }              // kTrellisMaxEntries decoded codebook entries
  uint16_t* windows() { return windows_.data(); }   // D*G windows
  float* tiles() { return tiles_.data(); }          // 4 tiles of D*G floats
  double* sums() { return sums_.data(); }           // 8 * max(D, G) doubles
  float* vecs() { return vecs_.data(); }            // 16 * max(D, G) floats
  uint8_t* codes() { return codes_.data(); }        // D*G codes
  uint32_t capacity_tile() const { return tile_; }

 private:
  uint32_t tile_ = 0, vec_ = 0;
  std::vector<float> tiles_, vecs_;
  std::vector<double> sums_, dvecs_;
  std::vector<uint8_t> codes_, choice_;
  std::vector<float> cbf_, ty_;
  std::vector<uint16_t> windows_;
};

// K and V: G rows of D fp16 bit patterns each (element (t, d) at rows[t*row_stride + d]),
// already in the rotated basis and rounded as the cache stages them (docs/SPEC.md §4.6). `out` receives
// layout.bytes bytes. Fails on NaN/Inf inputs (naming side, token, channel), on layouts
// can_implement_record() rejects and, for trellis bodies, on a non-finite codebook entry
// (ErrorCode::unsupported naming the side and entry); `out` is then zero-filled. Trellis
// records use opt.codebooks (default: the reference tables).
Status seal_record(const RecordLayout& layout, const SealOptions& opt, const uint16_t* k_rows,
                   const uint16_t* v_rows, size_t row_stride, uint8_t* out, SealWorkspace& ws,
                   SealPath path = SealPath::fast);

// Many independent records, OpenMP across records; the bytes do not depend on the thread
// count. Record i reads k_rows[i] / v_rows[i] and writes out + i*layout.bytes. On failure
// the Status of the lowest failing index is returned (token/channel as above, and
// `detail` names the record index).
Status seal_records(const RecordLayout& layout, const SealOptions& opt, size_t n_records,
                    const uint16_t* const* k_rows, const uint16_t* const* v_rows, size_t row_stride,
                    uint8_t* out, SealPath path = SealPath::fast, int n_threads = 0);

// Viterbi codes of one trellis sequence of n targets (docs/SPEC.md §7.3) on the vectorised
// path: the same codes as trellis::viterbi_ref, for training and other bulk encoders.
// cbf: the 2^(6+bits) codebook values as binary32; scratch: viterbi_scratch_bytes(n) bytes;
// codes and wins (the window of each code) receive n entries.
size_t viterbi_scratch_bytes(uint32_t n);
void viterbi_fast(const float* y, uint32_t n, uint32_t bits, const float* cbf, void* scratch, uint8_t* codes,
                  uint16_t* wins, SealPath path = SealPath::fast);

// First NaN/Inf among G rows of D halves, or ok.
Status check_finite_rows(Side side, const uint16_t* rows, uint32_t n_rows, uint32_t d, size_t row_stride);

// The first non-finite entry of the codebooks a trellis layout would use, as a Status
// (ErrorCode::unsupported, side and entry index in `detail`); ok for scalar layouts.
Status check_codebooks(const RecordLayout& layout, const TrellisCodebooks& cb);

// Decode rows t of a record into D floats (rotated basis). Trellis records decode with `cb`,
// which must be the codebooks the record was sealed with (default: the reference tables).
void decode_k_row(const RecordLayout& layout, const uint8_t* rec, uint32_t t, float* out,
                  const TrellisCodebooks& cb = TrellisCodebooks{});
void decode_v_row(const RecordLayout& layout, const uint8_t* rec, uint32_t t, float* out,
                  const TrellisCodebooks& cb = TrellisCodebooks{});

}  // namespace sjkv
