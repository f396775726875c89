#include "sjkv/train/train.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "sjkv/hadamard.h"
#include "sjkv/lloyd.h"
#include "sjkv/philox.h"
#include "sjkv/record.h"
#include "sjkv/seal.h"
#include "sjkv/staging.h"
#include "sjkv/trellis.h"

#if defined(SJKV_TRAIN_HAVE_CURAND)
#include <curand.h>
#endif

namespace sjkv::train {

// ---- split ---------------------------------------------------------------------------------

struct SplitDrawer::Impl {
#if defined(SJKV_TRAIN_HAVE_CURAND)
  curandGenerator_t gen = nullptr;
#else
  uint64_t seed = 0;
  uint64_t next = 0;  // the stream's next element
#endif
};

SplitDrawer::SplitDrawer(uint64_t seed, double heldout_fraction) : impl_(new Impl), frac_(heldout_fraction) {
#if defined(SJKV_TRAIN_HAVE_CURAND)
  if (curandCreateGeneratorHost(&impl_->gen, CURAND_RNG_PSEUDO_PHILOX4_32_10) != CURAND_STATUS_SUCCESS)
    throw std::runtime_error("curandCreateGeneratorHost(PHILOX4_32_10) failed");
  if (curandSetPseudoRandomGeneratorSeed(impl_->gen, seed) != CURAND_STATUS_SUCCESS)
    throw std::runtime_error("curandSetPseudoRandomGeneratorSeed failed");
#else
  impl_->seed = seed;
#endif
}

SplitDrawer::~SplitDrawer() {
#if defined(SJKV_TRAIN_HAVE_CURAND)
  if (impl_->gen) curandDestroyGenerator(impl_->gen);
#endif
}

// The stream's name, the same in both builds: the same floats.
const char* SplitDrawer::rng_name() { return "curand-host-philox4_32_10"; }

std::vector<uint8_t> SplitDrawer::draw(size_t n) {
  std::vector<uint8_t> out(n);
  if (n == 0) return out;
  std::vector<float> u(n);
#if defined(SJKV_TRAIN_HAVE_CURAND)
  if (curandGenerateUniform(impl_->gen, u.data(), n) != CURAND_STATUS_SUCCESS)
    throw std::runtime_error("curandGenerateUniform failed");
#else
  for (size_t i = 0; i < n; ++i) u[i] = philox_stream_uniform(impl_->seed, impl_->next++);
#endif
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<double>(u[i]) < frac_ ? 1 : 0;
  return out;
}

// ---- targets -------------------------------------------------------------------------------

CodecConfig target_config(uint32_t head_dim, const TargetOptions& opt) {
  CodecConfig c = opt.config;
  c.head_dim = head_dim;
  c.body = Body::trellis;
  c.trellis_axis = opt.config.trellis_axis;  // token (the format's) or channel
  if (c.group != kTrellisGroup) throw std::invalid_argument("trellis training needs group 128");
  if (c.bits_k != c.bits_v || c.bits_k < 2 || c.bits_k > 4)
    throw std::invalid_argument("training needs bits_k = bits_v in 2..4");
  if (head_dim % 128 != 0 || !is_pow2(head_dim))
    throw std::invalid_argument("head_dim " + std::to_string(head_dim) + " cannot be sealed (need a power of two, multiple of 128)");
  const Unsupported why = can_implement(c);
  if (why != Unsupported::none) throw std::invalid_argument(std::string("unsupported configuration: ") + describe(why));
  return c;
}

uint32_t sequences_per_record(const CodecConfig& c) {
  return c.trellis_axis == TrellisAxis::channel ? c.group : c.head_dim;
}

RecordRange shard_records(uint64_t n, uint32_t seqs_per_record, int rank, int size) {
  // A unit of records fills whole chunks: the sizes are powers of two (target_config).
  const uint64_t u = seqs_per_record >= kLloydChunk ? 1 : kLloydChunk / seqs_per_record;
  const uint64_t units = (n + u - 1) / u, r = static_cast<uint64_t>(rank), s = static_cast<uint64_t>(size);
  return {std::min(n, units * r / s * u), std::min(n, units * (r + 1) / s * u)};
}

std::vector<uint8_t> records_in_shard(const std::vector<uint8_t>& held, const RecordRange& train,
                                      const RecordRange& heldout, uint64_t* n_train, uint64_t* n_heldout) {
  std::vector<uint8_t> keep(held.size(), 0);
  for (size_t r = 0; r < held.size(); ++r) {
    const RecordRange& range = held[r] ? heldout : train;
    const uint64_t slot = held[r] ? (*n_heldout)++ : (*n_train)++;
    keep[r] = slot >= range.first && slot < range.last;
  }
  return keep;
}

std::string head_dim_mismatch(uint32_t before, uint32_t here) {
  return "all inputs must have the same head_dim (" + std::to_string(before) + " before, " + std::to_string(here) +
         " here)";
}

uint64_t capture_records(const Capture& cap, const TargetOptions& opt) {
  const CodecConfig c = target_config(cap.head_dim, opt);
  const uint64_t groups = cap.tokens > c.sink ? (cap.tokens - c.sink) / c.group : 0;
  return groups * cap.kv_heads * cap.layers.size();
}

void append_capture_targets(const Capture& cap, const TargetOptions& opt, SplitDrawer& split, TrainingSet& set) {
  cap.check_consistent();
  const std::vector<uint8_t> held = split.draw(capture_records(cap, opt));
  append_capture_targets(cap, opt, held, {}, set);
}

void append_capture_targets(const Capture& cap, const TargetOptions& opt, const std::vector<uint8_t>& held,
                            const std::vector<uint8_t>& keep, TrainingSet& set) {
  cap.check_consistent();
  const CodecConfig c = target_config(cap.head_dim, opt);
  const uint32_t D = cap.head_dim, G = c.group, H = cap.kv_heads;
  const uint32_t L = static_cast<uint32_t>(cap.layers.size());
  const uint32_t groups = cap.tokens > c.sink ? (cap.tokens - c.sink) / G : 0;
  const uint64_t n_all = static_cast<uint64_t>(L) * groups * H;
  if (held.size() != n_all || (!keep.empty() && keep.size() != n_all))
    throw std::logic_error("append_capture_targets: one draw (and keep flag) per record");
  // the records kept, and the destination of each: index within its set
  std::vector<uint64_t> recs, slot;
  uint64_t n_tr = 0, n_ho = 0;
  for (uint64_t r = 0; r < n_all; ++r)
    if (keep.empty() || keep[r]) {
      recs.push_back(r);
      slot.push_back(held[r] ? n_ho++ : n_tr++);
    }
  const uint64_t n_rec = recs.size();
  // Token axis: D sequences (one per channel) of G targets; channel axis: G sequences (one
  // per token row) of D targets. Either way a record gives D*G targets.
  const bool ch_axis = c.trellis_axis == TrellisAxis::channel;
  for (Targets* t : {&set.train_k, &set.train_v, &set.heldout_k, &set.heldout_v}) t->len = ch_axis ? D : G;
  const size_t per_rec = static_cast<size_t>(D) * G;
  const size_t base_tr = set.train_k.y.size(), base_ho = set.heldout_k.y.size();
  set.train_k.y.resize(base_tr + n_tr * per_rec);
  set.train_v.y.resize(base_tr + n_tr * per_rec);
  set.heldout_k.y.resize(base_ho + n_ho * per_rec);
  set.heldout_v.y.resize(base_ho + n_ho * per_rec);
  set.train_records += n_tr;
  set.heldout_records += n_ho;
  if (set.have_config && (set.seal_config.head_dim != c.head_dim || set.seal_config.bits_k != c.bits_k ||
                          set.seal_config.trellis_axis != c.trellis_axis))
    throw std::invalid_argument(head_dim_mismatch(set.seal_config.head_dim, c.head_dim));
  set.seal_config = c;
  set.have_config = true;
  const size_t base_rows = set.heldout_k_rows.size();
  set.heldout_k_rows.resize(base_rows + n_ho * per_rec);
  set.heldout_v_rows.resize(base_rows + n_ho * per_rec);
  const RecordLayout lay = c.layout();
  const bool rotate = !(cap.rotated || opt.assume_rotated);
  const uint32_t rot = c.rotation();
  const int threads = opt.threads > 0 ? opt.threads : omp_get_max_threads();
  std::string error;
#pragma omp parallel num_threads(threads)
  {
    const size_t RC = per_rec, V = D > G ? D : G;
    std::vector<float> M(RC), cur(RC), fvec(5 * V), lo(V), step(V), row(D), tmp(D);
    std::vector<double> dvec(2 * V);
    std::vector<uint16_t> krows(per_rec), vrows(per_rec);
    std::vector<uint8_t> stage(staging_row_bytes(c.staging, D)), rec(lay.bytes);
#pragma omp for schedule(dynamic, 1)
    for (long long ri = 0; ri < static_cast<long long>(n_rec); ++ri) {
      const uint64_t r = recs[static_cast<size_t>(ri)], sl = slot[static_cast<size_t>(ri)];
      const uint32_t h = static_cast<uint32_t>(r % H), g = static_cast<uint32_t>((r / H) % groups),
                     l = static_cast<uint32_t>(r / H / groups);
      bool ok = true;
      for (int s = 0; s < 2 && ok; ++s) {
        const std::vector<uint16_t>& src = s == 0 ? cap.layers[l].k : cap.layers[l].v;
        uint16_t* dst = s == 0 ? krows.data() : vrows.data();
        for (uint32_t t = 0; t < G; ++t) {
          const uint32_t p = c.sink + g * G + t;
          const uint16_t* x = src.data() + (static_cast<size_t>(p) * H + h) * D;
          for (uint32_t d = 0; d < D; ++d) row[d] = f16_to_f32(x[d]);
          if (rotate) hadamard_blocks(row.data(), D, rot);
          const int32_t bad = staging_encode_row_checked(c.staging, row.data(), D, stage.data());
          if (bad >= 0) {
#pragma omp critical
            if (error.empty())
              error = "cannot stage layer " + std::to_string(cap.layers[l].layer_id) + " position " +
                      std::to_string(p) + " head " + std::to_string(h) + (s == 0 ? " K" : " V") + " channel " +
                      std::to_string(bad);
            ok = false;
            break;
          }
          staging_seal_input(c.staging, stage.data(), D, tmp.data(), dst + static_cast<size_t>(t) * D);
        }
      }
      if (!ok) continue;
      const bool ho = held[r] != 0;
      const size_t off = (ho ? base_ho : base_tr) + sl * per_rec;
      if (ho) {
        std::copy(krows.begin(), krows.end(), set.heldout_k_rows.begin() + static_cast<long>(base_rows + sl * per_rec));
        std::copy(vrows.begin(), vrows.end(), set.heldout_v_rows.begin() + static_cast<long>(base_rows + sl * per_rec));
      }
      for (int s = 0; s < 2; ++s) {
        const Side side = s == 0 ? Side::k : Side::v;
        RecordScratch rs{M.data(),
                         BalanceScratch{cur.data(), fvec.data(), fvec.data() + V, dvec.data(), dvec.data() + V,
                                        fvec.data() + 2 * V, fvec.data() + 3 * V},
                         lo.data(), step.data()};
        seal_side_prepare_ref(lay, side, s == 0 ? krows.data() : vrows.data(), D, c.iters, c.balance, rs,
                              rec.data());
        Targets& T = s == 0 ? (ho ? set.heldout_k : set.train_k) : (ho ? set.heldout_v : set.train_v);
        float* y = T.y.data() + off;
        const bool is_k = s == 0;
        const uint32_t C = is_k ? G : D;
        for (uint32_t d = 0; d < D; ++d)
          for (uint32_t t = 0; t < G; ++t) {
            const uint32_t rr = is_k ? d : t, cc = is_k ? t : d;
            y[ch_axis ? static_cast<size_t>(t) * D + d : static_cast<size_t>(d) * G + t] =
                trellis::target(cur[static_cast<size_t>(rr) * C + cc], lo[rr], step[rr]);
          }
      }
    }
  }
  if (!error.empty()) throw std::invalid_argument(error + (cap.source.empty() ? "" : " (source " + cap.source + ")"));
}

void heldout_real_mse(const TrainingSet& set, const uint16_t* k_table, const uint16_t* v_table, int threads,
                      double* mse_k, double* mse_v, const cluster::Comm& comm) {
  *mse_k = *mse_v = std::numeric_limits<double>::quiet_NaN();
  // Alone, nothing to do without records; a rank with none still takes part in the sums.
  if (!comm.distributed() && (set.heldout_records == 0 || !set.have_config)) return;
  const CodecConfig& c = set.seal_config;
  const uint32_t D = c.head_dim, G = c.group;
  const size_t per_rec = static_cast<size_t>(D) * G, n = set.heldout_records;
  std::vector<double> ek(n), ev(n);
  if (n > 0) {
    const RecordLayout lay = c.layout();
    SealOptions so;
    so.iters = c.iters;
    so.balance = c.balance;
    so.codebooks = TrellisCodebooks{k_table, v_table};
    std::vector<const uint16_t*> kp(n), vp(n);
    for (size_t r = 0; r < n; ++r) {
      kp[r] = set.heldout_k_rows.data() + r * per_rec;
      vp[r] = set.heldout_v_rows.data() + r * per_rec;
    }
    std::vector<uint8_t> recs(n * lay.bytes);
    const Status st = seal_records(lay, so, n, kp.data(), vp.data(), D, recs.data(), SealPath::fast, threads);
    if (!st.ok()) throw std::runtime_error("sealing the held-out records failed: " + st.message());
#pragma omp parallel num_threads(threads > 0 ? threads : omp_get_max_threads())
    {
      std::vector<float> out(D);
#pragma omp for schedule(static)
      for (long long ri = 0; ri < static_cast<long long>(n); ++ri) {
        const size_t r = static_cast<size_t>(ri);
        const uint8_t* rec = recs.data() + r * lay.bytes;
        double sk = 0, sv = 0;
        for (uint32_t t = 0; t < G; ++t) {
          decode_k_row_ref(lay, rec, t, out.data(), so.codebooks);
          for (uint32_t d = 0; d < D; ++d) {
            const double e = static_cast<double>(out[d]) - f16_to_f32(kp[r][static_cast<size_t>(t) * D + d]);
            sk += e * e;
          }
          decode_v_row_ref(lay, rec, t, out.data(), so.codebooks);
          for (uint32_t d = 0; d < D; ++d) {
            const double e = static_cast<double>(out[d]) - f16_to_f32(vp[r][static_cast<size_t>(t) * D + d]);
            sv += e * e;
          }
        }
        ek[r] = sk;
        ev[r] = sv;
      }
    }
  }
  // record order over all ranks, from 0.0
  cluster::Accumulator acc{{0.0, 0.0}, {0}};
  comm.ordered(acc, [&](cluster::Accumulator& a) {
    for (size_t r = 0; r < n; ++r) {
      a.d[0] += ek[r];
      a.d[1] += ev[r];
    }
    a.u[0] += n;
  });
  if (acc.u[0] == 0) return;
  *mse_k = acc.d[0] / static_cast<double>(acc.u[0] * per_rec);
  *mse_v = acc.d[1] / static_cast<double>(acc.u[0] * per_rec);
}

// ---- Lloyd ---------------------------------------------------------------------------------

namespace {

constexpr size_t kChunk = kLloydChunk;  // the order of sjkv/lloyd.h, shared with the CUDA pass

int nthreads(int t) { return t > 0 ? t : omp_get_max_threads(); }

// Viterbi over every sequence; per chunk: squared error and (optionally) per-window sums.
struct Pass {
  std::vector<double> err;             // [chunks]
  std::vector<double> sum;             // [chunks][n_entries]
  std::vector<uint32_t> cnt;           // [chunks][n_entries]
};

double run_pass(const Targets& t, uint32_t bits, const float* cbf, int threads, bool stats, std::vector<double>* sum_out,
                std::vector<uint64_t>* cnt_out, const cluster::Comm& comm) {
  const size_t n = t.sequences(), len = t.len;
  const uint32_t ne = trellis_entries(bits);
  const size_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> err(chunks, 0.0);
  std::vector<double> sum(stats ? chunks * ne : 0, 0.0);
  std::vector<uint32_t> cnt(stats ? chunks * ne : 0, 0);
#pragma omp parallel num_threads(nthreads(threads))
  {
    // The vectorised Viterbi gives the reference's codes (tested), several times faster.
    std::vector<uint8_t> scratch(viterbi_scratch_bytes(static_cast<uint32_t>(len))), codes(len);
    std::vector<uint16_t> wins(len);
#pragma omp for schedule(dynamic, 1)
    for (long long ci = 0; ci < static_cast<long long>(chunks); ++ci) {
      const size_t c0 = static_cast<size_t>(ci) * kChunk, c1 = std::min(n, c0 + kChunk);
      double e = 0.0;
      double* cs = stats ? sum.data() + static_cast<size_t>(ci) * ne : nullptr;
      uint32_t* cc = stats ? cnt.data() + static_cast<size_t>(ci) * ne : nullptr;
      for (size_t s = c0; s < c1; ++s) {
        const float* y = t.y.data() + s * len;
        viterbi_fast(y, static_cast<uint32_t>(len), bits, cbf, scratch.data(), codes.data(), wins.data());
        e = lloyd_accumulate(y, codes.data(), static_cast<uint32_t>(len), bits, cbf, e, cs, cc);
      }
      err[static_cast<size_t>(ci)] = e;
    }
  }
  // The chunks' partials in chunk order, each total from 0.0; a rank's slice starts on a chunk
  // boundary, so the ranks in turn add exactly what one process adds.
  cluster::Accumulator acc;
  acc.d.assign(stats ? 1 + ne : 1, 0.0);
  acc.u.assign(stats ? 1 + ne : 1, 0);
  comm.ordered(acc, [&](cluster::Accumulator& a) {
    a.u[0] += n;
    for (size_t ci = 0; ci < chunks; ++ci) {
      a.d[0] += err[ci];
      if (stats)
        for (uint32_t w = 0; w < ne; ++w) {
          a.d[1 + w] += sum[ci * ne + w];
          a.u[1 + w] += cnt[ci * ne + w];
        }
    }
  });
  const uint64_t total = acc.u[0];
  if (total == 0) return std::numeric_limits<double>::quiet_NaN();
  if (stats) {
    sum_out->assign(acc.d.begin() + 1, acc.d.end());
    cnt_out->assign(acc.u.begin() + 1, acc.u.end());
  }
  return acc.d[0] / static_cast<double>(total * len);
}

// Sequences over all ranks.
uint64_t total_sequences(const Targets& t, const cluster::Comm& comm) {
  cluster::Accumulator acc{{}, {0}};
  comm.ordered(acc, [&](cluster::Accumulator& a) { a.u[0] += t.sequences(); });
  return acc.u[0];
}

}  // namespace

double trellis_mse(const Targets& t, uint32_t bits, const float* cbf, int threads, const cluster::Comm& comm) {
  return run_pass(t, bits, cbf, threads, false, nullptr, nullptr, comm);
}

double scalar_mse(const Targets& t, uint32_t bits, const cluster::Comm& comm) {
  const double qmax = static_cast<double>((1u << bits) - 1u);
  cluster::Accumulator acc{{0.0}, {0}};
  comm.ordered(acc, [&](cluster::Accumulator& a) {
    double e = a.d[0];
    for (float yf : t.y) {
      const double y = yf;
      double q = std::floor(y + 0.5);
      q = q < 0 ? 0 : q > qmax ? qmax : q;
      e += (y - q) * (y - q);
    }
    a.d[0] = e;
    a.u[0] += t.y.size();
  });
  if (acc.u[0] == 0) return std::numeric_limits<double>::quiet_NaN();
  return acc.d[0] / static_cast<double>(acc.u[0]);
}

LloydResult lloyd_train(const Targets& train, const Targets& heldout, uint32_t bits, const uint16_t* init,
                        const LloydOptions& opt) {
  if (bits < 2 || bits > 4) throw std::invalid_argument("bits must be 2, 3 or 4");
  const cluster::Comm alone;
  const cluster::Comm& comm = opt.comm ? *opt.comm : alone;
  if (opt.pass && comm.distributed()) throw std::logic_error("lloyd_train: a device pass runs one process");
  if (total_sequences(train, comm) == 0) throw std::invalid_argument("no training sequences");
  const uint32_t ne = trellis_entries(bits);
  LloydResult res;
  res.table.resize(ne);
  if (opt.resume) {
    const LloydState& st = *opt.resume;
    if (st.table.size() != ne || st.history.empty() || st.history.back().iter + 1 != st.history.size())
      throw std::invalid_argument("resume state does not fit a " + std::to_string(bits) + "-bit table");
    res.table = st.table;
    res.history = st.history;
    res.iterations = st.history.back().iter;
  } else {
    for (uint32_t w = 0; w < ne; ++w) res.table[w] = f16_to_f32(init[w]);
  }
  std::vector<double> sum;
  std::vector<uint64_t> cnt;
  auto pass = [&](const Targets& t, const float* cbf, std::vector<double>* s, std::vector<uint64_t>* c) {
    if (opt.pass) return opt.pass(t.y.data(), t.sequences(), t.len, bits, cbf, s, c);
    return run_pass(t, bits, cbf, opt.threads, s != nullptr, s, c, comm);
  };
  auto mse = [&](const Targets& t, const float* cbf) { return pass(t, cbf, nullptr, nullptr); };
  auto used = [&] {
    uint32_t u = 0;
    for (uint64_t c : cnt) u += c ? 1 : 0;
    return u;
  };
  double prev = pass(train, res.table.data(), &sum, &cnt);
  auto real = [&](const std::vector<float>& table) {
    if (!opt.real_mse) return std::numeric_limits<double>::quiet_NaN();
    std::vector<uint16_t> h(table.size());
    for (size_t w = 0; w < table.size(); ++w) h[w] = f32_to_f16(table[w]);
    return opt.real_mse(h);
  };
  auto state = [&](const std::string& stop) {
    if (opt.on_state) opt.on_state(LloydState{res.table, res.history, stop});
  };
  bool stopped = false;
  if (opt.resume) {
    // Bit for bit the pass the interrupted run made: anything else is other data.
    if (prev != res.history.back().train_mse)
      throw std::invalid_argument("resume state was made on other training data (train MSE " +
                                  std::to_string(res.history.back().train_mse) + ", the data gives " +
                                  std::to_string(prev) + ")");
    if (!opt.resume->stop.empty()) {
      res.stop = opt.resume->stop;
      stopped = true;
    }
  } else {
    LloydIteration it0{0, prev, mse(heldout, res.table.data()), used(), real(res.table)};
    res.history.push_back(it0);
    if (opt.on_iteration) opt.on_iteration(it0);
  }
  if (!stopped && opt.max_iters > 0) res.stop = "cap";
  for (uint32_t i = res.iterations + 1; !stopped && i <= opt.max_iters; ++i) {
    std::vector<float> next = res.table;
    for (uint32_t w = 0; w < ne; ++w)
      if (cnt[w]) next[w] = static_cast<float>(sum[w] / static_cast<double>(cnt[w]));
    std::vector<double> nsum;
    std::vector<uint64_t> ncnt;
    const double cur = pass(train, next.data(), &nsum, &ncnt);
    if (!(cur <= prev)) {  // not taken: keep the previous table
      res.stop = "no gain";
      break;
    }
    res.table = std::move(next);
    sum = std::move(nsum);
    cnt = std::move(ncnt);
    res.iterations = i;
    LloydIteration li{i, cur, mse(heldout, res.table.data()), used(), real(res.table)};
    res.history.push_back(li);
    if (opt.on_iteration) opt.on_iteration(li);
    const double gain = prev > 0 ? (prev - cur) / prev : 0.0;
    prev = cur;
    if (gain < opt.tol) {
      res.stop = "converged";
      break;
    }
    state("");
  }
  if (!stopped) state(res.stop);
  res.table_f16.resize(ne);
  std::vector<float> rounded(ne);
  for (uint32_t w = 0; w < ne; ++w) {
    res.table_f16[w] = f32_to_f16(res.table[w]);
    rounded[w] = f16_to_f32(res.table_f16[w]);
  }
  res.train_mse_f16 = mse(train, rounded.data());
  res.heldout_mse_f16 = mse(heldout, rounded.data());
  return res;
}

}  // namespace sjkv::train
