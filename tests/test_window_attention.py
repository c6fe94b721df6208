"""Fused windowed attention: every backend against the dense definitions, gradients, edge cases."""

from __future__ import annotations

import math

import pytest
import torch

from pyterrier_tite import ops
from pyterrier_tite.ops import KeyGroup, window_attention, window_attention_reference

BACKENDS = [b for b in ("csrc-cpu", "torch") if b in ops.backends()["window_attention"]]
TOL = {torch.float32: 1e-5, torch.float64: 1e-10, torch.float16: 2e-3, torch.bfloat16: 2e-2}


def max_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.double() - b.double()).abs().max().item() if a.numel() else 0.0


def naive_attention(q, k, v, w, lengths, groups, scale) -> torch.Tensor:
    """The fused op's definition, row by row, in float64 (checks the dense reference itself)."""
    out = torch.zeros(q.shape, dtype=torch.float64)
    for b in range(q.shape[0]):
        n = int(lengths[b])
        for i in range(n):
            keys = [g.k[g.index[b], :, : int(g.lengths[g.index[b]])] for g in groups]
            values = [g.v[g.index[b], :, : int(g.lengths[g.index[b]])] for g in groups]
            lo, hi = max(0, i - w), min(n, i + w + 1)
            keys.append(k[b, :, lo:hi])
            values.append(v[b, :, lo:hi])
            kk, vv = torch.cat(keys, 1).double(), torch.cat(values, 1).double()
            probs = (torch.einsum("hd,hkd->hk", q[b, :, i].double(), kk) * scale).softmax(-1)
            out[b, :, i] = torch.einsum("hk,hkd->hd", probs, vv)
    return out


def random_case(seed: int, dtype=torch.float32, requires_grad=False, small=False, dim: int | None = None):
    """Mixed lengths (incl. 0 and 1), a per-row [CLS] group and a shared query group with an index and lengths.

    ``small`` keeps gradcheck's numerical Jacobian cheap (one perturbed forward per input element); ``dim`` fixes the
    head size (default: random, 1-8).
    """
    gen = torch.Generator().manual_seed(seed)
    batch = int(torch.randint(1, 3 if small else 5, (1,), generator=gen))
    heads = int(torch.randint(1, 2 if small else 3, (1,), generator=gen))
    length = int(torch.randint(1, 9 if small else 20, (1,), generator=gen))
    dim = int(torch.randint(1, 4 if small else 9, (1,), generator=gen)) if dim is None else dim
    w = [0, 1, 2, 4, 25][seed % 5]
    lengths = torch.randint(0, length + 1, (batch,), generator=gen)
    lengths[0] = length
    if batch > 1:
        lengths[1] = min(1, length) if seed % 2 else 0

    def rnd(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64).to(dtype).requires_grad_(requires_grad)

    q, k, v = (rnd(batch, heads, length, dim) for _ in range(3))
    n_queries, q_len = int(torch.randint(1, 3, (1,), generator=gen)), int(torch.randint(1, 6, (1,), generator=gen))
    groups = [
        KeyGroup(rnd(batch, heads, 1, dim), rnd(batch, heads, 1, dim)),
        KeyGroup(
            rnd(n_queries, heads, q_len, dim),
            rnd(n_queries, heads, q_len, dim),
            lengths=torch.randint(0, q_len + 1, (n_queries,), generator=gen),
            index=torch.randint(0, n_queries, (batch,), generator=gen),
        ),
    ]
    return q, k, v, w, lengths, groups


def tensors_of(q, k, v, groups):
    return [q, k, v, *[t for g in groups for t in (g.k, g.v)]]


