"""Score heads on a cross-encoder's last layer besides its own [CLS] classifier: mean pooling and CELI late
interaction (Zhang, Li & Lin). They read ``PairStates`` of a standard or a sparse cross-encoder, so one head runs on
either, and compute in their weights' dtype, float32 under autocast (bf16 scores would tie; heads are little work)."""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import nn

from pyterrier_tite.devices import as_dtype, autocast_off
from pyterrier_tite.models.sparse_ce.modeling import Segments


@dataclass
class PairStates:
    """Final-layer states of N (query, doc) pairs: ``cls`` [N, H]; ``query`` [Bq, Lq, H] (``query_index`` [N] maps
    pairs to its rows; None: one per pair) and ``doc`` [N, Ld, H], their masks marking each segment's tokens, its
    trailing [SEP] (the last marked token) included.
    """

    cls: torch.Tensor
    query: torch.Tensor
    query_mask: torch.Tensor
    doc: torch.Tensor
    doc_mask: torch.Tensor
    query_index: torch.Tensor | None = None

    def to_dtype(self, dtype: torch.dtype) -> PairStates:
        """The same states in ``dtype`` (masks and index unchanged)."""
        cls, query, doc = (as_dtype(x, dtype) for x in (self.cls, self.query, self.doc))
        return replace(self, cls=cls, query=query, doc=doc)


def pair_states_from_bert(
    hidden: torch.Tensor, token_type_ids: torch.Tensor, attention_mask: torch.Tensor
) -> PairStates:
    """States of a standard cross-encoder over ``[CLS] q [SEP] d [SEP]`` [N, L, H] (token types 0 / 1)."""
    real = attention_mask.bool()
    not_cls = torch.arange(hidden.shape[1], device=hidden.device)[None, :] > 0
    query_mask = real & (token_type_ids == 0) & not_cls
    return PairStates(hidden[:, 0], hidden, query_mask, hidden, real & (token_type_ids == 1))


def pair_states_from_sparse(segments: Segments) -> PairStates:
    """States of the sparse cross-encoder (``SparseCrossEncoderOutput.segments``)."""

    def mask(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        return torch.arange(x.shape[1], device=x.device)[None, :] < lengths[:, None]

    return PairStates(
        segments.cls[:, 0],
        segments.query,
        mask(segments.query, segments.query_lengths),
        segments.doc,
        mask(segments.doc, segments.doc_lengths),
        segments.query_index,
    )


def without_last(mask: torch.Tensor) -> torch.Tensor:
    """Drops each row's last marked token (the segment's [SEP])."""
    return mask & (mask.cumsum(-1) < mask.sum(-1, keepdim=True))


class MeanPoolHead(nn.Module):
    """``1/n sum_i (T_i W + b)`` over all n tokens of the pair ([CLS], query, doc, separators) (Eq. 2)."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.linear = nn.Linear(hidden_size, 1)

    def forward(self, states: PairStates) -> torch.Tensor:
        with autocast_off(states.cls.device):
            states = states.to_dtype(self.linear.weight.dtype)
            query, query_mask = _per_pair(states.query, states.query_mask, states.query_index)
            total = states.cls + _masked_sum(query, query_mask) + _masked_sum(states.doc, states.doc_mask)
            count = 1 + query_mask.sum(-1) + states.doc_mask.sum(-1)
            return self.linear(total / count[:, None].to(total.dtype)).squeeze(-1)


class CeliHead(nn.Module):
    """CELI: ``s_cls + sum_{q_i} max_{d_j} v_qi . v_dj`` with ``v = T W_tok + b_tok`` in ``token_dim`` dims, over the
    tokens without [CLS] and [SEP] (no doc tokens: ``s_late = 0``); a shared query is projected once.
    """

    def __init__(self, hidden_size: int, token_dim: int = 32):
        super().__init__()
        self.cls = nn.Linear(hidden_size, 1)
        self.token = nn.Linear(hidden_size, token_dim)

    def score_parts(self, states: PairStates) -> tuple[torch.Tensor, torch.Tensor]:
        """(s_cls [N], s_late [N]): the two terms the paper trains with LCE separately."""
        with autocast_off(states.cls.device):
            states = states.to_dtype(self.cls.weight.dtype)
            s_cls = self.cls(states.cls).squeeze(-1)
            mask = without_last(states.query_mask)
            query, query_mask = _per_pair(self.token(states.query), mask, states.query_index)
            doc, doc_mask = self.token(states.doc), without_last(states.doc_mask)
            sim = query @ doc.transpose(-1, -2)  # [N, Lq, Ld]
            best = sim.masked_fill(~doc_mask[:, None, :], float("-inf")).amax(-1)
            best = best.masked_fill(~doc_mask.any(-1)[:, None] | ~query_mask, 0.0)
            return s_cls, best.sum(-1)

    def forward(self, states: PairStates) -> torch.Tensor:
        s_cls, s_late = self.score_parts(states)
        return s_cls + s_late


def _per_pair(x: torch.Tensor, mask: torch.Tensor, index: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    return (x, mask) if index is None else (x[index], mask[index])


def _masked_sum(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask[..., None].to(x.dtype)).sum(1)
