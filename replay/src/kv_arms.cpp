// The cache arms of sjkv-replay (docs/REPLAY.md "Arms"), built from parsed specs (arm_spec.h):
// the row-format layers (f32/f16/bf16, ggml block formats, TurboQuant-style rows) and the SJ-KVaRN /
// KVarN layers driven by the codec's SequenceCache, all attended to by one fused pass.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "attend_tile.h"
#include "kv_arms_formats.h"
#include "sjkv/cache.h"
#include "sjkv/config.h"
#include "sjkv/decode_fast.h"
#include "sjkv/fp16.h"
#include "sjkv/hadamard.h"
#include "sjkv/parallel.h"
#include "sjkv/replay/arm_spec.h"
#include "sjkv/replay/arms.h"
#include "sjkv/replay/kv.h"
#include "sjkv/io/codebook.h"
#include "sjkv/io/file_error.h"
#include "sjkv/io/table_set.h"
#include "sjkv/io/text.h"
#include "sjkv/seal.h"

namespace sjkv {
namespace replay {
namespace {

using fmt::RowFormat;

// ---------------------------------------------------------------------------------------
// Fused attention: one pass over the stored positions in tiles. Each tile's rows are
// decoded once per KV head (in parallel, one row per thread) into a small buffer and then
// used by every query of the ubatch and every query head of the GQA group (in parallel, one
// query per thread, online softmax carried across tiles in a fixed order). The decoded cache
// never exists beyond one tile.

class RowSource {
 public:
  virtual ~RowSource() = default;
  // K and V of (h, p) as stored (rotated basis where the arm rotates).
  virtual void stored_row(uint32_t h, uint32_t p, float* k, float* v) const = 0;
  // Rows [p0, p1) of head h into k, v ([p1 - p0][D]); sources with per-record state
  // (scales shared by a group's rows) override it to do that work once per call.
  virtual void decode_rows(uint32_t h, uint32_t p0, uint32_t p1, uint32_t D, float* k, float* v) const {
    for (uint32_t p = p0; p < p1; ++p)
      stored_row(h, p, k + static_cast<size_t>(p - p0) * D, v + static_cast<size_t>(p - p0) * D);
  }
  // Where the stored rows of head h can be read in place by the tile step (f32, f16 or bf16
  // rows: their floats are the decoded ones): t's row 0 is position 0. False: decode them.
  virtual bool rows_in_place(uint32_t h, detail::TileRows& t) const {
    (void)h;
    (void)t;
    return false;
  }
  // One head's D values: a query into the stored K basis, an output back from the V basis.
  virtual void rotate_query(float* x) const = 0;
  virtual void unrotate_output(float* x) const = 0;
};

constexpr uint32_t kTile = detail::kTileRows;  // positions per tile: 2 * 256 * D floats of buffer, two barriers per tile

}  // namespace


namespace {

void check_shape(const LayerShape& s) {
  if (s.n_head == 0 || s.n_head_kv == 0 || s.n_head % s.n_head_kv != 0)
    throw std::invalid_argument("layer " + std::to_string(s.layer) + ": n_head must be a positive multiple of n_head_kv");
  if (s.head_dim == 0) throw std::invalid_argument("layer " + std::to_string(s.layer) + ": head_dim is 0");
}

void fused_attend(const LayerShape& s, const RowSource& src, uint32_t pos0, uint32_t n, const float* q, float scale,
                  float* out) {
  const uint32_t D = s.head_dim, H = s.n_head, Hkv = s.n_head_kv, gq = H / Hkv;
  const uint32_t end = pos0 + n;
  const uint32_t lo = s.window && pos0 + 1 > s.window ? pos0 + 1 - s.window : 0;
  const uint32_t nq = n * gq;
  // Queries of one KV head contiguous, [i][g][D], in the stored K basis.
  std::vector<float> qr(static_cast<size_t>(n) * H * D);
  for (uint32_t h = 0; h < Hkv; ++h)
    for (uint32_t i = 0; i < n; ++i)
      for (uint32_t g = 0; g < gq; ++g) {
        float* dst = qr.data() + ((static_cast<size_t>(h) * n + i) * gq + g) * D;
        std::copy_n(q + (static_cast<size_t>(i) * H + h * gq + g) * D, D, dst);
        src.rotate_query(dst);
      }
  std::vector<float> kt, vt;  // a decoded tile, when the rows are not read in place
  std::vector<float> acc(static_cast<size_t>(nq) * D), mx(nq), sum(nq);
  // Work items: blocks of queries (bp positions x bq query heads; their K/V rows are read once
  // for the block), as large as kMaxBlock allows while every thread still gets an item
  // (decode: a position's heads split). A query's floats do not depend on the block
  // (attend_tile.h).
  const uint32_t threads = static_cast<uint32_t>(std::max(1, omp_get_max_threads()));
  const uint32_t bq = std::max(1u, std::min({gq, detail::kMaxBlock, nq / threads}));
  const uint32_t bp = bq < gq ? 1 : std::max(1u, std::min(detail::kMaxBlock / gq, (n + threads - 1) / threads));
  const uint32_t hblocks = (gq + bq - 1) / bq, pblocks = (n + bp - 1) / bp;
  const int items = static_cast<int>(pblocks * hblocks);
  for (uint32_t h = 0; h < Hkv; ++h) {
    std::fill(acc.begin(), acc.end(), 0.0f);
    std::fill(mx.begin(), mx.end(), -std::numeric_limits<float>::infinity());
    std::fill(sum.begin(), sum.end(), 0.0f);
    const float* qh = qr.data() + static_cast<size_t>(h) * nq * D;
    // Item `it` of the tile [t0, t1), whose rows are `rows`.
    auto item = [&](int it, uint32_t t0, uint32_t t1, const detail::TileRows& rows, float* scratch) {
      const uint32_t i0 = static_cast<uint32_t>(it) / hblocks * bp, i1 = std::min(n, i0 + bp);
      const uint32_t g0 = static_cast<uint32_t>(it) % hblocks * bq, g1 = std::min(gq, g0 + bq);
      // The block's positions with rows in this tile: a contiguous run (earlier positions
      // end before it, later ones' windows start after it).
      auto range = [&](uint32_t i, uint32_t& a, uint32_t& b) {
        const uint32_t qpos = pos0 + i;
        a = t0;
        b = std::min(t1, qpos + 1);
        if (s.window && qpos + 1 > s.window) a = std::max(a, qpos + 1 - s.window);
        return a < b;
      };
      uint32_t first = i1, last = i0, a, b;
      for (uint32_t i = i0; i < i1; ++i)
        if (range(i, a, b)) {
          first = std::min(first, i);
          last = i + 1;
        }
      if (first >= last) return;
      detail::TileBlock blk;
      const size_t qi0 = static_cast<size_t>(first) * gq + g0;
      uint32_t j = 0;
      for (uint32_t i = first; i < last; ++i) {
        if (!range(i, a, b)) throw std::logic_error("fused_attend: a block's positions are not contiguous in a tile");
        for (uint32_t g = g0; g < g1; ++g, ++j) {
          blk.lo[j] = a - t0;
          blk.hi[j] = b - t0;
        }
      }
      blk.nq = j;
      blk.softcap = s.softcap;
      blk.q = qh + qi0 * D;
      blk.acc = acc.data() + qi0 * D;
      blk.m = mx.data() + qi0;
      blk.s = sum.data() + qi0;
      detail::tile_block_update(blk, rows, D, scale, scratch);
    };
    // Tiles on absolute multiples of kTile: the same positions meet in the same order
    // whatever the ubatch split, so a row-format arm gives the same bytes for any split.
    const uint32_t first_tile = lo / kTile * kTile;
    detail::TileRows stored;
    if (n == 1 && src.rows_in_place(h, stored)) {
      // Decode over rows read in place: no tile buffer, so each item walks every tile on its
      // own (a query still meets the tiles in order, in the same blocks: the same floats).
      parallel_for(items, static_cast<int>(threads), [&](long it) {
        thread_local std::vector<float> scratch(static_cast<size_t>(detail::kMaxBlock) * kTile);
        for (uint32_t t0 = first_tile; t0 < end; t0 += kTile) {
          detail::TileRows rows = stored;
          rows.k += t0 * rows.stride;
          rows.v += t0 * rows.stride;
          item(static_cast<int>(it), t0, std::min(end, t0 + kTile), rows, scratch.data());
        }
      });
    } else {
      kt.resize(static_cast<size_t>(kTile) * D);
      vt.resize(static_cast<size_t>(kTile) * D);
      const detail::TileRows rows = detail::TileRows::f32(kt.data(), vt.data(), D);
      for (uint32_t t0 = first_tile; t0 < end; t0 += kTile) {
        const uint32_t t1 = std::min(end, t0 + kTile);
        // Contiguous row chunks, one per thread, so record state is set up once per chunk;
        // then the items over the decoded tile. Each to whichever thread is free.
        const uint32_t r0 = std::max(t0, lo) - t0, nrows = t1 - t0 - r0;
        parallel_for(threads, static_cast<int>(threads), [&](long c) {
          const uint32_t id = static_cast<uint32_t>(c);
          const uint32_t a = r0 + nrows * id / threads, b = r0 + nrows * (id + 1) / threads;
          if (a < b)
            src.decode_rows(h, t0 + a, t0 + b, D, kt.data() + static_cast<size_t>(a) * D,
                            vt.data() + static_cast<size_t>(a) * D);
        });
        parallel_for(items, static_cast<int>(threads), [&](long it) {
          thread_local std::vector<float> scratch(static_cast<size_t>(detail::kMaxBlock) * kTile);
          item(static_cast<int>(it), t0, t1, rows, scratch.data());
        });
      }
    }
    for (uint32_t qi = 0; qi < nq; ++qi) {
      const uint32_t i = qi / gq, head = h * gq + qi % gq;
      float* o = out + (static_cast<size_t>(i) * H + head) * D;
      const float inv = s.sink_logits.empty() ? (sum[qi] > 0.0f ? 1.0f / sum[qi] : 0.0f)
                                              : detail::sink_normaliser(mx[qi], sum[qi], s.sink_logits[head]);
      for (uint32_t d = 0; d < D; ++d) o[d] = acc[static_cast<size_t>(qi) * D + d] * inv;
      src.unrotate_output(o);
    }
  }
}

// ---------------------------------------------------------------------------------------
// Row-format layers: every position's K and V rows encoded on their own.

// llama.cpp's K rotation: the largest power of two >= 64 dividing D (its V rotation is 64),
// only when D % 64 == 0 (src/llama-kv-cache.cpp, build_input_k_rot / build_input_v_rot).
uint32_t llama_k_rotation(uint32_t d) {
  if (d % 64 != 0) return 0;
  uint32_t r = 64;
  while (d % (2 * r) == 0) r *= 2;
  return r;
}

// Rotation of one head's row: none, blocks of the orthonormal Hadamard transform, or the
// TurboQuant fork's signed transform on 128-value groups.
struct Rotation {
  uint32_t block = 0;   // 0: none
  bool turbo = false;   // signed (s2 .* H(s1 .* x)); block is 128
  void forward(float* x, uint32_t d) const {
    if (!block) return;
    if (!turbo) return hadamard_blocks(x, d, block);
    for (uint32_t o = 0; o < d; o += 128) {
      fmt::turbo_signs(x + o, fmt::kTurboSigns1);
      hadamard_inplace(x + o, 128);
      fmt::turbo_signs(x + o, fmt::kTurboSigns2);
    }
  }
  void inverse(float* x, uint32_t d) const {
    if (!block) return;
    if (!turbo) return hadamard_blocks(x, d, block);
    for (uint32_t o = 0; o < d; o += 128) {
      fmt::turbo_signs(x + o, fmt::kTurboSigns2);
      hadamard_inplace(x + o, 128);
      fmt::turbo_signs(x + o, fmt::kTurboSigns1);
    }
  }
};

class RowLayer final : public InspectableKv, private RowSource {
 public:
  RowLayer(const LayerShape& s, RowFormat f, Rotation rot_k, Rotation rot_v, std::string name)
      : s_(s), f_(f), rot_k_(rot_k), rot_v_(rot_v), name_(std::move(name)), rb_(fmt::row_bytes(f, s.head_dim)) {
    check_shape(s);
    if (s.head_dim % fmt::block_values(f) != 0)
      throw std::invalid_argument(name_ + ": head_dim " + std::to_string(s.head_dim) + " is not a multiple of the " +
                                  std::to_string(fmt::block_values(f)) + "-value block");
    if ((rot_k.block && s.head_dim % rot_k.block) || (rot_v.block && s.head_dim % rot_v.block))
      throw std::invalid_argument(name_ + ": head_dim " + std::to_string(s.head_dim) + " does not take the rotation");
    const size_t reserve = static_cast<size_t>(s.n_ctx) * s.n_head_kv * rb_;
    k_.reserve(reserve);
    v_.reserve(reserve);
  }

