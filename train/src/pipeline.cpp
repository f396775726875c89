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
#include "sjkv/io/table_set.h"
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

namespace {

// What rank 0 needs of an input another rank read: its hash, record count and head size.
struct InputInfo {
  std::string sha256;
  uint64_t records = 0;
  uint32_t head_dim = 0;
};

std::vector<uint8_t> info_bytes(const std::vector<std::pair<size_t, InputInfo>>& infos) {
  cluster::Packer o;
  for (const auto& [i, in] : infos) o.u64(i).u64(in.records).u64(in.head_dim).str(in.sha256);
  return o.bytes;
}

void read_infos(const std::vector<uint8_t>& b, std::vector<InputInfo>& out) {
  cluster::Unpacker in(b);
  while (!in.done()) {
    InputInfo& info = out.at(in.u64());
    info.records = in.u64();
    info.head_dim = static_cast<uint32_t>(in.u64());
    info.sha256 = in.str();
  }
}

// The steps of train_and_evaluate, in its order.

// The starting tables of --init, and the name provenance gives them.
std::string starting_tables(const TrainRun& a, std::vector<uint16_t>& init_k, std::vector<uint16_t>& init_v) {
  const uint32_t ne = trellis_entries(a.bits);
  if (a.init.empty() || a.init == "identity") {
    identity_codebook(a.bits, init_k.data());
    identity_codebook(a.bits, init_v.data());
    return "identity";
  }
  if (a.init == "reference") {
    // The format's built-in tables (the reference codec's; at 4 bits the identity table).
    const uint16_t* rk = codebook_table(TrellisCodebooks{}, Side::k, a.bits);
    const uint16_t* rv = codebook_table(TrellisCodebooks{}, Side::v, a.bits);
    init_k.assign(rk, rk + ne);
    init_v.assign(rv, rv + ne);
    return a.bits == 4 ? "reference (the format's 4-bit table, the identity)" : "reference (the format's built-in tables)";
  }
  if (const TableSet* set = find_table_set(a.init)) {
    const RawCodebook* t = set->table(a.bits);
    if (!t) throw std::invalid_argument("table set " + set->name + " has no " + std::to_string(a.bits) + "-bit table");
    init_k = t->k;
    init_v = t->v;
    return "table set " + set->name + " (" + hex64(raw_codebook_id(*t)) + ")";
  }
  const CodebookContainer c = read_codebook_any(a.init);
  if (c.table.bits != a.bits)
    throw FileError(a.init, "is a " + std::to_string(c.table.bits) + "-bit codebook; --bits is " + std::to_string(a.bits));
  init_k = c.table.k;
  init_v = c.table.v;
  return "file " + a.init + " (" + hex64(c.codebook_id) + ")";
}

TargetOptions target_options(const TrainRun& a) {
  TargetOptions to;
  to.config.bits_k = to.config.bits_v = a.bits;
  to.config.sink = a.sink;
  to.config.iters = a.iters;
  to.config.staging = a.staging;
  to.config.trellis_axis = a.axis;
  to.assume_rotated = a.assume_rotated;
  to.threads = a.threads;
  return to;
}

// The train and held-out targets of every input, and the inputs' hashes in prov.
struct ReadSet {
  TrainingSet set;
  uint64_t train_total = 0, heldout_total = 0;
};

// One process: every input read in turn.
void read_alone(const TrainRun& a, const TrainEvents& ev, const TargetOptions& to, SplitDrawer& split, ReadSet& r,
                CodebookProvenance& prov) {
  const size_t n_in = a.inputs.size();
  for (size_t i = 0; i < n_in; ++i) {
    if (ev.reading) ev.reading(i, n_in);
    const std::string sha = sha256_file_hex(a.inputs[i]);
    const Capture cap = load_capture_any(a.inputs[i], a.io);
    try {
      append_capture_targets(cap, to, split, r.set);
    } catch (const std::invalid_argument& e) {
      throw FileError(a.inputs[i], e.what());
    }
    prov.inputs.push_back({a.inputs[i], sha});
  }
  r.train_total = r.set.train_records;
  r.heldout_total = r.set.heldout_records;
}

// Ranks: the targets of this rank's chunks of the train and held-out sequences.
void read_shared(const TrainRun& a, const cluster::Comm& comm, const TrainEvents& ev, const TargetOptions& to,
                 SplitDrawer& split, ReadSet& r, CodebookProvenance& prov) {
  const size_t n_in = a.inputs.size();
  // 1. Every input's hash and shape, input i read by rank i mod size; the error of the
  //    first bad input is the job's, as one process reports it.
  std::vector<InputInfo> info(n_in);
  std::vector<std::pair<size_t, InputInfo>> mine;
  comm.agree([&](uint64_t& key) {
    for (size_t i = static_cast<size_t>(comm.rank()); i < n_in; i += static_cast<size_t>(comm.size())) {
      key = i;
      InputInfo in;
      in.sha256 = sha256_file_hex(a.inputs[i]);
      const Capture cap = load_capture_any(a.inputs[i], a.io);
      try {
        cap.check_consistent();
        in.records = capture_records(cap, to);
      } catch (const std::invalid_argument& e) {
        throw FileError(a.inputs[i], e.what());
      }
      in.head_dim = cap.head_dim;
      mine.push_back({i, in});
    }
  });
  for (const auto& b : comm.all_gather(info_bytes(mine))) read_infos(b, info);
  comm.agree([&](uint64_t& key) {
    for (size_t i = 1; i < n_in; ++i) {
      key = i;
      if (info[i].head_dim != info[0].head_dim)
        throw FileError(a.inputs[i], head_dim_mismatch(info[0].head_dim, info[i].head_dim));
    }
  });
  for (size_t i = 0; i < n_in; ++i) prov.inputs.push_back({a.inputs[i], info[i].sha256});
  // 2. The split drawn for every record in input order, as one process draws it; this rank's
  //    records are whole chunks of the train and of the held-out sequences.
  std::vector<std::vector<uint8_t>> held(n_in);
  for (size_t i = 0; i < n_in; ++i) {
    held[i] = split.draw(info[i].records);
    for (uint8_t h : held[i]) ++(h ? r.heldout_total : r.train_total);
  }
  r.set.seal_config = target_config(info.empty() ? 0 : info[0].head_dim, to);
  r.set.have_config = true;
  const uint32_t spr = sequences_per_record(r.set.seal_config);
  const RecordRange tr = shard_records(r.train_total, spr, comm.rank(), comm.size()),
                    ho = shard_records(r.heldout_total, spr, comm.rank(), comm.size());
  // 3. The targets of those records only.
  comm.agree([&](uint64_t& key) {
    uint64_t n_tr = 0, n_ho = 0;  // records of each set before input i
    for (size_t i = 0; i < n_in; ++i) {
      key = i;
      if (ev.reading) ev.reading(i, n_in);
      const std::vector<uint8_t> keep = records_in_shard(held[i], tr, ho, &n_tr, &n_ho);
      if (std::find(keep.begin(), keep.end(), 1) == keep.end()) continue;
      const Capture cap = load_capture_any(a.inputs[i], a.io);
      try {
        append_capture_targets(cap, to, held[i], keep, r.set);
      } catch (const std::invalid_argument& e) {
        throw FileError(a.inputs[i], e.what());
      }
    }
  });
}

// The checkpoint key's text: a checkpoint is only taken up by a run with the same inputs and options.
std::string run_key_text(const TrainRun& a, const CodebookProvenance& prov, const std::string& init_name) {
  std::string t = a.tool_version + "\n";
  for (const CodebookInput& in : prov.inputs) t += "input " + in.sha256 + "\n";
  t += "bits " + std::to_string(a.bits) + " axis " + axis_text(a.axis) + " seed " + std::to_string(a.seed) + " heldout " +
       json_number(a.heldout) + " tol " + json_number(a.tol) + " max_iters " + std::to_string(a.max_iters) + " init " +
       init_name + " staging " + staging_name(a.staging) + " sink " + std::to_string(a.sink) + " iters " +
       std::to_string(a.iters) + (a.assume_rotated ? " assume_rotated" : "") + " head_dim " +
       std::to_string(a.io.head_dim) + " kv_sections " + std::to_string(a.io.kv_sections) + " layers";
  for (auto l : a.io.layers) t += " " + std::to_string(l);
  t += " layer_ids";
  for (auto l : a.io.layer_ids) t += " " + std::to_string(l);
  return t;
}

// Side s's checkpoint: taken up into ck (lo.resume) when it is this run's, and lo.on_state set
// to write it after every update. Rank 0 reads and writes; the others get it by broadcast.
void wire_checkpoint(const TrainRun& a, const cluster::Comm& comm, const TrainEvents& ev, int s,
                     const std::string& run_text, const std::string& path, LloydCheckpoint& ck, LloydOptions& lo) {
  const bool root = comm.root();
  const Side side = s == 0 ? Side::k : Side::v;
  const std::string key_text = run_text + " side " + (s == 0 ? "K" : "V");
  const auto key = sha256(key_text.data(), key_text.size());
  bool have = false;
  comm.agree([&](uint64_t&) {
    struct stat st;
    if (root && ::stat(path.c_str(), &st) == 0) {
      ck = read_lloyd_checkpoint(path);
      have = true;
    }
  });
  if (comm.distributed()) {
    std::vector<uint8_t> b = have ? lloyd_checkpoint_bytes(ck) : std::vector<uint8_t>{};
    comm.broadcast(b);
    if (!root && !b.empty()) {
      ck = parse_lloyd_checkpoint(path, b);
      have = true;
    }
  }
  if (have) {
    if (ck.run_key == key && ck.bits == a.bits && ck.side == static_cast<uint32_t>(s)) {
      lo.resume = &ck.state;
      if (ev.resumed) ev.resumed(side, path, ck.state);
    } else if (ev.other_run) {
      ev.other_run(side, path);
    }
  }
  // Every rank comes here at the same iterations; rank 0 writes, and its failure is theirs.
  lo.on_state = [&a, &comm, root, s, key, path](const LloydState& state) {
    comm.agree([&](uint64_t&) {
      if (!root) return;
      LloydCheckpoint c;
      c.bits = a.bits;
      c.side = static_cast<uint32_t>(s);
      c.run_key = key;
      c.state = state;
      write_lloyd_checkpoint(path, c);
    });
  };
}

// Held-out MSE of each table (identity, the format's reference, trained) on the targets and on
// the real values.
void heldout_comparison(const TrainRun& a, const cluster::Comm& comm, const ReadSet& r, const std::vector<uint16_t>& id,
                        TrainReport& rep) {
  const uint32_t ne = trellis_entries(a.bits);
  const TrainingSet& set = r.set;
  const LloydResult* res = rep.result;
  HeldoutRow* row = rep.heldout;
  HeldoutRow* real = rep.heldout_real;
  heldout_real_mse(set, id.data(), id.data(), a.threads, &real[0].identity, &real[1].identity, comm);
  heldout_real_mse(set, res[0].table_f16.data(), res[1].table_f16.data(), a.threads, &real[0].trained, &real[1].trained,
                   comm);
  if (a.bits <= 3)
    heldout_real_mse(set, reference_codebook(Side::k, a.bits), reference_codebook(Side::v, a.bits), a.threads,
                     &real[0].reference, &real[1].reference, comm);
  const auto idf = decoded(id.data(), ne);
  for (int s = 0; s < 2; ++s) {
    const Targets& ho = s == 0 ? set.heldout_k : set.heldout_v;
    const Side side = s == 0 ? Side::k : Side::v;
    row[s].scalar = scalar_mse(ho, a.bits, comm);
    row[s].identity = trellis_mse(ho, a.bits, idf.data(), a.threads, comm);
    const uint16_t* ref = reference_codebook(side, a.bits);
    row[s].reference = ref ? trellis_mse(ho, a.bits, decoded(ref, ne).data(), a.threads, comm) : NAN;
    row[s].trained = res[s].heldout_mse_f16;
  }
}

// The container the run writes: the trained tables and their provenance.
void fill_codebook(const TrainRun& a, const ReadSet& r, CodebookProvenance prov, TrainReport& rep) {
  const LloydResult* res = rep.result;
  CodebookContainer& c = rep.codebook;
  c.axis = a.axis == TrellisAxis::channel ? CodebookAxis::channel : CodebookAxis::token;
  c.table.bits = a.bits;
  c.table.k = res[0].table_f16;
  c.table.v = res[1].table_f16;
  prov.iterations = std::max(res[0].iterations, res[1].iterations);
  prov.train_tiles_k = prov.train_tiles_v = r.train_total;
  prov.heldout_tiles_k = prov.heldout_tiles_v = r.heldout_total;
  prov.train_mse_k = res[0].train_mse_f16;
  prov.train_mse_v = res[1].train_mse_f16;
  prov.heldout_mse_k = res[0].heldout_mse_f16;
  prov.heldout_mse_v = res[1].heldout_mse_f16;
  prov.extra = {{"init", rep.init_name},
                {"iterations_k", std::to_string(res[0].iterations)},
                {"iterations_v", std::to_string(res[1].iterations)},
                {"stop_k", res[0].stop},
                {"stop_v", res[1].stop},
                {"tol", json_number(a.tol)},
                {"max_iters", std::to_string(a.max_iters)},
                {"heldout_fraction", json_number(a.heldout)},
                {"split_rng", SplitDrawer::rng_name()},
                {"seal", "staging=" + std::string(staging_name(a.staging)) + " sink=" + std::to_string(a.sink) +
                             " iters=" + std::to_string(a.iters) + (a.assume_rotated ? " assume_rotated" : "")},
                {"unused_entries", "keep their previous value"}};
  c.provenance = prov;
}

// Rank 0 writes the three forms into the outputs made at the start and commits them together.
void write_outputs(const TrainRun& a, const cluster::Comm& comm, const TrainReport& rep,
                   std::vector<std::unique_ptr<AtomicOutput>>& outs) {
  const CodebookContainer& c = rep.codebook;
  comm.agree([&](uint64_t&) {
    if (!comm.root()) return;  // the others hold no outputs
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
  });
}

}  // namespace

