"""``LayerNorm(x + residual)``, the closing step of every post-LN BERT sub-layer, as one op.

On a GPU the eager path is two memory-bound passes (the add writes the sum, LayerNorm reads it back) and torch's
LayerNorm kernel runs far below memory bandwidth at BERT widths (measured on an H200: 98 us per call on
[65k, 384] bf16, about 1 TB/s); the Triton kernel reads both inputs once and writes once. It serves inference only:
with gradients, or on the CPU, the op is ``F.layer_norm(x + residual)`` itself.

Its launch goes through Triton's Python launcher, which costs more host time than an aten kernel; where the host
already limits the pace (eager sparse cross-encoder on an H200: 4k-token documents went from 0.50 to 0.60 ms each)
that loses more than the kernel gains, so the sparse cross-encoder calls it only inside its CUDA graphs, where
launches cost nothing (passages: 1.18x -> 1.3-1.6x HF BERT).

The output dtype is what the eager path gives: float32 inside a CUDA autocast region (autocast runs LayerNorm in
float32), else the promoted dtype of the two inputs.
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
