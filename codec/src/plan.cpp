#include "sjkv/plan.h"

#include <cctype>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "sjkv/policy.h"
#include "sjkv/staging.h"

namespace sjkv {

namespace {

constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();

uint64_t sat_add(uint64_t a, uint64_t b) { return a > kMax - b ? kMax : a + b; }
uint64_t sat_mul(uint64_t a, uint64_t b) {
  if (a == 0 || b == 0) return 0;
  return a > kMax / b ? kMax : a * b;
}

// Bytes of one row of d values, or 0 when d is not a whole number of blocks.
uint64_t row_bytes(BlockFormat f, uint32_t d) {
  const BlockFormatInfo& i = format_info(f);
  if (d == 0 || d % i.block_values != 0) return 0;
  return static_cast<uint64_t>(d / i.block_values) * i.block_bytes;
}

CodecConfig layer_config(const CacheOption& opt, const LayerGeometry& l) {
  CodecConfig c = opt.codec;
  c.head_dim = l.head_dim_k;
  return c;
}

uint64_t sink_own_bytes(const CodecConfig& c, uint32_t heads) {
  const uint64_t per_pos = c.sink_type == SinkType::f16 ? 4ull * c.head_dim  // K + V fp16
                                                        : 2ull * staging_row_bytes(c.staging, c.head_dim);
  return static_cast<uint64_t>(c.sink) * heads * per_pos;
}

uint64_t sink_copy_bytes(const CodecConfig& c, uint32_t heads, const SjkvLayoutOptions& o) {
  if (c.sink_type != SinkType::f16 || !o.staged_sink_copy) return 0;
  return static_cast<uint64_t>(c.sink) * heads * 2ull * staging_row_bytes(c.staging, c.head_dim);
}

uint64_t ring_rows(const CodecConfig& c, const SjkvLayoutOptions& o) {
  if (!ring_capacity_valid(c.tail, c.tail_max, c.group, o.n_ubatch))
    throw std::invalid_argument("n_ubatch must be in [1, " + std::to_string(kMaxUbatch) + "] (got " +
                                std::to_string(o.n_ubatch) + ")");
  return ring_capacity(c.tail, c.tail_max, c.group, o.n_ubatch);
}

uint64_t records(const CodecConfig& c, uint64_t n, RecordPool pool) {
  if (pool == RecordPool::full_context) return n > c.sink ? (n - c.sink + c.group - 1) / c.group : 0;
  const uint64_t exempt = static_cast<uint64_t>(c.sink) + c.tail;
  return n > exempt ? (n - exempt) / c.group : 0;
}

void require(const CacheGeometry& g, const CacheOption& opt) {
  const std::string why = check(g, opt);
  if (!why.empty()) throw std::invalid_argument(opt.label() + ": " + why);
}

}  // namespace

// ---- Units -----------------------------------------------------------------------------------

double to_gib(uint64_t bytes) { return static_cast<double>(bytes) / static_cast<double>(kGiB); }

uint64_t gib(double gigabytes) {
  if (!(gigabytes >= 0.0)) return 0;
  const double b = std::round(gigabytes * static_cast<double>(kGiB));
  return b >= 18446744073709551615.0 ? kMax : static_cast<uint64_t>(b);
}

std::optional<uint64_t> parse_size(std::string_view text) {
  size_t i = 0;
  const size_t n = text.size();
  while (i < n && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  // Number: digits with an optional fraction; exact integer arithmetic on the digits.
  uint64_t whole = 0;
  uint64_t frac_num = 0, frac_den = 1;
  size_t digits = 0;
  while (i < n && std::isdigit(static_cast<unsigned char>(text[i]))) {
    const uint64_t d = static_cast<uint64_t>(text[i] - '0');
    if (whole > (kMax - d) / 10) return std::nullopt;
    whole = whole * 10 + d;
    ++i;
    ++digits;
  }
  if (i < n && text[i] == '.') {
    ++i;
    while (i < n && std::isdigit(static_cast<unsigned char>(text[i]))) {
      if (frac_den < 1000000000000ull) {  // 12 fractional digits are plenty
        frac_num = frac_num * 10 + static_cast<uint64_t>(text[i] - '0');
        frac_den *= 10;
      }
      ++i;
      ++digits;
    }
  }
  if (digits == 0) return std::nullopt;
  while (i < n && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  std::string unit;
  for (; i < n; ++i) {
    if (std::isspace(static_cast<unsigned char>(text[i]))) break;
    unit += static_cast<char>(std::tolower(static_cast<unsigned char>(text[i])));
  }
  while (i < n && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  if (i != n) return std::nullopt;
  uint64_t mult = 1;
  if (unit.empty() || unit == "b") mult = 1;
  else if (unit == "k" || unit == "kb" || unit == "kib") mult = kKiB;
  else if (unit == "m" || unit == "mb" || unit == "mib") mult = kMiB;
  else if (unit == "g" || unit == "gb" || unit == "gib") mult = kGiB;
  else if (unit == "t" || unit == "tb" || unit == "tib") mult = 1024ull * kGiB;
  else return std::nullopt;
  if (whole > kMax / mult) return std::nullopt;
  const uint64_t base = whole * mult;
  // frac_num / frac_den x mult, rounded to the nearest byte (exact: 128-bit intermediate).
  const unsigned __int128 f = (static_cast<unsigned __int128>(frac_num) * mult + frac_den / 2) / frac_den;
  const uint64_t extra = static_cast<uint64_t>(f);
  if (base > kMax - extra) return std::nullopt;
  return base + extra;
}

// ---- Geometry --------------------------------------------------------------------------------

CacheGeometry CacheGeometry::uniform(uint32_t n_layers, uint32_t kv_heads, uint32_t head_dim) {
  CacheGeometry g;
  g.layers.assign(n_layers, LayerGeometry{kv_heads, head_dim, head_dim});
  return g;
}

uint64_t CacheGeometry::values_per_token() const {
  uint64_t v = 0;
  for (const LayerGeometry& l : layers)
    v = sat_add(v, sat_mul(l.kv_heads, static_cast<uint64_t>(l.head_dim_k) + l.head_dim_v));
  return v;
}

CacheGeometry qwen38_27b_geometry() { return CacheGeometry::uniform(16, 4, 256); }

// ---- Formats ---------------------------------------------------------------------------------

const std::vector<BlockFormatInfo>& all_formats() {
  static const std::vector<BlockFormatInfo> t = [] {
    std::vector<BlockFormatInfo> v;
    for (const BlockFormatInfo& i : block_formats())
      if (i.encode) v.push_back(i);
    return v;
  }();
  return t;
}

std::optional<BlockFormat> parse_format(std::string_view name) {
  const BlockFormatInfo* i = format_by_name(name);
  if (!i || !i->encode) return std::nullopt;
  return i->format;
}

// ---- Options ---------------------------------------------------------------------------------

CacheOption CacheOption::plain(BlockFormat k, BlockFormat v) {
  CacheOption o;
  o.kind = Kind::plain;
  o.k = k;
  o.v = v;
  return o;
}

CacheOption CacheOption::sjkv(uint32_t bits_k, uint32_t bits_v, Body body, SjkvAccounting accounting) {
  CodecConfig c;  // defaults: G 128, sink 128, tq6_0 staging, tail 4,096/8,192
  c.bits_k = bits_k;
  c.bits_v = bits_v;
  c.body = body;
  return sjkv(c, accounting);
}

CacheOption CacheOption::sjkv(const CodecConfig& cfg, SjkvAccounting accounting) {
  CacheOption o;
  o.kind = Kind::sjkv;
  o.codec = cfg;
  o.accounting = accounting;
  return o;
}

std::string CacheOption::label() const {
  if (kind == Kind::plain) {
    const std::string a = format_info(k).name, b = format_info(v).name;
    return a == b ? a : a + "/" + b;
  }
  std::string s = "sjkv " + std::to_string(codec.bits_k) + "/" + std::to_string(codec.bits_v);
  if (codec.resolved_body() == Body::trellis) {
    s += "t";
    if (codec.trellis_axis == TrellisAxis::channel) s += " axis=channel";
  }
  if (accounting == SjkvAccounting::note_rule) s += " (note rule)";
  return s;
}

std::vector<CacheOption> standard_options(SjkvAccounting accounting) {
  std::vector<CacheOption> v;
  v.push_back(CacheOption::sjkv(4, 4, Body::automatic, accounting));
  v.push_back(CacheOption::sjkv(3, 3, Body::automatic, accounting));
  v.push_back(CacheOption::sjkv(3, 2, Body::automatic, accounting));
  v.push_back(CacheOption::sjkv(2, 2, Body::automatic, accounting));
  for (BlockFormat f : {BlockFormat::f16, BlockFormat::q8_0, BlockFormat::q5_1, BlockFormat::q4_0,
                        BlockFormat::tq6_0, BlockFormat::tq5_0, BlockFormat::turbo4, BlockFormat::turbo3})
    v.push_back(CacheOption::plain(f));
  v.push_back(CacheOption::plain(BlockFormat::q8_0, BlockFormat::q5_1));
  v.push_back(CacheOption::plain(BlockFormat::tq5_0, BlockFormat::turbo4));
  return v;
}

Overheads note_12gb_overheads() {
  Overheads o;
  o.per_token_bytes = kKiB;
  o.fixed_bytes = gib(7.77);
  return o;
}

// ---- Bytes -----------------------------------------------------------------------------------

std::string check(const CacheGeometry& g, const CacheOption& opt) {
  if (g.layers.empty()) return "the geometry has no full-attention layer";
  for (size_t li = 0; li < g.layers.size(); ++li) {
    const LayerGeometry& l = g.layers[li];
    const std::string at = "layer " + std::to_string(li) + ": ";
    if (l.kv_heads == 0 || l.head_dim_k == 0 || l.head_dim_v == 0) return at + "kv_heads and head_dim must be positive";
    if (opt.kind == CacheOption::Kind::plain) {
      for (auto [f, d] : {std::pair<BlockFormat, uint32_t>{opt.k, l.head_dim_k}, {opt.v, l.head_dim_v}}) {
        if (row_bytes(f, d) == 0)
          return at + "head_dim " + std::to_string(d) + " is not a multiple of the " + format_info(f).name +
                 " block (" + std::to_string(format_info(f).block_values) + " values)";
      }
      continue;
    }
    if (l.head_dim_k != l.head_dim_v)
      return at + "sjkv needs equal K and V head_dim (" + std::to_string(l.head_dim_k) + " vs " +
             std::to_string(l.head_dim_v) + ")";
    const Unsupported u = can_implement(layer_config(opt, l));
    if (u != Unsupported::none && u != Unsupported::trellis_not_built) return at + describe(u);
  }
  return {};
}

BytesPerToken bytes_per_token(const CacheGeometry& g, const CacheOption& opt) {
  require(g, opt);
  BytesPerToken r;
  if (opt.kind == CacheOption::Kind::plain) {
    for (const LayerGeometry& l : g.layers)
      r.numerator = sat_add(r.numerator, sat_mul(l.kv_heads, row_bytes(opt.k, l.head_dim_k) + row_bytes(opt.v, l.head_dim_v)));
    return r;
  }
  r.denominator = opt.codec.group;
  for (const LayerGeometry& l : g.layers)
    r.numerator = sat_add(r.numerator, sat_mul(l.kv_heads, layer_config(opt, l).layout().bytes));
  return r;
}

uint64_t layout_fixed_bytes(const CacheGeometry& g, const CacheOption& opt, const SjkvLayoutOptions& o) {
  require(g, opt);
  if (opt.kind != CacheOption::Kind::sjkv) return 0;
  uint64_t b = 0;
  for (const LayerGeometry& l : g.layers) {
    const CodecConfig c = layer_config(opt, l);
    b = sat_add(b, sink_own_bytes(c, l.kv_heads));
    b = sat_add(b, sink_copy_bytes(c, l.kv_heads, o));
    b = sat_add(b, sat_mul(ring_rows(c, o), sat_mul(l.kv_heads, 2ull * staging_row_bytes(c.staging, c.head_dim))));
  }
  return b;
}

CacheBytes cache_bytes(const CacheGeometry& g, const CacheOption& opt, uint64_t n, const PlanSettings& s) {
  require(g, opt);
  CacheBytes r;
  if (opt.kind == CacheOption::Kind::plain) {
    r.plain = sat_mul(bytes_per_token(g, opt).numerator, n);
    return r;
  }
  if (opt.accounting == SjkvAccounting::note_rule) {
    const BytesPerToken bpt = bytes_per_token(g, opt);
    const uint64_t exempt = static_cast<uint64_t>(opt.codec.sink) + opt.codec.tail;  // 4,224
    const uint64_t tokens = n > exempt ? n - exempt : 0;
    const uint64_t num = sat_mul(bpt.numerator, tokens);
    r.body = num == kMax ? kMax : (num + bpt.denominator - 1) / bpt.denominator;  // whole bytes, up
    r.fixed = s.rule.fixed_bytes;
    return r;
  }
  for (const LayerGeometry& l : g.layers) {
    const CodecConfig c = layer_config(opt, l);
    const uint64_t row2 = 2ull * staging_row_bytes(c.staging, c.head_dim);
    r.n_records = records(c, n, s.layout.pool);
    r.ring_rows = ring_rows(c, s.layout);
    r.sink = sat_add(r.sink, sink_own_bytes(c, l.kv_heads));
    r.sink_staged = sat_add(r.sink_staged, sink_copy_bytes(c, l.kv_heads, s.layout));
    r.body = sat_add(r.body, sat_mul(r.n_records, sat_mul(l.kv_heads, c.layout().bytes)));
    r.ring = sat_add(r.ring, sat_mul(r.ring_rows, sat_mul(l.kv_heads, row2)));
  }
  return r;
}

uint64_t total_bytes(const CacheGeometry& g, const CacheOption& opt, uint64_t n, const PlanSettings& s) {
  const CacheBytes c = cache_bytes(g, opt, n, s);
  uint64_t t = 0;
  for (uint64_t part : {c.sink, c.sink_staged, c.body, c.ring, c.fixed, c.plain}) t = sat_add(t, part);
  t = sat_add(t, sat_mul(s.overheads.per_token_bytes, n));
  t = sat_add(t, s.overheads.fixed_bytes);
  return sat_add(t, s.overheads.sequence_state_bytes);
}

double allocated_bits_per_value(const CacheGeometry& g, const CacheOption& opt, uint64_t n, const PlanSettings& s) {
  const uint64_t values = sat_mul(g.values_per_token(), n);
  if (values == 0) return 0.0;
  const CacheBytes c = cache_bytes(g, opt, n, s);
  return 8.0 * static_cast<double>(c.total()) / static_cast<double>(values);
}

Fit max_context(const CacheGeometry& g, const CacheOption& opt, uint64_t budget, const PlanSettings& s) {
  require(g, opt);
  Fit f;
  // total_bytes is non-decreasing in n (every term is), so bisect for the last n that fits.
  if (total_bytes(g, opt, 1, s) > budget) {
    f.bytes = total_bytes(g, opt, 0, s);
    return f;
  }
  f.fits = true;
  if (total_bytes(g, opt, kMaxPlanContext, s) <= budget) {
    f.n_ctx = kMaxPlanContext;
    f.capped = true;
  } else {
    uint64_t lo = 1, hi = kMaxPlanContext;  // total(lo) <= budget < total(hi)
    while (hi - lo > 1) {
      const uint64_t mid = lo + (hi - lo) / 2;
      if (total_bytes(g, opt, mid, s) <= budget) lo = mid; else hi = mid;
    }
    f.n_ctx = lo;
  }
  f.bytes = total_bytes(g, opt, f.n_ctx, s);
  return f;
}

}  // namespace sjkv
