"""One cross-encoder backbone with one score head, what the rerankers run and train: raw ids of each query and its
list of docs in, scores out (flat ``[N]``, input order)."""

from __future__ import annotations

from collections.abc import Callable
from copy import deepcopy

import torch
from torch import nn

from pyterrier_tite.devices import in_dtype
from pyterrier_tite.models.cross_encoder.celi import (
    CeliHead,
    MeanPoolHead,
    PairStates,
    pair_states_from_bert,
    pair_states_from_sparse,
)
from pyterrier_tite.models.cross_encoder.tokenization import PairBatch, SparseCrossEncoderBatch, config_special_id
from pyterrier_tite.models.fused_linear import PROJECTIONS
from pyterrier_tite.models.int8_linear import quantize_linears
from pyterrier_tite.models.packed_bert import PackedEncoder, PackedPairs, supports_packed
from pyterrier_tite.models.sparse_ce.modeling import SparseCrossEncoder, check_positions

HEADS = ("cls", "mean", "celi")
#: the joint int8 projections an attention module of a quantized scorer holds (one projection is the layer itself)
INT8_PARTS = ("qkv", "kv")


# The score heads of transformers' *ForSequenceClassification on the first position of the last layer, so that they
# run in float32 under autocast (bf16 scores tie); another model type runs its own forward in the autocast precision.
_SEQUENCE_CLASSIFIER_HEADS: dict[str, Callable[[nn.Module, torch.Tensor], torch.Tensor]] = {
    "bert": lambda model, first: model.classifier(model.dropout(model.bert.pooler(first))),
    "electra": lambda model, first: model.classifier(first),
}


