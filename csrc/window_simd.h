// Small vector loops shared by the windowed kernels. They live outside AT_DISPATCH macros because a pragma cannot
// appear inside a macro argument, and `omp simd reduction` is what lets the compiler vectorise a float dot product
// without -ffast-math (it may then reorder the sum).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define TITE_ALWAYS_INLINE __attribute__((always_inline))
#define TITE_TARGET_AVX2 __attribute__((target("avx2,fma")))
#else
#define TITE_ALWAYS_INLINE
#define TITE_TARGET_AVX2
#endif

namespace tite_window {

// Whether the AVX2 + FMA versions of the kernels may run on this CPU (PYTERRIER_TITE_CPU_BASELINE=1 forces the
// baseline versions, so that tests cover them on any machine).
inline bool cpu_has_avx2_fma() {
  const char* baseline = std::getenv("PYTERRIER_TITE_CPU_BASELINE");
  if (baseline != nullptr && baseline[0] == '1') return false;
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

template <typename A, typename T>
TITE_ALWAYS_INLINE inline A dot(const A* a, const T* b, int64_t d) {
  A s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t c = 0; c < d; ++c) s += a[c] * static_cast<A>(b[c]);
  return s;
}

template <typename A, typename T>
TITE_ALWAYS_INLINE inline void axpy(A* acc, A alpha, const T* x, int64_t d) {
#pragma omp simd
  for (int64_t c = 0; c < d; ++c) acc[c] += alpha * static_cast<A>(x[c]);
}

template <typename A, typename T>
TITE_ALWAYS_INLINE inline void load(A* dst, const T* src, int64_t d) {
#pragma omp simd
  for (int64_t c = 0; c < d; ++c) dst[c] = static_cast<A>(src[c]);
}

template <typename A, typename T>
TITE_ALWAYS_INLINE inline void store(T* dst, const A* src, int64_t d) {
#pragma omp simd
  for (int64_t c = 0; c < d; ++c) dst[c] = static_cast<T>(src[c]);
}

// exp(x) for the softmax's x = score - max <= 0, within 2 ulp of std::exp (Cephes' expf: 2^n times a degree-7
// polynomial on [-ln2/2, ln2/2]) and in plain arithmetic, so a `omp simd` loop runs it 8 or 16 lanes at a time where
// std::exp is a scalar call per key. Below -87 the result is clamped at ~1.6e-38 instead of 0, next to a row sum >= 1.
TITE_ALWAYS_INLINE inline float exp_nonpositive(float x) {
  x = x < -87.0f ? -87.0f : x;
  const float n = std::floor(x * 1.44269504088896341f + 0.5f);
  const float r = (x - n * 0.693359375f) - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return p * scale;
}

TITE_ALWAYS_INLINE inline double exp_nonpositive(double x) { return std::exp(x); }

// s[e] <- exp(s[e] - max_e s) for e < n (n >= 1); returns their sum and writes the max to *max_out.
template <typename A>
TITE_ALWAYS_INLINE inline A softmax_numerators(A* s, int64_t n, A* max_out) {
  A m = s[0];
#pragma omp simd reduction(max : m)
  for (int64_t e = 1; e < n; ++e) m = s[e] > m ? s[e] : m;
  A sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t e = 0; e < n; ++e) {
    s[e] = exp_nonpositive(s[e] - m);
    sum += s[e];
  }
  *max_out = m;
  return sum;
}

}  // namespace tite_window
