// sjkv-replay: argument parsing and calls into the replay library, nothing else.
#include <CLI/CLI.hpp>
#include <cstdlib>
#include <omp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <fstream>
#include <iostream>
#include <iterator>
#include <optional>
#include <sstream>

#include "sjkv/parallel.h"
#include "cli_common.h"
#include "sjkv/device.h"
#include "sjkv/io/atomic_file.h"
#include "sjkv/io/capture_file.h"
#include "sjkv/io/paths.h"
#include "sjkv/replay/arms.h"
#include "sjkv/replay/engine.h"
#include "sjkv/replay/frontier.h"
#include "sjkv/replay/model.h"
#include "sjkv/replay/results.h"
#include "sjkv/replay/run.h"
#include "sjkv/replay/score_set.h"
#include "sjkv/replay/tokenizer.h"
#include "sjkv/replay/transcript.h"
#include "sjkv/replay/compare.h"
#include "sjkv/replay/reference.h"
#include "sjkv/io/sha256.h"
#include "sjkv/io/table_set.h"
#include "sjkv/io/model_geometry.h"
#include "sjkv/io/text.h"

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
  std::string tables = "auto";  // --codebook: trellis tables of the SJ arms that name none
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
  bool special = false;
  // --transcript: an agent transcript rendered with a chat template (docs/REPLAY.md, "Transcripts")
  std::string transcript, chat_template, assistant_turns = "regenerate", idle;
};

struct ScoreArgs {
  std::vector<std::string> trajectories, arms;
  std::string baseline, out;
  uint32_t replicates = 2000;
  uint64_t boot_seed = BootstrapOptions{}.seed;
  bool per_arm = false, stepwise = false, profile = false;
};

struct FrontierArgs {
  std::vector<std::string> tune, heldout, arms, also;
  std::vector<double> budgets;
  uint32_t context = 0, keep = 3, replicates = 2000;
  uint64_t boot_seed = 0x5eed2026ull;
  bool quick = false;
  // Not given: sj:4/4, or sj:4/4:staging=q8_0 where tq6_0 staging cannot hold the head size.
  std::string out, default_arm;
  bool default_given = false;
};

void note(const ModelArgs& m, const std::string& line) {
  if (!m.quiet) std::fprintf(stderr, "%s: %s\n", kTool, line.c_str());
}

struct Loaded {
  std::string path, sha256;
  std::unique_ptr<Model> model;
  Device device;  // where the SJ arms seal: resolved once, handed to every arm made to run
};

std::string model_path_of(const ModelArgs& a) { return a.model.empty() ? default_model_path() : a.model; }

Loaded load_model(const ModelArgs& a) {
  Loaded l;
  l.path = model_path_of(a);
  if (l.path.empty())
    throw cli::UsageError("no model: pass --model FILE.gguf, set SJKV_MODEL, or run scripts/setup to install the default");
  if (a.threads > 0) omp_set_num_threads(a.threads);
  l.device = Device::resolve(a.device);
  l.sha256 = sha256_file_hex(l.path);
  LoadOptions opt;
  opt.n_threads = a.threads;
  l.model = Model::load(l.path, opt);
  note(a, "model " + l.path + "; SJ records sealed on " + l.device.describe());
  return l;
}

// The folder of one arm under --per-arm: the spec with '/' written '_' (the grammar has no other
// character a path cannot hold).
std::string arm_folder(const std::string& spec) {
  std::string f = spec;
  std::replace(f.begin(), f.end(), '/', '_');
  return f;
}

// `sealers`: for an arm that runs (Device::sealers); checks leave it empty.
std::unique_ptr<KvArm> arm_or_usage(const std::string& spec, const char* option, const SealerSource& sealers = {}) {
  try {
    return make_arm(spec, sealers);
  } catch (const std::invalid_argument& e) {
    std::string examples;
    for (const std::string& s : arm_examples()) examples += (examples.empty() ? "" : ", ") + s;
    throw cli::UsageError(std::string(option) + " '" + spec + "': " + e.what() + " (examples: " + examples + ")");
  }
}

TableChoice table_choice(const ModelArgs& ma) {
  try {
    return TableChoice::parse(ma.tables);
  } catch (const std::invalid_argument& e) {
    throw cli::UsageError(std::string("--codebook ") + e.what());
  }
}

// The arms as they run on the loaded model: an SJ trellis arm that names no tables gets the
// model's shipped set where --codebook picks one (arm_with_tables), said once per arm.
std::vector<std::string> arms_on_model(const ModelArgs& ma, const Loaded& l, const std::vector<std::string>& specs,
                                       const char* option) {
  const TableChoice choice = table_choice(ma);
  const ModelGeometry g = geometry_of(l.model->info());
  std::vector<std::string> out;
  for (const std::string& s : specs) {
    (void)arm_or_usage(s, option);
    out.push_back(arm_with_tables(s, choice, &g));
    if (out.back() != s)
      note(ma, s + " runs as " + out.back() + ": the shipped tables of this model (--codebook reference: the format's)");
  }
  return out;
}

// The prompt text, checked: not empty or blank, valid UTF-8 (FileError, exit 2).
std::string read_prompt(const std::string& file) {
  std::string text;
  const bool in = file.empty() || file == "-";
  const std::string name = in ? "<stdin>" : file;
  if (in) {
    text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  } else {
    if (is_folder(file)) throw FileError(file, "is a folder, not a prompt file");
    std::ifstream f(file, std::ios::binary);
    if (!f) throw FileError(file, std::string("cannot open: ") + std::strerror(errno));
    text.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
    if (f.bad()) throw FileError(file, "read error");
  }
  if (text.find_first_not_of(" \t\n\r\f\v") == std::string::npos) throw FileError(name, "the prompt is empty");
  const size_t bad = invalid_utf8_at(text);
  if (bad != std::string::npos) throw FileError(name, "not valid UTF-8 at byte " + std::to_string(bad));
  return text;
}

void check_output_folder(const std::string& path) {
  if (path_exists(path) && !is_folder(path)) throw FileError(path, "--out: exists and is not a folder");
  if (!is_folder(parent_folder(path))) throw FileError(path, "--out: the folder " + parent_folder(path) + " does not exist");
}

