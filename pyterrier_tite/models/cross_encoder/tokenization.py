"""Cross-encoder inputs (SparseCE, MonoCE, CELI): special ids, caps and the two input layouts.

Texts are tokenised WITHOUT special tokens and truncated to ``query_max_length`` / ``doc_max_length`` word pieces and to
what the position embeddings hold (``doc_max_length=None``: the doc gets every position the query and the three special
tokens leave, as in the reference; the tokenizer's ``model_max_length`` never applies). The ids then go into one of
two layouts:

- the pair layout of full-attention BERT / ELECTRA cross-encoders: ``[CLS] q [SEP] d [SEP]`` per pair, token types
  0 / 1, right-padded (:class:`PairBatch`);
- the list layout of the sparse cross-encoder: one query with its list of docs, raw ids padded per segment; the model
  adds [CLS] and each [SEP] itself (:class:`SparseCrossEncoderBatch`).

Special ids come from the tokenizer the texts were tokenised with, never from a silent WordPiece default.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from pyterrier_tite.models.batch_tensors import tokenize
from pyterrier_tite.models.sparse_ce.tokenization import (  # the list layout lives with the sparse cross-encoder
    QUERY_MAX_LENGTH,
    SparseCrossEncoderBatch,  # noqa: F401 - re-exported: one import for all inputs
    pad_ids,
    special_ids,
)

#: [CLS] q [SEP] d [SEP]
SPECIAL_TOKENS = 3


# ------------------------------------------------------------------------------------------------ tokenizer, specials
def fill_special_ids(config, tokenizer) -> None:
    """Sets the [CLS] / [SEP] ids a config lacks (BERT / ELECTRA configs carry none) from the tokenizer, so the pair
    layout uses the ids the texts were tokenised with (saved with the config: a reloaded folder scores the same)."""
    known = special_ids(tokenizer)
    for name in ("cls_token_id", "sep_token_id"):
        if getattr(config, name, None) is None:
            if name not in known:
                raise ValueError(f"neither the config nor the tokenizer gives {name}")
            setattr(config, name, known[name])


def config_special_id(config, name: str) -> int:
    """A special id of a model config; missing is an error (see :func:`fill_special_ids`), not the WordPiece default."""
    value = getattr(config, name, None)
    if value is None:
        raise ValueError(f"the model config has no {name}; set it from the tokenizer (fill_special_ids)")
    return int(value)


# ------------------------------------------------------------------------------------------------ texts -> ids
@dataclass
class CrossEncoderInputs:
    """Texts -> raw ids (no special tokens) under the caps of one cross-encoder.

    ``max_positions``: the model's position embeddings; ``query_max_length`` / ``doc_max_length``: word pieces (doc
    None = every position the query and the special tokens leave).
    """

    tokenizer: object
    max_positions: int
    query_max_length: int = QUERY_MAX_LENGTH
    doc_max_length: int | None = None

    def tokenize(self, texts: Sequence[str], max_length: int) -> list[list[int]]:
        """Raw token ids (no special tokens), truncated to ``max_length``."""
        if len(texts) == 0:
            return []
        enc = tokenize(self.tokenizer, list(texts), add_special_tokens=False, truncation=True, max_length=max_length)
        return enc["input_ids"]

    def queries(self, texts: Sequence[str]) -> list[list[int]]:
        return self.tokenize(texts, self.query_max_length)

    def docs(self, texts: Sequence[str]) -> list[list[int]]:
        """Doc ids capped at ``doc_max_length``, or (None) at the positions left after the special tokens."""
        cap = self.max_positions - SPECIAL_TOKENS
        return self.tokenize(texts, cap if self.doc_max_length is None else self.doc_max_length)

    def fit_doc(self, query: list[int], doc: list[int]) -> list[int]:
        """The doc cut to what the position embeddings leave after the query and the special tokens."""
        return doc[: max(0, self.max_positions - SPECIAL_TOKENS - len(query))]

    def lengths(self) -> dict[str, int | None]:
        """The caps, as stored in ``pt_meta.json`` (a saved folder's defaults)."""
        return {"query_max_length": self.query_max_length, "doc_max_length": self.doc_max_length}


# ------------------------------------------------------------------------------------------------ layouts
@dataclass
class PairBatch:
    """``[CLS] q [SEP] d [SEP]`` per (query, doc) pair [N, L], right-padded, with token types 0 / 1 and the mask."""

    input_ids: torch.Tensor
    token_type_ids: torch.Tensor
    attention_mask: torch.Tensor

    @classmethod
    def from_lists(
        cls,
        queries: Sequence[Sequence[int]],
        docs: Sequence[Sequence[Sequence[int]]],
        cls_id: int,
        sep_id: int,
        pad_id: int = 0,
        device: torch.device | str | None = None,
    ) -> PairBatch:
        """One query with a list of docs per entry -> one row per pair (docs in query order)."""
        rows = [([cls_id, *q, sep_id, *d, sep_id], len(q) + 2) for q, ds in zip(queries, docs, strict=True) for d in ds]
        ids, lengths = pad_ids([torch.tensor(r, dtype=torch.long) for r, _ in rows], pad_id)
        positions = torch.arange(ids.shape[1])[None, :]
        mask = positions < lengths[:, None]
        types = mask & (positions >= torch.tensor([n for _, n in rows], dtype=torch.long)[:, None])
        return cls(ids.to(device), types.long().to(device), mask.long().to(device))
