// Host-device plumbing shared by the CPU codec and the CUDA kernels.
//
// The format fixes one IEEE-754 rounding per operation (docs/SPEC.md §1). On the host we
// compile with -ffp-contract=off and SSE arithmetic (FLT_EVAL_METHOD == 0), so plain
// operators are exact; on the device nvcc would contract a*b+c, so the helpers below use
// the _rn intrinsics there. Every per-element formula of the codec goes through them.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define SJKV_HD __host__ __device__
#define SJKV_DEVICE_CODE 1
#else
#define SJKV_HD
#endif

#if !defined(__CUDACC__) && defined(__FLT_EVAL_METHOD__) && __FLT_EVAL_METHOD__ != 0
#error "sjkv needs FLT_EVAL_METHOD == 0 (no extended-precision intermediates)"
#endif

#if defined(__FAST_MATH__)
#error "sjkv codec code must not be compiled with -ffast-math"
#endif

namespace sjkv {

SJKV_HD inline uint32_t f32_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
#endif
}

SJKV_HD inline float f32_from_bits(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, 4);
  return x;
#endif
}

SJKV_HD inline uint64_t f64_bits(double x) {
#if defined(__CUDA_ARCH__)
  return static_cast<uint64_t>(__double_as_longlong(x));
#else
  uint64_t u;
  std::memcpy(&u, &x, 8);
  return u;
#endif
}

SJKV_HD inline double f64_from_bits(uint64_t u) {
#if defined(__CUDA_ARCH__)
  return __longlong_as_double(static_cast<long long>(u));
#else
  double x;
  std::memcpy(&x, &u, 8);
  return x;
#endif
}

// One-rounding binary32 / binary64 operations (docs/SPEC.md §1.1).
namespace op {
#if defined(__CUDA_ARCH__)
__device__ inline float fadd(float a, float b) { return __fadd_rn(a, b); }
__device__ inline float fsub(float a, float b) { return __fsub_rn(a, b); }
__device__ inline float fmul(float a, float b) { return __fmul_rn(a, b); }
__device__ inline float fdiv(float a, float b) { return __fdiv_rn(a, b); }
__device__ inline float sqrt32(float a) { return __fsqrt_rn(a); }
__device__ inline double dadd(double a, double b) { return __dadd_rn(a, b); }
__device__ inline double dsub(double a, double b) { return __dsub_rn(a, b); }
__device__ inline double dmul(double a, double b) { return __dmul_rn(a, b); }
__device__ inline double ddiv(double a, double b) { return __ddiv_rn(a, b); }
__device__ inline double sqrt64(double a) { return __dsqrt_rn(a); }
__device__ inline double fma64(double a, double b, double c) { return __fma_rn(a, b, c); }
__device__ inline float rne_int(float x) { return rintf(x); }
#else
inline float fadd(float a, float b) { return a + b; }
inline float fsub(float a, float b) { return a - b; }
inline float fmul(float a, float b) { return a * b; }
inline float fdiv(float a, float b) { return a / b; }
inline float sqrt32(float a) { return __builtin_sqrtf(a); }
inline double dadd(double a, double b) { return a + b; }
inline double dsub(double a, double b) { return a - b; }
inline double dmul(double a, double b) { return a * b; }
inline double ddiv(double a, double b) { return a / b; }
inline double sqrt64(double a) { return __builtin_sqrt(a); }
inline double fma64(double a, double b, double c) { return __builtin_fma(a, b, c); }
inline float rne_int(float x) { return __builtin_rintf(x); }
#endif

// Strict min/max of docs/SPEC.md §1.1: on equality the first argument is kept.
template <class T>
SJKV_HD inline T minS(T a, T b) { return (b < a) ? b : a; }
template <class T>
SJKV_HD inline T maxS(T a, T b) { return (a < b) ? b : a; }
}  // namespace op

}  // namespace sjkv
