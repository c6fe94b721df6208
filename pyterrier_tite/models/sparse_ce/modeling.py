"""Sparse cross-encoder (ECIR'24) in the reference's checkpoint format: each pair's ``[CLS] q [SEP] d [SEP]`` as three
segments, each attending to its own keys (doc->doc within ``+-attention_window_size``) and the groups its
``X_Y_attention`` flags allow; a query that sees only itself is encoded once for all its docs. Two reference bugs are
not reproduced: every doc keeps its final [SEP], and window 0 means a doc token sees only itself among doc tokens.
The pooler and score head run in float32 under autocast (bf16 scores would tie)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn
from transformers import PreTrainedModel
from transformers.activations import ACT2FN
from transformers.utils import ModelOutput

from pyterrier_tite.devices import capturing_cuda_graph, in_dtype
from pyterrier_tite.models.backbone import reference_init
from pyterrier_tite.models.checkpoint import (
    Checkpoint,
    load_exactly,
    note_fresh,
    open_checkpoint,
    read_state_dict,
)
from pyterrier_tite.models.fused_linear import ConcatenatedLinears, attention_projections
from pyterrier_tite.models.sparse_ce.attention import KeyGroup, grouped_attention
from pyterrier_tite.models.sparse_ce.configuration import FLAGS, SparseCrossEncoderConfig
from pyterrier_tite.models.sparse_ce.convert import DERIVED, bert_state, is_sparse_config, new_head_keys, sparse_config
from pyterrier_tite.models.sparse_ce.packed import Segments, packed_applies, packed_forward
from pyterrier_tite.models.sparse_ce.tokenization import SparseCrossEncoderBatch
from pyterrier_tite.ops import add_layer_norm


def _append_sep(ids: torch.Tensor, lengths: torch.Tensor, sep: int, pad: int) -> torch.Tensor:
    """[B, L] raw ids -> [B, L+1] with [SEP] right after each sequence's last token."""
    out = nn.functional.pad(ids, (0, 1), value=pad)
    return out.scatter(1, lengths[:, None], torch.full_like(lengths[:, None], sep))


def check_positions(batch: SparseCrossEncoderBatch, config: SparseCrossEncoderConfig) -> None:
    """Every pair fits the position embeddings (a host sync where the batch is on a GPU)."""
    q_len, d_len, index = batch.query_lengths, batch.doc_lengths, batch.doc_query_index
    longest = int((q_len[index] + d_len).max()) + 3 if len(index) else 0
    if longest > config.max_position_embeddings:
        raise ValueError(f"a query-doc pair needs {longest} positions, the model has {config.max_position_embeddings}")