class CrossEncoderScorer(nn.Module):
    """A cross-encoder backbone (a :class:`SparseCrossEncoder` or a BERT / ELECTRA ``*ForSequenceClassification``)
    with one score head: ``"cls"`` the backbone's own (so published cross-encoders score unchanged), ``"mean"`` a
    :class:`MeanPoolHead`, ``"celi"`` a :class:`CeliHead`. ``source``: the folder the weights were loaded from (None
    in memory or once training changes them); rerankers compare equal by it.
    """

    def __init__(self, backbone: nn.Module, head: str = "cls", token_dim: int = 32, source: str | None = None):
        super().__init__()
        if head not in HEADS:
            raise ValueError(f"unknown head {head!r}; expected one of {HEADS}")
        self.backbone = backbone
        self.head_name = head
        self.token_dim = token_dim
        self.source = source
        self.is_sparse = isinstance(backbone, SparseCrossEncoder)
        hidden = backbone.config.hidden_size
        heads = {"cls": lambda: None, "mean": lambda: MeanPoolHead(hidden), "celi": lambda: CeliHead(hidden, token_dim)}
        self.head = heads[head]()
        self._graphs = None  # see use_cuda_graphs
        self.packed = True  # standard backbones in inference: the packed forward (no compute on padding)
        self._packed_encoder = None

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

    def use_cuda_graphs(self, enabled: bool = True) -> CrossEncoderScorer:
        """Sparse backbones on a CUDA device replay captured CUDA graphs in inference
        (:mod:`pyterrier_tite.models.sparse_ce.graphs`); training, CPUs and standard backbones are unaffected."""
        self._graphs = None
        if enabled and self.is_sparse:
            from pyterrier_tite.models.sparse_ce.graphs import SparseCEGraphs

            config = self.backbone.config
            self._graphs = SparseCEGraphs(
                self._sparse_parts, self, config.pad_token_id, check=lambda b: check_positions(b, config)
            )
        return self

    def quantized_int8(self) -> CrossEncoderScorer:
        """A copy whose backbone linear layers are int8 (:mod:`pyterrier_tite.models.int8_linear`), for CPU inference;
        score heads stay float32. On a trained MonoCE: DL19 nDCG@10 0.003 (AVX2) to 0.008 (VNNI) below fp32,
        Spearman per query >= 0.97 (``benchmarks/int8_quality.py``)."""
        heads = ("classifier", "pooler", "head")
        names = {
            name
            for name, module in self.named_modules()
            if type(module) is nn.Linear and name.startswith("backbone.") and not any(h in name for h in heads)
        }
        if not names:
            raise ValueError("dtype='int8': the backbone has no linear layers to quantize")
        copy = deepcopy(self)
        copy._packed_encoder = None
        for name, projections in quantize_linears(copy, names, PROJECTIONS, INT8_PARTS).items():
            object.__setattr__(copy.get_submodule(name), "int8_projections", projections)  # not in the state dict
        return copy.eval()

    def score_parts(self, queries: list[list[int]], docs: list[list[list[int]]]) -> dict[str, torch.Tensor]:
        """``{"score": [N]}``, or for CELI ``{"cls": [N], "late": [N]}`` (the terms the paper trains separately)."""
        if sum(len(d) for d in docs) == 0:
            return {"score": next(self.backbone.parameters()).new_zeros(0)}
        if self.is_sparse:
            if self._graphs is not None and self.device.type == "cuda":
                return self._graphs(SparseCrossEncoderBatch.from_lists(queries, docs, self.config.pad_token_id))
            return self._sparse_parts(self.backbone.make_batch(queries, docs))
        if self.head is None:
            return {"score": self._logits(queries, docs)}
        return self._head_parts(self._states(queries, docs))

    def _head_parts(self, states: PairStates) -> dict[str, torch.Tensor]:
        if isinstance(self.head, CeliHead):
            s_cls, s_late = self.head.score_parts(states)
            return {"cls": s_cls, "late": s_late}
        return {"score": self.head(states)}

    def _sparse_parts(self, batch: SparseCrossEncoderBatch) -> dict[str, torch.Tensor]:
        """``score_parts`` of a sparse backbone, the batch on the model's device."""
        if self.head is None:
            return {"score": self.backbone(batch, cls_only=True).logits}
        return self._head_parts(pair_states_from_sparse(self.backbone.bert(batch).segments))

    def _logits(self, queries, docs) -> torch.Tensor:
        head = _SEQUENCE_CLASSIFIER_HEADS.get(getattr(self.backbone.config, "model_type", None))
        if head is not None and self._packed_ok():
            first = self._packed()(self._packed_pairs(queries, docs), cls_only=True)[:, None]
        elif head is None:
            return self.backbone(**vars(self._pairs(queries, docs))).logits.squeeze(-1)
        else:
            first = self.backbone.base_model(**vars(self._pairs(queries, docs))).last_hidden_state[:, :1]
        dtype = next(self.backbone.classifier.parameters()).dtype
        return in_dtype(dtype, head, self.backbone, first).squeeze(-1)

    def _states(self, queries, docs) -> PairStates:
        batch = self._pairs(queries, docs)
        if self._packed_ok():
            hidden = self._packed()(self._packed_pairs(queries, docs), cls_only=False)
        else:  # .bert / .electra: the heads read the last layer, not the classifier
            hidden = self.backbone.base_model(**vars(batch)).last_hidden_state
        return pair_states_from_bert(hidden, batch.token_type_ids, batch.attention_mask)

    def _packed_ok(self) -> bool:
        """Inference without grad on a backbone the packed forward reproduces (:mod:`..packed_bert`)."""
        return self.packed and not self.training and not torch.is_grad_enabled() and supports_packed(self.backbone)

    def _packed(self) -> PackedEncoder:
        if self._packed_encoder is None or self._packed_encoder.backbone is not self.backbone:
            self._packed_encoder = PackedEncoder(self.backbone)
        return self._packed_encoder

    def _packed_pairs(self, queries, docs) -> PackedPairs:
        return PackedPairs.from_lists(queries, docs, *self._cls_sep(), self.device)

    def _pairs(self, queries, docs) -> PairBatch:
        return PairBatch.from_lists(queries, docs, *self._cls_sep(), self.config.pad_token_id or 0, self.device)

    def _cls_sep(self) -> tuple[int, int]:
        return config_special_id(self.config, "cls_token_id"), config_special_id(self.config, "sep_token_id")
