"""Triton kernel of ``LayerNorm(x + residual)`` in one pass (GPU; CPU tensors under ``TRITON_INTERPRET=1``): both
inputs read once, summed and normalised in fp32, the result written once in the output dtype."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

#: rows per program and warps: small rows (hidden 384-1024) need several per program to keep the loads wide
ROWS = 4
WARPS = 4


@triton.jit
def _add_layer_norm(x_ptr, r_ptr, w_ptr, b_ptr, out_ptr, n_rows, hidden, eps,
                    ROWS: tl.constexpr, BLOCK_H: tl.constexpr):  # fmt: skip
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_H)
    cmask = cols < hidden
    mask = (rows < n_rows)[:, None] & cmask[None, :]
    offs = rows.to(tl.int64)[:, None] * hidden + cols[None, :]
    s = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    s += tl.load(r_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(s, 1) / hidden
    centred = tl.where(mask, s - mean[:, None], 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(centred * centred, 1) / hidden + eps)
    w = tl.load(w_ptr + cols, mask=cmask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=cmask, other=0.0).to(tl.float32)
    y = centred * rstd[:, None] * w[None, :] + b[None, :]
    tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


def add_layer_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float, dtype: torch.dtype
) -> torch.Tensor:
    """``LayerNorm(x + residual)`` over the last dim, written in ``dtype`` (inference: no gradient)."""
    hidden = x.shape[-1]
    x2, r2 = x.reshape(-1, hidden).contiguous(), residual.reshape(-1, hidden).contiguous()
    out = torch.empty(x2.shape, dtype=dtype, device=x.device)
    n_rows = x2.shape[0]
    if n_rows:
        _add_layer_norm[(triton.cdiv(n_rows, ROWS),)](
            x2, r2, weight.contiguous(), bias.contiguous(), out, n_rows, hidden, eps,
            ROWS=ROWS, BLOCK_H=triton.next_power_of_2(hidden), num_warps=WARPS,
        )  # fmt: skip
    return out.view(x.shape)
