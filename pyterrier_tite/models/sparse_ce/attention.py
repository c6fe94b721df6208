"""The sparse cross-encoder's one attention: rows of a segment attend with one softmax to full key groups (their
[CLS], their query) and to their own keys, all or within ``+-window`` (no L x L matrix for the doc band). The fused
``ops.window_attention`` serves every call it can; dropout (training), which the kernels lack, runs on its torch
backend, full attention with dropout on SDPA."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from pyterrier_tite.devices import capturing_cuda_graph
from pyterrier_tite.ops import KeyGroup, window_attention

__all__ = ["KeyGroup", "grouped_attention"]


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
    """Attention of q [B, H, L, d] over ``groups`` and its own k, v (``window`` None: all of them; 0: itself only).
    ``lengths`` [B] marks the valid rows / own keys (default L); padded keys get probability 0 (a finite mask, so a
    row without a valid key stays finite), padded rows output 0."""
    assert window is None or window >= 0, window  # a precondition: the config checked it (SparseCrossEncoderConfig)
    batch, _, length, dim = q.shape
    scale = 1.0 / math.sqrt(dim) if scale is None else scale
    full = window is None or window >= length - 1  # a window covering the whole segment is full attention
    if not dropout and FUSED and (not full or length <= FUSED_FULL_MAX_ROWS):
        return window_attention(q, k, v, max(length - 1, 0) if full else window, lengths, list(groups), scale=scale)
    if not full:  # banded, with dropout or the kernel switched off: the pure-torch backend of the same op
        return window_attention(q, k, v, window, lengths, list(groups), scale=scale, backend="torch", dropout=dropout)
    out = _dense(q, k, v, lengths, [_gathered(g) for g in groups], scale, dropout)
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
    # nothing padded: no mask, so SDPA may pick its flash kernels (a host sync, so not while a CUDA graph is captured)
    if q.is_cuda and not capturing_cuda_graph() and bool(valid.all()):
        return F.scaled_dot_product_attention(q, keys, values, dropout_p=dropout, scale=scale)
    bias = torch.zeros(valid.shape, dtype=q.dtype, device=q.device).masked_fill(~valid, torch.finfo(q.dtype).min)
    return F.scaled_dot_product_attention(
        q, keys, values, attn_mask=bias[:, None, None, :], dropout_p=dropout, scale=scale
    )


#: the fused kernel (``pyterrier_tite.ops.window_attention``: csrc on CPU, Triton on GPU) for the banded path; it has
#: no attention dropout, so training with dropout uses the op's pure-torch backend
FUSED = True
#: segments of at most this many rows with full attention ([CLS]: 1 row, queries: ~10-32) also go through the fused
#: kernel: it streams the long key groups (the document) instead of concatenating them with the own keys (on the CPU,
#: a copy of every doc's keys and values per layer)
FUSED_FULL_MAX_ROWS = 64
