// The rest of _sjkv: the sequence cache step by step, the other input files (any capture-like
// input, llama.cpp state files, sequence-state streams, trajectories), training and results.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "bind.h"
#include "sjkv/cache.h"
#include "sjkv/cache_view.h"
#include "sjkv/hadamard.h"
#include "sjkv/policy.h"
#include "sjkv/io/encode.h"
#include "sjkv/io/load.h"
#include "sjkv/io/paths.h"
#include "sjkv/io/state_stream.h"
#include "sjkv/io/table_set.h"
#include "sjkv/io/trajectory.h"
#include "sjkv/replay/arms.h"
#include "sjkv/replay/kv.h"
#include "sjkv/replay/reference.h"
#include "sjkv/replay/results.h"
#include "sjkv/replay/score.h"
#include "sjkv/train/pipeline.h"

namespace py = pybind11;
using namespace sjkv;

namespace {

using pybind::check_range;

// A refusal of the codec cache as one line: its own words when it gave them.
std::string why(const Status& st) {
  return st.code == ErrorCode::unsupported && !st.detail.empty() ? st.detail : st.message();
}

// This machine's memory in bytes (0 when unknown).
uint64_t physical_memory() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
}

// The engine's view of one sequence: positions stored in ubatches, the journal policy's step
// before each, rows read back as attention reads them.
class PyCache {
 public:
  PyCache(const std::string& config, long long n_layers, long long kv_heads, long long head_dim, long long n_ctx,
          long long n_ubatch, const std::string& codebook)
      : cfg_(pybind::parse_config_checked(config)) {
    // sjkv-encode plan's bounds of the same sizes, and the encoder's of the ubatch
    check_range("n_layers", n_layers, 1, 65536);
    check_range("kv_heads", kv_heads, 1, 65536);
    check_range("n_ctx", n_ctx, 1, UINT32_MAX);
    check_range("n_ubatch", n_ubatch, 1, kMaxUbatch);
    check_range("head_dim", head_dim, 1, 65536);  // can_implement then names what it cannot serve
    cfg_.head_dim = static_cast<uint32_t>(head_dim);
    const Unsupported bad = can_implement(cfg_);
    if (bad != Unsupported::none) throw std::invalid_argument(cfg_.name() + ": " + describe(bad));
    const TableChoice choice = TableChoice::parse(codebook == "auto" ? "reference" : codebook);
    set_ = choice.resolve(nullptr, cfg_.bits_k, cfg_.bits_v);
    SealOptions so;  // as sjkv-encode's encoder drives the cache
    so.iters = cfg_.iters;
    so.balance = cfg_.balance;
    if (set_ && cfg_.resolved_body() == Body::trellis) so.codebooks = set_->tables_for(cfg_.bits_k, cfg_.bits_v);
    else set_ = nullptr;
    CacheShape sh;
    sh.n_layers = static_cast<uint32_t>(n_layers);
    sh.n_head_kv = static_cast<uint32_t>(kv_heads);
    sh.n_ctx = static_cast<uint32_t>(n_ctx);
    sh.n_ubatch = static_cast<uint32_t>(n_ubatch);
    // Refused before allocating: zero-filling a cache larger than the machine would hang.
    const uint64_t bytes = cache_allocation_bytes(cfg_, sh), mem = physical_memory();
    if (bytes == UINT64_MAX || (mem && bytes > mem))
      throw std::invalid_argument(
          "n_layers, kv_heads, head_dim and n_ctx: the cache would take " +
          (bytes == UINT64_MAX ? std::string("more than 2^64 bytes") : std::to_string(bytes) + " bytes") +
          ", more than this machine's memory (" + std::to_string(mem) + " bytes)");
    cache_ = std::make_unique<SequenceCache>(cfg_, sh, so);
    if (!cache_->status().ok()) throw std::invalid_argument(why(cache_->status()));
  }

