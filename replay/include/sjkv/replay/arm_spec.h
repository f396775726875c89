// An arm spec as a value (docs/REPLAY.md "Arms", "Grammar"): the parser and the printer of the
// grammar side by side, so that make_arm, the frontier and the tools read arm strings in one
// place instead of by string prefix.
//
// The string a user wrote stays the arm's name (KvArm::spec): results, study folders and
// frontier stores are keyed by it, so to_string()'s canonical spelling never renames an arm.
// to_string() prints the options in one fixed order (below); parse(to_string(a)) == a for every
// parsed a, and parse(s).to_string() == s for a spec written in that order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sjkv/config.h"
#include "sjkv/io/table_set.h"
#include "sjkv/replay/kv.h"

namespace sjkv {
namespace replay {

// The row formats of the plain, block and TurboQuant-style arms (kv_arms_formats.h encodes them).
enum class RowFormat : uint32_t { f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl, turbo3, turbo4, tq5_0, tq6_0 };
const char* row_format_name(RowFormat f);

enum class ArmFamily : uint8_t { row, kvarn, sj };

// The codec fields an SJ-KVaRN or KVarN spec names (bits of ArmSpec::fields), in the order
// to_string() prints them: CodecConfig::name()'s order, flush last. D= is the model's, never a
// spec's.
enum ArmField : uint32_t {
  kArmFieldAxis = 1u << 0,
  kArmFieldGroup = 1u << 1,    // G=
  kArmFieldStaging = 1u << 2,
  kArmFieldSink = 1u << 3,
  kArmFieldTail = 1u << 4,
  kArmFieldRot = 1u << 5,
  kArmFieldIters = 1u << 6,
  kArmFieldFlush = 1u << 7,
};

struct ArmSpec {
  ArmFamily family = ArmFamily::row;

  // Row formats: "f16", "q4_0:rot", "q8_0:rot:swa=same", ...
  RowFormat format = RowFormat::f16;
  bool rot = false;       // ":rot", llama.cpp's rotation (ggml block formats only)
  bool swa_same = false;  // ":swa=same", sliding layers in the format too (not f32/f16/bf16)
  // ":swa=FMT" (a ggml block format: q8_0, q4_0, ...) on the codec arms and f32/f16/bf16: the
  // sliding-window layers stored in FMT, without rotation (the note keeps Gemma 4's at q8_0 in
  // every arm, the reference too); f16 when not named. The bits count the full layers either way.
  bool swa_given = false;
  RowFormat swa = RowFormat::f16;

  // SJ-KVaRN ("sj:K/V[t]") and KVarN ("kvarn:K/V"): the configuration the widths and the codec
  // fields give (head_dim 128 until a model's is known), and which fields the spec names.
  CodecConfig config;
  uint32_t fields = 0;            // ArmField bits
  bool tier_edge = false;         // tier=edge
  std::vector<uint32_t> wide;     // wide=A+B, in the order written
  std::vector<uint32_t> layers;   // layers=A+B, in the order written
  bool kmean = false;             // kmean=sink
  char exact = 0;                 // exact=k|v ('k', 'v'; 0: none)
  std::string cb;                 // the cb= value as written: "reference", a shipped set's name or FILE[+FILE]; empty: none

  // Every family: state= (a hybrid's recurrent state), f32 when not named.
  bool state_given = false;
  StateFormat state = StateFormat::f32;

  // Reads a spec; std::invalid_argument "arm '<text>': <reason>" (one line) when the grammar or
  // the codec refuses it. Reads no file: a cb= file's contents are make_arm's to check.
  static ArmSpec parse(const std::string& text);
  // The canonical spelling: row formats "NAME[:rot][:swa=same|:swa=FMT][:state=S]"; codec arms
  // the widths, the named codec fields in ArmField order, then tier, wide, layers, kmean, exact,
  // swa, state and cb.
  std::string to_string() const;

  bool codec() const { return family != ArmFamily::row; }
  bool trellis() const { return codec() && config.body == Body::trellis; }
  // cb=: the format's tables named (cb=reference), a shipped set (null when cb names files or
  // nothing), the files (empty unless cb names files).
  bool cb_reference() const { return cb == "reference"; }
  const TableSet* cb_set() const;
  std::vector<std::string> cb_files() const;

  // The family for tables and plots: "f16", "q4_0:rot", "kvarn", "sj scalar", "sj trellis"
  // (options other than :rot do not change it).
  std::string family_name() const;
  // A format an engine has without sjkv: f16, bf16, the ggml blocks with or without :rot.
  bool plain_format() const;
};

bool operator==(const ArmSpec& a, const ArmSpec& b);
inline bool operator!=(const ArmSpec& a, const ArmSpec& b) { return !(a == b); }
inline std::string to_string(const ArmSpec& a) { return a.to_string(); }

// The one form of a refused spec: std::invalid_argument "arm '<spec>': <why>".
[[noreturn]] void refuse_arm(const std::string& spec, const std::string& why);

}  // namespace replay
}  // namespace sjkv
