// Fused windowed attention with asymmetric key groups (sparse cross-encoder), CPU forward and backward.
//
// q, k, v: [B, H, L, d]; lengths: [B] int64 (rows >= lengths[b] are padding). Extra key groups g: gk[g], gv[g]:
// [Bg, H, G, d] with key lengths glen[g]: [Bg] and a row index gidx[g]: [B] -> [0, Bg) (e.g. one query's keys shared
// by all its documents). Row i < lengths[b] attends, with ONE softmax over all of them, to
//   * keys j < glen[g][gidx[g][b]] of every group g (full attention), and
//   * its own keys t with |t - i| <= window and t < lengths[b] (the band; window = 0 sees only itself).
// Output rows of padding are 0 and their log-sum-exp is -inf. Since a valid row always sees itself, no valid row is
// empty. Scores are computed row by row into a buffer of (sum G) + 2w + 1 floats: nothing of size L x L exists.
// Backward recomputes the probabilities from the saved log-sum-exp and gathers every gradient row in one thread
// (dq per row, band dk/dv per key, group dk/dv per group row), so no pass needs atomics.
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <ATen/OpMathType.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "window_simd.h"

namespace {

using tite_window::axpy;
using tite_window::Isa;
using tite_window::dot;
using tite_window::load;
using tite_window::store;

constexpr int64_t kRowBlock = 64;

template <typename T>
struct View4 {  // a [B, H, L, d] tensor with unit stride in d
  T* p;
  int64_t s0, s1, s2;
  explicit View4(const at::Tensor& t)
      : p(static_cast<T*>(t.data_ptr())), s0(t.stride(0)), s1(t.stride(1)), s2(t.stride(2)) {}
  T* row(int64_t b, int64_t h, int64_t i) const { return p + b * s0 + h * s1 + i * s2; }
};

at::Tensor unit_stride(const at::Tensor& t) { return t.stride(-1) == 1 ? t : t.contiguous(); }

struct Problem {
  at::Tensor q, k, v, lengths;
  std::vector<at::Tensor> gk, gv, glen, gidx;
  int64_t B, H, L, D, window;
};

Problem prepare(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& lengths,
                int64_t window, at::TensorList gk, at::TensorList gv, at::TensorList glen, at::TensorList gidx) {
  TORCH_CHECK(window >= 0, "window_attention: window must be >= 0, got ", window);
  TORCH_CHECK(q.dim() == 4, "window_attention: q must be [B, H, L, d]");
  TORCH_CHECK(k.sizes() == q.sizes() && v.sizes() == q.sizes(), "window_attention: q, k, v shapes differ");
  TORCH_CHECK(k.scalar_type() == q.scalar_type() && v.scalar_type() == q.scalar_type(), "window_attention: dtypes differ");
  TORCH_CHECK(lengths.dim() == 1 && lengths.numel() == q.size(0) && lengths.scalar_type() == at::kLong,
              "window_attention: lengths must be int64 [B]");
  TORCH_CHECK(gk.size() == gv.size() && gk.size() == glen.size() && gk.size() == gidx.size(),
              "window_attention: group lists differ in length");
  Problem pr;
  pr.q = unit_stride(q);
  pr.k = unit_stride(k);
  pr.v = unit_stride(v);
  pr.lengths = lengths.contiguous();
  pr.B = q.size(0), pr.H = q.size(1), pr.L = q.size(2), pr.D = q.size(3), pr.window = window;
  const int64_t* len_p = pr.lengths.data_ptr<int64_t>();
  for (int64_t b = 0; b < pr.B; ++b)
    TORCH_CHECK(len_p[b] >= 0 && len_p[b] <= pr.L, "window_attention: lengths[", b, "] = ", len_p[b], " not in [0, L]");
  for (size_t g = 0; g < gk.size(); ++g) {
    TORCH_CHECK(gk[g].dim() == 4 && gk[g].size(1) == pr.H && gk[g].size(3) == pr.D && gv[g].sizes() == gk[g].sizes(),
                "window_attention: group ", g, " keys/values must be [Bg, H, G, d] like q");
    TORCH_CHECK(gk[g].scalar_type() == q.scalar_type() && gv[g].scalar_type() == q.scalar_type(),
                "window_attention: group ", g, " dtype differs from q");
    const int64_t bg = gk[g].size(0), gsize = gk[g].size(2);
    TORCH_CHECK(glen[g].dim() == 1 && glen[g].numel() == bg && glen[g].scalar_type() == at::kLong,
                "window_attention: group ", g, " lengths must be int64 [Bg]");
    TORCH_CHECK(gidx[g].dim() == 1 && gidx[g].numel() == pr.B && gidx[g].scalar_type() == at::kLong,
                "window_attention: group ", g, " index must be int64 [B]");
    pr.gk.push_back(unit_stride(gk[g]));
    pr.gv.push_back(unit_stride(gv[g]));
    pr.glen.push_back(glen[g].contiguous());
    pr.gidx.push_back(gidx[g].contiguous());
    const int64_t* gl = pr.glen.back().data_ptr<int64_t>();
    const int64_t* gi = pr.gidx.back().data_ptr<int64_t>();
    for (int64_t r = 0; r < bg; ++r)
      TORCH_CHECK(gl[r] >= 0 && gl[r] <= gsize, "window_attention: group ", g, " length out of [0, G]");
    for (int64_t b = 0; b < pr.B; ++b)
      TORCH_CHECK(gi[b] >= 0 && gi[b] < bg, "window_attention: group ", g, " index out of [0, Bg)");
  }
  return pr;
}

int64_t total_group_keys(const Problem& pr) {
  int64_t n = 0;
  for (const auto& t : pr.gk) n += t.size(2);
  return n;
}

template <typename scalar_t>
struct Groups {  // raw pointers of the key groups
  std::vector<View4<const scalar_t>> k, v;
  std::vector<const int64_t*> len, idx;
  explicit Groups(const Problem& pr) {
    for (size_t g = 0; g < pr.gk.size(); ++g) {
      k.emplace_back(pr.gk[g]);
      v.emplace_back(pr.gv[g]);
      len.push_back(pr.glen[g].data_ptr<int64_t>());
      idx.push_back(pr.gidx[g].data_ptr<int64_t>());
    }
  }
  size_t size() const { return k.size(); }
};

template <typename scalar_t>
struct Forward {  // everything one forward task reads or writes
  using acc_t = at::opmath_type<scalar_t>;
  View4<const scalar_t> Q, K, V;
  View4<scalar_t> O;
  Groups<scalar_t> grp;
  acc_t* lse;
  const int64_t* len;
  int64_t H, L, D, w, n_blocks, buffer;
  acc_t scale;
};

// One task = one block of kRowBlock rows of one (batch row, head): scores of every visible key into a buffer
// (groups first, then the band), exact two-pass softmax, then the weighted sum of values.
// kD > 0: the head size known at compile time (32, 64: MiniLM, BERT), so the per-key dot products and axpys unroll
// into a few vector instructions instead of loops with run-time trip counts; kD = 0: any head size.
template <typename scalar_t, int kD>
TITE_ALWAYS_INLINE inline void forward_tasks(const Forward<scalar_t>& f, int64_t begin, int64_t end) {
  using acc_t = at::opmath_type<scalar_t>;
  const int64_t H = f.H, L = f.L, D = kD > 0 ? kD : f.D, w = f.w;
  std::vector<acc_t> qrow(D), acc(D), s(f.buffer);
  for (int64_t task = begin; task < end; ++task) {
    const int64_t bh = task / f.n_blocks, b = bh / H, h = bh % H;
    const int64_t len = f.len[b];
    const int64_t row_begin = (task % f.n_blocks) * kRowBlock;
    const int64_t row_end = std::min(L, row_begin + kRowBlock);
    for (int64_t i = std::max(len, row_begin); i < row_end; ++i) {  // padding rows: output 0, lse -inf
      std::fill_n(f.O.row(b, h, i), D, scalar_t(0));
      f.lse[bh * L + i] = -std::numeric_limits<acc_t>::infinity();
    }
    for (int64_t i = row_begin; i < std::min(len, row_end); ++i) {
      load(qrow.data(), f.Q.row(b, h, i), D);
      int64_t n = 0;
      for (size_t g = 0; g < f.grp.size(); ++g) {
        const int64_t r = f.grp.idx[g][b];
        for (int64_t j = 0; j < f.grp.len[g][r]; ++j) s[n++] = f.scale * dot(qrow.data(), f.grp.k[g].row(r, h, j), D);
      }
      const int64_t t_lo = std::max<int64_t>(0, i - w), t_hi = std::min<int64_t>(len, i + w + 1);
      for (int64_t t = t_lo; t < t_hi; ++t) s[n++] = f.scale * dot(qrow.data(), f.K.row(b, h, t), D);
      acc_t m = s[0];
      for (int64_t e = 1; e < n; ++e) m = std::max(m, s[e]);
      acc_t sum = 0;
      for (int64_t e = 0; e < n; ++e) sum += (s[e] = std::exp(s[e] - m));
      const acc_t inv = acc_t(1) / sum;
      std::fill(acc.begin(), acc.end(), acc_t(0));
      n = 0;
      for (size_t g = 0; g < f.grp.size(); ++g) {
        const int64_t r = f.grp.idx[g][b];
        for (int64_t j = 0; j < f.grp.len[g][r]; ++j) axpy(acc.data(), s[n++] * inv, f.grp.v[g].row(r, h, j), D);
      }
      for (int64_t t = t_lo; t < t_hi; ++t) axpy(acc.data(), s[n++] * inv, f.V.row(b, h, t), D);
      store(f.O.row(b, h, i), acc.data(), D);
      f.lse[bh * L + i] = m + std::log(sum);
    }
  }
}

// The same code compiled three times: for the baseline ISA and, picked at run time (kernel_isa), for AVX2 + FMA and
// for AVX-512 (the extension is built without -march flags, so this is where the vector units the machine has get used).
template <typename scalar_t>
TITE_TARGET_AVX2 void forward_tasks_avx2(const Forward<scalar_t>& f, int64_t begin, int64_t end) {
  TITE_DISPATCH_HEAD_SIZE(f.D, forward_tasks<scalar_t, kD>(f, begin, end));
}

template <typename scalar_t>
TITE_TARGET_AVX512 void forward_tasks_avx512(const Forward<scalar_t>& f, int64_t begin, int64_t end) {
  TITE_DISPATCH_HEAD_SIZE(f.D, forward_tasks<scalar_t, kD>(f, begin, end));
}

template <typename scalar_t>
void forward_tasks_default(const Forward<scalar_t>& f, int64_t begin, int64_t end) {
  forward_tasks<scalar_t, 0>(f, begin, end);
}

std::vector<at::Tensor> forward_cpu(const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in,
                                    const at::Tensor& lengths_in, int64_t window, at::TensorList gk_in,
                                    at::TensorList gv_in, at::TensorList glen_in, at::TensorList gidx_in, double scale) {
  const Problem pr = prepare(q_in, k_in, v_in, lengths_in, window, gk_in, gv_in, glen_in, gidx_in);
  const int64_t B = pr.B, H = pr.H, L = pr.L, D = pr.D, w = pr.window;
  // written row by row below (padding rows included): no separate zero-fill pass over the output
  at::Tensor out = at::empty({B, H, L, D}, pr.q.options());
  at::Tensor lse = at::empty({B, H, L}, pr.q.options().dtype(pr.q.scalar_type() == at::kDouble ? at::kDouble : at::kFloat));
  if (B * H * L == 0) return {out, lse};
  const int64_t n_blocks = (L + kRowBlock - 1) / kRowBlock;
  const int64_t buffer = total_group_keys(pr) + 2 * w + 1;
  const int64_t* len_p = pr.lengths.data_ptr<int64_t>();

  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, pr.q.scalar_type(), "window_attention_cpu", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const Forward<scalar_t> f{View4<const scalar_t>(pr.q), View4<const scalar_t>(pr.k), View4<const scalar_t>(pr.v),
                              View4<scalar_t>(out), Groups<scalar_t>(pr), lse.data_ptr<acc_t>(), len_p, H, L, D, w,
                              n_blocks, buffer, acc_t(scale)};
    const Isa isa = tite_window::kernel_isa(sizeof(scalar_t) == 2);
    at::parallel_for(0, B * H * n_blocks, 1, [&](int64_t begin, int64_t end) {
      if (isa == Isa::kAvx512)
        forward_tasks_avx512(f, begin, end);
      else if (isa == Isa::kAvx2)
        forward_tasks_avx2(f, begin, end);
      else
        forward_tasks_default(f, begin, end);
    });
  });
  return {out, lse};
}

