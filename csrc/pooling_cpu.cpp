// Packed (varlen) mean pooling with kernel k and stride s over cu_seqlens, CPU kernels.
//
// Sequence b occupies rows [cu[b], cu[b+1]) of x [total, H]; its pooled output occupies rows
// [out_cu[b], out_cu[b+1]) with length ceil(max(0, L - k) / s) + 1 (0 when L = 0). Output row j of a sequence averages
// input positions [j*s, min(j*s + k, L)), dividing by the number of positions present.
// Accumulation is in float (double for double inputs). The backward pass gathers instead of scattering, so neither
// pass needs atomics: every output row and every input row is written by exactly one thread.
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <ATen/OpMathType.h>

#include <algorithm>
#include <vector>

namespace {

// Index of the sequence that owns `row`, given the exclusive-prefix offsets `cu` (size B + 1).
inline int64_t owner(const int32_t* cu, int64_t batch, int64_t row) {
  // upper_bound over cu[1..B] finds the first end offset greater than row
  const int32_t* it = std::upper_bound(cu + 1, cu + batch + 1, static_cast<int32_t>(row));
  return static_cast<int64_t>(it - (cu + 1));
}

void check_inputs(const at::Tensor& cu, const at::Tensor& out_cu, int64_t kernel, int64_t stride) {
  TORCH_CHECK(kernel >= 1 && stride >= 1, "packed_mean_pool: kernel and stride must be >= 1, got ", kernel, ", ", stride);
  TORCH_CHECK(stride <= kernel, "packed_mean_pool: stride (", stride, ") must not exceed kernel (", kernel, ")");
  TORCH_CHECK(cu.dim() == 1 && cu.scalar_type() == at::kInt, "packed_mean_pool: cu_seqlens must be 1-D int32");
  TORCH_CHECK(out_cu.dim() == 1 && out_cu.scalar_type() == at::kInt, "packed_mean_pool: out_cu_seqlens must be 1-D int32");
  TORCH_CHECK(cu.numel() == out_cu.numel() && cu.numel() >= 1, "packed_mean_pool: cu_seqlens sizes differ");
}

at::Tensor pool_forward_cpu(const at::Tensor& x_in, const at::Tensor& cu_in, const at::Tensor& out_cu_in,
                            int64_t kernel, int64_t stride) {
  check_inputs(cu_in, out_cu_in, kernel, stride);
  TORCH_CHECK(x_in.dim() == 2, "packed_mean_pool: x must be [total_tokens, hidden]");
  const at::Tensor x = x_in.contiguous();
  const at::Tensor cu = cu_in.contiguous();
  const at::Tensor out_cu = out_cu_in.contiguous();
  const int64_t batch = cu.numel() - 1;
  const int64_t hidden = x.size(1);
  const int32_t* cu_p = cu.data_ptr<int32_t>();
  const int32_t* out_cu_p = out_cu.data_ptr<int32_t>();
  TORCH_CHECK(cu_p[batch] == x.size(0), "packed_mean_pool: cu_seqlens[-1] (", cu_p[batch], ") != x.size(0) (", x.size(0), ")");
  const int64_t total_out = out_cu_p[batch];
  at::Tensor out = at::empty({total_out, hidden}, x.options());
  if (total_out == 0 || hidden == 0) return out;

  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "packed_mean_pool_cpu", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t* xp = x.data_ptr<scalar_t>();
    scalar_t* op = out.data_ptr<scalar_t>();
    at::parallel_for(0, total_out, 16, [&](int64_t begin, int64_t end) {
      std::vector<acc_t> acc(hidden);
      for (int64_t row = begin; row < end; ++row) {
        const int64_t b = owner(out_cu_p, batch, row);
        const int64_t j = row - out_cu_p[b];
        const int64_t seq_start = cu_p[b];
        const int64_t seq_len = cu_p[b + 1] - seq_start;
        const int64_t lo = j * stride;
        const int64_t hi = std::min(lo + kernel, seq_len);
        std::fill(acc.begin(), acc.end(), acc_t(0));
        for (int64_t t = lo; t < hi; ++t) {
          const scalar_t* src = xp + (seq_start + t) * hidden;
          for (int64_t h = 0; h < hidden; ++h) acc[h] += static_cast<acc_t>(src[h]);
        }
        const acc_t inv = acc_t(1) / static_cast<acc_t>(hi - lo);
        scalar_t* dst = op + row * hidden;
        for (int64_t h = 0; h < hidden; ++h) dst[h] = static_cast<scalar_t>(acc[h] * inv);
      }
    });
  });
  return out;
}