  void begin_ubatch(uint32_t, uint32_t) override {}

  void store(uint32_t pos0, uint32_t n, const float* k, const float* v) override {
    if (pos0 != n_) throw std::runtime_error(name_ + ": store at " + std::to_string(pos0) + ", expected " + std::to_string(n_));
    const uint32_t D = s_.head_dim, Hkv = s_.n_head_kv;
    const size_t rows = static_cast<size_t>(n) * Hkv;
    std::vector<uint8_t> nk(rows * rb_), nv(rows * rb_);
    std::vector<float> tmp(D);
    for (size_t r = 0; r < rows; ++r) {
      for (int side = 0; side < 2; ++side) {
        const float* x = (side == 0 ? k : v) + r * D;
        std::copy(x, x + D, tmp.begin());
        (side == 0 ? rot_k_ : rot_v_).forward(tmp.data(), D);
        if (!fmt::encode_row(f_, tmp.data(), D, (side == 0 ? nk : nv).data() + r * rb_))
          throw std::runtime_error(name_ + ": non-finite " + (side == 0 ? "K" : "V") + " value at position " +
                                   std::to_string(pos0 + r / Hkv) + ", head " + std::to_string(r % Hkv));
      }
    }
    k_.insert(k_.end(), nk.begin(), nk.end());
    v_.insert(v_.end(), nv.begin(), nv.end());
    n_ = pos0 + n;
  }