  // k, v: [n, layers, kv_heads, head_dim] float32, the model's basis unless rotated.
  uint32_t append(uint32_t pos0, py::array_t<float, py::array::c_style | py::array::forcecast> k,
                  py::array_t<float, py::array::c_style | py::array::forcecast> v, bool rotated) {
    const CacheShape& s = cache_->shape();
    const uint32_t D = cfg_.head_dim;
    if (k.ndim() != 4 || k.shape(1) != s.n_layers || k.shape(2) != s.n_head_kv || k.shape(3) != D)
      throw std::invalid_argument("k must be [n, " + std::to_string(s.n_layers) + ", " + std::to_string(s.n_head_kv) + ", " +
                                  std::to_string(D) + "]");
    if (v.ndim() != 4 || v.shape(0) != k.shape(0) || v.shape(1) != k.shape(1) || v.shape(2) != k.shape(2) || v.shape(3) != D)
      throw std::invalid_argument("v must have k's shape");
    const uint32_t n = static_cast<uint32_t>(k.shape(0));
    if (pos0 != cache_->n_stored()) throw std::invalid_argument("pos0 must be " + std::to_string(cache_->n_stored()) + ", the positions stored");
    // Rotated float32 C-order rows are read in place; others are rotated in a copy.
    std::vector<float> K, V;
    const float* kp = k.data();
    const float* vp = v.data();
    uint32_t sealed = 0;
    {
      py::gil_scoped_release nogil;
      if (!rotated) {
        K.assign(kp, kp + k.size());
        V.assign(vp, vp + v.size());
        hadamard_blocks(K.data(), static_cast<uint32_t>(K.size()), cfg_.rotation());
        hadamard_blocks(V.data(), static_cast<uint32_t>(V.size()), cfg_.rotation());
        kp = K.data();
        vp = V.data();
      }
      if (!stepped_) {
        const Status st = cache_->begin_ubatch(pos0, n, &sealed);
        if (!st.ok()) throw std::invalid_argument(why(st));
      }
      stepped_ = false;
      const Status st = cache_->store_ubatch(pos0, n, kp, vp);
      if (!st.ok()) throw std::invalid_argument(why(st));
    }
    return sealed;
  }

  // The policy step alone, before a ubatch of n positions at pos0 (the next append at pos0
  // does not take it again).
  uint32_t begin_ubatch(uint32_t pos0, uint32_t n) {
    if (pos0 != cache_->n_stored()) throw std::invalid_argument("pos0 must be " + std::to_string(cache_->n_stored()) + ", the positions stored");
    uint32_t sealed = 0;
    py::gil_scoped_release nogil;
    const Status st = cache_->begin_ubatch(pos0, n, &sealed);
    if (!st.ok()) throw std::invalid_argument(why(st));
    stepped_ = true;
    return sealed;
  }

  uint32_t idle(uint32_t keep_recent) {
    uint32_t sealed = 0;
    py::gil_scoped_release nogil;
    const Status st = cache_->idle(keep_recent, &sealed);
    if (!st.ok()) throw std::invalid_argument(why(st));
    return sealed;
  }

  // Rows [p0, p1) of a layer as attention reads them: (k, v) float32 [p1 - p0, kv_heads, D],
  // in the model's basis unless rotated.
  py::tuple rows(uint32_t layer, uint32_t p0, uint32_t p1, bool rotated) const {
    const CacheShape& s = cache_->shape();
    if (layer >= s.n_layers) throw std::invalid_argument("layer " + std::to_string(layer) + " is out of range");
    if (p0 > p1 || p1 > cache_->n_stored())
      throw std::invalid_argument("positions must be within [0, " + std::to_string(cache_->n_stored()) + ")");
    const uint32_t D = cfg_.head_dim, H = s.n_head_kv;
    py::array_t<float> k({static_cast<size_t>(p1 - p0), static_cast<size_t>(H), static_cast<size_t>(D)}), v(k.request().shape);
    float* kp = k.mutable_data();
    float* vp = v.mutable_data();
    const CacheView view = cache_->view(layer);
    for (uint32_t p = p0; p < p1; ++p)
      for (uint32_t h = 0; h < H; ++h) {
        float* ko = kp + (static_cast<size_t>(p - p0) * H + h) * D;
        float* vo = vp + (static_cast<size_t>(p - p0) * H + h) * D;
        resolve_row(view, p, h, ko, vo);
        if (!rotated) {
          hadamard_blocks(ko, D, cfg_.rotation());  // the Hadamard blocks are their own inverse
          hadamard_blocks(vo, D, cfg_.rotation());
        }
      }
    return py::make_tuple(k, v);
  }

