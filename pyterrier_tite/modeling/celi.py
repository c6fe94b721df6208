"""Score heads for cross-encoders: [CLS] (monoBERT), mean pooling, and CELI late interaction (Zhang, Li & Lin).

CELI adds to the [CLS] score ``s_cls = T_cls W + b`` the late-interaction score ``s_late = sum_i max_j v_qi . v_dj``
over final-layer query / doc token vectors projected to ``D_tok`` (one shared projection). The paper trains both
terms with LCE separately (``CeliHead.score_parts``) and scores with their sum.

Heads read ``PairStates``, built from a standard cross-encoder's ``[CLS] q [SEP] d [SEP]`` output
(``pair_states_from_bert``) or from the sparse cross-encoder's segments (``pair_states_from_sparse``), so the same
head runs on either. Query states may be shared by all docs of a query (``query_index``): the sparse cross-encoder
encodes the query once when it attends only to itself.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from pyterrier_tite.modeling.sparse_ce import Segments


@dataclass
class PairStates:
    """Final-layer states of N (query, doc) pairs.

    ``cls`` [N, H]; ``query`` [Bq, Lq, H] with ``query_mask`` [Bq, Lq] marking the query segment's tokens, its
    trailing [SEP] included; ``query_index`` [N] maps pairs to query rows (None: one row per pair); ``doc`` [N, Ld, H]
    with ``doc_mask`` marking the doc segment (its [SEP] included). The [SEP] is each segment's last marked token.
    """

    cls: torch.Tensor
    query: torch.Tensor
    query_mask: torch.Tensor
    doc: torch.Tensor
    doc_mask: torch.Tensor
    query_index: torch.Tensor | None = None


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


class ClsHead(nn.Module):
    """monoBERT: ``T_cls W + b`` (Eq. 1)."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.linear = nn.Linear(hidden_size, 1)

    def forward(self, states: PairStates) -> torch.Tensor:
        return self.linear(states.cls).squeeze(-1)