  void attend(uint32_t pos0, uint32_t n, const float* q, float scale, float* out) override {
    if (pos0 + n > n_) throw std::runtime_error(name_ + ": attend past the stored positions");
    fused_attend(s_, *this, pos0, n, q, scale, out);
  }

  LayerBits bits() const override { return bits_at(n_); }
  LayerBits bits_at(uint32_t n) const override {
    LayerBits b;
    if (n == 0) return b;
    b.occupied = fmt::bits_per_value(f_);
    b.allocated = s_.n_ctx > n ? b.occupied * s_.n_ctx / n : b.occupied;
    return b;
  }
  uint32_t decode_run(uint32_t, uint32_t limit) const override { return limit; }
  void idle(uint32_t) override {}

  uint32_t n_stored() const override { return n_; }
  void decode_row(uint32_t h, uint32_t p, float* k, float* v) const override {
    stored_row(h, p, k, v);
    rot_k_.inverse(k, s_.head_dim);
    rot_v_.inverse(v, s_.head_dim);
  }
  void stored_rows(uint32_t h, uint32_t p0, uint32_t p1, float* k, float* v) const override {
    decode_rows(h, p0, p1, s_.head_dim, k, v);
  }
  uint32_t k_rotation() const override { return rot_k_.block; }
  uint32_t v_rotation() const override { return rot_v_.block; }
  std::string storage_name() const override { return name_; }

