// The arm grammar (arm_spec.h): ArmSpec::parse and ArmSpec::to_string, side by side.
#include "sjkv/replay/arm_spec.h"

#include <algorithm>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace sjkv {
namespace replay {
namespace {

// Each option once and never empty: a repeat used to be taken silently (the last one won, wide=
// and layers= added up), so an arm could run under a name that did not say what it stored.
constexpr const char* kEmptyOption = "an empty option (':' doubled or at the end)";
[[noreturn]] void repeated(const std::string& spec, const std::string& option) {
  refuse_arm(spec, "option '" + option + "' is given twice (each option once)");
}

std::vector<std::string> split(const std::string& s, char c) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, c)) out.push_back(cur);
  if (!s.empty() && s.back() == c) out.push_back("");
  return out;
}

uint32_t parse_u32(const std::string& spec, const std::string& key, const std::string& v) {
  if (v.empty() || v.size() > 9 || v.find_first_not_of("0123456789") != std::string::npos)
    refuse_arm(spec, key + "=" + v + " is not a non-negative integer");
  return static_cast<uint32_t>(std::stoul(v));
}

StateFormat parse_state(const std::string& spec, const std::string& v) {
  for (StateFormat f : {StateFormat::f32, StateFormat::f16, StateFormat::bf16, StateFormat::q8_0})
    if (v == state_format_name(f)) return f;
  refuse_arm(spec, "state=" + v + ": the recurrent state is f32, f16, bf16 or q8_0");
}

struct RowFormatName {
  const char* name;
  RowFormat f;
  bool ggml_block;  // takes ":rot"
};
constexpr RowFormatName kRowFormats[] = {
    {"f32", RowFormat::f32, false},     {"f16", RowFormat::f16, false},       {"bf16", RowFormat::bf16, false},
    {"q8_0", RowFormat::q8_0, true},    {"q4_0", RowFormat::q4_0, true},      {"q4_1", RowFormat::q4_1, true},
    {"q5_0", RowFormat::q5_0, true},    {"q5_1", RowFormat::q5_1, true},      {"iq4_nl", RowFormat::iq4_nl, true},
    {"turbo3", RowFormat::turbo3, false}, {"turbo4", RowFormat::turbo4, false}, {"tq5_0", RowFormat::tq5_0, false},
    {"tq6_0", RowFormat::tq6_0, false},
};

bool plain_type(RowFormat f) { return f == RowFormat::f32 || f == RowFormat::f16 || f == RowFormat::bf16; }

// swa=FMT: a ggml block format for the sliding-window layers.
RowFormat parse_swa(const std::string& spec, const std::string& v) {
  for (const RowFormatName& r : kRowFormats)
    if (v == r.name && r.ggml_block) return r.f;
  refuse_arm(spec, "swa=" + v + ": the sliding layers take a ggml block format (q8_0, q5_1, q5_0, q4_1, q4_0, "
                   "iq4_nl); f16, their default, is not named");
}

// The codec fields by key, in ArmField (printing) order.
struct FieldKey {
  const char* key;
  ArmField bit;
};
constexpr FieldKey kFieldKeys[] = {{"axis", kArmFieldAxis}, {"G", kArmFieldGroup},   {"staging", kArmFieldStaging},
                                   {"sink", kArmFieldSink}, {"tail", kArmFieldTail}, {"rot", kArmFieldRot},
                                   {"iters", kArmFieldIters}, {"flush", kArmFieldFlush}};

std::string join_ids(const std::vector<uint32_t>& ids) {
  std::string s;
  for (uint32_t id : ids) s += (s.empty() ? "" : "+") + std::to_string(id);
  return s;
}

ArmSpec parse_row(const std::string& spec, const std::vector<std::string>& parts, const RowFormatName& r) {
  ArmSpec a;
  a.family = ArmFamily::row;
  a.format = r.f;
  for (size_t i = 1; i < parts.size(); ++i) {
    const std::string& o = parts[i];
    if (o.empty()) refuse_arm(spec, kEmptyOption);
    if (o.rfind("state=", 0) == 0) {
      if (a.state_given) repeated(spec, "state=");
      a.state_given = true;
      a.state = parse_state(spec, o.substr(6));
    } else if (o == "rot") {
      if (!r.ggml_block) refuse_arm(spec, std::string(r.name) + " takes no ':rot' (only the ggml block formats do)");
      if (a.rot) repeated(spec, o);
      a.rot = true;
    } else if (o == "swa=same") {
      if (plain_type(r.f)) refuse_arm(spec, std::string(r.name) + " already stores sliding layers in its own type");
      if (a.swa_same) repeated(spec, o);
      a.swa_same = true;
    } else if (o.rfind("swa=", 0) == 0) {
      if (!plain_type(r.f)) refuse_arm(spec, std::string(r.name) + " takes swa=same, not " + o);
      if (a.swa_given) repeated(spec, "swa=");
      a.swa_given = true;
      a.swa = parse_swa(spec, o.substr(4));
    } else {
      refuse_arm(spec, "unknown option '" + o + "'");
    }
  }
  return a;
}