// Every arm must serve every layer shape of the model at this context and ubatch; called
// before the long work so that a spec that does not fit the model fails at once (exit 1).
void check_arms_fit(const Loaded& l, const std::vector<std::string>& specs, uint32_t n_ctx, uint32_t n_ubatch,
                    const char* option) {
  for (const std::string& spec : specs) {
    const std::unique_ptr<KvArm> arm = arm_or_usage(spec, option);  // a fresh arm: make_layer may keep state
    for (LayerShape s : l.model->info().layers) {
      s.n_ctx = n_ctx;
      s.n_ubatch = n_ubatch;
      try {
        (void)arm->make_layer(s);
      } catch (const std::invalid_argument& e) {
        throw cli::UsageError(std::string(option) + " '" + spec + "' does not fit " + base_name(l.path) + " (layer " +
                              std::to_string(s.layer) + ", head_dim " + std::to_string(s.head_dim) + "): " + e.what());
      }
    }
    try {
      arm->check_layers(l.model->info().layers);
    } catch (const std::invalid_argument& e) {
      throw cli::UsageError(std::string(option) + " '" + spec + "' does not fit " + base_name(l.path) + ": " + e.what());
    }
  }
}

// ---- record --transcript (docs/design/agentic.md section 2) --------------------------------

// The transcript's tokens must fit the model's training context (exit 1, with the numbers).
void check_transcript_context(const TranscriptPlan& tp, uint32_t generate, const std::string& model_path,
                              uint64_t n_train) {
  const std::string why = transcript_context_refusal(tp, generate, model_path, n_train);
  if (!why.empty()) throw cli::UsageError(why);
}

// --idle as the idle steps' keep_recent: none for "none", 0 when not given.
std::optional<uint32_t> idle_keep(const RecordArgs& ra) {
  if (ra.idle == "none") return std::nullopt;
  if (ra.idle.empty()) return 0u;
  const bool digits = ra.idle.size() <= 9 && ra.idle.find_first_not_of("0123456789") == std::string::npos;
  if (!digits) throw cli::UsageError("--idle '" + ra.idle + "': give keep_recent (a count of tokens, e.g. 0) or none");
  return static_cast<uint32_t>(std::stoul(ra.idle));
}

void check_record_args(const RecordArgs& ra) {
  if (ra.generate == 0) throw cli::UsageError("--generate must be at least 1");
  if (!(ra.temperature > 0.0 && std::isfinite(ra.temperature)))
    throw cli::UsageError("--temperature must be finite and > 0");
  if (!(ra.top_p > 0.0 && ra.top_p <= 1.0)) throw cli::UsageError("--top-p must be in (0, 1]");
  if (!(ra.self_kl > 0.0 && ra.self_kl < 1e-3)) throw cli::UsageError("--self-kl must be in (0, 1e-3)");
  try {
    (void)parse_encoding(ra.encoding);
  } catch (const std::invalid_argument& e) {
    throw cli::UsageError(std::string("--reference-encoding: ") + e.what());
  }
  (void)arm_or_usage(ra.reference, "--reference");
  (void)idle_keep(ra);
}

// Records one trajectory and writes it (and the capture when asked).
// `text` was read and checked by read_prompt; `fits` runs the checks that need the prompt's
// length (arms against the context) before anything long starts.
// With `deferred`, the written outputs are handed back uncommitted (run commits them with its
// results); otherwise the trajectory and the capture are committed together.
// With `tp` (record --transcript), its plan is recorded instead of `text`, with the idle steps of
// --idle, and its provenance goes into the trajectory.
Trajectory do_record(const ModelArgs& ma, const RecordArgs& ra, Loaded& l, const std::string& text,
                     const TranscriptPlan* tp, const std::string& out_path,
                     std::vector<std::unique_ptr<AtomicOutput>>* deferred = nullptr,
                     const std::function<void(uint32_t n_ctx)>& fits = {}) {
  check_record_args(ra);
  if (!ra.capture.empty()) {
    const std::string why = capture_refusal(l.model->info());
    if (!why.empty()) throw cli::UsageError("--capture: the model " + l.path + " " + why);
  }
  const RefEncoding encoding = parse_encoding(ra.encoding);
  const std::unique_ptr<KvArm> ref = arm_or_usage(ra.reference, "--reference", l.device.sealers());
  const std::unique_ptr<Tokenizer> tok = Tokenizer::from_gguf(l.model->gguf());

  RecordInput in;
  uint64_t n_ctx = 0;
  const uint64_t n_train = l.model->info().n_ctx_train;
  if (tp) {
    check_transcript_context(*tp, ra.generate, l.path, n_train);  // as before loading, with the model's figure
    in.plan = with_idle_steps(tp->plan, idle_keep(ra));
    n_ctx = tp->context(ra.generate);
  } else {
    in.prompt = ra.special ? tok->encode_special(text, true) : tok->encode(text, true);
    const std::string prompt_name = ra.prompt_file.empty() || ra.prompt_file == "-" ? "<stdin>" : ra.prompt_file;
    // Not blank (read_prompt checked), yet no token: the vocabulary has none of its characters.
    if (in.prompt.empty())
      throw FileError(prompt_name, "the prompt encodes to no token of " + l.path + "'s vocabulary (and it adds no BOS)");
    n_ctx = in.prompt.size() + static_cast<uint64_t>(ra.generate);
    if (n_train > 0 && n_ctx > n_train)
      throw cli::UsageError("the prompt (" + std::to_string(in.prompt.size()) + " tokens) + --generate " +
                            std::to_string(ra.generate) + " = " + std::to_string(n_ctx) + " tokens exceeds " +
                            base_name(l.path) + "'s training context of " + std::to_string(n_train) + " tokens");
  }
  check_arms_fit(l, {ra.reference}, static_cast<uint32_t>(n_ctx), ma.ubatch, "--reference");
  if (fits) fits(static_cast<uint32_t>(n_ctx));
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
  const Tokenizer* tkp = tok.get();
  in.is_eog = [tkp](int32_t id) { return tkp->is_eog(id); };

  if (tp) {
    note(ma, "recording " + tp->name + ": " + thousands(tp->given) + " given tokens, " +
                 std::to_string(tp->generated_turns) + " turns of up to " + std::to_string(ra.generate) + " tokens" +
                 (tp->answer_turns ? ", " + std::to_string(tp->answer_turns) + " answers (" + thousands(tp->answer) + " tokens)"
                                   : std::string()) +
                 ", idle " + (ra.idle.empty() ? std::string("0") : ra.idle) + " between requests, context " +
                 thousands(n_ctx) + ", reference " + ra.reference + (ra.sample ? ", sampling" : ", greedy"));
  } else {
    note(ma, "recording: " + std::to_string(in.prompt.size()) + " prompt tokens, up to " + std::to_string(ra.generate) +
                 " generated, reference " + ra.reference + (ra.sample ? ", sampling" : ", greedy"));
  }
  Capture cap;
  cli::Progress bar("record", ma.quiet);
  Trajectory t = record_trajectory(*l.model, *ref, in, ra.capture.empty() ? nullptr : &cap, bar.callback());
  bar.finish();
  if (tp) t.source = tp->source;
  long long bytes = -1;
  {
    // Both files through temporaries, committed together: a failure leaves neither.
    auto ot = std::make_unique<AtomicOutput>(out_path);
    std::unique_ptr<AtomicOutput> oc;
    write_trajectory(*ot, t);
    if (!ra.capture.empty()) {
      oc = std::make_unique<AtomicOutput>(ra.capture);
      write_capture(*oc, cap);
    }
    struct stat st;
    if (::stat(ot->temp_path().c_str(), &st) == 0) bytes = static_cast<long long>(st.st_size);
    if (deferred) {
      deferred->push_back(std::move(ot));
      if (oc) deferred->push_back(std::move(oc));
    } else {
      commit_all({ot.get(), oc.get()});
    }
  }
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
    note(ma, "wrote capture " + ra.capture + ": " + std::to_string(cap.layers.size()) + " layers x " +
                 std::to_string(cap.tokens) + " tokens");
  }
  return t;
}

