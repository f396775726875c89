// The sequence-state stream, state version 1 (docs/SPEC.md §11).
#include "sjkv/io/state_stream.h"

#include <cstring>
#include <stdexcept>

#include "byte_reader.h"
#include "sjkv/hash.h"
#include "sjkv/io/atomic_file.h"
#include "sjkv/io/encode.h"
#include "sjkv/io/paths.h"
#include "sjkv/io/snapshot_file.h"
#include "sjkv/io/text.h"
#include "sjkv/trellis.h"

namespace sjkv {

namespace {

constexpr uint32_t kMaxStreamLayers = 65536;  // as the snapshot file allows
constexpr const char* kCannot = " is an sjkv extension that state version 1 cannot express";

std::string u(uint64_t v) { return std::to_string(v); }

// Bytes of one layer's payload: sink entries, records, tail entries (docs/SPEC.md §11 "Sizes").
// In 128 bits: a hostile header's fields multiply past 2^64.
unsigned __int128 layer_payload(const CodecConfig& c, uint32_t H, uint32_t B, uint32_t N) {
  using U = unsigned __int128;
  const uint64_t row = staging_row_bytes(c.staging, c.head_dim);
  const uint64_t sink_entry = c.sink_type == SinkType::f16 ? 4ull * c.head_dim : 2 * row;
  const uint64_t n_sink = N < c.sink ? N : c.sink;
  const uint64_t groups = B > c.sink ? (B - c.sink) / c.group : 0;
  const uint64_t tail = N > B ? N - B : 0;
  return U(n_sink) * H * sink_entry + U(groups) * H * c.layout().bytes + U(tail) * H * 2 * row;
}

std::string u128(unsigned __int128 v) {
  if (v >> 64) return "more than 2^64";
  return u(static_cast<uint64_t>(v));
}

// Interleaves per-entry K and V (each `row` bytes) from `src` into k and v.
void split_entries(const uint8_t* src, uint64_t entries, uint64_t row, uint8_t* k, uint8_t* v) {
  for (uint64_t e = 0; e < entries; ++e) {
    std::memcpy(k + e * row, src + 2 * e * row, row);
    std::memcpy(v + e * row, src + 2 * e * row + row, row);
  }
}

}  // namespace

std::string state_stream_refusal(const Snapshot& s) {
  const CodecConfig& c = s.config;
  if (s.layers.empty()) return "no layers";
  if (c.staging == StagingType::q8_0) return std::string("q8_0 staging") + kCannot + " (it has tq6_0 and f16)";
  if (c.balance != BalanceMode::final_scales) return std::string("best-of balancing (KVarN sealing)") + kCannot;
  if (c.resolved_body() == Body::trellis) {
    if (c.trellis_axis != TrellisAxis::token) return std::string("the channel trellis axis") + kCannot;
    if (c.bits_k > 3 || c.bits_v > 3)
      return "a " + u(c.bits_k) + "/" + u(c.bits_v) + " trellis (4-bit trellis)" + kCannot + " (it has 3/3, 3/2, 2/2)";
  }
  if (c.rotation() != c.head_dim)
    return "a rotation block of " + u(c.rotation()) + " over head_dim " + u(c.head_dim) + kCannot +
           " (it rotates the whole head)";
  return {};
}

std::vector<uint8_t> state_stream_bytes(const Snapshot& s) {
  const std::string why = state_stream_refusal(s);
  if (!why.empty()) throw std::invalid_argument(why);
  const EmbeddedCodebooks cb = carried_codebooks(s);
  check_snapshot_consistent(s, s.config.resolved_body() == Body::trellis ? &cb : nullptr);
  const CodecConfig& c = s.config;
  const uint64_t layer = static_cast<uint64_t>(layer_payload(c, s.kv_heads, s.B, s.N));
  const uint64_t payload = layer * s.layers.size();
  std::vector<uint8_t> o(kStateMagic, kStateMagic + 8);
  o.reserve(kStateHeaderBytes + payload + kStateChecksumBytes);
  for (uint32_t v : {kStateVersion, kRecordFormatVersion, kStateHeaderBytes, c.head_dim, s.kv_heads, c.group, c.sink,
                     static_cast<uint32_t>(c.sink_type), c.bits_k, c.bits_v, c.resolved_body() == Body::trellis ? 1u : 0u,
                     c.iters, static_cast<uint32_t>(c.staging), c.tail, c.tail_max, c.flush_chunk, 1u, c.head_dim})
    bin::put_u32(o, v);
  bin::put_u64(o, s.codebook_id);
  for (uint32_t v : {static_cast<uint32_t>(s.layers.size()), s.N, s.B, s.B_prev, s.draining}) bin::put_u32(o, v);
  bin::put_u64(o, payload);
  o.resize(kStateHeaderBytes, 0);  // reserved bytes 116-127
  for (uint32_t l = 0; l < s.layers.size(); ++l)
    for (Region r : {Region::sink, Region::body, Region::ring}) {
      const std::vector<uint8_t> b = dump_region(s, l, r);
      o.insert(o.end(), b.begin(), b.end());
    }
  if (o.size() != kStateHeaderBytes + payload) throw std::logic_error("state stream: payload size");
  bin::put_u64(o, fnv1a(o.data(), o.size()));
  return o;
}

void write_state_stream(const std::string& path, const Snapshot& snap) {
  const std::vector<uint8_t> bytes = state_stream_bytes(snap);
  write_file_atomic(path, bytes.data(), bytes.size());
}

StateHeader peek_state_stream(const uint8_t* p, uint64_t size, const std::string& name) {
  auto fail = [&](const std::string& d) { throw FileError(name, d); };
  const uint64_t min_size = kStateHeaderBytes + kStateChecksumBytes;
  if (size < 8) fail("truncated: " + u(size) + " bytes, a sequence-state stream starts with an 8-byte magic");
  if (std::memcmp(p, kStateMagic, 8) != 0) fail("not a sequence-state stream (the magic is not \"SJKVSEQ\\0\")");
  if (size < 16) fail("truncated: " + u(size) + " bytes, the state version ends at byte 16");
  StateHeader h;
  h.state_version = bin::get_u32(p + 8);
  if (h.state_version != kStateVersion) fail("state version " + u(h.state_version) + ", this reader knows 1");
  if (size < min_size) fail("truncated: " + u(size) + " bytes, the header and checksum need " + u(min_size));
  h.format_version = bin::get_u32(p + 12);
  h.header_bytes = bin::get_u32(p + 16);
  if (h.header_bytes != kStateHeaderBytes) fail("header bytes = " + u(h.header_bytes) + ", expected 128");
  h.payload_bytes = bin::get_u64(p + 108);
  if (h.payload_bytes > size - min_size)
    fail("truncated: the header's payload of " + u(h.payload_bytes) + " bytes needs a stream of " +
         u128(static_cast<unsigned __int128>(h.payload_bytes) + min_size) + " bytes, the file has " + u(size));
  h.checksum = bin::get_u64(p + kStateHeaderBytes + h.payload_bytes);
  const uint64_t sum = fnv1a(p, kStateHeaderBytes + h.payload_bytes);
  if (sum != h.checksum)
    fail("checksum mismatch: stored " + hex64(h.checksum) + ", the header and payload hash to " + hex64(sum));
  if (h.format_version != kRecordFormatVersion)
    fail("record format version " + u(h.format_version) + ", this reader knows 1");
  for (uint32_t i = 116; i < kStateHeaderBytes; ++i)
    if (p[i] != 0) fail("reserved header bytes 116-127 are not zero");
  uint32_t* f[] = {&h.head_dim, &h.n_head_kv, &h.group,   &h.sink,      &h.sink_type,   &h.bits_k,
                   &h.bits_v,   &h.body,      &h.iters,   &h.staging,   &h.tail,        &h.tail_max,
                   &h.flush_chunk, &h.rotation_id, &h.rotation_size};
  for (size_t i = 0; i < sizeof f / sizeof f[0]; ++i) *f[i] = bin::get_u32(p + 20 + 4 * i);
  h.codebook_id = bin::get_u64(p + 80);
  h.n_layers = bin::get_u32(p + 88);
  h.N = bin::get_u32(p + 92);
  h.B = bin::get_u32(p + 96);
  h.B_prev = bin::get_u32(p + 100);
  h.draining = bin::get_u32(p + 104);
  return h;
}

Snapshot parse_state_stream(const uint8_t* p, uint64_t size, const std::string& name, const StateImportOptions& opt) {
  auto fail = [&](const std::string& d) { throw FileError(name, d); };
  const StateHeader h = peek_state_stream(p, size, name);
  if (h.sink_type > 1) fail("sink_type = " + u(h.sink_type) + " is not 0 (f16) or 1 (inherit)");
  if (h.body > 1) fail("body = " + u(h.body) + " is not 0 (scalar) or 1 (trellis)");
  if (h.staging > 1) fail("staging = " + u(h.staging) + " is not a state-version-1 staging type (0 tq6_0, 1 f16)");
  if (h.rotation_id != 1) fail("rotation id = " + u(h.rotation_id) + ", state version 1 knows 1 (Hadamard over the head)");
  if (h.rotation_size != h.head_dim)
    fail("rotation size = " + u(h.rotation_size) + " differs from head_dim = " + u(h.head_dim));
  if (h.body == 1 && (h.bits_k > 3 || h.bits_v > 3))
    fail("a " + u(h.bits_k) + "/" + u(h.bits_v) + " trellis is not in state version 1 (it has 3/3, 3/2, 2/2)");
  if (h.n_layers == 0) fail("no layers (n_layers = 0)");
  if (h.n_layers > kMaxStreamLayers) fail("n_layers = " + u(h.n_layers) + " is above 65536");

  Snapshot s;
  CodecConfig& c = s.config;
  c.head_dim = h.head_dim;
  c.group = h.group;
  c.bits_k = h.bits_k;
  c.bits_v = h.bits_v;
  c.body = h.body ? Body::trellis : Body::scalar;
  c.iters = h.iters;
  c.staging = static_cast<StagingType>(h.staging);
  c.sink_type = static_cast<SinkType>(h.sink_type);
  c.sink = h.sink;
  c.tail = h.tail;
  c.tail_max = h.tail_max;
  c.flush_chunk = h.flush_chunk;
  c.rotation_block = h.head_dim;
  s.kv_heads = h.n_head_kv;
  s.n_ubatch = opt.n_ubatch;
  s.B = h.B;
  s.B_prev = h.B_prev;
  s.N = h.N;
  s.draining = h.draining;
  s.codebook_id = h.codebook_id;
  s.source = "sequence-state stream " + base_name(name);

  EmbeddedCodebooks cb;
  const bool trellis = h.body == 1;
  if (trellis && h.bits_k >= 2 && h.bits_v >= 2) {
    cb.bits_k = h.bits_k;
    cb.bits_v = h.bits_v;
    bool given = false;
    for (int side = 0; side < 2; ++side) {
      const uint32_t bits = side ? h.bits_v : h.bits_k;
      std::vector<uint16_t>& t = side ? cb.v_table : cb.k_table;
      for (const RawCodebook& r : opt.codebooks)
        if (r.bits == bits) {
          t = side ? r.v : r.k;
          given = true;
        }
      if (t.empty()) {
        const uint16_t* b = codebook_table(TrellisCodebooks{}, side ? Side::v : Side::k, bits);
        t.assign(b, b + (size_t{1} << (6 + bits)));
      }
    }
    const uint64_t id = codebook_id_of(cb.k_table, cb.v_table);
    if (id != h.codebook_id)
      fail("codebook identity " + hex64(h.codebook_id) + " is not that of the " +
           (given ? "given tables" : "built-in reference tables") + " (" + hex64(id) +
           "); give the tables it was sealed with (--codebook)");
    s.codebook_k = cb.k_table;
    s.codebook_v = cb.v_table;
  }
  const std::string d = snapshot_header_defect(s, trellis ? &cb : nullptr);
  if (!d.empty()) fail(d);

  const unsigned __int128 layer = layer_payload(c, h.n_head_kv, h.B, h.N);
  const unsigned __int128 want = layer * h.n_layers;
  if (want != h.payload_bytes)
    fail("payload bytes = " + u(h.payload_bytes) + ", the header's geometry needs " + u128(want) + " (" +
         u(h.n_layers) + " layers x " + u128(layer) + ")");
  if (size != kStateHeaderBytes + h.payload_bytes + kStateChecksumBytes)
    fail(u(size - kStateHeaderBytes - h.payload_bytes - kStateChecksumBytes) + " bytes after the checksum");

  const uint32_t H = h.n_head_kv, D = h.head_dim;
  const uint64_t row = staging_row_bytes(c.staging, D);
  const uint64_t sink_entries = static_cast<uint64_t>(s.n_sink()) * H;
  const uint64_t body_bytes = static_cast<uint64_t>(s.n_groups()) * H * c.layout().bytes;
  const uint64_t ring_entries = static_cast<uint64_t>(s.n_ring()) * H;
  const uint8_t* q = p + kStateHeaderBytes;
  for (uint32_t l = 0; l < h.n_layers; ++l) {
    SnapshotLayer sl;
    sl.layer_id = l;
    if (c.sink_type == SinkType::f16) {
      sl.sink_k.resize(sink_entries * D);
      sl.sink_v.resize(sink_entries * D);
      for (uint64_t e = 0; e < sink_entries; ++e)
        for (uint32_t i = 0; i < D; ++i) {
          sl.sink_k[e * D + i] = bin::get_u16(q + (e * 2 * D + i) * 2);
          sl.sink_v[e * D + i] = bin::get_u16(q + (e * 2 * D + D + i) * 2);
        }
      q += sink_entries * 4 * D;
    } else {
      sl.sink_k_staged.resize(sink_entries * row);
      sl.sink_v_staged.resize(sink_entries * row);
      split_entries(q, sink_entries, row, sl.sink_k_staged.data(), sl.sink_v_staged.data());
      q += sink_entries * 2 * row;
    }
    sl.body.assign(q, q + body_bytes);
    q += body_bytes;
    sl.ring_k.resize(ring_entries * row);
    sl.ring_v.resize(ring_entries * row);
    split_entries(q, ring_entries, row, sl.ring_k.data(), sl.ring_v.data());
    q += ring_entries * 2 * row;
    s.layers.push_back(std::move(sl));
  }
  try {
    check_snapshot_consistent(s, trellis ? &cb : nullptr);
  } catch (const std::invalid_argument& e) {
    fail(e.what());
  }
  return s;
}

Snapshot read_state_stream(const std::string& path, const StateImportOptions& opt) {
  const bin::InputFile f = bin::InputFile::open(path);
  return parse_state_stream(f.data(), f.size(), path, opt);
}

}  // namespace sjkv
