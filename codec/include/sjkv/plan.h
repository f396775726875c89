// Memory planner (the note's sections 3, 6, 7.2 and 8.4): the bytes a KV cache allocates for a
// context of N tokens, for sjkv configurations and for the plain block formats an engine could
// pick instead, and the largest context that fits a memory budget. Pure integer arithmetic: no
// I/O, no allocation beyond the returned tables.
//
// What is counted. Only the layers that keep a full-attention cache (CacheGeometry lists them);
// sliding-window and recurrent layers hold bounded state and are left to the caller, who may
// pass a hybrid's recurrent state as Overheads::sequence_state_bytes. By
// default a plan is the bytes of the cache alone. Overheads adds a per-token cost (the note's
// attention mask, 1 KiB per token of context) and a fixed cost (weights, compute buffers: the
// note's "everything else", 7.77 GB on the 12 GB setup) only when the caller passes them.
//
// Units. Every figure is an exact byte count. The note writes GB for 1,024 MiB (GiB), the
// convention GPU tools use; to_gib() and gib() follow it.
//
// Two ways to count an sjkv cache:
//   * SjkvAccounting::layout, the exact allocation, per full-attention layer:
//       sink      sink x kv_heads x 2 (K, V) x head_dim x 2 B (fp16; with SinkType::inherit the
//                 sink is kept as staged rows instead)
//       staged    a staged (tq6_0) copy of the sink beside the fp16 one, as the note's engine
//                 keeps it (SjkvLayoutOptions::staged_sink_copy, on by default)
//       body      n_records x kv_heads x record bytes (RecordLayout::bytes: payload + 2,304 B of
//                 fp16 scales at D = 256). With RecordPool::sealable (default) the pool holds the
//                 records the journal policy can ever seal: floor((N - sink - tail) / G), because
//                 the newest `tail` positions always stay in the ring. RecordPool::full_context
//                 sizes it for every position past the sink, ceil((N - sink) / G), as sjkv's host
//                 LayerCache does and as the note's earlier build did (its section 6 "over-sized
//                 record pool", 0.04 to 0.07 GB at 110,592 tokens: exactly tail x body bytes).
//       ring      ring_capacity(tail, tail_max, G, n_ubatch) rows x kv_heads x 2 x staged row
//                 bytes, allocated in full up front.
//     For Qwen3.8 27B (16 layers, 4 kv heads, D 256) with the defaults and n_ubatch 1,024 the
//     fixed part is 8 MiB (sink) + 3.0625 MiB (staged sink) + 248.0625 MiB (10,368 ring rows)
//     = 259.125 MiB, the note's "259 MiB for the sink, the staging rows and the ring". The
//     note does not state its ubatch; 1,024 is the value that reproduces its figure (512 gives
//     9,344 rows and 234.6 MiB), so it is the default here.
//   * SjkvAccounting::note_rule, the note's rule of section 7.2:
//       body bytes per token x (N - sink - tail) + fixed, fixed = 259 MiB by default.
//     sink + tail = 4,224 for the default configuration. The 259 MiB is the Qwen3.8 27B figure;
//     for another geometry pass NoteRule::fixed_bytes (e.g. layout_fixed_bytes()).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sjkv/block_formats.h"
#include "sjkv/config.h"

namespace sjkv {

constexpr uint64_t kKiB = 1024ull;
constexpr uint64_t kMiB = 1024ull * kKiB;
constexpr uint64_t kGiB = 1024ull * kMiB;

// Bytes to the note's GB (1,024 MiB) and back; gib() rounds to the nearest byte.
double to_gib(uint64_t bytes);
uint64_t gib(double gigabytes);
// "11GiB", "11 GB", "11000MiB", "7.77G", "1024" (bytes), "64KiB". Suffixes K, M, G, T, with or
// without "B" or "iB", are all binary (GB = GiB as in the note). Case-insensitive. Returns
// nothing on a malformed, negative or overflowing size.
std::optional<uint64_t> parse_size(std::string_view text);

// ---- Geometry --------------------------------------------------------------------------------

struct LayerGeometry {
  uint32_t kv_heads = 0;
  uint32_t head_dim_k = 0;
  uint32_t head_dim_v = 0;  // sjkv needs head_dim_v == head_dim_k
};

// The layers that keep a full-attention cache.
struct CacheGeometry {
  std::vector<LayerGeometry> layers;

