#include "sjkv/io/encode.h"

#include <omp.h>

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "sjkv/cache.h"
#include "sjkv/cache_view.h"
#include "sjkv/hadamard.h"
#include "sjkv/trellis.h"

namespace sjkv {

namespace {

// Rows of positions [p0, p0+n) of every layer as floats [n][L][H][D], rotated when needed.
void gather_rows(const Capture& cap, uint32_t p0, uint32_t n, bool rotate, uint32_t rot, int threads,
                 std::vector<float>& k, std::vector<float>& v) {
  const uint32_t L = static_cast<uint32_t>(cap.layers.size()), H = cap.kv_heads, D = cap.head_dim;
  const size_t row = static_cast<size_t>(H) * D;
  k.resize(static_cast<size_t>(n) * L * row);
  v.resize(k.size());
#pragma omp parallel for schedule(static) num_threads(threads) if (static_cast<size_t>(n) * L >= 16)
  for (long long j = 0; j < static_cast<long long>(n) * L; ++j) {
    const uint32_t i = static_cast<uint32_t>(j / L), l = static_cast<uint32_t>(j % L);
    const uint16_t* ks = cap.layers[l].k.data() + static_cast<size_t>(p0 + i) * row;
    const uint16_t* vs = cap.layers[l].v.data() + static_cast<size_t>(p0 + i) * row;
    float* kd = k.data() + static_cast<size_t>(j) * row;
    float* vd = v.data() + static_cast<size_t>(j) * row;
    for (size_t e = 0; e < row; ++e) {
      kd[e] = f16_to_f32(ks[e]);
      vd[e] = f16_to_f32(vs[e]);
    }
    if (rotate) {
      hadamard_blocks(kd, static_cast<uint32_t>(row), rot);
      hadamard_blocks(vd, static_cast<uint32_t>(row), rot);
    }
  }
}

std::string position_error(const Status& st, const Capture& cap) {
  return "cannot stage position " + std::to_string(st.token) + ": " + st.message() +
         (cap.source.empty() ? "" : " (source " + cap.source + ")");
}

}  // namespace

Snapshot snapshot_of_cache(const SequenceCache& seq) {
  const CodecConfig& cfg = seq.config();
  const TrellisCodebooks& codebooks = seq.seal_options().codebooks;
  Snapshot s;
  s.config = cfg;
  s.config.rotation_block = cfg.rotation();
  s.kv_heads = seq.shape().n_head_kv;
  s.n_ubatch = seq.shape().n_ubatch;
  s.B = seq.policy().B;
  s.B_prev = seq.policy().B_prev;
  s.N = seq.n_stored();
  s.draining = seq.policy().draining;
  if (s.config.resolved_body() == Body::trellis) {
    const RecordLayout l = s.config.layout();
    const uint16_t* k = codebook_table(codebooks, Side::k, l.bits_k);
    const uint16_t* v = codebook_table(codebooks, Side::v, l.bits_v);
    s.codebook_k.assign(k, k + (size_t{1} << (6 + l.bits_k)));
    s.codebook_v.assign(v, v + (size_t{1} << (6 + l.bits_v)));
    s.codebook_id = codebook_id(l, codebooks);
  }
  const uint32_t H = s.kv_heads, D = cfg.head_dim;
  const uint32_t rb = staging_row_bytes(cfg.staging, D);
  for (uint32_t l = 0; l < seq.shape().n_layers; ++l) {
    const LayerCache& lc = seq.layer(l);
    SnapshotLayer sl;
    sl.layer_id = l;
    const uint32_t ns = s.n_sink();
    if (cfg.sink_type == SinkType::f16) {
      sl.sink_k.resize(static_cast<size_t>(ns) * H * D);
      sl.sink_v.resize(sl.sink_k.size());
      for (uint32_t p = 0; p < ns; ++p)
        for (uint32_t h = 0; h < H; ++h) {
          const uint16_t* e = lc.sink_f16().data() + (static_cast<size_t>(p) * H + h) * 2 * D;
          std::memcpy(&sl.sink_k[(static_cast<size_t>(p) * H + h) * D], e, 2 * D);
          std::memcpy(&sl.sink_v[(static_cast<size_t>(p) * H + h) * D], e + D, 2 * D);
        }
    } else {
      sl.sink_k_staged.resize(static_cast<size_t>(ns) * H * rb);
      sl.sink_v_staged.resize(sl.sink_k_staged.size());
      for (uint32_t p = 0; p < ns; ++p)
        for (uint32_t h = 0; h < H; ++h) {
          const uint8_t* e = lc.sink_staged().data() + (static_cast<size_t>(p) * H + h) * 2 * rb;
          std::memcpy(&sl.sink_k_staged[(static_cast<size_t>(p) * H + h) * rb], e, rb);
          std::memcpy(&sl.sink_v_staged[(static_cast<size_t>(p) * H + h) * rb], e + rb, rb);
        }
    }
    const size_t body_bytes = static_cast<size_t>(s.n_groups()) * H * lc.layout().bytes;
    sl.body.assign(lc.body().begin(), lc.body().begin() + static_cast<std::ptrdiff_t>(body_bytes));
    const uint32_t nr = s.n_ring(), from = s.ring_from();
    sl.ring_k.resize(static_cast<size_t>(nr) * H * rb);
    sl.ring_v.resize(sl.ring_k.size());
    for (uint32_t i = 0; i < nr; ++i) {
      const uint32_t slot = ring_slot(from + i, cfg.sink, lc.cap());
      for (uint32_t h = 0; h < H; ++h) {
        const uint8_t* e = lc.ring().data() + (static_cast<size_t>(slot) * H + h) * 2 * rb;
        std::memcpy(&sl.ring_k[(static_cast<size_t>(i) * H + h) * rb], e, rb);
        std::memcpy(&sl.ring_v[(static_cast<size_t>(i) * H + h) * rb], e + rb, rb);
      }
    }
    s.layers.push_back(std::move(sl));
  }
  return s;
}

Snapshot encode_capture(const Capture& cap, const EncodeOptions& opt) {
  cap.check_consistent();
  CodecConfig cfg = opt.config;
  cfg.head_dim = cap.head_dim;
  const Unsupported why = can_implement(cfg);
  if (why != Unsupported::none) throw std::invalid_argument(std::string("unsupported configuration: ") + describe(why));
  if (opt.n_ubatch == 0) throw std::invalid_argument("ubatch must be at least 1");
  const bool rotate = !(cap.rotated || opt.assume_rotated);
  const int threads = opt.threads > 0 ? opt.threads : omp_get_max_threads();

  CacheShape shape;
  shape.n_layers = static_cast<uint32_t>(cap.layers.size());
  shape.n_head_kv = cap.kv_heads;
  shape.n_ctx = cap.tokens + 1;
  shape.n_ubatch = opt.n_ubatch;
  SealOptions so;
  so.iters = cfg.iters;
  so.balance = cfg.balance;
  so.codebooks = opt.codebooks;
  SequenceCache seq(cfg, shape, so, opt.path, threads);
  if (!seq.status().ok()) throw std::invalid_argument(seq.status().message());
  seq.set_sealer(opt.sealer);

  std::vector<float> k, v;
  const uint32_t N = cap.tokens;
  for (uint32_t p0 = 0; p0 < N; p0 += opt.n_ubatch) {
    const uint32_t n = std::min(opt.n_ubatch, N - p0);
    Status st = seq.begin_ubatch(p0, n);
    if (!st.ok()) throw std::invalid_argument("sealing before position " + std::to_string(p0) + ": " + st.message());
    gather_rows(cap, p0, n, rotate, cfg.rotation(), threads, k, v);
    st = seq.store_ubatch(p0, n, k.data(), v.data());
    if (!st.ok()) throw std::invalid_argument(position_error(st, cap));
    if (opt.progress) opt.progress(p0 + n, N);
  }
  // The step an engine takes before its next (single-token) ubatch at position N.
  Status st = seq.begin_ubatch(N, 1);
  if (!st.ok()) throw std::invalid_argument("final policy step: " + st.message());

  Snapshot s = snapshot_of_cache(seq);
  if (!rotate) s.config.rotation_block = cap.rotation_block ? cap.rotation_block : cfg.rotation();
  s.model = cap.model;
  s.source = cap.source;
  s.token_ids = cap.token_ids;
  for (uint32_t l = 0; l < shape.n_layers; ++l) s.layers[l].layer_id = cap.layers[l].layer_id;
  return s;
}

namespace {

TrellisCodebooks snapshot_codebooks(const Snapshot& s) {
  TrellisCodebooks cb;
  if (!s.codebook_k.empty()) cb.k = s.codebook_k.data();
  if (!s.codebook_v.empty()) cb.v = s.codebook_v.data();
  return cb;
}

// Decoded K and V rows of one position and head of a snapshot layer, rotated basis.
void decode_position(const Snapshot& s, const SnapshotLayer& sl, uint32_t p, uint32_t h, float* k, float* v) {
  const CodecConfig& c = s.config;
  const uint32_t H = s.kv_heads, D = c.head_dim;
  const uint32_t rb = staging_row_bytes(c.staging, D);
  const RowPosition rp = row_position(p, c.sink, s.B, c.group);
  if (rp.region == RowPosition::sink) {
    const size_t i = static_cast<size_t>(p) * H + h;
    if (c.sink_type == SinkType::f16) {
      for (uint32_t d = 0; d < D; ++d) {
        k[d] = f16_to_f32(sl.sink_k[i * D + d]);
        v[d] = f16_to_f32(sl.sink_v[i * D + d]);
      }
    } else {
      staging_decode_row(c.staging, &sl.sink_k_staged[i * rb], D, k);
      staging_decode_row(c.staging, &sl.sink_v_staged[i * rb], D, v);
    }
    return;
  }
  if (rp.region == RowPosition::body) {
    const RecordLayout l = c.layout();
    const uint8_t* rec = &sl.body[(static_cast<size_t>(rp.g) * H + h) * l.bytes];
    const TrellisCodebooks cb = snapshot_codebooks(s);
    decode_k_row(l, rec, rp.t, k, cb);
    decode_v_row(l, rec, rp.t, v, cb);
    return;
  }
  // The snapshot keeps the tail in position order from ring_from(), not in ring slots.
  const size_t i = static_cast<size_t>(p - s.ring_from()) * H + h;
  staging_decode_row(c.staging, &sl.ring_k[i * rb], D, k);
  staging_decode_row(c.staging, &sl.ring_v[i * rb], D, v);
}

}  // namespace

Capture decode_snapshot(const Snapshot& s, bool keep_rotated) {
  Capture cap;
  cap.model = s.model;
  cap.source = "sjkv-snapshot decode (" + s.config.name() + ")";
  cap.head_dim = s.config.head_dim;
  cap.kv_heads = s.kv_heads;
  cap.tokens = s.N;
  cap.rotated = keep_rotated;
  cap.rotation_block = keep_rotated ? s.config.rotation() : 0;
  cap.token_ids = s.token_ids;
  const uint32_t H = s.kv_heads, D = s.config.head_dim;
  for (const SnapshotLayer& sl : s.layers) {
    CaptureLayer cl;
    cl.layer_id = sl.layer_id;
    cl.k.resize(static_cast<size_t>(s.N) * H * D);
    cl.v.resize(cl.k.size());
    // The first (position, head) whose decoded values do not fit fp16: the capture could not
    // hold them (for instance a rotated-basis input whose model-basis rows overflow).
    long long bad = -1;
#pragma omp parallel
    {
      std::vector<float> k(D), v(D);
#pragma omp for schedule(static)
      for (long long j = 0; j < static_cast<long long>(s.N) * H; ++j) {
        const uint32_t p = static_cast<uint32_t>(j / H), h = static_cast<uint32_t>(j % H);
        decode_position(s, sl, p, h, k.data(), v.data());
        if (!keep_rotated) {
          hadamard_blocks(k.data(), D, s.config.rotation());
          hadamard_blocks(v.data(), D, s.config.rotation());
        }
        bool fits = true;
        for (uint32_t d = 0; d < D; ++d) {
          const uint16_t hk = f32_to_f16(k[d]), hv = f32_to_f16(v[d]);
          fits = fits && (hk & 0x7c00u) != 0x7c00u && (hv & 0x7c00u) != 0x7c00u;
          cl.k[static_cast<size_t>(j) * D + d] = hk;
          cl.v[static_cast<size_t>(j) * D + d] = hv;
        }
        if (!fits) {
#pragma omp critical(sjkv_decode_bad)
          if (bad < 0 || j < bad) bad = j;
        }
      }
    }
    if (bad >= 0)
      throw std::invalid_argument("layer " + std::to_string(sl.layer_id) + " position " + std::to_string(bad / H) +
                                  " head " + std::to_string(bad % H) + " decodes to values that do not fit fp16 in the " +
                                  (keep_rotated ? "rotated" : "model") + " basis" +
                                  (keep_rotated ? std::string() : " (decode --rotated keeps the stored basis)"));
    cap.layers.push_back(std::move(cl));
  }
  return cap;
}

namespace {

struct Accum {
  uint64_t n = 0;
  double err2 = 0, ref2 = 0, dec2 = 0, dot = 0, max_abs = 0;
  void add(double ref, double dec) {
    const double e = dec - ref;
    ++n;
    err2 += e * e;
    ref2 += ref * ref;
    dec2 += dec * dec;
    dot += ref * dec;
    max_abs = std::fabs(e) > max_abs ? std::fabs(e) : max_abs;
  }
  ErrorStats stats() const {
    ErrorStats s;
    s.values = n;
    if (!n) return s;
    s.mse = err2 / static_cast<double>(n);
    s.snr_db = err2 > 0 ? 10.0 * std::log10(ref2 / err2) : INFINITY;
    s.max_abs = max_abs;
    s.cosine = (ref2 > 0 && dec2 > 0) ? dot / std::sqrt(ref2 * dec2) : (ref2 == dec2 ? 1.0 : 0.0);
    return s;
  }
};

}  // namespace

std::vector<RegionComparison> compare_snapshot(const Snapshot& s, const Capture& ref) {
  ref.check_consistent();
  if (ref.head_dim != s.config.head_dim || ref.kv_heads != s.kv_heads || ref.tokens != s.N ||
      ref.layers.size() != s.layers.size())
    throw std::invalid_argument("reference capture geometry (" + std::to_string(ref.layers.size()) + " layers, " +
                                std::to_string(ref.tokens) + " tokens, " + std::to_string(ref.kv_heads) + "x" +
                                std::to_string(ref.head_dim) + ") differs from the snapshot's (" +
                                std::to_string(s.layers.size()) + " layers, " + std::to_string(s.N) + " tokens, " +
                                std::to_string(s.kv_heads) + "x" + std::to_string(s.config.head_dim) + ")");
  const uint32_t H = s.kv_heads, D = s.config.head_dim, rot = s.config.rotation();
  std::vector<RegionComparison> out;
  for (size_t li = 0; li < s.layers.size(); ++li) {
    const SnapshotLayer& sl = s.layers[li];
    const CaptureLayer& cl = ref.layers[li];
    Accum a[3];
    std::vector<float> k(D), v(D), rk(D), rv(D);
    for (uint32_t p = 0; p < s.N; ++p)
      for (uint32_t h = 0; h < H; ++h) {
        decode_position(s, sl, p, h, k.data(), v.data());
        const size_t off = (static_cast<size_t>(p) * H + h) * D;
        for (uint32_t d = 0; d < D; ++d) {
          rk[d] = f16_to_f32(cl.k[off + d]);
          rv[d] = f16_to_f32(cl.v[off + d]);
        }
        if (!ref.rotated) {
          hadamard_blocks(rk.data(), D, rot);
          hadamard_blocks(rv.data(), D, rot);
        }
        Accum& acc = a[p < s.config.sink ? 0 : p < s.B ? 1 : 2];
        for (uint32_t d = 0; d < D; ++d) {
          acc.add(rk[d], k[d]);
          acc.add(rv[d], v[d]);
        }
      }
    Accum all;
    for (const Accum& x : a) {
      all.n += x.n;
      all.err2 += x.err2;
      all.ref2 += x.ref2;
      all.dec2 += x.dec2;
      all.dot += x.dot;
      all.max_abs = std::max(all.max_abs, x.max_abs);
    }
    RegionComparison rc;
    rc.layer_id = sl.layer_id;
    rc.sink = a[0].stats();
    rc.body = a[1].stats();
    rc.ring = a[2].stats();
    rc.all = all.stats();
    out.push_back(rc);
  }
  return out;
}

std::vector<uint8_t> dump_region(const Snapshot& s, uint32_t li, Region r) {
  if (li >= s.layers.size()) throw std::invalid_argument("layer index " + std::to_string(li) + " out of range");
  const SnapshotLayer& sl = s.layers[li];
  const uint32_t H = s.kv_heads, D = s.config.head_dim;
  std::vector<uint8_t> out;
  auto interleave = [&](const uint8_t* k, const uint8_t* v, uint32_t n, size_t row) {
    out.resize(static_cast<size_t>(n) * H * 2 * row);
    for (size_t i = 0; i < static_cast<size_t>(n) * H; ++i) {
      std::memcpy(&out[i * 2 * row], k + i * row, row);
      std::memcpy(&out[i * 2 * row + row], v + i * row, row);
    }
  };
  switch (r) {
    case Region::sink:
      if (s.config.sink_type == SinkType::f16)
        interleave(reinterpret_cast<const uint8_t*>(sl.sink_k.data()), reinterpret_cast<const uint8_t*>(sl.sink_v.data()),
                   s.n_sink(), 2 * static_cast<size_t>(D));
      else
        interleave(sl.sink_k_staged.data(), sl.sink_v_staged.data(), s.n_sink(), staging_row_bytes(s.config.staging, D));
      break;
    case Region::body: out = sl.body; break;
    case Region::ring: interleave(sl.ring_k.data(), sl.ring_v.data(), s.n_ring(), staging_row_bytes(s.config.staging, D)); break;
  }
  return out;
}

}  // namespace sjkv