  Snapshot snapshot() const {
    Snapshot s = snapshot_of_cache(*cache_);
    if (set_) s.codebook_set = set_->name;
    return s;
  }

  const CodecConfig& config() const { return cfg_; }
  uint32_t n_stored() const { return cache_->n_stored(); }
  uint32_t B() const { return cache_->policy().B; }
  double bits_occupied() const { return occupied_bits(cfg_, cache_->policy().B, cache_->n_stored()).total_bits(); }

 private:
  CodecConfig cfg_;
  const TableSet* set_ = nullptr;
  std::unique_ptr<SequenceCache> cache_;
  bool stepped_ = false;  // begin_ubatch taken for the next append
};

// One layer's store of an sjkv-replay arm (docs/REPLAY.md's grammar), for caches of other
// engines (sjkv.hf): the same code as the replay's cache, rows read back decoded.
class PyArmLayer {
 public:
  // A layer of `arm` (which makes every layer of one model: tier=edge, wide= and layers= are
  // decided there, as in sjkv-replay).
  PyArmLayer(std::shared_ptr<const replay::KvArm> arm, uint32_t layer, bool full_attention, uint32_t n_head,
             uint32_t n_head_kv, uint32_t head_dim, uint32_t n_ctx, uint32_t n_ubatch, uint32_t window)
      : arm_(std::move(arm)) {
    init(layer, full_attention, n_head, n_head_kv, head_dim, n_ctx, n_ubatch, window);
  }
  // A one-layer model: the arm's layer choices (layers=, wide=) are checked against it.
  PyArmLayer(const std::string& spec, uint32_t layer, uint32_t n_head, uint32_t n_head_kv, uint32_t head_dim,
             uint32_t n_ctx, uint32_t n_ubatch, uint32_t window)
      : arm_(replay::make_arm(spec)) {
    replay::LayerShape only;
    only.layer = layer;
    only.full_attention = window == 0;
    arm_->check_layers({only});
    init(layer, window == 0, n_head, n_head_kv, head_dim, n_ctx, n_ubatch, window);
  }
  void init(uint32_t layer, bool full_attention, uint32_t n_head, uint32_t n_head_kv, uint32_t head_dim, uint32_t n_ctx,
            uint32_t n_ubatch, uint32_t window) {
    // sjkv-replay's bounds: a ubatch as a trajectory's, positions 32-bit
    check_range("n_ubatch", n_ubatch, 1, kMaxTrajectoryUbatch);
    check_range("n_ctx", n_ctx, 1, UINT32_MAX);
    // A compressed arm allocates its whole context at the first append (zero-filled: a cache
    // larger than the machine would be killed there, not refused). Refused here at 2 bits a
    // value, below what any arm stores.
    const uint64_t at_least = uint64_t{n_ctx} * n_head_kv * head_dim / 2, mem = physical_memory();
    if (mem && at_least > mem)
      throw std::invalid_argument("n_ctx " + std::to_string(n_ctx) + " x n_head_kv " + std::to_string(n_head_kv) +
                                  " x head_dim " + std::to_string(head_dim) + ": the layer would take at least " +
                                  std::to_string(at_least) + " bytes, more than this machine's memory (" +
                                  std::to_string(mem) + " bytes)");
    s_.layer = layer;
    s_.full_attention = full_attention;
    s_.window = window;
    s_.n_head = n_head;
    s_.n_head_kv = n_head_kv;
    s_.head_dim = head_dim;
    s_.n_ctx = n_ctx;
    s_.n_ubatch = n_ubatch;
    kv_ = arm_->make_layer(s_);
    view_ = dynamic_cast<replay::InspectableKv*>(kv_.get());
    if (!view_) throw std::logic_error("arm layer without rows");
  }
  // k, v: [n, n_head_kv, head_dim] float32 (after RoPE, as an engine stores them).
  void append(uint32_t pos0, py::array_t<float, py::array::c_style | py::array::forcecast> k,
              py::array_t<float, py::array::c_style | py::array::forcecast> v) {
    if (k.ndim() != 3 || k.shape(1) != s_.n_head_kv || k.shape(2) != s_.head_dim || v.ndim() != 3 ||
        v.shape(0) != k.shape(0) || v.shape(1) != k.shape(1) || v.shape(2) != k.shape(2))
      throw std::invalid_argument("k and v must be [n, " + std::to_string(s_.n_head_kv) + ", " + std::to_string(s_.head_dim) + "]");
    if (pos0 != view_->n_stored()) throw std::invalid_argument("pos0 must be " + std::to_string(view_->n_stored()));
    const uint32_t n = static_cast<uint32_t>(k.shape(0));
    // The arms refuse these with runtime_error; here they are the caller's arguments.
    if (n > s_.n_ubatch)
      throw std::invalid_argument("a ubatch of " + std::to_string(n) + " positions exceeds n_ubatch " +
                                  std::to_string(s_.n_ubatch));
    if (uint64_t{pos0} + n > s_.n_ctx)
      throw std::invalid_argument("positions up to " + std::to_string(uint64_t{pos0} + n) + " exceed n_ctx " +
                                  std::to_string(s_.n_ctx));
    py::gil_scoped_release nogil;
    kv_->begin_ubatch(pos0, n);
    kv_->store(pos0, n, k.data(), v.data());
  }
  // Every stored position decoded, the model's basis: (k, v) float32 [n_stored, n_head_kv, head_dim].
  py::tuple rows() const {
    const uint32_t N = view_->n_stored(), H = s_.n_head_kv, D = s_.head_dim;
    py::array_t<float> k({static_cast<size_t>(N), static_cast<size_t>(H), static_cast<size_t>(D)}), v(k.request().shape);
    float* kp = k.mutable_data();
    float* vp = v.mutable_data();
    {
      py::gil_scoped_release nogil;
      for (uint32_t p = 0; p < N; ++p)
        for (uint32_t h = 0; h < H; ++h)
          view_->decode_row(h, p, kp + (static_cast<size_t>(p) * H + h) * D, vp + (static_cast<size_t>(p) * H + h) * D);
    }
    return py::make_tuple(k, v);
  }
  uint32_t n_stored() const { return view_->n_stored(); }
  py::dict bits() const {
    const replay::LayerBits b = kv_->bits();
    py::dict d;
    d["occupied"] = b.occupied;
    d["allocated"] = b.allocated;
    return d;
  }
  std::string storage() const { return view_->storage_name(); }