 private:
  void rotate_query(float* x) const override { rot_k_.forward(x, s_.head_dim); }
  void unrotate_output(float* x) const override { rot_v_.inverse(x, s_.head_dim); }
  bool rows_in_place(uint32_t h, detail::TileRows& t) const override {
    const uint32_t type = f_ == RowFormat::f16 ? kGgmlF16 : f_ == RowFormat::bf16 ? kGgmlBF16
                        : f_ == RowFormat::f32 ? kGgmlF32 : ~0u;
    if (type == ~0u) return false;
    t = {type, k_.data() + static_cast<size_t>(h) * rb_, v_.data() + static_cast<size_t>(h) * rb_,
         static_cast<size_t>(s_.n_head_kv) * rb_};
    return true;
  }
  void stored_row(uint32_t h, uint32_t p, float* k, float* v) const override {
    const size_t off = (static_cast<size_t>(p) * s_.n_head_kv + h) * rb_;
    fmt::decode_row(f_, k_.data() + off, s_.head_dim, k);
    fmt::decode_row(f_, v_.data() + off, s_.head_dim, v);
  }

  LayerShape s_;
  RowFormat f_;
  Rotation rot_k_, rot_v_;
  std::string name_;
  uint32_t rb_;
  uint32_t n_ = 0;
  std::vector<uint8_t> k_, v_;  // [position][head][row bytes]
};

// ---------------------------------------------------------------------------------------
// SJ-KVaRN / KVarN layers: the codec's SequenceCache (one layer), journal policy at every
// ubatch boundary, rows rotated by the codec's Hadamard before they are staged.

// Full-attention layers seen by one arm, so that "tier=edge" can tell the first and last
// compressed layers apart; make_layer is called for every layer before the first ubatch.
struct EdgeRegistry {
  std::mutex mu;
  bool any = false, decided = false;
  uint32_t first = 0, last = 0;
  void add(uint32_t l) {
    std::lock_guard<std::mutex> g(mu);
    // A new first or last layer after some layer chose its tier would have changed that
    // choice (layers of a second sequence from the same arm are fine).
    if (decided && (l < first || l > last))
      throw std::logic_error("tier=edge: layer " + std::to_string(l) + " made after the first ubatch");
    if (!any) first = last = l;
    first = std::min(first, l);
    last = std::max(last, l);
    any = true;
  }
  bool is_edge(uint32_t l) {
    std::lock_guard<std::mutex> g(mu);
    decided = true;
    return l == first || l == last;
  }
};

// Trellis tables an arm seals with instead of the built-in reference ones ("cb=FILE[+FILE]"):
// raw table pairs (docs/SPEC.md §12.2), one per width.
struct ArmCodebooks : CodebookPairs {
  std::string named;  // cb=reference or cb=SET (a shipped table set), else empty
};

// Arm options beyond the codec configuration (docs/REPLAY.md "Arms"): the note's tiering, trained
// tables, and the study's attribution and extension switches (never the format's defaults).
struct SjOptions {
  bool tier_edge = false;                   // tier=edge
  std::vector<uint32_t> wide;               // wide=A+B: these layers at 4/4 scalar (the tier width)
  bool is_wide(uint32_t l) const { return std::find(wide.begin(), wide.end(), l) != wide.end(); }
  std::shared_ptr<const ArmCodebooks> cb;   // cb=FILE[+FILE]
  bool kmean = false;                       // kmean=sink: one K mean per head, subtracted from every key
  char exact = 0;                           // exact=k|v: that side served as f16 rows (attribution)
  std::vector<uint32_t> layers;             // layers=A+B: only these layers compressed (attribution)
  SealerSource sealers;                     // make_arm's: one sealer per layer cache (empty: the CPU)
  std::string suffix() const {
    std::string o;
    if (kmean) o += ":kmean=sink";
    if (exact) o += std::string(":exact=") + exact;
    return o;
  }
};

class SjLayer final : public InspectableKv, private RowSource {
 public:
  SjLayer(const LayerShape& s, const CodecConfig& cfg, const SjOptions& opt, std::shared_ptr<EdgeRegistry> reg)
      : s_(s), cfg_(cfg), reg_(std::move(reg)), opt_(opt) {
    check_shape(s);
    cfg_.head_dim = s.head_dim;
    if (s.n_ctx == 0) throw std::invalid_argument("layer " + std::to_string(s.layer) + ": SJ arms need n_ctx > 0");
    validate(cfg_);
    if (opt_.tier_edge || opt_.is_wide(s.layer)) validate(edge_config(cfg_));
  }

  static CodecConfig edge_config(CodecConfig c) {  // the note's tiering: edge layers at 4/4 scalar
    c.bits_k = 4;
    c.bits_v = 4;
    c.body = Body::scalar;
    c.trellis_axis = TrellisAxis::token;
    return c;
  }