template <typename scalar_t>
struct Backward {  // everything the backward tasks read or write
  using acc_t = at::opmath_type<scalar_t>;
  View4<const scalar_t> Q, K, V, dO;
  View4<scalar_t> dQ, dK, dV;
  const Groups<scalar_t>& grp;
  const acc_t* lse;
  const acc_t* delta;
  const int64_t* len;
  int64_t H, L, D, w, n_blocks;
  acc_t sc;
};

// One task = one block of rows of one (batch row, head): dq of its rows (over groups and band), then dk / dv of
// the band keys at the same positions, gathered over the rows |i - t| <= w that see them.
template <typename scalar_t, int kD>  // kD: as in forward_tasks
TITE_ALWAYS_INLINE inline void backward_row_tasks(const Backward<scalar_t>& f, int64_t begin, int64_t end) {
  using acc_t = at::opmath_type<scalar_t>;
  const int64_t H = f.H, L = f.L, D = kD > 0 ? kD : f.D, w = f.w;
  const acc_t sc = f.sc;
  std::vector<acc_t> qrow(D), grow(D), acc(D), acc2(D), krow(D), vrow(D);
  for (int64_t task = begin; task < end; ++task) {
    const int64_t bh = task / f.n_blocks, b = bh / H, h = bh % H;
    const int64_t len = f.len[b];
    const int64_t lo = (task % f.n_blocks) * kRowBlock, hi = std::min(len, lo + kRowBlock);
    for (int64_t i = lo; i < hi; ++i) {
      load(qrow.data(), f.Q.row(b, h, i), D);
      load(grow.data(), f.dO.row(b, h, i), D);
      const acc_t l = f.lse[bh * L + i], di = f.delta[bh * L + i];
      std::fill(acc.begin(), acc.end(), acc_t(0));
      for (size_t g = 0; g < f.grp.size(); ++g) {
        const int64_t r = f.grp.idx[g][b];
        for (int64_t j = 0; j < f.grp.len[g][r]; ++j) {
          const acc_t p = std::exp(sc * dot(qrow.data(), f.grp.k[g].row(r, h, j), D) - l);
          const acc_t ds = p * (dot(grow.data(), f.grp.v[g].row(r, h, j), D) - di);
          axpy(acc.data(), ds * sc, f.grp.k[g].row(r, h, j), D);
        }
      }
      for (int64_t t = std::max<int64_t>(0, i - w); t < std::min<int64_t>(len, i + w + 1); ++t) {
        const acc_t p = std::exp(sc * dot(qrow.data(), f.K.row(b, h, t), D) - l);
        const acc_t ds = p * (dot(grow.data(), f.V.row(b, h, t), D) - di);
        axpy(acc.data(), ds * sc, f.K.row(b, h, t), D);
      }
      store(f.dQ.row(b, h, i), acc.data(), D);
    }
    for (int64_t t = lo; t < hi; ++t) {
      load(krow.data(), f.K.row(b, h, t), D);
      load(vrow.data(), f.V.row(b, h, t), D);
      std::fill(acc.begin(), acc.end(), acc_t(0));
      std::fill(acc2.begin(), acc2.end(), acc_t(0));
      for (int64_t i = std::max<int64_t>(0, t - w); i < std::min<int64_t>(len, t + w + 1); ++i) {
        const acc_t p = std::exp(sc * dot(krow.data(), f.Q.row(b, h, i), D) - f.lse[bh * L + i]);
        const acc_t ds = p * (dot(vrow.data(), f.dO.row(b, h, i), D) - f.delta[bh * L + i]);
        axpy(acc.data(), ds * sc, f.Q.row(b, h, i), D);
        axpy(acc2.data(), p, f.dO.row(b, h, i), D);
      }
      store(f.dK.row(b, h, t), acc.data(), D);
      store(f.dV.row(b, h, t), acc2.data(), D);
    }
  }
}