# ------------------------------------------------------------------------------------------------------------ layers
class SparseCrossEncoderEmbeddings(nn.Module):
    """BERT embeddings with explicit positions and token types."""

    def __init__(self, config: SparseCrossEncoderConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.use_token_types = config.token_type_embedding
        # persistent: the reference checkpoints carry it
        self.register_buffer("position_ids", torch.arange(config.max_position_embeddings)[None], persistent=True)

    def forward(self, ids: torch.Tensor, positions: torch.Tensor, token_type: int) -> torch.Tensor:
        positions = positions.clamp(max=self.position_embeddings.num_embeddings - 1)  # padding rows only
        x = self.word_embeddings(ids) + self.position_embeddings(positions)
        if self.use_token_types:
            x = x + self.token_type_embeddings.weight[token_type]
        return self.dropout(self.LayerNorm(x))


class SparseCrossEncoderSelfAttention(nn.Module):
    """Q/K/V projections; attention pattern per segment from the config flags."""

    def __init__(self, config: SparseCrossEncoderConfig):
        super().__init__()
        self.heads = config.num_attention_heads
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout = config.attention_probs_dropout_prob
        self.attention_window_size = config.attention_window_size  # checked by the config; ops/ call it window
        self.flags = {name: bool(getattr(config, name)) for name in FLAGS}
        self._fused = ConcatenatedLinears()  # Q|K|V as one GEMM (checkpoints keep the three tensors)

    def _qkv(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Q, K, V [B, heads, L, d] from one GEMM: views of one tensor, which the fused kernel reads without copies."""
        b, length, hidden = x.shape
        qkv = self.project(x, "qkv").view(b, length, 3, self.heads, hidden // self.heads)
        return tuple(qkv[:, :, i].transpose(1, 2) for i in range(3))

    def project(self, x: torch.Tensor, parts: str) -> torch.Tensor:
        """The projections ``parts`` ("qkv", "kv") of ``x``, concatenated (one GEMM, or the joint int8 layers)."""
        return attention_projections(self, x, parts, self._fused)

    def forward(self, s: Segments) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return self.attend(s, self._qkv(s.doc))

    def attend(
        self, s: Segments, doc_qkv: tuple[torch.Tensor | None, torch.Tensor, torch.Tensor], cls_only: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """Attention of the three segments, the doc's Q, K, V given (the packed forward scatters them from real tokens).
        ``cls_only``: the [CLS] rows alone (the doc's Q may be None)."""
        f, p = self.flags, self.dropout if self.training else 0.0
        (qc, kc, vc), (qq, kq, vq), (qd, kd, vd) = self._qkv(s.cls), self._qkv(s.query), doc_qkv
        cls_keys = KeyGroup(kc, vc)
        query_keys = KeyGroup(kq, vq, s.query_lengths, s.query_index)
        doc_keys = KeyGroup(kd, vd, s.doc_lengths)
        groups = [query_keys] * f["cls_query_attention"] + [doc_keys] * f["cls_doc_attention"]
        cls = grouped_attention(qc, kc, vc, None, None, groups, dropout=p)
        if cls_only:
            return _merge(cls), None, None
        groups = [cls_keys] * f["query_cls_attention"] + [doc_keys] * f["query_doc_attention"]
        query = grouped_attention(qq, kq, vq, None, s.query_lengths, groups, dropout=p)
        groups = [cls_keys] * f["doc_cls_attention"] + [query_keys] * f["doc_query_attention"]
        doc = grouped_attention(qd, kd, vd, self.attention_window_size, s.doc_lengths, groups, dropout=p)
        return tuple(_merge(x) for x in (cls, query, doc))


def _merge(x: torch.Tensor) -> torch.Tensor:
    b, h, length, d = x.shape
    return x.transpose(1, 2).reshape(b, length, h * d)


class SparseCrossEncoderSelfOutput(nn.Module):
    def __init__(self, config: SparseCrossEncoderConfig, in_size: int):
        super().__init__()
        self.dense = nn.Linear(in_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        if self.training or not capturing_cuda_graph():
            return self.LayerNorm(self.dropout(self.dense(x)) + residual)
        norm = self.LayerNorm  # in a CUDA graph: one fused pass (ops.add_layer_norm), its Triton launch costs nothing
        return add_layer_norm(self.dense(x), residual, norm.weight, norm.bias, norm.eps)


class SparseCrossEncoderAttention(nn.Module):
    def __init__(self, config: SparseCrossEncoderConfig):
        super().__init__()
        self.self = SparseCrossEncoderSelfAttention(config)
        self.output = SparseCrossEncoderSelfOutput(config, config.hidden_size)

    def forward(self, s: Segments) -> Segments:
        attended = self.self(s)
        return s.replace(*(self.output(a, x) for a, x in zip(attended, (s.cls, s.query, s.doc), strict=True)))


class SparseCrossEncoderIntermediate(nn.Module):
    def __init__(self, config: SparseCrossEncoderConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)
        self.act = ACT2FN[config.hidden_act]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.dense(x))


class SparseCrossEncoderLayer(nn.Module):
    """Post-LN BERT layer: LN(x + Dense(Attn(x))), then LN(h + W2 act(W1 h))."""

    def __init__(self, config: SparseCrossEncoderConfig):
        super().__init__()
        self.attention = SparseCrossEncoderAttention(config)
        self.intermediate = SparseCrossEncoderIntermediate(config)
        self.output = SparseCrossEncoderSelfOutput(config, config.intermediate_size)

    def forward(self, s: Segments) -> Segments:
        s = self.attention(s)
        return s.replace(*(self.output(self.intermediate(x), x) for x in (s.cls, s.query, s.doc)))


class SparseCrossEncoderEncoder(nn.Module):
    def __init__(self, config: SparseCrossEncoderConfig):
        super().__init__()
        self.layer = nn.ModuleList(SparseCrossEncoderLayer(config) for _ in range(config.num_hidden_layers))


class SparseCrossEncoderPooler(nn.Module):
    def __init__(self, config: SparseCrossEncoderConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.activation = nn.Tanh()

    def forward(self, cls: torch.Tensor) -> torch.Tensor:
        return self.activation(self.dense(cls))


# ------------------------------------------------------------------------------------------------------------ models
@dataclass
class SparseCrossEncoderModelOutput(ModelOutput):
    """Final segments, the pooled [CLS] and (``hidden_states``) each stage's ``(cls, query, doc)``."""

    last_cls_state: torch.Tensor | None = None
    pooler_output: torch.Tensor | None = None
    segments: Segments | None = None
    hidden_states: tuple[tuple[torch.Tensor, torch.Tensor, torch.Tensor], ...] | None = None


@dataclass
class SparseCrossEncoderOutput(ModelOutput):
    """``logits`` [N] in input order and ``doc_query_index`` [N] (``split_by_query``: the reference's lists)."""

    logits: torch.Tensor | None = None
    pooler_output: torch.Tensor | None = None
    doc_query_index: torch.Tensor | None = None
    segments: Segments | None = None
    hidden_states: tuple[tuple[torch.Tensor, torch.Tensor, torch.Tensor], ...] | None = None

    def split_by_query(self, num_queries: int | None = None) -> list[torch.Tensor]:
        n = int(self.doc_query_index.max()) + 1 if num_queries is None and len(self.doc_query_index) else num_queries
        counts = torch.bincount(self.doc_query_index, minlength=n or 0).tolist()
        return list(self.logits.split(counts))


class SparseCrossEncoderPreTrainedModel(PreTrainedModel):
    config_class = SparseCrossEncoderConfig
    base_model_prefix = "bert"
    _keys_to_ignore_on_load_missing = [r"position_ids"]
    _keys_to_ignore_on_load_unexpected = [r"position_ids"]

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        reference_init(module, self.config.initializer_range)
        if isinstance(module, SparseCrossEncoderEmbeddings):
            module.position_ids.copy_(torch.arange(module.position_ids.shape[-1])[None])


class SparseCrossEncoderModel(SparseCrossEncoderPreTrainedModel):
    """The encoder (``bert.*`` of the checkpoint): embeddings, layers, pooler."""

    def __init__(self, config: SparseCrossEncoderConfig):
        super().__init__(config)
        self.embeddings = SparseCrossEncoderEmbeddings(config)
        self.encoder = SparseCrossEncoderEncoder(config)
        self.pooler = SparseCrossEncoderPooler(config)
        self.packed = True  # CPU inference: the packed forward (no compute on padded doc rows), see .packed
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embeddings.word_embeddings

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.embeddings.word_embeddings = value

    def embed(self, batch: SparseCrossEncoderBatch) -> Segments:
        """Token layout of ``[CLS] q [SEP] d [SEP]`` per pair, split into the three segments."""
        c = self.config
        q_len, d_len, index = batch.query_lengths, batch.doc_lengths, batch.doc_query_index
        if not capturing_cuda_graph():  # a graph's caller checks its batch on the host
            check_positions(batch, c)
        device = batch.doc_ids.device
        query_ids = _append_sep(batch.query_ids, q_len, c.sep_token_id, c.pad_token_id)
        doc_ids = _append_sep(batch.doc_ids, d_len, c.sep_token_id, c.pad_token_id)
        cls_ids = torch.full((1, 1), c.cls_token_id, device=device)
        cls = self.embeddings(cls_ids, torch.zeros_like(cls_ids), 0).expand(len(index), 1, -1)
        query = self.embeddings(query_ids, torch.arange(1, query_ids.shape[1] + 1, device=device)[None], 0)
        doc_pos = (q_len[index] + 2)[:, None] + torch.arange(doc_ids.shape[1], device=device)
        doc = self.embeddings(doc_ids, doc_pos, 1)
        if c.shares_query:
            return Segments(cls, query, doc, q_len + 1, d_len + 1, index)
        return Segments(cls, query[index], doc, q_len[index] + 1, d_len + 1, None)

    def forward(
        self, batch: SparseCrossEncoderBatch, output_hidden_states: bool = False, cls_only: bool = False
    ) -> SparseCrossEncoderModelOutput:
        """``cls_only``: the caller reads only [CLS] and the pooler (CPU inference then skips the last layer's query
        and doc rows and returns no ``segments``)."""
        if self.packed and not output_hidden_states and packed_applies(self):
            return self._packed_output(packed_forward(self, self.embed(batch), cls_only))
        s = self.embed(batch)
        states = [(s.cls, s.query, s.doc)] if output_hidden_states else None
        for layer in self.encoder.layer:
            s = layer(s)
            if states is not None:
                states.append((s.cls, s.query, s.doc))
        return self._packed_output(s, tuple(states) if states is not None else None)

    def _packed_output(self, s: Segments | torch.Tensor, states=None) -> SparseCrossEncoderModelOutput:
        """The output of final segments, or of the final [CLS] states [B, 1, H] alone (``cls_only``)."""
        cls = (s.cls if isinstance(s, Segments) else s)[:, 0]
        return SparseCrossEncoderModelOutput(
            last_cls_state=cls,
            pooler_output=in_dtype(self.pooler.dense.weight.dtype, self.pooler, cls),
            segments=s if isinstance(s, Segments) else None,
            hidden_states=states,
        )


class SparseCrossEncoderModelForSequenceClassification(SparseCrossEncoderPreTrainedModel):
    """Sparse cross-encoder with BERT's pooler and a linear score head. ``model(queries, docs)``: raw ids (no special
    tokens) of each query and of its list of docs, or a ``SparseCrossEncoderBatch``."""

    def __init__(self, config: SparseCrossEncoderConfig):
        super().__init__(config)
        self.bert = SparseCrossEncoderModel(config)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    @classmethod
    def from_bert(cls, path_or_model, **config_overrides) -> SparseCrossEncoderModelForSequenceClassification:
        """Any plain BERT (folder, hub id or module) with the given window and flags; see :func:`from_bert`."""
        return from_bert(path_or_model, **config_overrides)

    def make_batch(self, queries, docs) -> SparseCrossEncoderBatch:
        return SparseCrossEncoderBatch.from_lists(queries, docs, self.config.pad_token_id, self.device)

    def forward(
        self,
        query_input_ids: Sequence | SparseCrossEncoderBatch,
        doc_input_ids: Sequence | None = None,
        output_hidden_states: bool = False,
        cls_only: bool = False,
    ) -> SparseCrossEncoderOutput:
        """``cls_only``: only ``logits`` / ``pooler_output`` are read (``segments`` may then be None)."""
        batch = query_input_ids
        if not isinstance(batch, SparseCrossEncoderBatch):
            batch = self.make_batch(query_input_ids, doc_input_ids)
        index = batch.doc_query_index
        if len(index) == 0:
            empty = self.classifier.weight.new_zeros(0)
            return SparseCrossEncoderOutput(
                logits=empty, pooler_output=empty.view(0, self.config.hidden_size), doc_query_index=index
            )
        out = self.bert(batch, output_hidden_states=output_hidden_states, cls_only=cls_only)
        head = self.classifier.weight.dtype
        logits = in_dtype(head, lambda pooled: self.classifier(self.dropout(pooled)), out.pooler_output)
        return SparseCrossEncoderOutput(
            logits=logits.squeeze(-1) if logits.shape[-1] == 1 else logits,
            pooler_output=out.pooler_output,
            doc_query_index=index,
            segments=out.segments,
            hidden_states=out.hidden_states,
        )


SparseCrossEncoder = SparseCrossEncoderModelForSequenceClassification


# ------------------------------------------------------------------------------------------------ loading
def load_sparse_cross_encoder(
    folder: str | os.PathLike | Checkpoint, ids: dict[str, int] | None = None, **overrides
) -> SparseCrossEncoder:
    """A sparse checkpoint loaded exactly, or a plain BERT one converted: encoder exact, pooler / classifier fresh
    when absent, pre-training heads ignored, all said once."""
    checkpoint = open_checkpoint(folder)
    folder = checkpoint.folder
    sparse = is_sparse_config(checkpoint.config)
    model = SparseCrossEncoder(sparse_config(checkpoint, ids, **overrides))
    state = read_state_dict(folder)
    if sparse:
        load_exactly(model, state, folder, fresh=DERIVED)
    else:
        state = bert_state(state)
        fresh, ignored = new_head_keys(model, state)
        load_exactly(model, state, folder, fresh=DERIVED + tuple(fresh), unused=tuple(ignored))
        if fresh:
            note_fresh(f"score head {', '.join(fresh)}" + (f" (ignored: {', '.join(ignored)})" if ignored else ""))
    return model.eval()


def from_bert(path_or_model, ids: dict[str, int] | None = None, **overrides) -> SparseCrossEncoder:
    """A sparse cross-encoder from a folder / hub id or a BERT module (encoder weights all there, missing heads fresh
    and reported). ``ids``: special ids the config lacks."""
    if not isinstance(path_or_model, nn.Module):
        return load_sparse_cross_encoder(open_checkpoint(path_or_model), ids, **overrides)
    bert = path_or_model
    fields = {k: v for k, v in bert.config.to_dict().items() if k not in ("id2label", "label2id") and v is not None}
    model = SparseCrossEncoder(SparseCrossEncoderConfig(**{**(ids or {}), **fields, **overrides}))
    missing, _ = model.load_state_dict(bert_state(bert.state_dict()), strict=False)
    missing = [k for k in missing if k not in DERIVED]
    lost = [k for k in missing if "embeddings." in k or "encoder." in k]
    if lost:
        raise ValueError(f"not a BERT checkpoint, missing encoder weights: {lost[:4]}")
    if missing:
        note_fresh(f"score head {', '.join(missing)} (from a {type(bert).__name__})")
    return model.to(bert.dtype)