  static void validate(const CodecConfig& c) {
    const Unsupported why = can_implement(c);
    if (why != Unsupported::none) throw std::invalid_argument(c.name() + ": " + describe(why));
  }

  void begin_ubatch(uint32_t pos0, uint32_t n) override {
    if (!cache_) {
      if ((opt_.tier_edge && reg_->is_edge(s_.layer)) || opt_.is_wide(s_.layer)) cfg_ = edge_config(cfg_);
      CacheShape sh;
      sh.n_layers = 1;
      sh.n_head_kv = s_.n_head_kv;
      sh.n_ctx = s_.n_ctx;
      sh.n_ubatch = std::max(s_.n_ubatch, 1u);
      SealOptions so;
      if (opt_.cb && cfg_.body == Body::trellis) so.codebooks = opt_.cb->tables(cfg_.bits_k, cfg_.bits_v);
      cache_ = std::make_unique<SequenceCache>(cfg_, sh, so);
      if (!cache_->status().ok()) throw std::invalid_argument(cfg_.name() + ": " + cache_->status().message());
      if (opt_.sealers) cache_->set_sealer(opt_.sealers());
      rows_ = std::make_unique<RecordRows>(cfg_.layout());
    }
    if (pos0 + n > s_.n_ctx)
      throw std::runtime_error(cfg_.name() + ": ubatch ends at " + std::to_string(pos0 + n) + " past n_ctx " +
                               std::to_string(s_.n_ctx));
    // The ring is sized for two ubatches of n_ubatch (policy.h ring_capacity); a larger one
    // would overwrite rows not yet sealed.
    if (n > std::max(s_.n_ubatch, 1u))
      throw std::runtime_error(cfg_.name() + ": ubatch of " + std::to_string(n) + " exceeds n_ubatch " +
                               std::to_string(s_.n_ubatch));
    const Status st = cache_->begin_ubatch(pos0, n);
    if (!st.ok()) throw std::runtime_error(cfg_.name() + ": seal failed: " + st.message());
  }

  void store(uint32_t pos0, uint32_t n, const float* k, const float* v) override {
    if (!cache_) throw std::runtime_error("store before begin_ubatch");
    const uint32_t D = s_.head_dim, rot = cfg_.rotation(), Hkv = s_.n_head_kv;
    const size_t values = static_cast<size_t>(n) * Hkv * D;
    std::vector<float> kr(k, k + values), vr(v, v + values);
    if (opt_.kmean) {
      // The mean of the first ubatch's first `sink` keys (all of them when it is shorter), per
      // head, rounded to f16 (what an engine would store): a constant shift of every key, which
      // softmax does not see.
      if (kmean_.empty()) {
        if (pos0 != 0) throw std::logic_error("kmean: the first store is not at position 0");
        const uint32_t m = std::max(1u, std::min(n, cfg_.sink));
        kmean_.assign(static_cast<size_t>(Hkv) * D, 0.0f);
        for (uint32_t h = 0; h < Hkv; ++h)
          for (uint32_t d = 0; d < D; ++d) {
            double acc = 0;
            for (uint32_t i = 0; i < m; ++i) acc += k[(static_cast<size_t>(i) * Hkv + h) * D + d];
            kmean_[static_cast<size_t>(h) * D + d] = f16_to_f32(f32_to_f16(static_cast<float>(acc / m)));
          }
      }
      for (size_t r = 0; r < static_cast<size_t>(n) * Hkv; ++r)
        for (uint32_t d = 0; d < D; ++d) kr[r * D + d] -= kmean_[(r % Hkv) * D + d];
    }
    for (size_t o = 0; o < values; o += D) {
      hadamard_blocks(kr.data() + o, D, rot);
      hadamard_blocks(vr.data() + o, D, rot);
    }
    if (opt_.exact) {
      if (static_cast<size_t>(pos0) * Hkv * D != exact_.size()) throw std::logic_error("exact: positions out of order");
      const std::vector<float>& side = opt_.exact == 'k' ? kr : vr;
      for (float x : side) exact_.push_back(f32_to_f16(x));
    }
    const Status st = cache_->store_ubatch(pos0, n, kr.data(), vr.data());
    if (!st.ok()) throw std::runtime_error(cfg_.name() + ": store refused: " + st.message());
  }

  void attend(uint32_t pos0, uint32_t n, const float* q, float scale, float* out) override {
    if (!cache_ || pos0 + n > cache_->n_stored()) throw std::runtime_error(cfg_.name() + ": attend past the stored positions");
    view_ = cache_->view(0);
    fused_attend(s_, *this, pos0, n, q, scale, out);
  }

  uint32_t decode_run(uint32_t pos0, uint32_t limit) const override {
    // Before the first ubatch the policy is at rest at B = sink: as init() leaves it.
    if (!cache_) {
      JournalPolicy p;
      p.init(cfg_.sink, cfg_.tail, cfg_.tail_max, cfg_.group, cfg_.flush_chunk);
      return p.decode_run(pos0, limit);
    }
    return cache_->policy().decode_run(pos0, limit);
  }

  void idle(uint32_t keep_recent) override {
    if (!cache_) return;  // nothing stored, nothing to seal
    const Status st = cache_->idle(keep_recent);
    if (!st.ok()) throw std::runtime_error(cfg_.name() + ": idle seal failed: " + st.message());
  }