template <typename scalar_t>
struct GroupSlice {  // one key group in the backward: which batch rows use each group row, where its grads go
  size_t g;
  const int64_t* start;    // [Bg + 1] offsets into members
  const int64_t* members;  // batch rows grouped by group row
  View4<scalar_t> dGK, dGV;
};

// One task = one (group row, head): dk / dv of its keys, gathered over all rows of all batch rows that index it.
template <typename scalar_t, int kD>  // kD: as in forward_tasks
TITE_ALWAYS_INLINE inline void backward_group_tasks(const Backward<scalar_t>& f, const GroupSlice<scalar_t>& gs,
                                                    int64_t begin, int64_t end) {
  using acc_t = at::opmath_type<scalar_t>;
  const int64_t H = f.H, L = f.L, D = kD > 0 ? kD : f.D;
  const acc_t sc = f.sc;
  const size_t g = gs.g;
  std::vector<acc_t> ak(D), av(D), krow(D), vrow(D);
  for (int64_t rh = begin; rh < end; ++rh) {
    const int64_t r = rh / H, h = rh % H, glen = f.grp.len[g][r];
    for (int64_t j = 0; j < glen; ++j) {
      load(krow.data(), f.grp.k[g].row(r, h, j), D);
      load(vrow.data(), f.grp.v[g].row(r, h, j), D);
      std::fill(ak.begin(), ak.end(), acc_t(0));
      std::fill(av.begin(), av.end(), acc_t(0));
      for (int64_t m = gs.start[r]; m < gs.start[r + 1]; ++m) {
        const int64_t b = gs.members[m], bh = b * H + h;
        for (int64_t i = 0; i < f.len[b]; ++i) {
          const acc_t p = std::exp(sc * dot(krow.data(), f.Q.row(b, h, i), D) - f.lse[bh * L + i]);
          const acc_t ds = p * (dot(vrow.data(), f.dO.row(b, h, i), D) - f.delta[bh * L + i]);
          axpy(ak.data(), ds * sc, f.Q.row(b, h, i), D);
          axpy(av.data(), p, f.dO.row(b, h, i), D);
        }
      }
      store(gs.dGK.row(r, h, j), ak.data(), D);
      store(gs.dGV.row(r, h, j), av.data(), D);
    }
  }
}

