"""Rotary position embeddings (RoPE) at arbitrary, possibly fractional, positions of packed rows.

TITE's pooled query rows sit at window centres ``j * s + (k - 1) / 2``, so positions are float tensors rather than
indices into an integer table. Angles are computed in float32 like the reference (``pos * 10000^(-2i/d)``).
"""

from __future__ import annotations

import torch


def inv_freq(head_dim: int, base: float = 10_000.0, device: torch.device | None = None) -> torch.Tensor:
    """``base^(-2i/d)`` for i = 0..d/2-1, in float32."""
    exponent = torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim
    return 1.0 / (base**exponent)


def rope_cos_sin(
    positions: torch.Tensor, head_dim: int, dtype: torch.dtype, base: float = 10_000.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos / sin of ``positions [T]`` times the inverse frequencies, shaped ``[T, 1, d/2]`` to broadcast over heads."""
    angles = positions.to(torch.float32)[:, None] * inv_freq(head_dim, base, positions.device)[None, :]
    return angles.cos().to(dtype)[:, None, :], angles.sin().to(dtype)[:, None, :]


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool) -> torch.Tensor:
    """Rotate ``x [T, heads, d]``: pairs ``(x[2i], x[2i+1])`` when interleaved, else ``(x[i], x[i + d/2])``."""
    if interleaved:
        pairs = x.unflatten(-1, (-1, 2))
        x0, x1 = pairs[..., 0], pairs[..., 1]
        return torch.stack((x0 * cos - x1 * sin, x1 * cos + x0 * sin), dim=-1).flatten(-2)
    x0, x1 = x.chunk(2, dim=-1)
    return torch.cat((x0 * cos - x1 * sin, x1 * cos + x0 * sin), dim=-1)