  LayerBits bits() const override { return bits_at(cache_ ? cache_->n_stored() : 0); }
  LayerBits bits_at(uint32_t N) const override {
    LayerBits b;
    if (!cache_ || N == 0) return b;
    const uint32_t B = cache_->policy().B;
    b.occupied = occupied_bits(cfg_, B, N).total_bits();
    b.allocated = allocated_bits(cfg_, s_.n_ctx, cache_->layer(0).cap(), B, N).total_bits();
    if (opt_.kmean) {  // D fp16 values per head over the 2 D values of each of N positions
      b.occupied += 8.0 / N;
      b.allocated += 8.0 / N;
    }
    return b;
  }

  uint32_t n_stored() const override { return cache_ ? cache_->n_stored() : 0; }
  void decode_row(uint32_t h, uint32_t p, float* k, float* v) const override {
    const CacheView saved = view_;
    view_ = cache_->view(0);
    stored_row(h, p, k, v);
    patch_exact(h, p, p + 1, k, v);
    view_ = saved;
    hadamard_blocks(k, s_.head_dim, cfg_.rotation());
    hadamard_blocks(v, s_.head_dim, cfg_.rotation());
    if (opt_.kmean)
      for (uint32_t d = 0; d < s_.head_dim; ++d) k[d] += kmean_[static_cast<size_t>(h) * s_.head_dim + d];
  }
  void stored_rows(uint32_t h, uint32_t p0, uint32_t p1, float* k, float* v) const override {
    const CacheView saved = view_;
    view_ = cache_->view(0);
    decode_rows(h, p0, p1, s_.head_dim, k, v);
    view_ = saved;
  }
  uint32_t k_rotation() const override { return cfg_.rotation(); }
  uint32_t v_rotation() const override { return cfg_.rotation(); }
  const SequenceCache* codec_cache() const override { return cache_.get(); }
  std::string storage_name() const override { return cfg_.name() + opt_.suffix(); }

 private:
  void rotate_query(float* x) const override { hadamard_blocks(x, s_.head_dim, cfg_.rotation()); }
  void unrotate_output(float* x) const override { hadamard_blocks(x, s_.head_dim, cfg_.rotation()); }

  // exact=k|v: rows [p0, p1) of that side replaced by their f16 copies.
  void patch_exact(uint32_t h, uint32_t p0, uint32_t p1, float* k, float* v) const {
    if (!opt_.exact) return;
    const uint32_t D = s_.head_dim;
    float* side = opt_.exact == 'k' ? k : v;
    for (uint32_t p = p0; p < p1; ++p) {
      const uint16_t* src = exact_.data() + (static_cast<size_t>(p) * s_.n_head_kv + h) * D;
      for (uint32_t d = 0; d < D; ++d) side[static_cast<size_t>(p - p0) * D + d] = f16_to_f32(src[d]);
    }
  }

  void decode_rows(uint32_t h, uint32_t p0, uint32_t p1, uint32_t D, float* k, float* v) const override {
    decode_codec_rows(h, p0, p1, D, k, v);
    patch_exact(h, p0, p1, k, v);
  }

  // The codec's rows (resolve_rows: resolve_row's floats, record factors read once per call).
  void decode_codec_rows(uint32_t h, uint32_t p0, uint32_t p1, uint32_t, float* k, float* v) const {
    resolve_rows(view_, *rows_, h, p0, p1, k, v);
  }

  void stored_row(uint32_t h, uint32_t p, float* k, float* v) const override {
    resolve_rows(view_, *rows_, h, p, p + 1, k, v);
  }

  LayerShape s_;
  CodecConfig cfg_;
  std::shared_ptr<EdgeRegistry> reg_;
  SjOptions opt_;
  std::vector<float> kmean_;     // kmean=sink: [head][D], f16 values
  std::vector<uint16_t> exact_;  // exact=k|v: that side's rotated rows as f16, [position][head][D]
  std::unique_ptr<SequenceCache> cache_;
  std::unique_ptr<RecordRows> rows_;  // made with cache_, for its layout
  mutable CacheView view_;
};

// ---------------------------------------------------------------------------------------
// Arms, built from a parsed spec (arm_spec.h).

// A sliding-window layer of a codec arm or swa=FMT: plain rows of that format, no rotation.
std::unique_ptr<LayerKv> sliding_layer(const LayerShape& s, RowFormat f) {
  return std::make_unique<RowLayer>(s, f, Rotation{}, Rotation{}, row_format_name(f));
}

class RowArm final : public KvArm {
 public:
  RowArm(const std::string& spec, RowFormat f, bool rot, bool swa_same, const ArmSpec& a)
      : f_(f), rot_(rot), swa_same_(swa_same), swa_(a.swa), swa_given_(a.swa_given) {
    spec_ = spec;
    state_ = a.state;
  }

