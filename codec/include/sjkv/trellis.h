// Trellis bodies (docs/SPEC.md §7): codebooks, the window of a code, the Viterbi recursion of
// one channel, the "norm" refit and the decoded value q(t, d) = F(cb[w]). The per-element
// formulas live here once, for the reference seal (record.h), the vectorised CPU sealer
// (seal_fast.cpp) and CUDA.
//
// One trellis sequence per channel d (both sides), along the G = 128 tokens of the group,
// stored channel-major: code (t, d) of a b-bit side at payload bit (d*G + t)*b. The window of
// code i is the L = 6 + b bit number (code_i << 6) | (the 6 stream bits before it in this
// channel's sequence, older bits lower, zeros before the start). States are the 6 history
// bits; from state s, branch j uses window s + 64*j and leads to state (s + 64*j) >> b.
//
// sjkv extensions (docs/CODEC.md): the channel axis (RecordLayout::axis, one sequence per
// token row t along its D channels, code (t, d) at payload bit (t*D + d)*b) and the 4-bit
// trellis (L = 10, 1024-entry tables; no reference tables exist, the built-in 4-bit table
// is the identity codebook). Everything below is written per sequence, so both follow from
// the same window, recursion and refit.
#pragma once

#include <cstddef>

#include "sjkv/codebook_tables.h"
#include "sjkv/fp16.h"
#include "sjkv/hash.h"
#include "sjkv/layout.h"

