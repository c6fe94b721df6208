"""Packed mean pooling: compiled kernels against the pure-torch reference, lengths, gradients, errors."""

from __future__ import annotations

import math

import pytest
import torch

from pyterrier_tite import ops
from pyterrier_tite.ops import packed_mean_pool, packed_mean_pool_reference, pooled_lengths

requires_csrc = pytest.mark.skipif("csrc-cpu" not in ops.backends()["packed_mean_pool"], reason="extension not built")

KERNEL_STRIDES = [(1, 1), (2, 1), (2, 2), (3, 1), (3, 2), (3, 3)]


def make_cu(lengths: list[int]) -> torch.Tensor:
    cu = torch.zeros(len(lengths) + 1, dtype=torch.int32)
    cu[1:] = torch.cumsum(torch.tensor(lengths, dtype=torch.int64), 0)
    return cu


def naive_pool(x: torch.Tensor, lengths: list[int], k: int, s: int) -> torch.Tensor:
    """The definition, one window at a time, in float64."""
    rows, start = [], 0
    for n in lengths:
        seq = x[start : start + n].double()
        n_out = 0 if n == 0 else math.ceil(max(0, n - k) / s) + 1
        rows += [seq[j * s : min(j * s + k, n)].mean(0) for j in range(n_out)]
        start += n
    return torch.stack(rows) if rows else x.new_zeros(0, x.shape[1], dtype=torch.float64)


def test_pooled_lengths_formula():
    lengths = torch.tensor([0, 1, 2, 3, 4, 5, 16, 17, 512])
    for k, s in KERNEL_STRIDES:
        expected = [0 if n == 0 else math.ceil(max(0, n - k) / s) + 1 for n in lengths.tolist()]
        assert pooled_lengths(lengths, k, s).tolist() == expected


@pytest.mark.parametrize("k,s", KERNEL_STRIDES)
@pytest.mark.parametrize("lengths", [[5], [1], [0], [0, 0], [7, 0, 1, 3, 12], [2, 1, 0, 9, 4, 4]])
def test_reference_matches_definition(k, s, lengths):
    x = torch.randn(sum(lengths), 6)
    out, out_cu = packed_mean_pool_reference(x, make_cu(lengths), k, s)
    torch.testing.assert_close(out.double(), naive_pool(x, lengths, k, s), atol=1e-6, rtol=0)
    assert out_cu[-1].item() == out.shape[0]


@requires_csrc
@pytest.mark.parametrize("k,s", KERNEL_STRIDES)
@pytest.mark.parametrize("seed", range(4))
def test_csrc_matches_reference_random_shapes(k, s, seed):
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, 40, (int(torch.randint(1, 9, (1,), generator=gen)),), generator=gen).tolist()
    hidden = int(torch.randint(1, 70, (1,), generator=gen))
    x = torch.randn(sum(lengths), hidden, generator=gen)
    cu = make_cu(lengths)
    out, out_cu = packed_mean_pool(x, cu, k, s, backend="csrc-cpu")
    ref, ref_cu = packed_mean_pool_reference(x, cu, k, s)
    assert torch.equal(out_cu, ref_cu)
    assert (out - ref).abs().max().item() <= 1e-5 if out.numel() else out.shape == ref.shape


@requires_csrc
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_csrc_dtypes(dtype):
    lengths = [9, 1, 0, 4]
    x = torch.randn(sum(lengths), 16).to(dtype)
    out, _ = packed_mean_pool(x, make_cu(lengths), 3, 2, backend="csrc-cpu")
    assert out.dtype == dtype
    expected = naive_pool(x, lengths, 3, 2)
    tol = {torch.float16: 1e-3, torch.bfloat16: 1e-2, torch.float64: 1e-12}[dtype]
    torch.testing.assert_close(out.double(), expected, atol=tol, rtol=0)


@requires_csrc
@pytest.mark.parametrize("k,s", KERNEL_STRIDES)
def test_csrc_gradcheck(k, s):
    lengths = [5, 0, 1, 8, 2]
    x = torch.randn(sum(lengths), 3, dtype=torch.float64, requires_grad=True)
    cu = make_cu(lengths)
    assert torch.autograd.gradcheck(lambda t: packed_mean_pool(t, cu, k, s, backend="csrc-cpu")[0], (x,))


@requires_csrc
def test_csrc_backward_matches_reference():
    lengths = [13, 4, 1, 0, 7]
    x = torch.randn(sum(lengths), 8, requires_grad=True)
    cu = make_cu(lengths)
    grad = torch.randn(int(pooled_lengths(torch.tensor(lengths), 3, 2).sum()), 8)
    (g_csrc,) = torch.autograd.grad(packed_mean_pool(x, cu, 3, 2, backend="csrc-cpu")[0], x, grad)
    (g_ref,) = torch.autograd.grad(packed_mean_pool_reference(x, cu, 3, 2)[0], x, grad)
    torch.testing.assert_close(g_csrc, g_ref, atol=1e-6, rtol=0)


def test_default_backend_on_cpu_is_compiled_when_built():
    names = ops.backends()["packed_mean_pool"]
    assert names[-1] == "torch"
    assert ("csrc-cpu" in names) == (ops.extension() is not None)


@pytest.mark.parametrize("k,s", [(0, 1), (2, 3), (1, 0)])
def test_bad_kernel_stride_raise(k, s):
    with pytest.raises(ValueError):
        packed_mean_pool(torch.randn(4, 2), make_cu([4]), k, s)


def test_unknown_backend_raises():
    with pytest.raises(ValueError, match="unknown backend"):
        packed_mean_pool(torch.randn(4, 2), make_cu([4]), 2, 2, backend="nope")


@pytest.mark.parametrize("backend", [b for b in ops.backends()["packed_mean_pool"] if b != "triton"])
def test_known_pooled_layout_gives_the_same_result(backend):
    """A caller that planned its layouts passes the pooled offsets and size; the output must not change."""
    lengths = torch.tensor([7, 0, 1, 4])
    cu = torch.zeros(5, dtype=torch.int32)
    cu[1:] = torch.cumsum(lengths, 0)
    x = torch.randn(int(lengths.sum()), 6)
    expected, out_cu = ops.packed_mean_pool(x, cu, 3, 2, backend=backend)
    got, got_cu = ops.packed_mean_pool(x, cu, 3, 2, backend=backend, out_cu_seqlens=out_cu, out_total=int(out_cu[-1]))
    torch.testing.assert_close(got, expected, atol=0, rtol=0)
    assert torch.equal(got_cu, out_cu)