 private:
  std::unique_ptr<LayerKv> make_attention_layer(const LayerShape& s) const override {
    const bool plain = f_ == RowFormat::f32 || f_ == RowFormat::f16 || f_ == RowFormat::bf16;
    if (!s.full_attention && swa_given_) return sliding_layer(s, swa_);
    if (!s.full_attention && !plain && !swa_same_) return std::make_unique<RowLayer>(s, RowFormat::f16, Rotation{}, Rotation{}, "f16");
    Rotation rk, rv;
    if (rot_) {
      rk.block = llama_k_rotation(s.head_dim);
      rv.block = rk.block ? 64 : 0;
    } else if (f_ == RowFormat::turbo3 || f_ == RowFormat::turbo4) {
      rk = rv = Rotation{128, true};  // the fork's signed rotation of 128-value groups
    } else if (f_ == RowFormat::tq5_0 || f_ == RowFormat::tq6_0) {
      rk.block = rv.block = s.head_dim < 256 ? s.head_dim : 256;  // as the codec rotates its staged rows
    }
    return std::make_unique<RowLayer>(s, f_, rk, rv, spec_);
  }
  bool plain_f16_sliding_layers() const override {
    if (swa_given_) return false;
    const bool plain = f_ == RowFormat::f32 || f_ == RowFormat::f16 || f_ == RowFormat::bf16;
    return plain ? f_ == RowFormat::f16 : !swa_same_;
  }

  RowFormat f_;
  bool rot_;
  bool swa_same_;  // sliding layers in this format too (as llama.cpp's iSWA cache does)
  RowFormat swa_;  // swa=FMT: the sliding layers' format
  bool swa_given_;
};

class SjArm final : public KvArm {
 public:
  SjArm(const std::string& spec, const CodecConfig& cfg, SjOptions opt, const ArmSpec& a)
      : cfg_(cfg), opt_(std::move(opt)), reg_(std::make_shared<EdgeRegistry>()), swa_(a.swa), swa_given_(a.swa_given) {
    spec_ = spec;
    state_ = a.state;
  }
  void check_layers(const std::vector<LayerShape>& layers) const override {
    std::vector<uint32_t> full;
    for (const LayerShape& s : layers) {
      if (s.full_attention) full.push_back(s.layer);
      // A key shift moves every score of a query by q.mean, which the softmax over the stored
      // rows does not see but a learned sink logit beside them does.
      if (opt_.kmean && s.full_attention && !s.sink_logits.empty())
        throw std::invalid_argument("kmean=sink: layer " + std::to_string(s.layer) +
                                    " has learned attention sinks, whose weight a shift of the keys would change");
    }
    std::string list;
    for (uint32_t l : full) list += (list.empty() ? "" : ", ") + std::to_string(l);
    for (const auto* ids : {&opt_.layers, &opt_.wide})
      for (uint32_t id : *ids)
        if (std::find(full.begin(), full.end(), id) == full.end())
          throw std::invalid_argument(std::string(ids == &opt_.wide ? "wide=" : "layers=") + std::to_string(id) +
                                      ": not a full-attention layer of this model (those are " + list + ")");
  }
  const CodecConfig& config() const { return cfg_; }
  const SjOptions& options() const { return opt_; }
  // A token-axis trellis body: trellis tables apply. names_tables: the spec says which (cb=).
  bool takes_tables() const { return cfg_.body == Body::trellis && cfg_.trellis_axis == TrellisAxis::token; }
  bool names_tables() const { return opt_.cb != nullptr || named_reference_; }
  void set_named_reference() { named_reference_ = true; }

 private:
  std::unique_ptr<LayerKv> make_attention_layer(const LayerShape& s) const override {
    if (!s.full_attention) return sliding_layer(s, swa_given_ ? swa_ : RowFormat::f16);
    reg_->add(s.layer);
    if (!opt_.layers.empty() && std::find(opt_.layers.begin(), opt_.layers.end(), s.layer) == opt_.layers.end())
      return std::make_unique<RowLayer>(s, RowFormat::f16, Rotation{}, Rotation{}, "f16");
    return std::make_unique<SjLayer>(s, cfg_, opt_, reg_);
  }
  bool plain_f16_sliding_layers() const override { return !swa_given_; }