ArmSpec parse_codec(const std::string& spec, const std::vector<std::string>& parts) {
  const std::string& head = parts[0];
  const bool sj = head == "sj";
  if (parts.size() < 2) refuse_arm(spec, "missing widths, e.g. " + head + ":4/4");
  if (!sj && !parts[1].empty() && parts[1].back() == 't') refuse_arm(spec, "KVarN arms have a scalar body ('t' is SJ only)");
  ArmSpec a;
  a.family = sj ? ArmFamily::sj : ArmFamily::kvarn;
  // The codec's configuration grammar (config.h parse_config) plus the arm options below;
  // head_dim (D=) is the model's.
  CodecConfig& c = a.config;
  std::string err;
  if (!parse_config_head(head, parts[1], &c, &err)) refuse_arm(spec, err);
  std::vector<std::string> seen;
  for (size_t i = 2; i < parts.size(); ++i) {
    if (parts[i].empty()) refuse_arm(spec, kEmptyOption);
    const auto eq = parts[i].find('=');
    if (eq == std::string::npos) refuse_arm(spec, "option '" + parts[i] + "' is not key=value");
    const std::string key = parts[i].substr(0, eq), val = parts[i].substr(eq + 1);
    if (val.empty()) refuse_arm(spec, "option '" + key + "=' has no value");
    if (std::find(seen.begin(), seen.end(), key) != seen.end()) repeated(spec, key + "=");
    seen.push_back(key);
    if (key == "state") {
      a.state_given = true;
      a.state = parse_state(spec, val);
      continue;
    }
    if (key == "swa") {
      a.swa_given = true;
      a.swa = parse_swa(spec, val);
      continue;
    }
    if (!sj) {
      if (key != "tail")
        refuse_arm(spec, "KVarN arms take only tail=N (the exact fp16 tail), swa= and state=, not '" + key + "'");
      if (val.find('/') != std::string::npos) refuse_arm(spec, key + "=" + val + " is not a non-negative integer");  // fixed tail
    }
    if (key == "D") {
      refuse_arm(spec, "unknown option '" + key + "'");
    } else if (key == "tier") {
      if (val != "edge") refuse_arm(spec, "tier must be edge");
      a.tier_edge = true;
    } else if (key == "kmean") {
      if (val != "sink") refuse_arm(spec, "kmean must be sink (one K mean per head, from the first sink keys)");
      a.kmean = true;
    } else if (key == "exact") {
      if (val != "k" && val != "v") refuse_arm(spec, "exact must be k or v");
      a.exact = val[0];
    } else if (key == "wide") {
      for (const std::string& l : split(val, '+')) {
        const uint32_t id = parse_u32(spec, key, l);
        if (std::find(a.wide.begin(), a.wide.end(), id) != a.wide.end()) refuse_arm(spec, "wide= lists a layer twice");
        a.wide.push_back(id);
      }
    } else if (key == "layers") {
      for (const std::string& l : split(val, '+')) {
        const uint32_t id = parse_u32(spec, key, l);
        if (std::find(a.layers.begin(), a.layers.end(), id) != a.layers.end())
          refuse_arm(spec, "layers= lists a layer twice");
        a.layers.push_back(id);
      }
    } else if (key == "cb") {
      // A shipped set's name or "reference" before file names (sjkv/io/table_set.h); the
      // files are read when the arm is made.
      if (val != "reference" && !find_table_set(val))
        for (const std::string& f : split(val, '+'))
          if (f.empty()) refuse_arm(spec, "cb=FILE[+FILE]: an empty file name");
      a.cb = val;
    } else {
      switch (parse_config_field(key, val, !sj, &c, &err)) {
        case ConfigField::applied: break;
        case ConfigField::unknown: refuse_arm(spec, "unknown option '" + key + "'");
        case ConfigField::invalid: refuse_arm(spec, err);
      }
      for (const FieldKey& f : kFieldKeys)
        if (key == f.key) a.fields |= f.bit;
    }
  }
  if (!a.cb.empty()) {
    if (c.body != Body::trellis) refuse_arm(spec, "cb= applies to trellis bodies (e.g. sj:3/2t:cb=FILE)");
    if (c.trellis_axis == TrellisAxis::channel) refuse_arm(spec, "cb= tables are token-axis tables; axis=channel keeps its own");
    if (const TableSet* set = a.cb_set()) {
      bool has = false;
      for (const CodebookContainer& t : set->tables) has = has || t.table.bits == c.bits_k || t.table.bits == c.bits_v;
      if (!has)
        refuse_arm(spec, "table set " + a.cb + " holds no " + std::to_string(c.bits_k) + "-bit or " +
                             std::to_string(c.bits_v) + "-bit table");
    }
  }
  if ((a.fields & kArmFieldAxis) && c.body != Body::trellis && c.trellis_axis == TrellisAxis::channel)
    refuse_arm(spec, "axis=channel needs a trellis body (e.g. sj:3/2t:axis=channel)");
  // Geometry that does not depend on the model: checked at a head_dim of 128 now (or at the
  // rotation block when it is a larger power of two: rot=512 is one transform over a
  // 512-value head), and again against the real head_dim when the layer is made.
  CodecConfig probe = c;
  const uint32_t rb = c.rotation_block;
  probe.head_dim = rb > 128 && (rb & (rb - 1)) == 0 ? rb : 128;
  const Unsupported why = can_implement(probe);
  if (why != Unsupported::none) refuse_arm(spec, describe(why));
  return a;
}

}  // namespace

