// Codec configuration and the up-front support check (docs/SPEC.md §5.2, §9.1).
#pragma once

#include <string>
#include <vector>

#include "sjkv/balance.h"
#include "sjkv/layout.h"
#include "sjkv/staging.h"

namespace sjkv {

enum class SinkType : uint32_t { f16 = 0, inherit = 1 };

struct CodecConfig {
  uint32_t head_dim = 128;
  uint32_t group = 128;
  uint32_t bits_k = 4;
  uint32_t bits_v = 4;
  Body body = Body::automatic;
  // Trellis bodies only (sjkv extension; docs/CODEC.md "Trellis axis"): the axis the Viterbi
  // sequences run along. token is the format's; channel must be asked for with a trellis body.
  TrellisAxis trellis_axis = TrellisAxis::token;
  uint32_t iters = 16;
  BalanceMode balance = BalanceMode::final_scales;
  StagingType staging = StagingType::tq6_0;
  SinkType sink_type = SinkType::f16;
  uint32_t sink = 128;
  uint32_t tail = 4096;
  uint32_t tail_max = 8192;  // 0 = fixed tail
  uint32_t flush_chunk = 0;
  // Hadamard block: 0 picks the default, min(head_dim, 256) (at D = 512 each half gets its
  // own 256-point rotation); set it to head_dim for one transform over the whole head.
  uint32_t rotation_block = 0;

  Body resolved_body() const { return resolve_body(body, bits_k, bits_v); }
  uint32_t rotation() const { return rotation_block ? rotation_block : (head_dim < 256 ? head_dim : 256); }
  RecordLayout layout() const { return make_layout(head_dim, group, bits_k, bits_v, resolved_body(), trellis_axis); }
  // e.g. "sj:4/4:D=128:G=128:staging=tq6_0:sink=128:tail=4096/8192:rot=128:iters=16"; a
  // channel-axis trellis adds ":axis=channel" after the widths ("sj:3/2t:axis=channel:D=...").
  // The grammar is parse_config's, below.
  std::string name() const;
};

bool operator==(const CodecConfig& a, const CodecConfig& b);
inline bool operator!=(const CodecConfig& a, const CodecConfig& b) { return !(a == b); }

// KVarN-faithful sealing as the note describes it: 8 passes keeping the best scales, each
// group sealed as soon as it fills (tail 0, fixed), 128-token fp16 sink.
CodecConfig kvarn_config(uint32_t head_dim, uint32_t bits_k, uint32_t bits_v, uint32_t exact_tail = 0);

// Why a configuration cannot be served. `none` means it can.
enum class Unsupported : uint32_t {
  none = 0,
  head_dim_not_pow2,
  head_dim_too_small,         // D < 32
  group_invalid,              // G == 0 or G % 16 != 0
  bits_out_of_range,          // bits outside 2..4
  body_invalid,
  trellis_bits,               // trellis needs bits in {2,3} with bits_v <= bits_k, or 4/4 with explicit Body::trellis
  trellis_group,              // trellis needs G == 128
  trellis_head_dim,           // trellis needs D % 128 == 0
  trellis_not_built,          // unused since trellis bodies were built; kept for the numbering
  staging_block,              // D not a multiple of the staging block (128 tq6_0, 32 q8_0)
  rotation_block,             // rotation block not a power of two >= 32 dividing D
  sink_invalid,               // sink == 0 or sink % 64 != 0
  tail_not_group_aligned,     // tail % G != 0
  tail_max_invalid,           // tail_max != 0 and (tail_max < tail or tail_max % 128 != 0)
  iters_out_of_range,         // iters > 64
  trellis_axis,               // axis not token/channel, or channel axis without a trellis body
  size_too_large,             // tail or tail_max above kMaxTail (policy.h), group above 2^16
};

const char* describe(Unsupported u);

// Record geometry only (§5.2 layout validation).
Unsupported can_implement_record(uint32_t head_dim, uint32_t group, uint32_t bits_k, uint32_t bits_v, Body body,
                                 TrellisAxis axis = TrellisAxis::token);
// Full cache configuration (layer init validation of §9.1 plus sjkv's extensions).
Unsupported can_implement(const CodecConfig& c);

const char* staging_name(StagingType t);
// Every staging type, the format's default first.
inline constexpr StagingType kStagingTypes[] = {StagingType::tq6_0, StagingType::q8_0, StagingType::f16};
// The inverse of staging_name: false (and *t untouched) for any other name.
bool parse_staging(const std::string& name, StagingType* t);
// staging_name of every kStagingTypes entry, in that order (for a command line's choices).
std::vector<std::string> staging_names();
// The same names in the order of the types' codes (0, 1, 2), as files list them.
std::vector<std::string> staging_names_by_code();

// The configuration grammar (docs/SPEC.md §9.1), printed by CodecConfig::name() and read by
// parse_config:
//   config := ("sj" | "kvarn") ":" widths { ":" field }
//   widths := K "/" V ["t"]                       one digit each; "t" a trellis body, else scalar
//   field  := "axis=" ("token" | "channel") | "D=" N | "G=" N | "staging=" staging_name
//           | "sink=" N ["(inherit)"] | "tail=" N ["/" MAX] | "rot=" N | "iters=" N ["(best)"]
//           | "flush=" N
// "sj:" starts from CodecConfig{}, "kvarn:" from kvarn_config(128, K, V) (best-of balancing;
// "(best)", which name() prints there, is refused after "sj:"). "sink=N" is an f16 sink,
// "tail=N" a fixed tail (tail_max 0); a later field overrides an earlier one. name() prints
// the resolved body and rotation and never flush, so parse_config(c.name()) is c with body =
// resolved_body(), rotation_block = rotation() and flush_chunk = 0. Syntax only: whether the
// result can be served is can_implement's question. On failure *error says why, naming the
// offending part, and *out is untouched.
bool parse_config(const std::string& text, CodecConfig* out, std::string* error);

// The parts of parse_config, for grammars that embed this one (sjkv-replay's arm specs).
// "sj" or "kvarn" and the widths: the configuration a name with no fields denotes.
bool parse_config_head(const std::string& prefix, const std::string& widths, CodecConfig* out, std::string* error);
// One "key=value" field applied to *c (kvarn: the name began "kvarn:"). unknown: not a key
// of the grammar (*c and *error untouched); invalid: *error says why (*c untouched).
enum class ConfigField { applied, unknown, invalid };
ConfigField parse_config_field(const std::string& key, const std::string& value, bool kvarn, CodecConfig* c,
                               std::string* error);

}  // namespace sjkv