 private:
  std::shared_ptr<const replay::KvArm> arm_;
  replay::LayerShape s_;
  std::unique_ptr<replay::LayerKv> kv_;
  replay::InspectableKv* view_ = nullptr;
};

// An sjkv-replay arm for a whole model: the model's layers given once (which are full
// attention), each layer's store made from the one arm, so the per-layer choices (tier=edge's
// first and last layers, wide=, layers=) are the replay's own.
class PyArm {
 public:
  PyArm(const std::string& spec, const std::vector<bool>& full_attention)
      : arm_(replay::make_arm(spec)), full_(full_attention) {
    if (full_.empty()) throw std::invalid_argument("full_attention must list the model's layers (one flag each)");
    std::vector<replay::LayerShape> shapes(full_.size());
    for (size_t i = 0; i < full_.size(); ++i) {
      shapes[i].layer = static_cast<uint32_t>(i);
      shapes[i].full_attention = full_[i];
    }
    arm_->check_layers(shapes);  // layers=/wide= naming a layer the model lacks: ValueError
  }
  // Make every layer before the first append: tier=edge decides at the first ubatch.
  PyArmLayer layer(uint32_t layer, uint32_t n_head, uint32_t n_head_kv, uint32_t head_dim, uint32_t n_ctx,
                   uint32_t n_ubatch, uint32_t window) const {
    if (layer >= full_.size())
      throw std::invalid_argument("layer " + std::to_string(layer) + ": the model has " + std::to_string(full_.size()) +
                                  " layers");
    if (!full_[layer] && window == 0)
      throw std::invalid_argument("layer " + std::to_string(layer) + " is a sliding-window layer: give its window");
    return PyArmLayer(arm_, layer, full_[layer], n_head, n_head_kv, head_dim, n_ctx, n_ubatch, full_[layer] ? 0 : window);
  }
  const std::string& spec() const { return arm_->spec(); }
  uint32_t n_layers() const { return static_cast<uint32_t>(full_.size()); }

 private:
  std::shared_ptr<const replay::KvArm> arm_;
  std::vector<bool> full_;
};

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

