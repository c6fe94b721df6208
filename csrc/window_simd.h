// Small vector loops shared by the windowed kernels. They live outside AT_DISPATCH macros because a pragma cannot
// appear inside a macro argument, and `omp simd reduction` is what lets the compiler vectorise a float dot product
// without -ffast-math (it may then reorder the sum).
#pragma once

#include <c10/util/BFloat16.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define TITE_ALWAYS_INLINE __attribute__((always_inline))
#define TITE_TARGET_AVX2 __attribute__((target("avx2,fma")))
#define TITE_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")))
#else
#define TITE_ALWAYS_INLINE
#define TITE_TARGET_AVX2
#define TITE_TARGET_AVX512
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

enum class Isa { kBaseline, kAvx2, kAvx512 };

// Which compiled version of the kernels runs on this CPU: AVX-512 (F, BW, VL, DQ), AVX2 + FMA, or the baseline.
// PYTERRIER_TITE_CPU_BASELINE=1 forces the baseline and ATEN_CPU_CAPABILITY (default / avx2) caps it as it caps
// ATen's own kernels, so that tests cover every version on one machine.
inline Isa cpu_isa() {
  const char* baseline = std::getenv("PYTERRIER_TITE_CPU_BASELINE");
  if (baseline != nullptr && baseline[0] == '1') return Isa::kBaseline;
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
  const char* cap = std::getenv("ATEN_CPU_CAPABILITY");
  const bool capped_default = cap != nullptr && std::strcmp(cap, "default") == 0;
  const bool capped_avx2 = cap != nullptr && std::strcmp(cap, "avx2") == 0;
  if (capped_default || !(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))) return Isa::kBaseline;
  if (!capped_avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
    return Isa::kAvx512;
  return Isa::kAvx2;
#else
  return Isa::kBaseline;
#endif
}

// The version the window kernels run for an element type: AVX-512 for 16-bit types only, where it widens twice the
// elements per instruction (bf16 window attention about 20% faster on a Xeon with AMX); for fp32 it measured slower
// than AVX2.
inline Isa kernel_isa(bool sixteen_bit) {
  const Isa isa = cpu_isa();
  return isa == Isa::kAvx512 && !sixteen_bit ? Isa::kAvx2 : isa;
}

// Element conversions to and from the accumulation type. bf16 is converted on its raw bits, exactly as c10::BFloat16
// converts (a shift up; round to nearest even down, NaN to 0x7FC0), but in a form the loops below vectorise: through
// c10's own operators the bf16 kernels ran slower than fp32 ones.
template <typename A, typename T>
TITE_ALWAYS_INLINE inline A widen(T x) {
  return static_cast<A>(x);
}

template <>
TITE_ALWAYS_INLINE inline float widen<float, c10::BFloat16>(c10::BFloat16 x) {
  const uint32_t bits = static_cast<uint32_t>(x.x) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

template <typename T, typename A>
TITE_ALWAYS_INLINE inline T narrow(A x) {
  return static_cast<T>(x);
}

template <>
TITE_ALWAYS_INLINE inline c10::BFloat16 narrow<c10::BFloat16, float>(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  const uint16_t rounded = static_cast<uint16_t>((bits + ((bits >> 16) & 1) + UINT32_C(0x7FFF)) >> 16);
  return c10::BFloat16(x != x ? UINT16_C(0x7FC0) : rounded, c10::BFloat16::from_bits());
}

template <typename A, typename T>
TITE_ALWAYS_INLINE inline A dot(const A* a, const T* b, int64_t d) {
  A s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t c = 0; c < d; ++c) s += a[c] * widen<A>(b[c]);
  return s;
}

template <typename A, typename T>
TITE_ALWAYS_INLINE inline void axpy(A* acc, A alpha, const T* x, int64_t d) {
#pragma omp simd
  for (int64_t c = 0; c < d; ++c) acc[c] += alpha * widen<A>(x[c]);
}

template <typename A, typename T>
TITE_ALWAYS_INLINE inline void load(A* dst, const T* src, int64_t d) {
#pragma omp simd
  for (int64_t c = 0; c < d; ++c) dst[c] = widen<A>(src[c]);
}

template <typename A, typename T>
TITE_ALWAYS_INLINE inline void store(T* dst, const A* src, int64_t d) {
#pragma omp simd
  for (int64_t c = 0; c < d; ++c) dst[c] = narrow<T>(src[c]);
}

}  // namespace tite_window
