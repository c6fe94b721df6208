"""Cross-encoder inputs: texts tokenised without special tokens, cut to the caps and to what the positions hold
(``doc_max_length=None``: every position the query and three special tokens leave, as in the reference; the
tokenizer's ``model_max_length`` never applies), then laid out as pairs (:class:`PairBatch`) or as a query with its
docs (:class:`SparseCrossEncoderBatch`). Special ids come from the tokenizer, never from a WordPiece default."""

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


def fill_special_ids(config, tokenizer) -> None:
    """Sets the [CLS] / [SEP] ids a config lacks (BERT / ELECTRA configs carry none) from the tokenizer; saved with
    the config, so a reloaded folder scores the same."""
    known = special_ids(tokenizer)
    for name in ("cls_token_id", "sep_token_id"):
        if getattr(config, name, None) is None:
            if name not in known:
                raise ValueError(f"neither the config nor the tokenizer gives {name}")
            setattr(config, name, known[name])


def config_special_id(config, name: str) -> int:
    """A special id of a model config; missing is an error, not the WordPiece default."""
    value = getattr(config, name, None)
    if value is None:
        raise ValueError(f"the model config has no {name}; set it from the tokenizer (fill_special_ids)")
    return int(value)


@dataclass
class CrossEncoderInputs:
    """Texts -> raw ids under the caps (word pieces) of a model with ``max_positions`` position embeddings."""

    tokenizer: object
    max_positions: int
    query_max_length: int = QUERY_MAX_LENGTH
    doc_max_length: int | None = None

    def tokenize(self, texts: Sequence[str], max_length: int) -> list[list[int]]:
        if len(texts) == 0:
            return []
        enc = tokenize(self.tokenizer, list(texts), add_special_tokens=False, truncation=True, max_length=max_length)
        return enc["input_ids"]

    def queries(self, texts: Sequence[str]) -> list[list[int]]:
        return self.tokenize(texts, self.query_max_length)

    def docs(self, texts: Sequence[str]) -> list[list[int]]:
        cap = self.max_positions - SPECIAL_TOKENS
        return self.tokenize(texts, cap if self.doc_max_length is None else self.doc_max_length)

    def fit_doc(self, query: list[int], doc: list[int]) -> list[int]:
        """The doc cut to the positions the query and the special tokens leave."""
        return doc[: max(0, self.max_positions - SPECIAL_TOKENS - len(query))]

    def lengths(self) -> dict[str, int | None]:
        return {"query_max_length": self.query_max_length, "doc_max_length": self.doc_max_length}


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
        rows = [([cls_id, *q, sep_id, *d, sep_id], len(q) + 2) for q, ds in zip(queries, docs, strict=True) for d in ds]
        ids, lengths = pad_ids([torch.tensor(r, dtype=torch.long) for r, _ in rows], pad_id)
        positions = torch.arange(ids.shape[1])[None, :]
        mask = positions < lengths[:, None]
        types = mask & (positions >= torch.tensor([n for _, n in rows], dtype=torch.long)[:, None])
        return cls(ids.to(device), types.long().to(device), mask.long().to(device))
