// Banded ("windowed") matrix products of the sparse cross-encoder, CPU kernels.
//
// For inputs flattened to [N, L, d] and a window w >= 0 (band width 2w+1):
//   window_matmul(q, k, w)[n, i, j]       = q[n, i] . k[n, i + j - w]      (0 where i + j - w is outside [0, L))
//   unwindow_matmul(p, v, w)[n, i]        = sum_j p[n, i, j] * v[n, i + j - w]  (out-of-range terms skipped)
//   unwindow_matmul_t(p, x, w)[n, t]      = sum_j p[n, t - j + w, j] * x[n, t - j + w]  (transpose of the band)
// The last one is the adjoint that both backward passes need; every output element is written by exactly one thread
// (gather, no atomics). Accumulation is in float (double for double inputs).
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <ATen/OpMathType.h>

#include <algorithm>
#include <vector>

#include "window_simd.h"

namespace {

void check_band(const at::Tensor& a, const at::Tensor& b, int64_t window, const char* name) {
  TORCH_CHECK(window >= 0, name, ": window must be >= 0, got ", window);
  TORCH_CHECK(a.dim() == 3 && b.dim() == 3, name, ": inputs must be [N, L, *] (flatten leading dims)");
  TORCH_CHECK(a.size(0) == b.size(0) && a.size(1) == b.size(1), name, ": batch or length mismatch");
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), name, ": dtype mismatch");
}

at::Tensor window_matmul_cpu(const at::Tensor& q_in, const at::Tensor& k_in, int64_t window) {
  check_band(q_in, k_in, window, "window_matmul");
  TORCH_CHECK(q_in.size(2) == k_in.size(2), "window_matmul: head dims differ");
  const at::Tensor q = q_in.contiguous();
  const at::Tensor k = k_in.contiguous();
  const int64_t n = q.size(0), len = q.size(1), dim = q.size(2), band = 2 * window + 1;
  at::Tensor out = at::zeros({n, len, band}, q.options());
  if (n * len == 0) return out;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, q.scalar_type(), "window_matmul_cpu", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t* qp = q.data_ptr<scalar_t>();
    const scalar_t* kp = k.data_ptr<scalar_t>();
    scalar_t* op = out.data_ptr<scalar_t>();
    at::parallel_for(0, n * len, 64, [&](int64_t begin, int64_t end) {
      std::vector<acc_t> qrow(dim);
      for (int64_t r = begin; r < end; ++r) {
        const int64_t b = r / len, i = r % len;
        const scalar_t* qi = qp + r * dim;
        tite_window::load(qrow.data(), qi, dim);
        const int64_t j_lo = std::max<int64_t>(0, window - i), j_hi = std::min<int64_t>(band, len - i + window);
        for (int64_t j = j_lo; j < j_hi; ++j) {
          const scalar_t* kt = kp + (b * len + i + j - window) * dim;
          op[r * band + j] = static_cast<scalar_t>(tite_window::dot(qrow.data(), kt, dim));
        }
      }
    });
  });
  return out;
}

// transposed = false: out[i] = sum_j p[i, j] x[i + j - w];  true: out[t] = sum_j p[t - j + w, j] x[t - j + w].
at::Tensor band_times_dense(const at::Tensor& p_in, const at::Tensor& x_in, int64_t window, bool transposed,
                            const char* name) {
  check_band(p_in, x_in, window, name);
  TORCH_CHECK(p_in.size(2) == 2 * window + 1, name, ": band has ", p_in.size(2), " columns, expected 2w+1 = ",
              2 * window + 1);
  const at::Tensor p = p_in.contiguous();
  const at::Tensor x = x_in.contiguous();
  const int64_t n = x.size(0), len = x.size(1), dim = x.size(2), band = 2 * window + 1;
  at::Tensor out = at::empty({n, len, dim}, x.options());
  if (n * len * dim == 0) return out.zero_();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "unwindow_matmul_cpu", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t* pp = p.data_ptr<scalar_t>();
    const scalar_t* xp = x.data_ptr<scalar_t>();
    scalar_t* op = out.data_ptr<scalar_t>();
    at::parallel_for(0, n * len, 64, [&](int64_t begin, int64_t end) {
      std::vector<acc_t> acc(dim);
      for (int64_t r = begin; r < end; ++r) {
        const int64_t b = r / len, i = r % len;
        std::fill(acc.begin(), acc.end(), acc_t(0));
        // columns whose partner row lies inside [0, L)
        const int64_t j_lo = transposed ? std::max<int64_t>(0, i + window - len + 1) : std::max<int64_t>(0, window - i);
        const int64_t j_hi = transposed ? std::min<int64_t>(band, i + window + 1) : std::min<int64_t>(band, len - i + window);
        for (int64_t j = j_lo; j < j_hi; ++j) {
          // the partner row: i + j - w (band row i, column j) or t - j + w (band row of key t)
          const int64_t other = transposed ? i - j + window : i + j - window;
          const acc_t weight = static_cast<acc_t>(transposed ? pp[(b * len + other) * band + j] : pp[r * band + j]);
          const scalar_t* xo = xp + (b * len + other) * dim;
          tite_window::axpy(acc.data(), weight, xo, dim);
        }
        scalar_t* dst = op + r * dim;
        tite_window::store(dst, acc.data(), dim);
      }
    });
  });
  return out;
}

at::Tensor unwindow_matmul_cpu(const at::Tensor& p, const at::Tensor& v, int64_t window) {
  return band_times_dense(p, v, window, false, "unwindow_matmul");
}

at::Tensor unwindow_matmul_t_cpu(const at::Tensor& p, const at::Tensor& x, int64_t window) {
  return band_times_dense(p, x, window, true, "unwindow_matmul_t");
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(tite, m) {
  m.def("window_matmul(Tensor q, Tensor k, int window) -> Tensor");
  m.def("unwindow_matmul(Tensor p, Tensor v, int window) -> Tensor");
  m.def("unwindow_matmul_t(Tensor p, Tensor x, int window) -> Tensor");
}

TORCH_LIBRARY_IMPL(tite, CPU, m) {
  m.impl("window_matmul", &window_matmul_cpu);
  m.impl("unwindow_matmul", &unwindow_matmul_cpu);
  m.impl("unwindow_matmul_t", &unwindow_matmul_t_cpu);
}
