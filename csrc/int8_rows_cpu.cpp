// Per-token int8 for the int8 linear layers (pyterrier_tite/models/int8_linear.py): the two passes around
// torch._int_mm that ATen would spread over six elementwise kernels (and six trips through memory).
//  - quantize_rows: each row of x (optionally times a per-channel factor) gets its own scale max|row| / 127 and is
//    rounded half to even into int8 (x * (1 / scale), then clamped); one read of the row to find its maximum, one to
//    write it (the row stays in cache).
//  - dequantize_rows: the int32 products times row scale times column scale, plus the bias, in one pass.
#include <torch/extension.h>

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <tuple>

namespace {

// 1.5 * 2^23: for |v| < 2^22, (v + kRound) - kRound is v rounded half to even in the default rounding mode; unlike
// std::nearbyint it vectorises without SSE4.1 (kept by the compiler: no -ffast-math here)
constexpr float kRound = 12582912.f;

std::tuple<at::Tensor, at::Tensor> quantize_rows_cpu(const at::Tensor& x_in, const c10::optional<at::Tensor>& factor) {
  TORCH_CHECK(x_in.dim() == 2 && x_in.scalar_type() == at::kFloat, "quantize_rows: a 2-D float32 tensor");
  const at::Tensor x = x_in.contiguous();
  const int64_t rows = x.size(0), cols = x.size(1);
  at::Tensor f;
  if (factor.has_value() && factor->defined()) {
    f = factor->contiguous();
    TORCH_CHECK(f.scalar_type() == at::kFloat && f.numel() == cols, "quantize_rows: one float32 factor per column");
  }
  at::Tensor out = at::empty({rows, cols}, x.options().dtype(at::kChar));
  at::Tensor scale = at::empty({rows, 1}, x.options());
  const float* xp = x.data_ptr<float>();
  const float* fp = f.defined() ? f.data_ptr<float>() : nullptr;
  int8_t* op = out.data_ptr<int8_t>();
  float* sp = scale.data_ptr<float>();
  at::parallel_for(0, rows, std::max<int64_t>(1, 32768 / std::max<int64_t>(cols, 1)), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* row = xp + r * cols;
      float peak = 0.f;
      if (fp) {
#pragma omp simd reduction(max : peak)
        for (int64_t c = 0; c < cols; ++c) {
          const float v = std::fabs(row[c] * fp[c]);
          peak = v > peak ? v : peak;
        }
      } else {
#pragma omp simd reduction(max : peak)
        for (int64_t c = 0; c < cols; ++c) {
          const float v = std::fabs(row[c]);
          peak = v > peak ? v : peak;
        }
      }
      const float s = std::max(peak, 1e-12f) / 127.f;
      const float inverse = 1.f / s;
      sp[r] = s;
      int8_t* q = op + r * cols;
#pragma omp simd
      for (int64_t c = 0; c < cols; ++c) {
        float v = (fp ? row[c] * fp[c] : row[c]) * inverse;
        v = std::min(std::max(v, -127.f), 127.f);
        v = (v + kRound) - kRound;  // half to even, as torch.round (|v| <= 127)
        q[c] = static_cast<int8_t>(static_cast<int32_t>(v));
      }
    }
  });
  return {out, scale};
}

at::Tensor dequantize_rows_cpu(const at::Tensor& acc_in, const at::Tensor& row_scale_in, const at::Tensor& col_scale_in,
                               const c10::optional<at::Tensor>& bias_in) {
  TORCH_CHECK(acc_in.dim() == 2 && acc_in.scalar_type() == at::kInt, "dequantize_rows: a 2-D int32 tensor");
  const at::Tensor acc = acc_in.contiguous();
  const int64_t rows = acc.size(0), cols = acc.size(1);
  const at::Tensor row_scale = row_scale_in.contiguous(), col_scale = col_scale_in.contiguous();
  TORCH_CHECK(row_scale.scalar_type() == at::kFloat && row_scale.numel() == rows, "dequantize_rows: one row scale per row");
  TORCH_CHECK(col_scale.scalar_type() == at::kFloat && col_scale.numel() == cols, "dequantize_rows: one scale per column");
  at::Tensor bias;
  if (bias_in.has_value() && bias_in->defined()) {
    bias = bias_in->contiguous();
    TORCH_CHECK(bias.scalar_type() == at::kFloat && bias.numel() == cols, "dequantize_rows: one float32 bias per column");
  }
  at::Tensor out = at::empty({rows, cols}, acc.options().dtype(at::kFloat));
  const int32_t* ap = acc.data_ptr<int32_t>();
  const float* rp = row_scale.data_ptr<float>();
  const float* cp = col_scale.data_ptr<float>();
  const float* bp = bias.defined() ? bias.data_ptr<float>() : nullptr;
  float* op = out.data_ptr<float>();
  at::parallel_for(0, rows, std::max<int64_t>(1, 32768 / std::max<int64_t>(cols, 1)), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int32_t* a = ap + r * cols;
      float* o = op + r * cols;
      const float s = rp[r];
      if (bp) {
        for (int64_t c = 0; c < cols; ++c) o[c] = static_cast<float>(a[c]) * s * cp[c] + bp[c];
      } else {
        for (int64_t c = 0; c < cols; ++c) o[c] = static_cast<float>(a[c]) * s * cp[c];
      }
    }
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(tite, m) {
  m.def("quantize_rows(Tensor x, Tensor? factor) -> (Tensor, Tensor)");
  m.def("dequantize_rows(Tensor acc, Tensor row_scale, Tensor col_scale, Tensor? bias) -> Tensor");
}

TORCH_LIBRARY_IMPL(tite, CPU, m) {
  m.impl("quantize_rows", &quantize_rows_cpu);
  m.impl("dequantize_rows", &dequantize_rows_cpu);
}
