// sjkv-replay: argument parsing and calls into the replay library, nothing else.
#include <CLI/CLI.hpp>
#include <omp.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>

#include "cli_common.h"
#include "sjkv/io/capture_file.h"
#include "sjkv/replay/model.h"
#include "sjkv/replay/results.h"
#include "sjkv/replay/run.h"
#include "sjkv/replay/tokenizer.h"
#include "sjkv/replay/trajectory.h"
#include "sjkv/train/sha256.h"

using namespace sjkv;
using namespace sjkv::replay;

namespace {

constexpr const char* kTool = "sjkv-replay";

struct ModelArgs {
  std::string model;
  int threads = 0;
  uint32_t ubatch = 512;
  bool ubatch_given = false;
  bool quiet = false;
  std::string device = "auto";
};

struct RecordArgs {
  std::string prompt_file, output, capture;
  uint32_t generate = 256;
  bool sample = false;
  uint64_t seed = 0;
  double temperature = 1.0, top_p = 1.0, self_kl = 5e-7;
  uint32_t top_k = 0;
  std::string reference = "f32";
  std::string encoding = "hidden";
};

struct ScoreArgs {
  std::vector<std::string> trajectories, arms;
  std::string baseline, out;
  uint32_t replicates = 2000;
  uint64_t boot_seed = BootstrapOptions{}.seed;
};

void note(const ModelArgs& m, const std::string& line) {
  if (!m.quiet) std::fprintf(stderr, "%s: %s\n", kTool, line.c_str());
}

struct Loaded {
  std::string path, sha256;
  std::unique_ptr<Model> model;
};

Loaded load_model(const ModelArgs& a) {
  Loaded l;
  l.path = a.model.empty() ? default_model_path() : a.model;
  if (l.path.empty())
    throw cli::UsageError("no model: pass --model FILE.gguf, set SJKV_MODEL, or run scripts/setup to install the default");
  if (a.threads > 0) omp_set_num_threads(a.threads);
  const std::string dev = set_seal_device(a.device == "cuda"  ? SealDevice::cuda
                                           : a.device == "cpu" ? SealDevice::cpu
                                                               : SealDevice::automatic);
  note(a, "model " + l.path + "; SJ records sealed on " + dev);
  l.sha256 = train::sha256_file_hex(l.path);
  LoadOptions opt;
  opt.n_threads = a.threads;
  l.model = Model::load(l.path, opt);
  return l;
}

std::string base_name(const std::string& p) {
  const size_t s = p.find_last_of('/');
  return s == std::string::npos ? p : p.substr(s + 1);
}

std::unique_ptr<KvArm> arm_or_usage(const std::string& spec, const char* option) {
  try {
    return make_arm(spec);
  } catch (const std::invalid_argument& e) {
    std::string examples;
    for (const std::string& s : arm_examples()) examples += (examples.empty() ? "" : ", ") + s;
    throw cli::UsageError(std::string(option) + " '" + spec + "': " + e.what() + " (examples: " + examples + ")");
  }
}

std::string read_prompt(const std::string& file) {
  std::string text;
  if (file.empty() || file == "-") {
    text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  } else {
    std::ifstream f(file, std::ios::binary);
    if (!f) throw FileError(file, std::string("cannot open: ") + std::strerror(errno));
    text.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
    if (f.bad()) throw FileError(file, "read error");
  }
  return text;
}

// Records one trajectory and writes it (and the capture when asked).
Trajectory do_record(const ModelArgs& ma, const RecordArgs& ra, Loaded& l, const std::string& out_path) {
  if (ra.generate == 0) throw cli::UsageError("--generate must be at least 1");
  if (!(ra.temperature > 0.0)) throw cli::UsageError("--temperature must be > 0");
  if (!(ra.top_p > 0.0 && ra.top_p <= 1.0)) throw cli::UsageError("--top-p must be in (0, 1]");
  if (!(ra.self_kl > 0.0 && ra.self_kl < 1e-3)) throw cli::UsageError("--self-kl must be in (0, 1e-3)");
  RefEncoding encoding;
  try {
    encoding = parse_encoding(ra.encoding);
  } catch (const std::invalid_argument& e) {
    throw cli::UsageError(std::string("--reference-encoding: ") + e.what());
  }
  const std::unique_ptr<KvArm> ref = arm_or_usage(ra.reference, "--reference");
  const std::unique_ptr<Tokenizer> tok = Tokenizer::from_gguf(l.model->gguf());

  RecordInput in;
  const std::string text = read_prompt(ra.prompt_file);
  in.prompt = tok->encode(text, true);
  if (in.prompt.empty()) throw cli::UsageError("the prompt is empty");
  in.settings.generate = ra.generate;
  in.settings.sample = ra.sample;
  in.settings.seed = ra.seed;
  in.settings.temperature = ra.temperature;
  in.settings.top_k = ra.top_k;
  in.settings.top_p = ra.top_p;
  in.settings.reference = ra.reference;
  in.settings.ubatch = ma.ubatch;
  in.settings.threads = static_cast<uint32_t>(ma.threads);
  in.settings.self_kl_target = ra.self_kl;
  in.model_file = base_name(l.path);
  in.model_sha256 = l.sha256;
  in.encoding = encoding;
  const Tokenizer* tp = tok.get();
  in.is_eog = [tp](int32_t id) { return tp->is_eog(id); };

  note(ma, "recording: " + std::to_string(in.prompt.size()) + " prompt tokens, up to " + std::to_string(ra.generate) +
               " generated, reference " + ra.reference + (ra.sample ? ", sampling" : ", greedy"));
  Capture cap;
  cli::Progress bar("record", ma.quiet);
  const Trajectory t = record_trajectory(*l.model, *ref, in, ra.capture.empty() ? nullptr : &cap, bar.callback());
  bar.finish();
  write_trajectory(out_path, t);
  struct stat st;
  const long long bytes = ::stat(out_path.c_str(), &st) == 0 ? static_cast<long long>(st.st_size) : -1;
  char b[512];
  if (t.encoding == RefEncoding::sparse) {
    uint64_t kept = 0;
    for (const RefDist& d : t.ref) kept += d.ids.size();
    std::snprintf(b, sizeof b, "wrote %s: %u generated, sparse encoding, %.0f tokens kept per position, %lld bytes, "
                  "self-KL <= %.3g", out_path.c_str(), t.generated(), static_cast<double>(kept) / t.generated(), bytes,
                  t.self_kl_max);
  } else {
    std::snprintf(b, sizeof b, "wrote %s: %u generated, hidden encoding (%u values per position, recomputed by "
                  "score with this model), %lld bytes, self-KL 0", out_path.c_str(), t.generated(), t.n_embd, bytes);
  }
  note(ma, b);
  if (!ra.capture.empty()) {
    write_capture(ra.capture, cap);
    note(ma, "wrote capture " + ra.capture + ": " + std::to_string(cap.layers.size()) + " layers x " +
                 std::to_string(cap.tokens) + " tokens");
  }
  return t;
}

int do_score(const ModelArgs& ma, const ScoreArgs& sa, Loaded& l, const std::vector<std::string>& paths) {
  if (sa.arms.empty()) throw cli::UsageError("--arms needs at least one arm");
  std::vector<std::unique_ptr<KvArm>> arms;
  for (const std::string& a : sa.arms) arms.push_back(arm_or_usage(a, "--arms"));
  const std::string baseline = sa.baseline.empty() ? sa.arms[0] : sa.baseline;
  if (std::find(sa.arms.begin(), sa.arms.end(), baseline) == sa.arms.end())
    throw cli::UsageError("--baseline '" + baseline + "' is not one of --arms");

  std::vector<Trajectory> trajs;
  for (const std::string& p : paths) {
    Trajectory t = read_trajectory(p);
    if (t.model_sha256 != l.sha256)
      throw FileError(p, "recorded with model " + t.model_file + " (SHA-256 " + t.model_sha256 + "), but the model is " +
                             l.path + " (SHA-256 " + l.sha256 + ")");
    trajs.push_back(std::move(t));
  }

  Results res;
  res.model_file = base_name(l.path);
  res.model_sha256 = l.sha256;
  res.settings = trajs[0].settings;
  res.baseline = baseline;
  res.bootstrap.replicates = sa.replicates;
  res.bootstrap.seed = sa.boot_seed;
  for (size_t i = 0; i < trajs.size(); ++i) res.trajectories.push_back({base_name(paths[i]), trajs[i].prompt_tokens, trajs[i].generated()});
  for (size_t a = 0; a < arms.size(); ++a) res.arms.push_back(ArmRows{sa.arms[a], {}});
  for (size_t i = 0; i < trajs.size(); ++i) {
    // Hidden encoding: recompute the reference rows once for all arms, checked bit for bit.
    std::unique_ptr<ReferenceRows> ref;
    try {
      ref = std::make_unique<ReferenceRows>(*l.model, trajs[i]);
    } catch (const std::invalid_argument& e) {
      throw FileError(paths[i], e.what());
    }
    for (size_t a = 0; a < arms.size(); ++a) {
      const uint32_t ubatch = ma.ubatch_given ? ma.ubatch : trajs[i].settings.ubatch;
      note(ma, "scoring " + sa.arms[a] + " on " + base_name(paths[i]) + " (" + std::to_string(trajs[i].generated()) +
                   " positions, ubatch " + std::to_string(ubatch) + ")");
      cli::Progress bar(sa.arms[a], ma.quiet);
      res.arms[a].rows.push_back(score_trajectory(*l.model, *arms[a], trajs[i], ubatch, bar.callback(), ref.get()));
    }
  }
  const Report rep = summarize(res);
  write_results(sa.out, res, rep);
  note(ma, "wrote " + sa.out + "/results.json, positions.csv, summary.md and three SVG plots");
  std::cout << summary_text(rep);
  return cli::kOk;
}

void add_model_options(CLI::App* c, ModelArgs& m) {
  c->add_option("--model", m.model, "GGUF model (default: $SJKV_MODEL, else the model scripts/setup installs)");
  c->add_option("--threads", m.threads, "OpenMP threads (0 = all cores); results are the same for any count")
      ->check(CLI::Range(0, 1024))->capture_default_str();
  c->add_option("--ubatch", m.ubatch, "Tokens per ubatch for the prompt (score: default the trajectory's)")
      ->check(CLI::Range(1u, 1u << 16))->capture_default_str()->each([&](const std::string&) { m.ubatch_given = true; });
  c->add_option("--device", m.device,
                 "Where the SJ-KVaRN/KVarN arms seal records: auto (a GPU when present), cpu or cuda; same bytes either way")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))->capture_default_str();
  c->add_flag("-q,--quiet", m.quiet, "No progress on stderr");
}