// record/run --transcript before the model loads: the template renders the transcript, its pieces
// tokenize, and they fit the model's training context (GGUF metadata only).
TranscriptPlan prepare_transcript(const ModelArgs& ma, const RecordArgs& ra) {
  const std::string path = model_path_of(ma);
  if (path.empty())
    throw cli::UsageError("no model: pass --model FILE.gguf, set SJKV_MODEL, or run scripts/setup to install the default");
  const GgufFile f = GgufFile::open(path);
  const std::unique_ptr<Tokenizer> tok = Tokenizer::from_gguf(f);
  TranscriptRequest req;
  req.transcript = ra.transcript;
  req.chat_template = ra.chat_template;
  req.assistant_turns = ra.assistant_turns;
  TranscriptPlan tp;
  try {
    tp = plan_transcript(req, f, *tok);
  } catch (const std::invalid_argument& e) {  // not a file's defect: how the tool was called
    throw cli::UsageError(e.what());
  }
  check_transcript_context(tp, ra.generate, path, geometry_from_gguf(f).context_length);
  for (const std::string& n : tp.notes) note(ma, tp.name + ": " + n);
  return tp;
}

// The arms parse, the baseline is one of them and the trajectories' names differ (exit 1),
// checked before the model loads.
void check_score_args(const ScoreArgs& sa) {
  if (sa.arms.empty()) throw cli::UsageError("--arms needs at least one arm");
  const std::string clash = trajectory_name_clash(sa.trajectories);
  if (!clash.empty()) throw cli::UsageError(clash);
  for (const std::string& a : sa.arms) (void)arm_or_usage(a, "--arms");
  const std::string baseline = sa.baseline.empty() ? sa.arms[0] : sa.baseline;
  if (std::find(sa.arms.begin(), sa.arms.end(), baseline) == sa.arms.end())
    throw cli::UsageError("--baseline '" + baseline + "' is not one of --arms");
}

