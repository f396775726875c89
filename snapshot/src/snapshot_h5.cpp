// Snapshot files (docs/FORMAT.md section 3) and the consistency rules shared by the writer
// and the reader.
#include <stdexcept>
#include <string>
#include <unordered_set>
#include <vector>

#include "h5util.h"
#include "sjkv/config.h"
#include "sjkv/hadamard.h"
#include "sjkv/hash.h"
#include "sjkv/io/atomic_file.h"
#include "sjkv/io/snapshot_file.h"
#include "sjkv/io/zstd_filter.h"
#include "sjkv/layout.h"
#include "sjkv/policy.h"
#include "sjkv/trellis.h"
#include "sjkv/staging.h"

namespace sjkv {

namespace {

constexpr const char* kSnapshotMagic = "sjkv-snapshot";

const char* body_name(Body b) { return b == Body::trellis ? "trellis" : "scalar"; }
const char* balance_name(BalanceMode m) { return m == BalanceMode::best_of ? "best" : "final"; }
const char* sink_type_name(SinkType t) { return t == SinkType::inherit ? "inherit" : "f16"; }

std::string u(uint64_t v) { return std::to_string(v); }

// ---- the rules, in the reader's order (FORMAT.md section 5, steps 5-8) -------------------

std::string axis_name(const CodecConfig& c) { return c.trellis_axis == TrellisAxis::channel ? "channel" : "token"; }

std::string config_defect(const Snapshot& s, const std::string& axis) {
  const CodecConfig& c = s.config;
  if (!is_pow2(c.head_dim)) return "head_dim = " + u(c.head_dim) + " is not a power of two";
  if (c.head_dim < h5::kMinHeadDim || c.head_dim > h5::kMaxHeadDim)
    return "head_dim = " + u(c.head_dim) + " is outside [32, 1024]";
  if (s.kv_heads < 1 || s.kv_heads > h5::kMaxKvHeads) return "kv_heads = " + u(s.kv_heads) + " is outside [1, 256]";
  if (c.group < 16 || c.group > kMaxSnapshotGroup || c.group % 16 != 0)
    return "group = " + u(c.group) + " is not a multiple of 16 in [16, 1024]";
  if (c.body != Body::scalar && c.body != Body::trellis && c.body != Body::automatic) return "body: invalid value";
  if (c.balance != BalanceMode::final_scales && c.balance != BalanceMode::best_of) return "balance: invalid value";
  if (c.staging != StagingType::tq6_0 && c.staging != StagingType::f16 && c.staging != StagingType::q8_0)
    return "staging: invalid value";
  if (c.sink_type != SinkType::f16 && c.sink_type != SinkType::inherit) return "sink_type: invalid value";
  const Body rb = c.resolved_body();
  if (axis != "token" && axis != "channel") return "axis = '" + axis + "' is not token or channel";
  if (rb == Body::scalar && axis != "token") return "axis = '" + axis + "' with a scalar body (must be token)";
  const Unsupported rec = can_implement_record(c.head_dim, c.group, c.bits_k, c.bits_v, rb,
                                               axis == "channel" ? TrellisAxis::channel : TrellisAxis::token);
  // The file layer stores trellis records whether or not this build can seal them.
  if (rec != Unsupported::none && rec != Unsupported::trellis_not_built)
    return std::string("configuration ") + c.name() + ": " + describe(rec);
  CodecConfig rest = c;
  rest.body = Body::scalar;  // the record checks are done; check staging, rotation, sink, tail
  rest.trellis_axis = TrellisAxis::token;
  const Unsupported u2 = can_implement(rest);
  if (u2 != Unsupported::none) return std::string("configuration ") + c.name() + ": " + describe(u2);
  if (s.n_ubatch < 1 || s.n_ubatch > kMaxUbatch) return "n_ubatch = " + u(s.n_ubatch) + " is outside [1, 2^20]";
  if (!ring_capacity_valid(c.tail, c.tail_max, c.group, s.n_ubatch))
    return "tail " + u(c.tail) + " / tail_max " + u(c.tail_max) + " are above 2^30";
  std::string d = h5::string_defect("model", s.model);
  if (d.empty()) d = h5::string_defect("source", s.source);
  if (d.empty()) d = h5::string_defect("codebooks/set", s.codebook_set);
  if (d.empty() && !s.codebook_set.empty() && c.resolved_body() != Body::trellis) d = "a table set named for a scalar body";
  return d;
}

std::string policy_defect(const Snapshot& s) {
  const CodecConfig& c = s.config;
  const uint32_t sink = c.sink, G = c.group;
  if (s.B < sink) return "B = " + u(s.B) + " < sink = " + u(sink);
  if ((s.B - sink) % G != 0)
    return "B = " + u(s.B) + " is not group-aligned: (B - sink) % group = " + u((s.B - sink) % G);
  if (s.B_prev < sink) return "B_prev = " + u(s.B_prev) + " < sink = " + u(sink);
  if (s.B_prev > s.B) return "B_prev = " + u(s.B_prev) + " > B = " + u(s.B);
  if ((s.B_prev - sink) % G != 0)
    return "B_prev = " + u(s.B_prev) + " is not group-aligned: (B_prev - sink) % group = " + u((s.B_prev - sink) % G);
  if (s.draining > 1) return "draining = " + u(s.draining) + " is not 0 or 1";
  if (s.B > sink && s.B > s.N) return "B = " + u(s.B) + " > N = " + u(s.N) + " (sealed positions never stored)";
  const uint32_t cap = ring_capacity(c.tail, c.tail_max, G, s.n_ubatch);
  if (s.n_ring() > cap)
    return "the ring holds N - max(B, sink) = " + u(s.n_ring()) + " rows, more than its capacity " + u(cap);
  return {};
}

std::string codebook_defect(const Snapshot& s, const std::string& axis, const EmbeddedCodebooks* cb) {
  const CodecConfig& c = s.config;
  if (c.resolved_body() == Body::scalar) {
    if (s.codebook_id != 0) return "codebook_id = " + h5::hex64(s.codebook_id) + " must be 0 for a scalar body";
    if (cb) return "codebooks present for a scalar body";
    return {};
  }
  if (!cb) return "a trellis body needs its codebooks embedded (/codebooks is missing)";
  if (cb->axis != axis) return "codebooks/axis = '" + cb->axis + "' differs from axis = '" + axis + "'";
  if (cb->bits_k != c.bits_k) return "codebooks/bits_k = " + u(cb->bits_k) + " differs from bits_k = " + u(c.bits_k);
  if (cb->bits_v != c.bits_v) return "codebooks/bits_v = " + u(cb->bits_v) + " differs from bits_v = " + u(c.bits_v);
  const std::vector<uint16_t>* tables[2] = {&cb->k_table, &cb->v_table};
  const uint32_t bits[2] = {c.bits_k, c.bits_v};
  const char* names[2] = {"k_table", "v_table"};
  for (int i = 0; i < 2; ++i) {
    const uint64_t want = 1ull << (6 + bits[i]);
    if (tables[i]->size() != want)
      return std::string("codebooks/") + names[i] + " has " + u(tables[i]->size()) + " entries, expected 2^(6 + " +
             u(bits[i]) + ") = " + u(want);
    const long bad = first_unusable_entry(tables[i]->data(), bits[i]);
    if (bad >= 0)
      return std::string("codebooks/") + names[i] + ": entry " + u(static_cast<uint64_t>(bad)) +
             " is NaN, infinite or larger than 64 in magnitude";
  }
  const uint64_t id = codebook_id_of(cb->k_table, cb->v_table);
  if (id != s.codebook_id)
    return "codebook_id " + h5::hex64(s.codebook_id) + " does not match the embedded codebooks (FNV-1a-64 " +
           h5::hex64(id) + ")";
  return {};
}

std::string list_defect(const Snapshot& s) {
  if (!s.token_ids.empty() && s.token_ids.size() != s.N)
    return "token_ids has " + u(s.token_ids.size()) + " entries, expected 0 or N = " + u(s.N);
  for (size_t i = 0; i < s.token_ids.size(); ++i)
    if (s.token_ids[i] < 0) return "token_ids[" + u(i) + "] = " + std::to_string(s.token_ids[i]) + " is negative";
  if (s.layers.empty()) return "no layers";
  if (s.layers.size() > h5::kMaxLayers) return "more than 65536 layers";
  std::unordered_set<uint32_t> seen;
  for (const SnapshotLayer& l : s.layers)
    if (!seen.insert(l.layer_id).second) return "layer id " + u(l.layer_id) + " appears twice";
  return {};
}

// Index of the first staging row field that is not a finite fp16 (a tq6_0 block norm, a
// q8_0 block scale, an f16 value) in `rows` rows of row_bytes, as (row, field), or false.
bool first_bad_staging(StagingType t, const std::vector<uint8_t>& bytes, uint32_t d, uint64_t* row, uint64_t* field) {
  const uint64_t rb = staging_row_bytes(t, d);
  const uint64_t rows = rb ? bytes.size() / rb : 0;
  uint32_t stride = 2, n_fields = d;
  if (t == StagingType::tq6_0) stride = kTq6BlockBytes, n_fields = d / kTq6BlockValues;
  if (t == StagingType::q8_0) stride = kQ8BlockBytes, n_fields = d / kQ8BlockValues;
  for (uint64_t r = 0; r < rows; ++r) {
    const uint8_t* p = bytes.data() + r * rb;
    for (uint32_t f = 0; f < n_fields; ++f)
      if ((load_u16(p + static_cast<size_t>(f) * stride) & 0x7c00u) == 0x7c00u) {
        *row = r;
        *field = f;
        return true;
      }
  }
  return false;
}

struct Geometry {
  uint64_t H, D, n_sink, n_groups, n_ring, ring_from, record_bytes, row_bytes;
};

Geometry geometry_of(const Snapshot& s) {
  Geometry g;
  g.H = s.kv_heads;
  g.D = s.config.head_dim;
  g.n_sink = s.n_sink();
  g.n_groups = s.n_groups();
  g.n_ring = s.n_ring();
  g.ring_from = s.ring_from();
  g.record_bytes = s.config.layout().bytes;
  g.row_bytes = staging_row_bytes(s.config.staging, s.config.head_dim);
  return g;
}

std::string layer_defect(const Snapshot& s, size_t li) {
  const SnapshotLayer& l = s.layers[li];
  const Geometry g = geometry_of(s);
  const std::string base = "layers/" + u(l.layer_id) + "/";
  const bool f16_sink = s.config.sink_type == SinkType::f16;
  // All products stay below 2^60: positions < 2^32, H <= 256, D <= 1024, records < 2^22.
  struct Want {
    const char* name;
    const char* unit;
    uint64_t size;
    size_t have;
  } wants[] = {
      {"sink_k", "values", f16_sink ? g.n_sink * g.H * g.D : 0, l.sink_k.size()},
      {"sink_v", "values", f16_sink ? g.n_sink * g.H * g.D : 0, l.sink_v.size()},
      {"sink_k_staged", "bytes", f16_sink ? 0 : g.n_sink * g.H * g.row_bytes, l.sink_k_staged.size()},
      {"sink_v_staged", "bytes", f16_sink ? 0 : g.n_sink * g.H * g.row_bytes, l.sink_v_staged.size()},
      {"body", "bytes", g.n_groups * g.H * g.record_bytes, l.body.size()},
      {"ring_k", "bytes", g.n_ring * g.H * g.row_bytes, l.ring_k.size()},
      {"ring_v", "bytes", g.n_ring * g.H * g.row_bytes, l.ring_v.size()},
  };
  for (const Want& w : wants)
    if (w.have != w.size)
      return base + w.name + " has " + u(w.have) + " " + w.unit + ", expected " + u(w.size) + " (sink_type " +
             sink_type_name(s.config.sink_type) + ", n_sink " + u(g.n_sink) + ", groups " + u(g.n_groups) +
             ", ring rows " + u(g.n_ring) + ")";
  const std::vector<uint16_t>* sinks[2] = {&l.sink_k, &l.sink_v};
  for (int i = 0; i < 2; ++i) {
    const int64_t bad = h5::first_non_finite(sinks[i]->data(), sinks[i]->size());
    if (bad >= 0)
      return base + (i ? "sink_v" : "sink_k") + ": NaN or infinity at " +
             h5::where3(static_cast<uint64_t>(bad), g.H, g.D, "position", "channel");
  }
  const char* field = s.config.staging == StagingType::tq6_0  ? "tq6_0 block norm"
                      : s.config.staging == StagingType::q8_0 ? "q8_0 block scale"
                                                              : "value";
  struct Rows {
    const char* name;
    const std::vector<uint8_t>* bytes;
    uint64_t first_pos;
  } rows[] = {{"sink_k_staged", &l.sink_k_staged, 0},
              {"sink_v_staged", &l.sink_v_staged, 0},
              {"ring_k", &l.ring_k, g.ring_from},
              {"ring_v", &l.ring_v, g.ring_from}};
  for (const Rows& r : rows) {
    uint64_t row = 0, f = 0;
    if (first_bad_staging(s.config.staging, *r.bytes, s.config.head_dim, &row, &f))
      return base + r.name + ": non-finite " + field + " at position " + u(r.first_pos + row / g.H) + ", head " +
             u(row % g.H) + (s.config.staging == StagingType::f16 ? ", channel " : ", block ") + u(f);
  }
  return {};
}

// ---- reading helpers --------------------------------------------------------------------

std::string enum_attr(const h5::Reader& r, hid_t obj, const char* name, const std::string& display,
                      const std::vector<std::string>& allowed) {
  const std::string v = r.string_attr(obj, name, display);
  std::string list;
  for (const std::string& a : allowed) {
    if (v == a) return v;
    list += (list.empty() ? "" : ", ") + a;
  }
  r.fail("attribute " + display + ": unknown value '" + v + "' (expected one of " + list + ")");
}

}  // namespace

uint64_t codebook_id_of(const std::vector<uint16_t>& k_table, const std::vector<uint16_t>& v_table) {
  uint64_t h = kFnvBasis;
  for (const std::vector<uint16_t>* t : {&k_table, &v_table})
    for (uint16_t e : *t) {
      const uint8_t b[2] = {static_cast<uint8_t>(e & 0xff), static_cast<uint8_t>(e >> 8)};
      h = fnv1a(b, 2, h);
    }
  return h;
}

EmbeddedCodebooks carried_codebooks(const Snapshot& snap) {
  EmbeddedCodebooks cb;
  cb.axis = axis_name(snap.config);
  cb.bits_k = snap.config.bits_k;
  cb.bits_v = snap.config.bits_v;
  cb.k_table = snap.codebook_k;
  cb.v_table = snap.codebook_v;
  return cb;
}

std::string snapshot_header_defect(const Snapshot& snap, const EmbeddedCodebooks* codebooks) {
  const std::string axis = axis_name(snap.config);
  std::string d = config_defect(snap, axis);
  if (d.empty()) d = policy_defect(snap);
  if (d.empty()) d = codebook_defect(snap, axis, codebooks);
  return d;
}

void check_snapshot_consistent(const Snapshot& snap, const EmbeddedCodebooks* codebooks) {
  std::string d = snapshot_header_defect(snap, codebooks);
  if (d.empty()) d = list_defect(snap);
  for (size_t i = 0; d.empty() && i < snap.layers.size(); ++i) d = layer_defect(snap, i);
  if (!d.empty()) throw std::invalid_argument("snapshot: " + d);
}

void write_snapshot(const std::string& path, const Snapshot& snap, int zstd_level, const EmbeddedCodebooks* given) {
  // Without explicit tables, the ones the snapshot carries are embedded.
  const EmbeddedCodebooks carried = carried_codebooks(snap);
  const EmbeddedCodebooks* codebooks = given;
  if (!codebooks && !snap.codebook_k.empty()) codebooks = &carried;
  check_snapshot_consistent(snap, codebooks);
  const CodecConfig& c = snap.config;
  const Geometry g = geometry_of(snap);
  const std::string axis = axis_name(c);
  AtomicOutput out(path);
  h5::write_file(out, zstd_level, [&](const h5::Writer& w, hid_t root) {
    w.attr_string(root, "sjkv_format", kSnapshotMagic);
    w.attr_u32(root, "version", h5::kFileVersion);
    w.attr_u32(root, "record_format_version", kRecordFormatVersion);
    w.attr_string(root, "config_name", c.name());
    w.attr_string(root, "model", snap.model);
    w.attr_string(root, "source", snap.source);
    w.attr_u32(root, "head_dim", c.head_dim);
    w.attr_u32(root, "kv_heads", snap.kv_heads);
    w.attr_u32(root, "group", c.group);
    w.attr_u32(root, "bits_k", c.bits_k);
    w.attr_u32(root, "bits_v", c.bits_v);
    w.attr_string(root, "body", body_name(c.resolved_body()));
    w.attr_string(root, "axis", axis);
    w.attr_string(root, "balance", balance_name(c.balance));
    w.attr_u32(root, "iters", c.iters);
    w.attr_string(root, "staging", staging_name(c.staging));
    w.attr_string(root, "sink_type", sink_type_name(c.sink_type));
    w.attr_u32(root, "sink", c.sink);
    w.attr_u32(root, "tail", c.tail);
    w.attr_u32(root, "tail_max", c.tail_max);
    w.attr_u32(root, "flush_chunk", c.flush_chunk);
    w.attr_u32(root, "rotation_block", c.rotation());
    w.attr_u32(root, "n_ubatch", snap.n_ubatch);
    w.attr_u32(root, "B", snap.B);
    w.attr_u32(root, "B_prev", snap.B_prev);
    w.attr_u32(root, "N", snap.N);
    w.attr_u32(root, "draining", snap.draining);
    w.attr_u64(root, "codebook_id", snap.codebook_id);
    w.attr_u32(root, "record_bytes", static_cast<uint32_t>(g.record_bytes));
    w.attr_u32(root, "row_bytes", static_cast<uint32_t>(g.row_bytes));
    w.layer_ids_and_tokens(root, snap.layers, snap.token_ids, snap.N, zstd_level);

    h5::Hid fp16(w.check(h5::make_fp16_type(), "fp16 type"));
    if (c.resolved_body() == Body::trellis) {
      h5::Hid cg = w.create_group(root, "codebooks");
      w.attr_string(cg.get(), "axis", codebooks->axis);
      w.attr_u32(cg.get(), "bits_k", codebooks->bits_k);
      w.attr_u32(cg.get(), "bits_v", codebooks->bits_v);
      w.attr_u32(cg.get(), "window_k", 6 + codebooks->bits_k);
      w.attr_u32(cg.get(), "window_v", 6 + codebooks->bits_v);
      w.attr_u64(cg.get(), "codebook_id", snap.codebook_id);
      if (!snap.codebook_set.empty()) w.attr_string(cg.get(), "set", snap.codebook_set);
      w.dataset(cg.get(), "k_table", "codebooks/k_table", fp16.get(), fp16.get(), 2, {codebooks->k_table.size()},
                codebooks->k_table.data(), zstd_level);
      w.dataset(cg.get(), "v_table", "codebooks/v_table", fp16.get(), fp16.get(), 2, {codebooks->v_table.size()},
                codebooks->v_table.data(), zstd_level);
    }

    h5::Hid layers = w.create_group(root, "layers");
    const std::vector<uint64_t> sink_dims = {g.n_sink, g.H, g.D};
    const std::vector<uint64_t> staged_dims = {g.n_sink, g.H, g.row_bytes};
    const std::vector<uint64_t> body_dims = {g.n_groups, g.H, g.record_bytes};
    const std::vector<uint64_t> ring_dims = {g.n_ring, g.H, g.row_bytes};
    for (const SnapshotLayer& l : snap.layers) {
      const std::string id = std::to_string(l.layer_id), base = "layers/" + id + "/";
      h5::Hid lg = w.create_group(layers.get(), id);
      const hid_t p = lg.get();
      if (c.sink_type == SinkType::f16) {
        w.dataset(p, "sink_k", base + "sink_k", fp16.get(), fp16.get(), 2, sink_dims, l.sink_k.data(), zstd_level);
        w.dataset(p, "sink_v", base + "sink_v", fp16.get(), fp16.get(), 2, sink_dims, l.sink_v.data(), zstd_level);
      } else {
        w.dataset(p, "sink_k_staged", base + "sink_k_staged", H5T_STD_U8LE, H5T_NATIVE_UINT8, 1, staged_dims,
                  l.sink_k_staged.data(), zstd_level);
        w.dataset(p, "sink_v_staged", base + "sink_v_staged", H5T_STD_U8LE, H5T_NATIVE_UINT8, 1, staged_dims,
                  l.sink_v_staged.data(), zstd_level);
      }
      w.dataset(p, "body", base + "body", H5T_STD_U8LE, H5T_NATIVE_UINT8, 1, body_dims, l.body.data(), zstd_level);
      w.dataset(p, "ring_k", base + "ring_k", H5T_STD_U8LE, H5T_NATIVE_UINT8, 1, ring_dims, l.ring_k.data(), zstd_level);
      w.dataset(p, "ring_v", base + "ring_v", H5T_STD_U8LE, H5T_NATIVE_UINT8, 1, ring_dims, l.ring_v.data(), zstd_level);
    }
    layers.close();
    fp16.close();
  });
  out.commit();
}

Snapshot read_snapshot(const std::string& path, EmbeddedCodebooks* codebooks_out) {
  const h5::ReadSession session(path);
  const h5::Reader& r = session.reader();
  const hid_t root = session.root();
  r.check_magic_version(root, kSnapshotMagic);
  r.check_version(root, "record_format_version", kRecordFormatVersion);

  // Step 4: attributes one by one.
  Snapshot s;
  CodecConfig& c = s.config;
  s.model = r.string_attr(root, "model", "model");
  s.source = r.string_attr(root, "source", "source");
  c.head_dim = r.u32_attr(root, "head_dim");
  s.kv_heads = r.u32_attr(root, "kv_heads");
  c.group = r.u32_attr(root, "group");
  c.bits_k = r.u32_attr(root, "bits_k", 2, 4);
  c.bits_v = r.u32_attr(root, "bits_v", 2, 4);
  c.body = enum_attr(r, root, "body", "body", {"scalar", "trellis"}) == "trellis" ? Body::trellis : Body::scalar;
  const std::string axis = enum_attr(r, root, "axis", "axis", {"token", "channel"});
  c.trellis_axis = axis == "channel" ? TrellisAxis::channel : TrellisAxis::token;
  c.balance = enum_attr(r, root, "balance", "balance", {"final", "best"}) == "best" ? BalanceMode::best_of
                                                                                    : BalanceMode::final_scales;
  c.iters = r.u32_attr(root, "iters");
  // The codec's names, listed in code order when refused, and its one parser.
  const std::string staging = enum_attr(r, root, "staging", "staging", staging_names_by_code());
  parse_staging(staging, &c.staging);
  c.sink_type = enum_attr(r, root, "sink_type", "sink_type", {"f16", "inherit"}) == "inherit" ? SinkType::inherit
                                                                                             : SinkType::f16;
  c.sink = r.u32_attr(root, "sink");
  c.tail = r.u32_attr(root, "tail");
  c.tail_max = r.u32_attr(root, "tail_max");
  c.flush_chunk = r.u32_attr(root, "flush_chunk");
  c.rotation_block = r.u32_attr(root, "rotation_block");
  s.n_ubatch = r.u32_attr(root, "n_ubatch");
  s.B = r.u32_attr(root, "B");
  s.B_prev = r.u32_attr(root, "B_prev");
  s.N = r.u32_attr(root, "N");
  s.draining = r.u32_attr(root, "draining");
  s.codebook_id = r.uint_attr(root, "codebook_id", "codebook_id", 0, UINT64_MAX);
  const uint32_t record_bytes = r.u32_attr(root, "record_bytes");
  const uint32_t row_bytes = r.u32_attr(root, "row_bytes");
  const std::vector<uint32_t> ids = r.u32_array_attr(root, "layer_ids", h5::kMaxLayers);

  // Steps 5-6: configuration and policy state.
  if (c.rotation_block == 0) r.fail("rotation_block = 0 (the file stores the resolved block)");
  std::string defect = config_defect(s, axis);
  if (!defect.empty()) r.fail(defect);
  const Geometry g = geometry_of(s);
  if (record_bytes != g.record_bytes)
    r.fail("attribute record_bytes = " + u(record_bytes) + " does not match the layout of " + c.name() + " (" +
           u(g.record_bytes) + ")");
  if (row_bytes != g.row_bytes)
    r.fail("attribute row_bytes = " + u(row_bytes) + " does not match " + staging + " rows of head_dim " +
           u(c.head_dim) + " (" + u(g.row_bytes) + ")");
  defect = policy_defect(s);
  if (!defect.empty()) r.fail(defect);

  // Step 7: codebooks.
  h5::Hid fp16(h5::make_fp16_type());
  if (!fp16.valid()) r.fail("cannot build the fp16 type: " + h5::last_error());
  EmbeddedCodebooks cb;
  const bool has_cb = r.has_link(root, "codebooks");
  if (has_cb) {
    if (c.resolved_body() == Body::scalar) r.fail("/codebooks is present for a scalar body");
    h5::Hid cg = r.member(root, "codebooks", "codebooks", H5I_GROUP);
    cb.axis = enum_attr(r, cg.get(), "axis", "codebooks/axis", {"token", "channel"});
    cb.bits_k = static_cast<uint32_t>(r.uint_attr(cg.get(), "bits_k", "codebooks/bits_k", 2, 4));
    cb.bits_v = static_cast<uint32_t>(r.uint_attr(cg.get(), "bits_v", "codebooks/bits_v", 2, 4));
    const uint64_t wk = r.uint_attr(cg.get(), "window_k", "codebooks/window_k", 0, UINT32_MAX);
    const uint64_t wv = r.uint_attr(cg.get(), "window_v", "codebooks/window_v", 0, UINT32_MAX);
    if (wk != 6 + cb.bits_k) r.fail("codebooks/window_k = " + u(wk) + ", expected 6 + bits_k = " + u(6 + cb.bits_k));
    if (wv != 6 + cb.bits_v) r.fail("codebooks/window_v = " + u(wv) + ", expected 6 + bits_v = " + u(6 + cb.bits_v));
    const uint64_t id = r.uint_attr(cg.get(), "codebook_id", "codebooks/codebook_id", 0, UINT64_MAX);
    if (id != s.codebook_id)
      r.fail("codebooks/codebook_id = " + h5::hex64(id) + " differs from codebook_id = " + h5::hex64(s.codebook_id));
    if (r.has_attr(cg.get(), "set")) {  // optional: absent in files written before table sets
      s.codebook_set = r.string_attr(cg.get(), "set", "codebooks/set");
      const std::string d = h5::string_defect("codebooks/set", s.codebook_set);
      if (!d.empty()) r.fail(d);
      if (s.codebook_set.empty()) r.fail("codebooks/set is empty");
    }
    std::vector<uint16_t>* tables[2] = {&cb.k_table, &cb.v_table};
    const uint64_t windows[2] = {wk, wv};
    const char* names[2] = {"k_table", "v_table"};
    for (int i = 0; i < 2; ++i) {
      const std::string display = std::string("codebooks/") + names[i];
      h5::Hid d = r.dataset(cg.get(), names[i], display, h5::Elem::fp16, {1ull << windows[i]}, "[2^window]");
      tables[i]->resize(static_cast<size_t>(1ull << windows[i]));
      r.read(d.get(), fp16.get(), tables[i]->data(), display);
    }
  }
  defect = codebook_defect(s, axis, has_cb ? &cb : nullptr);
  if (!defect.empty()) r.fail(defect);

  // Step 8: layers.
  s.layers.resize(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) s.layers[i].layer_id = ids[i];
  defect = list_defect(s);
  if (!defect.empty()) r.fail(defect);
  r.check_layer_groups(root, ids);
  h5::Hid layers = r.member(root, "layers", "layers", H5I_GROUP);

  // Steps 9-10: datasets and content.
  s.token_ids = r.token_ids(root, s.N, "[N]");

  const bool f16_sink = c.sink_type == SinkType::f16;
  const std::unordered_set<std::string> allowed =
      f16_sink ? std::unordered_set<std::string>{"sink_k", "sink_v", "body", "ring_k", "ring_v"}
               : std::unordered_set<std::string>{"sink_k_staged", "sink_v_staged", "body", "ring_k", "ring_v"};
  for (size_t i = 0; i < s.layers.size(); ++i) {
    SnapshotLayer& l = s.layers[i];
    const std::string id = std::to_string(l.layer_id), base = "layers/" + id;
    h5::Hid lg = r.member(layers.get(), id, base, H5I_GROUP);
    for (const std::string& name : r.link_names(lg.get(), base, allowed.size()))
      if (!allowed.count(name))
        r.fail("group " + base + " holds an unexpected object '" + name + "' (sink_type " + sink_type_name(c.sink_type) + ")");
    const hid_t p = lg.get();
    auto read_fp16 = [&](const char* name, std::vector<uint16_t>* out) {
      const std::string display = base + "/" + name;
      h5::Hid d = r.dataset(p, name, display, h5::Elem::fp16, {g.n_sink, g.H, g.D}, "[min(N, sink), kv_heads, head_dim]");
      out->resize(g.n_sink * g.H * g.D);
      if (!out->empty()) r.read(d.get(), fp16.get(), out->data(), display);
    };
    auto read_u8 = [&](const char* name, uint64_t rows, uint64_t inner, const char* dim_names, std::vector<uint8_t>* out) {
      const std::string display = base + "/" + name;
      h5::Hid d = r.dataset(p, name, display, h5::Elem::u8, {rows, g.H, inner}, dim_names);
      out->resize(rows * g.H * inner);
      if (!out->empty()) r.read(d.get(), H5T_NATIVE_UINT8, out->data(), display);
    };
    if (f16_sink) {
      read_fp16("sink_k", &l.sink_k);
      read_fp16("sink_v", &l.sink_v);
    } else {
      read_u8("sink_k_staged", g.n_sink, g.row_bytes, "[min(N, sink), kv_heads, row_bytes]", &l.sink_k_staged);
      read_u8("sink_v_staged", g.n_sink, g.row_bytes, "[min(N, sink), kv_heads, row_bytes]", &l.sink_v_staged);
    }
    read_u8("body", g.n_groups, g.record_bytes, "[(B - sink) / group, kv_heads, record_bytes]", &l.body);
    read_u8("ring_k", g.n_ring, g.row_bytes, "[N - max(B, sink), kv_heads, row_bytes]", &l.ring_k);
    read_u8("ring_v", g.n_ring, g.row_bytes, "[N - max(B, sink), kv_heads, row_bytes]", &l.ring_v);
    defect = layer_defect(s, i);
    if (!defect.empty()) r.fail(defect);
  }
  if (has_cb) {
    s.codebook_k = cb.k_table;
    s.codebook_v = cb.v_table;
  }
  if (codebooks_out) *codebooks_out = has_cb ? cb : EmbeddedCodebooks{};
  return s;
}

}  // namespace sjkv