namespace sjkv {

constexpr uint32_t kTrellisHistoryBits = 6;
constexpr uint32_t kTrellisStates = 64;   // 2^6
constexpr uint32_t kTrellisGroup = 128;   // trellis records need G = 128 (§5.2)
constexpr uint32_t kTrellisMaxEntries = 1024;  // 4-bit window L = 10

SJKV_HD inline uint32_t trellis_window_len(uint32_t bits) { return kTrellisHistoryBits + bits; }
SJKV_HD inline uint32_t trellis_entries(uint32_t bits) { return 1u << (kTrellisHistoryBits + bits); }

// The codebooks one record is sealed and decoded with: the K-side table (2^(6+bits_k)
// entries) and the V-side table (2^(6+bits_v) entries), fp16 bit patterns in window order.
// A null pointer means the built-in reference table of that side and width (cb3_k / cb3_v
// at 3 bits, cb2_k / cb2_v at 2 bits; 3/2 uses cb3_k for K and cb2_v for V), so a
// default-constructed value is the reference codebooks on the host and on the device.
// Non-null pointers must be readable where the code runs (host memory for the CPU sealer,
// device memory for kernels) and stay valid for the call.
struct TrellisCodebooks {
  const uint16_t* k = nullptr;
  const uint16_t* v = nullptr;
};

#if !defined(__CUDA_ARCH__)
// The 4-bit identity codebook (entry w = H(w >> 6)), built once on the host.
inline const uint16_t* identity_codebook4() {
  struct Table {
    uint16_t e[1024];
    Table() {
      for (uint32_t w = 0; w < 1024; ++w) e[w] = f32_to_f16(static_cast<float>(w >> 6));
    }
  };
  static const Table t;
  return t.e;
}
#endif

// Built-in table of one side and width: the reference tables at 2 and 3 bits; at 4 bits
// (sjkv extension, no reference tables exist) the identity codebook on the host, and
// nullptr on the device (device callers pass 4-bit tables explicitly); nullptr otherwise.
SJKV_HD inline const uint16_t* reference_codebook(Side side, uint32_t bits) {
#if defined(__CUDA_ARCH__)
  if (bits == 3) return side == Side::k ? tables::kCb3KDev : tables::kCb3VDev;
  if (bits == 2) return side == Side::k ? tables::kCb2KDev : tables::kCb2VDev;
#else
  if (bits == 3) return side == Side::k ? tables::kCb3K : tables::kCb3V;
  if (bits == 2) return side == Side::k ? tables::kCb2K : tables::kCb2V;
  if (bits == 4) return identity_codebook4();
#endif
  return nullptr;
}

// The table a side of a record uses: the given one, else the reference table.
SJKV_HD inline const uint16_t* codebook_table(const TrellisCodebooks& cb, Side side, uint32_t bits) {
  const uint16_t* t = side == Side::k ? cb.k : cb.v;
  return t ? t : reference_codebook(side, bits);
}

// Codebook identity (§12.3): FNV-1a 64 with the format's basis over the K table as
// little-endian uint16 (2^(6+bits_k) entries), continued over the V table. The reference
// tables give 3/3 d3b4c98ce0f8406c, 3/2 8098c9fada170179, 2/2 99ad6255c4c521a1.
inline uint64_t codebook_id(uint32_t bits_k, uint32_t bits_v, const TrellisCodebooks& cb = TrellisCodebooks{}) {
  uint64_t h = kFnvBasis;
  for (int s = 0; s < 2; ++s) {
    const Side side = s == 0 ? Side::k : Side::v;
    const uint32_t bits = s == 0 ? bits_k : bits_v;
    const uint16_t* t = codebook_table(cb, side, bits);
    const uint32_t n = trellis_entries(bits);
    for (uint32_t i = 0; i < n; ++i) {
      const uint8_t le[2] = {static_cast<uint8_t>(t[i] & 0xff), static_cast<uint8_t>(t[i] >> 8)};
      h = fnv1a(le, 2, h);
    }
  }
  return h;
}

// The identity a record's saved state carries: 0 for scalar bodies (§11).
inline uint64_t codebook_id(const RecordLayout& l, const TrellisCodebooks& cb = TrellisCodebooks{}) {
  return l.body == Body::trellis ? codebook_id(l.bits_k, l.bits_v, cb) : 0;
}

// Entry w = H(w >> 6): the code value itself, which makes the trellis reproduce scalar RTN
// levels (the "identity" codebook of §7.1). `out` receives 2^(6+bits) entries.
inline void identity_codebook(uint32_t bits, uint16_t* out) {
  const uint32_t n = trellis_entries(bits);
  for (uint32_t w = 0; w < n; ++w) out[w] = f32_to_f16(static_cast<float>(w >> kTrellisHistoryBits));
}

// Largest codebook entry magnitude sjkv accepts (sjkv's limit; the reference tables stay
// below 7, and a Lloyd centroid of the targets below 2^bits): a larger one decodes to values
// that overflow fp16 ("units of the row step" times a row step).
constexpr uint16_t kMaxCodebookEntryBits = 0x5400u;  // fp16 64.0

// Whether one fp16 entry is finite and at most 64 in magnitude (NaN and infinity compare above).
inline bool codebook_entry_usable(uint16_t h) { return (h & 0x7fffu) <= kMaxCodebookEntryBits; }

// Index of the first entry that is NaN, infinite or larger than 64 in magnitude, or -1.
inline long first_unusable_entry(const uint16_t* table, uint32_t bits) {
  const uint32_t n = trellis_entries(bits);
  for (uint32_t i = 0; i < n; ++i)
    if (!codebook_entry_usable(table[i])) return static_cast<long>(i);
  return -1;
}

namespace trellis {

// Window of code i of one channel's sequence whose first code is at payload bit `seq_bit`
// (§7.2): the stream bits [i*b - 6, i*b + b) as a little-endian number, bits before the
// sequence start reading 0.
SJKV_HD inline uint32_t window(const uint8_t* payload, uint32_t seq_bit, uint32_t b, uint32_t i) {
  const uint32_t pos = i * b;
  if (pos >= kTrellisHistoryBits) return get_bits(payload, seq_bit + pos - kTrellisHistoryBits, kTrellisHistoryBits + b);
  const uint32_t code = get_bits(payload, seq_bit + pos, b);
  const uint32_t hist = pos ? get_bits(payload, seq_bit, pos) << (kTrellisHistoryBits - pos) : 0u;
  return (code << kTrellisHistoryBits) | hist;
}

// Window of the code of (token t, channel d) of one side of a trellis record: position t of
// channel d's sequence (token axis) or position d of token t's sequence (channel axis).
SJKV_HD inline uint32_t window_at(const RecordLayout& l, const uint8_t* rec, Side side, uint32_t t, uint32_t d) {
  const bool is_k = side == Side::k;
  const uint32_t b = is_k ? l.bits_k : l.bits_v;
  const uint8_t* payload = rec + (is_k ? l.k_payload : l.v_payload);
  if (l.axis == TrellisAxis::channel) return window(payload, t * l.head_dim * b, b, d);
  return window(payload, d * l.group * b, b, t);
}

// The state after taking window w (the 6 newest bits of the window).
SJKV_HD inline uint32_t next_state(uint32_t w, uint32_t b) { return w >> b; }

// Viterbi target of one value (§7.3): (bal - lo) / step with the row's §6.5 affine.
SJKV_HD inline float target(float x, float lo, float step) { return op::fdiv(op::fsub(x, lo), step); }

// Cost of one branch: fsub, fmul, fadd in this order, each rounded once.
SJKV_HD inline float branch_cost(float y, float cbf, float phi_next) {
  const float d = op::fsub(y, cbf);
  return op::fadd(op::fmul(d, d), phi_next);
}

// Viterbi search of one sequence, exactly as §7.3: y[0..n-1] targets, cbf[2^(6+b)] decoded
// table entries; scratch phi[2*64] and choice[n*64]; codes[0..n-1] receive the path from
// start state 0. Backward recursion with no termination cost; for every state the branches
// run j = 0, 1, ... with a strict `<`, so ties keep the smallest j and a state whose costs
// are all +inf or NaN keeps j = 0.
SJKV_HD inline void viterbi_ref(const float* y, uint32_t n, uint32_t b, const float* cbf, float* phi,
                                uint8_t* choice, uint8_t* codes) {
  const uint32_t nb = 1u << b;
  float* cur = phi;                   // costs-to-go of step i + 1
  float* nxt = phi + kTrellisStates;  // being computed for step i
  for (uint32_t s = 0; s < kTrellisStates; ++s) cur[s] = 0.0f;
  for (uint32_t i = n; i-- > 0;) {
    for (uint32_t s = 0; s < kTrellisStates; ++s) {
      float best = f32_from_bits(0x7f800000u);  // +inf
      uint32_t bj = 0;
      for (uint32_t j = 0; j < nb; ++j) {
        const uint32_t w = s + kTrellisStates * j;
        const float cost = branch_cost(y[i], cbf[w], cur[next_state(w, b)]);
        if (cost < best) {
          best = cost;
          bj = j;
        }
      }
      nxt[s] = best;
      choice[static_cast<size_t>(i) * kTrellisStates + s] = static_cast<uint8_t>(bj);
    }
    float* t = cur;
    cur = nxt;
    nxt = t;
  }
  uint32_t s = 0;
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t c = choice[static_cast<size_t>(i) * kTrellisStates + s];
    codes[i] = static_cast<uint8_t>(c);
    s = next_state(s + kTrellisStates * c, b);
  }
}

// Refit ("norm" mode, §7.4): binary64 sums of one row in column order.
struct RefitSums {
  double sx = 0.0, sy = 0.0, sxx = 0.0, syy = 0.0;
};

SJKV_HD inline void refit_add(RefitSums& r, float bal, float yhat) {
  using namespace op;
  const double x = static_cast<double>(bal), y = static_cast<double>(yhat);
  r.sx = dadd(r.sx, x);
  r.sy = dadd(r.sy, y);
  r.sxx = dadd(r.sxx, dmul(x, x));
  r.syy = dadd(r.syy, dmul(y, y));
}

// Moment-matching affine a*yhat + bz of a row of n values. False when the row keeps its
// §6.5 affine: no spread in the reconstruction or the values, or a degenerate solution.
SJKV_HD inline bool refit_solve(const RefitSums& r, uint32_t n_values, double* a_out, double* bz_out) {
  using namespace op;
  const double n = static_cast<double>(n_values);
  const double vy = dsub(dmul(n, r.syy), dmul(r.sy, r.sy));
  if (!(vy > 0.0)) return false;
  const double vx = dsub(dmul(n, r.sxx), dmul(r.sx, r.sx));
  if (!(vx > 0.0)) return false;
  const double a = sqrt64(ddiv(vx, vy));
  const double bz = ddiv(dsub(r.sx, dmul(a, r.sy)), n);
  const double big = f64_from_bits(0x46293e5939a08ceaull);  // 1e30
  if (!(a > 0.0) || bz != bz || a > big || bz > big || bz < -big) return false;
  *a_out = a;
  *bz_out = bz;
  return true;
}

// The stored scale and zero of a refitted row: H(s_row * to32(a)), H(s_row * to32(bz)).
SJKV_HD inline void refit_store(float s_row, double a, double bz, uint16_t* scale, uint16_t* zero) {
  *scale = f32_to_f16(op::fmul(s_row, static_cast<float>(a)));
  *zero = f32_to_f16(op::fmul(s_row, static_cast<float>(bz)));
}

}  // namespace trellis

// Decoded value q(t, d) of a trellis side: F(cb[w]) with w the window of (t, d) (§8).
SJKV_HD inline float trellis_q(const RecordLayout& l, const uint8_t* rec, Side side, uint32_t t, uint32_t d,
                               const uint16_t* table) {
  return f16_to_f32(table[trellis::window_at(l, rec, side, t, d)]);
}

}  // namespace sjkv
