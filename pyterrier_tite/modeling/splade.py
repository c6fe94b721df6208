"""SPLADE: a sparse lexical encoder over any masked-language-model checkpoint.

The representation of a text is ``max_t log(1 + relu(logits_t)) * mask_t`` over its tokens: one non-negative weight
per vocabulary entry, most of them zero. Any MLM checkpoint works (ours pretrained from scratch, BERT, naver SPLADE).
"""

from __future__ import annotations

import os

import torch
from torch import nn


def splade_pool(logits: torch.Tensor, attention_mask: torch.Tensor, inplace: bool = False) -> torch.Tensor:
    """``max_t log(1 + relu(logits[:, t])) * mask[:, t]``: ``[B, L, V]`` logits -> ``[B, V]`` term weights.

    ``inplace`` reuses the logits' memory (``[B, L, V]`` is the largest tensor of the model); only without autograd.
    """
    mask = attention_mask.unsqueeze(-1).to(logits.dtype)
    if inplace:
        activated = logits.relu_().log1p_().mul_(mask)
    else:
        activated = torch.log1p(torch.relu(logits)) * mask
    if activated.shape[1] == 0:  # no tokens at all: the zero vector
        return activated.new_zeros(activated.shape[0], activated.shape[2])
    return activated.amax(dim=1)


class SpladeEncoder(nn.Module):
    """An MLM (``AutoModelForMaskedLM``) whose logits are SPLADE-pooled into one sparse vector per text."""

    def __init__(self, mlm: nn.Module):
        super().__init__()
        self.mlm = mlm

    @property
    def vocab_size(self) -> int:
        return int(self.mlm.config.vocab_size)

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Token ids ``[B, L]`` -> term weights ``[B, V]`` (>= 0)."""
        kwargs = {"token_type_ids": token_type_ids} if token_type_ids is not None else {}
        logits = self.mlm(input_ids=input_ids, attention_mask=attention_mask, **kwargs).logits
        return splade_pool(logits, attention_mask, inplace=not torch.is_grad_enabled())

    @classmethod
    def from_pretrained(cls, path: str, **kwargs) -> SpladeEncoder:
        """Wrap any MLM checkpoint (local folder or hub id)."""
        from transformers import AutoModelForMaskedLM

        return cls(AutoModelForMaskedLM.from_pretrained(path, **kwargs))

    def save_pretrained(self, path: str) -> None:
        """The Hugging Face layout of the MLM: a SPLADE checkpoint is just an MLM checkpoint."""
        os.makedirs(path, exist_ok=True)
        self.mlm.save_pretrained(path)
