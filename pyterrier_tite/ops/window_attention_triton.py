"""Triton kernels of the fused windowed attention (GPU; CPU tensors under ``TRITON_INTERPRET=1``), fp32 accumulation.

Forward: one program per (row block, head, batch row) runs an online softmax over the key groups, then the band keys,
so only BLOCK_M x BLOCK_N score tiles exist. Backward recomputes probabilities from the saved log-sum-exp; group dk / dv
are added atomically (a group row is shared by many batch rows), band dk / dv gathered by a key-block kernel.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

MAX_GROUPS = 2
#: tile sizes of the backward kernels (the forward's: :func:`forward_config`)
BLOCK_M = 16
BLOCK_N = 16
#: forces the forward's (BLOCK_M, BLOCK_N, BLOCK_G, num_warps), e.g. for ``benchmarks/window_attention_configs.py``
FORWARD_CONFIG: tuple[int, int, int, int] | None = None


def forward_config(length: int, window: int, group_keys: int) -> tuple[int, int, int, int]:
    """(rows per program, band keys per tile, group keys per tile, warps) of the forward, measured on an H200: a row
    streaming a long key group wants wide group tiles (1.7x at 4k tokens); a long segment few warps per small tile
    (2.2x at w=4, 2.6x at w=64). One warp gave wrong outputs with 64-key tiles on that GPU, so none is used."""
    if FORWARD_CONFIG is not None:
        return FORWARD_CONFIG
    if length <= 64 and group_keys > 128:
        return 16, 64, 128, 4
    if window <= 8:
        return 32, 32, 16, 2
    return 32, 16, 16, 2


@triton.jit
def _scores(q, k_ptrs, kmask, scale):
    k = tl.load(k_ptrs, mask=kmask, other=0.0)
    return tl.dot(q, tl.trans(k), input_precision="ieee") * scale


@triton.jit
def _online_update(s, valid, m_i, l_i, acc, v_ptrs, vmask):
    """Fold one score tile into the running max / sum / output (rows with nothing valid stay untouched)."""
    s = tl.where(valid, s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    p = tl.exp(s - m_safe[:, None])
    alpha = tl.exp(m_i - m_safe)
    v = tl.load(v_ptrs, mask=vmask, other=0.0)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision="ieee")
    return m_new, l_i * alpha + tl.sum(p, 1), acc


@triton.jit
def _row_block(len_ptr, sb, sh, D, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr):
    """This program's row block of (batch row b, head h): first row, rows, head dims, their masks, q / k / v offset."""
    m0 = tl.program_id(0) * BLOCK_M
    h = tl.program_id(1)
    b = tl.program_id(2)
    length = tl.load(len_ptr + b)
    rows = m0 + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_D)
    return m0, h, b, length, rows, cols, rows < length, cols[None, :] < D, b.to(tl.int64) * sb + h * sh


@triton.jit
def _fwd_group(q, m_i, l_i, acc, gk, gv, glen_ptr, gidx_ptr, gsb, gsh, gsl, b, h, row_ok, cols, dmask, scale,
               BLOCK_N: tl.constexpr):  # fmt: skip
    """Fold the full key group of batch row b (its group row r = index[b], keys < lengths[r]) into the softmax."""
    r = tl.load(gidx_ptr + b)
    glen = tl.load(glen_ptr + r)
    gbase = r.to(tl.int64) * gsb + h * gsh
    for n0 in range(0, glen, BLOCK_N):
        keys = n0 + tl.arange(0, BLOCK_N)
        kmask = (keys[:, None] < glen) & dmask
        offs = gbase + keys[:, None] * gsl + cols[None, :]
        s = _scores(q, gk + offs, kmask, scale)
        valid = row_ok[:, None] & (keys[None, :] < glen)
        m_i, l_i, acc = _online_update(s, valid, m_i, l_i, acc, gv + offs, kmask)
    return m_i, l_i, acc


