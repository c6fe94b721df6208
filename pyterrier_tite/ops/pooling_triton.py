"""Triton kernels of packed mean pooling (GPU; CPU tensors under ``TRITON_INTERPRET=1``), as in ``pooling.py``.

Both passes gather (one program per output row, resp. input row, and block of hidden units): no atomics; fp32 inside.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _pool_fwd(x_ptr, out_ptr, cu_ptr, out_cu_ptr, seq_ptr, hidden, kernel, stride, BLOCK_H: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    cmask = cols < hidden
    b = tl.load(seq_ptr + row)
    seq_start = tl.load(cu_ptr + b)
    seq_len = tl.load(cu_ptr + b + 1) - seq_start
    lo = (row - tl.load(out_cu_ptr + b)) * stride
    hi = tl.minimum(lo + kernel, seq_len)
    acc = tl.zeros([BLOCK_H], dtype=tl.float32)
    for t in range(lo, hi):
        acc += tl.load(x_ptr + (seq_start + t).to(tl.int64) * hidden + cols, mask=cmask, other=0.0).to(tl.float32)
    acc = acc / (hi - lo).to(tl.float32)
    tl.store(out_ptr + row.to(tl.int64) * hidden + cols, acc.to(out_ptr.dtype.element_ty), mask=cmask)


@triton.jit
def _pool_bwd(grad_ptr, gx_ptr, cu_ptr, out_cu_ptr, seq_ptr, hidden, kernel, stride, BLOCK_H: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    cmask = cols < hidden
    b = tl.load(seq_ptr + row)
    seq_start = tl.load(cu_ptr + b)
    seq_len = tl.load(cu_ptr + b + 1) - seq_start
    out_start = tl.load(out_cu_ptr + b)
    n_out = tl.load(out_cu_ptr + b + 1) - out_start
    p = row - seq_start
    # windows j with j*s <= p < j*s + k
    j_lo = tl.where(p >= kernel, (p - kernel) // stride + 1, 0)
    j_hi = tl.minimum(p // stride, n_out - 1)
    acc = tl.zeros([BLOCK_H], dtype=tl.float32)
    for j in range(j_lo, j_hi + 1):
        count = tl.minimum(j * stride + kernel, seq_len) - j * stride
        g = tl.load(grad_ptr + (out_start + j).to(tl.int64) * hidden + cols, mask=cmask, other=0.0).to(tl.float32)
        acc += g / count.to(tl.float32)
    tl.store(gx_ptr + row.to(tl.int64) * hidden + cols, acc.to(gx_ptr.dtype.element_ty), mask=cmask)


def _owner(cu: torch.Tensor, total: int) -> torch.Tensor:
    """Sequence index of every packed row (int32)."""
    rows = torch.arange(total, device=cu.device, dtype=cu.dtype)
    return torch.searchsorted(cu[1:].contiguous(), rows, right=True).to(torch.int32)


def _launch(kernel_fn, src: torch.Tensor, total: int, owner_cu: torch.Tensor, cu, out_cu, kernel, stride):
    out = torch.empty(total, src.shape[1], dtype=src.dtype, device=src.device)
    if total == 0 or src.shape[1] == 0:
        return out
    block = min(triton.next_power_of_2(src.shape[1]), 1024)
    grid = (total, triton.cdiv(src.shape[1], block))
    seq = _owner(owner_cu, total)
    kernel_fn[grid](src, out, cu, out_cu, seq, src.shape[1], kernel, stride, BLOCK_H=block)
    return out


class TritonPackedMeanPool(torch.autograd.Function):
    """``apply(x [total, H], cu_seqlens, out_cu_seqlens, kernel, stride[, total_pooled])`` -> ``[total_pooled, H]``."""

    @staticmethod
    def forward(ctx, x, cu_seqlens, out_cu, kernel, stride, total_out=None):
        x, cu_seqlens, out_cu = x.contiguous(), cu_seqlens.contiguous(), out_cu.contiguous()
        ctx.save_for_backward(cu_seqlens, out_cu)
        ctx.kernel, ctx.stride, ctx.total = kernel, stride, x.shape[0]
        if total_out is None:  # reading it from the GPU waits for all queued work: callers that know it pass it
            total_out = int(out_cu[-1])
        return _launch(_pool_fwd, x, total_out, out_cu, cu_seqlens, out_cu, kernel, stride)

    @staticmethod
    def backward(ctx, grad):
        cu_seqlens, out_cu = ctx.saved_tensors
        grad_x = _launch(
            _pool_bwd, grad.contiguous(), ctx.total, cu_seqlens, cu_seqlens, out_cu, ctx.kernel, ctx.stride
        )
        return grad_x, None, None, None, None, None
