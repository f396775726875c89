// sjkv-encode: argument parsing and calls into the libraries, nothing else.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cinttypes>
#include <cstdint>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "sjkv/parallel.h"
#include "cli_common.h"
#include "sjkv/cache.h"
#include "sjkv/demo.h"
#include "sjkv/device.h"
#include "sjkv/io/atomic_file.h"
#include "sjkv/io/capture_file.h"
#include "sjkv/io/codebook.h"
#include "sjkv/io/encode.h"
#include "sjkv/io/load.h"
#include "sjkv/io/model_geometry.h"
#include "sjkv/io/snapshot_file.h"
#include "sjkv/io/table_set.h"
#include "sjkv/io/state_stream.h"
#include "sjkv/plan.h"
#include "sjkv/policy.h"

using namespace sjkv;
using sjkv::cli::check_codec_options;
using sjkv::cli::check_output;
using sjkv::cli::non_negative;

namespace {

constexpr const char* kTool = "sjkv-encode";

// A state file's layers from --model: the model's architecture and attention shapes refused
// first, as sjkv-replay refuses them (exit 2 naming the file).
ImportOptions import_options(const cli::StateOptions& s) {
  if (!s.model.empty()) (void)supported_geometry(GgufFile::open(s.model), ModelUse::geometry);
  return s.resolve();
}

struct EncodeArgs {
  std::string input, output, bits = "4/4", body = "auto", staging = "tq6_0", sink_type = "f16", device = "auto";
  std::string axis = "token";
  std::vector<std::string> codebooks;
  uint32_t sink = 128, tail = 4096, tail_max = 8192, ubatch = 512, iters = 16, group = 128;
  cli::StateOptions state;
  bool kvarn = false, assume_rotated = false, quiet = false;
  int threads = 0;
  bool tail_given = false, tail_max_given = false;
};

CodecConfig config_from(const EncodeArgs& a) {
  unsigned bk = 0, bv = 0;
  char extra = 0;
  if (std::sscanf(a.bits.c_str(), "%u/%u%c", &bk, &bv, &extra) != 2)
    throw cli::UsageError("--bits must look like K/V, e.g. 4/4 or 3/2, not '" + a.bits + "'");
  CodecConfig c;
  if (a.kvarn) {
    c = kvarn_config(0, bk, bv, a.tail_given ? a.tail : 0);
    if (a.tail_max_given) c.tail_max = a.tail_max;
  } else {
    c.bits_k = bk;
    c.bits_v = bv;
    c.tail = a.tail;
    c.tail_max = a.tail_max;
    c.iters = a.iters;
    c.body = a.body == "scalar" ? Body::scalar : a.body == "trellis" ? Body::trellis : Body::automatic;
    c.trellis_axis = a.axis == "channel" ? TrellisAxis::channel : TrellisAxis::token;
    if (!parse_staging(a.staging, &c.staging)) throw cli::UsageError("--staging must be tq6_0, q8_0 or f16");
  }
  c.sink = a.sink;
  c.sink_type = a.sink_type == "inherit" ? SinkType::inherit : SinkType::f16;
  c.group = a.group;
  return c;
}



int run_encode(const EncodeArgs& a) {
  if (a.group > kMaxSnapshotGroup)  // the codec seals larger groups; the snapshot file holds none
    throw cli::UsageError("--group: " + std::to_string(a.group) + " is above " + std::to_string(kMaxSnapshotGroup) +
                          ", the largest a snapshot holds");
  check_codec_options(config_from(a));
  // --codebook: one word (auto, reference, a shipped set's name) or table files.
  const bool word = a.codebooks.size() == 1 && (a.codebooks[0] == "auto" || a.codebooks[0] == "reference" ||
                                                find_table_set(a.codebooks[0]) != nullptr);
  std::vector<std::string> inputs = word ? std::vector<std::string>() : a.codebooks;
  inputs.push_back(a.input);
  check_output(a.output, "-o", inputs);
  const Device device = Device::resolve(a.device);
  const Capture cap = load_capture_any(a.input, import_options(a.state));
  EncodeOptions eo;
  eo.config = config_from(a);
  eo.config.head_dim = cap.head_dim;
  eo.n_ubatch = a.ubatch;
  // Raw table files, at most one per bit width; each side takes the file of its width.
  std::vector<RawCodebook> tables;
  std::string set_name;
  const bool trellis = eo.config.resolved_body() == Body::trellis && eo.config.trellis_axis == TrellisAxis::token;
  if (a.codebooks.empty() || word) {
    const TableChoice choice = TableChoice::parse(word ? a.codebooks[0] : "auto");
    if (choice.kind == TableChoice::Kind::named && !trellis)
      throw cli::UsageError("--codebook " + choice.set->name + ": a table set applies to token-axis trellis bodies; " +
                            "this encode seals " + eo.config.name());
    if (trellis) {
      std::unique_ptr<ModelGeometry> g;
      if (!a.state.model.empty())
        g = std::make_unique<ModelGeometry>(supported_geometry(GgufFile::open(a.state.model), ModelUse::geometry));
      const TableSet* set = choice.resolve(g.get(), eo.config.bits_k, eo.config.bits_v);
      if (choice.kind == TableChoice::Kind::named && !set)
        throw cli::UsageError("--codebook " + choice.set->name + " has no " + std::to_string(eo.config.bits_k) + "-bit or " +
                              std::to_string(eo.config.bits_v) + "-bit table");
      if (set) eo.codebooks = set->tables_for(eo.config.bits_k, eo.config.bits_v);
      if (set) set_name = set->name;  // the format's tables are the default: no name, the same bytes as before
    }
  }
  for (const std::string& f : word ? std::vector<std::string>() : a.codebooks) {
    sjkv::CodebookFileKind kind;
    const sjkv::CodebookContainer box = sjkv::read_codebook_any(f, &kind);  // .sjcb, raw table or C header
    const bool ch = eo.config.trellis_axis == TrellisAxis::channel;
    if (kind == sjkv::CodebookFileKind::container && (box.axis == sjkv::CodebookAxis::channel) != ch)
      throw cli::UsageError("--codebook " + f + " was trained for the " + sjkv::axis_name(box.axis) +
                            " axis; this encode uses the " + (ch ? "channel" : "token") + " axis (--axis)");
    tables.push_back(box.table);
    for (size_t i = 0; i + 1 < tables.size(); ++i)
      if (tables[i].bits == tables.back().bits)
        throw cli::UsageError("--codebook given twice for " + std::to_string(tables.back().bits) + "-bit tables");
  }
  if (!tables.empty()) {
    if (eo.config.resolved_body() != Body::trellis)
      throw cli::UsageError("--codebook applies to trellis bodies; " + a.bits + " here seals a scalar body");
    for (size_t i = 0; i < tables.size(); ++i) {
      const bool used_k = tables[i].bits == eo.config.bits_k, used_v = tables[i].bits == eo.config.bits_v;
      if (!used_k && !used_v)
        throw cli::UsageError("--codebook " + a.codebooks[i] + " holds " + std::to_string(tables[i].bits) +
                              "-bit tables; --bits " + a.bits + " uses none");
      if (used_k) eo.codebooks.k = tables[i].k.data();
      if (used_v) eo.codebooks.v = tables[i].v.data();
    }
  }
  eo.assume_rotated = a.assume_rotated;
  eo.threads = a.threads;
  cli::Progress bar("encoding", a.quiet);
  eo.progress = bar.callback();
  eo.sealer = device.sealer();
  Snapshot snap;
  try {
    snap = encode_capture(cap, eo);
  } catch (const std::invalid_argument& e) {
    throw FileError(a.input, e.what());
  }
  bar.finish();
  snap.codebook_set = set_name;
  write_snapshot(a.output, snap);
  if (!a.quiet)
    std::fprintf(stderr, "%s: %s: %u layers, %u tokens, B=%u -> %s (%s%s, device %s)\n", kTool, a.input.c_str(),
                 static_cast<unsigned>(snap.layers.size()), snap.N, snap.B, a.output.c_str(),
                 snap.config.name().c_str(), set_name.empty() ? "" : (", tables " + set_name).c_str(),
                 device.describe().c_str());
  return cli::kOk;
}

// What a sequence-state stream does not hold: the ubatch and any trained trellis tables.
struct StreamArgs {
  uint32_t ubatch = 512;
  std::vector<std::string> codebooks;
};

StateImportOptions stream_options(const StreamArgs& a) {
  StateImportOptions o;
  o.n_ubatch = a.ubatch;
  for (const std::string& f : a.codebooks) {
    sjkv::CodebookFileKind kind;
    o.codebooks.push_back(sjkv::read_codebook_any(f, &kind).table);
  }
  return o;
}

void add_stream_options(CLI::App* c, StreamArgs& a, const char* what) {
  c->add_option("--ubatch", a.ubatch, std::string(what) + ": the ubatch the sequence runs with (the stream does not "
                                      "store it; the ring capacity depends on it)")
      ->check(CLI::Range(1u, 1u << 20))->capture_default_str();
  c->add_option("--codebook", a.codebooks, std::string(what) + ": trellis tables (.sjcb, raw .bin or C header) the "
                                           "stream's codebook identity names, when not the built-in ones");
}

RegionBits occupied_of(const Snapshot& s) { return occupied_bits(s.config, s.B, s.N); }

RegionBits allocated_of(const Snapshot& s) {
  const uint32_t cap = ring_capacity(s.config.tail, s.config.tail_max, s.config.group, s.n_ubatch);
  return allocated_bits(s.config, s.N, cap, s.B, s.N);
}

int run_inspect(const std::string& path, const std::string& against, const cli::StateOptions& state, const StreamArgs& sa,
                bool json) {
  const Snapshot s = read_snapshot_any(path, stream_options(sa));
  std::vector<RegionComparison> cmp;
  if (!against.empty()) {
    const Capture ref = load_capture_any(against, import_options(state));
    try {
      cmp = compare_snapshot(s, ref);
    } catch (const std::invalid_argument& e) {
      throw FileError(against, e.what());
    }
  }
  const CodecConfig& c = s.config;
  const RegionBits occ = occupied_of(s), alloc = allocated_of(s);
  const uint32_t cap = ring_capacity(c.tail, c.tail_max, c.group, s.n_ubatch);
  const double note = note_effective_bits(s.N, c.sink, s.N > s.B ? s.N - s.B : 0, record_bits_per_value(c.layout()),
                                          staging_bits_per_value(c.staging, c.head_dim));
  const uint64_t layers = s.layers.size(), heads = s.kv_heads;
  std::ostringstream o;
  auto stats_json = [](const ErrorStats& e) -> std::string {
    if (e.values == 0) return "{\"values\": 0, \"mse\": null, \"snr_db\": null, \"max_abs\": null, \"cosine\": null}";
    return "{\"values\": " + std::to_string(e.values) + ", \"mse\": " + json_number(e.mse) + ", \"snr_db\": " +
           json_number(e.snr_db) + ", \"max_abs\": " + json_number(e.max_abs) + ", \"cosine\": " + json_number(e.cosine) + "}";
  };
  if (json) {
    o << "{\n  \"file\": " << json_string(path) << ",\n  \"config\": " << json_string(c.name()) << ",\n";
    o << "  \"format_version\": 1, \"bits_k\": " << c.bits_k << ", \"bits_v\": " << c.bits_v << ", \"body\": "
      << json_string(c.resolved_body() == Body::trellis ? "trellis" : "scalar") << ", \"group\": " << c.group
      << ", \"sink\": " << c.sink << ", \"sink_type\": " << json_string(c.sink_type == SinkType::f16 ? "f16" : "inherit")
      << ", \"staging\": " << json_string(staging_name(c.staging)) << ", \"tail\": " << c.tail
      << ", \"tail_max\": " << c.tail_max << ", \"head_dim\": " << c.head_dim << ", \"kv_heads\": " << s.kv_heads
      << ", \"layers\": " << layers << ", \"n_ubatch\": " << s.n_ubatch << ",\n";
    o << "  \"model\": " << json_string(s.model) << ", \"source\": " << json_string(s.source) << ",\n";
    o << "  \"policy\": {\"N\": " << s.N << ", \"B\": " << s.B << ", \"B_prev\": " << s.B_prev
      << ", \"draining\": " << s.draining << "}, \"codebook_id\": " << json_string(hex64(s.codebook_id))
      << ", \"codebook_set\": " << json_string(s.codebook_set) << ",\n";
    auto region_json = [&](const char* name, uint32_t from, uint32_t to, uint64_t ob, uint64_t ab, uint64_t vals) {
      return std::string("    ") + json_string(name) + ": {\"from\": " + std::to_string(from) + ", \"to\": " +
             std::to_string(to) + ", \"bytes_per_layer_head\": " + std::to_string(ob) + ", \"bytes_total\": " +
             std::to_string(ob * layers * heads) + ", \"bits_per_value\": " +
             json_number(RegionBits::ratio(ob, vals)) + ", \"share_occupied\": " + json_number(RegionBits::ratio(ob, occ.values)) +
             ", \"allocated_bytes_total\": " + std::to_string(ab * layers * heads) + "}";
    };
    o << "  \"regions\": {\n"
      << region_json("sink", 0, s.n_sink(), occ.sink_bytes, alloc.sink_bytes, occ.sink_values) << ",\n"
      << region_json("body", c.sink, s.B, occ.body_bytes, alloc.body_bytes, occ.body_values) << ",\n"
      << region_json("ring", s.ring_from(), s.N, occ.ring_bytes, alloc.ring_bytes, occ.ring_values) << "\n  },\n";
    o << "  \"bits_per_value\": {\"occupied\": " << json_number(occ.total_bits()) << ", \"allocated\": "
      << json_number(alloc.total_bits()) << ", \"note_formula\": " << json_number(note) << ", \"ring_capacity\": " << cap
      << "}";
    if (!cmp.empty()) {
      o << ",\n  \"against\": [\n";
      for (size_t i = 0; i < cmp.size(); ++i)
        o << "    {\"layer\": " << cmp[i].layer_id << ", \"sink\": " << stats_json(cmp[i].sink) << ", \"body\": "
          << stats_json(cmp[i].body) << ", \"ring\": " << stats_json(cmp[i].ring) << ", \"all\": "
          << stats_json(cmp[i].all) << "}" << (i + 1 < cmp.size() ? ",\n" : "\n");
      o << "  ]";
    }
    o << "\n}\n";
    std::cout << o.str();
    return cli::kOk;
  }
  char line[512];
  o << "snapshot " << path << "\n";
  o << "  config      " << c.name() << "\n";
  o << "  format      record format version 1, body " << (c.resolved_body() == Body::trellis ? "trellis" : "scalar")
    << ", sink type " << (c.sink_type == SinkType::f16 ? "f16" : "inherit") << ", ubatch " << s.n_ubatch << "\n";
  o << "  geometry    " << layers << " layers x " << s.kv_heads << " kv heads x head_dim " << c.head_dim << "\n";
  o << "  model       " << (s.model.empty() ? "-" : s.model) << "   source " << (s.source.empty() ? "-" : s.source) << "\n";
  std::snprintf(line, sizeof line, "  policy      N=%u B=%u B_prev=%u draining=%u   codebook id %s\n", s.N, s.B,
                s.B_prev, s.draining, hex64(s.codebook_id).c_str());
  o << line;
  if (c.resolved_body() == Body::trellis)
    o << "  tables      "
      << (!s.codebook_set.empty() ? "shipped set " + s.codebook_set
          : s.codebook_id == codebook_id(c.bits_k, c.bits_v) && c.trellis_axis == TrellisAxis::token
              ? std::string("the format's (reference)")
              : std::string("from files (embedded)"))
      << "\n";
  o << "\n";
  o << "| region | positions | bytes (all layers) | bits/value in region | share of occupied bpv | allocated bytes |\n";
  o << "|---|---|--:|--:|--:|--:|\n";
  auto row = [&](const char* name, uint32_t from, uint32_t to, uint64_t ob, uint64_t ab, uint64_t vals) {
    std::snprintf(line, sizeof line, "| %s | [%u, %u) | %llu | %.4f | %.4f | %llu |\n", name, from, to,
                  static_cast<unsigned long long>(ob * layers * heads), RegionBits::ratio(ob, vals),
                  RegionBits::ratio(ob, occ.values), static_cast<unsigned long long>(ab * layers * heads));
    o << line;
  };
  row("sink", 0, s.n_sink(), occ.sink_bytes, alloc.sink_bytes, occ.sink_values);
  row("body", c.sink, s.B, occ.body_bytes, alloc.body_bytes, occ.body_values);
  row("ring", s.ring_from(), s.N, occ.ring_bytes, alloc.ring_bytes, occ.ring_values);
  std::snprintf(line, sizeof line,
                "\nbits per value: occupied %.4f, allocated %.4f (ring of %u rows, body for %u positions); note's "
                "formula %.4f\n",
                occ.total_bits(), alloc.total_bits(), cap, s.N, note);
  o << line;
  if (!cmp.empty()) {
    o << "\nagainst " << against << " (rotated basis, K and V together)\n\n";
    o << "| layer | region | values | MSE | SNR dB | max abs err | cosine |\n|--:|---|--:|--:|--:|--:|--:|\n";
    for (const auto& rc : cmp) {
      const std::pair<const char*, const ErrorStats*> regs[] = {
          {"sink", &rc.sink}, {"body", &rc.body}, {"ring", &rc.ring}, {"all", &rc.all}};
      for (const auto& r : regs) {
        if (!r.second->values) continue;
        std::snprintf(line, sizeof line, "| %u | %s | %llu | %.4g | %.2f | %.4g | %.6f |\n", rc.layer_id, r.first,
                      static_cast<unsigned long long>(r.second->values), r.second->mse, r.second->snr_db,
                      r.second->max_abs, r.second->cosine);
        o << line;
      }
    }
  }
  std::cout << o.str();
  return cli::kOk;
}

int run_decode(const std::string& in, const std::string& out, const StreamArgs& sa, bool rotated, bool quiet) {
  check_output(out, "-o", {in});
  const Snapshot s = read_snapshot_any(in, stream_options(sa));
  Capture cap;
  try {
    cap = decode_snapshot(s, rotated);
  } catch (const std::invalid_argument& e) {
    throw FileError(in, e.what());
  }
  write_capture(out, cap);
  if (!quiet) std::fprintf(stderr, "%s: %s -> %s (%u tokens, %s basis)\n", kTool, in.c_str(), out.c_str(), cap.tokens,
                           rotated ? "rotated" : "model");
  return cli::kOk;
}

int run_dump(const std::string& in, uint32_t layer, const std::string& region, const std::string& out) {
  check_output(out, "-o", {in});
  const Snapshot s = read_snapshot_any(in);
  uint32_t index = static_cast<uint32_t>(s.layers.size());
  for (uint32_t i = 0; i < s.layers.size(); ++i)
    if (s.layers[i].layer_id == layer) index = i;
  if (index == s.layers.size()) {
    std::string ids;
    for (const auto& l : s.layers) ids += (ids.empty() ? "" : ", ") + std::to_string(l.layer_id);
    throw FileError(in, "has no layer " + std::to_string(layer) + " (layers: " + ids + ")");
  }
  const Region r = region == "sink" ? Region::sink : region == "body" ? Region::body : Region::ring;
  const std::vector<uint8_t> bytes = dump_region(s, index, r);
  AtomicOutput ao(out);
  write_file_bytes(ao.temp_path(), bytes.data(), bytes.size(), out);
  ao.commit();
  return cli::kOk;
}

int run_export(const std::string& in, const std::string& out, bool quiet) {
  check_output(out, "-o", {in});
  const Snapshot s = read_snapshot_any(in);
  const std::string why = state_stream_refusal(s);
  if (!why.empty()) throw FileError(in, "cannot be written as a sequence-state stream: " + why);
  const std::vector<uint8_t> bytes = state_stream_bytes(s);
  write_file_atomic(out, bytes.data(), bytes.size());
  if (quiet) return cli::kOk;
  std::fprintf(stderr, "%s: %s -> %s (sequence-state stream v1, %zu bytes, %zu layers, N=%u B=%u, %s)\n", kTool,
               in.c_str(), out.c_str(), bytes.size(), s.layers.size(), s.N, s.B, s.config.name().c_str());
  bool renumbered = false;
  for (size_t i = 0; i < s.layers.size(); ++i) renumbered |= s.layers[i].layer_id != i;
  if (renumbered)
    std::fprintf(stderr, "%s: note: the stream numbers layers 0..%zu; the snapshot's layer ids and model, source and "
                         "token ids are not part of it\n", kTool, s.layers.size() - 1);
  return cli::kOk;
}

int run_import(const std::string& in, const std::string& out, const StreamArgs& sa, bool quiet) {
  std::vector<std::string> inputs = sa.codebooks;
  inputs.push_back(in);
  check_output(out, "-o", inputs);
  const StateImportOptions opt = stream_options(sa);
  const Snapshot s = read_state_stream(in, opt);
  write_snapshot(out, s);
  if (!quiet)
    std::fprintf(stderr, "%s: %s -> %s (%zu layers, N=%u B=%u, %s, ubatch %u)\n", kTool, in.c_str(), out.c_str(),
                 s.layers.size(), s.N, s.B, s.config.name().c_str(), s.n_ubatch);
  return cli::kOk;
}

struct PlanArgs {
  uint32_t layers = 0, kv_heads = 0, head_dim = 0, ubatch = 1024;
  std::string model, budget;
  std::vector<uint64_t> contexts;
  bool json = false, note_rule = false, note_12gb = false;
};

// A hybrid model's recurrent state per sequence, as plan reports it beside the KV cache: llama.cpp
// keeps it in f32, the note counts it at 16 bits (its section 7), and the KV + state columns
// use the note's width.
struct StateReport {
  bool any = false;
  uint64_t layers = 0, conv_values = 0, delta_values = 0, values = 0, bytes32 = 0, bytes16 = 0;
  uint32_t conv_rows = 0;  // conv_kernel - 1
  uint64_t conv_dim = 0;
  uint32_t state_size = 0, inner_size = 0;
};

StateReport state_report(const ModelGeometry& mg) {
  StateReport r;
  if (!mg.recurrent.known()) return r;
  r.any = true;
  r.layers = mg.recurrent_layers().size();
  r.conv_rows = mg.recurrent.conv_kernel - 1;
  r.conv_dim = mg.recurrent.conv_dim();
  r.state_size = mg.recurrent.state_size;
  r.inner_size = mg.recurrent.inner_size;
  r.conv_values = mg.recurrent.conv_values();
  r.delta_values = mg.recurrent.delta_values();
  r.values = mg.recurrent_state_values();
  r.bytes32 = mg.recurrent_state_bytes(32);
  r.bytes16 = mg.recurrent_state_bytes(16);
  return r;
}

// A model's sliding-window layers as plan reports them: a cache bounded by the window, in every
// format the same (the note keeps Gemma 4's at q8_0 in every arm).
struct SlidingReport {
  size_t layers = 0;
  uint64_t values_per_cell = 0, cells = 0;
  uint32_t window = 0;
  uint64_t bytes(BlockFormat f) const {
    const BlockFormatInfo& b = format_info(f);
    return (values_per_cell * cells + b.block_values - 1) / b.block_values * b.block_bytes;
  }
};

int run_plan(const PlanArgs& a) {
  CacheGeometry g;
  std::string what;
  StateReport st;
  SlidingReport sw;
  uint32_t n_layers = 0;
  if (!a.model.empty()) {
    const GgufFile f = GgufFile::open(a.model);
    const ModelGeometry mg = supported_geometry(f, ModelUse::geometry);
    g = mg.cache_geometry();
    what = a.model + " (" + mg.architecture + ", " + std::to_string(g.layers.size()) + " full-attention layers of " +
           std::to_string(mg.n_layers) + "; " + mg.layer_rule + ")";
    if (g.layers.empty()) throw FileError(a.model, "has no full-attention layer to plan for");
    st = state_report(mg);
    n_layers = mg.n_layers;
    sw.layers = mg.sliding_layers().size();
    sw.values_per_cell = mg.sliding_values_per_cell();
    sw.window = mg.sliding_window;
    // llama.cpp's cells at the longest context asked (the training context with --budget alone)
    uint64_t longest = mg.context_length ? mg.context_length : 0;
    if (!a.contexts.empty()) longest = *std::max_element(a.contexts.begin(), a.contexts.end());
    sw.cells = mg.sliding_cells(longest ? longest : UINT64_MAX, a.ubatch);
  } else {
    if (!a.layers || !a.kv_heads || !a.head_dim)
      throw cli::UsageError("plan needs --model FILE.gguf, or --layers, --kv-heads and --head-dim");
    g = CacheGeometry::uniform(a.layers, a.kv_heads, a.head_dim);
    what = std::to_string(a.layers) + " layers x " + std::to_string(a.kv_heads) + " kv heads x head_dim " +
           std::to_string(a.head_dim);
  }
  PlanSettings ps;
  ps.layout.n_ubatch = a.ubatch;
  if (a.note_12gb) ps.overheads = note_12gb_overheads();
  std::vector<CacheOption> opts = standard_options(a.note_rule ? SjkvAccounting::note_rule : SjkvAccounting::layout);
  uint64_t budget = 0;
  if (!a.budget.empty()) {
    const auto b = parse_size(a.budget);
    if (!b) throw cli::UsageError("--budget: cannot read '" + a.budget + "' (examples: 11GiB, 11000MiB, 24GB)");
    budget = *b;
  }
  std::vector<uint64_t> ctx = a.contexts;
  if (ctx.empty() && a.budget.empty()) ctx.push_back(110592);
  // The same plan with one sequence's recurrent state (16 bits) added: the KV + state columns.
  PlanSettings ps_state = ps;
  ps_state.overheads.sequence_state_bytes = st.bytes16;
  std::ostringstream o;
  char line[512];
  if (a.json) {
    o << "{\n  \"geometry\": " << json_string(what) << ",\n";
    if (sw.cells)
      o << "  \"sliding_layers\": {\"layers\": " << sw.layers << ", \"values_per_cell\": " << sw.values_per_cell
        << ", \"window\": " << sw.window << ", \"cells\": " << sw.cells << ", \"bytes_f16\": " << sw.bytes(BlockFormat::f16)
        << ", \"bytes_q8_0\": " << sw.bytes(BlockFormat::q8_0) << "},\n";
    if (st.any)
      o << "  \"recurrent_state\": {\"layers\": " << st.layers << ", \"of_layers\": " << n_layers
        << ", \"conv_values_per_layer\": " << st.conv_values << ", \"delta_values_per_layer\": " << st.delta_values
        << ", \"values\": " << st.values << ", \"bytes_32bit\": " << st.bytes32 << ", \"bytes_16bit\": " << st.bytes16
        << "},\n";
    o << "  \"options\": [\n";
  } else {
    o << "geometry: " << what << "\n";
    if (st.any) {
      std::snprintf(line, sizeof line,
                    "recurrent state per sequence: %" PRIu64 " of %u layers x (conv %u x %" PRIu64 " + delta %u x %u) = "
                    "%" PRIu64 " values\n  %" PRIu64 " bytes (%.3f MiB) at 32 bits (llama.cpp's f32), %" PRIu64
                    " bytes (%.3f MiB) at 16 bits (the note's setting)\n",
                    st.layers, n_layers, st.conv_rows, st.conv_dim, st.state_size, st.inner_size, st.values, st.bytes32,
                    static_cast<double>(st.bytes32) / kMiB, st.bytes16, static_cast<double>(st.bytes16) / kMiB);
      o << line;
    }
    if (sw.cells) {
      std::snprintf(line, sizeof line,
                    "sliding-window layers (beside the table, never compressed): %zu of %u layers, %" PRIu64
                    " values a cell; %" PRIu64 " cells (llama.cpp: window %u + ubatch %u, padded to 256) = %.1f MiB "
                    "at f16, %.1f MiB at q8_0\n",
                    sw.layers, n_layers, sw.values_per_cell, sw.cells, sw.window, a.ubatch,
                    static_cast<double>(sw.bytes(BlockFormat::f16)) / kMiB,
                    static_cast<double>(sw.bytes(BlockFormat::q8_0)) / kMiB);
      o << line;
    }
    o << (a.note_12gb ? "overheads: the note's 12 GB setup (7.77 GB fixed + 1 KiB/token)\n" : "") << "GB = GiB = 1024 MiB\n\n";
  }
  if (!a.json) {
    o << "| format | bytes/token (body) |";
    for (uint64_t n : ctx) {
      o << " GiB @" << n << " | bpv @" << n << " |";
      if (st.any) o << " GiB KV+state @" << n << " |";
    }
    if (budget) o << " max context in " << a.budget << " |";
    if (budget && st.any) o << " with state |";
    o << "\n|---|--:|";
    for (size_t i = 0; i < ctx.size(); ++i) o << (st.any ? "--:|--:|--:|" : "--:|--:|");
    if (budget) o << (st.any ? "--:|--:|" : "--:|");
    o << "\n";
  }
  bool first = true;
  for (const CacheOption& opt : opts) {
    const std::string why = check(g, opt);
    if (!why.empty()) {
      if (!a.json) o << "| " << opt.label() << " | n/a: " << why << " |\n";
      continue;
    }
    const double bpt = bytes_per_token(g, opt).value();
    if (a.json) {
      o << (first ? "" : ",\n") << "    {\"format\": " << json_string(opt.label()) << ", \"bytes_per_token\": " << json_number(bpt)
        << ", \"contexts\": [";
      for (size_t i = 0; i < ctx.size(); ++i) {
        const uint64_t b = total_bytes(g, opt, ctx[i], ps);
        o << (i ? ", " : "") << "{\"n_ctx\": " << ctx[i] << ", \"bytes\": " << b << ", \"gib\": " << json_number(to_gib(b))
          << ", \"bits_per_value\": " << json_number(allocated_bits_per_value(g, opt, ctx[i], ps));
        if (st.any) o << ", \"bytes_with_state\": " << total_bytes(g, opt, ctx[i], ps_state);
        o << "}";
      }
      o << "]";
      if (budget) {
        const Fit f = max_context(g, opt, budget, ps);
        o << ", \"budget_bytes\": " << budget << ", \"max_context\": " << f.n_ctx << ", \"fits\": " << (f.fits ? "true" : "false");
        if (st.any) {
          const Fit fs = max_context(g, opt, budget, ps_state);
          o << ", \"max_context_with_state\": " << fs.n_ctx << ", \"fits_with_state\": " << (fs.fits ? "true" : "false");
        }
      }
      o << "}";
      first = false;
      continue;
    }
    std::snprintf(line, sizeof line, "| %s | %.1f |", opt.label().c_str(), bpt);
    o << line;
    for (uint64_t n : ctx) {
      std::snprintf(line, sizeof line, " %.3f | %.3f |", to_gib(total_bytes(g, opt, n, ps)),
                    allocated_bits_per_value(g, opt, n, ps));
      o << line;
      if (st.any) {
        std::snprintf(line, sizeof line, " %.3f |", to_gib(total_bytes(g, opt, n, ps_state)));
        o << line;
      }
    }
    for (const PlanSettings* p : {&ps, &ps_state}) {
      if (!budget || (p == &ps_state && !st.any)) continue;
      const Fit f = max_context(g, opt, budget, *p);
      std::snprintf(line, sizeof line, " %s |", f.fits ? std::to_string(f.n_ctx).c_str() : "does not fit");
      o << line;
    }
    o << "\n";
  }
  if (a.json) o << "\n  ]\n}\n";
  else
    o << "\nsjkv rows count " << (a.note_rule ? "the note's rule: body bytes/token x (N - 4,224) + 259 MiB"
                                               : "the layout: fp16 sink + staged sink copy + sealable records + ring of "
                                                 "ring_capacity(tail, tail_max, 128, ubatch) rows")
      << ".\n";
  if (!a.json && st.any)
    o << "KV+state adds one sequence's recurrent state at 16 bits (llama.cpp keeps it at 32 bits: "
      << (st.bytes32 - st.bytes16) << " bytes more); the other columns count the KV cache alone.\n";
  std::cout << o.str();
  return cli::kOk;
}

// `demo`'s two renderings of the rows run_demo measured.
std::string demo_table(const std::vector<DemoRow>& rows) {
  std::ostringstream o;
  int w = 6;
  for (const auto& r : rows) w = r.config.size() > static_cast<size_t>(w) ? static_cast<int>(r.config.size()) : w;
  char line[512];
  std::snprintf(line, sizeof line, "| %-*s | %8s | %9s | %8s | %9s | %9s | %10s |\n", w, "config", "rec B", "body bpv",
                "stage bpv", "K rel.rms", "V rel.rms", "ms/record");
  o << line;
  o << "|" << std::string(w + 2, '-') << "|" << std::string(10, '-') << ":|" << std::string(10, '-') << ":|"
    << std::string(9, '-') << ":|" << std::string(10, '-') << ":|" << std::string(10, '-') << ":|"
    << std::string(11, '-') << ":|\n";
  for (const auto& r : rows) {
    std::snprintf(line, sizeof line, "| %-*s | %8u | %9.5f | %8.3f | %9.4f | %9.4f | %10.3f |\n", w, r.config.c_str(),
                  r.record_bytes, r.body_bits, r.staging_bits, r.k_rel_rms, r.v_rel_rms, r.ms_per_record);
    o << line;
  }
  return o.str();
}

std::string demo_json(const std::vector<DemoRow>& rows) {
  std::ostringstream o;
  o << "[\n";
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    char line[640];
    std::snprintf(line, sizeof line,
                  ", \"head_dim\": %u, \"record_bytes\": %u, \"body_bits\": %.6f, \"staging_bits\": %.6f, "
                  "\"k_rel_rms\": %.6g, \"v_rel_rms\": %.6g, \"ms_per_record\": %.6g}%s\n",
                  r.head_dim, r.record_bytes, r.body_bits, r.staging_bits, r.k_rel_rms, r.v_rel_rms, r.ms_per_record,
                  i + 1 < rows.size() ? "," : "");
    o << "  {\"config\": " << json_string(r.config) << line;
  }
  o << "]\n";
  return o.str();
}