void refuse_arm(const std::string& spec, const std::string& why) {
  throw std::invalid_argument("arm '" + spec + "': " + why);
}

const char* row_format_name(RowFormat f) {
  for (const RowFormatName& r : kRowFormats)
    if (r.f == f) return r.name;
  return "?";
}

ArmSpec ArmSpec::parse(const std::string& spec) {
  if (spec.empty()) refuse_arm(spec, "empty spec");
  const std::vector<std::string> parts = split(spec, ':');
  const std::string& head = parts[0];
  for (const RowFormatName& r : kRowFormats)
    if (head == r.name) return parse_row(spec, parts, r);
  if (head == "kvarn" || head == "sj") return parse_codec(spec, parts);
  refuse_arm(spec, "unknown arm '" + head +
                       "' (known: f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 iq4_nl [:rot], turbo3 turbo4 tq5_0 tq6_0, "
                       "kvarn:K/V, sj:K/V[t])");
}

std::string ArmSpec::to_string() const {
  const std::string state_opt = state_given ? std::string(":state=") + state_format_name(state) : std::string();
  const std::string swa_opt = swa_given ? std::string(":swa=") + row_format_name(swa) : std::string();
  if (family == ArmFamily::row)
    return row_format_name(format) + std::string(rot ? ":rot" : "") + (swa_same ? ":swa=same" : "") + swa_opt + state_opt;
  const CodecConfig& c = config;
  std::string s = family == ArmFamily::kvarn ? "kvarn:" : "sj:";
  s += std::to_string(c.bits_k) + "/" + std::to_string(c.bits_v) + (c.body == Body::trellis ? "t" : "");
  if (fields & kArmFieldAxis) s += c.trellis_axis == TrellisAxis::channel ? ":axis=channel" : ":axis=token";
  if (fields & kArmFieldGroup) s += ":G=" + std::to_string(c.group);
  if (fields & kArmFieldStaging) s += std::string(":staging=") + staging_name(c.staging);
  if (fields & kArmFieldSink) s += ":sink=" + std::to_string(c.sink) + (c.sink_type == SinkType::inherit ? "(inherit)" : "");
  if (fields & kArmFieldTail) s += ":tail=" + std::to_string(c.tail) + (c.tail_max ? "/" + std::to_string(c.tail_max) : "");
  if (fields & kArmFieldRot) s += ":rot=" + std::to_string(c.rotation_block);
  if (fields & kArmFieldIters) s += ":iters=" + std::to_string(c.iters);
  if (fields & kArmFieldFlush) s += ":flush=" + std::to_string(c.flush_chunk);
  if (tier_edge) s += ":tier=edge";
  if (!wide.empty()) s += ":wide=" + join_ids(wide);
  if (!layers.empty()) s += ":layers=" + join_ids(layers);
  if (kmean) s += ":kmean=sink";
  if (exact) s += std::string(":exact=") + exact;
  s += swa_opt + state_opt;
  if (!cb.empty()) s += ":cb=" + cb;
  return s;
}

const TableSet* ArmSpec::cb_set() const { return cb.empty() || cb_reference() ? nullptr : find_table_set(cb); }

std::vector<std::string> ArmSpec::cb_files() const {
  if (cb.empty() || cb_reference() || cb_set()) return {};
  return split(cb, '+');
}

std::string ArmSpec::family_name() const {
  switch (family) {
    case ArmFamily::kvarn: return "kvarn";
    case ArmFamily::sj: return trellis() ? "sj trellis" : "sj scalar";
    case ArmFamily::row: break;
  }
  return row_format_name(format) + std::string(rot ? ":rot" : "");
}

bool ArmSpec::plain_format() const {
  if (family != ArmFamily::row) return false;
  switch (format) {
    case RowFormat::f16: case RowFormat::bf16: case RowFormat::q8_0: case RowFormat::q5_1: case RowFormat::q5_0:
    case RowFormat::q4_1: case RowFormat::q4_0: case RowFormat::iq4_nl:
      return true;
    default:
      return false;
  }
}

bool operator==(const ArmSpec& a, const ArmSpec& b) {
  return a.family == b.family && a.format == b.format && a.rot == b.rot && a.swa_same == b.swa_same &&
         a.swa_given == b.swa_given && a.swa == b.swa &&
         a.config == b.config && a.fields == b.fields && a.tier_edge == b.tier_edge && a.wide == b.wide &&
         a.layers == b.layers && a.kmean == b.kmean && a.exact == b.exact && a.cb == b.cb &&
         a.state_given == b.state_given && a.state == b.state;
}

}  // namespace replay
}  // namespace sjkv
