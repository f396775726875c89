// _sjkv: the input files beyond snapshots: any capture-like input (sjkv capture, .kvd dump,
// llama.cpp state file), sequence-state streams, trajectories.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "bind.h"
#include "sjkv/io/load.h"
#include "sjkv/io/paths.h"
#include "sjkv/io/state_stream.h"
#include "sjkv/io/trajectory.h"
#include "sjkv/replay/kv.h"
#include "sjkv/replay/reference.h"
#include "sjkv/replay/score.h"

namespace py = pybind11;
using namespace sjkv;

namespace {

template <typename T>
py::array_t<T> array_of(const std::vector<T>& v) {
  return py::array_t<T>(static_cast<py::ssize_t>(v.size()), v.data());
}

// The provenance strings of a version-3 trajectory, under their file attribute names.
std::vector<std::pair<const char*, std::string TranscriptSource::*>> source_keys() {
  return {{"transcript_sha256", &TranscriptSource::transcript_sha256},
          {"chat_template_sha256", &TranscriptSource::chat_template_sha256},
          {"chat_template_source", &TranscriptSource::chat_template_source},
          {"template_date", &TranscriptSource::template_date},
          {"jinja2_version", &TranscriptSource::jinja2_version}};
}

// A trajectory as a dict: what read_trajectory returns and write_trajectory takes. The reference
// distributions per scored position: sparse keeps each position's kept tokens (ragged, so
// lists of arrays); hidden keeps the hidden states and top tokens (one 2-D array each). The
// segments, context and provenance are as stored: a version-1 or -2 file has no segments (the
// pair [given prompt_tokens][generated generated]) and context 0, and writes back as such.
py::dict trajectory_dict(const Trajectory& t) {
  py::dict d;
  d["model_file"] = t.model_file;
  d["model_sha256"] = t.model_sha256;
  d["architecture"] = t.architecture;
  d["n_vocab"] = t.n_vocab;
  d["prompt_tokens"] = t.prompt_tokens;
  d["tokens"] = array_of(t.tokens);
  d["generated"] = t.generated();
  py::list segments;
  for (const Segment& g : t.segments)
    segments.append(py::make_tuple(std::string(segment_kind_name(g.kind)), g.length, g.keep_recent));
  d["segments"] = segments;
  d["context"] = t.context;
  d["scored_positions"] = array_of(t.scored_positions());
  if (!t.source.empty())
    for (const auto& [key, field] : source_keys()) d[key] = t.source.*field;
  d["encoding"] = std::string(encoding_name(t.encoding));
  std::vector<int32_t> top;
  for (uint32_t j = 0; j < t.generated(); ++j) top.push_back(t.top_token(j));
  d["top_tokens"] = array_of(top);
  py::dict s;
  s["generate"] = t.settings.generate;
  s["sample"] = t.settings.sample;
  s["seed"] = t.settings.seed;
  s["temperature"] = t.settings.temperature;
  s["top_p"] = t.settings.top_p;
  s["top_k"] = t.settings.top_k;
  s["reference"] = t.settings.reference;
  s["ubatch"] = t.settings.ubatch;
  s["threads"] = t.settings.threads;
  s["self_kl_target"] = t.settings.self_kl_target;
  d["settings"] = s;
  const size_t G = t.generated();
  std::vector<double> log_z(G);
  if (t.encoding == RefEncoding::sparse) {
    std::vector<double> rest(G);
    py::list ids, logits;
    for (size_t j = 0; j < G; ++j) {
      log_z[j] = t.ref[j].log_z;
      rest[j] = t.ref[j].rest_mass;
      ids.append(array_of(t.ref[j].ids));
      logits.append(array_of(t.ref[j].logits));
    }
    d["rest_mass"] = array_of(rest);
    d["kept_ids"] = ids;
    d["kept_logits"] = logits;
    d["self_kl_max"] = t.self_kl_max;
  } else {
    const size_t E = t.n_embd, T = G ? t.hid[0].top_ids.size() : 0;
    py::array_t<float> hidden({G, E});
    py::array_t<uint64_t> hash(static_cast<py::ssize_t>(G));
    py::array_t<uint32_t> top_ids({G, T});
    py::array_t<float> top_lp({G, T});
    for (size_t j = 0; j < G; ++j) {
      const HiddenRef& h = t.hid[j];
      std::memcpy(hidden.mutable_data(j, 0), h.hidden.data(), E * sizeof(float));
      log_z[j] = h.log_z;
      hash.mutable_at(j) = h.logits_hash;
      std::memcpy(top_ids.mutable_data(j, 0), h.top_ids.data(), T * sizeof(uint32_t));
      std::memcpy(top_lp.mutable_data(j, 0), h.top_logprobs.data(), T * sizeof(float));
    }
    d["n_embd"] = t.n_embd;
    d["hidden"] = hidden;
    d["logits_hash"] = hash;
    d["top_ids"] = top_ids;
    d["top_logprobs"] = top_lp;
  }
  d["log_z"] = array_of(log_z);
  return d;
}

template <typename T>
std::vector<T> vector_of(const py::handle& h, const char* name) {
  const auto a = py::array_t<T, py::array::c_style | py::array::forcecast>::ensure(h);
  if (!a) throw std::invalid_argument(std::string(name) + " must be an array");
  return std::vector<T>(a.data(), a.data() + a.size());
}

const char* kind_of(const std::string*) { return "a string"; }
const char* kind_of(const uint32_t*) { return "an integer in [0, 2^32)"; }
const char* kind_of(const uint64_t*) { return "an integer in [0, 2^64)"; }
const char* kind_of(const double*) { return "a number"; }
const char* kind_of(const bool*) { return "a bool"; }
const char* kind_of(const py::dict*) { return "a dict"; }
const char* kind_of(const py::list*) { return "a list"; }

// A trajectory dict's field as T: ValueError naming the field (pybind11's cast error names
// neither the field nor the type wanted).
template <typename T>
T field_as(const py::handle& h, const std::string& name) {
  auto wrong = [&] {
    return std::invalid_argument("trajectory field '" + name + "' must be " + kind_of(static_cast<const T*>(nullptr)) +
                                 " (got " + Py_TYPE(h.ptr())->tp_name + ")");
  };
  if constexpr (std::is_base_of_v<py::object, T>) {
    if (!py::isinstance<T>(h)) throw wrong();  // cast would try dict(x) / list(x)
    return py::reinterpret_borrow<T>(h);
  } else {
    try {
      return h.cast<T>();
    } catch (const py::cast_error&) {
      throw wrong();
    }
  }
}

// One entry of a trajectory dict's `segments`: (kind, length, keep_recent), the kind by name or
// by its code (FORMAT.md 9.4).
Segment segment_of(const py::handle& h, size_t i) {
  const std::string name = "segments[" + std::to_string(i) + "]";
  if (!py::isinstance<py::sequence>(h) || py::isinstance<py::str>(h) || py::len(h) != 3)
    throw std::invalid_argument("trajectory field '" + name + "' must be a (kind, length, keep_recent) tuple");
  const py::sequence e = py::reinterpret_borrow<py::sequence>(h);
  Segment g;
  if (py::isinstance<py::str>(e[0])) {
    try {
      g.kind = parse_segment_kind(e[0].cast<std::string>());
    } catch (const std::invalid_argument& x) {
      throw std::invalid_argument("trajectory field '" + name + "': " + x.what());
    }
  } else {
    const uint32_t code = field_as<uint32_t>(e[0], name + ".kind");
    if (code >= kSegmentKinds)
      throw std::invalid_argument("trajectory field '" + name + "': kind code " + std::to_string(code) +
                                  " is unknown (0 given, 1 generated, 2 answer, 3 idle)");
    g.kind = static_cast<SegmentKind>(code);
  }
  g.length = field_as<uint32_t>(e[1], name + ".length");
  g.keep_recent = field_as<uint32_t>(e[2], name + ".keep_recent");
  return g;
}

// The inverse of trajectory_dict; Trajectory::check_consistent (in write_trajectory) judges it.
Trajectory trajectory_of(const py::dict& d) {
  auto need = [&](const char* key) -> py::handle {
    if (!d.contains(key)) throw std::invalid_argument(std::string("trajectory dict has no '") + key + "'");
    return d[key];
  };
  Trajectory t;
  t.model_file = field_as<std::string>(need("model_file"), "model_file");
  t.model_sha256 = field_as<std::string>(need("model_sha256"), "model_sha256");
  t.architecture = field_as<std::string>(need("architecture"), "architecture");
  t.n_vocab = field_as<uint32_t>(need("n_vocab"), "n_vocab");
  t.prompt_tokens = field_as<uint32_t>(need("prompt_tokens"), "prompt_tokens");
  t.tokens = vector_of<int32_t>(need("tokens"), "tokens");
  t.encoding = parse_encoding(field_as<std::string>(need("encoding"), "encoding"));
  if (d.contains("segments")) {
    const py::list segments = field_as<py::list>(d["segments"], "segments");
    for (size_t i = 0; i < segments.size(); ++i) t.segments.push_back(segment_of(segments[i], i));
  }
  if (d.contains("context")) t.context = field_as<uint32_t>(d["context"], "context");
  for (const auto& [key, field] : source_keys())
    if (d.contains(key)) t.source.*field = field_as<std::string>(d[key], key);
  if (d.contains("settings")) {
    const py::dict s = field_as<py::dict>(d["settings"], "settings");
    auto opt = [&](const char* key, auto& field) {
      if (s.contains(key)) field = field_as<std::decay_t<decltype(field)>>(s[key], std::string("settings.") + key);
    };
    opt("generate", t.settings.generate);
    opt("sample", t.settings.sample);
    opt("seed", t.settings.seed);
    opt("temperature", t.settings.temperature);
    opt("top_p", t.settings.top_p);
    opt("top_k", t.settings.top_k);
    opt("reference", t.settings.reference);
    opt("ubatch", t.settings.ubatch);
    opt("threads", t.settings.threads);
    opt("self_kl_target", t.settings.self_kl_target);
  }
  // What the writer cannot judge but a later score would trip on: the model's SHA-256 and the
  // reference arm are checked here, and `generated` (derived, as read_trajectory gives it)
  // must agree with the tokens when it is given.
  const bool hex64 = t.model_sha256.size() == 64 && t.model_sha256.find_first_not_of("0123456789abcdef") == std::string::npos;
  if (!hex64) throw std::invalid_argument("trajectory field 'model_sha256' must be 64 lowercase hexadecimal digits");
  try {
    (void)replay::make_arm(t.settings.reference);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("trajectory field 'settings.reference': ") + e.what());
  }
  if (d.contains("generated")) {
    const uint64_t g = field_as<uint64_t>(d["generated"], "generated");
    if (!t.segments.empty()) {
      uint64_t scored = 0;
      for (const Segment& s : t.segments) scored += s.scored() ? s.length : 0;
      if (g != scored)
        throw std::invalid_argument("trajectory field 'generated' is " + std::to_string(g) +
                                    ", but the generated and answer segments hold " + std::to_string(scored));
    } else if (g + t.prompt_tokens != t.tokens.size()) {
      throw std::invalid_argument("trajectory field 'generated' is " + std::to_string(g) + ", but tokens and prompt_tokens give " +
                                  std::to_string(t.tokens.size() - std::min<size_t>(t.tokens.size(), t.prompt_tokens)));
    }
  }
  const std::vector<double> log_z = vector_of<double>(need("log_z"), "log_z");
  const size_t G = log_z.size();
  if (t.encoding == RefEncoding::sparse) {
    const std::vector<double> rest = vector_of<double>(need("rest_mass"), "rest_mass");
    const py::list ids = field_as<py::list>(need("kept_ids"), "kept_ids");
    const py::list logits = field_as<py::list>(need("kept_logits"), "kept_logits");
    if (rest.size() != G || ids.size() != G || logits.size() != G)
      throw std::invalid_argument("log_z, rest_mass, kept_ids and kept_logits must have one entry per generated position");
    t.ref.resize(G);
    for (size_t j = 0; j < G; ++j) {
      t.ref[j].log_z = log_z[j];
      t.ref[j].rest_mass = rest[j];
      t.ref[j].ids = vector_of<uint32_t>(ids[j], "kept_ids");
      t.ref[j].logits = vector_of<float>(logits[j], "kept_logits");
    }
    t.self_kl_max = d.contains("self_kl_max") ? field_as<double>(d["self_kl_max"], "self_kl_max") : 0.0;
  } else {
    t.n_embd = field_as<uint32_t>(need("n_embd"), "n_embd");
    constexpr int F = py::array::c_style | py::array::forcecast;
    const auto hidden = py::array_t<float, F>::ensure(need("hidden"));
    const auto hash = py::array_t<uint64_t, F>::ensure(need("logits_hash"));
    const auto top_ids = py::array_t<uint32_t, F>::ensure(need("top_ids"));
    const auto top_lp = py::array_t<float, F>::ensure(need("top_logprobs"));
    if (!hidden || !hash || !top_ids || !top_lp) throw std::invalid_argument("hidden, logits_hash, top_ids and top_logprobs must be arrays");
    if (hidden.ndim() != 2 || static_cast<size_t>(hidden.shape(0)) != G || static_cast<size_t>(hidden.shape(1)) != t.n_embd)
      throw std::invalid_argument("hidden must be [generated, n_embd]");
    if (hash.ndim() != 1 || static_cast<size_t>(hash.shape(0)) != G || top_ids.ndim() != 2 ||
        static_cast<size_t>(top_ids.shape(0)) != G || top_lp.ndim() != 2 || top_lp.shape(0) != top_ids.shape(0) ||
        top_lp.shape(1) != top_ids.shape(1))
      throw std::invalid_argument("logits_hash, top_ids and top_logprobs must have one row per generated position");
    const size_t E = t.n_embd, T = static_cast<size_t>(top_ids.shape(1));
    t.hid.resize(G);
    for (size_t j = 0; j < G; ++j) {
      HiddenRef& h = t.hid[j];
      h.hidden.assign(hidden.data(j, 0), hidden.data(j, 0) + E);
      h.log_z = log_z[j];
      h.logits_hash = hash.at(j);
      h.top_ids.assign(top_ids.data(j, 0), top_ids.data(j, 0) + T);
      h.top_logprobs.assign(top_lp.data(j, 0), top_lp.data(j, 0) + T);
    }
  }
  return t;
}

}  // namespace