template <typename scalar_t>
TITE_TARGET_AVX2 void backward_row_tasks_avx2(const Backward<scalar_t>& f, int64_t begin, int64_t end) {
  TITE_DISPATCH_HEAD_SIZE(f.D, backward_row_tasks<scalar_t, kD>(f, begin, end));
}

template <typename scalar_t>
TITE_TARGET_AVX512 void backward_row_tasks_avx512(const Backward<scalar_t>& f, int64_t begin, int64_t end) {
  TITE_DISPATCH_HEAD_SIZE(f.D, backward_row_tasks<scalar_t, kD>(f, begin, end));
}

template <typename scalar_t>
void backward_row_tasks_default(const Backward<scalar_t>& f, int64_t begin, int64_t end) {
  backward_row_tasks<scalar_t, 0>(f, begin, end);
}

template <typename scalar_t>
TITE_TARGET_AVX2 void backward_group_tasks_avx2(const Backward<scalar_t>& f, const GroupSlice<scalar_t>& gs,
                                                int64_t begin, int64_t end) {
  TITE_DISPATCH_HEAD_SIZE(f.D, backward_group_tasks<scalar_t, kD>(f, gs, begin, end));
}

template <typename scalar_t>
TITE_TARGET_AVX512 void backward_group_tasks_avx512(const Backward<scalar_t>& f, const GroupSlice<scalar_t>& gs,
                                                    int64_t begin, int64_t end) {
  TITE_DISPATCH_HEAD_SIZE(f.D, backward_group_tasks<scalar_t, kD>(f, gs, begin, end));
}

