"""Windowed (banded) attention of the sparse cross-encoder, as one fused attention op.

Band storage (paper, section 3.3): for a window ``w >= 0`` the band has ``2w + 1`` columns and
``A[..., i, j] = q_i . k_{i + j - w}``; keys outside ``[0, L)`` are out of range (0 in the band products, like the
paper's zero padding). ``window_attention`` gives every row of a padded segment ONE softmax over full key groups (its
[CLS], its query) and its own keys within ``+-w``, never building an L x L matrix.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from pyterrier_tite.ops._extension import choose_backend, has_csrc, has_triton, register_backends
from pyterrier_tite.ops.dropout import dropout as dropout_op

register_backends("window_attention", [("triton", has_triton), ("csrc-cpu", has_csrc), ("torch", lambda: True)])


@dataclass
class KeyGroup:
    """Keys every row attends to in full: ``k``, ``v`` [Bg, H, G, d]; ``lengths`` [Bg] the valid keys of each group
    row (default: all G); ``index`` [B] each batch row's group row (default ``arange(B)``; one query's keys shared by
    all its documents)."""

    k: torch.Tensor
    v: torch.Tensor
    lengths: torch.Tensor | None = None
    index: torch.Tensor | None = None


# ----------------------------------------------------------------------------------------------------------- band ops
#: rows per block of the pure-torch band products: a block's keys span BLOCK + 2w (measured fastest on CPU for w=4)
BLOCK = 32


def _key_blocks(x: torch.Tensor, window: int, block: int) -> torch.Tensor:
    """[N, L, d] -> overlapping key blocks [N, nb, block + 2w, d] (block i: keys i*block - w ..)."""
    length, n_blocks = x.shape[1], -(-x.shape[1] // block)
    padded = F.pad(x, (0, 0, window, n_blocks * block - length + window))
    return padded.unfold(1, block + 2 * window, block).transpose(-1, -2)


def _window_matmul_torch(q: torch.Tensor, k: torch.Tensor, window: int, block: int = BLOCK) -> torch.Tensor:
    """``A[..., i, j] = q_i . k_{i+j-w}`` -> [..., L, 2w+1]: dense per block (BLAS), then skewed into band storage
    (row i of a block needs columns i..i+2w, the first 2w+1 once each row is padded by one element)."""
    acc = torch.promote_types(q.dtype, torch.float32)
    *lead, length, dim = q.shape
    n_blocks, width = -(-length // block), 2 * window + 1
    if length == 0:
        return q.new_zeros(*lead, 0, width)
    rows = math.prod(lead)
    qf, kf = q.to(acc).reshape(rows, length, dim), k.to(acc).reshape(rows, length, dim)
    q_blocks = F.pad(qf, (0, 0, 0, n_blocks * block - length)).view(qf.shape[0], n_blocks, block, dim)
    dense = q_blocks @ _key_blocks(kf, window, block).transpose(-1, -2)  # [N, nb, block, block + 2w]
    skewed = F.pad(dense.flatten(-2), (0, block)).view(qf.shape[0], n_blocks, block, block + width)
    band = skewed[..., :width].reshape(qf.shape[0], n_blocks * block, width)[:, :length]
    return band.reshape(*lead, length, width).to(q.dtype)


def _unwindow_matmul_torch(p: torch.Tensor, v: torch.Tensor, window: int, block: int = BLOCK) -> torch.Tensor:
    """``out_i = sum_j P[..., i, j] v_{i+j-w}`` for band P [..., L, 2w+1] (the inverse skew of the above)."""
    acc = torch.promote_types(v.dtype, torch.float32)
    *lead, length, width = p.shape
    dim = v.shape[-1]
    if length == 0:
        return v.new_zeros(v.shape)
    n_blocks = -(-length // block)
    pf, vf = p.to(acc).reshape(math.prod(lead), length, width), v.to(acc).reshape(math.prod(lead), length, dim)
    padded = F.pad(pf, (0, block, 0, n_blocks * block - length)).view(pf.shape[0], n_blocks, block * (block + width))
    dense = padded[..., : block * (block + width - 1)].view(pf.shape[0], n_blocks, block, block + width - 1)
    out = (dense @ _key_blocks(vf, window, block)).reshape(pf.shape[0], n_blocks * block, dim)[:, :length]
    return out.reshape(*lead, length, dim).to(v.dtype)


# --------------------------------------------------------------------------------------------------- fused attention
def window_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    window: int,
    lengths: torch.Tensor | None = None,
    groups: tuple[KeyGroup, ...] | list[KeyGroup] = (),
    scale: float | None = None,
    backend: str | None = None,
    dropout: float = 0.0,
) -> torch.Tensor:
    """Attention of the rows of q [B, H, L, d] over ``groups`` (full) and their own keys within ``+-window``, one
    softmax over all. ``lengths`` [B] (default L): valid rows / keys of each segment (padding rows output 0).
    ``scale`` defaults to ``1/sqrt(d)``. Returns [B, H, L, d] in q's dtype (fp32 accumulation). ``backend`` forces
    one of ``backends()['window_attention']``; ``dropout`` (training) runs the pure-torch backend, the only one with it.
    """
    lengths, groups, scale = _normalise(q, k, v, window, lengths, groups, scale)
    if dropout:
        return _window_attention_torch(q, k, v, window, lengths, groups, scale, dropout)
    chosen = choose_backend("window_attention", q.device, backend)
    flat = [t for g in groups for t in (g.k, g.v, g.lengths, g.index)]
    if chosen == "triton":
        from pyterrier_tite.ops import window_attention_triton

        if len(groups) <= window_attention_triton.MAX_GROUPS and q.dtype != torch.float64:
            return window_attention_triton.TritonWindowAttention.apply(q, k, v, lengths, window, scale, *flat)
        chosen = "torch"  # more key groups than the kernel takes, or fp64 (tl.dot has no fp64)
    if chosen == "torch":
        return _window_attention_torch(q, k, v, window, lengths, groups, scale)
    return _CsrcWindowAttention.apply(q, k, v, lengths, window, scale, *flat)


def dense_attention_inputs(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    window: int,
    lengths: torch.Tensor | None = None,
    groups: tuple[KeyGroup, ...] | list[KeyGroup] = (),
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The same attention as dense tensors: keys, values [B, H, sum(G) + L, d] and a bool mask [B, 1, L, sum(G) + L]
    (padding rows attend to themselves only, so no row is empty for SDPA; their outputs mean nothing)."""
    lengths, groups, _ = _normalise(q, k, v, window, lengths, groups, 1.0)
    length = q.shape[-2]
    keys, values, masks = [], [], []
    for g in groups:
        keys.append(g.k[g.index])
        values.append(g.v[g.index])
        visible = torch.arange(g.k.shape[2], device=q.device)[None, :] < g.lengths[g.index][:, None]  # [B, G]
        masks.append(visible[:, None, :].expand(-1, length, -1))
    pos = torch.arange(length, device=q.device)
    near = (pos[:, None] - pos[None, :]).abs() <= window  # [L, L]
    inside = pos[None, :] < lengths[:, None]  # [B, L]
    band = near[None] & inside[:, None, :] & inside[:, :, None]
    padded_self = torch.eye(length, dtype=torch.bool, device=q.device)[None] & ~inside[:, :, None]
    keys.append(k)
    values.append(v)
    masks.append(band | padded_self)
    return torch.cat(keys, 2), torch.cat(values, 2), torch.cat(masks, 2)[:, None]


