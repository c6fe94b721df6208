"""Packed (varlen) mean pooling with kernel k and stride s, the op TITE shrinks its sequences with.

Sequences are packed into ``x [total_tokens, H]`` with offsets ``cu_seqlens`` (int32, leading 0). A sequence of length
L pools to ``ceil(max(0, L - k) / s) + 1`` rows (0 when L = 0); row j averages positions ``[j*s, min(j*s + k, L))``
(a truncated last window averages over the tokens it has).
"""

from __future__ import annotations

import torch

from pyterrier_tite.ops._extension import choose_backend, has_csrc, has_triton, register_backends

register_backends("packed_mean_pool", [("triton", has_triton), ("csrc-cpu", has_csrc), ("torch", lambda: True)])


def pooled_lengths(lengths: torch.Tensor, kernel: int, stride: int) -> torch.Tensor:
    """Output length of every sequence: ``ceil(max(0, L - k) / s) + 1``, and 0 for empty sequences."""
    _check_kernel_stride(kernel, stride)
    lengths = lengths.long()
    pooled = torch.div((lengths - kernel).clamp(min=0) + stride - 1, stride, rounding_mode="floor") + 1
    return torch.where(lengths > 0, pooled, torch.zeros_like(pooled))


def pooled_cu_seqlens(cu_seqlens: torch.Tensor, kernel: int, stride: int) -> torch.Tensor:
    """``cu_seqlens`` of the pooled sequences (int32, leading 0)."""
    out_lengths = pooled_lengths(cu_seqlens[1:] - cu_seqlens[:-1], kernel, stride)
    out = torch.zeros(cu_seqlens.numel(), dtype=torch.int32, device=cu_seqlens.device)
    out[1:] = torch.cumsum(out_lengths, 0)
    return out


def packed_mean_pool_reference(
    x: torch.Tensor, cu_seqlens: torch.Tensor, kernel: int, stride: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pure-torch definition of the op (differentiable through autograd); accumulates in float32 or better."""
    out_cu = pooled_cu_seqlens(cu_seqlens, kernel, stride)
    out_lengths = (out_cu[1:] - out_cu[:-1]).long()  # every pooled row: its sequence, index j, first input row, count
    seq_of_row = torch.repeat_interleave(torch.arange(out_lengths.numel(), device=cu_seqlens.device), out_lengths)
    j = torch.arange(int(out_cu[-1]), device=cu_seqlens.device) - out_cu[:-1].long()[seq_of_row]
    starts = cu_seqlens[:-1].long()[seq_of_row] + j * stride
    counts = torch.minimum(j * stride + kernel, (cu_seqlens[1:] - cu_seqlens[:-1]).long()[seq_of_row]) - j * stride
    offsets = torch.arange(kernel, device=x.device)
    rows = starts[:, None] + offsets[None, :]  # [T', k]
    valid = offsets[None, :] < counts[:, None]
    acc_dtype = torch.promote_types(x.dtype, torch.float32)
    gathered = (
        x.to(acc_dtype)[rows.clamp(max=max(x.shape[0] - 1, 0))] if x.shape[0] else x.new_zeros(0, kernel, x.shape[1])
    )
    summed = (gathered * valid[..., None].to(acc_dtype)).sum(1)
    pooled = summed / counts.clamp(min=1)[:, None].to(acc_dtype)
    return pooled.to(x.dtype), out_cu


def packed_mean_pool(
    x: torch.Tensor,
    cu_seqlens: torch.Tensor,
    kernel: int,
    stride: int,
    backend: str | None = None,
    out_cu_seqlens: torch.Tensor | None = None,
    out_total: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pool packed sequences; returns ``(pooled [total_pooled, H], pooled_cu_seqlens)``. ``backend`` forces one of
    ``backends()['packed_mean_pool']`` (default: the fastest for ``x``'s device). ``out_cu_seqlens`` / ``out_total``:
    the pooled offsets and row count where the caller knows them (on GPU this spares a device-to-host sync)."""
    if x.dim() != 2:
        raise ValueError(f"x must be packed as [total_tokens, hidden], got shape {tuple(x.shape)}")
    cu_seqlens = cu_seqlens.to(device=x.device, dtype=torch.int32)
    _check_kernel_stride(kernel, stride)
    chosen = choose_backend("packed_mean_pool", x.device, backend)
    if chosen == "torch":
        return packed_mean_pool_reference(x, cu_seqlens, kernel, stride)
    if out_cu_seqlens is None:
        out_cu = pooled_cu_seqlens(cu_seqlens, kernel, stride)
    else:
        out_cu = out_cu_seqlens.to(device=x.device, dtype=torch.int32)
    if chosen == "triton":
        from pyterrier_tite.ops import pooling_triton

        return pooling_triton.TritonPackedMeanPool.apply(x, cu_seqlens, out_cu, kernel, stride, out_total), out_cu
    return _CsrcPackedMeanPool.apply(x, cu_seqlens, out_cu, kernel, stride), out_cu


class _CsrcPackedMeanPool(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, cu_seqlens, out_cu, kernel, stride):
        ctx.save_for_backward(cu_seqlens, out_cu)
        ctx.kernel, ctx.stride = kernel, stride
        return torch.ops.tite.packed_mean_pool(x, cu_seqlens, out_cu, kernel, stride)

    @staticmethod
    def backward(ctx, grad):
        cu_seqlens, out_cu = ctx.saved_tensors
        grad_x = torch.ops.tite.packed_mean_pool_backward(grad.contiguous(), cu_seqlens, out_cu, ctx.kernel, ctx.stride)
        return grad_x, None, None, None, None


def _check_kernel_stride(kernel: int, stride: int) -> None:
    if kernel < 1 or stride < 1:
        raise ValueError(f"kernel and stride must be >= 1, got kernel={kernel}, stride={stride}")
    if stride > kernel:
        raise ValueError(f"stride ({stride}) must not exceed kernel ({kernel}): tokens would be skipped")
