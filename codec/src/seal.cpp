#include "sjkv/seal.h"

#include <cstring>
#include <mutex>
#include <string>

#include "seal_isa.h"
#include "sjkv/parallel.h"

namespace sjkv {

const uint8_t* fragment_tile_positions(Side side) {
  struct Table {
    uint8_t pos[2][256];
    Table() {
      const RecordLayout one_tile = make_layout(16, 16, 4, 4, Body::scalar);
      for (uint32_t s = 0; s < 2; ++s)
        for (uint32_t tt = 0; tt < 16; ++tt)
          for (uint32_t dd = 0; dd < 16; ++dd)
            pos[s][tt * 16 + dd] = static_cast<uint8_t>(code_bit(one_tile, static_cast<Side>(s), tt, dd) / 4);
    }
  };
  static const Table table;
  return table.pos[static_cast<uint32_t>(side)];
}

const char* seal_path_name(SealPath p) {
  switch (p) {
    case SealPath::reference: return "reference";
    case SealPath::fast: return "fast";
    case SealPath::fast_baseline: return "fast-baseline";
    case SealPath::fast_avx2: return "fast-avx2";
    case SealPath::fast_avx512: return "fast-avx512";
  }
  return "?";
}

bool seal_path_available(SealPath p) {
  switch (p) {
    case SealPath::reference:
    case SealPath::fast:
    case SealPath::fast_baseline: return true;
#if defined(__x86_64__)
    case SealPath::fast_avx2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case SealPath::fast_avx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
#else
    default: return false;
#endif
  }
  return false;
}

namespace {

SealPath best_fast_path() {
  static const SealPath best = seal_path_available(SealPath::fast_avx512) ? SealPath::fast_avx512
                               : seal_path_available(SealPath::fast_avx2) ? SealPath::fast_avx2
                                                                          : SealPath::fast_baseline;
  return best;
}

}  // namespace

void SealWorkspace::reserve(uint32_t head_dim, uint32_t group) {
  const uint32_t tile = head_dim * group;
  const uint32_t vec = head_dim > group ? head_dim : group;
  if (tile <= tile_ && vec <= vec_) return;
  tile_ = tile;
  vec_ = vec;
  tiles_.assign(static_cast<size_t>(4) * tile, 0.0f);
  // 16 float vectors, the last 6 of which hold 3 double vectors
  vecs_.assign(static_cast<size_t>(16) * vec, 0.0f);
  sums_.assign(static_cast<size_t>(8) * vec, 0.0);
  dvecs_.assign(static_cast<size_t>(2) * vec, 0.0);
  codes_.assign(tile, 0);
  // trellis sequences run along G (token axis) or D (channel axis): at most max(D, G) codes
  choice_.assign(static_cast<size_t>(vec) * kTrellisStates * 4, 0);
  cbf_.assign(kTrellisMaxEntries, 0.0f);
  ty_.assign(static_cast<size_t>(vec) + 2 * kTrellisStates, 0.0f);
  windows_.assign(tile, 0);
}

TrellisScratch SealWorkspace::trellis_scratch() {
  TrellisScratch s;
  s.y = ty_.data();
  s.phi = ty_.data() + (ty_.size() - 2 * kTrellisStates);
  s.choice = choice_.data();
  s.codes = codes_.data();
  s.cbf = cbf_.data();
  return s;
}

Status check_codebooks(const RecordLayout& l, const TrellisCodebooks& cb) {
  if (l.body != Body::trellis) return Status{};
  for (int s = 0; s < 2; ++s) {
    const Side side = s == 0 ? Side::k : Side::v;
    const uint32_t bits = s == 0 ? l.bits_k : l.bits_v;
    const long bad = first_unusable_entry(codebook_table(cb, side, bits), bits);
    if (bad < 0) continue;
    Status st;
    st.code = ErrorCode::unsupported;
    st.side = side;
    st.detail = std::string(s == 0 ? "K" : "V") + " codebook entry " + std::to_string(bad) + " is NaN, infinite or larger than 64";
    return st;
  }
  return Status{};
}

RecordScratch SealWorkspace::reference_scratch() {
  float* f = vecs_.data();
  double* d = reinterpret_cast<double*>(f + 10 * vec_);
  RecordScratch s;
  s.M = tiles_.data();
  s.bal = BalanceScratch{tiles_.data() + tile_, f, f + vec_, d, d + vec_, f + 3 * vec_, f + 4 * vec_};
  s.lo = f + 5 * vec_;
  s.step = f + 6 * vec_;
  return s;
}

Status check_finite_rows(Side side, const uint16_t* rows, uint32_t n_rows, uint32_t d, size_t row_stride) {
  for (uint32_t t = 0; t < n_rows; ++t) {
    const uint16_t* r = rows + static_cast<size_t>(t) * row_stride;
    uint32_t bad = 0;
    for (uint32_t i = 0; i < d; ++i) bad |= ((r[i] & 0x7c00u) == 0x7c00u);
    if (!bad) continue;
    for (uint32_t i = 0; i < d; ++i)
      if ((r[i] & 0x7c00u) == 0x7c00u) return Status::at(ErrorCode::non_finite_input, side, t, i);
  }
  return Status{};
}

Status seal_record(const RecordLayout& l, const SealOptions& opt, const uint16_t* k_rows, const uint16_t* v_rows,
                   size_t row_stride, uint8_t* out, SealWorkspace& ws, SealPath path) {
  const Unsupported why = can_implement_record(l.head_dim, l.group, l.bits_k, l.bits_v, l.body, l.axis);
  const Unsupported iters = opt.iters > 64 ? Unsupported::iters_out_of_range : Unsupported::none;
  if (why != Unsupported::none || iters != Unsupported::none) {
    std::memset(out, 0, l.bytes);
    Status st;
    st.code = ErrorCode::unsupported;
    st.detail = describe(why != Unsupported::none ? why : iters);
    return st;
  }
  Status st = check_codebooks(l, opt.codebooks);
  if (st.ok()) st = check_finite_rows(Side::k, k_rows, l.group, l.head_dim, row_stride);
  if (st.ok()) st = check_finite_rows(Side::v, v_rows, l.group, l.head_dim, row_stride);
  if (!st.ok()) {
    std::memset(out, 0, l.bytes);
    return st;
  }
  ws.reserve(l.head_dim, l.group);
  if (path == SealPath::fast) path = best_fast_path();
  if (!seal_path_available(path)) path = SealPath::reference;
  if (l.body == Body::trellis) {
    switch (path) {
      case SealPath::reference:
        seal_record_trellis_ref(l, k_rows, v_rows, row_stride, opt.iters, opt.balance, opt.codebooks,
                                ws.reference_scratch(), ws.trellis_scratch(), out);
        break;
#if defined(__x86_64__)
      case SealPath::fast_avx2: isa_avx2::seal_record_trellis(l, opt, k_rows, v_rows, row_stride, out, ws); break;
      case SealPath::fast_avx512: isa_avx512::seal_record_trellis(l, opt, k_rows, v_rows, row_stride, out, ws); break;
#endif
      default: isa_baseline::seal_record_trellis(l, opt, k_rows, v_rows, row_stride, out, ws); break;
    }
    return Status{};
  }
  switch (path) {
    case SealPath::reference:
      seal_record_scalar_ref(l, k_rows, v_rows, row_stride, opt.iters, opt.balance, ws.reference_scratch(), out);
      break;
#if defined(__x86_64__)
    case SealPath::fast_avx2: isa_avx2::seal_record_scalar(l, opt, k_rows, v_rows, row_stride, out, ws); break;
    case SealPath::fast_avx512: isa_avx512::seal_record_scalar(l, opt, k_rows, v_rows, row_stride, out, ws); break;
#endif
    default: isa_baseline::seal_record_scalar(l, opt, k_rows, v_rows, row_stride, out, ws); break;
  }
  return Status{};
}

size_t viterbi_scratch_bytes(uint32_t n) { return static_cast<size_t>(n) * kTrellisStates * 4; }

void viterbi_fast(const float* y, uint32_t n, uint32_t bits, const float* cbf, void* scratch, uint8_t* codes,
                  uint16_t* wins, SealPath path) {
  if (path == SealPath::fast || !seal_path_available(path)) path = best_fast_path();
  switch (path) {
#if defined(__x86_64__)
    case SealPath::fast_avx2: isa_avx2::viterbi_codes(y, n, bits, cbf, scratch, codes, wins); return;
    case SealPath::fast_avx512: isa_avx512::viterbi_codes(y, n, bits, cbf, scratch, codes, wins); return;
#endif
    default: isa_baseline::viterbi_codes(y, n, bits, cbf, scratch, codes, wins); return;
  }
}

Status seal_records(const RecordLayout& l, const SealOptions& opt, size_t n, const uint16_t* const* k_rows,
                    const uint16_t* const* v_rows, size_t row_stride, uint8_t* out, SealPath path, int n_threads) {
  size_t first_bad = n;
  Status bad;
  std::mutex bad_mu;
  // Records to whichever thread is free (sjkv/parallel.h): a record's bytes do not depend on it.
  parallel_for(static_cast<long>(n), n_threads, [&](long i) {
    thread_local SealWorkspace ws;
    Status st = seal_record(l, opt, k_rows[i], v_rows[i], row_stride, out + static_cast<size_t>(i) * l.bytes, ws, path);
    if (!st.ok()) {
      std::lock_guard<std::mutex> g(bad_mu);
      if (static_cast<size_t>(i) < first_bad) {
        first_bad = static_cast<size_t>(i);
        bad = st;
      }
    }
  });
  if (first_bad < n) bad.detail = "record " + std::to_string(first_bad) + (bad.detail.empty() ? "" : ": " + bad.detail);
  return first_bad < n ? bad : Status{};
}

void decode_k_row(const RecordLayout& l, const uint8_t* rec, uint32_t t, float* out, const TrellisCodebooks& cb) {
  decode_k_row_ref(l, rec, t, out, cb);
}

void decode_v_row(const RecordLayout& l, const uint8_t* rec, uint32_t t, float* out, const TrellisCodebooks& cb) {
  decode_v_row_ref(l, rec, t, out, cb);
}

}  // namespace sjkv