def window_attention_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    window: int,
    lengths: torch.Tensor | None = None,
    groups: tuple[KeyGroup, ...] | list[KeyGroup] = (),
    scale: float | None = None,
) -> torch.Tensor:
    """Dense masked attention in fp32 (or fp64): the definition ``window_attention`` must reproduce."""
    lengths, groups, scale = _normalise(q, k, v, window, lengths, groups, scale)
    keys, values, mask = dense_attention_inputs(q, k, v, window, lengths, groups)
    acc = torch.promote_types(q.dtype, torch.float32)
    scores = (q.to(acc) @ keys.to(acc).transpose(-1, -2)) * scale
    probs = scores.masked_fill(~mask, float("-inf")).softmax(-1)
    out = probs @ values.to(acc)
    rows = torch.arange(q.shape[2], device=q.device)[None, :] < lengths[:, None]
    return (out * rows[:, None, :, None]).to(q.dtype)


def _window_attention_torch(q, k, v, window, lengths, groups, scale, dropout: float = 0.0) -> torch.Tensor:
    """Banded attention from shifted slices: scores [B, H, L, sum(G) + 2w + 1], nothing L x L."""
    acc = torch.promote_types(q.dtype, torch.float32)
    length = q.shape[2]
    qf = q.to(acc) * scale
    pos = torch.arange(length, device=q.device)
    rows = pos[None, :] < lengths[:, None]  # [B, L]
    scores, masks, group_values = [], [], []
    for g in groups:
        scores.append(qf @ g.k[g.index].to(acc).transpose(-1, -2))
        visible = torch.arange(g.k.shape[2], device=q.device)[None, :] < g.lengths[g.index][:, None]
        masks.append(visible[:, None, None, :].expand(-1, 1, length, -1))
        group_values.append(g.v[g.index].to(acc))
    scores.append(_window_matmul_torch(qf, k.to(acc), window))
    keys = pos[:, None] + torch.arange(2 * window + 1, device=q.device)[None, :] - window  # [L, 2w+1]
    band = (keys >= 0)[None] & (keys < lengths[:, None, None]) & rows[:, :, None]
    band = band | (~rows[:, :, None] & (keys == pos[:, None])[None])  # padding rows keep themselves: no empty row
    masks.append(band[:, None])
    probs = torch.cat(scores, -1).masked_fill(~torch.cat(masks, -1), float("-inf")).softmax(-1)
    probs = probs * rows[:, None, :, None]
    if dropout:
        probs = dropout_op(probs, dropout)
    out = _unwindow_matmul_torch(probs[..., probs.shape[-1] - 2 * window - 1 :], v.to(acc), window)
    start = 0
    for g, values in zip(groups, group_values, strict=True):
        out = out + probs[..., start : start + g.k.shape[2]] @ values
        start += g.k.shape[2]
    return out.to(q.dtype)


