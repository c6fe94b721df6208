"""SPLADE and MLM pre-training inputs: a text is one segment with the tokenizer's special tokens, truncated to its
side's length. Query and document sides may have their own tokenizer (naver's efficient-splade pairs) but must share
one vocabulary."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch

from pyterrier_tite.models.batch_tensors import padded_tensors, tokenize

Role = Literal["query", "doc"]

#: what the MLMs take (DistilBERT drops ``token_type_ids`` itself)
MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


class SpladeInputs:
    """The tokenizer and maximum length of each side; ``inputs(texts, role)`` gives the model's input tensors."""

    def __init__(self, tokenizer, query_max_length: int = 64, doc_max_length: int = 256, query_tokenizer=None):
        self.tokenizers: dict[Role, object] = {
            "query": tokenizer if query_tokenizer is None else query_tokenizer,
            "doc": tokenizer,
        }
        self.max_lengths: dict[Role, int] = {"query": query_max_length, "doc": doc_max_length}

    @property
    def is_pair(self) -> bool:
        """Whether queries have a tokenizer of their own."""
        return self.tokenizers["query"] is not self.tokenizers["doc"]

    def __call__(
        self,
        texts: Sequence[str],
        role: Role,
        max_length: int | None = None,
        device: str | torch.device | None = None,
    ) -> dict[str, torch.Tensor]:
        """Padded model inputs of ``texts`` (on ``device`` when given), cut to ``max_length`` (default: the side's)."""
        if role not in self.tokenizers:
            raise ValueError(f"role must be 'query' or 'doc', got {role!r}")
        length = self.max_lengths[role] if max_length is None else max_length
        encoded = padded_tensors(
            tokenize(self.tokenizers[role], list(texts), padding=True, truncation=True, max_length=length), MODEL_INPUTS
        )
        return {k: v.to(device) if device is not None else v for k, v in encoded.items()}

    def vocabulary(self, vocab_size: int) -> list[str | None]:
        """The token of each of the ``vocab_size`` ids (``None`` where there is none), on which both sides must agree:
        query and document weights are multiplied id by id."""
        ids = list(range(vocab_size))
        tokens = self.tokenizers["doc"].convert_ids_to_tokens(ids)
        if self.is_pair:
            query_tokens = self.tokenizers["query"].convert_ids_to_tokens(ids)
            differ = [i for i, (q, d) in enumerate(zip(query_tokens, tokens, strict=True)) if q != d]
            if differ:
                raise ValueError(f"query and doc tokenizers differ at {len(differ)} ids (first: {differ[:5]})")
        return tokens


def mlm_token_ids(tokenizer, texts: Sequence[str], max_length: int) -> list[list[int]]:
    """Token ids of each text for MLM pre-training, cut to ``max_length``; texts with nothing to mask are dropped."""
    if tokenizer.mask_token is None:
        raise ValueError("the tokenizer has no [MASK] token")
    encoded = tokenizer(list(texts), truncation=True, max_length=max_length, return_attention_mask=False)
    return [ids for ids in encoded["input_ids"] if len(ids) > 2]  # more than [CLS] [SEP]