# -------------------------------------------------------------------------------------------------- fused attention
@pytest.mark.parametrize("seed", range(5))
def test_reference_matches_rowwise_definition(seed):
    q, k, v, w, lengths, groups = random_case(seed)
    normalised = [KeyGroup(g.k, g.v, g.lengths, g.index) for g in groups]
    normalised[0].lengths, normalised[0].index = torch.ones(q.shape[0], dtype=torch.long), torch.arange(q.shape[0])
    scale = 1 / math.sqrt(q.shape[-1])
    expected = naive_attention(q, k, v, w, lengths, normalised, scale)
    got = window_attention_reference(q, k, v, w, lengths, groups)
    torch.testing.assert_close(got.double(), expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("seed", range(20))
def test_forward_matches_reference_fp32(backend, seed):
    q, k, v, w, lengths, groups = random_case(seed)
    out = window_attention(q, k, v, w, lengths, groups, backend=backend)
    ref = window_attention_reference(q, k, v, w, lengths, groups)
    assert out.shape == q.shape and out.dtype == q.dtype
    assert max_error(out, ref) <= 1e-5
    padding = torch.arange(q.shape[2])[None, :] >= lengths[:, None]
    assert not out.permute(0, 2, 1, 3)[padding].any(), "padding rows must be 0"


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("seed", range(4))
def test_forward_dtypes(backend, dtype, seed):
    q, k, v, w, lengths, groups = random_case(seed, dtype)
    out = window_attention(q, k, v, w, lengths, groups, backend=backend)
    ref = window_attention_reference(q, k, v, w, lengths, groups)
    assert out.dtype == dtype
    assert max_error(out, ref) <= TOL[dtype]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("seed", range(8))
def test_backward_matches_reference_fp32(backend, seed):
    q, k, v, w, lengths, groups = random_case(seed, requires_grad=True)
    inputs = tensors_of(q, k, v, groups)
    grad = torch.randn(q.shape)
    got = torch.autograd.grad(window_attention(q, k, v, w, lengths, groups, backend=backend), inputs, grad)
    expected = torch.autograd.grad(window_attention_reference(q, k, v, w, lengths, groups), inputs, grad)
    for name, a, b in zip(["q", "k", "v", "cls_k", "cls_v", "query_k", "query_v"], got, expected, strict=True):
        assert max_error(a, b) <= 1e-5, name


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("dim", [32, 64])
def test_model_head_sizes_forward_and_backward(backend, dtype, dim):
    """The CPU kernel has versions unrolled for the head sizes of MiniLM (32) and BERT (64): they compute the same."""
    q, k, v, w, lengths, groups = random_case(2, dtype, requires_grad=True, dim=dim)
    inputs = tensors_of(q, k, v, groups)
    out = window_attention(q, k, v, w, lengths, groups, backend=backend)
    ref = window_attention_reference(q, k, v, w, lengths, groups)
    grad = torch.randn(q.shape, dtype=dtype)
    got = torch.autograd.grad(out, inputs, grad)
    expected = torch.autograd.grad(ref, inputs, grad)

    def tolerance(reference: torch.Tensor) -> float:  # rounding of sums over ~dim terms, relative to their size
        return 16 * torch.finfo(dtype).eps * dim**0.5 * max(1.0, reference.abs().max().item())

    assert max_error(out, ref) <= tolerance(ref)
    for name, a, b in zip(["q", "k", "v", "cls_k", "cls_v", "query_k", "query_v"], got, expected, strict=True):
        assert max_error(a, b) <= tolerance(b), name


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("seed", range(5))
def test_gradcheck_float64(backend, seed):
    q, k, v, w, lengths, groups = random_case(seed, torch.float64, requires_grad=True, small=True)
    n = len(groups)

    def fn(q, k, v, *flat):
        gs = [KeyGroup(flat[2 * i], flat[2 * i + 1], groups[i].lengths, groups[i].index) for i in range(n)]
        return window_attention(q, k, v, w, lengths, gs, scale=0.7, backend=backend)

    assert torch.autograd.gradcheck(fn, tuple(tensors_of(q, k, v, groups)))


@pytest.mark.skipif("csrc-cpu" not in BACKENDS, reason="extension not built")
@pytest.mark.parametrize("seed", range(3))
def test_csrc_baseline_isa_path(monkeypatch, seed):
    """The CPU kernels also exist without AVX2; PYTERRIER_TITE_CPU_BASELINE=1 makes them run here."""
    monkeypatch.setenv("PYTERRIER_TITE_CPU_BASELINE", "1")
    q, k, v, w, lengths, groups = random_case(seed, requires_grad=True)
    inputs = tensors_of(q, k, v, groups)
    grad = torch.randn(q.shape)
    out = window_attention(q, k, v, w, lengths, groups, backend="csrc-cpu")
    ref = window_attention_reference(q, k, v, w, lengths, groups)
    assert max_error(out, ref) <= 1e-5
    got = torch.autograd.grad(out, inputs, grad)
    expected = torch.autograd.grad(ref, inputs, grad)
    assert max(max_error(a, b) for a, b in zip(got, expected, strict=True)) <= 1e-5


#: the compiled kernels' versions and how a test picks each: the CPU's best (AVX-512 for 16-bit types where the CPU
#: has it), AVX2 + FMA (ATEN_CPU_CAPABILITY caps ours as it caps ATen's), the baseline ISA
ISA_VERSIONS = {"best": {}, "avx2": {"ATEN_CPU_CAPABILITY": "avx2"}, "baseline": {"PYTERRIER_TITE_CPU_BASELINE": "1"}}


@pytest.mark.skipif("csrc-cpu" not in BACKENDS, reason="extension not built")
def test_each_type_runs_the_fastest_version_the_cpu_has(monkeypatch):
    """fp32 runs the AVX2 version on any AVX2 CPU (AVX-512 measured slower for it), 16-bit types the AVX-512 one where
    the CPU has AVX-512 F/BW/VL/DQ; the environment caps them as ISA_VERSIONS says. (A dispatch that fell through to
    the baseline for fp32 on AVX-512 CPUs ran it 1.4x slower with every result right.)"""
    from pyterrier_tite.devices import cpu_flags
    from pyterrier_tite.ops._extension import extension

    for name in ("ATEN_CPU_CAPABILITY", "PYTERRIER_TITE_CPU_BASELINE"):  # uncapped first (CI's AVX2 pass caps it)
        monkeypatch.delenv(name, raising=False)
    isa = extension().window_kernel_isa
    flags = cpu_flags()
    avx2 = "avx2" if {"avx2", "fma"} <= flags else "baseline"
    avx512 = "avx512" if avx2 == "avx2" and {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags else avx2
    assert (isa(False), isa(True)) == (avx2, avx512)
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    assert (isa(False), isa(True)) == (avx2, avx2)
    monkeypatch.setenv("PYTERRIER_TITE_CPU_BASELINE", "1")
    assert (isa(False), isa(True)) == ("baseline", "baseline")


@pytest.mark.skipif("csrc-cpu" not in BACKENDS, reason="extension not built")
@pytest.mark.parametrize("isa", ISA_VERSIONS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("dim", [32, 64, 5])
def test_half_precision_versions_round_as_few_times_as_they_must(monkeypatch, isa, dtype, dim):
    """In bf16 / fp16 every version accumulates in fp32 and rounds each output once: the output and the values'
    gradients within one rounding of the float64 definition on the same 16-bit inputs. The gradients through the
    scores (q and the keys) get two: the backward reads the saved 16-bit output in delta = rowsum(dO * O), as flash
    attention's does (measured worst over 400 random gradients: 1.22 roundings)."""
    for name, value in ISA_VERSIONS[isa].items():
        monkeypatch.setenv(name, value)
    q, k, v, w, lengths, groups = random_case(3, dtype, requires_grad=True, dim=dim)
    inputs = tensors_of(q, k, v, groups)
    grad = torch.randn(q.shape, generator=torch.Generator().manual_seed(dim)).to(dtype)
    out = window_attention(q, k, v, w, lengths, groups, backend="csrc-cpu")
    wide = [t.detach().double().requires_grad_() for t in inputs]
    wide_groups = [KeyGroup(wide[3 + 2 * i], wide[4 + 2 * i], g.lengths, g.index) for i, g in enumerate(groups)]
    ref = window_attention_reference(*wide[:3], w, lengths, wide_groups)
    got = torch.autograd.grad(out, inputs, grad)
    expected = torch.autograd.grad(ref, wide, grad.double())

    def tolerance(reference: torch.Tensor, roundings: int = 1) -> float:
        return roundings * torch.finfo(dtype).eps * max(1.0, reference.abs().max().item())

    assert out.dtype == dtype and max_error(out, ref) <= tolerance(ref)
    for name, a, b in zip(["q", "k", "v", "cls_k", "cls_v", "query_k", "query_v"], got, expected, strict=True):
        assert max_error(a, b) <= tolerance(b, 1 if name.endswith("v") else 2), name


@pytest.mark.skipif("csrc-cpu" not in BACKENDS, reason="extension not built")
@pytest.mark.parametrize("isa", ISA_VERSIONS)
def test_bf16_values_pass_through_bit_for_bit(monkeypatch, isa):
    """Window 0 without groups returns each row's own value: every one of the 65,536 bf16 bit patterns comes back
    unchanged (NaNs as NaN; -0 as 0, as fp32 sums make it), so the kernels' bf16 widening and rounding are exactly
    c10's."""
    for name, value in ISA_VERSIONS[isa].items():
        monkeypatch.setenv(name, value)
    v = torch.arange(-(2**15), 2**15, dtype=torch.int16).view(torch.bfloat16).reshape(1, 1, 2048, 32)
    q = k = torch.ones_like(v)
    out = window_attention(q, k, v, 0, torch.tensor([2048]), backend="csrc-cpu")
    nan = v.isnan()
    assert torch.equal(out.isnan(), nan)
    assert torch.equal(out[~nan], v[~nan])  # equal values of one dtype have equal bits, but for -0 and 0


@pytest.mark.skipif("csrc-cpu" not in BACKENDS, reason="extension not built")
@pytest.mark.parametrize("isa", ISA_VERSIONS)
def test_bf16_rounds_to_nearest_even(monkeypatch, isa):
    """Two keys with equal scores: each output is the mean of two bf16 values, exact in fp32, then rounded once; half
    of them are ties, which must round to even as torch rounds (a truncating or biased conversion fails here)."""
    for name, value in ISA_VERSIONS[isa].items():
        monkeypatch.setenv(name, value)
    v = torch.randn(4096, 1, 2, 32, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    q = k = torch.zeros_like(v)
    out = window_attention(q, k, v, 1, torch.full((4096,), 2), backend="csrc-cpu")
    mean = (v.float().sum(2, keepdim=True) / 2).to(torch.bfloat16).expand_as(v)
    assert torch.equal(out.view(torch.int16), mean.view(torch.int16))


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_groups_and_strided_inputs(backend):
    # [B, L, H, d] projections viewed as [B, H, L, d], the layout a model produces
    x = torch.randn(3, 11, 2, 4, 3)
    q, k, v = (x[..., i].transpose(1, 2) for i in range(3))
    lengths = torch.tensor([11, 4, 0])
    out = window_attention(q, k, v, 2, lengths, backend=backend)
    assert (out - window_attention_reference(q, k, v, 2, lengths)).abs().max().item() <= 1e-5


@pytest.mark.parametrize("backend", BACKENDS)
def test_window_zero_sees_only_itself_and_groups(backend):
    q, k, v = torch.randn(1, 1, 5, 4), torch.randn(1, 1, 5, 4), torch.randn(1, 1, 5, 4)
    assert torch.allclose(window_attention(q, k, v, 0, backend=backend), v, atol=1e-6)  # one key: p = 1
    group = KeyGroup(torch.full((1, 1, 1, 4), -1e4), torch.zeros(1, 1, 1, 4))  # a key no row attends to
    assert torch.allclose(window_attention(q.abs(), k.abs(), v, 0, groups=[group], backend=backend), v, atol=1e-6)


def test_backends_list_cpu_kernels():
    names = ops.backends()
    for op in ("window_attention",):
        assert names[op][-1] == "torch"
        assert ("csrc-cpu" in names[op]) == (ops.extension() is not None)


@pytest.mark.parametrize("bad", [-1, 1.5])
def test_bad_window_raises(bad):
    q = torch.randn(1, 1, 3, 2)
    with pytest.raises(ValueError, match="window"):
        window_attention(q, q, q, bad)


def test_group_needs_index_when_rows_differ():
    q = torch.randn(2, 1, 3, 2)
    with pytest.raises(ValueError, match="index"):
        window_attention(q, q, q, 1, groups=[KeyGroup(torch.randn(1, 1, 2, 2), torch.randn(1, 1, 2, 2))])


def test_attention_dropout_is_unbiased_and_only_in_the_torch_backend():
    """Training's attention dropout (the kernels have none): outputs differ per draw, their mean is the output."""
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 12, 4, generator=gen, dtype=torch.float64) for _ in range(3))
    lengths = torch.tensor([10])
    plain = window_attention(q, k, v, 2, lengths)
    torch.manual_seed(0)
    draws = torch.stack([window_attention(q, k, v, 2, lengths, dropout=0.3) for _ in range(200)])
    assert not torch.equal(draws[0], draws[1])
    torch.testing.assert_close(draws.mean(0), plain, atol=0.1, rtol=0)
    assert (draws[:, :, :, 10:] == 0).all()  # padding rows stay zero
