"""Rotary position embeddings (RoPE) at arbitrary, possibly fractional, positions of packed rows.

TITE's pooled query rows sit at window centres ``j * s + (k - 1) / 2``, so positions are float tensors rather than
indices into an integer table. Angles are computed in float32 like the reference (``pos * 10000^(-2i/d)``).

The rotation is one complex multiply over interleaved pairs ``(x[2i], x[2i+1])``: on CPU this is ~30x faster than
slicing even/odd columns. Models with half-split pairs ``(x[i], x[i + d/2])`` reorder their query/key projection rows
into interleaved order instead (see ``interleave_heads``); q.k is unchanged by applying one permutation to both.
"""

from __future__ import annotations

import torch


def inv_freq(head_dim: int, base: float = 10_000.0, device: torch.device | None = None) -> torch.Tensor:
    """``base^(-2i/d)`` for i = 0..d/2-1, in float32."""
    exponent = torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim
    return 1.0 / (base**exponent)


def rope_rotation(
    positions: torch.Tensor, head_dim: int, dtype: torch.dtype = torch.float32, base: float = 10_000.0
) -> torch.Tensor:
    """Unit complex numbers ``exp(i * pos * freq)`` for ``positions [T]``, shaped ``[T, 1, d/2]``.

    The angles are float32 (as in the reference); cos/sin are taken in float64 for float64 models, else float32.
    """
    angles = positions.to(torch.float32)[:, None] * inv_freq(head_dim, base, positions.device)[None, :]
    if dtype == torch.float64:
        angles = angles.double()
    return torch.polar(torch.ones_like(angles), angles)[:, None, :]


def apply_rope(x: torch.Tensor, rotation: torch.Tensor) -> torch.Tensor:
    """Rotate the interleaved pairs of ``x [T, heads, d]`` by ``rotation [T, 1, d/2]``."""
    pairs = x.unflatten(-1, (-1, 2))
    if x.dtype in (torch.float32, torch.float64):
        z = torch.view_as_complex(pairs.contiguous()) * rotation
        return torch.view_as_real(z).flatten(-2)
    cos, sin = rotation.real.to(x.dtype), rotation.imag.to(x.dtype)  # half precision: no complex kernels
    x0, x1 = pairs[..., 0], pairs[..., 1]
    return torch.stack((x0 * cos - x1 * sin, x1 * cos + x0 * sin), dim=-1).flatten(-2)


def interleave_heads(weight: torch.Tensor, heads: int) -> torch.Tensor:
    """Reorder the output rows of a projection (weight ``[h*d, ...]`` or bias ``[h*d]``) per head from half-split
    ``[x_0..x_{d/2-1}, x_{d/2}..x_{d-1}]`` to interleaved ``[x_0, x_{d/2}, x_1, x_{d/2+1}, ...]``."""
    rest = weight.shape[1:]
    return weight.reshape(heads, 2, -1, *rest).transpose(1, 2).reshape(weight.shape)
