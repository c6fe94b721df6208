// Small vector loops shared by the windowed kernels. They live outside AT_DISPATCH macros because a pragma cannot
// appear inside a macro argument, and `omp simd reduction` is what lets the compiler vectorise a float dot product
// without -ffast-math (it may then reorder the sum).
#pragma once

#include <cstdint>

namespace tite_window {

template <typename A, typename T>
inline A dot(const A* a, const T* b, int64_t d) {
  A s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t c = 0; c < d; ++c) s += a[c] * static_cast<A>(b[c]);
  return s;
}

template <typename A, typename T>
inline void axpy(A* acc, A alpha, const T* x, int64_t d) {
#pragma omp simd
  for (int64_t c = 0; c < d; ++c) acc[c] += alpha * static_cast<A>(x[c]);
}

template <typename A, typename T>
inline void load(A* dst, const T* src, int64_t d) {
#pragma omp simd
  for (int64_t c = 0; c < d; ++c) dst[c] = static_cast<A>(src[c]);
}

template <typename A, typename T>
inline void store(T* dst, const A* src, int64_t d) {
#pragma omp simd
  for (int64_t c = 0; c < d; ++c) dst[c] = static_cast<T>(src[c]);
}

}  // namespace tite_window
