#include "sjkv/cache.h"

#include <cmath>
#include <cstring>
#include <string>
#include <utility>

#include "sjkv/parallel.h"

namespace sjkv {

namespace {

// a * b and a + b, UINT64_MAX once either overflows.
uint64_t mul_sat(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}
uint64_t add_sat(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_add_overflow(a, b, &r) ? UINT64_MAX : r;
}

uint32_t groups_for(const CodecConfig& cfg, uint32_t n_ctx) {
  return n_ctx > cfg.sink ? static_cast<uint32_t>((uint64_t{n_ctx} - cfg.sink + cfg.group - 1) / cfg.group) : 1;
}

Status refused(std::string why) {
  Status st;
  st.code = ErrorCode::unsupported;
  st.detail = std::move(why);
  return st;
}

}  // namespace

uint64_t cache_allocation_bytes(const CodecConfig& cfg, const CacheShape& shape) {
  if (!ring_capacity_valid(cfg.tail, cfg.tail_max, cfg.group, shape.n_ubatch)) return UINT64_MAX;
  const uint64_t H = shape.n_head_kv, D = cfg.head_dim, rb = staging_row_bytes(cfg.staging, cfg.head_dim);
  const uint64_t sink_entry = cfg.sink_type == SinkType::f16 ? mul_sat(2, mul_sat(D, 2)) : mul_sat(2, rb);
  const uint64_t sink = mul_sat(mul_sat(cfg.sink, H), sink_entry);
  const uint64_t ring = mul_sat(mul_sat(ring_capacity(cfg.tail, cfg.tail_max, cfg.group, shape.n_ubatch), H), mul_sat(2, rb));
  const uint64_t body = mul_sat(mul_sat(groups_for(cfg, shape.n_ctx), H), cfg.layout().bytes);
  return mul_sat(add_sat(add_sat(sink, ring), body), shape.n_layers);
}

LayerCache::LayerCache(const CodecConfig& cfg, uint32_t n_head_kv, uint32_t n_ctx, uint32_t cap)
    : cfg_(cfg), layout_(cfg.layout()), n_head_kv_(n_head_kv), n_ctx_(n_ctx), cap_(cap) {
  const uint32_t D = cfg.head_dim;
  row_bytes_ = staging_row_bytes(cfg.staging, D);
  n_groups_ = groups_for(cfg, n_ctx);
  if (cfg.sink_type == SinkType::f16)
    sink_f16_.assign(static_cast<size_t>(cfg.sink) * n_head_kv * 2 * D, 0);
  else
    sink_staged_.assign(static_cast<size_t>(cfg.sink) * n_head_kv * 2 * row_bytes_, 0);
  ring_.assign(static_cast<size_t>(cap) * n_head_kv * 2 * row_bytes_, 0);
  body_.assign(static_cast<size_t>(n_groups_) * n_head_kv * layout_.bytes, 0);
}

size_t LayerCache::entry_bytes(uint32_t p) const {
  const bool f16_sink = p < cfg_.sink && cfg_.sink_type == SinkType::f16;
  return static_cast<size_t>(n_head_kv_) * 2 * (f16_sink ? 2 * cfg_.head_dim : row_bytes_);
}

Status LayerCache::encode_entry(uint32_t p, const float* k, const float* v, uint8_t* entry) const {
  const uint32_t D = cfg_.head_dim;
  // Past n_ctx a later seal would write records past the body.
  if (p >= n_ctx_) return refused("position " + std::to_string(p) + " is past n_ctx " + std::to_string(n_ctx_));
  for (uint32_t h = 0; h < n_head_kv_; ++h)
    for (uint32_t d = 0; d < D; ++d) {
      if (!std::isfinite(k[h * D + d])) return Status::at(ErrorCode::non_finite_input, Side::k, p, h * D + d);
      if (!std::isfinite(v[h * D + d])) return Status::at(ErrorCode::non_finite_input, Side::v, p, h * D + d);
    }
  const bool f16_sink = p < cfg_.sink && cfg_.sink_type == SinkType::f16;
  // [head][K | V], each half an fp16 row (f16 sink) or a staging row
  const uint32_t half = f16_sink ? 2 * D : row_bytes_;
  const StagingType t = f16_sink ? StagingType::f16 : cfg_.staging;
  for (uint32_t h = 0; h < n_head_kv_; ++h) {
    uint8_t* e = entry + static_cast<size_t>(h) * 2 * half;
    const int32_t bk = staging_encode_row_checked(t, k + h * D, D, e);
    if (bk >= 0) return Status::at(ErrorCode::fp16_overflow, Side::k, p, h * D + static_cast<uint32_t>(bk));
    const int32_t bv = staging_encode_row_checked(t, v + h * D, D, e + half);
    if (bv >= 0) return Status::at(ErrorCode::fp16_overflow, Side::v, p, h * D + static_cast<uint32_t>(bv));
  }
  return Status{};
}

void LayerCache::write_entry(uint32_t p, const uint8_t* entry) {
  uint8_t* dst;
  if (p < cfg_.sink && cfg_.sink_type == SinkType::f16)
    dst = reinterpret_cast<uint8_t*>(sink_f16_.data()) + static_cast<size_t>(p) * n_head_kv_ * 4 * cfg_.head_dim;
  else if (p < cfg_.sink)
    dst = sink_staged_.data() + static_cast<size_t>(p) * n_head_kv_ * 2 * row_bytes_;
  else
    dst = ring_.data() + static_cast<size_t>(ring_slot(p, cfg_.sink, cap_)) * n_head_kv_ * 2 * row_bytes_;
  const size_t n = entry_bytes(p);
  if (n) std::memcpy(dst, entry, n);  // no heads: nothing to copy (and no buffers)
}

Status LayerCache::store(uint32_t p, const float* k, const float* v) {
  scratch_entry_.resize(entry_bytes(p));
  Status st = encode_entry(p, k, v, scratch_entry_.data());
  if (st.ok()) write_entry(p, scratch_entry_.data());
  return st;
}

size_t LayerCache::append_seal_inputs(uint32_t from, uint32_t to, std::vector<uint16_t>& kin,
                                      std::vector<uint16_t>& vin) const {
  if (to <= from) return 0;
  const uint32_t D = cfg_.head_dim, G = cfg_.group;
  const uint32_t n_grp = (to - from) / G;
  const size_t n_rec = static_cast<size_t>(n_grp) * n_head_kv_;
  // Seal inputs: staged rows read back and rounded to fp16, [record][t][D] for K and V.
  const size_t base = kin.size();
  kin.resize(base + n_rec * G * D);
  vin.resize(base + n_rec * G * D);
  std::vector<float> tmp(D);
  for (uint32_t gi = 0; gi < n_grp; ++gi)
    for (uint32_t h = 0; h < n_head_kv_; ++h) {
      const size_t r = static_cast<size_t>(gi) * n_head_kv_ + h;
      for (uint32_t t = 0; t < G; ++t) {
        const uint32_t p = from + gi * G + t;
        const uint8_t* e = ring_.data() + (static_cast<size_t>(ring_slot(p, cfg_.sink, cap_)) * n_head_kv_ + h) * 2 * row_bytes_;
        staging_seal_input(cfg_.staging, e, D, tmp.data(), kin.data() + base + (r * G + t) * D);
        staging_seal_input(cfg_.staging, e + row_bytes_, D, tmp.data(), vin.data() + base + (r * G + t) * D);
      }
    }
  return n_rec;
}

uint8_t* LayerCache::body_at(uint32_t from) {
  const uint32_t g0 = (from - cfg_.sink) / cfg_.group;
  return body_.data() + static_cast<size_t>(g0) * n_head_kv_ * layout_.bytes;
}

Status LayerCache::check_seal_range(uint32_t from, uint32_t to) const {
  const uint64_t end = uint64_t{cfg_.sink} + uint64_t{n_groups_} * cfg_.group;
  if (from < cfg_.sink || to > end)
    return refused("sealing positions [" + std::to_string(from) + ", " + std::to_string(to) + ") past the body of n_ctx " +
                   std::to_string(n_ctx_));
  return Status{};
}

Status LayerCache::seal(uint32_t from, uint32_t to, const SealOptions& opt, SealPath path, int n_threads) {
  if (to <= from) return Status{};
  Status range = check_seal_range(from, to);
  if (!range.ok()) return range;
  const uint32_t D = cfg_.head_dim, G = cfg_.group;
  std::vector<uint16_t> kin, vin;
  const size_t n_rec = append_seal_inputs(from, to, kin, vin);
  std::vector<const uint16_t*> kp(n_rec), vp(n_rec);
  for (size_t r = 0; r < n_rec; ++r) {
    kp[r] = kin.data() + r * G * D;
    vp[r] = vin.data() + r * G * D;
  }
  return seal_records(layout_, opt, n_rec, kp.data(), vp.data(), D, body_at(from), path, n_threads);
}

CacheView LayerCache::view(uint32_t B, uint32_t N) const {
  CacheView v;
  v.layout = layout_;
  v.n_head_kv = n_head_kv_;
  v.sink = cfg_.sink;
  v.cap = cap_;
  v.sink_inherit = cfg_.sink_type == SinkType::inherit ? 1u : 0u;
  v.staging = cfg_.staging;
  v.sink_f16 = sink_f16_.empty() ? nullptr : sink_f16_.data();
  v.sink_staged = sink_staged_.empty() ? nullptr : sink_staged_.data();
  v.ring = ring_.data();
  v.body = body_.data();
  v.B = B;
  v.N = N;
  return v;
}

SequenceCache::SequenceCache(const CodecConfig& cfg, const CacheShape& shape, SealOptions opt, SealPath path,
                             int n_threads)
    : cfg_(cfg), shape_(shape), opt_(opt), path_(path), n_threads_(n_threads) {
  const Unsupported why = can_implement(cfg);
  if (why != Unsupported::none) {
    status_.code = ErrorCode::unsupported;
    status_.detail = describe(why);
    return;
  }
  if (!ring_capacity_valid(cfg.tail, cfg.tail_max, cfg.group, shape.n_ubatch)) {
    status_.code = ErrorCode::unsupported;
    status_.detail = "n_ubatch must be in [1, 2^20] (got " + std::to_string(shape.n_ubatch) + ")";
    return;
  }
  if (shape.n_layers == 0 || shape.n_head_kv == 0 || shape.n_ctx == 0) {
    status_ = refused(std::string(shape.n_layers == 0 ? "n_layers" : shape.n_head_kv == 0 ? "n_head_kv" : "n_ctx") +
                      " must be at least 1");
    return;
  }
  if (cache_allocation_bytes(cfg, shape) == UINT64_MAX) {
    status_ = refused("the cache's size overflows 64 bits");
    return;
  }
  opt_.iters = cfg.iters;
  opt_.balance = cfg.balance;
  policy_.init(cfg.sink, cfg.tail, cfg.tail_max, cfg.group, cfg.flush_chunk);
  const uint32_t cap = ring_capacity(cfg.tail, cfg.tail_max, cfg.group, shape.n_ubatch);
  layers_.reserve(shape.n_layers);
  for (uint32_t l = 0; l < shape.n_layers; ++l) layers_.emplace_back(cfg, shape.n_head_kv, shape.n_ctx, cap);
}

Status SequenceCache::seal_pending(uint32_t* groups_sealed) {
  const uint32_t from = policy_.B, to = policy_.B_pending;
  if (groups_sealed) *groups_sealed = to > from ? (to - from) / cfg_.group : 0;
  if (to > from) {
    Status range = layers_.front().check_seal_range(from, to);
    if (!range.ok()) return range;
  }
  if (sealer_ && to > from) {
    // One call for the records of every layer (layer-major), then scattered to the bodies.
    std::vector<uint16_t> kin, vin;
    size_t per_layer = 0;
    for (const auto& layer : layers_) per_layer = layer.append_seal_inputs(from, to, kin, vin);
    const RecordLayout& l = layers_.front().layout();
    const size_t n_rec = per_layer * layers_.size(), tile = static_cast<size_t>(cfg_.group) * cfg_.head_dim;
    std::vector<const uint16_t*> kp(n_rec), vp(n_rec);
    for (size_t r = 0; r < n_rec; ++r) {
      kp[r] = kin.data() + r * tile;
      vp[r] = vin.data() + r * tile;
    }
    std::vector<uint8_t> out(n_rec * l.bytes);
    Status st = sealer_(l, opt_, n_rec, kp.data(), vp.data(), cfg_.head_dim, out.data());
    if (!st.ok()) return st;
    for (size_t i = 0; i < layers_.size(); ++i)
      std::memcpy(layers_[i].body_at(from), out.data() + i * per_layer * l.bytes, per_layer * l.bytes);
  } else {
    for (auto& layer : layers_) {
      Status st = layer.seal(from, to, opt_, path_, n_threads_);
      if (!st.ok()) return st;
    }
  }
  if (to > from) ++commits_;
  policy_.commit();
  return Status{};
}

Status SequenceCache::begin_ubatch(uint32_t pos0, uint32_t n_tokens, uint32_t* groups_sealed) {
  if (!status_.ok()) return status_;
  if (pos0 > n_) {
    Status st;
    st.code = ErrorCode::unsupported;
    st.detail = "ubatch starts at " + std::to_string(pos0) + " past the stored end " + std::to_string(n_);
    return st;
  }
  // The ring holds two ubatches of n_ubatch (ring_capacity): a larger one would overwrite rows
  // not yet sealed. Past n_ctx the body has no room for the records.
  if (n_tokens > shape_.n_ubatch)
    return refused("ubatch of " + std::to_string(n_tokens) + " positions exceeds n_ubatch " + std::to_string(shape_.n_ubatch));
  if (uint64_t{pos0} + n_tokens > shape_.n_ctx)
    return refused("ubatch ends at " + std::to_string(uint64_t{pos0} + n_tokens) + ", past n_ctx " +
                   std::to_string(shape_.n_ctx));
  policy_.begin_ubatch(pos0, n_tokens);
  return seal_pending(groups_sealed);
}

Status SequenceCache::store(uint32_t p, const float* k, const float* v) {
  if (!status_.ok()) return status_;
  if (p >= shape_.n_ctx) return refused("position " + std::to_string(p) + " is past n_ctx " + std::to_string(shape_.n_ctx));
  const size_t per_layer = static_cast<size_t>(shape_.n_head_kv) * cfg_.head_dim;
  // Encode every layer before writing any, so a refused position leaves no layer changed.
  entries_.resize(shape_.n_layers);
  for (uint32_t l = 0; l < shape_.n_layers; ++l) {
    entries_[l].resize(layers_[l].entry_bytes(p));
    Status st = layers_[l].encode_entry(p, k + l * per_layer, v + l * per_layer, entries_[l].data());
    if (!st.ok()) {
      st.detail = "layer " + std::to_string(l) + (st.detail.empty() ? "" : ": " + st.detail);
      return st;
    }
  }
  for (uint32_t l = 0; l < shape_.n_layers; ++l) layers_[l].write_entry(p, entries_[l].data());
  if (p + 1 > n_) n_ = p + 1;
  return Status{};
}

Status SequenceCache::store_ubatch(uint32_t pos0, uint32_t n, const float* k, const float* v) {
  if (!status_.ok()) return status_;
  if (n > shape_.n_ubatch)
    return refused("ubatch of " + std::to_string(n) + " positions exceeds n_ubatch " + std::to_string(shape_.n_ubatch));
  if (uint64_t{pos0} + n > shape_.n_ctx)
    return refused("ubatch ends at " + std::to_string(uint64_t{pos0} + n) + ", past n_ctx " + std::to_string(shape_.n_ctx));
  const uint32_t L = shape_.n_layers;
  const size_t per_layer = static_cast<size_t>(shape_.n_head_kv) * cfg_.head_dim;
  const size_t jobs = static_cast<size_t>(n) * L;
  entries_.resize(jobs);
  std::vector<Status> errors(jobs);
  // Small ubatches (decode steps) stay on one thread: a parallel region costs more than it saves.
  parallel_for(static_cast<long>(jobs), jobs >= 16 ? n_threads_ : 1, [&](long j) {
    const uint32_t i = static_cast<uint32_t>(j / L), l = static_cast<uint32_t>(j % L);
    const size_t off = (static_cast<size_t>(i) * L + l) * per_layer;
    entries_[j].resize(layers_[l].entry_bytes(pos0 + i));
    errors[j] = layers_[l].encode_entry(pos0 + i, k + off, v + off, entries_[j].data());
  });
  for (size_t j = 0; j < jobs; ++j)
    if (!errors[j].ok()) {
      Status st = errors[j];
      st.detail = "layer " + std::to_string(j % L) + (st.detail.empty() ? "" : ": " + st.detail);
      return st;
    }
  for (size_t j = 0; j < jobs; ++j) layers_[j % L].write_entry(pos0 + static_cast<uint32_t>(j / L), entries_[j].data());
  if (n && pos0 + n > n_) n_ = pos0 + n;
  return Status{};
}

Status SequenceCache::idle(uint32_t keep_recent, uint32_t* groups_sealed) {
  if (!status_.ok()) return status_;
  policy_.idle(n_, keep_recent);
  return seal_pending(groups_sealed);
}

double record_bits_per_value(const RecordLayout& l) {
  return 8.0 * l.bytes / (2.0 * l.head_dim * l.group);
}

double staging_bits_per_value(StagingType t, uint32_t head_dim) {
  return 8.0 * staging_row_bytes(t, head_dim) / head_dim;
}

namespace {
uint64_t sink_entry_bytes(const CodecConfig& c) {
  return c.sink_type == SinkType::f16 ? 4ull * c.head_dim : 2ull * staging_row_bytes(c.staging, c.head_dim);
}
}  // namespace

RegionBits occupied_bits(const CodecConfig& c, uint32_t B, uint32_t N) {
  RegionBits r;
  const uint64_t vals = 2ull * c.head_dim;  // K and V values of one position
  const uint32_t n_sink = N < c.sink ? N : c.sink;
  r.sink_bytes = n_sink * sink_entry_bytes(c);
  r.sink_values = n_sink * vals;
  const uint32_t groups = B > c.sink ? (B - c.sink) / c.group : 0;
  r.body_bytes = static_cast<uint64_t>(groups) * c.layout().bytes;
  r.body_values = static_cast<uint64_t>(groups) * c.group * vals;
  const uint32_t ring_from = B > c.sink ? B : c.sink;
  const uint32_t n_ring = N > ring_from ? N - ring_from : 0;
  r.ring_bytes = n_ring * 2ull * staging_row_bytes(c.staging, c.head_dim);
  r.ring_values = n_ring * vals;
  r.values = static_cast<uint64_t>(N) * vals;
  return r;
}

RegionBits allocated_bits(const CodecConfig& c, uint32_t n_ctx, uint32_t cap, uint32_t B, uint32_t N) {
  RegionBits r = occupied_bits(c, B, N);  // keeps the occupied value counts per region
  const uint32_t n_groups = n_ctx > c.sink ? (n_ctx - c.sink + c.group - 1) / c.group : 1;
  r.sink_bytes = c.sink * sink_entry_bytes(c);
  r.body_bytes = static_cast<uint64_t>(n_groups) * c.layout().bytes;
  r.ring_bytes = static_cast<uint64_t>(cap) * 2ull * staging_row_bytes(c.staging, c.head_dim);
  return r;
}

double note_effective_bits(uint32_t N, uint32_t sink, uint32_t t, double body, double staging) {
  if (N == 0) return 0.0;
  const double n_body = static_cast<double>(N) - sink - t;
  return (n_body * body + t * staging + sink * (staging + 16.0)) / N;
}

}  // namespace sjkv
