"""``LayerNorm(x + residual)``, the closing step of every post-LN BERT sub-layer, as one op.

On a GPU the Triton kernel reads both inputs once and writes once, where eager torch makes two memory-bound passes far
below bandwidth (H200: 98 us per call on [65k, 384] bf16). Inference only: with gradients, or on the CPU, it is
``F.layer_norm(x + residual)``. Triton's Python launcher costs host time, so the sparse cross-encoder calls it only
inside its CUDA graphs. The output dtype is the eager path's: float32 under CUDA autocast, else the promoted one.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from pyterrier_tite.ops._extension import choose_backend, has_triton, register_backends

register_backends("add_layer_norm", [("triton", has_triton), ("torch", lambda: True)])


def add_layer_norm(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    eps: float,
    backend: str | None = None,
) -> torch.Tensor:
    """``F.layer_norm(x + residual, (H,), weight, bias, eps)`` for x, residual [..., H] of the same shape."""
    if x.shape != residual.shape:
        raise ValueError(f"x {tuple(x.shape)} and residual {tuple(residual.shape)} must have the same shape")
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (x, residual, weight, bias))
    chosen = "torch" if needs_grad else choose_backend("add_layer_norm", x.device, backend)
    if chosen == "torch":
        return F.layer_norm(x + residual, (x.shape[-1],), weight, bias, eps)
    from pyterrier_tite.ops import layer_norm_triton

    if x.device.type == "cuda" and torch.is_autocast_enabled("cuda"):
        dtype = torch.float32
    else:
        dtype = torch.promote_types(x.dtype, residual.dtype)
    return layer_norm_triton.add_layer_norm(x, residual, weight, bias, eps, dtype)