// `read_from[i]`, when given, is where paths[i] is read (run: the trajectory's uncommitted
// temporary); `also` are outputs committed with the results.
// Under MPI every rank calls it (sjkv/cluster.h): the checks and reads on every rank, the jobs
// spread by score_set, the folders and files made by rank 0 alone.
int do_score(const ModelArgs& ma, ScoreArgs sa, Loaded& l, const std::vector<std::string>& paths,
             const std::vector<std::string>& read_from = {}, const std::vector<AtomicOutput*>& also = {}) {
  const cluster::Comm& comm = cluster::Comm::world();
  const bool root = comm.root();
  comm.agree([&](uint64_t&) {
    check_score_args(sa);
    ModelArgs quiet_ranks = ma;
    quiet_ranks.quiet = ma.quiet || !root;
    if (!sa.baseline.empty()) {
      ModelArgs silent = ma;
      silent.quiet = true;  // the baseline is one of the arms, said there
      sa.baseline = arms_on_model(silent, l, {sa.baseline}, "--baseline")[0];
    }
    sa.arms = arms_on_model(quiet_ranks, l, sa.arms, "--arms");
  });
  std::vector<std::unique_ptr<KvArm>> arms;
  ScorePlan plan;
  ScoreProfile profile;
  ScoreSet set;
  // --per-arm: an arm whose folder is complete was scored by an earlier run (rank 0 looks).
  std::vector<std::string> arm_dirs(sa.arms.size());
  std::vector<const KvArm*> run(sa.arms.size());
  std::unique_ptr<MadeFolder> out_dir;  // removed again when this run made it and wrote nothing into it
  std::vector<uint8_t> skip(sa.arms.size(), 0);
  comm.agree([&](uint64_t&) {
    check_score_args(sa);
    for (const std::string& a : sa.arms) arms.push_back(arm_or_usage(a, "--arms", l.device.sealers()));
    plan.arms = sa.arms;
    plan.baseline = sa.baseline.empty() ? sa.arms[0] : sa.baseline;
    plan.bootstrap.replicates = sa.replicates;
    plan.bootstrap.seed = sa.boot_seed;
    plan.ubatch = ma.ubatch_given ? ma.ubatch : 0;
    plan.run.stepwise = sa.stepwise;
    plan.run.profile = sa.profile ? &profile : nullptr;

    set.paths = paths;
    for (size_t pi = 0; pi < paths.size(); ++pi) {
      Trajectory t = read_trajectory(pi < read_from.size() ? read_from[pi] : paths[pi]);
      check_score_trajectory(t, paths[pi], l.path, l.sha256, set.trajectories.empty() ? nullptr : &set.trajectories[0],
                             paths[0]);
      check_arms_fit(l, sa.arms, t.n_tokens(), score_ubatch(plan, t), "--arms");  // its caches' size
      set.trajectories.push_back(std::move(t));
    }
    if (sa.per_arm) {
      if (root) out_dir = std::make_unique<MadeFolder>(sa.out);
      for (size_t a = 0; a < arms.size(); ++a) {
        arm_dirs[a] = sa.out + "/" + arm_folder(sa.arms[a]);
        for (size_t b = 0; b < a; ++b)
          if (arm_dirs[b] == arm_dirs[a])
            throw cli::UsageError(sa.arms[b] == sa.arms[a]
                                      ? "--arms lists '" + sa.arms[a] + "' twice"
                                      : "--arms '" + sa.arms[b] + "' and '" + sa.arms[a] + "' would share the folder " +
                                            arm_dirs[a] + " ('/' in an arm is written '_'); name one's files otherwise");
        if (root && path_exists(arm_dirs[a] + "/results.json")) {
          skip[a] = 1;
          note(ma, "skipping " + sa.arms[a] + ": " + arm_dirs[a] + " is complete");
        }
      }
    }
  });
  comm.broadcast(skip);
  for (size_t a = 0; a < arms.size(); ++a) run[a] = skip[a] ? nullptr : arms[a].get();
  if (comm.distributed()) {
    size_t jobs = 0;
    for (const KvArm* a : run) jobs += a ? paths.size() : 0;
    note(ma, std::to_string(jobs) + " (trajectory, arm) jobs over " + std::to_string(comm.size()) +
                 " MPI ranks; rank 0's progress shown");
  }
  auto warn = [&](const ArmRows& a) {
    if (!a.note.empty()) std::fprintf(stderr, "%s: warning: %s: %s\n", kTool, a.arm.c_str(), a.note.c_str());
  };
  std::vector<std::unique_ptr<cli::Progress>> bars(arms.size());
  ScoreCallbacks cb;
  cb.start = [&](size_t i, size_t a) {
    const Trajectory& t = set.trajectories[i];
    note(ma, "scoring " + arms[a]->spec() + " on " + base_name(paths[i]) + " (" + std::to_string(t.generated()) +
                 " positions, ubatch " + std::to_string(score_ubatch(plan, t)) + ")");
    bars[a] = std::make_unique<cli::Progress>(arms[a]->spec(), ma.quiet);
    return bars[a]->callback();
  };
  cb.finished = [&](size_t i, size_t a, const Results& so_far) {
    bars[a].reset();
    if (!sa.per_arm || i + 1 != paths.size()) return;
    warn(so_far.arms[a]);
    Results one = so_far;
    one.arms = {so_far.arms[a]};
    one.baseline = sa.arms[a];
    write_results(arm_dirs[a], one, summarize(one));
    out_dir->keep();
    note(ma, "wrote " + arm_dirs[a] + "/");
  };
  Results res;
  comm.agree([&](uint64_t&) { res = score_set(*l.model, base_name(l.path), l.sha256, set, run, plan, cb, comm); });
  // Rank 0 writes; a failure there is every rank's.
  comm.agree([&](uint64_t&) {
    if (!root) return;
    if (sa.per_arm) {
      Results done = res;
      done.arms.clear();
      for (size_t a = 0; a < arms.size(); ++a)
        if (run[a]) done.arms.push_back(res.arms[a]);
      if (done.arms.empty()) return;
      done.baseline = done.arms[0].arm;
      for (const ArmRows& a : done.arms)
        if (a.arm == plan.baseline) done.baseline = plan.baseline;
      std::cout << summary_text(summarize(done));
      return;
    }
    for (const ArmRows& a : res.arms) warn(a);
    const Report rep = summarize(res);
    write_results(sa.out, res, rep, also);
    note(ma, "wrote " + sa.out + "/results.json, positions.csv, summary.md and three SVG plots");
    std::cout << summary_text(rep);
  });
  if (sa.profile && root) {
    const ScoreProfile& p = profile;
    const double n = static_cast<double>(std::max<uint64_t>(p.scored, 1)), g = static_cast<double>(std::max<uint64_t>(p.given_tokens, 1));
    const double per_pos = (p.forward_s + p.project_s + p.reference_s + p.compare_s) / n * 1000, per_tok = p.given_s / g * 1000;
    std::fprintf(stderr,
                 "%s: profile: given %llu tokens %.3f s; scored %llu positions: forward %.3f s, projection %.3f s, "
                 "reference %.3f s, compare %.3f s\n"
                 "%s: profile: %.2f ms a given token, %.2f ms a scored position (%.2fx)%s\n",
                 kTool, static_cast<unsigned long long>(p.given_tokens), p.given_s, static_cast<unsigned long long>(p.scored),
                 p.forward_s, p.project_s, p.reference_s, p.compare_s, kTool, per_tok, per_pos, per_pos / per_tok,
                 comm.distributed() ? " (rank 0's jobs)" : "");
  }
  return cli::kOk;
}

