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
  const std::string staging = staging_name(a.staging), axis = axis_text(a.axis);

  // starting tables
  std::vector<uint16_t> init_k(ne), init_v(ne);
  std::string& init_name = rep.init_name;
  comm.agree([&](uint64_t&) {
    if (root)
      for (const std::string& o : rep.outputs) outs.push_back(std::make_unique<AtomicOutput>(o));
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
    } else if (const TableSet* set = find_table_set(a.init)) {
      const RawCodebook* t = set->table(a.bits);
      if (!t) throw std::invalid_argument("table set " + set->name + " has no " + std::to_string(a.bits) + "-bit table");
      init_k = t->k;
      init_v = t->v;
      init_name = "table set " + set->name + " (" + hex64(raw_codebook_id(*t)) + ")";
    } else {
      const CodebookContainer c = read_codebook_any(a.init);
      if (c.table.bits != a.bits)
        throw FileError(a.init, "is a " + std::to_string(c.table.bits) + "-bit codebook; --bits is " + std::to_string(a.bits));
      init_k = c.table.k;
      init_v = c.table.v;
      init_name = "file " + a.init + " (" + hex64(c.codebook_id) + ")";
    }
  });

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
  const size_t n_in = a.inputs.size();
  uint64_t train_total = 0, heldout_total = 0;
  if (!dist) {
    for (size_t i = 0; i < n_in; ++i) {
      if (ev.reading) ev.reading(i, n_in);
      const std::string sha = sha256_file_hex(a.inputs[i]);
      const Capture cap = load_capture_any(a.inputs[i], a.io);
      try {
        append_capture_targets(cap, to, split, set);
      } catch (const std::invalid_argument& e) {
        throw FileError(a.inputs[i], e.what());
      }
      prov.inputs.push_back({a.inputs[i], sha});
    }
    train_total = set.train_records;
    heldout_total = set.heldout_records;
  } else {
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
      for (uint8_t h : held[i]) ++(h ? heldout_total : train_total);
    }
    set.seal_config = target_config(info.empty() ? 0 : info[0].head_dim, to);
    set.have_config = true;
    const uint32_t spr = sequences_per_record(set.seal_config);
    const RecordRange tr = shard_records(train_total, spr, comm.rank(), comm.size()),
                      ho = shard_records(heldout_total, spr, comm.rank(), comm.size());
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
          append_capture_targets(cap, to, held[i], keep, set);
        } catch (const std::invalid_argument& e) {
          throw FileError(a.inputs[i], e.what());
        }
      }
    });
  }
  if (ev.reading) ev.reading(n_in, n_in);
  comm.agree([&](uint64_t&) {
    if (train_total == 0)
      throw std::invalid_argument("the inputs hold no sealed tile in the train set (a tile is a full group of 128 "
                                  "positions after the sink of " + std::to_string(a.sink) + ")");
  });
  if (ev.read) {
    const uint64_t spr = set.have_config ? sequences_per_record(set.seal_config) : 0;
    ev.read(SetSize{train_total, heldout_total, train_total * spr, heldout_total * spr});
  }

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
    // A fresh GPU pass per side: its targets stay on the device for the side only. Ranks
    // combine CPU passes (the device pass sums a whole set on its own).
    lo.pass = a.lloyd_passes && !dist ? a.lloyd_passes() : LloydPass{};
    lo.comm = dist ? &comm : nullptr;
    lo.real_mse = nullptr;
    if (heldout_total)
      lo.real_mse = [&, s](const std::vector<uint16_t>& table) {
        double mk, mv;
        heldout_real_mse(set, s == 0 ? table.data() : id.data(), s == 0 ? id.data() : table.data(), a.threads, &mk, &mv,
                         comm);
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
      // Rank 0 reads the checkpoint and hands it to the others.
      bool have = false;
      comm.agree([&](uint64_t&) {
        struct stat st;
        if (root && ::stat(ckpt_path[s].c_str(), &st) == 0) {
          ck = read_lloyd_checkpoint(ckpt_path[s]);
          have = true;
        }
      });
      if (dist) {
        std::vector<uint8_t> b = have ? lloyd_checkpoint_bytes(ck) : std::vector<uint8_t>{};
        comm.broadcast(b);
        if (!root && !b.empty()) {
          ck = parse_lloyd_checkpoint(ckpt_path[s], b);
          have = true;
        }
      }
      if (have) {
        if (ck.run_key == key && ck.bits == a.bits && ck.side == static_cast<uint32_t>(s)) {
          lo.resume = &ck.state;
          if (ev.resumed) ev.resumed(side, ckpt_path[s], ck.state);
        } else if (ev.other_run) {
          ev.other_run(side, ckpt_path[s]);
        }
      }
      // Every rank comes here at the same iterations; rank 0 writes, and its failure is theirs.
      lo.on_state = [&, s, key](const LloydState& state) {
        comm.agree([&](uint64_t&) {
          if (!root) return;
          LloydCheckpoint c;
          c.bits = a.bits;
          c.side = static_cast<uint32_t>(s);
          c.run_key = key;
          c.state = state;
          write_lloyd_checkpoint(ckpt_path[s], c);
        });
      };
    }
    res[s] = lloyd_train(s == 0 ? set.train_k : set.train_v, s == 0 ? set.heldout_k : set.heldout_v, a.bits,
                         s == 0 ? init_k.data() : init_v.data(), lo);
  }
  lo.pass = nullptr;

  // held-out comparison
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
  rep.train_tiles = train_total;
  rep.heldout_tiles = heldout_total;

  CodebookContainer& c = rep.codebook;
  c.axis = a.axis == TrellisAxis::channel ? CodebookAxis::channel : CodebookAxis::token;
  c.table.bits = a.bits;
  c.table.k = res[0].table_f16;
  c.table.v = res[1].table_f16;
  prov.iterations = std::max(res[0].iterations, res[1].iterations);
  prov.train_tiles_k = prov.train_tiles_v = train_total;
  prov.heldout_tiles_k = prov.heldout_tiles_v = heldout_total;
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
  comm.agree([&](uint64_t&) {
    if (!root) return;  // the others hold no outputs
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
  if (a.checkpoint && root)
    for (const std::string& p : ckpt_path) std::remove(p.c_str());
  c.codebook_id = raw_codebook_id(c.table);
  c.raw_sha256 = raw_codebook_sha256(c.table);
  return rep;
}

}  // namespace sjkv::train
