#include "sjkv/decode_fast.h"

#include <cassert>
#include <cstddef>

#include "sjkv/record.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace sjkv {
namespace {

#if defined(__x86_64__)
// f16 -> f32 eight at a time with F16C: exact, as the table is, for every finite pattern;
// a group holding an infinity or NaN goes through the table (F16C quiets a signalling NaN).
__attribute__((target("avx2,f16c"))) void f16_row_f16c(const uint8_t* in, uint32_t d, float* out, const float* F) {
  const __m128i expo = _mm_set1_epi16(0x7C00);
  uint32_t i = 0;
  for (; i + 8 <= d; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2 * i));
    if (_mm_movemask_epi8(_mm_cmpeq_epi16(_mm_and_si128(h, expo), expo)) == 0) {
      _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
    } else {
      for (uint32_t j = i; j < i + 8; ++j) out[j] = F[load_u16(in + 2 * j)];
    }
  }
  for (; i < d; ++i) out[i] = F[load_u16(in + 2 * i)];
}

bool have_f16c() {
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
  return ok;
}
#endif

}  // namespace

void staging_decode_row_fast(StagingType t, const uint8_t* in, uint32_t d, float* out) {
  if (t != StagingType::f16) return staging_decode_row(t, in, d, out);
  const float* F = f16_to_f32_table();
#if defined(__x86_64__)
  if (have_f16c()) return f16_row_f16c(in, d, out, F);
#endif
  for (uint32_t i = 0; i < d; ++i) out[i] = F[load_u16(in + 2 * i)];
}

RecordRows::RecordRows(const RecordLayout& l) : l_(l) {
  if (l.body != Body::scalar) return;
  const uint32_t D = l.head_dim;
  koff_.resize(16u * D);
  voff_.resize(16u * D);
  for (uint32_t t = 0; t < 16; ++t)
    for (uint32_t d = 0; d < D; ++d) {
      koff_[t * D + d] = code_bit(l, Side::k, t, d);
      voff_[t * D + d] = code_bit(l, Side::v, t, d);
    }
  kstep_ = code_bit(l, Side::k, 16, 0) - code_bit(l, Side::k, 0, 0);
  vstep_ = code_bit(l, Side::v, 16, 0) - code_bit(l, Side::v, 0, 0);
}

void RecordRows::decode(const uint8_t* rec, uint32_t ta, uint32_t tb, const TrellisCodebooks& cb, float* k,
                        float* v) const {
  const RecordLayout& l = l_;
  const uint32_t D = l.head_dim;
  const float* F = f16_to_f32_table();
  std::vector<float> ksc(D), kzp(D), vch(D), qk(D), qv(D);
  for (uint32_t d = 0; d < D; ++d) {
    const uint32_t i = k_ch_idx(l, d);
    ksc[d] = F[load_u16(rec + l.k_scale + 2 * i)];
    kzp[d] = F[load_u16(rec + l.k_zero + 2 * i)];
    vch[d] = F[load_u16(rec + l.v_ch + 2 * v_ch_idx(l, d))];
  }
  const bool trellis = l.body == Body::trellis;
  const uint16_t* ktab = trellis ? codebook_table(cb, Side::k, l.bits_k) : nullptr;
  const uint16_t* vtab = trellis ? codebook_table(cb, Side::v, l.bits_v) : nullptr;
  for (uint32_t t = ta; t < tb; ++t) {
    if (trellis) {
      for (uint32_t d = 0; d < D; ++d) qk[d] = F[ktab[trellis::window_at(l, rec, Side::k, t, d)]];
      for (uint32_t d = 0; d < D; ++d) qv[d] = F[vtab[trellis::window_at(l, rec, Side::v, t, d)]];
    } else {
      const uint32_t* ok = &koff_[(t % 16) * D];
      const uint32_t* ov = &voff_[(t % 16) * D];
      const uint32_t bk = (t / 16) * kstep_, bv = (t / 16) * vstep_;
      const uint8_t* pk = rec + l.k_payload;
      const uint8_t* pv = rec + l.v_payload;
      for (uint32_t d = 0; d < D; ++d) qk[d] = static_cast<float>(get_bits(pk, ok[d] + bk, l.bits_k));
      for (uint32_t d = 0; d < D; ++d) qv[d] = static_cast<float>(get_bits(pv, ov[d] + bv, l.bits_v));
    }
    float* kr = k + static_cast<size_t>(t - ta) * D;
    float* vr = v + static_cast<size_t>(t - ta) * D;
    const float tok = F[load_u16(rec + l.k_tok + 2 * t)];
    const float vs = F[load_u16(rec + l.v_scale + 2 * t)], vz = F[load_u16(rec + l.v_zero + 2 * t)];
    for (uint32_t d = 0; d < D; ++d) kr[d] = decode_affine(qk[d], ksc[d], kzp[d], tok);
    for (uint32_t d = 0; d < D; ++d) vr[d] = decode_affine(qv[d], vs, vz, vch[d]);
  }
}

void resolve_rows(const CacheView& v, const RecordRows& rows, uint32_t h, uint32_t p0, uint32_t p1, float* k,
                  float* vout) {
  const uint32_t D = v.layout.head_dim, G = v.layout.group;
  assert(rows.layout().bytes == v.layout.bytes && rows.layout().head_dim == D && rows.layout().group == G);
  const float* F = f16_to_f32_table();
  uint32_t p = p0;
  while (p < p1) {
    const size_t o = static_cast<size_t>(p - p0) * D;
    const RowLocation r = locate_row(v, p, h);
    if (r.kind == RowLocation::record) {
      // The rest of this record's rows in [p, p1), the body's end B at most.
      uint32_t pe = p + (G - r.t);
      if (pe > p1) pe = p1;
      if (pe > v.B) pe = v.B;
      rows.decode(r.rec, r.t, r.t + (pe - p), v.codebooks, k + o, vout + o);
      p = pe;
      continue;
    }
    if (r.kind == RowLocation::sink_f16) {
      for (uint32_t d = 0; d < D; ++d) {
        k[o + d] = F[r.f16[d]];
        vout[o + d] = F[r.f16[D + d]];
      }
    } else {
      staging_decode_row_fast(v.staging, r.entry, D, k + o);
      staging_decode_row_fast(v.staging, r.entry + v.row_bytes(), D, vout + o);
    }
    ++p;
  }
}

}  // namespace sjkv