class MeanPoolHead(nn.Module):
    """``1/n sum_i (T_i W + b)`` over all n tokens of the pair ([CLS], query, doc, separators) (Eq. 2)."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.linear = nn.Linear(hidden_size, 1)

    def forward(self, states: PairStates) -> torch.Tensor:
        query, query_mask = _per_pair(states.query, states.query_mask, states.query_index)
        total = states.cls + _masked_sum(query, query_mask) + _masked_sum(states.doc, states.doc_mask)
        count = 1 + query_mask.sum(-1) + states.doc_mask.sum(-1)
        return self.linear(total / count[:, None].to(total.dtype)).squeeze(-1)


class CeliHead(nn.Module):
    """CELI: ``s_cls + sum_{q_i} max_{d_j} v_qi . v_dj`` with ``v = T W_tok + b_tok`` in ``token_dim`` (D_tok) dims.

    Late interaction runs over query and doc tokens without [CLS] and [SEP]; a pair without doc tokens gets
    ``s_late = 0``. The projection of a shared query is computed once per query.
    """

    def __init__(self, hidden_size: int, token_dim: int = 32):
        super().__init__()
        self.cls = nn.Linear(hidden_size, 1)
        self.token = nn.Linear(hidden_size, token_dim)

    def score_parts(self, states: PairStates) -> tuple[torch.Tensor, torch.Tensor]:
        """(s_cls [N], s_late [N]): the two terms the paper trains with LCE separately."""
        s_cls = self.cls(states.cls).squeeze(-1)
        query, query_mask = _per_pair(self.token(states.query), without_last(states.query_mask), states.query_index)
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


# ------------------------------------------------------------------------------------------------ backbone + head
HEADS = ("cls", "mean", "celi")


class CrossEncoderScorer(nn.Module):
    """A cross-encoder backbone with one score head: the module rerankers run and trainers train.

    ``backbone``: a :class:`SparseCrossEncoder` (segments, windowed / asymmetric attention) or a
    ``transformers`` BERT / ELECTRA ``*ForSequenceClassification`` (full attention over ``[CLS] q [SEP] d [SEP]``).
    ``head``: ``"cls"`` uses the backbone's own score head (pooler + linear for BERT, dense + projection on [CLS]
    for ELECTRA: the reference / monoBERT checkpoint formats, so published cross-encoders score unchanged),
    ``"mean"`` a :class:`MeanPoolHead`, ``"celi"`` a :class:`CeliHead`. Inputs are raw token ids without special
    tokens: one query per entry with its list of docs. Scores come back flat ``[N]`` in input order.
    """

    def __init__(self, backbone: nn.Module, head: str = "cls", token_dim: int = 32):
        super().__init__()
        if head not in HEADS:
            raise ValueError(f"unknown head {head!r}; expected one of {HEADS}")
        from pyterrier_tite.modeling.sparse_ce import SparseCrossEncoder

        self.backbone = backbone
        self.head_name = head
        self.token_dim = token_dim
        self.is_sparse = isinstance(backbone, SparseCrossEncoder)
        hidden = backbone.config.hidden_size
        self.head = {"cls": None, "mean": lambda: MeanPoolHead(hidden), "celi": lambda: CeliHead(hidden, token_dim)}[
            head
        ]
        self.head = self.head() if self.head is not None else None

    @property
    def config(self):
        return self.backbone.config

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    def max_positions(self) -> int:
        return int(self.backbone.config.max_position_embeddings)

    def forward(self, queries: list[list[int]], docs: list[list[list[int]]]) -> torch.Tensor:
        parts = self.score_parts(queries, docs)
        return parts["cls"] + parts["late"] if "late" in parts else parts["score"]

    def score_parts(self, queries: list[list[int]], docs: list[list[list[int]]]) -> dict[str, torch.Tensor]:
        """``{"score": [N]}``, or for CELI ``{"cls": [N], "late": [N]}`` (the terms the paper trains separately)."""
        if sum(len(d) for d in docs) == 0:
            return {"score": next(self.backbone.parameters()).new_zeros(0)}
        if self.head is None:
            return {"score": self._logits(queries, docs)}
        states = self._states(queries, docs)
        if isinstance(self.head, CeliHead):
            s_cls, s_late = self.head.score_parts(states)
            return {"cls": s_cls, "late": s_late}
        return {"score": self.head(states)}

    # -- backbones ---------------------------------------------------------------------------------------------------
    def _logits(self, queries, docs) -> torch.Tensor:
        if self.is_sparse:
            return self.backbone(queries, docs).logits
        ids, types, mask = self._bert_inputs(queries, docs)
        return self.backbone(input_ids=ids, token_type_ids=types, attention_mask=mask).logits.squeeze(-1)

    def _states(self, queries, docs) -> PairStates:
        if self.is_sparse:
            return pair_states_from_sparse(self.backbone.bert(self.backbone.make_batch(queries, docs)).segments)
        ids, types, mask = self._bert_inputs(queries, docs)
        encoder = self.backbone.base_model  # .bert / .electra: the heads read the last layer, not the classifier
        hidden = encoder(input_ids=ids, token_type_ids=types, attention_mask=mask).last_hidden_state
        return pair_states_from_bert(hidden, types, mask)

    def _bert_inputs(self, queries, docs) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``[CLS] q [SEP] d [SEP]`` per pair, right-padded, with token types 0 / 1 and the attention mask."""
        c = self.backbone.config
        cls, sep = _special_id(c, "cls_token_id", 101), _special_id(c, "sep_token_id", 102)
        rows, types = [], []
        for query, doc_list in zip(queries, docs, strict=True):
            for doc in doc_list:
                rows.append([cls, *query, sep, *doc, sep])
                types.append([0] * (len(query) + 2) + [1] * (len(doc) + 1))
        length = max(len(r) for r in rows)
        pad = c.pad_token_id or 0
        ids = torch.tensor([r + [pad] * (length - len(r)) for r in rows], device=self.device)
        type_ids = torch.tensor([t + [0] * (length - len(t)) for t in types], device=self.device)
        mask = torch.tensor([[1] * len(r) + [0] * (length - len(r)) for r in rows], device=self.device)
        return ids, type_ids, mask


def _special_id(config, name: str, default: int) -> int:
    """BertConfig has no [CLS]/[SEP] ids; the WordPiece defaults apply unless the config (or the reranker) sets them."""
    value = getattr(config, name, None)
    return default if value is None else int(value)