namespace sjkv::pybind {

void bind_files(py::module_& m) {
  m.def(
      "load_capture",
      [](const std::string& path, uint32_t head_dim, const std::vector<uint32_t>& layers,
         const std::vector<uint32_t>& layer_ids, uint32_t kv_sections) {
        ImportOptions io;
        io.head_dim = head_dim;
        io.layers = layers;
        io.layer_ids = layer_ids;
        io.kv_sections = kv_sections;
        Capture c;
        {
          py::gil_scoped_release nogil;
          c = load_capture_any(path, io);
        }
        return pybind::capture_dict(c);
      },
      py::arg("path"), py::arg("head_dim") = 0, py::arg("layers") = std::vector<uint32_t>(),
      py::arg("layer_ids") = std::vector<uint32_t>(), py::arg("kv_sections") = 0,
      "Any input the tools take as a capture (sjkv capture, .kvd dump, llama.cpp state file; told by its bytes); "
      "llama.cpp state files need head_dim and, for iSWA models, kv_sections.");
  m.def(
      "read_snapshot_any", [](const std::string& path) { return read_snapshot_any(path); }, py::arg("path"),
      "A snapshot file or a sequence-state stream (.sjkvseq), told by its bytes.");
  m.def(
      "write_state_stream",
      [](const std::string& path, const Snapshot& s) {
        const std::string why = state_stream_refusal(s);
        if (!why.empty()) throw std::invalid_argument(why);
        write_state_stream(path, s);
      },
      py::arg("path"), py::arg("snapshot"), "Writes the reference library's sequence-state stream (state version 1).");
  m.def(
      "read_trajectory", [](const std::string& path) { return trajectory_dict(read_trajectory(path)); }, py::arg("path"),
      "A trajectory file of sjkv-replay record as a dict: tokens, top tokens, settings, model identity, the "
      "segments ((kind, length, keep_recent) tuples; empty for a version-2 file: [given prompt_tokens][generated "
      "generated]), context (0 for version 2), scored_positions, the provenance strings of a transcript "
      "recording, and the reference distribution of every scored position (sparse: kept_ids, kept_logits, log_z, "
      "rest_mass; hidden: hidden, log_z, logits_hash, top_ids, top_logprobs).");
  m.def(
      "write_trajectory",
      [](const std::string& path, const py::dict& t, int zstd_level) {
        Trajectory tr = trajectory_of(t);
        py::gil_scoped_release nogil;
        write_trajectory(path, tr, zstd_level);
      },
      py::arg("path"), py::arg("trajectory"), py::arg("zstd_level") = 3,
      "Writes a trajectory dict (read_trajectory's, or trajectory_from_logits') atomically, checked as the "
      "reader checks it: ValueError naming the first inconsistency, nothing written. Version 2 when it holds one "
      "prompt and its generation (no segments, or just that pair) with no provenance and context 0 or "
      "prompt_tokens + generate; version 3 otherwise.");
  m.def(
      "trajectory_from_logits",
      [](py::array_t<int32_t, py::array::c_style | py::array::forcecast> tokens, uint32_t prompt_tokens,
         py::array_t<float, py::array::c_style | py::array::forcecast> logits, const std::string& model_file,
         const std::string& model_sha256, const std::string& architecture, double self_kl_target, bool sample,
         const std::string& reference) {
        if (logits.ndim() != 2 || logits.shape(0) == 0 || logits.shape(1) == 0)
          throw std::invalid_argument("logits must be [generated, n_vocab]");
        if (!(self_kl_target > 0.0 && std::isfinite(self_kl_target)))
          throw std::invalid_argument("self_kl_target must be finite and > 0");
        Trajectory t;
        t.model_file = model_file;
        t.model_sha256 = model_sha256;
        t.architecture = architecture;
        t.n_vocab = static_cast<uint32_t>(logits.shape(1));
        t.prompt_tokens = prompt_tokens;
        t.tokens.assign(tokens.data(), tokens.data() + tokens.size());
        t.encoding = RefEncoding::sparse;
        t.settings.generate = static_cast<uint32_t>(logits.shape(0));
        t.settings.sample = sample;
        t.settings.reference = reference;
        t.settings.self_kl_target = self_kl_target;
        const size_t G = static_cast<size_t>(logits.shape(0));
        t.ref.resize(G);
        {
          py::gil_scoped_release nogil;
          for (size_t j = 0; j < G; ++j) {
            const float* row = logits.data(j, 0);
            t.ref[j] = replay::encode_reference(row, t.n_vocab, self_kl_target);
            t.self_kl_max = std::max(t.self_kl_max, replay::self_kl(row, t.n_vocab, t.ref[j]));
          }
        }
        t.check_consistent();
        return trajectory_dict(t);
      },
      py::arg("tokens"), py::arg("prompt_tokens"), py::arg("logits"), py::arg("model_file"), py::arg("model_sha256"),
      py::arg("architecture"), py::arg("self_kl_target") = 5e-7, py::arg("sample") = false, py::arg("reference") = "f32",
      "A sparse-encoded trajectory dict from another engine's logits ([generated, n_vocab] float32, row j the "
      "distribution of token prompt_tokens + j), kept as sjkv-replay record --encoding sparse keeps them: the "
      "fewest top tokens whose loss is at most self_kl_target nats. sjkv-replay score reads the file "
      "write_trajectory makes of it when model_file and model_sha256 name the GGUF it is given.");
}

}  // namespace sjkv::pybind