class _CsrcWindowAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, lengths, window, scale, *flat):
        gk, gv, glen, gidx = (list(flat[i::4]) for i in range(4))
        out, lse = torch.ops.tite.window_attention(q, k, v, lengths, window, gk, gv, glen, gidx, scale)
        ctx.save_for_backward(q, k, v, out, lse, lengths, *flat)
        ctx.window, ctx.scale = window, scale
        return out

    @staticmethod
    def backward(ctx, grad):
        q, k, v, out, lse, lengths, *flat = ctx.saved_tensors
        gk, gv, glen, gidx = (list(flat[i::4]) for i in range(4))
        dq, dk, dv, dgk, dgv = torch.ops.tite.window_attention_backward(
            grad.contiguous(), q, k, v, out, lse, lengths, ctx.window, gk, gv, glen, gidx, ctx.scale
        )
        group_grads = [g for pair in zip(dgk, dgv, strict=True) for g in (*pair, None, None)]
        return (dq, dk, dv, None, None, None, *group_grads)


# ------------------------------------------------------------------------------------------------------------ checks
def _normalise(q, k, v, window, lengths, groups, scale) -> tuple[torch.Tensor, list[KeyGroup], float]:
    """Validate shapes; fill default lengths / group lengths / group index as int64 on q's device."""
    if not isinstance(window, int) or window < 0:
        raise ValueError(f"window must be an int >= 0 (w = 0: each row sees only itself), got {window!r}")
    if q.dim() != 4 or k.shape != q.shape or v.shape != q.shape:
        raise ValueError(f"q, k, v must all be [B, H, L, d]; got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    batch, heads, length, dim = q.shape
    if lengths is None:
        lengths = torch.full((batch,), length, dtype=torch.int64, device=q.device)
    lengths = lengths.to(device=q.device, dtype=torch.int64)
    if lengths.shape != (batch,):
        raise ValueError(f"lengths must be [B] = [{batch}], got {tuple(lengths.shape)}")
    normalised = []
    for g in groups:
        if g.k.dim() != 4 or g.v.shape != g.k.shape or g.k.shape[1] != heads or g.k.shape[3] != dim:
            raise ValueError(
                f"key group k/v must be [Bg, {heads}, G, {dim}], got {tuple(g.k.shape)}, {tuple(g.v.shape)}"
            )
        rows = g.k.shape[0]
        index = torch.arange(batch, device=q.device) if g.index is None else g.index.to(q.device, torch.int64)
        if g.index is None and rows != batch:
            raise ValueError(f"a key group with {rows} rows for {batch} batch rows needs an index")
        glen = torch.full((rows,), g.k.shape[2], dtype=torch.int64, device=q.device)
        glen = glen if g.lengths is None else g.lengths.to(q.device, torch.int64)
        if index.shape != (batch,) or glen.shape != (rows,):
            raise ValueError(f"key group index must be [{batch}] and lengths [{rows}]")
        normalised.append(KeyGroup(g.k, g.v, glen, index))
    return lengths, normalised, 1.0 / math.sqrt(dim) if scale is None else float(scale)