template <typename scalar_t>
void backward_group_tasks_default(const Backward<scalar_t>& f, const GroupSlice<scalar_t>& gs, int64_t begin,
                                  int64_t end) {
  backward_group_tasks<scalar_t, 0>(f, gs, begin, end);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, std::vector<at::Tensor>, std::vector<at::Tensor>> backward_cpu(
    const at::Tensor& grad_in, const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in,
    const at::Tensor& out_in, const at::Tensor& lse_in, const at::Tensor& lengths_in, int64_t window,
    at::TensorList gk_in, at::TensorList gv_in, at::TensorList glen_in, at::TensorList gidx_in, double scale) {
  const Problem pr = prepare(q_in, k_in, v_in, lengths_in, window, gk_in, gv_in, glen_in, gidx_in);
  const int64_t B = pr.B, H = pr.H, L = pr.L, D = pr.D, w = pr.window;
  TORCH_CHECK(grad_in.sizes() == q_in.sizes() && out_in.sizes() == q_in.sizes(), "window_attention_backward: shapes");
  TORCH_CHECK(lse_in.dim() == 3 && lse_in.size(0) == B && lse_in.size(1) == H && lse_in.size(2) == L,
              "window_attention_backward: lse must be [B, H, L]");
  const at::Tensor dout = grad_in.contiguous().to(pr.q.scalar_type());
  const at::Tensor out = out_in.contiguous();
  const at::Tensor lse = lse_in.contiguous();
  at::Tensor dq = at::zeros({B, H, L, D}, pr.q.options());
  at::Tensor dk = at::zeros({B, H, L, D}, pr.q.options());
  at::Tensor dv = at::zeros({B, H, L, D}, pr.q.options());
  std::vector<at::Tensor> dgk, dgv;
  for (const auto& t : pr.gk) {
    dgk.push_back(at::zeros(t.sizes(), t.options().memory_format(at::MemoryFormat::Contiguous)));
    dgv.push_back(at::zeros(t.sizes(), t.options().memory_format(at::MemoryFormat::Contiguous)));
  }
  if (B * H * L == 0 || D == 0) return {dq, dk, dv, dgk, dgv};
  const int64_t n_blocks = (L + kRowBlock - 1) / kRowBlock;
  const int64_t* len_p = pr.lengths.data_ptr<int64_t>();

  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, pr.q.scalar_type(), "window_attention_backward_cpu", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    TORCH_CHECK(lse.scalar_type() == c10::CppTypeToScalarType<acc_t>::value, "window_attention_backward: lse dtype");
    const View4<const scalar_t> Q(pr.q), K(pr.k), V(pr.v), dO(dout), O(out);
    const View4<scalar_t> dQ(dq), dK(dk), dV(dv);
    const Groups<scalar_t> grp(pr);
    const acc_t* lse_p = lse.data_ptr<acc_t>();
    const acc_t sc = acc_t(scale);
    // delta_i = dO_i . O_i, the softmax-Jacobian correction shared by every key of row i
    std::vector<acc_t> delta(B * H * L, acc_t(0));
    at::parallel_for(0, B * H, 1, [&](int64_t begin, int64_t end) {
      std::vector<acc_t> orow(D);
      for (int64_t bh = begin; bh < end; ++bh)
        for (int64_t i = 0; i < len_p[bh / H]; ++i) {
          load(orow.data(), O.row(bh / H, bh % H, i), D);
          delta[bh * L + i] = dot(orow.data(), dO.row(bh / H, bh % H, i), D);
        }
    });

    const Backward<scalar_t> f{Q, K, V, dO, dQ, dK, dV, grp, lse_p, delta.data(), len_p, H, L, D, w, n_blocks, sc};
    const Isa isa = tite_window::kernel_isa(sizeof(scalar_t) == 2);
    // dq of every row; band dk / dv of every key (gathered over the rows that see it)
    at::parallel_for(0, B * H * n_blocks, 1, [&](int64_t begin, int64_t end) {
      if (isa == Isa::kAvx512)
        backward_row_tasks_avx512(f, begin, end);
      else if (isa == Isa::kAvx2)
        backward_row_tasks_avx2(f, begin, end);
      else
        backward_row_tasks_default(f, begin, end);
    });

    // group dk / dv: every group row gathers over the batch rows that index it
    for (size_t g = 0; g < grp.size(); ++g) {
      const int64_t bg = pr.gk[g].size(0);
      std::vector<int64_t> start(bg + 1, 0), members(B);
      for (int64_t b = 0; b < B; ++b) ++start[grp.idx[g][b] + 1];
      for (int64_t r = 0; r < bg; ++r) start[r + 1] += start[r];
      std::vector<int64_t> fill(start.begin(), start.end() - 1);
      for (int64_t b = 0; b < B; ++b) members[fill[grp.idx[g][b]]++] = b;
      const View4<scalar_t> dGK(dgk[g]), dGV(dgv[g]);
      const GroupSlice<scalar_t> slice{g, start.data(), members.data(), dGK, dGV};
      at::parallel_for(0, bg * H, 1, [&](int64_t begin, int64_t end) {
        if (isa == Isa::kAvx512)
          backward_group_tasks_avx512(f, slice, begin, end);
        else if (isa == Isa::kAvx2)
          backward_group_tasks_avx2(f, slice, begin, end);
        else
          backward_group_tasks_default(f, slice, begin, end);
      });
    }
  });
  return {dq, dk, dv, dgk, dgv};
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(tite, m) {
  m.def(
      "window_attention(Tensor q, Tensor k, Tensor v, Tensor lengths, int window, Tensor[] group_k, Tensor[] group_v, "
      "Tensor[] group_lengths, Tensor[] group_index, float scale) -> Tensor[]");
  m.def(
      "window_attention_backward(Tensor grad_out, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, "
      "Tensor lengths, int window, Tensor[] group_k, Tensor[] group_v, Tensor[] group_lengths, Tensor[] group_index, "
      "float scale) -> (Tensor, Tensor, Tensor, Tensor[], Tensor[])");
}

TORCH_LIBRARY_IMPL(tite, CPU, m) {
  m.impl("window_attention", &forward_cpu);
  m.impl("window_attention_backward", &backward_cpu);
}