// sjkv-replay frontier: reads and checks both sets, drops the candidates that do not fit the
// model (saying why), runs the search (replay/frontier.h) and writes the three files.
int do_frontier(ModelArgs ma, const FrontierArgs& fa) {
  // Under MPI every rank checks, loads and reads; the jobs are spread by run_frontier; rank 0
  // alone speaks and writes.
  const cluster::Comm& comm = cluster::Comm::world();
  if (!comm.root()) ma.quiet = true;
  Loaded l;
  ScoreSet tune, held;
  std::vector<std::string> candidates;
  std::string default_arm;
  comm.agree([&](uint64_t&) {
    if (fa.budgets.empty()) throw cli::UsageError("--budgets: give at least one budget in bits per value");
    for (double b : fa.budgets)
      if (!(b > 0.0 && b <= 32.0)) throw cli::UsageError("--budgets: each budget must be in (0, 32] bits per value");
    if (fa.default_given) (void)arm_or_usage(fa.default_arm, "--default");
    check_output_folder(fa.out);
    for (const std::string& t : fa.tune)
      for (const std::string& h : fa.heldout)
        if (same_path(t, h)) throw cli::UsageError("'" + t + "' is both a tuning and a held-out trajectory");
    std::vector<std::string> all = fa.tune;
    all.insert(all.end(), fa.heldout.begin(), fa.heldout.end());
    if (const std::string clash = trajectory_name_clash(all); !clash.empty()) throw cli::UsageError(clash);
    // The outputs, before the search: none a folder or an input (the tools' rule).
    std::vector<std::string> ins = all;
    ins.push_back(model_path_of(ma));
    if (is_folder(fa.out)) {
      for (const char* f : {"frontier.csv", "frontier.svg", "recommend.md"}) cli::check_output_file(fa.out + "/" + f, "--out", ins);
      const std::string store = fa.out + "/store";
      if (path_exists(store) && !is_folder(store)) throw FileError(store, "--out: the store exists and is not a folder");
    }
    l = load_model(ma);
    const uint64_t n_train = l.model->info().n_ctx_train;
    if (fa.context > kMaxFrontierContext || (n_train > 0 && fa.context > n_train))
      throw cli::UsageError("--context " + std::to_string(fa.context) + " exceeds " +
                            (n_train > 0 && n_train < kMaxFrontierContext
                                 ? base_name(l.path) + "'s training context of " + std::to_string(n_train) + " tokens"
                                 : "the largest context the frontier allocates, " + std::to_string(kMaxFrontierContext) +
                                       " tokens"));
    uint32_t longest = 0;
    std::vector<std::string> sha(all.size());
    for (size_t i = 0; i < all.size(); ++i) {
      ScoreSet& set = i < fa.tune.size() ? tune : held;
      Trajectory t = read_trajectory(all[i]);
      check_score_trajectory(t, all[i], l.path, l.sha256, i ? &tune.trajectories[0] : nullptr, all[0]);
      longest = std::max(longest, t.n_ctx());
      set.paths.push_back(all[i]);
      set.trajectories.push_back(std::move(t));
      // Held out means other bytes: a link or a copy of a tuning trajectory is the same one.
      sha[i] = sha256_file_hex(all[i]);
      if (i >= fa.tune.size())
        for (size_t j = 0; j < fa.tune.size(); ++j)
          if (sha[j] == sha[i])
            throw cli::UsageError("held-out '" + all[i] + "' is the tuning trajectory '" + all[j] +
                                  "' (the same bytes); hold out another");
    }
    std::vector<std::string> specs = fa.arms.empty() ? frontier_candidates(fa.quick) : fa.arms;
    if (fa.arms.empty()) {
      std::vector<uint32_t> full;
      for (const LayerShape& s : l.model->info().layers)
        if (s.full_attention) full.push_back(s.layer);
      for (const std::string& w : frontier_wide_candidates(fa.quick, full)) specs.push_back(w);
      if (!fa.quick && full.size() > kMaxWideLayers)
        note(ma, std::to_string(full.size()) + " full-attention layers: no width-per-layer candidates (name them with "
                 "--also, e.g. sj:3/2t:wide=L)");
    }
    for (const std::string& a : fa.also)
      if (std::find(specs.begin(), specs.end(), a) == specs.end()) specs.push_back(a);
    const TableChoice choice = table_choice(ma);
    const ModelGeometry g = geometry_of(l.model->info());
    // Throws std::invalid_argument when the arm cannot run on this model's layers.
    auto check_fit = [&](const std::string& spec) {
      const std::unique_ptr<KvArm> arm = make_arm(spec);
      for (LayerShape s : l.model->info().layers) {
        s.n_ctx = longest;
        (void)arm->make_layer(s);
      }
      arm->check_layers(l.model->info().layers);
    };
    std::string given_default = fa.default_given ? fa.default_arm : "sj:4/4";
    try {
      check_fit(given_default);
    } catch (const std::invalid_argument& e) {
      if (fa.default_given)
        throw cli::UsageError("--default '" + given_default + "' does not fit " + base_name(l.path) + ": " + e.what());
      // Head sizes that are not multiples of 128 (gpt-oss, SmolLM2: 64): the codec's scalar
      // 4/4 with q8_0 staging, the comparable arm docs/REPLAY.md names.
      note(ma, "default arm sj:4/4:staging=q8_0 (sj:4/4 does not fit: " + std::string(e.what()) + ")");
      given_default = "sj:4/4:staging=q8_0";
    }
    default_arm = arm_with_tables(given_default, choice, &g);
    std::string with_set;
    // One candidate per arm: specs that differ only in spelling (option order) are one arm, the
    // first spelling kept (the default arm too), so none takes two of the halving's places.
    std::map<std::string, std::string> by_identity;
    const std::string default_id = arm_identity(default_arm);
    for (const std::string& given : specs) {
      std::string spec = given;
      try {
        spec = arm_with_tables(given, choice, &g);
        if (spec != given) with_set += (with_set.empty() ? "" : ", ") + spec;
        if (std::find(candidates.begin(), candidates.end(), spec) != candidates.end()) continue;  // also= gave it
        const std::string id = arm_identity(spec);
        if (by_identity.count(id)) {
          note(ma, "'" + spec + "' is the candidate '" + by_identity[id] + "' written otherwise; kept once");
          continue;
        }
        by_identity[id] = spec;
        if (id == default_id) default_arm = spec;
        check_fit(spec);
        candidates.push_back(spec);
      } catch (const std::invalid_argument& e) {
        if (!fa.arms.empty() || given == given_default || std::find(fa.also.begin(), fa.also.end(), given) != fa.also.end())
          throw cli::UsageError("'" + spec + "' does not fit " + base_name(l.path) + ": " + e.what());
        note(ma, "skipping " + spec + ": " + e.what());
      }
    }
    if (!with_set.empty())
      note(ma, "with this model's shipped tables (--codebook reference: the format's): " + with_set);
  });
  FrontierOptions opt;
  opt.budgets = fa.budgets;
  std::sort(opt.budgets.begin(), opt.budgets.end());
  opt.context = fa.context;
  opt.keep = fa.keep;
  opt.default_arm = default_arm;
  opt.bootstrap.replicates = fa.replicates;
  opt.bootstrap.seed = fa.boot_seed;
  opt.store = fa.out + "/store";
  opt.ubatch = ma.ubatch_given ? ma.ubatch : 0;
  opt.sealers = l.device.sealers();
  FrontierProgress pr;
  pr.line = [&](const std::string& s) { note(ma, s); };
  note(ma, std::to_string(candidates.size()) + " candidates, " + std::to_string(tune.paths.size()) + " tuning and " +
               std::to_string(held.paths.size()) + " held-out trajectories" +
               (comm.distributed() ? ", jobs over " + std::to_string(comm.size()) + " MPI ranks" : "") +
               "; scored rows kept in " + opt.store + " (a stopped run resumes)");
  const FrontierResult r = run_frontier(*l.model, base_name(l.path), l.sha256, tune, held, candidates, opt, pr, comm);
  if (!comm.root()) return cli::kOk;
  const std::string md = recommend_markdown(r);
  const std::pair<const char*, std::string> files[] = {
      {"frontier.csv", frontier_csv(r)}, {"frontier.svg", frontier_svg(r)}, {"recommend.md", md}};
  // All three or none: each written to its temporary, then published together.
  std::vector<std::unique_ptr<AtomicOutput>> outs;
  for (const auto& [name, text] : files) {
    outs.push_back(std::make_unique<AtomicOutput>(fa.out + "/" + name));
    write_file_bytes(outs.back()->temp_path(), text.data(), text.size(), outs.back()->final_path());
  }
  commit_all({outs[0].get(), outs[1].get(), outs[2].get()});
  std::printf("%s", md.c_str());
  note(ma, std::to_string(r.jobs_scored) + " (arm, trajectory) replays, " + std::to_string(r.jobs_cached) +
               " read from the store; wrote " + fa.out + "/frontier.csv, frontier.svg, recommend.md");
  return cli::kOk;
}