@triton.jit
def _fwd(
    q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, len_ptr,
    sb, sh, sl, ob, oh, ol,
    g0k, g0v, g0len, g0idx, g0b, g0h, g0l, g0n,
    g1k, g1v, g1len, g1idx, g1b, g1h, g1l, g1n,
    H, L, D, window, scale,
    NUM_GROUPS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_G: tl.constexpr,
    BLOCK_D: tl.constexpr,
):  # fmt: skip
    m0, h, b, length, rows, cols, row_ok, dmask, base = _row_block(len_ptr, sb, sh, D, BLOCK_M, BLOCK_D)
    q = tl.load(q_ptr + base + rows[:, None] * sl + cols[None, :], mask=row_ok[:, None] & dmask, other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    if NUM_GROUPS >= 1:
        m_i, l_i, acc = _fwd_group(
            q, m_i, l_i, acc, g0k, g0v, g0len, g0idx, g0b, g0h, g0l, b, h, row_ok, cols, dmask, scale, BLOCK_G
        )
    if NUM_GROUPS >= 2:
        m_i, l_i, acc = _fwd_group(
            q, m_i, l_i, acc, g1k, g1v, g1len, g1idx, g1b, g1h, g1l, b, h, row_ok, cols, dmask, scale, BLOCK_G
        )
    lo = tl.maximum(m0 - window, 0)
    hi = tl.minimum(m0 + BLOCK_M + window, length)
    for n0 in range(lo, hi, BLOCK_N):
        keys = n0 + tl.arange(0, BLOCK_N)
        kmask = (keys[:, None] < hi) & dmask
        offs = base + keys[:, None] * sl + cols[None, :]
        s = _scores(q, k_ptr + offs, kmask, scale)
        near = tl.abs(keys[None, :] - rows[:, None]) <= window
        valid = row_ok[:, None] & near & (keys[None, :] < hi)
        m_i, l_i, acc = _online_update(s, valid, m_i, l_i, acc, v_ptr + offs, kmask)
    l_safe = tl.where(l_i > 0, l_i, 1.0)
    out = tl.where(row_ok[:, None], acc / l_safe[:, None], 0.0)
    obase = b.to(tl.int64) * ob + h * oh
    tl.store(
        o_ptr + obase + rows[:, None] * ol + cols[None, :],
        out.to(o_ptr.dtype.element_ty),
        mask=(rows < L)[:, None] & dmask,
    )
    lse = tl.where(row_ok, m_i + tl.log(l_safe), float("-inf"))
    tl.store(lse_ptr + (b * H + h).to(tl.int64) * L + rows, lse, mask=rows < L)


@triton.jit
def _ds(q, do, k_ptrs, v_ptrs, kmask, valid, lse, delta, scale):
    """Probabilities and score gradients of one tile (rows x keys), recomputed from the log-sum-exp."""
    k = tl.load(k_ptrs, mask=kmask, other=0.0)
    v = tl.load(v_ptrs, mask=kmask, other=0.0)
    s = tl.dot(q, tl.trans(k), input_precision="ieee") * scale
    p = tl.where(valid, tl.exp(s - lse[:, None]), 0.0)
    dp = tl.dot(do, tl.trans(v), input_precision="ieee")
    return p, p * (dp - delta[:, None]), k


@triton.jit
def _bwd_group(q, do, lse, delta, dq, gk, gv, glen_ptr, gidx_ptr, gsb, gsh, gsl, gn, gdk, gdv,
               b, h, H, D, row_ok, cols, dmask, scale, BLOCK_N: tl.constexpr):  # fmt: skip
    """dq from one key group; its dk / dv are added atomically (a group row is shared by many batch rows)."""
    r = tl.load(gidx_ptr + b)
    glen = tl.load(glen_ptr + r)
    gbase = r.to(tl.int64) * gsb + h * gsh
    dbase = (r.to(tl.int64) * H + h) * gn * D  # the fp32 group gradients are contiguous [Bg, H, G, D]
    for n0 in range(0, glen, BLOCK_N):
        keys = n0 + tl.arange(0, BLOCK_N)
        kmask = (keys[:, None] < glen) & dmask
        offs = gbase + keys[:, None] * gsl + cols[None, :]
        valid = row_ok[:, None] & (keys[None, :] < glen)
        p, ds, k = _ds(q, do, gk + offs, gv + offs, kmask, valid, lse, delta, scale)
        dq += tl.dot(ds.to(k.dtype), k, input_precision="ieee") * scale
        doffs = dbase + keys[:, None] * D + cols[None, :]
        tl.atomic_add(gdk + doffs, tl.dot(tl.trans(ds.to(q.dtype)), q, input_precision="ieee") * scale, mask=kmask)
        tl.atomic_add(gdv + doffs, tl.dot(tl.trans(p.to(do.dtype)), do, input_precision="ieee"), mask=kmask)
    return dq


@triton.jit
def _bwd_rows(
    q_ptr, k_ptr, v_ptr, do_ptr, dq_ptr, lse_ptr, delta_ptr, len_ptr,
    sb, sh, sl, ob, oh, ol,
    g0k, g0v, g0len, g0idx, g0b, g0h, g0l, g0n, g0dk, g0dv,
    g1k, g1v, g1len, g1idx, g1b, g1h, g1l, g1n, g1dk, g1dv,
    H, L, D, window, scale,
    NUM_GROUPS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):  # fmt: skip
    m0, h, b, length, rows, cols, row_ok, dmask, base = _row_block(len_ptr, sb, sh, D, BLOCK_M, BLOCK_D)
    rmask = row_ok[:, None] & dmask
    obase = b.to(tl.int64) * ob + h * oh
    q = tl.load(q_ptr + base + rows[:, None] * sl + cols[None, :], mask=rmask, other=0.0)
    do = tl.load(do_ptr + obase + rows[:, None] * ol + cols[None, :], mask=rmask, other=0.0)
    stat = (b * H + h).to(tl.int64) * L + rows
    lse = tl.load(lse_ptr + stat, mask=row_ok, other=0.0)
    delta = tl.load(delta_ptr + stat, mask=row_ok, other=0.0)
    dq = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    if NUM_GROUPS >= 1:
        dq = _bwd_group(q, do, lse, delta, dq, g0k, g0v, g0len, g0idx, g0b, g0h, g0l, g0n, g0dk, g0dv,
                        b, h, H, D, row_ok, cols, dmask, scale, BLOCK_N)  # fmt: skip
    if NUM_GROUPS >= 2:
        dq = _bwd_group(q, do, lse, delta, dq, g1k, g1v, g1len, g1idx, g1b, g1h, g1l, g1n, g1dk, g1dv,
                        b, h, H, D, row_ok, cols, dmask, scale, BLOCK_N)  # fmt: skip
    lo = tl.maximum(m0 - window, 0)
    hi = tl.minimum(m0 + BLOCK_M + window, length)
    for n0 in range(lo, hi, BLOCK_N):
        keys = n0 + tl.arange(0, BLOCK_N)
        kmask = (keys[:, None] < hi) & dmask
        offs = base + keys[:, None] * sl + cols[None, :]
        valid = row_ok[:, None] & (tl.abs(keys[None, :] - rows[:, None]) <= window) & (keys[None, :] < hi)
        p, ds, k = _ds(q, do, k_ptr + offs, v_ptr + offs, kmask, valid, lse, delta, scale)
        dq += tl.dot(ds.to(k.dtype), k, input_precision="ieee") * scale
    tl.store(
        dq_ptr + obase + rows[:, None] * ol + cols[None, :],
        dq.to(dq_ptr.dtype.element_ty),
        mask=(rows < L)[:, None] & dmask,
    )


@triton.jit
def _bwd_band_keys(
    q_ptr, k_ptr, v_ptr, do_ptr, dk_ptr, dv_ptr, lse_ptr, delta_ptr, len_ptr,
    sb, sh, sl, ob, oh, ol,
    H, L, D, window, scale,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):  # fmt: skip
    n0 = tl.program_id(0) * BLOCK_N
    h = tl.program_id(1)
    b = tl.program_id(2)
    length = tl.load(len_ptr + b)
    keys = n0 + tl.arange(0, BLOCK_N)
    cols = tl.arange(0, BLOCK_D)
    dmask = cols[None, :] < D
    key_ok = keys < length
    base = b.to(tl.int64) * sb + h * sh
    obase = b.to(tl.int64) * ob + h * oh
    kmask = key_ok[:, None] & dmask
    k = tl.load(k_ptr + base + keys[:, None] * sl + cols[None, :], mask=kmask, other=0.0)
    v = tl.load(v_ptr + base + keys[:, None] * sl + cols[None, :], mask=kmask, other=0.0)
    dk = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    lo = tl.maximum(n0 - window, 0)
    hi = tl.minimum(n0 + BLOCK_N + window, length)
    for m0 in range(lo, hi, BLOCK_M):
        rows = m0 + tl.arange(0, BLOCK_M)
        row_ok = rows < hi
        rmask = row_ok[:, None] & dmask
        q = tl.load(q_ptr + base + rows[:, None] * sl + cols[None, :], mask=rmask, other=0.0)
        do = tl.load(do_ptr + obase + rows[:, None] * ol + cols[None, :], mask=rmask, other=0.0)
        stat = (b * H + h).to(tl.int64) * L + rows
        lse = tl.load(lse_ptr + stat, mask=row_ok, other=0.0)
        delta = tl.load(delta_ptr + stat, mask=row_ok, other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision="ieee") * scale
        valid = row_ok[:, None] & key_ok[None, :] & (tl.abs(keys[None, :] - rows[:, None]) <= window)
        p = tl.where(valid, tl.exp(s - lse[:, None]), 0.0)
        ds = p * (tl.dot(do, tl.trans(v), input_precision="ieee") - delta[:, None])
        dv += tl.dot(tl.trans(p.to(do.dtype)), do, input_precision="ieee")
        dk += tl.dot(tl.trans(ds.to(q.dtype)), q, input_precision="ieee") * scale
    mask = (keys < L)[:, None] & dmask
    tl.store(dk_ptr + obase + keys[:, None] * ol + cols[None, :], dk.to(dk_ptr.dtype.element_ty), mask=mask)
    tl.store(dv_ptr + obase + keys[:, None] * ol + cols[None, :], dv.to(dv_ptr.dtype.element_ty), mask=mask)


def _group_args(flat: list[torch.Tensor], device: torch.device, extra: list[torch.Tensor] | None = None) -> list:
    """Kernel arguments of MAX_GROUPS groups (absent ones are dummies on ``device`` the kernel never reads)."""
    args = []
    dummy = _dummy(device)
    for g in range(MAX_GROUPS):
        if 4 * g < len(flat):
            k, v, glen, gidx = flat[4 * g : 4 * g + 4]
            args += [k, v, glen, gidx, k.stride(0), k.stride(1), k.stride(2), k.shape[2]]
            args += [] if extra is None else extra[2 * g : 2 * g + 2]
        else:
            args += [dummy] * 4 + [0, 0, 0, 0]
            args += [] if extra is None else [dummy, dummy]
    return args


#: a tiny tensor per device standing in for absent group pointers (one per device, not one slot that threads on two
#: devices would swap under each other)
_DUMMIES: dict[torch.device, torch.Tensor] = {}


def _dummy(device: torch.device) -> torch.Tensor:
    tensor = _DUMMIES.get(device)
    if tensor is None:
        tensor = _DUMMIES.setdefault(device, torch.zeros(1, dtype=torch.int64, device=device))
    return tensor


def _shared_strides(*tensors: torch.Tensor) -> bool:
    """Same strides and a unit-stride head dim: one stride set addresses them all, no copy needed."""
    return all(t.stride() == tensors[0].stride() for t in tensors) and tensors[0].stride(-1) == 1


def _prepare(q, k, v, flat):
    """q, k, v (and each group's k, v) as one stride set each, as the kernels take them: views of one fused QKV
    projection go in as they are, anything else is made contiguous."""
    if not _shared_strides(q, k, v):
        q, k, v = (t.contiguous() for t in (q, k, v))
    flat = list(flat)
    for g in range(0, len(flat), 4):
        if not _shared_strides(flat[g], flat[g + 1]):
            flat[g], flat[g + 1] = flat[g].contiguous(), flat[g + 1].contiguous()
        flat[g + 2], flat[g + 3] = flat[g + 2].contiguous(), flat[g + 3].contiguous()
    return q, k, v, flat


def _rows_major_like(q: torch.Tensor) -> torch.Tensor:
    """An empty [B, H, L, d] stored as [B, L, H, d]: merging the heads afterwards (transpose + reshape) is a view."""
    batch, heads, length, dim = q.shape
    return q.new_empty(batch, length, heads, dim).transpose(1, 2)


class TritonWindowAttention(torch.autograd.Function):
    """``apply(q, k, v, lengths, window, scale, *[k, v, lengths, index] per group)`` -> [B, H, L, d]."""

    @staticmethod
    def forward(ctx, q, k, v, lengths, window, scale, *flat):
        if len(flat) > 4 * MAX_GROUPS:
            raise ValueError(f"the Triton window_attention takes at most {MAX_GROUPS} key groups")
        q, k, v, flat = _prepare(q, k, v, flat)
        batch, heads, length, dim = q.shape
        out = _rows_major_like(q)
        lse = torch.empty(batch, heads, length, dtype=torch.float32, device=q.device)
        if q.numel():
            group_keys = max([t.shape[2] for t in flat[0::4]], default=0)
            block_m, block_n, block_g, warps = forward_config(length, window, group_keys)
            grid = (triton.cdiv(length, block_m), heads, batch)
            _fwd[grid](
                q, k, v, out, lse, lengths,
                q.stride(0), q.stride(1), q.stride(2), out.stride(0), out.stride(1), out.stride(2),
                *_group_args(flat, q.device),
                heads, length, dim, window, scale,
                NUM_GROUPS=len(flat) // 4, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_G=block_g,
                BLOCK_D=_block_d(dim), num_warps=warps,
            )  # fmt: skip
        ctx.save_for_backward(q, k, v, out, lse, lengths, *flat)
        ctx.window, ctx.scale = window, scale
        return out

    @staticmethod
    def backward(ctx, grad):
        q, k, v, out, lse, lengths, *flat = ctx.saved_tensors
        # dq, dk, dv are written with grad's strides (one set for all four): a grad that is not dense is copied first
        if grad.stride(-1) != 1 or torch.empty_like(grad).stride() != grad.stride():
            grad = grad.contiguous()
        batch, heads, length, dim = q.shape
        delta = (grad.float() * out.float()).sum(-1)  # dO_i . O_i
        dq, dk, dv = (torch.empty_like(grad, dtype=q.dtype) for _ in range(3))
        group_grads = [torch.zeros(t.shape, dtype=torch.float32, device=t.device) for t in flat[0::4] for _ in (0, 1)]
        if q.numel():
            common = (heads, length, dim, ctx.window, ctx.scale)
            strides = (q.stride(0), q.stride(1), q.stride(2), grad.stride(0), grad.stride(1), grad.stride(2))
            meta = dict(BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_D=_block_d(dim))
            _bwd_rows[(triton.cdiv(length, BLOCK_M), heads, batch)](
                q, k, v, grad, dq, lse, delta, lengths, *strides, *_group_args(flat, q.device, group_grads), *common,
                NUM_GROUPS=len(flat) // 4, **meta,
            )  # fmt: skip
            _bwd_band_keys[(triton.cdiv(length, BLOCK_N), heads, batch)](
                q, k, v, grad, dk, dv, lse, delta, lengths, *strides, *common, **meta
            )
        else:
            dq.zero_(), dk.zero_(), dv.zero_()
        grads = []
        for g in range(len(flat) // 4):
            dtype = flat[4 * g].dtype
            grads += [group_grads[2 * g].to(dtype), group_grads[2 * g + 1].to(dtype), None, None]
        return (dq, dk, dv, None, None, None, *grads)


def _block_d(dim: int) -> int:
    return max(16, triton.next_power_of_2(dim))
