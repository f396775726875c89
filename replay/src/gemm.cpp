// Matrix products over weights kept in their GGUF blocks (gemm.h). The GotoBLAS / BLIS plan
// in dot-product form: a panel of kPanelRows weight rows is dequantized once into f32 (the
// only copy of the weights that ever exists, one panel per thread), and register tiles of 4
// tokens x 3 rows stream it in k blocks of kBlockK, each tile holding 12 eight-lane
// accumulators. Lanes persist across k blocks in a small buffer, so the sum of every output
// element is the one order gemm.h states whatever the blocking.
// One to four tokens (decode) take fused tiles instead: no panel, each weight dequantized in
// registers by dequant_avx2.h's walker of its block type and multiply-added at once. With
// AVX-512, batches take tiles of 8 tokens x 6 rows over a panel whose row pairs are
// interleaved, two rows' eight lanes in one register (tile512_final).
#include "sjkv/replay/gemm.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "dequant_avx2.h"
#include "sjkv/parallel.h"
#include "sjkv/replay/dequant.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace sjkv {
namespace replay {
namespace {

constexpr size_t kTileTokens = 4;
constexpr size_t kTileRows = 3;
constexpr size_t kPanelRows = 48;    // a multiple of kTileRows: 48 x k f32 stays in L2
constexpr size_t kBlockTokens = 4;   // tokens whose lanes are kept while a panel is streamed
constexpr size_t kBlockK = 2048;     // a multiple of 8; every layer of both models is one block

float tree8(const float* l) { return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7])); }

// Lanes of an M x N tile over k in [k0, k1) (k1 - k0 a multiple of 8): lanes[t][r] at
// lanes + (t * ld + r) * 8; init starts them at zero.
template <size_t M, size_t N>
void tile_portable(const float* const* xs, const float* const* ws, size_t k0, size_t k1, float* lanes, size_t ld,
                   bool init) {
  for (size_t t = 0; t < M; ++t)
    for (size_t r = 0; r < N; ++r) {
      float* l = lanes + (t * ld + r) * 8;
      if (init) std::fill(l, l + 8, 0.0f);
      for (size_t k = k0; k < k1; k += 8)
        for (size_t j = 0; j < 8; ++j) l[j] = std::fma(xs[t][k + j], ws[r][k + j], l[j]);
    }
}

#if defined(__x86_64__)
template <size_t M, size_t N>
__attribute__((target("avx2,fma"))) void tile_avx2(const float* const* xs, const float* const* ws, size_t k0,
                                                   size_t k1, float* lanes, size_t ld, bool init) {
  __m256 acc[M][N];
  for (size_t t = 0; t < M; ++t)
    for (size_t r = 0; r < N; ++r)
      acc[t][r] = init ? _mm256_setzero_ps() : _mm256_loadu_ps(lanes + (t * ld + r) * 8);
  for (size_t k = k0; k < k1; k += 8) {
    __m256 w[N];
    for (size_t r = 0; r < N; ++r) w[r] = _mm256_loadu_ps(ws[r] + k);
    for (size_t t = 0; t < M; ++t) {
      const __m256 x = _mm256_loadu_ps(xs[t] + k);
      for (size_t r = 0; r < N; ++r) acc[t][r] = _mm256_fmadd_ps(x, w[r], acc[t][r]);
    }
  }
  for (size_t t = 0; t < M; ++t)
    for (size_t r = 0; r < N; ++r) _mm256_storeu_ps(lanes + (t * ld + r) * 8, acc[t][r]);
}

// ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)) of four accumulators at once, the tree of tree8.
__attribute__((target("avx2"))) inline __m128 reduce4(__m256 a, __m256 b, __m256 c, __m256 d) {
  const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
  return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

// The whole of k (a multiple of 8) in one call: the lanes never leave the registers, and the
// sums go straight to y[t * ldy + r].
template <size_t M, size_t N>
__attribute__((target("avx2,fma"))) void tile_avx2_final(const float* const* xs, const float* const* ws, size_t k,
                                                         float* y, size_t ldy) {
  __m256 acc[4][N];
  for (size_t t = 0; t < 4; ++t)
    for (size_t r = 0; r < N; ++r) acc[t][r] = _mm256_setzero_ps();
  for (size_t i = 0; i < k; i += 8) {
    __m256 w[N];
    for (size_t r = 0; r < N; ++r) w[r] = _mm256_loadu_ps(ws[r] + i);
    for (size_t t = 0; t < M; ++t) {
      const __m256 x = _mm256_loadu_ps(xs[t] + i);
      for (size_t r = 0; r < N; ++r) acc[t][r] = _mm256_fmadd_ps(x, w[r], acc[t][r]);
    }
  }
  for (size_t r = 0; r < N; ++r) {
    float s[4];
    _mm_storeu_ps(s, reduce4(acc[0][r], acc[1][r], acc[2][r], acc[3][r]));
    for (size_t t = 0; t < M; ++t) y[t * ldy + r] = s[t];
  }
}
#endif

#if defined(__x86_64__)
// Decode (one to four tokens): each weight is dequantized in registers by dequant_avx2.h's
// walker and multiply-added where it is made, never stored; a row's lanes run over its blocks
// in increasing k, so the sums are the order of gemm.h like every other path.
template <size_t M>
struct FmaSink {
  __m256 acc[M];  // token t's lanes of one row
  const float* const* xs;
  size_t k0;
  __attribute__((target("avx2,fma,f16c"), always_inline)) inline void operator()(int g, __m256 w) {
#pragma GCC unroll 4
    for (size_t t = 0; t < M; ++t) acc[t] = _mm256_fmadd_ps(_mm256_loadu_ps(xs[t] + k0 + 8 * g), w, acc[t]);
  }
};

// The sinks of the rows live in registers only when every loop over them is unrolled.
template <uint32_t Type, size_t M, size_t N>
__attribute__((target("avx2,fma,f16c"))) void fused_tile(const float* const* xs, const uint8_t* const* ws, size_t nb,
                                                         float* y, size_t ldy) {
  using B = blocks::avx2_block<Type>;
  FmaSink<M> sink[N];
#pragma GCC unroll 4
  for (size_t r = 0; r < N; ++r) {
    sink[r].xs = xs;
#pragma GCC unroll 4
    for (size_t t = 0; t < M; ++t) sink[r].acc[t] = _mm256_setzero_ps();
  }
  for (size_t i = 0; i < nb; ++i) {
#pragma GCC unroll 4
    for (size_t r = 0; r < N; ++r) {
      sink[r].k0 = i * B::kValues;
      B::walk(ws[r] + i * B::kBytes, sink[r]);
    }
  }
  for (size_t r = 0; r < N; ++r) {
    __m256 a[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (size_t t = 0; t < M; ++t) a[t] = sink[r].acc[t];
    float s[4];
    _mm_storeu_ps(s, reduce4(a[0], a[1], a[2], a[3]));
    for (size_t t = 0; t < M; ++t) y[t * ldy + r] = s[t];
  }
}

constexpr size_t kFusedRows = 4;  // rows a fused tile walks side by side
using FusedFn = void (*)(const float* const*, const uint8_t* const*, size_t, float*, size_t);

template <uint32_t Type>
FusedFn fused_of(size_t m, size_t n) {
  static const FusedFn t[kTileTokens][kFusedRows] = {
      {fused_tile<Type, 1, 1>, fused_tile<Type, 1, 2>, fused_tile<Type, 1, 3>, fused_tile<Type, 1, 4>},
      {fused_tile<Type, 2, 1>, fused_tile<Type, 2, 2>, fused_tile<Type, 2, 3>, fused_tile<Type, 2, 4>},
      {fused_tile<Type, 3, 1>, fused_tile<Type, 3, 2>, fused_tile<Type, 3, 3>, fused_tile<Type, 3, 4>},
      {fused_tile<Type, 4, 1>, fused_tile<Type, 4, 2>, fused_tile<Type, 4, 3>, fused_tile<Type, 4, 4>}};
  return t[m - 1][n - 1];
}

// The fused tile of an M-token product over `type`, or nullptr for a type without a walker.
FusedFn fused_fn(uint32_t type, size_t m, size_t n) {
  switch (type) {
    case kGgmlF32: return fused_of<kGgmlF32>(m, n);
    case kGgmlF16: return fused_of<kGgmlF16>(m, n);
    case kGgmlBF16: return fused_of<kGgmlBF16>(m, n);
    case kGgmlQ4_0: return fused_of<kGgmlQ4_0>(m, n);
    case kGgmlQ4_1: return fused_of<kGgmlQ4_1>(m, n);
    case kGgmlQ5_0: return fused_of<kGgmlQ5_0>(m, n);
    case kGgmlQ5_1: return fused_of<kGgmlQ5_1>(m, n);
    case kGgmlQ8_0: return fused_of<kGgmlQ8_0>(m, n);
    case kGgmlQ4_K: return fused_of<kGgmlQ4_K>(m, n);
    case kGgmlQ6_K: return fused_of<kGgmlQ6_K>(m, n);
    case kGgmlQ2_K: return fused_of<kGgmlQ2_K>(m, n);
    case kGgmlQ3_K: return fused_of<kGgmlQ3_K>(m, n);
    case kGgmlQ5_K: return fused_of<kGgmlQ5_K>(m, n);
    case kGgmlIQ4_NL: return fused_of<kGgmlIQ4_NL>(m, n);
    case kGgmlIQ4_XS: return fused_of<kGgmlIQ4_XS>(m, n);
    default: return nullptr;
  }
}

uint32_t walker_values(uint32_t type) {
  return type == kGgmlF32 || type == kGgmlF16 || type == kGgmlBF16 ? 8 : dequant_block_values(type);
}
#endif

#if defined(__x86_64__)
// AVX-512 batch tile: M (up to 8) tokens x 3 row pairs over an interleaved panel (pair j at pairs + 2 k j,
// its k block i at + 2 i: row 2j's eight values, then row 2j+1's). Each lane gets the fused
// multiply-adds tile_avx2_final gives it, in the same order, and the same tree at the end.
constexpr size_t kPairRows = 6;
// GCC 12's AVX-512 headers fill unused operands with an "undefined" value that -Wuninitialized
// reports inside the intrinsics (a known false positive).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
constexpr size_t kTokens512 = 8;
template <size_t M>
__attribute__((target("avx512f,avx512dq,avx2,fma"))) void tile512_final(const float* const* xs, const float* pairs,
                                                                       size_t k, float* y, size_t ldy) {
  __m512 acc[kTokens512][3];
  for (size_t t = 0; t < kTokens512; ++t)
    for (size_t j = 0; j < 3; ++j) acc[t][j] = _mm512_setzero_ps();
  for (size_t i = 0; i < k; i += 8) {
    __m512 w[3];
    for (size_t j = 0; j < 3; ++j) w[j] = _mm512_loadu_ps(pairs + 2 * k * j + 2 * i);
    for (size_t t = 0; t < M; ++t) {
      const __m512 x = _mm512_broadcast_f32x8(_mm256_loadu_ps(xs[t] + i));
      for (size_t j = 0; j < 3; ++j) acc[t][j] = _mm512_fmadd_ps(x, w[j], acc[t][j]);
    }
  }
  for (size_t t0 = 0; t0 < M; t0 += 4)
    for (size_t j = 0; j < 3; ++j) {
      float lo[4], hi[4];
      _mm_storeu_ps(lo, reduce4(_mm512_castps512_ps256(acc[t0][j]), _mm512_castps512_ps256(acc[t0 + 1][j]),
                                _mm512_castps512_ps256(acc[t0 + 2][j]), _mm512_castps512_ps256(acc[t0 + 3][j])));
      _mm_storeu_ps(hi, reduce4(_mm512_extractf32x8_ps(acc[t0][j], 1), _mm512_extractf32x8_ps(acc[t0 + 1][j], 1),
                                _mm512_extractf32x8_ps(acc[t0 + 2][j], 1), _mm512_extractf32x8_ps(acc[t0 + 3][j], 1)));
      for (size_t t = t0; t < std::min(M, t0 + 4); ++t) {
        y[t * ldy + 2 * j] = lo[t - t0];
        y[t * ldy + 2 * j + 1] = hi[t - t0];
      }
    }
}
#pragma GCC diagnostic pop
using Tile512Fn = void (*)(const float* const*, const float*, size_t, float*, size_t);
Tile512Fn tile512(size_t m) {
  static const Tile512Fn t[kTokens512] = {tile512_final<1>, tile512_final<2>, tile512_final<3>, tile512_final<4>,
                                          tile512_final<5>, tile512_final<6>, tile512_final<7>, tile512_final<8>};
  return t[m - 1];
}

bool have_avx512() {
  static const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
  return ok;
}
#endif

using TileFn = void (*)(const float* const*, const float* const*, size_t, size_t, float*, size_t, bool);

#define SJKV_TILE_TABLE(name, fn)                                                         \
  TileFn name(size_t m, size_t n) {                                                       \
    static const TileFn t[kTileTokens][kTileRows] = {{fn<1, 1>, fn<1, 2>, fn<1, 3>},      \
                                                     {fn<2, 1>, fn<2, 2>, fn<2, 3>},      \
                                                     {fn<3, 1>, fn<3, 2>, fn<3, 3>},      \
                                                     {fn<4, 1>, fn<4, 2>, fn<4, 3>}};     \
    return t[m - 1][n - 1];                                                               \
  }
SJKV_TILE_TABLE(portable_tile, tile_portable)
#if defined(__x86_64__)
SJKV_TILE_TABLE(avx2_tile, tile_avx2)
#endif
#undef SJKV_TILE_TABLE

#if defined(__x86_64__)
using FinalFn = void (*)(const float* const*, const float* const*, size_t, float*, size_t);
FinalFn avx2_final(size_t m, size_t n) {
  static const FinalFn t[kTileTokens][kTileRows] = {
      {tile_avx2_final<1, 1>, tile_avx2_final<1, 2>, tile_avx2_final<1, 3>},
      {tile_avx2_final<2, 1>, tile_avx2_final<2, 2>, tile_avx2_final<2, 3>},
      {tile_avx2_final<3, 1>, tile_avx2_final<3, 2>, tile_avx2_final<3, 3>},
      {tile_avx2_final<4, 1>, tile_avx2_final<4, 2>, tile_avx2_final<4, 3>}};
  return t[m - 1][n - 1];
}
#endif

bool have_avx2() { return dequant_simd(); }  // AVX2, FMA and F16C, checked once

// Panels are per thread and reused across calls (decode calls these thousands of times).
std::vector<float>& panel_buffer(size_t n) {
  thread_local std::vector<float> buf;
  if (buf.size() < n) buf.resize(n);
  return buf;
}
std::vector<float>& lanes_buffer() {
  thread_local std::vector<float> buf(kBlockTokens * kPanelRows * 8);
  return buf;
}

// Rows [r0, r0 + nr) of w as f32 row pointers: in place for f32 matrices, else dequantized
// into `buf` ([nr][cols]).
void pack(const WeightMatrix& w, size_t r0, size_t nr, bool simd, std::vector<float>& buf, const float** rows) {
  if (w.type == kGgmlF32) {
    for (size_t i = 0; i < nr; ++i) rows[i] = reinterpret_cast<const float*>(w.data + (r0 + i) * w.row_bytes);
    return;
  }
  for (size_t i = 0; i < nr; ++i) {
    float* dst = buf.data() + i * w.cols;
    dequantize_row_with(simd, w.type, w.data + (r0 + i) * w.row_bytes, dst, w.cols);
    rows[i] = dst;
  }
}

// Whether gemm_with takes the AVX-512 batch tiles for this product.
bool uses_tile512(GemmIsa isa, const WeightMatrix& w, size_t n) {
  return isa == GemmIsa::avx512 && w.cols % 8 == 0 && w.cols <= kBlockK && n > kTileTokens;
}

// One panel of rows against all n tokens.
void panel_product(const WeightMatrix& w, size_t r0, const float* x, size_t ldx, size_t n, float* y, size_t ldy,
                   GemmIsa isa) {
  const bool simd = isa != GemmIsa::portable, t512 = uses_tile512(isa, w, n);
  const size_t nr = std::min(kPanelRows, w.rows - r0), K = w.cols, K8 = K / 8 * 8;
  // f32 rows are used in place, except by the AVX-512 tiles, which read them as interleaved pairs.
  std::vector<float>& buf = panel_buffer(w.type == kGgmlF32 && !t512 ? 0 : kPanelRows * K);
  const float* rows[kPanelRows];
#if defined(__x86_64__)
  const FusedFn fused = simd && K8 == K && n <= kTileTokens ? fused_fn(w.type, n, kFusedRows) : nullptr;
  if (fused) {
    // Decode: each weight is used by one tile only; it is dequantized in registers and used
    // at once (fused_tile).
    const float* xs[kTileTokens];
    for (size_t i = 0; i < n; ++i) xs[i] = x + i * ldx;
    const size_t nb = K / walker_values(w.type);
    for (size_t r = 0; r < nr; r += kFusedRows) {
      const size_t c = std::min(kFusedRows, nr - r);
      const uint8_t* ws[kFusedRows];
      for (size_t i = 0; i < c; ++i) ws[i] = w.data + (r0 + r + i) * w.row_bytes;
      (c == kFusedRows ? fused : fused_fn(w.type, n, c))(xs, ws, nb, y + r0 + r, ldy);
    }
    return;
  }
  if (t512 && nr >= kPairRows) {
    // Rows [0, n6) as interleaved pairs, the rest row-major after them for the AVX2 tiles.
    const size_t n6 = nr / kPairRows * kPairRows;
    thread_local std::vector<float> two;
    if (two.size() < 2 * K) two.resize(2 * K);
    float* P = buf.data();
    for (size_t r = 0; r < n6; r += 2) {
      dequantize_row_with(true, w.type, w.data + (r0 + r) * w.row_bytes, two.data(), K);
      dequantize_row_with(true, w.type, w.data + (r0 + r + 1) * w.row_bytes, two.data() + K, K);
      float* dst = P + r * K;
      for (size_t i = 0; i < K; i += 8) {
        std::memcpy(dst + 2 * i, two.data() + i, 32);
        std::memcpy(dst + 2 * i + 8, two.data() + K + i, 32);
      }
    }
    for (size_t r = n6; r < nr; ++r) {
      float* dst = P + r * K;
      dequantize_row_with(true, w.type, w.data + (r0 + r) * w.row_bytes, dst, K);
      rows[r] = dst;
    }
    for (size_t t = 0; t < n; t += kTokens512) {
      const size_t m = std::min(kTokens512, n - t);
      const float* xs[kTokens512];
      for (size_t i = 0; i < m; ++i) xs[i] = x + (t + i) * ldx;
      for (size_t r = 0; r < n6; r += kPairRows) tile512(m)(xs, P + r * K, K, y + t * ldy + r0 + r, ldy);
      for (size_t u = 0; u < m; u += kTileTokens)
        for (size_t r = n6; r < nr; r += kTileRows)
          avx2_final(std::min(kTileTokens, m - u), std::min(kTileRows, nr - r))(xs + u, rows + r, K,
                                                                              y + (t + u) * ldy + r0 + r, ldy);
    }
    return;
  }
#endif
  pack(w, r0, nr, simd, buf, rows);
#if defined(__x86_64__)
  if (simd && K8 == K && K <= kBlockK) {  // the usual shapes: one k block, no tail
    for (size_t t = 0; t < n; t += kTileTokens) {
      const size_t m = std::min(kTileTokens, n - t);
      const float* xs[kTileTokens];
      for (size_t i = 0; i < m; ++i) xs[i] = x + (t + i) * ldx;
      for (size_t r = 0; r < nr; r += kTileRows)
        avx2_final(m, std::min(kTileRows, nr - r))(xs, rows + r, K, y + t * ldy + r0 + r, ldy);
    }
    return;
  }
#endif
  float* lanes = lanes_buffer().data();
#if defined(__x86_64__)
  TileFn (*table)(size_t, size_t) = simd ? avx2_tile : portable_tile;
#else
  TileFn (*table)(size_t, size_t) = portable_tile;
#endif
  for (size_t tb = 0; tb < n; tb += kBlockTokens) {
    const size_t mt = std::min(kBlockTokens, n - tb);
    if (K8 == 0) std::fill(lanes, lanes + kBlockTokens * kPanelRows * 8, 0.0f);
    for (size_t kb = 0; kb < K8; kb += kBlockK) {
      const size_t ke = std::min(K8, kb + kBlockK);
      for (size_t t = 0; t < mt; t += kTileTokens) {
        const size_t m = std::min(kTileTokens, mt - t);
        const float* xs[kTileTokens];
        for (size_t i = 0; i < m; ++i) xs[i] = x + (tb + t + i) * ldx;
        for (size_t r = 0; r < nr; r += kTileRows) {
          const size_t c = std::min(kTileRows, nr - r);
          table(m, c)(xs, rows + r, kb, ke, lanes + (t * kPanelRows + r) * 8, kPanelRows, kb == 0);
        }
      }
    }
    for (size_t t = 0; t < mt; ++t) {
      const float* xt = x + (tb + t) * ldx;
      float* yt = y + (tb + t) * ldy + r0;
      for (size_t r = 0; r < nr; ++r) {
        float s = tree8(lanes + (t * kPanelRows + r) * 8);
        for (size_t k = K8; k < K; ++k) s = std::fma(xt[k], rows[r][k], s);
        yt[r] = s;
      }
    }
  }
}

}  // namespace

WeightMatrix WeightMatrix::of(uint32_t type, size_t rows, size_t cols, const void* data) {
  const uint32_t bv = dequant_block_values(type);
  if (bv == 0) throw std::invalid_argument("WeightMatrix: unsupported ggml type " + std::to_string(type));
  if (cols % bv != 0)
    throw std::invalid_argument("WeightMatrix: " + std::to_string(cols) + " columns is not a whole number of " +
                                std::to_string(bv) + "-value blocks");
  WeightMatrix w;
  w.type = type;
  w.rows = rows;
  w.cols = cols;
  w.data = static_cast<const uint8_t*>(data);
  w.row_bytes = cols / bv * dequant_block_bytes(type);
  return w;
}

WeightMatrix WeightMatrix::f32(const float* data, size_t rows, size_t cols, size_t ld) {
  WeightMatrix w = of(kGgmlF32, rows, cols, data);
  w.row_bytes = ld * sizeof(float);
  return w;
}

WeightMatrix WeightMatrix::strided(uint32_t type, size_t rows, size_t cols, const void* data, size_t row_bytes) {
  WeightMatrix w = of(type, rows, cols, data);
  if (row_bytes < w.row_bytes)
    throw std::invalid_argument("WeightMatrix: rows " + std::to_string(row_bytes) + " bytes apart hold " +
                                std::to_string(w.row_bytes) + " bytes each");
  w.row_bytes = row_bytes;
  return w;
}

GemmIsa gemm_best() {
#if defined(__x86_64__)
  if (have_avx2() && have_avx512()) return GemmIsa::avx512;
#endif
  return have_avx2() ? GemmIsa::avx2 : GemmIsa::portable;
}

void gemm(const WeightMatrix& w, const float* x, size_t n, float* y, size_t ldy, int n_threads, size_t ldx) {
  gemm_with(gemm_best(), w, x, n, y, ldy, n_threads, ldx);
}

void gemm_with(GemmIsa isa, const WeightMatrix& w, const float* x, size_t n, float* y, size_t ldy, int n_threads,
               size_t ldx) {
  if (isa != GemmIsa::portable && !have_avx2())
    throw std::invalid_argument("gemm_with: AVX2 is not available on this machine");
#if defined(__x86_64__)
  if (isa == GemmIsa::avx512 && !have_avx512())
#else
  if (isa == GemmIsa::avx512)
#endif
    throw std::invalid_argument("gemm_with: AVX-512 is not available on this machine");
  if (ldx == 0) ldx = w.cols;
  if (ldx < w.cols || ldy < w.rows) throw std::invalid_argument("gemm: leading dimension below the row length");
  if (n == 0 || w.rows == 0) return;
  const long panels = static_cast<long>((w.rows + kPanelRows - 1) / kPanelRows);
  const int nt = n_threads > 0 ? n_threads : omp_get_max_threads();
  if (nt == 1 || panels == 1 || w.rows * w.cols * n < 32768) {
    for (long p = 0; p < panels; ++p) panel_product(w, static_cast<size_t>(p) * kPanelRows, x, ldx, n, y, ldy, isa);
    return;
  }
  // Panels to whichever thread is free (sjkv/parallel.h): one the OS has not scheduled holds
  // no share of them back. A panel's sums do not depend on the thread.
  parallel_for(panels, nt, [&](long p) { panel_product(w, static_cast<size_t>(p) * kPanelRows, x, ldx, n, y, ldy, isa); });
}

void gemm_reference(const WeightMatrix& w, const float* x, size_t n, float* y, size_t ldy, size_t ldx) {
  if (ldx == 0) ldx = w.cols;
  const size_t K = w.cols, K8 = K / 8 * 8;
  std::vector<float> row(K);
  for (size_t r = 0; r < w.rows; ++r) {
    dequantize_row(w.type, w.data + r * w.row_bytes, row.data(), K);
    for (size_t t = 0; t < n; ++t) {
      const float* xt = x + t * ldx;
      float l[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (size_t k = 0; k < K8; ++k) l[k % 8] = std::fma(xt[k], row[k], l[k % 8]);
      float s = tree8(l);
      for (size_t k = K8; k < K; ++k) s = std::fma(xt[k], row[k], s);
      y[t * ldy + r] = s;
    }
  }
}

}  // namespace replay
}  // namespace sjkv
