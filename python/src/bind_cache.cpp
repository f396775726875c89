// _sjkv: the codec as an engine drives it: the sequence cache step by step (Cache) and sjkv-replay's
// cache arms layer by layer (Arm, ArmLayer).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "bind.h"
#include "sjkv/cache.h"
#include "sjkv/cache_view.h"
#include "sjkv/hadamard.h"
#include "sjkv/io/encode.h"
#include "sjkv/io/snapshot.h"
#include "sjkv/io/table_set.h"
#include "sjkv/io/trajectory.h"
#include "sjkv/policy.h"
#include "sjkv/replay/arms.h"
#include "sjkv/replay/kv.h"

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

}  // namespace

namespace sjkv::pybind {

void bind_cache(py::module_& m) {
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
}

}  // namespace sjkv::pybind