py::dict stats_dict(const replay::ArmStats& a) {
  py::dict d;
  d["arm"] = a.arm;
  d["positions"] = a.positions;
  d["mean_kl"] = a.mean_kl;
  d["median_kl"] = a.median_kl;
  d["p90_kl"] = a.p90_kl;
  d["p99_kl"] = a.p99_kl;
  d["max_kl"] = a.max_kl;
  d["same_top"] = a.same_top;
  d["bits_occupied"] = a.bits_occupied;
  d["bits_allocated"] = a.bits_allocated;
  return d;
}

}  // namespace

namespace sjkv::pybind {

void bind_more(py::module_& m) {
  py::class_<PyCache>(m, "Cache",
                      "One sequence's SJ-KVaRN cache as an engine drives it (sjkv/cache.h): append ubatches (the "
                      "policy step and the seals run before each), read back the rows attention reads, snapshot it.")
      .def(py::init<const std::string&, long long, long long, long long, long long, long long, const std::string&>(),
           py::arg("config"), py::arg("n_layers"), py::arg("kv_heads"), py::arg("head_dim"), py::arg("n_ctx"),
           py::arg("n_ubatch") = 512, py::arg("codebook") = "reference")
      .def("append", &PyCache::append, py::arg("pos0"), py::arg("k"), py::arg("v"), py::arg("rotated") = false,
           "Stores positions [pos0, pos0 + n) of every layer (k, v: [n, layers, kv_heads, head_dim]) after the "
           "policy step at pos0; returns the groups sealed per layer and head by that step.")
      .def("begin_ubatch", &PyCache::begin_ubatch, py::arg("pos0"), py::arg("n"),
           "The policy step before a ubatch of n positions at pos0 (append takes it unless this did); returns the "
           "groups sealed.")
      .def("idle", &PyCache::idle, py::arg("keep_recent"), "The idle step: seal back to the tail, keeping keep_recent exact.")
      .def("rows", &PyCache::rows, py::arg("layer"), py::arg("p0"), py::arg("p1"), py::arg("rotated") = false,
           "Rows [p0, p1) of a layer as attention reads them: (k, v) float32 [p1 - p0, kv_heads, head_dim].")
      .def("snapshot", &PyCache::snapshot)
      .def_property_readonly("config", &PyCache::config)
      .def_property_readonly("n_stored", &PyCache::n_stored)
      .def_property_readonly("B", &PyCache::B)
      .def("bits_occupied", &PyCache::bits_occupied);

  py::class_<PyArmLayer>(m, "ArmLayer",
                         "One layer's K/V store of an sjkv-replay arm (e.g. 'q8_0', 'kvarn:4/4:tail=0', 'sj:3/2t'), the "
                         "replay's own code: append ubatches, read every stored row back decoded. Made from a spec it "
                         "is a model of this one layer; sjkv.Arm(spec, full_attention).layer(...) makes the layers of a "
                         "whole model (tier=edge, wide=, layers= as sjkv-replay chooses them).")
      .def(py::init<const std::string&, uint32_t, uint32_t, uint32_t, uint32_t, uint32_t, uint32_t, uint32_t>(),
           py::arg("arm"), py::arg("layer"), py::arg("n_head"), py::arg("n_head_kv"), py::arg("head_dim"),
           py::arg("n_ctx"), py::arg("n_ubatch") = 512, py::arg("window") = 0)
      .def("append", &PyArmLayer::append, py::arg("pos0"), py::arg("k"), py::arg("v"))
      .def("rows", &PyArmLayer::rows)
      .def_property_readonly("n_stored", &PyArmLayer::n_stored)
      .def_property_readonly("storage", &PyArmLayer::storage)
      .def("bits", &PyArmLayer::bits);

  py::class_<PyArm>(m, "Arm",
                    "An sjkv-replay arm for a whole model: full_attention lists the model's layers (True for each "
                    "full-attention layer). The spec's layer choices are checked against them as sjkv-replay checks "
                    "them (ValueError for layers=/wide= naming a layer the model lacks), and every layer's store "
                    "comes from this one arm, so tier=edge's first and last layers are the replay's. Make every "
                    "layer before the first append.")
      .def(py::init<const std::string&, const std::vector<bool>&>(), py::arg("spec"), py::arg("full_attention"))
      .def("layer", &PyArm::layer, py::arg("layer"), py::arg("n_head"), py::arg("n_head_kv"), py::arg("head_dim"),
           py::arg("n_ctx"), py::arg("n_ubatch") = 512, py::arg("window") = 0,
           "The store of one layer of the model (window: a sliding-window layer's, which the arms keep f16).")
      .def_property_readonly("spec", &PyArm::spec)
      .def_property_readonly("n_layers", &PyArm::n_layers);

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

  m.def(
      "train",
      [](const std::vector<std::string>& inputs, const std::string& prefix, uint32_t bits, const std::string& init,
         uint64_t seed, double heldout, double tol, long long max_iters, long long threads, uint32_t head_dim,
         uint32_t kv_sections, const std::string& axis, const std::string& staging, uint32_t sink, uint32_t iters,
         bool assume_rotated, bool checkpoint) {
        // sjkv-train's checks of its options, as ValueError naming the argument
        pybind::check_threads(threads);
        check_range("max_iters", max_iters, 0, 10000);
        {
          // A prefix that names a folder ('', '.', 'out/') would write hidden files .sjcb, .bin, .h in it.
          const std::string base = base_name(prefix);
          if (base.empty() || base == "." || base == ".." || is_folder(prefix))
            throw std::invalid_argument("prefix '" + prefix + "' names a folder; give a file prefix such as " +
                                        (prefix.empty() || prefix.back() == '/' ? prefix : prefix + "/") +
                                        "cb3 (writes cb3.sjcb, cb3.bin, cb3.h)");
        }
        if (!(heldout >= 0.0 && heldout < 1.0)) throw std::invalid_argument("heldout must be in [0, 1)");
        if (!(tol >= 0.0 && std::isfinite(tol))) throw std::invalid_argument("tol must be finite and >= 0");
        if (axis != "token" && axis != "channel") throw std::invalid_argument("axis must be token or channel");
        train::TrainRun run;
        if (!parse_staging(staging, &run.staging)) throw std::invalid_argument("staging must be tq6_0, q8_0 or f16");
        run.axis = axis == "channel" ? TrellisAxis::channel : TrellisAxis::token;
        {
          CodecConfig cc;
          cc.bits_k = cc.bits_v = bits;
          cc.body = Body::trellis;
          cc.sink = sink;
          cc.iters = iters;
          cc.trellis_axis = run.axis;
          cc.head_dim = head_dim ? head_dim : 256;
          const Unsupported why = can_implement(cc);
          if (why != Unsupported::none) throw std::invalid_argument(std::string("bits, sink, iters or axis: ") + describe(why));
        }
        run.sink = sink;
        run.iters = iters;
        run.assume_rotated = assume_rotated;
        run.checkpoint = checkpoint;
        run.inputs = inputs;
        run.prefix = prefix;
        run.bits = bits;
        run.init = init;
        run.seed = seed;
        run.heldout = heldout;
        run.tol = tol;
        run.max_iters = max_iters;
        run.threads = threads;
        run.io.head_dim = head_dim;
        run.io.kv_sections = kv_sections;
        run.tool_version = "sjkv python 0.1.0";
        train::TrainReport rep;
        {
          py::gil_scoped_release nogil;
          rep = train::train_and_evaluate(run);
        }
        py::dict d;
        d["outputs"] = rep.outputs;
        d["init"] = rep.init_name;
        d["codebook_id"] = rep.codebook.codebook_id;
        d["train_tiles"] = rep.train_tiles;
        d["heldout_tiles"] = rep.heldout_tiles;
        const char* sides[2] = {"k", "v"};
        for (int s = 0; s < 2; ++s) {
          py::dict h;
          h["scalar"] = rep.heldout[s].scalar;
          h["identity"] = rep.heldout[s].identity;
          h["reference"] = rep.heldout[s].reference;
          h["trained"] = rep.heldout[s].trained;
          h["iterations"] = rep.result[s].iterations;
          h["stop"] = rep.result[s].stop;
          d[sides[s]] = h;
        }
        return d;
      },
      py::arg("inputs"), py::arg("prefix"), py::arg("bits") = 3, py::arg("init") = "identity", py::arg("seed") = 1,
      py::arg("heldout") = 0.2, py::arg("tol") = train::TrainRun{}.tol, py::arg("max_iters") = train::TrainRun{}.max_iters,
      py::arg("threads") = 0, py::arg("head_dim") = 0, py::arg("kv_sections") = 0, py::arg("axis") = "token",
      py::arg("staging") = "tq6_0", py::arg("sink") = train::TrainRun{}.sink, py::arg("iters") = train::TrainRun{}.iters,
      py::arg("assume_rotated") = false, py::arg("checkpoint") = false,
      "sjkv-train: trains a trellis table pair on captures (.kvd dumps, llama.cpp state files), writes "
      "PREFIX.sjcb/.bin and, for the token axis, PREFIX.h, and returns the held-out report (MSE of the trellis "
      "targets per side and table). init: identity, reference, a shipped set's name or a codebook file. "
      "checkpoint: each side's Lloyd state goes to PREFIX.{k,v}.ckpt after every update, and a run with the same "
      "inputs and options goes on from there with the same bytes. The options are sjkv-train's.");

  m.def(
      "read_results",
      [](const std::string& folder) {
        const std::vector<replay::PositionRow> rows = replay::read_positions_csv(folder + "/positions.csv");
        // One pass: each arm's columns and its rows per trajectory (for arm_stats), arms in file order.
        struct Columns {
          std::vector<double> pos, kl, same, bo, ba;
          std::vector<std::string> traj;
          std::map<std::string, std::vector<replay::ScoreRow>> by_traj;
        };
        std::map<std::string, Columns> cols;
        std::vector<std::string> order;
        for (const replay::PositionRow& r : rows) {
          if (!cols.count(r.arm)) order.push_back(r.arm);
          Columns& c = cols[r.arm];
          c.traj.push_back(r.trajectory);
          c.pos.push_back(r.position);
          c.kl.push_back(r.row.kl);
          c.same.push_back(r.row.same_top ? 1.0 : 0.0);
          c.bo.push_back(r.row.bits_occupied);
          c.ba.push_back(r.row.bits_allocated);
          c.by_traj[r.trajectory].push_back(r.row);
        }
        py::dict out;
        for (const std::string& arm : order) {
          const Columns& c = cols[arm];
          const auto& [pos, kl, same, bo, ba, traj, by_traj] = c;
          py::dict a;
          a["trajectory"] = traj;
          a["position"] = py::array_t<double>(pos.size(), pos.data()).attr("astype")("int64");
          a["kl"] = py::array_t<double>(kl.size(), kl.data());
          a["same_top"] = py::array_t<double>(same.size(), same.data()).attr("astype")("bool");
          a["bits_occupied"] = py::array_t<double>(bo.size(), bo.data());
          a["bits_allocated"] = py::array_t<double>(ba.size(), ba.data());
          std::vector<std::vector<replay::ScoreRow>> per;
          for (const auto& [t, rs] : by_traj) per.push_back(rs);
          a["stats"] = stats_dict(replay::arm_stats(arm, per));
          out[py::str(arm)] = a;
        }
        return out;
      },
      py::arg("folder"),
      "A results folder of sjkv-replay score/run: per arm, arrays per position (trajectory, position, kl, "
      "same_top, bits) and its summary statistics.");
  m.def(
      "compare",
      [](const std::vector<std::vector<double>>& a, const std::vector<std::vector<double>>& b, long long replicates,
         uint64_t seed) {
        check_range("replicates", replicates, 100, 1000000);  // sjkv-replay's --bootstrap
        replay::BootstrapOptions o;
        o.replicates = static_cast<uint32_t>(replicates);
        o.seed = seed;
        const replay::Comparison c = replay::compare_arms("a", "b", a, b, o);
        py::dict d;
        d["ratio"] = c.ratio;
        d["ci_low"] = c.ci_low;
        d["ci_high"] = c.ci_high;
        d["ci_low_traj"] = c.ci_low_traj;
        d["ci_high_traj"] = c.ci_high_traj;
        d["lower_at"] = c.lower_at;
        d["of"] = c.of;
        return d;
      },
      py::arg("a"), py::arg("b"), py::arg("replicates") = 2000, py::arg("seed") = replay::BootstrapOptions{}.seed,
      "Paired comparison of two arms' KL (a[t][i], b[t][i]: trajectory t, position i): the ratio of means and "
      "its 95% block-bootstrap CIs over positions and over trajectories, as sjkv-replay reports them.");
}

}  // namespace sjkv::pybind