void progress_demo(size_t done, size_t total) {
  if (!isatty(STDERR_FILENO)) return;
  std::fprintf(stderr, "\rsealing configurations: %zu/%zu", done, total);
  if (done == total) std::fprintf(stderr, "\n");
}

}  // namespace

int main(int argc, char** argv) {
  sjkv::settle_parallel_runtime(argv);  // OpenMP's wait, before anything else (sjkv/parallel.h)
  cli::hold_standard_output();  // before any file is opened
  CLI::App app{"sjkv-encode: SJ-KVaRN snapshots of captured KV caches (exit codes: 0 ok, 1 usage, 2 bad input, "
               "3 internal error)"};
  app.require_subcommand(1);

  EncodeArgs ea;
  auto* enc = app.add_subcommand("encode", "Compress a capture, .kvd dump or llama.cpp state file into a snapshot, "
                                           "replaying it through staging and the journal policy like an engine");
  enc->add_option("input", ea.input, "Capture (.h5), .kvd tile dump, or llama.cpp state file")->required();
  enc->add_option("-o,--output", ea.output, "Snapshot file to write")->required();
  enc->add_option("--bits", ea.bits, "K/V bits: 4/4, 4/3, 4/2, 3/4, 3/3, 3/2, 2/4, 2/3, 2/2")
      ->check(CLI::IsMember({"4/4", "4/3", "4/2", "3/4", "3/3", "3/2", "2/4", "2/3", "2/2"}))
      ->capture_default_str();
  enc->add_option("--body", ea.body, "Body: auto (trellis for 3/3, 3/2, 2/2), scalar or trellis (also 4/4t)")
      ->check(CLI::IsMember({"auto", "scalar", "trellis"}))->capture_default_str();
  enc->add_option("--axis", ea.axis, "Trellis sequence axis: token (the format's) or channel (sjkv extension)")
      ->check(CLI::IsMember({"token", "channel"}))->capture_default_str();
  enc->add_option("--staging", ea.staging, "Staging rows: tq6_0, q8_0 or f16")
      ->check(CLI::IsMember(staging_names()))->capture_default_str();
  enc->add_option("--group", ea.group, "Tokens per sealed record: a multiple of 16 in [16, 1024] (scalar bodies), 128 for trellis")
      ->capture_default_str();
  enc->add_option("--sink", ea.sink, "Sink positions kept exact")->capture_default_str();
  enc->add_option("--sink-type", ea.sink_type, "Sink storage: f16 or inherit (staging rows)")
      ->check(CLI::IsMember({"f16", "inherit"}))->capture_default_str();
  enc->add_option("--tail", ea.tail, "Exact tail kept after a seal")->capture_default_str()->each([&](const std::string&) { ea.tail_given = true; });
  enc->add_option("--tail-max", ea.tail_max, "Tail length that triggers a seal (0 = fixed tail)")->capture_default_str()->each([&](const std::string&) { ea.tail_max_given = true; });
  enc->add_option("--ubatch", ea.ubatch, "Positions per ubatch")->check(CLI::Range(1u, 1u << 20))->capture_default_str();
  enc->add_option("--iters", ea.iters, "Balancing iterations")->check(CLI::Range(0u, 64u))->capture_default_str();
  enc->add_flag("--kvarn", ea.kvarn, "Paper-faithful KVarN sealing: 8 passes keeping the best scales, f16 staging, "
                                     "each group sealed as it fills (fixed tail, default 0)");
  enc->add_option("--codebook", ea.codebooks,
                  "Trellis tables: auto (default: with --model, the model's shipped table set for the widths it is the "
                  "default for; otherwise the format's), reference (the format's tables), a shipped set's name, or "
                  "codebook files (.sjcb from sjkv-train, raw .bin table or C header), once per bit width. Shipped: " +
                      table_sets_help());
  enc->add_flag("--assume-rotated", ea.assume_rotated, "The input is already in the rotated basis");
  cli::add_state_options(enc, ea.state, "llama.cpp state files");
  enc->add_option("--threads", ea.threads, "Threads (0 = all cores)")->check(CLI::Range(0, 1024))->capture_default_str();
  enc->add_option("--device", ea.device, "auto, cpu or cuda")->check(CLI::IsMember({"auto", "cpu", "cuda"}))->capture_default_str();
  enc->add_flag("-q,--quiet", ea.quiet, "No progress or summary on stderr");

  std::string dec_in, dec_out;
  bool dec_rot = false, dec_quiet = false;
  StreamArgs dec_sa, ins_sa;
  auto* dec = app.add_subcommand("decode", "Decode a snapshot (or a sequence-state stream) back into a capture");
  dec->add_option("snapshot", dec_in, "Snapshot file or sequence-state stream")->required();
  dec->add_option("-o,--output", dec_out, "Capture file to write")->required();
  dec->add_flag("--rotated", dec_rot, "Keep the rotated basis (default: back to the model basis)");
  add_stream_options(dec, dec_sa, "A stream");
  dec->add_flag("-q,--quiet", dec_quiet, "No summary on stderr");

  std::string exp_in, exp_out;
  bool exp_quiet = false;
  auto* exp = app.add_subcommand("export", "Write a snapshot as the reference library's sequence-state stream (state "
                                           "version 1), the bytes an engine restores a sequence from");
  exp->add_option("snapshot", exp_in, "Snapshot file (or a stream)")->required();
  exp->add_option("-o,--output", exp_out, "Stream file to write (.sjkvseq)")->required();
  exp->add_flag("-q,--quiet", exp_quiet, "No summary on stderr");

  std::string imp_in, imp_out;
  bool imp_quiet = false;
  StreamArgs imp_sa;
  auto* imp = app.add_subcommand("import", "Make a snapshot of a sequence-state stream an engine saved (checked "
                                           "field by field, checksum included)");
  imp->add_option("stream", imp_in, "Sequence-state stream (.sjkvseq)")->required();
  imp->add_option("-o,--output", imp_out, "Snapshot file to write")->required();
  add_stream_options(imp, imp_sa, "The stream");
  imp->add_flag("-q,--quiet", imp_quiet, "No summary on stderr");

  std::string ins_in, ins_against;
  bool ins_json = false;
  auto* ins = app.add_subcommand("inspect", "Configuration, regions, bytes and bits per value of a snapshot (or a "
                                            "sequence-state stream); with --against, its error per layer and region");
  ins->add_option("snapshot", ins_in, "Snapshot file or sequence-state stream")->required();
  ins->add_option("--against", ins_against, "Reference capture (or .kvd / llama.cpp state)");
  ins->add_flag("--json", ins_json, "JSON output");
  cli::StateOptions ins_state;
  cli::add_state_options(ins, ins_state, "llama.cpp state reference");
  add_stream_options(ins, ins_sa, "A stream");

  std::string dump_in, dump_region_name, dump_out;
  uint32_t dump_layer = 0;
  auto* dmp = app.add_subcommand("dump", "Raw bytes of one region of one layer (body in [group][head] record order)");
  dmp->add_option("snapshot", dump_in, "Snapshot file")->required();
  dmp->add_option("--layer", dump_layer, "Layer id")->required();
  dmp->add_option("--region", dump_region_name, "sink, body or ring")->required()->check(CLI::IsMember({"sink", "body", "ring"}));
  dmp->add_option("-o,--output", dump_out, "File to write")->required();

  PlanArgs pa;
  auto* pl = app.add_subcommand("plan", "Memory planner: cache bytes of every format for a context, or the largest "
                                        "context of each in a memory budget");
  pl->add_option("--model", pa.model, "GGUF model file (geometry from its metadata)");
  pl->add_option("--layers", pa.layers, "Layers with a full-attention cache")->check(CLI::Range(1u, 65536u));
  pl->add_option("--kv-heads", pa.kv_heads, "KV heads per layer")->check(CLI::Range(1u, 65536u));
  pl->add_option("--head-dim", pa.head_dim, "Head size")->check(CLI::Range(1u, 65536u));
  pl->add_option("--context", pa.contexts, "Context length(s) in tokens (default 110592)");
  pl->add_option("--budget", pa.budget, "Memory budget, e.g. 11GiB or 11000MiB: report the largest context");
  pl->add_option("--ubatch", pa.ubatch, "Ubatch the ring is sized for")->check(CLI::Range(1u, kMaxUbatch))->capture_default_str();
  pl->add_flag("--note-rule", pa.note_rule, "Count sjkv rows by the note's rule (body x (N - 4224) + 259 MiB)");
  pl->add_flag("--note-12gb", pa.note_12gb, "Add the note's 12 GB overheads (7.77 GB fixed, 1 KiB per token)");
  pl->add_flag("--json", pa.json, "JSON output");

  DemoOptions demo;
  bool demo_json_out = false, demo_quiet = false;
  std::string demo_path = "fast";
  auto* d = app.add_subcommand("demo", "Seal generated K/V tiles in every scalar configuration through the staging "
                                       "path and print record bytes, bits per value, decode error and seal time");
  d->add_option("--head-dim", demo.head_dims, "Head sizes to run")->check(CLI::IsMember({64u, 128u, 256u, 512u}))->capture_default_str();
  d->add_option("--records", demo.records, "Groups of 128 tokens sealed per configuration")->check(CLI::Range(1u, 4096u))->capture_default_str();
  d->add_option("--seed", demo.seed, "Seed of the generated tiles")->check(non_negative())->capture_default_str();
  d->add_option("--threads", demo.threads, "OpenMP threads for sealing (0 = all cores)")->check(CLI::Range(0, 1024))->capture_default_str();
  d->add_option("--path", demo_path, "Sealer: fast (widest SIMD) or reference (scalar)")->check(CLI::IsMember({"fast", "reference"}))->capture_default_str();
  d->add_flag("--json", demo_json_out, "Print JSON instead of a table");
  d->add_flag("-q,--quiet", demo_quiet, "No progress on stderr");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return cli::parse_failed(app, e);
  }

  if (enc->parsed()) return cli::guarded(kTool, [&] { return run_encode(ea); });
  if (dec->parsed()) return cli::guarded(kTool, [&] { return run_decode(dec_in, dec_out, dec_sa, dec_rot, dec_quiet); });
  if (ins->parsed()) return cli::guarded(kTool, [&] { return run_inspect(ins_in, ins_against, ins_state, ins_sa, ins_json); });
  if (exp->parsed()) return cli::guarded(kTool, [&] { return run_export(exp_in, exp_out, exp_quiet); });
  if (imp->parsed()) return cli::guarded(kTool, [&] { return run_import(imp_in, imp_out, imp_sa, imp_quiet); });
  if (dmp->parsed()) return cli::guarded(kTool, [&] { return run_dump(dump_in, dump_layer, dump_region_name, dump_out); });
  if (pl->parsed()) return cli::guarded(kTool, [&] { return run_plan(pa); });
  if (d->parsed()) {
    return cli::guarded(kTool, [&] {
      demo.path = demo_path == "reference" ? SealPath::reference : SealPath::fast;
      const auto rows = run_demo(demo, demo_quiet ? nullptr : progress_demo);
      std::cout << (demo_json_out ? demo_json(rows) : demo_table(rows));
      if (!demo_json_out)
        std::cout << "\nbody bpv: record bits per value (payload + fp16 scales); stage bpv: the staging rows the "
                     "seal reads;\nrel.rms: decoded rows against the float rows before staging (rotated basis); "
                     "ms/record: one KV head x 128 tokens.\n";
      return cli::kOk;
    });
  }
  return cli::kUsage;
}