  static CacheGeometry uniform(uint32_t n_layers, uint32_t kv_heads, uint32_t head_dim);
  // K and V values stored per token, all layers: sum of kv_heads x (head_dim_k + head_dim_v).
  uint64_t values_per_token() const;
};

// The note's example model: 16 full-attention layers, 4 kv heads, head_dim 256.
CacheGeometry qwen38_27b_geometry();

// ---- Plain block formats ---------------------------------------------------------------------
// BlockFormat, BlockFormatInfo, format_info() and format_bits() are block_formats.h's table.

// The formats a cache can be planned in: those a cache arm stores (an encode in the table).
const std::vector<BlockFormatInfo>& all_formats();
// One of all_formats() by name, case-insensitive.
std::optional<BlockFormat> parse_format(std::string_view name);

// ---- Cache options ---------------------------------------------------------------------------

enum class SjkvAccounting : uint32_t { layout = 0, note_rule = 1 };
enum class RecordPool : uint32_t { sealable = 0, full_context = 1 };

struct SjkvLayoutOptions {
  uint32_t n_ubatch = 1024;       // ring margin: two ubatches (policy.h, ring_capacity)
  bool staged_sink_copy = true;   // the note's engine keeps a staged copy of the fp16 sink
  RecordPool pool = RecordPool::sealable;
};

struct NoteRule {
  uint64_t fixed_bytes = 259ull * kMiB;  // the note's Qwen3.8 27B figure (section 8.4)
};

// One cache a model could run with: a plain K/V format pair, or an sjkv configuration. For
// sjkv, `codec.head_dim` is ignored: each layer uses its own head_dim.
struct CacheOption {
  enum class Kind : uint32_t { plain = 0, sjkv = 1 };
  Kind kind = Kind::plain;
  BlockFormat k = BlockFormat::f16;
  BlockFormat v = BlockFormat::f16;
  CodecConfig codec;
  SjkvAccounting accounting = SjkvAccounting::layout;

  static CacheOption plain(BlockFormat kv) { return plain(kv, kv); }
  static CacheOption plain(BlockFormat k, BlockFormat v);
  // The note's configuration (sink 128, tq6_0 staging, adaptive tail 4,096/8,192, G 128);
  // Body::automatic gives trellis for 3/3, 3/2 and 2/2 and scalar for 4/4, as the note says.
  static CacheOption sjkv(uint32_t bits_k, uint32_t bits_v, Body body = Body::automatic,
                          SjkvAccounting accounting = SjkvAccounting::layout);
  static CacheOption sjkv(const CodecConfig& cfg, SjkvAccounting accounting = SjkvAccounting::layout);

