// Small vector loops shared by the windowed kernels. They live outside AT_DISPATCH macros because a pragma cannot
// appear inside a macro argument, and `omp simd reduction` is what lets the compiler vectorise a float dot product
// without -ffast-math (it may then reorder the sum).
#pragma once

#include <cstdint>
#include <cstdlib>

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define TITE_ALWAYS_INLINE __attribute__((always_inline))
#define TITE_TARGET_AVX2 __attribute__((target("avx2,fma")))
#else
#define TITE_ALWAYS_INLINE
#define TITE_TARGET_AVX2
#endif

// Runs the statement(s) given, which name `kD`, with kD a compile-time head size: 32 or 64 (MiniLM, BERT: the kernels
// unroll their per-key loops) when `d` is one of them, else 0 (any head size, run-time loops).
#define TITE_DISPATCH_HEAD_SIZE(d, ...) \
  do {                                  \
    if ((d) == 32) {                    \
      constexpr int kD = 32;            \
      __VA_ARGS__;                      \
    } else if ((d) == 64) {             \
      constexpr int kD = 64;            \
      __VA_ARGS__;                      \
    } else {                            \
      constexpr int kD = 0;             \
      __VA_ARGS__;                      \
    }                                   \
  } while (0)

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

}  // namespace tite_window