void add_record_options(CLI::App* c, RecordArgs& r) {
  c->add_option("--prompt-file", r.prompt_file, "Prompt text (default or '-': standard input)");
  c->add_option("--generate", r.generate, "Tokens to generate (fewer when the model ends its turn)")
      ->check(CLI::Range(1u, 1u << 20))->capture_default_str();
  c->add_flag("--sample", r.sample, "Sample instead of greedy decoding");
  c->add_option("--seed", r.seed, "Sampling seed")->capture_default_str();
  c->add_option("--temperature", r.temperature, "Sampling temperature")->capture_default_str();
  c->add_option("--top-k", r.top_k, "Sampling: keep the k most likely tokens (0 = all)")->capture_default_str();
  c->add_option("--top-p", r.top_p, "Sampling: keep the smallest set of mass >= p")->capture_default_str();
  c->add_option("--reference", r.reference, "Cache arm of the reference run")->capture_default_str();
  c->add_option("--reference-encoding", r.encoding,
                 "How the reference distribution is stored: hidden (the final hidden state; exact, a few KB per "
                 "position; score needs the same model and engine build) or sparse (the top logits; no model needed "
                 "to read, up to ~1 MB per position)")
      ->check(CLI::IsMember({"hidden", "sparse"}))->capture_default_str();
  c->add_option("--self-kl", r.self_kl, "Sparse encoding: largest KL the stored reference distribution may lose per "
                "position (nats)")
      ->capture_default_str();
  c->add_option("--capture", r.capture, "Also write the full-attention layers' K/V as a capture (for sjkv-train, sjkv-encode)");
}

