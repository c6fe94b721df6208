"""Aggretriever (Lin et al., 2023): a dense vector that aggregates every token of an MLM, not only [CLS].

Per token t (the [CLS] position excluded) the MLM gives a distribution ``softmax(logits_t)`` over the vocabulary and a
term weight ``w_t = relu(Linear(H, 1)(h_t))``; their weighted, masked max over positions is the lexical vector ``v``
(|V| dims). ``agg*`` condenses ``v`` into ``d`` dims (default 640); a projected [CLS] (default 128) complements it,
and the score is the dot product of the concatenation.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

CONFIG_NAME = "aggretriever.json"
HEADS_NAME = "aggretriever_heads.safetensors"


def _slices(lexical: torch.Tensor, width: int) -> torch.Tensor:
    """``[B, V]`` -> ``[B, ceil(V / width), width]``; zero padding at the end is neutral because ``v >= 0``.

    Column ``c`` of the result holds the vocabulary ids ``c, c + width, c + 2 width, ...`` (castorini dhr's layout:
    for BERT's 30,522 terms and d = 640 it pads 198 zeros, as here).
    """
    pad = (-lexical.shape[-1]) % width
    if pad:
        lexical = F.pad(lexical, (0, pad))
    return lexical.view(lexical.shape[0], -1, width)


def agg_plus(lexical: torch.Tensor, dim: int = 640) -> torch.Tensor:
    """Semi-aggregate ``agg+[n] = max_{v in S_n} v[v]`` with ``S_n = {n, n + d, n + 2d, ...}`` (Eq. 6)."""
    return _slices(lexical, dim).amax(dim=1)


def agg_star(lexical: torch.Tensor, dim: int = 640) -> torch.Tensor:
    """Fully aggregated ``agg*`` (Eq. 9): the slice maximum, negated when its term lies in the slice's minus half.

    Slice ``S_n`` holds the ids congruent to ``2n`` (``S_n^+``) or ``2n + 1`` (``S_n^-``) modulo ``2d``, so
    ``agg*[n] = pos if pos > neg else -neg`` with ``pos``, ``neg`` the maxima over the two halves.
    """
    pooled = _slices(lexical, 2 * dim).amax(dim=1)
    pos, neg = pooled[:, 0::2], pooled[:, 1::2]
    return torch.where(pos > neg, pos, -neg)


def lexical_representation(
    probabilities: torch.Tensor, term_weights: torch.Tensor, attention_mask: torch.Tensor
) -> torch.Tensor:
    """``v[v] = max_t w_t * p_t[v]`` over the non-[CLS], non-padding positions: ``[B, L, V]`` -> ``[B, V]``."""
    probabilities, term_weights, mask = probabilities[:, 1:], term_weights[:, 1:], attention_mask[:, 1:]
    if probabilities.shape[1] == 0:
        return probabilities.new_zeros(probabilities.shape[0], probabilities.shape[2])
    weighted = probabilities * (term_weights * mask.unsqueeze(-1).to(term_weights.dtype))
    return weighted.amax(dim=1)  # weights are >= 0, so masked positions (0) never win over a real one


@dataclass
class AggretrieverOutput:
    """The two parts of an Aggretriever vector; ``vector`` is what is indexed and dot-multiplied."""

    cls: torch.Tensor  # [B, cls_dim]
    agg: torch.Tensor  # [B, agg_dim]

    @property
    def vector(self) -> torch.Tensor:
        return torch.cat([self.cls, self.agg], dim=-1)


class AggretrieverEncoder(nn.Module):
    """Any ``AutoModelForMaskedLM`` plus the two small heads of Aggretriever (term weight, [CLS] projection)."""

    def __init__(self, mlm: nn.Module, agg_dim: int = 640, cls_dim: int = 128):
        super().__init__()
        if agg_dim <= 0 or cls_dim < 0:
            raise ValueError(f"agg_dim must be > 0 and cls_dim >= 0, got {agg_dim} and {cls_dim}")
        self.mlm = mlm
        self.agg_dim = agg_dim
        self.cls_dim = cls_dim
        hidden = int(mlm.config.hidden_size)
        self.term_weight = nn.Linear(hidden, 1)
        self.cls_projection = nn.Linear(hidden, cls_dim)

    @property
    def dim(self) -> int:
        return self.cls_dim + self.agg_dim

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor | None = None
    ) -> AggretrieverOutput:
        """Token ids ``[B, L]`` (with [CLS] first) -> projected [CLS] and ``agg*``."""
        kwargs = {"token_type_ids": token_type_ids} if token_type_ids is not None else {}
        out = self.mlm(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True, **kwargs)
        hidden = out.hidden_states[-1]
        weights = torch.relu(self.term_weight(hidden))  # [B, L, 1]
        if torch.is_grad_enabled():
            probabilities = torch.softmax(out.logits, dim=-1)
        else:  # [B, L, V] is the largest tensor: reuse its memory
            logits = out.logits
            probabilities = logits.sub_(logits.amax(dim=-1, keepdim=True)).exp_()
            probabilities.div_(probabilities.sum(dim=-1, keepdim=True))
        lexical = lexical_representation(probabilities, weights, attention_mask)
        return AggretrieverOutput(cls=self.cls_projection(hidden[:, 0]), agg=agg_star(lexical, self.agg_dim))

    def lexical(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The |V|-dim lexical vector ``v`` before aggregation (for analysis and tests)."""
        kwargs = {"token_type_ids": token_type_ids} if token_type_ids is not None else {}
        out = self.mlm(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True, **kwargs)
        weights = torch.relu(self.term_weight(out.hidden_states[-1]))
        return lexical_representation(torch.softmax(out.logits, dim=-1), weights, attention_mask)

    @classmethod
    def from_pretrained(cls, path: str, agg_dim: int | None = None, cls_dim: int | None = None, **kwargs):
        """An Aggretriever checkpoint, or any MLM checkpoint (then the heads start fresh, with the given dims)."""
        from safetensors.torch import load_file
        from transformers import AutoModelForMaskedLM

        config: dict = {}
        if os.path.isdir(path) and os.path.exists(os.path.join(path, CONFIG_NAME)):
            with open(os.path.join(path, CONFIG_NAME)) as f:
                config = json.load(f)
        for key, value in (("agg_dim", agg_dim), ("cls_dim", cls_dim)):
            if value is not None and key in config and config[key] != value:
                raise ValueError(f"{path} was trained with {key}={config[key]}, not {value}")
        model = cls(
            AutoModelForMaskedLM.from_pretrained(path, **kwargs),
            agg_dim=config.get("agg_dim", agg_dim or 640),
            cls_dim=config.get("cls_dim", cls_dim if cls_dim is not None else 128),
        )
        if config:
            heads = load_file(os.path.join(path, HEADS_NAME))
            for name in ("term_weight", "cls_projection"):
                prefix = name + "."
                part = {k[len(prefix) :]: v for k, v in heads.items() if k.startswith(prefix)}
                getattr(model, name).load_state_dict(part)
        return model

    def save_pretrained(self, path: str) -> None:
        """The MLM in Hugging Face layout, plus the heads (safetensors) and their dims (json) beside it."""
        from safetensors.torch import save_file

        os.makedirs(path, exist_ok=True)
        self.mlm.save_pretrained(path)
        heads = {f"term_weight.{k}": v for k, v in self.term_weight.state_dict().items()}
        heads.update({f"cls_projection.{k}": v for k, v in self.cls_projection.state_dict().items()})
        save_file({k: v.contiguous() for k, v in heads.items()}, os.path.join(path, HEADS_NAME))
        with open(os.path.join(path, CONFIG_NAME), "w") as f:
            json.dump({"agg_dim": self.agg_dim, "cls_dim": self.cls_dim}, f, indent=2)
