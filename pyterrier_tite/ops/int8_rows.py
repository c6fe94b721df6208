"""Per-token int8 quantization around ``torch._int_mm``: the compiled CPU kernels (``csrc/int8_rows_cpu.cpp``: one
pass each) or the same arithmetic in torch ops, giving the same int8 values (scale by ``1 / scale``, clamp to
[-127, 127], round half to even)."""

from __future__ import annotations

import torch

from pyterrier_tite.ops._extension import choose_backend, has_csrc, register_backends

register_backends("int8_rows", [("csrc-cpu", has_csrc), ("torch", lambda: True)])


def quantize_rows(
    x: torch.Tensor, factor: torch.Tensor | None = None, backend: str | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``x`` [T, K] float32 (times ``factor`` [K] per column) as int8 with one scale per row: ``(q [T, K] int8,
    scale [T, 1])``, ``x * factor ~= q * scale``, ``scale = max|row| / 127``."""
    if choose_backend("int8_rows", x.device, backend) != "torch":
        return torch.ops.tite.quantize_rows(x, factor)
    rows = x * factor if factor is not None else x.clone()
    low, high = torch.aminmax(rows, dim=1, keepdim=True)
    scale = torch.maximum(-low, high).clamp_min_(1e-12).div_(127)
    return rows.mul_(1 / scale).clamp_(-127, 127).round_().to(torch.int8), scale


def dequantize_rows(
    acc: torch.Tensor,
    row_scale: torch.Tensor,
    col_scale: torch.Tensor,
    bias: torch.Tensor | None = None,
    backend: str | None = None,
) -> torch.Tensor:
    """int32 products ``acc`` [T, N] back to float32: ``acc * row_scale[T] * col_scale[N] + bias[N]``."""
    if choose_backend("int8_rows", acc.device, backend) != "torch":
        return torch.ops.tite.dequantize_rows(acc, row_scale, col_scale, bias)
    out = acc.float().mul_(row_scale.reshape(-1, 1)).mul_(col_scale)
    return out.add_(bias) if bias is not None else out
