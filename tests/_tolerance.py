"""Tolerances that follow from the dtype and the size of the values, never from one machine.

Two evaluations of the same float maths in a different order (another CPU's SIMD width or GEMM blocking, another
batch padding, packed vs padded) differ by a few roundings per accumulation step, each at most the dtype's unit
roundoff times the magnitude of what is summed. ``float_atol`` allows ``steps`` such roundings at the largest
magnitude involved: far below any real bug (a wrong mask, position or weight moves outputs by 1e-2 or more), far
above the reordering noise of the tiny test models on any x86-64 CPU (AVX2, AVX-512, AMX) and thread count.
"""

from __future__ import annotations

import torch

#: roundings allowed per comparison: depth x width of the tiny test models' accumulations, with margin
DEFAULT_STEPS = 64


def float_atol(*tensors: torch.Tensor, dtype: torch.dtype | None = None, steps: int = DEFAULT_STEPS) -> float:
    """Absolute tolerance for ``tensors`` computed in ``dtype`` (default: the lowest precision among them)."""
    tensors = tuple(t for t in tensors if t.numel())
    if dtype is None:
        dtypes = [t.dtype for t in tensors if t.is_floating_point()] or [torch.float32]
        dtype = max(dtypes, key=lambda d: torch.finfo(d).eps)
    scale = max([float(t.detach().abs().max()) for t in tensors] + [1.0])
    return steps * torch.finfo(dtype).eps * scale


def assert_float_close(got, expected, *, dtype: torch.dtype | None = None, steps: int = DEFAULT_STEPS, msg=None):
    """``torch.testing.assert_close`` with ``float_atol`` (numpy arrays accepted) and no relative term."""
    got, expected = torch.as_tensor(got), torch.as_tensor(expected)
    if dtype is None:
        dtype = got.dtype if got.is_floating_point() else torch.float32
        if expected.is_floating_point() and torch.finfo(expected.dtype).eps > torch.finfo(dtype).eps:
            dtype = expected.dtype
    atol = float_atol(got, expected, dtype=dtype, steps=steps)
    torch.testing.assert_close(got, expected.to(got.dtype), atol=atol, rtol=0, msg=msg)
