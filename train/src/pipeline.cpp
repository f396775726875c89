#include "sjkv/train/pipeline.h"

#include <sys/stat.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <memory>
#include <stdexcept>

#include "sjkv/io/atomic_file.h"
#include "sjkv/io/file_error.h"
#include "sjkv/io/sha256.h"
#include "sjkv/io/text.h"
#include "sjkv/trellis.h"

namespace sjkv::train {

namespace {

std::vector<float> decoded(const uint16_t* t, uint32_t n) {
  std::vector<float> f(n);
  for (uint32_t i = 0; i < n; ++i) f[i] = f16_to_f32(t[i]);
  return f;
}

const char* axis_text(TrellisAxis a) { return a == TrellisAxis::channel ? "channel" : "token"; }

}  // namespace

std::vector<std::string> train_output_names(const std::string& prefix, TrellisAxis axis) {
  if (axis == TrellisAxis::channel) return {prefix + ".sjcb", prefix + ".bin"};
  return {prefix + ".sjcb", prefix + ".bin", prefix + ".h"};
}

TrainReport train_and_evaluate(const TrainRun& a) {
  const TrainEvents& ev = a.events;
  TrainReport rep;
  // All outputs are created (and checked) before the work, and committed together at the end.
  rep.outputs = train_output_names(a.prefix, a.axis);
  std::vector<std::unique_ptr<AtomicOutput>> outs;
  for (const std::string& o : rep.outputs) outs.push_back(std::make_unique<AtomicOutput>(o));
  const uint32_t ne = trellis_entries(a.bits);
  const std::string staging = staging_name(a.staging), axis = axis_text(a.axis);

  // starting tables
  std::vector<uint16_t> init_k(ne), init_v(ne);
  std::string& init_name = rep.init_name;
  init_name = "identity";
  if (a.init.empty() || a.init == "identity") {
    identity_codebook(a.bits, init_k.data());
    identity_codebook(a.bits, init_v.data());
  } else if (a.init == "reference") {
    // The format's built-in tables (the reference codec's; at 4 bits the identity table).
    const uint16_t* rk = codebook_table(TrellisCodebooks{}, Side::k, a.bits);
    const uint16_t* rv = codebook_table(TrellisCodebooks{}, Side::v, a.bits);
    init_k.assign(rk, rk + ne);
    init_v.assign(rv, rv + ne);
    init_name = a.bits == 4 ? "reference (the format's 4-bit table, the identity)" : "reference (the format's built-in tables)";
  } else {
    const CodebookContainer c = read_codebook_any(a.init);
    if (c.table.bits != a.bits)
      throw FileError(a.init, "is a " + std::to_string(c.table.bits) + "-bit codebook; --bits is " + std::to_string(a.bits));
    init_k = c.table.k;
    init_v = c.table.v;
    init_name = "file " + a.init + " (" + hex64(c.codebook_id) + ")";
  }

  TargetOptions to;
  to.config.bits_k = to.config.bits_v = a.bits;
  to.config.sink = a.sink;
  to.config.iters = a.iters;
  to.config.staging = a.staging;
  to.config.trellis_axis = a.axis;
  to.assume_rotated = a.assume_rotated;
  to.threads = a.threads;

  SplitDrawer split(a.seed, a.heldout);
  TrainingSet set;
  CodebookProvenance prov;
  prov.tool_version = a.tool_version;
  prov.seed = a.seed;
  for (size_t i = 0; i < a.inputs.size(); ++i) {
    if (ev.reading) ev.reading(i, a.inputs.size());
    const std::string sha = sha256_file_hex(a.inputs[i]);
    const Capture cap = load_capture_any(a.inputs[i], a.io);
    try {
      append_capture_targets(cap, to, split, set);
    } catch (const std::invalid_argument& e) {
      throw FileError(a.inputs[i], e.what());
    }
    prov.inputs.push_back({a.inputs[i], sha});
  }
  if (ev.reading) ev.reading(a.inputs.size(), a.inputs.size());
  if (set.train_k.sequences() == 0)
    throw std::invalid_argument("the inputs hold no sealed tile in the train set (a tile is a full group of 128 positions "
                                "after the sink of " + std::to_string(a.sink) + ")");
  if (ev.read) ev.read(set);

  // The checkpoint key: a checkpoint is only taken up by a run with the same inputs and options.
  std::string run_text = a.tool_version + "\n";
  for (const CodebookInput& in : prov.inputs) run_text += "input " + in.sha256 + "\n";
  run_text += "bits " + std::to_string(a.bits) + " axis " + axis + " seed " + std::to_string(a.seed) + " heldout " +
              json_number(a.heldout) + " tol " + json_number(a.tol) + " max_iters " + std::to_string(a.max_iters) +
              " init " + init_name + " staging " + staging + " sink " + std::to_string(a.sink) + " iters " + std::to_string(a.iters) +
              (a.assume_rotated ? " assume_rotated" : "") + " head_dim " + std::to_string(a.io.head_dim) + " kv_sections " +
              std::to_string(a.io.kv_sections) + " layers";
  for (auto l : a.io.layers) run_text += " " + std::to_string(l);
  run_text += " layer_ids";
  for (auto l : a.io.layer_ids) run_text += " " + std::to_string(l);
  const std::string ckpt_path[2] = {a.prefix + ".k.ckpt", a.prefix + ".v.ckpt"};

  LloydOptions lo;
  lo.max_iters = a.max_iters;
  lo.tol = a.tol;
  lo.threads = a.threads;
  LloydResult* res = rep.result;
  std::vector<uint16_t> id(ne);
  identity_codebook(a.bits, id.data());
  for (int s = 0; s < 2; ++s) {
    const Side side = s == 0 ? Side::k : Side::v;
    if (ev.side) ev.side(side);
    // A fresh GPU pass per side: its targets stay on the device for the side only.
    lo.pass = a.lloyd_passes ? a.lloyd_passes() : LloydPass{};
    lo.real_mse = nullptr;
    if (set.heldout_records)
      lo.real_mse = [&, s](const std::vector<uint16_t>& table) {
        double mk, mv;
        heldout_real_mse(set, s == 0 ? table.data() : id.data(), s == 0 ? id.data() : table.data(), a.threads, &mk, &mv);
        return s == 0 ? mk : mv;
      };
    lo.on_iteration = nullptr;
    if (ev.iteration) lo.on_iteration = [&, side](const LloydIteration& it) { ev.iteration(side, it); };
    const char* sn = s == 0 ? "K" : "V";
    LloydCheckpoint ck;
    lo.resume = nullptr;
    lo.on_state = nullptr;
    if (a.checkpoint) {
      const std::string key_text = run_text + " side " + sn;
      const auto key = sha256(key_text.data(), key_text.size());
      struct stat st;
      if (::stat(ckpt_path[s].c_str(), &st) == 0) {
        ck = read_lloyd_checkpoint(ckpt_path[s]);
        if (ck.run_key == key && ck.bits == a.bits && ck.side == static_cast<uint32_t>(s)) {
          lo.resume = &ck.state;
          if (ev.resumed) ev.resumed(side, ckpt_path[s], ck.state);
        } else if (ev.other_run) {
          ev.other_run(side, ckpt_path[s]);
        }
      }
      lo.on_state = [&, s, key](const LloydState& state) {
        LloydCheckpoint c;
        c.bits = a.bits;
        c.side = static_cast<uint32_t>(s);
        c.run_key = key;
        c.state = state;
        write_lloyd_checkpoint(ckpt_path[s], c);
      };
    }
    res[s] = lloyd_train(s == 0 ? set.train_k : set.train_v, s == 0 ? set.heldout_k : set.heldout_v, a.bits,
                         s == 0 ? init_k.data() : init_v.data(), lo);
  }
  lo.pass = nullptr;

  // held-out comparison
  HeldoutRow* row = rep.heldout;
  HeldoutRow* real = rep.heldout_real;
  heldout_real_mse(set, id.data(), id.data(), a.threads, &real[0].identity, &real[1].identity);
  heldout_real_mse(set, res[0].table_f16.data(), res[1].table_f16.data(), a.threads, &real[0].trained, &real[1].trained);
  if (a.bits <= 3)
    heldout_real_mse(set, reference_codebook(Side::k, a.bits), reference_codebook(Side::v, a.bits), a.threads,
                     &real[0].reference, &real[1].reference);
  const auto idf = decoded(id.data(), ne);
  for (int s = 0; s < 2; ++s) {
    const Targets& ho = s == 0 ? set.heldout_k : set.heldout_v;
    const Side side = s == 0 ? Side::k : Side::v;
    row[s].scalar = scalar_mse(ho, a.bits);
    row[s].identity = trellis_mse(ho, a.bits, idf.data(), a.threads);
    const uint16_t* ref = reference_codebook(side, a.bits);
    row[s].reference = ref ? trellis_mse(ho, a.bits, decoded(ref, ne).data(), a.threads) : NAN;
    row[s].trained = res[s].heldout_mse_f16;
  }
  rep.train_tiles = set.train_records;
  rep.heldout_tiles = set.heldout_records;

  CodebookContainer& c = rep.codebook;
  c.axis = a.axis == TrellisAxis::channel ? CodebookAxis::channel : CodebookAxis::token;
  c.table.bits = a.bits;
  c.table.k = res[0].table_f16;
  c.table.v = res[1].table_f16;
  prov.iterations = std::max(res[0].iterations, res[1].iterations);
  prov.train_tiles_k = prov.train_tiles_v = set.train_records;
  prov.heldout_tiles_k = prov.heldout_tiles_v = set.heldout_records;
  prov.train_mse_k = res[0].train_mse_f16;
  prov.train_mse_v = res[1].train_mse_f16;
  prov.heldout_mse_k = res[0].heldout_mse_f16;
  prov.heldout_mse_v = res[1].heldout_mse_f16;
  prov.extra = {{"init", init_name},
                {"iterations_k", std::to_string(res[0].iterations)},
                {"iterations_v", std::to_string(res[1].iterations)},
                {"stop_k", res[0].stop},
                {"stop_v", res[1].stop},
                {"tol", json_number(a.tol)},
                {"max_iters", std::to_string(a.max_iters)},
                {"heldout_fraction", json_number(a.heldout)},
                {"split_rng", SplitDrawer::rng_name()},
                {"seal", "staging=" + staging + " sink=" + std::to_string(a.sink) + " iters=" + std::to_string(a.iters) +
                             (a.assume_rotated ? " assume_rotated" : "")},
                {"unused_entries", "keep their previous value"}};
  c.provenance = prov;
  {
    const std::vector<uint8_t> box = container_bytes(c), raw = raw_codebook_bytes(c.table);
    write_file_bytes(outs[0]->temp_path(), box.data(), box.size(), rep.outputs[0]);
    write_file_bytes(outs[1]->temp_path(), raw.data(), raw.size(), rep.outputs[1]);
    if (outs.size() > 2) {
      const std::string h = codebook_header_text(c.table, a.tool_version + ", seed " + std::to_string(a.seed));
      write_file_bytes(outs[2]->temp_path(), h.data(), h.size(), rep.outputs[2]);
    }
    std::vector<AtomicOutput*> all;
    for (auto& o : outs) all.push_back(o.get());
    commit_all(all);
  }
  if (a.checkpoint)
    for (const std::string& p : ckpt_path) std::remove(p.c_str());
  c.codebook_id = raw_codebook_id(c.table);
  c.raw_sha256 = raw_codebook_sha256(c.table);
  return rep;
}

}  // namespace sjkv::train
