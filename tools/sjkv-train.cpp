// sjkv-train: trains trellis codebooks on captures and writes them in the three codebook
// forms (docs/FORMAT.md section 8); `sjkv-train inspect FILE` prints and checks one.
// Argument parsing and calls into the libraries, nothing else.
#include <CLI/CLI.hpp>

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <sstream>

#include "sjkv/parallel.h"
#include "cli_common.h"
#include "sjkv/device.h"
#include "sjkv/io/load.h"
#include "sjkv/io/codebook.h"
#include "sjkv/io/lloyd_checkpoint.h"
#include "sjkv/io/model_geometry.h"
#include "sjkv/io/sha256.h"
#include "sjkv/io/table_set.h"
#include "sjkv/io/text.h"
#include "sjkv/train/pipeline.h"
#include "sjkv/train/train.h"
#include "sjkv/trellis.h"

using namespace sjkv;
using namespace sjkv::train;

namespace {

constexpr const char* kTool = "sjkv-train";
constexpr const char* kVersion = "sjkv-train 0.1.0";

struct TrainArgs {
  std::vector<std::string> inputs;
  std::string prefix;
  uint32_t bits = 3;
  uint64_t seed = 1;
  double tol = LloydOptions{}.tol;
  uint32_t max_iters = LloydOptions{}.max_iters;
  double heldout = 0.2;
  int threads = 0;
  bool quiet = false, json = false, assume_rotated = false, checkpoint = false;
  std::string init = "auto";  // auto, identity, reference, a shipped set or a codebook file
  std::string staging = "tq6_0";
  std::string axis = "token";
  std::string device = "auto";  // auto | cpu | cuda: where the Lloyd encode + sum passes run
  uint32_t sink = 128, iters = 16;
  cli::StateOptions state;
};

// The options checked and turned into the run (UsageError, FileError); the device chosen.
void prepare_train(const TrainArgs& a, const cluster::Comm& comm, TrainRun& run, std::unique_ptr<Device>& device) {
  if (a.bits < 2 || a.bits > 4) throw cli::UsageError("--bits must be 2, 3 or 4");
  if (!(a.heldout >= 0.0 && a.heldout < 1.0)) throw cli::UsageError("--heldout must be in [0, 1)");
  if (!(a.tol >= 0.0 && std::isfinite(a.tol))) throw cli::UsageError("--tol must be finite and >= 0");
  // -o is a prefix; "out/" or a folder would write the hidden files out/.sjcb, out/.bin, out/.h.
  {
    const std::string base = base_name(a.prefix);
    if (base.empty() || base == "." || base == ".." || is_folder(a.prefix))
      throw cli::UsageError("-o '" + a.prefix + "' names a folder; give a file prefix such as " +
                            (a.prefix.empty() || a.prefix.back() == '/' ? a.prefix : a.prefix + "/") +
                            "cb3 (writes cb3.sjcb, cb3.bin, cb3.h)");
  }
  run.axis = a.axis == "channel" ? TrellisAxis::channel : TrellisAxis::token;
  {
    CodecConfig cc;
    cc.bits_k = cc.bits_v = a.bits;
    cc.body = Body::trellis;
    cc.sink = a.sink;
    cc.iters = a.iters;
    cc.trellis_axis = run.axis;
    cli::check_codec_options(cc);
  }
  // --init auto: the model's shipped table set (--model) when it has a table of this width.
  std::string init = a.init;
  const TableSet* named = find_table_set(init);
  if (named && !named->table(a.bits))
    throw cli::UsageError("--init " + init + ": the table set has no " + std::to_string(a.bits) + "-bit table");
  if (init == "auto") {
    init = "identity";
    if (!a.state.model.empty() && run.axis == TrellisAxis::token) {
      const TableSet* set = table_set_for(supported_geometry(GgufFile::open(a.state.model), ModelUse::geometry));
      if (set && set->table(a.bits)) init = set->name;
    }
  }
  std::vector<std::string> ins = a.inputs;
  if (init != "identity" && init != "reference" && !find_table_set(init)) ins.push_back(init);
  run.prefix = a.prefix;
  for (const std::string& o : train_output_names(run.prefix, run.axis)) cli::check_output(o, "-o", ins);
  if (comm.distributed() && a.device == "cuda")
    throw cli::UsageError("--device cuda trains in one process; under MPI the ranks' Lloyd passes run on the CPU "
                          "(--device cpu or auto)");
  device = std::make_unique<Device>(Device::resolve(comm.distributed() ? "cpu" : a.device, "this build has no CUDA support"));
  if (!parse_staging(a.staging, &run.staging)) throw cli::UsageError("--staging must be tq6_0, q8_0 or f16");
  run.inputs = a.inputs;
  // --model's architecture and attention shapes, refused as sjkv-replay refuses them (exit 2).
  if (!a.state.model.empty()) (void)supported_geometry(GgufFile::open(a.state.model), ModelUse::geometry);
  run.io = a.state.resolve();
  run.bits = a.bits;
  run.init = init;
  run.seed = a.seed;
  run.heldout = a.heldout;
  run.tol = a.tol;
  run.max_iters = a.max_iters;
  run.threads = a.threads;
  run.sink = a.sink;
  run.iters = a.iters;
  run.assume_rotated = a.assume_rotated;
  run.checkpoint = a.checkpoint;
  run.tool_version = kVersion;
  Device* d = device.get();
  run.lloyd_passes = [d] { return d->lloyd_pass(); };
  run.comm = &comm;
}

int run_train(const TrainArgs& a) {
  const cluster::Comm& comm = cluster::Comm::world();
  TrainRun run;
  std::unique_ptr<Device> device;
  // The checks before the work, on every rank: one rank prints their error.
  comm.agree([&](uint64_t&) { prepare_train(a, comm, run, device); });
  const bool quiet = a.quiet || !comm.root();

  const uint32_t ne = trellis_entries(a.bits);
  cli::Progress reading("reading", quiet);
  std::unique_ptr<cli::Progress> training;
  auto side_name = [](Side s) { return s == Side::k ? "K" : "V"; };
  TrainEvents& ev = run.events;
  ev.reading = [&](size_t done, size_t total) { reading.update(done, total); };
  ev.read = [&](const SetSize& set) {
    reading.finish();
    if (a.quiet) return;
    // Information only once the inputs are read: an error stays the only line.
    if (comm.distributed())
      std::fprintf(stderr, "%s: Lloyd passes on cpu, %d MPI ranks\n", kTool, comm.size());
    else
      std::fprintf(stderr, "%s: Lloyd passes on %s%s\n", kTool, device->cuda() ? "cuda: " : "cpu",
                   device->gpu_name().c_str());
    std::fprintf(stderr, "%s: %" PRIu64 " train and %" PRIu64 " held-out tiles (%" PRIu64 " + %" PRIu64
                 " sequences per side), split %s\n",
                 kTool, set.train_tiles, set.heldout_tiles, set.train_sequences, set.heldout_sequences,
                 SplitDrawer::rng_name());
  };
  ev.side = [&](Side s) {
    training.reset();
    training = std::make_unique<cli::Progress>(std::string("training ") + side_name(s), quiet || a.json);
  };
  ev.resumed = [&](Side s, const std::string& path, const LloydState& st) {
    if (!a.quiet)
      std::fprintf(stderr, "%s: %s goes on from %s (iteration %u%s%s)\n", kTool, side_name(s), path.c_str(),
                   st.history.back().iter, st.stop.empty() ? "" : ", stopped: ", st.stop.c_str());
  };
  ev.other_run = [&](Side s, const std::string& path) {
    if (!a.quiet)
      std::fprintf(stderr, "%s: %s is from another run (other inputs or options); starting %s over\n", kTool,
                   path.c_str(), side_name(s));
  };
  ev.iteration = [&](Side s, const LloydIteration& it) {
    training->update(it.iter, a.max_iters);
    if (!a.quiet) {
      training->finish();
      std::fprintf(stderr, "%s %s iter %2u: train mse %.6f  held-out mse %s  held-out real-value mse %s  entries used %u/%u\n",
                   kTool, side_name(s), it.iter, it.train_mse, json_number(it.heldout_mse).c_str(),
                   json_number(it.heldout_real_mse).c_str(), it.entries_used, ne);
    }
  };
  const TrainReport rep = train_and_evaluate(run);
  training.reset();
  if (!comm.root()) return cli::kOk;
  const LloydResult* res = rep.result;
  const HeldoutRow* row = rep.heldout;
  const HeldoutRow* real = rep.heldout_real;
  const uint64_t cid = rep.codebook.codebook_id;
  const std::string& rsha = rep.codebook.raw_sha256;
  const std::string& init_name = rep.init_name;
  const bool token_axis = run.axis == TrellisAxis::token;

  if (a.json) {
    std::ostringstream o;
    o << "{\n  \"tool_version\": " << json_string(kVersion) << ",\n  \"bits\": " << a.bits << ",\n  \"window_length\": "
      << trellis_window_len(a.bits) << ",\n  \"axis\": " << json_string(a.axis) << ",\n  \"codebook_id\": \"" << hex64(cid)
      << "\",\n  \"raw_sha256\": \"" << rsha << "\",\n  \"seed\": " << a.seed << ",\n  \"split_rng\": "
      << json_string(SplitDrawer::rng_name()) << ",\n  \"train_tiles\": " << rep.train_tiles
      << ",\n  \"heldout_tiles\": " << rep.heldout_tiles << ",\n  \"outputs\": [";
    for (size_t i = 0; i < rep.outputs.size(); ++i) o << (i ? ", " : "") << json_string(rep.outputs[i]);
    o << "],\n  \"iterations\": {";
    for (int s = 0; s < 2; ++s) {
      o << (s ? ", " : "") << "\"" << (s == 0 ? "k" : "v") << "\": [";
      for (size_t i = 0; i < res[s].history.size(); ++i) {
        const auto& it = res[s].history[i];
        o << (i ? ", " : "") << "{\"iter\": " << it.iter << ", \"train_mse\": " << json_number(it.train_mse)
          << ", \"heldout_mse\": " << json_number(it.heldout_mse) << ", \"heldout_real_mse\": " << json_number(it.heldout_real_mse)
          << ", \"entries_used\": " << it.entries_used << "}";
      }
      o << "]";
    }
    o << "},\n  \"stop\": {\"k\": " << json_string(res[0].stop) << ", \"v\": " << json_string(res[1].stop)
      << "},\n  \"init\": " << json_string(init_name) << ",\n  \"train_mse\": {\"k\": " << json_number(res[0].train_mse_f16) << ", \"v\": " << json_number(res[1].train_mse_f16)
      << "},\n  \"heldout_mse\": {";
    for (int s = 0; s < 2; ++s)
      o << (s ? ", " : "") << "\"" << (s == 0 ? "k" : "v") << "\": {\"scalar\": " << json_number(row[s].scalar)
        << ", \"identity\": " << json_number(row[s].identity) << ", \"reference\": " << json_number(row[s].reference)
        << ", \"trained\": " << json_number(row[s].trained) << "}";
    o << "},\n  \"heldout_real_mse\": {";
    for (int s = 0; s < 2; ++s)
      o << (s ? ", " : "") << "\"" << (s == 0 ? "k" : "v") << "\": {\"identity\": " << json_number(real[s].identity)
        << ", \"reference\": " << json_number(real[s].reference) << ", \"trained\": " << json_number(real[s].trained) << "}";
    o << "}\n}\n";
    std::cout << o.str();
  } else if (!a.quiet) {
    std::printf("codebook %u-bit %s axis, id %s, raw sha256 %s\n", a.bits, a.axis.c_str(), hex64(cid).c_str(), rsha.c_str());
    std::printf("wrote %s.sjcb, %s.bin%s\n", a.prefix.c_str(), a.prefix.c_str(),
                token_axis ? (", " + a.prefix + ".h").c_str() : " (no C header for a channel-axis table)");
    std::printf("from %s: K %u iterations (%s), V %u iterations (%s)\n", init_name.c_str(), res[0].iterations,
                res[0].stop.c_str(), res[1].iterations, res[1].stop.c_str());
    std::printf("held-out MSE of the trellis targets y (units of the row step), %" PRIu64 " tiles:\n",
                rep.heldout_tiles);
    std::printf("  side  %10s %10s %10s %10s\n", "scalar", "identity", "reference", "trained");
    for (int s = 0; s < 2; ++s)
      std::printf("  %-4s  %10s %10s %10s %10s\n", s == 0 ? "K" : "V", json_number(row[s].scalar).c_str(),
                  json_number(row[s].identity).c_str(), json_number(row[s].reference).c_str(), json_number(row[s].trained).c_str());
    std::printf("held-out MSE on the real values (sealed with the fp16 tables, refit, decoded; rotated basis):\n");
    std::printf("  side  %10s %10s %10s %10s\n", "scalar", "identity", "reference", "trained");
    for (int s = 0; s < 2; ++s)
      std::printf("  %-4s  %10s %10s %10s %10s\n", s == 0 ? "K" : "V", "-", json_number(real[s].identity).c_str(),
                  json_number(real[s].reference).c_str(), json_number(real[s].trained).c_str());
  }
  return cli::kOk;
}

int run_inspect(const std::string& path, bool json) {
  CodebookFileKind kind;
  const CodebookContainer c = read_codebook_any(path, &kind);
  const std::string file_sha = sha256_file_hex(path);
  const char* kn = kind == CodebookFileKind::container ? "sjcb container" : kind == CodebookFileKind::raw ? "raw table" : "C header";
  const CodebookProvenance& p = c.provenance;
  if (json) {
    std::ostringstream o;
    o << "{\n  \"file\": " << json_string(path) << ",\n  \"kind\": \"" << kn << "\",\n  \"file_sha256\": \"" << file_sha
      << "\",\n  \"bits\": " << c.table.bits << ",\n  \"window_length\": " << trellis_window_len(c.table.bits)
      << ",\n  \"axis\": \"" << axis_name(c.axis) << "\",\n  \"entries\": " << c.table.k.size()
      << ",\n  \"codebook_id\": \"" << hex64(c.codebook_id) << "\",\n  \"raw_sha256\": \"" << c.raw_sha256
      << "\",\n  \"hashes_ok\": true";
    if (kind == CodebookFileKind::container) {
      o << ",\n  \"version\": " << c.version << ",\n  \"provenance\": {\"tool_version\": " << json_string(p.tool_version)
        << ", \"inputs\": [";
      for (size_t i = 0; i < p.inputs.size(); ++i)
        o << (i ? ", " : "") << "{\"path\": " << json_string(p.inputs[i].path) << ", \"sha256\": \"" << p.inputs[i].sha256 << "\"}";
      o << "], \"seed\": " << p.seed << ", \"iterations\": " << p.iterations << ", \"train_tiles_k\": " << p.train_tiles_k
        << ", \"train_tiles_v\": " << p.train_tiles_v << ", \"heldout_tiles_k\": " << p.heldout_tiles_k
        << ", \"heldout_tiles_v\": " << p.heldout_tiles_v << ", \"train_mse_k\": " << json_number(p.train_mse_k)
        << ", \"train_mse_v\": " << json_number(p.train_mse_v) << ", \"heldout_mse_k\": " << json_number(p.heldout_mse_k)
        << ", \"heldout_mse_v\": " << json_number(p.heldout_mse_v) << ", \"extra\": {";
      for (size_t i = 0; i < p.extra.size(); ++i)
        o << (i ? ", " : "") << json_string(p.extra[i].first) << ": " << json_string(p.extra[i].second);
      o << "}}";
    }
    for (int s = 0; s < 2; ++s) {
      const auto& t = s == 0 ? c.table.k : c.table.v;
      o << ",\n  \"" << (s == 0 ? "k" : "v") << "_table\": [";
      for (size_t i = 0; i < t.size(); ++i) {
        char b[8];
        std::snprintf(b, sizeof b, "%u", t[i]);
        o << (i ? "," : "") << b;
      }
      o << "]";
    }
    o << "\n}\n";
    std::cout << o.str();
    return cli::kOk;
  }
  std::printf("file          %s\nkind          %s\nfile sha256   %s\n", path.c_str(), kn, file_sha.c_str());
  if (kind == CodebookFileKind::container) std::printf("version       %u\n", c.version);
  std::printf("bits          %u\nwindow        L = %u\naxis          %s\nentries       %zu per side\n", c.table.bits,
              trellis_window_len(c.table.bits), axis_name(c.axis), c.table.k.size());
  std::printf("codebook id   %s (FNV-1a-64, format basis, K then V)%s\n", hex64(c.codebook_id).c_str(),
              kind == CodebookFileKind::container ? ": matches the tables" : "");
  std::printf("raw sha256    %s%s\n", c.raw_sha256.c_str(),
              kind == CodebookFileKind::container ? ": matches the tables"
              : kind == CodebookFileKind::header  ? ": matches SJKVARN_CB*_TOK_SHA256"
                                                  : " (= file sha256)");
  if (kind == CodebookFileKind::container) {
    std::printf("file checksum ok\nprovenance\n  tool_version     %s\n", p.tool_version.c_str());
    for (const auto& in : p.inputs) std::printf("  input            %s  %s\n", in.sha256.c_str(), in.path.c_str());
    std::printf("  seed             %" PRIu64 "\n  iterations       %u\n", p.seed, p.iterations);
    std::printf("  tiles            train K %" PRIu64 " V %" PRIu64 ", held-out K %" PRIu64 " V %" PRIu64 "\n",
                p.train_tiles_k, p.train_tiles_v, p.heldout_tiles_k, p.heldout_tiles_v);
    std::printf("  train mse        K %s  V %s\n  held-out mse     K %s  V %s\n", json_number(p.train_mse_k).c_str(),
                json_number(p.train_mse_v).c_str(), json_number(p.heldout_mse_k).c_str(), json_number(p.heldout_mse_v).c_str());
    for (const auto& kv : p.extra) std::printf("  %-16s %s\n", kv.first.c_str(), kv.second.c_str());
  }
  for (int s = 0; s < 2; ++s) {
    const auto& t = s == 0 ? c.table.k : c.table.v;
    std::printf("%s table (fp16 hex, 16 per line)\n", s == 0 ? "K" : "V");
    for (size_t i = 0; i < t.size(); i += 16) {
      std::printf("  %4zu:", i);
      for (size_t j = i; j < i + 16 && j < t.size(); ++j) std::printf(" %04x", t[j]);
      std::printf("\n");
    }
  }
  std::printf("hashes        ok\n");
  return cli::kOk;
}

}  // namespace

