"""Triton kernels on CPU under ``TRITON_INTERPRET=1``, against the pure-torch references (fp32 and fp16).

The variable must be set before triton is imported, so every check runs this file as a script in a subprocess.
The interpreter is slow: shapes stay tiny. Its bf16 arithmetic is unreliable, so bf16 is not checked here.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

CHECKS = ["pooling", "attention_forward", "attention_backward", "add_layer_norm"]


@pytest.mark.parametrize("check", CHECKS)
def test_triton_interpreted(check):
    pytest.importorskip("triton")
    env = dict(os.environ, TRITON_INTERPRET="1", PYTERRIER_TITE_BACKEND="")
    proc = subprocess.run([sys.executable, __file__, check], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"{check} ok" in proc.stdout


def _max_error(a, b) -> float:
    return (a.double() - b.double()).abs().max().item() if a.numel() else 0.0


def check_pooling() -> None:
    import torch

    from pyterrier_tite.ops import packed_mean_pool, packed_mean_pool_reference

    for dtype, tol in [(torch.float32, 1e-6), (torch.float16, 2e-3)]:
        for lengths, (k, s) in [([5, 0, 1, 9], (3, 2)), ([4, 7], (2, 2)), ([0], (2, 1)), ([6, 2, 3], (1, 1))]:
            cu = torch.zeros(len(lengths) + 1, dtype=torch.int32)
            cu[1:] = torch.cumsum(torch.tensor(lengths), 0)
            x = torch.randn(sum(lengths), 10).to(dtype).requires_grad_()
            out, out_cu = packed_mean_pool(x, cu, k, s, backend="triton")
            ref, ref_cu = packed_mean_pool_reference(x, cu, k, s)
            assert torch.equal(out_cu, ref_cu) and out.dtype == dtype
            assert _max_error(out, ref) <= tol, (lengths, k, s, _max_error(out, ref))
            if out.numel():
                grad = torch.randn(out.shape).to(dtype)
                (g,) = torch.autograd.grad(out, x, grad)
                (g_ref,) = torch.autograd.grad(ref, x, grad)
                assert _max_error(g, g_ref) <= tol, (lengths, k, s)
    print("pooling ok")


def _case(seed: int, dtype, n_groups: int, requires_grad: bool = False):
    import torch

    from pyterrier_tite.ops import KeyGroup

    gen = torch.Generator().manual_seed(seed)
    batch, heads, length, dim = 3, 2, 21, [4, 8, 20][seed % 3]
    w = [0, 2, 5, 30][seed % 4]

    def rnd(*shape):
        return torch.randn(*shape, generator=gen).to(dtype).requires_grad_(requires_grad)

    q, k, v = (rnd(batch, heads, length, dim) for _ in range(3))
    lengths = torch.tensor([length, 1 if seed % 2 else 0, 13])
    groups = [KeyGroup(rnd(batch, heads, 1, dim), rnd(batch, heads, 1, dim))]
    groups.append(
        KeyGroup(
            rnd(2, heads, 18, dim),
            rnd(2, heads, 18, dim),
            lengths=torch.tensor([18, 3]),
            index=torch.tensor([1, 0, 1]),
        )
    )
    return q, k, v, w, lengths, groups[:n_groups]


def check_attention_forward() -> None:
    import torch

    from pyterrier_tite.ops import window_attention, window_attention_reference
    from pyterrier_tite.ops import window_attention_triton as wat

    # default launch settings, and tiles larger than the band / segment / groups (rows, band keys, group keys, warps)
    for setting in (None, (32, 32, 64, 2), (16, 64, 16, 1)):
        wat.FORWARD_CONFIG = setting
        for seed in range(3):  # 0, 1 and 2 key groups; windows 0, 2, 5
            for dtype, tol in [(torch.float32, 1e-5), (torch.float16, 2e-3)]:
                q, k, v, w, lengths, groups = _case(seed, dtype, n_groups=seed % 3)
                out = window_attention(q, k, v, w, lengths, groups, backend="triton")
                ref = window_attention_reference(q, k, v, w, lengths, groups)
                assert out.dtype == dtype
                assert _max_error(out, ref) <= tol, (setting, seed, dtype, _max_error(out, ref))
    wat.FORWARD_CONFIG = None
    print("attention_forward ok")


def check_attention_backward() -> None:
    import torch

    from pyterrier_tite.ops import window_attention, window_attention_reference

    for seed in range(2):  # no groups with w = 0; two groups (one shared through an index) with w = 2
        q, k, v, w, lengths, groups = _case(seed, torch.float32, n_groups=2 * seed, requires_grad=True)
        inputs = [q, k, v, *[t for g in groups for t in (g.k, g.v)]]
        grad = torch.randn(q.shape)
        got = torch.autograd.grad(window_attention(q, k, v, w, lengths, groups, backend="triton"), inputs, grad)
        expected = torch.autograd.grad(window_attention_reference(q, k, v, w, lengths, groups), inputs, grad)
        for i, (a, b) in enumerate(zip(got, expected, strict=True)):
            assert _max_error(a, b) <= 1e-5, (seed, i, _max_error(a, b))
    print("attention_backward ok")


def check_add_layer_norm() -> None:
    """LayerNorm(x + residual) in one pass: rows not a multiple of the program's, widths not a power of two, mixed
    input dtypes (a bf16 / fp16 sub-layer output plus an fp32 residual, as under autocast)."""
    import torch
    import torch.nn.functional as F

    from pyterrier_tite.ops import add_layer_norm

    gen = torch.Generator().manual_seed(0)
    for shape in [(3, 5, 384), (7, 100), (1, 1, 32)]:
        for dtype, residual_dtype, tol in [
            (torch.float32, torch.float32, 1e-5),
            (torch.float16, torch.float16, 2e-3),
            (torch.float16, torch.float32, 2e-3),
        ]:
            x = (torch.randn(shape, generator=gen) * 3 + 1).to(dtype)
            residual = torch.randn(shape, generator=gen).to(residual_dtype)
            weight, bias = torch.randn(shape[-1], generator=gen), torch.randn(shape[-1], generator=gen)
            with torch.no_grad():
                got = add_layer_norm(x, residual, weight, bias, 1e-12, backend="triton")
            expected = F.layer_norm(x.double() + residual.double(), (shape[-1],), weight.double(), bias.double(), 1e-12)
            assert got.dtype == torch.promote_types(dtype, residual_dtype) and got.shape == x.shape
            assert _max_error(got, expected) <= tol * 10, (shape, dtype, residual_dtype, _max_error(got, expected))
    print("add_layer_norm ok")


if __name__ == "__main__":
    assert os.environ.get("TRITON_INTERPRET") == "1", "run through pytest (sets TRITON_INTERPRET=1)"
    globals()[f"check_{sys.argv[1]}"]()
