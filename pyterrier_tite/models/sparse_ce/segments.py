"""The hidden states of a sparse cross-encoder batch, one tensor per sub-sequence ([CLS], query, doc)."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Segments:
    """Hidden states of the three sub-sequences. ``query`` is [Q, Lq, H] shared via ``query_index`` [N], or [N, Lq, H]
    per pair (``query_index`` None). Lengths count real tokens, [SEP] included."""

    cls: torch.Tensor
    query: torch.Tensor
    doc: torch.Tensor
    query_lengths: torch.Tensor
    doc_lengths: torch.Tensor
    query_index: torch.Tensor | None

    def replace(self, cls: torch.Tensor, query: torch.Tensor, doc: torch.Tensor) -> Segments:
        return Segments(cls, query, doc, self.query_lengths, self.doc_lengths, self.query_index)