void add_model_options(CLI::App* c, ModelArgs& m) {
  c->add_option("--model", m.model, "GGUF model (default: $SJKV_MODEL, else the model scripts/setup installs)");
  c->add_option("--threads", m.threads, "OpenMP threads (0 = all cores); results are the same for any count")
      ->check(CLI::Range(0, 1024))->capture_default_str();
  c->add_option("--ubatch", m.ubatch, "Tokens per ubatch for the prompt (score: default the trajectory's)")
      ->check(CLI::Range(1u, kMaxTrajectoryUbatch))->capture_default_str()->each([&](const std::string&) { m.ubatch_given = true; });
  c->add_option("--device", m.device,
                 "Where the SJ-KVaRN/KVarN arms seal records: auto (a GPU when present), cpu or cuda; same bytes either way")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))->capture_default_str();
  c->add_flag("-q,--quiet", m.quiet, "No progress on stderr");
}

// For the commands that run arms.
void add_table_option(CLI::App* c, ModelArgs& m) {
  c->add_option("--codebook", m.tables,
                "Trellis tables of the SJ-KVaRN arms that name none (cb=): auto (the model's shipped table set, for "
                "the widths it is the default for), reference (the format's tables) or a shipped set's name. "
                "Shipped: " + table_sets_help())
      ->capture_default_str();
}

// --transcript and the options that go with it (record, run, tokens).
CLI::Option* add_transcript_options(CLI::App* c, RecordArgs& r) {
  auto* tr = c->add_option("--transcript", r.transcript,
                           "An agent transcript (JSON, OpenAI chat format: messages with tool calls and results) "
                           "rendered with the model's chat template; the reference regenerates each assistant turn "
                           "(docs/REPLAY.md, \"Transcripts\")");
  c->add_option("--chat-template", r.chat_template,
                "--transcript: a Jinja chat template file instead of the GGUF's tokenizer.chat_template (needed when "
                "the GGUF has none: data/templates/gemma3-turns.jinja for Gemma 3)")
      ->needs(tr);
  c->add_option("--assistant-turns", r.assistant_turns,
                "--transcript: what an assistant message without \"sjkv_turn\" is: regenerate (the reference writes "
                "it, scored), answer (its text forced and scored) or given (prefilled, not scored)")
      ->check(CLI::IsMember({"regenerate", "answer", "given"}))->capture_default_str()->needs(tr);
  return tr;
}

void add_record_options(CLI::App* c, RecordArgs& r) {
  auto* pf = c->add_option("--prompt-file", r.prompt_file, "Prompt text (default or '-': standard input)");
  auto* sp = c->add_flag("--special", r.special,
              "Control tokens written in the prompt (<start_of_turn>, ...) are tokens, as llama.cpp parses a chat "
              "template (parse_special); without it they are plain text");
  auto* tr = add_transcript_options(c, r);
  tr->excludes(pf)->excludes(sp);
  c->add_option("--idle", r.idle,
                "--transcript: the idle step between requests, after every turn that given text follows: keep_recent "
                "(tokens; default 0, every layer sealed back to its tail as an idle server) or none")
      ->needs(tr);
  c->add_option("--generate", r.generate, "Tokens to generate (fewer when the model ends its turn)")
      ->check(CLI::Range(1u, 1u << 20))->capture_default_str();
  c->add_flag("--sample", r.sample, "Sample instead of greedy decoding");
  c->add_option("--seed", r.seed, "Sampling seed")->check(cli::non_negative())->capture_default_str();
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
  c->add_option("--bootstrap-seed", s.boot_seed, "Bootstrap seed")->check(cli::non_negative())->capture_default_str();
  c->add_flag("--stepwise", s.stepwise,
              "Decode the generated positions one token per ubatch, as an engine does, instead of in blocks between "
              "seals: the same bits, slower (for timing and checks)");
  c->add_flag("--profile", s.profile,
              "Say where the time went: the given tokens' forward pass, and per scored position the forward pass, the "
              "output projection, the reference's rows and the comparison (stderr)");
}

}  // namespace

