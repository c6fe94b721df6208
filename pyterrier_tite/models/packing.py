"""Packed (varlen) batches: ``[total_tokens, ...]`` rows plus ``cu_seqlens``, and the padded views attention needs.

Hidden states stay packed (no FLOPs on padding in the linear layers) and are padded only around attention, where the
kernels want ``[B, heads, L, d]``; what a layer needs about a layout is computed once and shared by all layers.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property

import torch
import torch.nn.functional as F


@dataclass(eq=False)
class PackedLayout:
    """Layout of one stage: ``lengths`` (int64, CPU) and ``cu_seqlens`` (int32, leading 0) on the data's device."""

    lengths: torch.Tensor
    cu_seqlens: torch.Tensor
    max_len: int
    #: rows the packed tensors carry past ``total`` (:func:`~pyterrier_tite.models.fused_linear.gemm_rows`): never read
    scratch: int = 0

    @classmethod
    def from_lengths(cls, lengths: torch.Tensor, device: torch.device | str) -> PackedLayout:
        lengths = lengths.detach().to("cpu", torch.int64)
        cu = torch.zeros(lengths.numel() + 1, dtype=torch.int32)
        cu[1:] = torch.cumsum(lengths, 0)
        return cls(lengths, cu.to(device), int(lengths.max()) if lengths.numel() else 0)

    @property
    def batch_size(self) -> int:
        return self.lengths.numel()

    @cached_property
    def total(self) -> int:
        return int(self.lengths.sum())

    @cached_property
    def is_dense(self) -> bool:
        """True when every sequence has ``max_len`` rows, so packed and padded layouts coincide (no copies)."""
        return bool((self.lengths == self.max_len).all())

    @cached_property
    def row_sequence(self) -> torch.Tensor:
        """Sequence index of every packed row (int64, on the data's device)."""
        device = self.cu_seqlens.device
        if self.is_dense:
            return torch.arange(self.total, device=device) // max(self.max_len, 1)
        return torch.repeat_interleave(torch.arange(self.batch_size), self.lengths).to(device)

    @cached_property
    def positions(self) -> torch.Tensor:
        """Position of every packed row within its sequence (int64, on the data's device)."""
        rows = torch.arange(self.total, device=self.cu_seqlens.device)
        if self.is_dense:
            return rows % max(self.max_len, 1)
        return rows - self.cu_seqlens[:-1].long()[self.row_sequence]

    @cached_property
    def pad_index(self) -> torch.Tensor:
        """Flat slot ``b * max_len + position`` of every packed row in the padded ``[B * max_len]`` layout."""
        return self.row_sequence * self.max_len + self.positions

    @cached_property
    def key_mask(self) -> torch.Tensor | None:
        """Boolean ``[B, 1, 1, max_len]`` mask of real keys for SDPA, or None when nothing is padded (an empty
        sequence keeps its first slot unmasked, so its padded query rows, dropped when unpadding, are not NaN)."""
        if self.is_dense:
            return None
        slots = torch.arange(self.max_len)
        mask = slots[None, :] < self.lengths.clamp(min=1)[:, None]
        return mask.to(self.cu_seqlens.device)[:, None, None, :]

    def pad(self, x: torch.Tensor) -> torch.Tensor:
        """``[total (+ scratch), ...]`` -> ``[B, max_len, ...]`` with zeros in the padding."""
        shape = (self.batch_size, self.max_len, *x.shape[1:])
        x = x[: self.total]
        if self.is_dense:
            return x.view(shape)
        out = x.new_zeros(self.batch_size * self.max_len, *x.shape[1:])
        return out.index_copy_(0, self.pad_index, x).view(shape)

    def unpad(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, max_len, ...]`` -> ``[total + scratch, ...]`` (padding rows dropped; scratch rows copy the first)."""
        flat = x.reshape(self.batch_size * self.max_len, *x.shape[2:])
        if self.is_dense and not self.scratch:
            return flat
        return flat.index_select(0, F.pad(self.pad_index, (0, self.scratch)))

    def padded_heads(
        self, projected: torch.Tensor, parts: int, heads: int, buffers: dict[int, torch.Tensor]
    ) -> tuple[torch.Tensor, ...]:
        """``[total, parts * H]`` projections (e.g. Q|K|V) as ``parts`` views ``[B, heads, max_len, d]``: unless the
        layout is dense, of a zeroed buffer in ``buffers`` (one per width) that every layer reuses (padding stays 0)."""
        width = projected.shape[-1]
        projected = projected[: self.total]  # scratch rows stay out
        if self.is_dense:
            flat = projected
        else:
            flat = buffers.get(width)
            if flat is None or flat.dtype != projected.dtype:
                flat = buffers[width] = projected.new_zeros(self.batch_size * self.max_len, width)
            flat.index_copy_(0, self.pad_index, projected)
        view = flat.view(self.batch_size, self.max_len, parts, heads, width // parts // heads)
        return view.permute(2, 0, 3, 1, 4).unbind(0)


def block_columns(lengths: list[int], block: int) -> Iterator[tuple[int, int, list[tuple[int, int, int]]]]:
    """Texts packed one after another (``lengths`` rows each) cut into blocks of ``block`` rows: per block its rows
    ``[begin, end)`` and the texts it holds as ``(text, low, high)``, their rows within the block (empty texts
    never appear), so a block's work is reduced per text without padding."""
    ends = list(itertools.accumulate(lengths))
    total = ends[-1] if ends else 0
    for begin in range(0, total, block):
        end = min(begin + block, total)
        columns, text = [], bisect.bisect_right(ends, begin)  # the first text ending after ``begin``
        while text < len(ends) and ends[text] - lengths[text] < end:
            if lengths[text]:
                columns.append((text, max(ends[text] - lengths[text], begin) - begin, min(ends[text], end) - begin))
            text += 1
        yield begin, end, columns