  // "f16", "q8_0/q5_1", "sjkv 4/4", "sjkv 3/2t", "sjkv 3/2t (note rule)".
  std::string label() const;
};

// The rows of the issue's `plan` command: sjkv 4/4, 3/3t, 3/2t, 2/2t; f16, q8_0, q5_1, q4_0,
// tq6_0, tq5_0, turbo4, turbo3; and the note's mixed pairs q8_0/q5_1 and tq5_0/turbo4.
std::vector<CacheOption> standard_options(SjkvAccounting accounting = SjkvAccounting::layout);

struct Overheads {
  uint64_t per_token_bytes = 0;  // e.g. the note's attention mask: 1 KiB per token
  uint64_t fixed_bytes = 0;      // e.g. the note's "everything else": gib(7.77)
  // One sequence's recurrent state beside the KV cache, for a hybrid model (Qwen 3.5's Gated
  // DeltaNet layers: ModelGeometry::recurrent_state_bytes); counted once, like fixed_bytes.
  uint64_t sequence_state_bytes = 0;
};

struct PlanSettings {
  SjkvLayoutOptions layout;
  NoteRule rule;
  Overheads overheads;
};

// The note's 12 GB setup of section 7.2: budget 11 GiB, everything else 7.77 GB, mask 1 KiB/token.
Overheads note_12gb_overheads();
constexpr uint64_t kNote12GbBudget = 11264ull * kMiB;

// ---- Results ---------------------------------------------------------------------------------

struct CacheBytes {
  uint64_t sink = 0;         // sjkv: the sink's own storage (fp16, or staged with inherit)
  uint64_t sink_staged = 0;  // sjkv: staged copy of the fp16 sink
  uint64_t body = 0;         // sjkv: records (note rule: body bytes per token x (N - sink - tail))
  uint64_t ring = 0;         // sjkv: staging ring
  uint64_t fixed = 0;        // sjkv note rule: the rule's fixed bytes (sink, staging rows, ring)
  uint64_t plain = 0;        // plain formats: the whole cache
  uint64_t n_records = 0;    // sjkv layout: records per layer and head
  uint64_t ring_rows = 0;    // sjkv layout: ring capacity in rows
  uint64_t total() const { return sink + sink_staged + body + ring + fixed + plain; }
};

// Empty when `opt` applies to every layer of `g`, else why not (head_dim not a multiple of the
// format's block, an sjkv configuration can_implement() rejects, K and V head_dim differ, ...).
// Trellis configurations are planned although this build cannot seal them: a trellis record
// has exactly the size of the scalar record of the same bits.
std::string check(const CacheGeometry& g, const CacheOption& opt);

// Bytes the cache allocates for a context of n_ctx tokens. Throws std::invalid_argument with
// check()'s reason when the option does not apply. Sums saturate at UINT64_MAX.
CacheBytes cache_bytes(const CacheGeometry& g, const CacheOption& opt, uint64_t n_ctx,
                       const PlanSettings& s = {});
// cache_bytes().total() + overheads.per_token_bytes x n_ctx + overheads.fixed_bytes +
// overheads.sequence_state_bytes.
uint64_t total_bytes(const CacheGeometry& g, const CacheOption& opt, uint64_t n_ctx,
                     const PlanSettings& s = {});

// Body bytes per token over all layers (record bytes x kv_heads / G summed), as an exact
// fraction numerator / group; plain formats: bytes per token, denominator 1.
struct BytesPerToken {
  uint64_t numerator = 0;
  uint64_t denominator = 1;
  double value() const { return static_cast<double>(numerator) / static_cast<double>(denominator); }
};
BytesPerToken bytes_per_token(const CacheGeometry& g, const CacheOption& opt);

// sjkv: the layout's fixed bytes (sink + staged sink + ring) for `g`, the geometry-specific
// counterpart of the note's 259 MiB.
uint64_t layout_fixed_bytes(const CacheGeometry& g, const CacheOption& opt, const SjkvLayoutOptions& o = {});

// Allocated bits per value (the note's section 6 and 7.2 columns): 8 x cache bytes over the
// K and V values n_ctx tokens hold.
double allocated_bits_per_value(const CacheGeometry& g, const CacheOption& opt, uint64_t n_ctx,
                                const PlanSettings& s = {});

struct Fit {
  uint64_t n_ctx = 0;       // the largest context with total_bytes <= budget (0 if none)
  uint64_t bytes = 0;       // total_bytes at n_ctx
  bool fits = false;        // false when not even a 1-token context fits
  bool capped = false;      // true when kMaxPlanContext fits, so the search stopped there
};
// Positions are 32-bit in the codec, so the search stops at 2^32 - 1 tokens.
constexpr uint64_t kMaxPlanContext = 0xFFFFFFFFull;
Fit max_context(const CacheGeometry& g, const CacheOption& opt, uint64_t budget_bytes,
                const PlanSettings& s = {});

}  // namespace sjkv
