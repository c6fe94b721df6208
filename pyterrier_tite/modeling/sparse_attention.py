"""Joint-softmax attention over explicit key groups, the single attention entry point of the sparse cross-encoder.

Rows of one segment attend, with ONE softmax, to (a) full key groups (e.g. their [CLS], their query) and (b) their own
segment's keys: all of them (``window=None``) or only those within ``+-window`` (band storage ``[.., L, 2w+1]``,
``A[i, j] = q_i . k_{i+j-w}``), so no L x L matrix is built for the doc-doc band. The interface is that of
``pyterrier_tite.ops.window_attention`` (its ``KeyGroup``), so the fused kernel serves every call it can, in one
place; the pure-torch paths here remain for attention dropout (training), which the kernel lacks.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from pyterrier_tite.ops import KeyGroup, window_attention

__all__ = ["KeyGroup", "band_apply", "band_scores", "grouped_attention"]


def _gathered(group: KeyGroup) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """k, v, lengths of a key group with one row per attention batch row."""
    if group.index is None:
        return group.k, group.v, group.lengths
    lengths = None if group.lengths is None else group.lengths[group.index]
    return group.k[group.index], group.v[group.index], lengths


def _key_mask(lengths: torch.Tensor | None, batch: int, size: int, device: torch.device) -> torch.Tensor:
    """Bool [B, size]: True for valid keys."""
    if lengths is None:
        return torch.ones(batch, size, dtype=torch.bool, device=device)
    return torch.arange(size, device=device)[None, :] < lengths[:, None]


def grouped_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    window: int | None,
    lengths: torch.Tensor | None = None,
    groups: Sequence[KeyGroup] = (),
    scale: float | None = None,
    dropout: float = 0.0,
) -> torch.Tensor:
    """Attention of q [B, H, L, d] over ``groups`` (full) and its own k, v (full or within ``+-window``).

    ``lengths`` [B] marks the valid rows / own keys (default L). Padded keys get probability 0 (a finite mask, so a
    row without any valid key stays finite); padded rows output 0. ``window=0`` means each row sees only itself among
    its own keys; ``window=None`` means all of them. ``dropout`` applies to the attention probabilities (training).
    Returns [B, H, L, d].
    """
    if window is not None and window < 0:
        raise ValueError(f"window must be None or >= 0, got {window}")
    batch, _, length, dim = q.shape
    scale = 1.0 / math.sqrt(dim) if scale is None else scale
    full = window is None or window >= length - 1  # a window covering the whole segment is full attention
    if not dropout and FUSED and (not full or (q.is_cuda and length <= FUSED_FULL_MAX_ROWS)):
        return _fused(q, k, v, max(length - 1, 0) if full else window, lengths, groups, scale)
    gathered = [_gathered(g) for g in groups]
    if full:
        out = _dense(q, k, v, lengths, gathered, scale, dropout)
    else:
        out = _banded(q, k, v, window, lengths, gathered, scale, dropout)
    if lengths is not None:
        out = out * _key_mask(lengths, batch, length, q.device)[:, None, :, None]
    return out


def _dense(q, k, v, lengths, gathered, scale, dropout) -> torch.Tensor:
    """All groups and the own keys concatenated; one SDPA call with an additive key mask."""
    batch, length = q.shape[0], k.shape[2]
    keys = torch.cat([gk for gk, _, _ in gathered] + [k], dim=2)
    values = torch.cat([gv for _, gv, _ in gathered] + [v], dim=2)
    masks = [_key_mask(gl, batch, gk.shape[2], q.device) for gk, _, gl in gathered]
    valid = torch.cat(masks + [_key_mask(lengths, batch, length, q.device)], dim=1)
    if q.is_cuda and bool(valid.all()):  # nothing padded: no mask, so SDPA may pick its flash kernels
        return F.scaled_dot_product_attention(q, keys, values, dropout_p=dropout, scale=scale)
    bias = torch.zeros(valid.shape, dtype=q.dtype, device=q.device).masked_fill(~valid, torch.finfo(q.dtype).min)
    return F.scaled_dot_product_attention(
        q, keys, values, attn_mask=bias[:, None, None, :], dropout_p=dropout, scale=scale
    )


#: the fused kernel (``pyterrier_tite.ops.window_attention``: csrc on CPU, Triton on GPU) for the banded path; it has
#: no attention dropout, so training with dropout uses the pure-torch path below
FUSED = True
#: on GPU, segments of at most this many rows with full attention ([CLS]: 1 row, queries: ~10-32) also go through the
#: fused kernel: it streams the long key groups (the document) instead of concatenating them with the own keys
FUSED_FULL_MAX_ROWS = 64


def _fused(q, k, v, window, lengths, groups, scale) -> torch.Tensor:
    return window_attention(q, k, v, window, lengths, list(groups), scale=scale)


BLOCK = 32  # rows per block of the banded path; a block's keys span BLOCK + 2w (measured fastest on CPU for w=4)


def _key_blocks(x: torch.Tensor, window: int, block: int) -> torch.Tensor:
    """[B, H, L, d] -> overlapping key blocks [B, H, nb, block + 2w, d] (block i: keys i*block - w ..)."""
    length, n_blocks = x.shape[2], -(-x.shape[2] // block)
    padded = F.pad(x, (0, 0, window, n_blocks * block - length + window))
    return padded.unfold(2, block + 2 * window, block).transpose(-1, -2)


def band_scores(q: torch.Tensor, k: torch.Tensor, window: int, block: int = BLOCK) -> torch.Tensor:
    """``A[..., i, j] = q_i . k_{i+j-w}`` -> [B, H, L, 2w+1] (0 where the key lies outside the sequence).

    Dense per block (BLAS) then skewed into band storage: row i of a block needs columns i..i+2w, which become the
    first 2w+1 columns once each row is padded by one element (flatten, pad, re-view).
    """
    batch, heads, length, dim = q.shape
    n_blocks, width = -(-length // block), 2 * window + 1
    q_blocks = F.pad(q, (0, 0, 0, n_blocks * block - length)).view(batch, heads, n_blocks, block, dim)
    dense = q_blocks @ _key_blocks(k, window, block).transpose(-1, -2)  # [B, H, nb, block, block + 2w]
    skewed = F.pad(dense.flatten(-2), (0, block)).view(batch, heads, n_blocks, block, block + width)
    return skewed[..., :width].reshape(batch, heads, n_blocks * block, width)[:, :, :length]


def band_apply(p: torch.Tensor, v: torch.Tensor, window: int, block: int = BLOCK) -> torch.Tensor:
    """``out_i = sum_j P[..., i, j] v_{i+j-w}`` for band P [B, H, L, 2w+1] (inverse skew of ``band_scores``)."""
    batch, heads, length, width = p.shape
    n_blocks = -(-length // block)
    rows = F.pad(p, (0, block, 0, n_blocks * block - length)).view(batch, heads, n_blocks, block * (block + width))
    dense = rows[..., : block * (block + width - 1)].view(batch, heads, n_blocks, block, block + width - 1)
    out = dense @ _key_blocks(v, window, block)
    return out.reshape(batch, heads, n_blocks * block, v.shape[-1])[:, :, :length]


def _banded(q, k, v, window, lengths, gathered, scale, dropout) -> torch.Tensor:
    """Group scores [B, H, L, G] and band scores [B, H, L, 2w+1] share one softmax."""
    batch, _, length, _ = q.shape
    scores, valid = [], []
    for gk, _, gl in gathered:
        scores.append(q @ gk.transpose(-1, -2))
        valid.append(_key_mask(gl, batch, gk.shape[2], q.device)[:, None, :].expand(batch, length, -1))
    scores.append(band_scores(q, k, window))
    key_pos = torch.arange(length, device=q.device)[:, None] + torch.arange(2 * window + 1, device=q.device) - window
    own_len = torch.full((batch,), length, device=q.device) if lengths is None else lengths
    valid.append((key_pos >= 0) & (key_pos[None] < own_len[:, None, None]))
    mask = torch.cat(valid, dim=-1)[:, None]  # [B, 1, L, total]
    probs = (torch.cat(scores, dim=-1) * scale).masked_fill(~mask, torch.finfo(q.dtype).min).softmax(-1)
    if dropout:
        probs = F.dropout(probs, dropout)
    parts = probs.split([s.shape[-1] for s in scores], dim=-1)
    out = band_apply(parts[-1], v, window)
    for p, (_, gv, _) in zip(parts[:-1], gathered, strict=True):
        out = out + p @ gv
    return out