void add_score_options(CLI::App* c, ScoreArgs& s, bool arms_required) {
  auto* o = c->add_option("--arms", s.arms, "Comma-separated cache arms, e.g. f16,q4_0,sj:4/4")->delimiter(',');
  if (arms_required) o->required();
  c->add_option("--baseline", s.baseline, "Arm the others are compared with (default: the first)");
  c->add_option("--out", s.out, "Results folder (created if missing)")->required();
  c->add_option("--bootstrap", s.replicates, "Bootstrap replicates")->check(CLI::Range(100u, 1000000u))->capture_default_str();
  c->add_option("--bootstrap-seed", s.boot_seed, "Bootstrap seed")->capture_default_str();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"sjkv-replay: what a KV-cache format costs a real model. record a generation with a reference cache, "
               "replay it with other caches, and report KL(reference || arm) at every generated position "
               "(exit codes: 0 ok, 1 usage, 2 bad input, 3 internal error)"};
  app.require_subcommand(1);

  ModelArgs rec_m, sc_m, run_m;
  RecordArgs rec_r, run_r;
  ScoreArgs sc_s, run_s;

  auto* rec = app.add_subcommand("record", "Generate from a prompt with the reference cache and write a trajectory file");
  add_record_options(rec, rec_r);
  rec->add_option("-o,--output", rec_r.output, "Trajectory file to write (.h5)")->required();
  add_model_options(rec, rec_m);

  auto* sc = app.add_subcommand("score", "Replay trajectories with each arm and write a results folder");
  sc->add_option("trajectories", sc_s.trajectories, "Trajectory files from record or run")->required();
  add_score_options(sc, sc_s, true);
  add_model_options(sc, sc_m);

  auto* run = app.add_subcommand("run", "record and score in one; the trajectory is saved in the results folder as "
                                        "trajectory.h5");
  add_record_options(run, run_r);
  add_score_options(run, run_s, true);
  add_model_options(run, run_m);
  app.footer("Example: sjkv-replay run --prompt-file prompt.txt --generate 256 --arms f16,q4_0,sj:4/4 --out results");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? cli::kOk : cli::kUsage;
  }

  if (rec->parsed())
    return cli::guarded(kTool, [&] {
      Loaded l = load_model(rec_m);
      do_record(rec_m, rec_r, l, rec_r.output);
      return cli::kOk;
    });
  if (sc->parsed())
    return cli::guarded(kTool, [&] {
      Loaded l = load_model(sc_m);
      return do_score(sc_m, sc_s, l, sc_s.trajectories);
    });
  if (run->parsed())
    return cli::guarded(kTool, [&] {
      for (const std::string& a : run_s.arms) (void)arm_or_usage(a, "--arms");  // before the long part
      Loaded l = load_model(run_m);
      if (::mkdir(run_s.out.c_str(), 0777) != 0 && errno != EEXIST)
        throw FileError(run_s.out, std::string("cannot create the folder: ") + std::strerror(errno));
      const std::string traj = run_s.out + "/trajectory.h5";
      do_record(run_m, run_r, l, traj);
      return do_score(run_m, run_s, l, {traj});
    });
  return cli::kUsage;
}
