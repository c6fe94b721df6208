"""The sparse cross-encoder's list layout: one query with its list of docs, raw ids (no special tokens) padded per
segment; the model adds [CLS] and each [SEP] itself. Special ids come from the tokenizer, never from a default."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

#: query cap (word pieces) of our own models when the checkpoint stores none
QUERY_MAX_LENGTH = 32
#: the released sparse cross-encoders' query cap: ``TirexDataModule(max_query_length=32)`` counts [CLS] and [SEP]
REFERENCE_QUERY_WORD_PIECES = 32 - 2
SPECIAL_IDS = ("pad_token_id", "cls_token_id", "sep_token_id")


def special_ids(tokenizer) -> dict[str, int]:
    """pad / cls / sep ids of a tokenizer (those it has), as the reference takes them."""
    ids = {name: getattr(tokenizer, name, None) for name in SPECIAL_IDS} if tokenizer is not None else {}
    return {k: int(v) for k, v in ids.items() if v is not None}


def pad_ids(seqs: list[torch.Tensor], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    lengths = torch.tensor([len(s) for s in seqs], dtype=torch.long)
    if not seqs:
        return torch.zeros(0, 0, dtype=torch.long), lengths
    return torch.nn.utils.rnn.pad_sequence(seqs, batch_first=True, padding_value=pad), lengths


@dataclass
class SparseCrossEncoderBatch:
    """Padded raw ids (no special tokens): queries [Q, Lq], docs [N, Ld]; ``doc_query_index`` [N] maps doc -> query."""

    query_ids: torch.Tensor
    query_lengths: torch.Tensor
    doc_ids: torch.Tensor
    doc_lengths: torch.Tensor
    doc_query_index: torch.Tensor

    @classmethod
    def from_lists(
        cls,
        queries: Sequence[Sequence[int] | torch.Tensor],
        docs: Sequence[Sequence[Sequence[int] | torch.Tensor]],
        pad_token_id: int = 0,
        device: torch.device | str | None = None,
    ) -> SparseCrossEncoderBatch:
        """One query with a list of docs per entry -> padded tensors (docs in query order)."""
        if len(queries) != len(docs):
            raise ValueError(f"{len(queries)} queries but {len(docs)} doc lists")
        flat = [torch.as_tensor(d, dtype=torch.long) for ds in docs for d in ds]
        index = torch.repeat_interleave(
            torch.arange(len(docs)), torch.tensor([len(ds) for ds in docs], dtype=torch.long)
        )
        q_ids, q_len = pad_ids([torch.as_tensor(q, dtype=torch.long) for q in queries], pad_token_id)
        d_ids, d_len = pad_ids(flat, pad_token_id)
        return cls(q_ids, q_len, d_ids, d_len, index).to(device)

    def to(self, device: torch.device | str | None) -> SparseCrossEncoderBatch:
        if device is None:
            return self
        return SparseCrossEncoderBatch(*(t.to(device) for t in self.__dict__.values()))
