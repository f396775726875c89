// Host cache of one sequence: per-layer sink, staging ring and sealed body, driven by the
// journal policy at ubatch boundaries exactly as an engine would (docs/SPEC.md §9.2-9.6).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "sjkv/cache_view.h"
#include "sjkv/config.h"
#include "sjkv/policy.h"
#include "sjkv/seal.h"
#include "sjkv/status.h"

namespace sjkv {

struct CacheShape {
  uint32_t n_layers = 1;
  uint32_t n_head_kv = 1;
  uint32_t n_ctx = 0;     // positions the cache must hold
  uint32_t n_ubatch = 512;
};

// A replacement for seal_records (same arguments and result, minus path and threads), e.g.
// a GPU sealer; the cache calls it once per commit with the records of every layer.
using RecordSealer = std::function<Status(const RecordLayout&, const SealOptions&, size_t n_records,
                                          const uint16_t* const* k_rows, const uint16_t* const* v_rows,
                                          size_t row_stride, uint8_t* out)>;
// A new RecordSealer per call, for code that makes several caches (a GPU sealer holds its own
// engine); empty: the CPU sealer.
using SealerSource = std::function<RecordSealer()>;

// Bytes a SequenceCache of this shape allocates (every layer's sink, ring and body);
// UINT64_MAX when the count overflows 64 bits.
uint64_t cache_allocation_bytes(const CodecConfig& cfg, const CacheShape& shape);

class LayerCache {
 public:
  // Holds positions [0, n_ctx): a store at or past n_ctx, or a seal of a group past the body
  // sized for it, is refused (Status unsupported), never written.
  LayerCache(const CodecConfig& cfg, uint32_t n_head_kv, uint32_t n_ctx, uint32_t cap);

  // Store position p from rotated rows k, v of [n_head_kv][D] floats. Fails (and stores
  // nothing) on a NaN/Inf value, a row that overflows fp16, or p >= n_ctx.
  Status store(uint32_t p, const float* k, const float* v);
  // The two halves of store(): validate and encode into `entry` (entry_bytes(p) bytes),
  // then copy it into the sink or ring slot of p.
  size_t entry_bytes(uint32_t p) const;
  Status encode_entry(uint32_t p, const float* k, const float* v, uint8_t* entry) const;
  void write_entry(uint32_t p, const uint8_t* entry);
  // Seal groups [from, to) from the staged rows (positions multiple of G past the sink).
  // Refused when [from, to) is not whole groups past the sink within the body.
  Status seal(uint32_t from, uint32_t to, const SealOptions& opt, SealPath path, int n_threads);
  // Ok when groups [from, to) (from < to) are whole groups past the sink that the body holds.
  Status check_seal_range(uint32_t from, uint32_t to) const;
  // The two halves of seal(): the seal inputs of groups [from, to) appended to kin / vin
  // (fp16 rows, [record][t][D]; returns the number of records), and the body bytes where
  // the record of group `from`, head 0 goes (records follow group-major, head-minor); the
  // caller checks the range first (check_seal_range).
  size_t append_seal_inputs(uint32_t from, uint32_t to, std::vector<uint16_t>& kin, std::vector<uint16_t>& vin) const;
  uint8_t* body_at(uint32_t from);

  CacheView view(uint32_t B, uint32_t N) const;
  uint32_t cap() const { return cap_; }
  uint32_t n_ctx() const { return n_ctx_; }
  uint32_t n_groups() const { return n_groups_; }
  const RecordLayout& layout() const { return layout_; }
  const std::vector<uint8_t>& body() const { return body_; }
  const std::vector<uint8_t>& ring() const { return ring_; }
  const std::vector<uint16_t>& sink_f16() const { return sink_f16_; }
  const std::vector<uint8_t>& sink_staged() const { return sink_staged_; }

 private:
  CodecConfig cfg_;
  RecordLayout layout_;
  uint32_t n_head_kv_, n_ctx_, cap_, n_groups_, row_bytes_;
  std::vector<uint16_t> sink_f16_;
  std::vector<uint8_t> sink_staged_, ring_, body_;
  std::vector<uint8_t> scratch_entry_;
};

class SequenceCache {
 public:
  // Validates cfg with can_implement() and the shape (at least one layer, KV head and position;
  // n_ubatch in [1, kMaxUbatch]; an allocation that overflows 64 bits); check `status()` after
  // construction. The cache holds positions [0, n_ctx) in ubatches of at most n_ubatch:
  // anything past either is refused (Status unsupported, nothing changed).
  SequenceCache(const CodecConfig& cfg, const CacheShape& shape, SealOptions opt = {}, SealPath path = SealPath::fast,
                int n_threads = 0);
  const Status& status() const { return status_; }

