// Counter-based dropout on the CPU: the keep decision of element i is a pure function of (seed, i), so
//  - the backward pass regenerates the mask from the seed instead of storing it (dropout(grad) with the same seed),
//  - the result does not depend on the number of threads, and
//  - one 64-bit hash gives four elements 16 random bits each, an order of magnitude cheaper than ATen's per-element
//    Bernoulli draws (which made dropout about 15% of a cross-encoder's bf16 training step on 2 cores).
// The random bits are SplitMix64 outputs of the counter (Steele, Lea & Flood 2014): an element is dropped when its
// 16 bits fall below round(p * 65536), so p is used to 1/65536, and kept values are scaled by the exact inverse of
// that keep probability (unbiased).
#include <torch/extension.h>

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace {

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ULL;

inline uint64_t splitmix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

at::Tensor dropout_cpu(const at::Tensor& x_in, double p, int64_t seed) {
  TORCH_CHECK(p >= 0.0 && p <= 1.0, "dropout: p must be in [0, 1], got ", p);
  TORCH_CHECK(x_in.device().is_cpu(), "dropout: CPU tensors only");
  const at::Tensor x = x_in.contiguous();
  at::Tensor out = at::empty_like(x, at::MemoryFormat::Contiguous);
  const int64_t n = x.numel();
  const int64_t threshold = std::llround(p * 65536.0);  // dropped when the 16 bits are below it
  if (n == 0) return out;
  if (threshold >= 65536) return out.zero_();
  const uint64_t base = static_cast<uint64_t>(seed);
  const int64_t blocks = (n + 3) / 4;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "dropout_cpu", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const acc_t scale = static_cast<acc_t>(65536.0 / static_cast<double>(65536 - threshold));
    const scalar_t* xp = x.data_ptr<scalar_t>();
    scalar_t* op = out.data_ptr<scalar_t>();
    const uint64_t cut = static_cast<uint64_t>(threshold);
    at::parallel_for(0, blocks, 16384, [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b) {
        uint64_t bits = splitmix64(base + static_cast<uint64_t>(b + 1) * kGolden);
        const int64_t first = 4 * b, last = std::min<int64_t>(n, first + 4);
        for (int64_t i = first; i < last; ++i, bits >>= 16) {
          const bool keep = (bits & 0xFFFFULL) >= cut;
          op[i] = keep ? static_cast<scalar_t>(static_cast<acc_t>(xp[i]) * scale) : static_cast<scalar_t>(0);
        }
      }
    });
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(tite, m) {
  m.def("dropout(Tensor x, float p, int seed) -> Tensor");
}

TORCH_LIBRARY_IMPL(tite, CPU, m) {
  m.impl("dropout", &dropout_cpu);
}