int main(int argc, char** argv) {
  sjkv::settle_parallel_runtime(argv);  // OpenMP's wait, before anything else (sjkv/parallel.h)
  cli::hold_standard_output();  // before any file is opened
  cluster::Session mpi(&argc, &argv);  // the ranks of mpirun or srun, when it started us
  CLI::App app{"sjkv-replay: what a KV-cache format costs a real model. record a generation with a reference cache, "
               "replay it with other caches, and report KL(reference || arm) at every generated position "
               "(exit codes: 0 ok, 1 usage, 2 bad input, 3 internal error)"};
  app.require_subcommand(1);

  ModelArgs rec_m, sc_m, run_m;
  RecordArgs rec_r, run_r;
  ScoreArgs sc_s, run_s;

  auto* rec = app.add_subcommand("record", "Generate from a prompt (or the assistant turns of a transcript) with the "
                                            "reference cache and write a trajectory file");
  add_record_options(rec, rec_r);
  rec->add_option("-o,--output", rec_r.output, "Trajectory file to write (.h5)")->required();
  add_model_options(rec, rec_m);

  std::vector<std::string> tok_files;
  std::string tok_model;
  bool tok_special = false;
  RecordArgs tok_r;
  auto* tk = app.add_subcommand("tokens", "Count the prompt tokens of text files (as record tokenizes them) without running the model");
  auto* tk_files = tk->add_option("files", tok_files, "Text files ('-': standard input)");
  tk->add_option("--model", tok_model, "GGUF model (default: $SJKV_MODEL, else the model scripts/setup installs)");
  auto* tk_special = tk->add_flag("--special", tok_special, "Control tokens written in the text are tokens (as record --special)");
  add_transcript_options(tk, tok_r)->excludes(tk_files)->excludes(tk_special);
  tk->add_option("--generate", tok_r.generate, "--transcript: the turn cap the context is counted for")
      ->check(CLI::Range(1u, 1u << 20))->capture_default_str();

  std::vector<std::string> cmp_dirs;
  std::string cmp_pairs, cmp_out;
  ScoreArgs cmp_s;
  auto* cmp = app.add_subcommand("compare", "Merge results folders (of score or score --per-arm) into one table: every "
                                            "arm per history and over all, and paired comparisons with bootstrap CIs");
  cmp->add_option("folders", cmp_dirs, "Results folders (each with a positions.csv)")->required();
  cmp->add_option("--pairs", cmp_pairs, "File of 'ARM BASELINE' lines: the comparisons to make");
  cmp->add_option("-o,--output", cmp_out, "CSV to write: history,arm,baseline,statistic,value")->required();
  cmp->add_option("--bootstrap", cmp_s.replicates, "Bootstrap replicates")->check(CLI::Range(100u, 1000000u))->capture_default_str();
  cmp->add_option("--bootstrap-seed", cmp_s.boot_seed, "Bootstrap seed")->check(cli::non_negative())->capture_default_str();

  auto* eng = app.add_subcommand("engine", std::string("Print the engine version (") + kEngineVersion +
                                               "), which changes whenever the bits of the forward pass or of an arm "
                                               "can; scripts/study keys its stored scores by it");

  auto* sc = app.add_subcommand("score", "Replay trajectories with each arm and write a results folder");
  sc->add_option("trajectories", sc_s.trajectories, "Trajectory files from record or run")->required();
  add_score_options(sc, sc_s, true);
  sc->add_flag("--per-arm", sc_s.per_arm,
               "One results folder per arm, OUT/ARM ('/' in the spec written '_'), each written as soon as its arm is "
               "scored (no comparisons); an arm whose folder is complete is skipped, so a stopped run resumes");
  add_model_options(sc, sc_m);
  add_table_option(sc, sc_m);

  FrontierArgs fr_a;
  ModelArgs fr_m;
  auto* fr = app.add_subcommand("frontier", "Which cache format for this model at B bits: successive halving of every "
                                            "format family over tuning trajectories, the best per budget rescored on "
                                            "held-out ones against the default and the best plain format");
  fr->add_option("--tune", fr_a.tune, "Tuning trajectories (record's files); the search runs on them")->required();
  fr->add_option("--heldout", fr_a.heldout, "Held-out trajectories, disjoint from --tune: the report's numbers")->required();
  fr->add_option("--budgets", fr_a.budgets, "Budgets in allocated bits per value at the context (e.g. 4 5 6 8)")->required();
  fr->add_option("--context", fr_a.context, "Context (tokens) the bits are allocated for (default, or 0: the longest held-out trajectory)");
  fr->add_option("--arms", fr_a.arms, "Candidate arms instead of every family's (see score's list)");
  fr->add_option("--also", fr_a.also, "More candidates beside the list (e.g. SJ-KVaRN arms with trained tables: cb=FILE)");
  fr->add_flag("--quick", fr_a.quick, "A short candidate list (f16, q8_0, q4_0[:rot], kvarn:4/4, sj:4/4 and 3/2t at tail 128)");
  fr->add_option("--keep", fr_a.keep, "Candidates per budget each halving round keeps")->check(CLI::Range(1u, 100u))->capture_default_str();
  fr->add_option("--default", fr_a.default_arm,
                 "The default arm the picks are compared with (default sj:4/4; sj:4/4:staging=q8_0 on a head size "
                 "tq6_0 staging cannot hold, e.g. 64)")
      ->each([&fr_a](const std::string&) { fr_a.default_given = true; });
  fr->add_option("--bootstrap", fr_a.replicates, "Bootstrap replicates")->check(CLI::Range(100u, 1000000u))->capture_default_str();
  fr->add_option("--bootstrap-seed", fr_a.boot_seed, "Bootstrap seed")->check(cli::non_negative())->capture_default_str();
  fr->add_option("--out", fr_a.out, "Folder for frontier.csv, frontier.svg, recommend.md and the store of scored rows")->required();
  add_model_options(fr, fr_m);
  add_table_option(fr, fr_m);

  auto* run = app.add_subcommand("run", "record and score in one; the trajectory is saved in the results folder as "
                                        "trajectory.h5");
  add_record_options(run, run_r);
  add_score_options(run, run_s, true);
  add_model_options(run, run_m);
  add_table_option(run, run_m);
  std::string examples;
  for (const std::string& e : arm_examples()) examples += (examples.empty() ? "" : ", ") + e;
  sc->footer("Arms, e.g.: " + examples +
             (cluster::built_with_mpi()
                  ? "\nUnder mpirun or srun the (trajectory, arm) jobs are spread over the ranks and rank 0 writes the "
                    "same files as one process: mpirun -n 16 sjkv-replay score traj/*.h5 --arms ... --out results"
                  : ""));
  run->footer("Arms, e.g.: " + examples);
  app.footer("Example: sjkv-replay run --prompt-file prompt.txt --generate 256 --arms f16,q4_0,sj:4/4 --out results");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return cli::parse_failed(app, e);
  }

  if (cmp->parsed())
    return cli::guarded(kTool, [&] {
      cli::one_process("compare");
      std::vector<std::string> ins;
      for (const std::string& d : cmp_dirs) ins.push_back(d + "/positions.csv");
      if (!cmp_pairs.empty()) ins.push_back(cmp_pairs);
      cli::check_output_file(cmp_out, "-o", ins);
      std::vector<PositionRow> rows;
      for (const std::string& in : ins) {
        if (in == cmp_pairs) break;
        std::vector<PositionRow> r = read_positions_csv(in);
        rows.insert(rows.end(), std::make_move_iterator(r.begin()), std::make_move_iterator(r.end()));
      }
      const std::vector<PairSpec> pairs = cmp_pairs.empty() ? std::vector<PairSpec>() : read_pairs(cmp_pairs);
      BootstrapOptions opt;
      opt.replicates = cmp_s.replicates;
      opt.seed = cmp_s.boot_seed;
      const std::string csv = study_csv(rows, pairs, opt);  // its errors name the file at fault
      AtomicOutput out(cmp_out);
      write_file_bytes(out.temp_path(), csv.data(), csv.size(), cmp_out);
      out.commit();
      return cli::kOk;
    });
  if (fr->parsed()) return cli::guarded(kTool, [&] { return do_frontier(fr_m, fr_a); });
  if (eng->parsed())
    return cli::guarded(kTool, [&] {
      std::printf("%s\n", kEngineVersion);
      return cli::kOk;
    });
  if (tk->parsed())
    return cli::guarded(kTool, [&] {
      cli::one_process("tokens");
      ModelArgs ma;
      ma.model = tok_model;
      if (!tok_r.transcript.empty()) {
        // The given tokens and the turns, as record plans them (the end-of-turn cut, which
        // depends on how the model ends each turn, not made).
        const TranscriptPlan tp = prepare_transcript(ma, tok_r);
        std::printf("%llu\t%s\t%u generated turns, %u answers (%llu tokens); context %s at --generate %u\n",
                    static_cast<unsigned long long>(tp.given), tp.name.c_str(), tp.generated_turns, tp.answer_turns,
                    static_cast<unsigned long long>(tp.answer), thousands(tp.context(tok_r.generate)).c_str(),
                    tok_r.generate);
        return cli::kOk;
      }
      if (tok_files.empty()) throw cli::UsageError("tokens: give text files, or --transcript FILE");
      const std::string path = model_path_of(ma);
      if (path.empty())
        throw cli::UsageError("no model: pass --model FILE.gguf, set SJKV_MODEL, or run scripts/setup to install the default");
      const GgufFile f = GgufFile::open(path);
      const std::unique_ptr<Tokenizer> tok = Tokenizer::from_gguf(f);
      for (const std::string& file : tok_files) {
        const std::string text = read_prompt(file);
        const std::vector<int32_t> ids = tok_special ? tok->encode_special(text, true) : tok->encode(text, true);
        std::printf("%zu\t%s\n", ids.size(), file == "-" ? "<stdin>" : file.c_str());
      }
      return cli::kOk;
    });
  if (rec->parsed())
    return cli::guarded(kTool, [&] {
      cli::one_process("record");
      check_record_args(rec_r);
      if (!rec_r.capture.empty() && same_path(rec_r.output, rec_r.capture))
        throw cli::UsageError("-o and --capture name the same file");
      const std::vector<std::string> ins = {rec_r.prompt_file == "-" ? std::string() : rec_r.prompt_file,
                                            model_path_of(rec_m), rec_r.transcript, rec_r.chat_template};
      cli::check_output_file(rec_r.output, "-o", ins);
      if (!rec_r.capture.empty()) cli::check_output_file(rec_r.capture, "--capture", ins);
      std::unique_ptr<TranscriptPlan> tp;
      std::string text;
      if (!rec_r.transcript.empty())
        tp = std::make_unique<TranscriptPlan>(prepare_transcript(rec_m, rec_r));
      else
        text = read_prompt(rec_r.prompt_file);
      Loaded l = load_model(rec_m);
      do_record(rec_m, rec_r, l, text, tp.get(), rec_r.output);
      return cli::kOk;
    });
  if (sc->parsed())
    return cli::guarded(kTool, [&] {
      // Under MPI every rank checks and loads; rank 0 alone speaks.
      if (!cluster::Comm::world().root()) sc_m.quiet = true;
      Loaded l;
      cluster::Comm::world().agree([&](uint64_t&) {
        check_score_args(sc_s);
        check_output_folder(sc_s.out);
        std::vector<std::string> ins = sc_s.trajectories;
        ins.push_back(model_path_of(sc_m));
        if (is_folder(sc_s.out))
          for (const char* f : kResultFiles) cli::check_output(sc_s.out + "/" + f, "--out", ins);
        l = load_model(sc_m);
      });
      return do_score(sc_m, sc_s, l, sc_s.trajectories);
    });
  if (run->parsed())
    return cli::guarded(kTool, [&] {
      cli::one_process("run");
      check_score_args(run_s);  // before the long part
      check_record_args(run_r);
      check_output_folder(run_s.out);
      const std::string traj = run_s.out + "/trajectory.h5";
      const std::vector<std::string> ins = {run_r.prompt_file == "-" ? std::string() : run_r.prompt_file,
                                            model_path_of(run_m), run_r.transcript, run_r.chat_template};
      if (is_folder(run_s.out)) cli::check_output_file(traj, "--out", ins);
      if (!run_r.capture.empty()) {
        if (same_path(traj, run_r.capture)) throw cli::UsageError("--capture names the run's " + traj);
        cli::check_output_file(run_r.capture, "--capture", ins);
      }
      std::unique_ptr<TranscriptPlan> tp;
      std::string text;
      if (!run_r.transcript.empty())
        tp = std::make_unique<TranscriptPlan>(prepare_transcript(run_m, run_r));
      else
        text = read_prompt(run_r.prompt_file);
      Loaded l = load_model(run_m);
      // The results folder is made once the arms are known to fit (and removed again, if
      // this run made it, on a failure or a signal); the trajectory (and capture) stay in
      // temporaries until the results are written and are committed with them, so a failed
      // or interrupted run leaves none of its outputs.
      std::unique_ptr<MadeFolder> folder;
      auto make_folder = [&](uint32_t n_ctx) {
        check_arms_fit(l, run_s.arms, n_ctx, run_m.ubatch, "--arms");
        folder = std::make_unique<MadeFolder>(run_s.out);
      };
      std::vector<std::unique_ptr<AtomicOutput>> pending;  // destroyed before the folder
      do_record(run_m, run_r, l, text, tp.get(), traj, &pending, make_folder);
      std::vector<AtomicOutput*> also;
      for (auto& p : pending) also.push_back(p.get());
      const int rc = do_score(run_m, run_s, l, {traj}, {pending.front()->temp_path()}, also);
      folder->keep();
      return rc;
    });
  return cli::kUsage;
}