  // Before a ubatch starting at pos0 (all positions < pos0 stored): policy step, seal
  // every layer, commit. Returns the number of groups sealed per layer and head.
  Status begin_ubatch(uint32_t pos0, uint32_t n_tokens, uint32_t* groups_sealed = nullptr);
  // Position p of every layer: rows [n_layers][n_head_kv][D] rotated floats.
  Status store(uint32_t p, const float* k, const float* v);
  // Positions [pos0, pos0 + n): rows [n][n_layers][n_head_kv][D]. Encodes on the cache's
  // threads; writes nothing unless every position and layer is accepted.
  Status store_ubatch(uint32_t pos0, uint32_t n, const float* k, const float* v);
  // Idle step between requests: seal back to the tail, keeping `keep_recent` exact.
  Status idle(uint32_t keep_recent, uint32_t* groups_sealed = nullptr);

  uint32_t n_stored() const { return n_; }
  const JournalPolicy& policy() const { return policy_; }
  const LayerCache& layer(uint32_t l) const { return layers_[l]; }
  CacheView view(uint32_t l) const {
    CacheView v = layers_[l].view(policy_.B, n_);
    v.codebooks = opt_.codebooks;  // records sealed with run-time tables decode with them
    return v;
  }
  const CodecConfig& config() const { return cfg_; }
  const CacheShape& shape() const { return shape_; }
  const SealOptions& seal_options() const { return opt_; }
  uint32_t commits() const { return commits_; }
  // Seal with `f` instead of the CPU sealer (an empty function restores the CPU): one call
  // per commit, layer-major, then group, then head.
  void set_sealer(RecordSealer f) { sealer_ = std::move(f); }

 private:
  Status seal_pending(uint32_t* groups_sealed);
  CodecConfig cfg_;
  CacheShape shape_;
  SealOptions opt_;
  SealPath path_;
  int n_threads_;
  JournalPolicy policy_{};
  std::vector<LayerCache> layers_;
  RecordSealer sealer_;
  std::vector<std::vector<uint8_t>> entries_;
  uint32_t n_ = 0, commits_ = 0;
  Status status_;
};

// Bits per value by region (the note, section 3), per layer and KV head. A value is one K or
// V element; `values` counts the 2*D values of every stored position. Each region reports its
// own density (its bytes over the values it holds) and its share of the total (its bytes
// over all stored values), so the shares add up to the total.
struct RegionBits {
  uint64_t sink_bytes = 0, body_bytes = 0, ring_bytes = 0;
  uint64_t sink_values = 0, body_values = 0, ring_values = 0;
  uint64_t values = 0;
  static double ratio(uint64_t bytes, uint64_t vals) { return vals ? 8.0 * static_cast<double>(bytes) / static_cast<double>(vals) : 0.0; }
  double sink_density() const { return ratio(sink_bytes, sink_values); }
  double body_density() const { return ratio(body_bytes, body_values); }
  double ring_density() const { return ratio(ring_bytes, ring_values); }
  double sink_share() const { return ratio(sink_bytes, values); }
  double body_share() const { return ratio(body_bytes, values); }
  double ring_share() const { return ratio(ring_bytes, values); }
  double total_bits() const { return ratio(sink_bytes + body_bytes + ring_bytes, values); }
};

// Occupied: the bytes that hold positions [0, N) with sealed end B, per head and layer.
RegionBits occupied_bits(const CodecConfig& cfg, uint32_t B, uint32_t N);
// Allocated: everything reserved up front for n_ctx (the whole sink, every body group, the
// full ring of `cap` rows), charged to the N positions stored.
RegionBits allocated_bits(const CodecConfig& cfg, uint32_t n_ctx, uint32_t cap, uint32_t B, uint32_t N);
// The note's effective-bits formula: [(N - sink - t)*body + t*staging + sink*(staging + 16)]/N.
// It counts a staged copy of the sink beside the fp16 one, as the note's engine does.
double note_effective_bits(uint32_t N, uint32_t sink, uint32_t tail_len, double body_bits, double staging_bits);
double record_bits_per_value(const RecordLayout& l);
double staging_bits_per_value(StagingType t, uint32_t head_dim);

}  // namespace sjkv