int main(int argc, char** argv) {
  sjkv::settle_parallel_runtime(argv);  // OpenMP's wait, before anything else (sjkv/parallel.h)
  cli::hold_standard_output();  // before any file is opened
  cluster::Session mpi(&argc, &argv);  // the ranks of mpirun or srun, when it started us
  if (argc >= 2 && std::strcmp(argv[1], "inspect") == 0) {
    CLI::App app{"sjkv-train inspect: print a codebook file (.sjcb container, raw .bin table or C header) and check "
                 "its hashes (exit codes: 0 ok, 1 usage, 2 bad input, 3 internal error)"};
    app.name("sjkv-train inspect");
    std::string path;
    bool json = false;
    app.add_option("file", path, "Codebook file")->required();
    app.add_flag("--json", json, "JSON output");
    try {
      app.parse(argc - 1, argv + 1);
    } catch (const CLI::ParseError& e) {
      return cli::parse_failed(app, e);
    }
    return cli::guarded(kTool, [&] {
      cli::one_process("inspect");
      return run_inspect(path, json);
    });
  }

  CLI::App app{"sjkv-train: trains trellis codebooks (token axis, or --axis channel) on captures, .kvd dumps or llama.cpp state files and "
               "writes PREFIX.sjcb, PREFIX.bin and PREFIX.h; `sjkv-train inspect FILE` prints one (exit codes: 0 ok, "
               "1 usage, 2 bad input, 3 internal error)"};
  app.footer(cluster::built_with_mpi()
                 ? "Under mpirun or srun the ranks share the inputs and the Lloyd passes (--threads per rank) and rank 0 "
                   "writes the same bytes as one process: mpirun -n 8 sjkv-train caps/*.h5 --bits 3 -o cb3"
                 : "This build has no MPI (SJKV_MPI): it runs as one process.");
  TrainArgs a;
  app.add_option("inputs", a.inputs, "Capture (.h5), .kvd tile dump or llama.cpp state file(s)")->required();
  app.add_option("-o,--output", a.prefix, "Output prefix: PREFIX.sjcb, PREFIX.bin, PREFIX.h")->required();
  app.add_option("--bits", a.bits, "Trellis width: 2, 3 or 4")->check(CLI::IsMember({2u, 3u, 4u}))->capture_default_str();
  app.add_option("--seed", a.seed, "Seed of the train / held-out split")->check(cli::non_negative())->capture_default_str();
  app.add_option("--tol", a.tol, "Converged: stop when an iteration lowers the train MSE by less than this fraction")
      ->capture_default_str();
  app.add_option("--max-iters", a.max_iters, "Safety cap on Lloyd iterations (the stop is --tol)")
      ->check(CLI::Range(0u, 10000u))->capture_default_str();
  app.add_option("--heldout", a.heldout, "Fraction of tiles held out")->capture_default_str();
  app.add_option("--init", a.init,
                 "Starting tables: auto (with --model, the model's shipped table set when it has this width; otherwise "
                 "identity), identity (scalar levels), reference (the format's built-in tables), a shipped set's name, "
                 "or a codebook file (.sjcb, .bin or .h). Shipped: " + table_sets_help())
      ->capture_default_str();
  app.add_option("--threads", a.threads, "Threads (0 = all cores); the codebook does not depend on it")
      ->check(CLI::Range(0, 1024))->capture_default_str();
  app.add_option("--axis", a.axis, "Trellis axis: token (the format's) or channel (sjkv extension; no C header)")
      ->check(CLI::IsMember({"token", "channel"}))->capture_default_str();
  app.add_option("--staging", a.staging, "Staging rows the seal reads: tq6_0, q8_0 or f16")
      ->check(CLI::IsMember(staging_names()))->capture_default_str();
  app.add_option("--sink", a.sink, "Sink positions (not sealed)")->capture_default_str();
  app.add_option("--iters", a.iters, "Balancing iterations")->check(CLI::Range(0u, 64u))->capture_default_str();
  app.add_flag("--assume-rotated", a.assume_rotated, "The inputs are already in the rotated basis");
  cli::add_state_options(&app, a.state, "llama.cpp state files");
  app.add_option("--device", a.device,
                 "Where the Lloyd passes run: auto (a GPU when present), cpu or cuda; the codebook does not depend on it")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))->capture_default_str();
  app.add_flag("--checkpoint", a.checkpoint,
               "Save each side's training state to PREFIX.k.ckpt / PREFIX.v.ckpt after every iteration and go on from "
               "them when run again with the same inputs and options (same result as an uninterrupted run); removed at "
               "the end");
  app.add_flag("--json", a.json, "Print a JSON summary on stdout");
  app.add_flag("-q,--quiet", a.quiet, "No progress or per-iteration lines on stderr");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return cli::parse_failed(app, e);
  }
  return cli::guarded(kTool, [&] { return run_train(a); });
}