TrainReport train_and_evaluate(const TrainRun& a) {
  const cluster::Comm alone;
  const cluster::Comm& comm = a.comm ? *a.comm : alone;
  const bool root = comm.root(), dist = comm.distributed();
  // Rank 0 reports; the others work quietly.
  const TrainEvents quiet;
  const TrainEvents& ev = root ? a.events : quiet;
  TrainReport rep;
  // All outputs are created (and checked) before the work, and committed together at the end.
  rep.outputs = train_output_names(a.prefix, a.axis);
  std::vector<std::unique_ptr<AtomicOutput>> outs;
  const uint32_t ne = trellis_entries(a.bits);
  std::vector<uint16_t> init_k(ne), init_v(ne);
  comm.agree([&](uint64_t&) {
    if (root)
      for (const std::string& o : rep.outputs) outs.push_back(std::make_unique<AtomicOutput>(o));
    rep.init_name = starting_tables(a, init_k, init_v);
  });

  // The targets.
  const TargetOptions to = target_options(a);
  SplitDrawer split(a.seed, a.heldout);
  ReadSet r;
  CodebookProvenance prov;
  prov.tool_version = a.tool_version;
  prov.seed = a.seed;
  if (!dist) read_alone(a, ev, to, split, r, prov);
  else read_shared(a, comm, ev, to, split, r, prov);
  const size_t n_in = a.inputs.size();
  if (ev.reading) ev.reading(n_in, n_in);
  comm.agree([&](uint64_t&) {
    if (r.train_total == 0)
      throw std::invalid_argument("the inputs hold no sealed tile in the train set (a tile is a full group of 128 "
                                  "positions after the sink of " + std::to_string(a.sink) + ")");
  });
  if (ev.read) {
    const uint64_t spr = r.set.have_config ? sequences_per_record(r.set.seal_config) : 0;
    ev.read(SetSize{r.train_total, r.heldout_total, r.train_total * spr, r.heldout_total * spr});
  }

  // Lloyd on each side, from the starting tables, with its checkpoint.
  const std::string run_text = run_key_text(a, prov, rep.init_name);
  const std::string ckpt_path[2] = {a.prefix + ".k.ckpt", a.prefix + ".v.ckpt"};
  LloydOptions lo;
  lo.max_iters = a.max_iters;
  lo.tol = a.tol;
  lo.threads = a.threads;
  std::vector<uint16_t> id(ne);
  identity_codebook(a.bits, id.data());
  for (int s = 0; s < 2; ++s) {
    const Side side = s == 0 ? Side::k : Side::v;
    if (ev.side) ev.side(side);
    // A fresh GPU pass per side: its targets stay on the device for the side only. Ranks
    // combine CPU passes (the device pass sums a whole set on its own).
    lo.pass = a.lloyd_passes && !dist ? a.lloyd_passes() : LloydPass{};
    lo.comm = dist ? &comm : nullptr;
    lo.real_mse = nullptr;
    if (r.heldout_total)
      lo.real_mse = [&, s](const std::vector<uint16_t>& table) {
        double mk, mv;
        heldout_real_mse(r.set, s == 0 ? table.data() : id.data(), s == 0 ? id.data() : table.data(), a.threads, &mk,
                         &mv, comm);
        return s == 0 ? mk : mv;
      };
    lo.on_iteration = nullptr;
    if (ev.iteration) lo.on_iteration = [&, side](const LloydIteration& it) { ev.iteration(side, it); };
    LloydCheckpoint ck;
    lo.resume = nullptr;
    lo.on_state = nullptr;
    if (a.checkpoint) wire_checkpoint(a, comm, ev, s, run_text, ckpt_path[s], ck, lo);
    rep.result[s] = lloyd_train(s == 0 ? r.set.train_k : r.set.train_v, s == 0 ? r.set.heldout_k : r.set.heldout_v,
                                a.bits, s == 0 ? init_k.data() : init_v.data(), lo);
  }
  lo.pass = nullptr;

  heldout_comparison(a, comm, r, id, rep);
  rep.train_tiles = r.train_total;
  rep.heldout_tiles = r.heldout_total;
  fill_codebook(a, r, prov, rep);
  write_outputs(a, comm, rep, outs);
  if (a.checkpoint && root)
    for (const std::string& p : ckpt_path) std::remove(p.c_str());
  rep.codebook.codebook_id = raw_codebook_id(rep.codebook.table);
  rep.codebook.raw_sha256 = raw_codebook_sha256(rep.codebook.table);
  return rep;
}

}  // namespace sjkv::train