  CodecConfig cfg_;
  SjOptions opt_;
  bool named_reference_ = false;
  std::shared_ptr<EdgeRegistry> reg_;
  RowFormat swa_;  // swa=FMT: the sliding layers' format
  bool swa_given_;
};

// The arm a spec names. The spec string stays its name; a cb= file is read here (ArmSpec
// reads no file), and refused in the spec's one-line form.
std::unique_ptr<KvArm> build(const std::string& spec, const SealerSource& sealers) {
  const ArmSpec a = ArmSpec::parse(spec);
  if (a.family == ArmFamily::row) return std::make_unique<RowArm>(spec, a.format, a.rot, a.swa_same, a);
  const CodecConfig& c = a.config;
  SjOptions opt;
  opt.tier_edge = a.tier_edge;
  opt.wide = a.wide;
  opt.layers = a.layers;
  opt.kmean = a.kmean;
  opt.exact = a.exact;
  if (!a.cb.empty() && !a.cb_reference()) {
    auto books = std::make_shared<ArmCodebooks>();
    if (const TableSet* set = a.cb_set()) {
      books->named = a.cb;
      for (const CodebookContainer& t : set->tables) books->pairs.push_back(t.table);
    } else {
      for (const std::string& f : a.cb_files()) {
        try {
          // Any form sjkv-train writes (.sjcb, raw .bin, C header): one reader for all three.
          const CodebookContainer t = read_codebook_any(f);
          if (t.axis != CodebookAxis::token) refuse_arm(spec, f + ": a channel-axis table; cb= takes token-axis tables");
          books->pairs.push_back(t.table);
        } catch (const FileError& e) {
          refuse_arm(spec, e.what());
        }
        for (size_t i = 0; i + 1 < books->pairs.size(); ++i)
          if (books->pairs[i].bits == books->pairs.back().bits)
            refuse_arm(spec, "cb= names two " + std::to_string(books->pairs.back().bits) + "-bit tables");
      }
      if (!books->of(c.bits_k) && !books->of(c.bits_v))
        refuse_arm(spec, "cb= holds no " + std::to_string(c.bits_k) + "-bit or " + std::to_string(c.bits_v) + "-bit table");
    }
    opt.cb = books;
  }
  opt.sealers = sealers;
  auto arm = std::make_unique<SjArm>(spec, c, opt, a);
  if (a.cb_reference()) arm->set_named_reference();
  return arm;
}

}  // namespace

std::unique_ptr<KvArm> make_arm(const std::string& spec, const SealerSource& sealers) { return build(spec, sealers); }

std::string arm_engine_settings(const std::string& spec, uint32_t head_dim) {
  const std::unique_ptr<KvArm> arm = build(spec, {});
  const auto* sj = dynamic_cast<const SjArm*>(arm.get());
  if (!sj) return "";
  CodecConfig c = sj->config();
  c.head_dim = head_dim;
  std::string o = "codec configuration `" + c.name() + "`" + (head_dim ? "" : " (head size the model's)");
  if (sj->options().tier_edge) o += "; the first and last compressed layers at 4/4 scalar";
  for (uint32_t l : sj->options().wide) o += "; layer " + std::to_string(l) + " at 4/4 scalar";
  if (sj->options().kmean) o += "; keys stored less their per-head mean (sjkv extension kmean=sink)";
  if (!sj->takes_tables()) return o;
  const ArmCodebooks* cb = sj->options().cb.get();
  TrellisCodebooks t;
  if (cb) t = cb->tables(c.bits_k, c.bits_v);
  const std::string id = hex64(codebook_id(c.bits_k, c.bits_v, t));
  if (!cb) return o + "; the format's trellis tables (codebook id " + id + ")";
  if (!cb->named.empty()) {
    const TableSet* set = find_table_set(cb->named);
    std::string files;
    for (const CodebookContainer& b : set->tables)
      if (b.table.bits == c.bits_k || b.table.bits == c.bits_v)
        files += (files.empty() ? "" : " and ") + std::to_string(b.table.bits) + "-bit raw table SHA-256 " + b.raw_sha256.substr(0, 16);
    return o + "; trellis tables of the shipped set " + set->name + " (" + files + "; codebook id " + id + ")";
  }
  return o + "; trellis tables from the cb= files (codebook id " + id + ")";
}

std::string arm_identity(const std::string& spec) {
  const std::unique_ptr<KvArm> arm = build(spec, {});
  const auto* sj = dynamic_cast<const SjArm*>(arm.get());
  if (!sj) return spec;
  std::string id = (ArmSpec::parse(spec).family == ArmFamily::kvarn ? "kvarn " : "sj ") + arm_engine_settings(spec) +
                   sj->options().suffix();
  for (uint32_t l : sj->options().layers) id += ":layer" + std::to_string(l);
  if (arm->state_format() != StateFormat::f32) id += std::string(":state=") + state_format_name(arm->state_format());
  return id;
}

std::string arm_with_tables(const std::string& spec, const TableChoice& choice, const ModelGeometry* g) {
  const std::unique_ptr<KvArm> arm = build(spec, {});
  const auto* sj = dynamic_cast<const SjArm*>(arm.get());
  if (!sj || !sj->takes_tables() || sj->names_tables()) return spec;
  const CodecConfig& c = sj->config();
  const TableSet* set = choice.resolve(g, c.bits_k, c.bits_v);
  return set ? spec + ":cb=" + set->name : spec;
}

std::vector<std::string> arm_examples() {
  return {"f32",      "f16",        "bf16",       "q8_0",          "q8_0:rot",          "q4_0",
          "q4_0:rot", "q4_0:rot:swa=same", "q8_0:rot:swa=same", "q4_1",       "q4_1:rot",   "q5_0",          "q5_0:rot",          "q5_1",
          "q5_1:rot", "iq4_nl",     "iq4_nl:rot", "turbo3",        "turbo4",            "tq5_0",             "tq6_0",
          "kvarn:4/4:tail=0",       "kvarn:4/4:tail=1024",         "sj:4/4",            "sj:3/3t",
          "sj:3/2t",  "sj:2/2t",    "sj:4/2",     "sj:3/2t:axis=channel",
          "sj:3/3t:staging=q8_0:tail=512/1024",   "sj:4/4:sink=256:iters=8",          "sj:4/4:tier=edge",
          "sj:3/3t:tier=edge", "sj:4/4:kmean=sink", "sj:4/4:layers=5+11"};
}

}  // namespace replay
}  // namespace sjkv