at::Tensor pool_backward_cpu(const at::Tensor& grad_in, const at::Tensor& cu_in, const at::Tensor& out_cu_in,
                             int64_t kernel, int64_t stride) {
  check_inputs(cu_in, out_cu_in, kernel, stride);
  TORCH_CHECK(grad_in.dim() == 2, "packed_mean_pool_backward: grad must be [total_pooled, hidden]");
  const at::Tensor grad = grad_in.contiguous();
  const at::Tensor cu = cu_in.contiguous();
  const at::Tensor out_cu = out_cu_in.contiguous();
  const int64_t batch = cu.numel() - 1;
  const int64_t hidden = grad.size(1);
  const int32_t* cu_p = cu.data_ptr<int32_t>();
  const int32_t* out_cu_p = out_cu.data_ptr<int32_t>();
  TORCH_CHECK(out_cu_p[batch] == grad.size(0), "packed_mean_pool_backward: out_cu_seqlens[-1] != grad.size(0)");
  const int64_t total_in = cu_p[batch];
  at::Tensor grad_x = at::empty({total_in, hidden}, grad.options());
  if (total_in == 0 || hidden == 0) return grad_x;

  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, grad.scalar_type(), "packed_mean_pool_backward_cpu", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t* gp = grad.data_ptr<scalar_t>();
    scalar_t* gx = grad_x.data_ptr<scalar_t>();
    at::parallel_for(0, total_in, 16, [&](int64_t begin, int64_t end) {
      std::vector<acc_t> acc(hidden);
      for (int64_t row = begin; row < end; ++row) {
        const int64_t b = owner(cu_p, batch, row);
        const int64_t p = row - cu_p[b];
        const int64_t seq_len = cu_p[b + 1] - cu_p[b];
        const int64_t n_out = out_cu_p[b + 1] - out_cu_p[b];
        // windows j with j*s <= p < j*s + k
        const int64_t j_lo = p >= kernel ? (p - kernel) / stride + 1 : 0;
        const int64_t j_hi = std::min(p / stride, n_out - 1);
        std::fill(acc.begin(), acc.end(), acc_t(0));
        for (int64_t j = j_lo; j <= j_hi; ++j) {
          const int64_t lo = j * stride;
          const int64_t cnt = std::min(lo + kernel, seq_len) - lo;
          const acc_t inv = acc_t(1) / static_cast<acc_t>(cnt);
          const scalar_t* src = gp + (out_cu_p[b] + j) * hidden;
          for (int64_t h = 0; h < hidden; ++h) acc[h] += static_cast<acc_t>(src[h]) * inv;
        }
        scalar_t* dst = gx + row * hidden;
        for (int64_t h = 0; h < hidden; ++h) dst[h] = static_cast<scalar_t>(acc[h]);
      }
    });
  });
  return grad_x;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(tite, m) {
  m.def("packed_mean_pool(Tensor x, Tensor cu_seqlens, Tensor out_cu_seqlens, int kernel, int stride) -> Tensor");
  m.def(
      "packed_mean_pool_backward(Tensor grad, Tensor cu_seqlens, Tensor out_cu_seqlens, int kernel, int stride) "
      "-> Tensor");
}

TORCH_LIBRARY_IMPL(tite, CPU, m) {
  m.impl("packed_mean_pool", &pool_forward_cpu);
  m.impl("packed_mean_pool_backward", &pool_backward_cpu);
}
