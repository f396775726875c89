#include "sjkv/config.h"

#include <string>

#include "sjkv/hadamard.h"
#include "sjkv/policy.h"
#include "sjkv/status.h"

namespace sjkv {

const char* staging_name(StagingType t) {
  switch (t) {
    case StagingType::tq6_0: return "tq6_0";
    case StagingType::f16: return "f16";
    case StagingType::q8_0: return "q8_0";
  }
  return "?";
}

bool parse_staging(const std::string& name, StagingType* t) {
  for (StagingType s : kStagingTypes)
    if (name == staging_name(s)) {
      *t = s;
      return true;
    }
  return false;
}

std::vector<std::string> staging_names() {
  std::vector<std::string> out;
  for (StagingType s : kStagingTypes) out.push_back(staging_name(s));
  return out;
}

std::vector<std::string> staging_names_by_code() {
  std::vector<std::string> out(sizeof kStagingTypes / sizeof kStagingTypes[0]);
  for (StagingType s : kStagingTypes) out.at(static_cast<uint32_t>(s)) = staging_name(s);
  return out;
}

bool operator==(const CodecConfig& a, const CodecConfig& b) {
  return a.head_dim == b.head_dim && a.group == b.group && a.bits_k == b.bits_k && a.bits_v == b.bits_v &&
         a.body == b.body && a.trellis_axis == b.trellis_axis && a.iters == b.iters && a.balance == b.balance &&
         a.staging == b.staging && a.sink_type == b.sink_type && a.sink == b.sink && a.tail == b.tail &&
         a.tail_max == b.tail_max && a.flush_chunk == b.flush_chunk && a.rotation_block == b.rotation_block;
}

namespace {

// Up to 9 decimal digits, so the value fits uint32_t without an overflow check.
bool parse_u32(const std::string& v, uint32_t* out) {
  if (v.empty() || v.size() > 9 || v.find_first_not_of("0123456789") != std::string::npos) return false;
  *out = static_cast<uint32_t>(std::stoul(v));
  return true;
}

bool strip_suffix(std::string* v, const std::string& suffix) {
  if (v->size() < suffix.size() || v->compare(v->size() - suffix.size(), suffix.size(), suffix) != 0) return false;
  v->resize(v->size() - suffix.size());
  return true;
}

std::vector<std::string> split(const std::string& s, char c) {
  std::vector<std::string> out(1);
  for (char ch : s) {
    if (ch == c) out.emplace_back();
    else out.back() += ch;
  }
  return out;
}

std::string staging_choices() {
  const std::vector<std::string> names = staging_names();
  std::string s;
  for (size_t i = 0; i < names.size(); ++i) s += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  return s;
}

}  // namespace

bool parse_config_head(const std::string& prefix, const std::string& widths, CodecConfig* out, std::string* error) {
  if (prefix != "sj" && prefix != "kvarn") {
    *error = "'" + prefix + "' is not sj or kvarn";
    return false;
  }
  std::string w = widths;
  const bool t = strip_suffix(&w, "t");
  if (w.size() != 3 || w[1] != '/' || w[0] < '0' || w[0] > '9' || w[2] < '0' || w[2] > '9') {
    *error = "widths '" + widths + "' are not K/V bits such as 4/4 or 3/2t";
    return false;
  }
  const uint32_t bk = static_cast<uint32_t>(w[0] - '0'), bv = static_cast<uint32_t>(w[2] - '0');
  CodecConfig c = prefix == "kvarn" ? kvarn_config(128, bk, bv) : CodecConfig{};
  c.bits_k = bk;
  c.bits_v = bv;
  c.body = t ? Body::trellis : Body::scalar;
  *out = c;
  return true;
}

ConfigField parse_config_field(const std::string& key, const std::string& value, bool kvarn, CodecConfig* c,
                               std::string* error) {
  const std::string not_int = key + "=" + value + " is not a non-negative integer";
  auto u32 = [&](const std::string& v, uint32_t* dst) {
    if (parse_u32(v, dst)) return true;
    *error = not_int;
    return false;
  };
  CodecConfig n = *c;
  std::string v = value;
  if (key == "axis") {
    if (v == "channel") n.trellis_axis = TrellisAxis::channel;
    else if (v == "token") n.trellis_axis = TrellisAxis::token;
    else {
      *error = "axis must be token or channel";
      return ConfigField::invalid;
    }
  } else if (key == "staging") {
    if (!parse_staging(v, &n.staging)) {
      *error = "staging must be " + staging_choices();
      return ConfigField::invalid;
    }
  } else if (key == "sink") {
    n.sink_type = strip_suffix(&v, "(inherit)") ? SinkType::inherit : SinkType::f16;
    if (!u32(v, &n.sink)) return ConfigField::invalid;
  } else if (key == "tail") {
    const std::vector<std::string> tt = split(v, '/');
    if (tt.size() > 2) {
      *error = "tail is N or N/MAX";
      return ConfigField::invalid;
    }
    n.tail_max = 0;
    if (!u32(tt[0], &n.tail) || (tt.size() == 2 && !u32(tt[1], &n.tail_max))) return ConfigField::invalid;
  } else if (key == "iters") {
    if (strip_suffix(&v, "(best)") && !kvarn) {
      *error = "iters=" + value + ": (best) is KVarN's best-of balancing, named kvarn: (not sj:)";
      return ConfigField::invalid;
    }
    if (!u32(v, &n.iters)) return ConfigField::invalid;
  } else if (key == "D" || key == "G" || key == "rot" || key == "flush") {
    uint32_t* dst = key == "D" ? &n.head_dim : key == "G" ? &n.group : key == "rot" ? &n.rotation_block : &n.flush_chunk;
    if (!u32(v, dst)) return ConfigField::invalid;
  } else {
    return ConfigField::unknown;
  }
  *c = n;
  return ConfigField::applied;
}

bool parse_config(const std::string& text, CodecConfig* out, std::string* error) {
  auto fail = [&](const std::string& why) {
    *error = "configuration '" + text + "': " + why;
    return false;
  };
  if (text.empty()) return fail("empty");
  const std::vector<std::string> parts = split(text, ':');
  if (parts.size() < 2) return fail("missing widths, e.g. " + parts[0] + ":4/4");
  CodecConfig c;
  std::string why;
  if (!parse_config_head(parts[0], parts[1], &c, &why)) return fail(why);
  for (size_t i = 2; i < parts.size(); ++i) {
    const size_t eq = parts[i].find('=');
    if (eq == std::string::npos) return fail("field '" + parts[i] + "' is not key=value");
    const std::string key = parts[i].substr(0, eq);
    switch (parse_config_field(key, parts[i].substr(eq + 1), parts[0] == "kvarn", &c, &why)) {
      case ConfigField::applied: break;
      case ConfigField::unknown: return fail("unknown field '" + key + "'");
      case ConfigField::invalid: return fail(why);
    }
  }
  *out = c;
  return true;
}

std::string CodecConfig::name() const {
  const bool kvarn = balance == BalanceMode::best_of;
  std::string s = kvarn ? "kvarn:" : "sj:";
  s += std::to_string(bits_k) + "/" + std::to_string(bits_v);
  if (resolved_body() == Body::trellis) {
    s += "t";
    if (trellis_axis == TrellisAxis::channel) s += ":axis=channel";
  }
  s += ":D=" + std::to_string(head_dim) + ":G=" + std::to_string(group);
  s += std::string(":staging=") + staging_name(staging);
  s += ":sink=" + std::to_string(sink) + (sink_type == SinkType::inherit ? "(inherit)" : "");
  s += ":tail=" + std::to_string(tail) + "/" + std::to_string(tail_max);
  s += ":rot=" + std::to_string(rotation());
  s += ":iters=" + std::to_string(iters) + (kvarn ? "(best)" : "");
  return s;
}

CodecConfig kvarn_config(uint32_t head_dim, uint32_t bits_k, uint32_t bits_v, uint32_t exact_tail) {
  CodecConfig c;
  c.head_dim = head_dim;
  c.bits_k = bits_k;
  c.bits_v = bits_v;
  c.body = Body::scalar;
  c.iters = 8;
  c.balance = BalanceMode::best_of;
  c.staging = StagingType::f16;  // KVarN keeps unsealed rows in 16 bits
  c.sink = 128;
  c.tail = exact_tail;
  c.tail_max = 0;
  return c;
}

const char* describe(Unsupported u) {
  switch (u) {
    case Unsupported::none: return "supported";
    case Unsupported::head_dim_not_pow2: return "head_dim must be a power of two";
    case Unsupported::head_dim_too_small: return "head_dim must be at least 32";
    case Unsupported::group_invalid: return "group must be a positive multiple of 16";
    case Unsupported::bits_out_of_range: return "bits_k and bits_v must be 2, 3 or 4";
    case Unsupported::body_invalid: return "body must be scalar, trellis or auto";
    case Unsupported::trellis_bits:
      return "trellis bodies need bits in {2,3} with bits_v <= bits_k, or bits_k 4 with body=trellis";
    case Unsupported::trellis_group: return "trellis bodies need group 128";
    case Unsupported::trellis_head_dim: return "trellis bodies need head_dim a multiple of 128";
    case Unsupported::trellis_not_built:  // no longer returned; kept so stored values keep their meaning
      return "trellis bodies are not available in this build (use body=scalar)";
    case Unsupported::staging_block: return "head_dim must be a multiple of the staging block (128 for tq6_0, 32 for q8_0)";
    case Unsupported::rotation_block: return "rotation block must be a power of two >= 32 that divides head_dim";
    case Unsupported::sink_invalid: return "sink must be a positive multiple of 64";
    case Unsupported::tail_not_group_aligned: return "tail must be a multiple of the group";
    case Unsupported::tail_max_invalid: return "tail_max must be 0 or a multiple of 128 that is >= tail";
    case Unsupported::iters_out_of_range: return "balancing iterations must be at most 64";
    case Unsupported::trellis_axis: return "trellis axis must be token or channel, and the channel axis needs a trellis body";
    case Unsupported::size_too_large: return "tail and tail_max must be at most 2^30 positions";
  }
  return "unknown reason";
}

Unsupported can_implement_record(uint32_t d, uint32_t g, uint32_t bits_k, uint32_t bits_v, Body body, TrellisAxis axis) {
  if (!is_pow2(d)) return Unsupported::head_dim_not_pow2;
  if (d < 32) return Unsupported::head_dim_too_small;
  if (g == 0 || g % 16 != 0) return Unsupported::group_invalid;
  if (bits_k < 2 || bits_k > 4 || bits_v < 2 || bits_v > 4) return Unsupported::bits_out_of_range;
  const Body b = resolve_body(body, bits_k, bits_v);
  if (b != Body::scalar && b != Body::trellis) return Unsupported::body_invalid;
  if (axis != TrellisAxis::token && axis != TrellisAxis::channel) return Unsupported::trellis_axis;
  if (axis == TrellisAxis::channel && b != Body::trellis) return Unsupported::trellis_axis;
  if (b == Body::trellis) {
    // {2,3} with bits_v <= bits_k (the format's 3/3, 3/2, 2/2), or a 4-bit K trellis (L = 10,
    // sjkv extension) with V at 4, 3 or 2 bits, only when asked for: AUTO keeps 4/4, 4/3 and
    // 4/2 scalar. The record sizes are the scalar ones of the same widths.
    const bool four = bits_k == 4 && bits_v <= 4 && body == Body::trellis;
    if (!four && (bits_k == 4 || bits_v == 4 || bits_v > bits_k)) return Unsupported::trellis_bits;
    // Both axes: G = 128 (the format's trellis group) and D a multiple of 128, so a
    // channel-axis sequence (one token row's D channels) is at least 128 codes long, as
    // long as a token-axis one.
    if (g != 128) return Unsupported::trellis_group;
    if (d % 128 != 0) return Unsupported::trellis_head_dim;
  }
  return Unsupported::none;
}

Unsupported can_implement(const CodecConfig& c) {
  const Unsupported rec = can_implement_record(c.head_dim, c.group, c.bits_k, c.bits_v, c.body, c.trellis_axis);
  if (rec != Unsupported::none) return rec;
  if (c.head_dim % staging_block_values(c.staging) != 0) return Unsupported::staging_block;
  const uint32_t rot = c.rotation();
  if (!is_pow2(rot) || rot < 32 || rot > c.head_dim || c.head_dim % rot != 0) return Unsupported::rotation_block;
  if (c.sink == 0 || c.sink % 64 != 0) return Unsupported::sink_invalid;
  if (c.tail % c.group != 0) return Unsupported::tail_not_group_aligned;
  if (c.tail_max != 0 && (c.tail_max < c.tail || c.tail_max % 128 != 0)) return Unsupported::tail_max_invalid;
  if (c.iters > 64) return Unsupported::iters_out_of_range;
  if (c.tail > kMaxTail || c.tail_max > kMaxTail || c.group > (1u << 16)) return Unsupported::size_too_large;
  return Unsupported::none;
}

std::string Status::message() const {
  const char* side_name = side == Side::k ? "K" : "V";
  std::string where = std::string(side_name) + " token " + std::to_string(token) + " channel " + std::to_string(channel);
  std::string m;
  switch (code) {
    case ErrorCode::ok: return "ok";
    case ErrorCode::non_finite_input: m = "NaN or infinity in input at " + where; break;
    case ErrorCode::fp16_overflow: m = "value or block scale overflows fp16 at " + where; break;
    case ErrorCode::unsupported: m = "unsupported configuration"; break;
  }
  if (!detail.empty()) m += " (" + detail + ")";
  return m;
}

}  // namespace sjkv
