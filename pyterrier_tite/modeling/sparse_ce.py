"""Sparse cross-encoder (ECIR'24): one query with many docs, [CLS] / query / doc sub-sequences, asymmetric attention.

Loads and saves the reference (webis-de/ecir24-sparse-cross-encoder) checkpoint format unchanged: the same
``config.json`` fields (``model_type`` "bert") and state-dict keys (``bert.*``, ``classifier.*``, the
``bert.embeddings.position_ids`` buffer). Two reference bugs are NOT reproduced: every doc keeps its final [SEP], and
``attention_window_size=0`` means a doc token sees only itself among doc tokens (``None`` = full attention).

Layout per (query, doc) pair is that of ``[CLS] q [SEP] d [SEP]`` (positions 0.., token types 0/0/1), split into three
segments. Each layer runs one joint-softmax attention per segment over its own keys plus the key groups its flags
allow (``X_Y_attention``: rows of X see keys of Y); doc->doc is limited to ``+-attention_window_size``. With no
``query_*`` flag the query only sees itself, so it is encoded once per query and shared by its docs.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PretrainedConfig, PreTrainedModel
from transformers.activations import ACT2FN
from transformers.utils import ModelOutput

from pyterrier_tite.modeling.fused_linear import ConcatenatedLinears
from pyterrier_tite.modeling.sparse_attention import KeyGroup, grouped_attention

FLAGS = (
    "cls_query_attention",
    "cls_doc_attention",
    "query_cls_attention",
    "query_doc_attention",
    "doc_cls_attention",
    "doc_query_attention",
)


class SparseCrossEncoderConfig(PretrainedConfig):
    """BERT fields plus the reference's six attention flags, window size and special token ids.

    Defaults (all flags on, no window) make the model a plain BERT cross-encoder; the released checkpoints use w=4 and
    ``query_cls_attention = query_doc_attention = False``. ``model_type`` is "bert" like the reference, so checkpoints
    round-trip unchanged; load this class explicitly (``AutoConfig`` would give a ``BertConfig``).
    """

    model_type = "bert"

    def __init__(
        self,
        vocab_size: int = 30522,
        hidden_size: int = 768,
        num_hidden_layers: int = 12,
        num_attention_heads: int = 12,
        intermediate_size: int = 3072,
        hidden_act: str = "gelu",
        hidden_dropout_prob: float = 0.1,
        attention_probs_dropout_prob: float = 0.1,
        max_position_embeddings: int = 512,
        type_vocab_size: int = 2,
        initializer_range: float = 0.02,
        layer_norm_eps: float = 1e-12,
        pad_token_id: int = 0,
        cls_token_id: int = 101,
        sep_token_id: int = 102,
        position_embedding_type: str = "absolute",
        token_type_embedding: bool = True,
        attention_window_size: int | None = None,
        cls_query_attention: bool = True,
        cls_doc_attention: bool = True,
        query_cls_attention: bool = True,
        query_doc_attention: bool = True,
        doc_cls_attention: bool = True,
        doc_query_attention: bool = True,
        depth: int = 100,
        **kwargs,
    ):
        if "id2label" not in kwargs:
            kwargs.setdefault("num_labels", 1)
        super().__init__(pad_token_id=pad_token_id, **kwargs)
        if hidden_size % num_attention_heads:
            raise ValueError(
                f"hidden_size {hidden_size} is not a multiple of num_attention_heads {num_attention_heads}"
            )
        if attention_window_size is not None and attention_window_size < 0:
            raise ValueError(f"attention_window_size must be None or >= 0, got {attention_window_size}")
        if position_embedding_type != "absolute":
            raise ValueError(f"only absolute position embeddings are supported, got {position_embedding_type!r}")
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.intermediate_size = intermediate_size
        self.hidden_act = hidden_act
        self.hidden_dropout_prob = hidden_dropout_prob
        self.attention_probs_dropout_prob = attention_probs_dropout_prob
        self.max_position_embeddings = max_position_embeddings
        self.type_vocab_size = type_vocab_size
        self.initializer_range = initializer_range
        self.layer_norm_eps = layer_norm_eps
        self.cls_token_id = cls_token_id
        self.sep_token_id = sep_token_id
        self.position_embedding_type = position_embedding_type
        self.token_type_embedding = token_type_embedding
        self.attention_window_size = attention_window_size
        self.cls_query_attention = cls_query_attention
        self.cls_doc_attention = cls_doc_attention
        self.query_cls_attention = query_cls_attention
        self.query_doc_attention = query_doc_attention
        self.doc_cls_attention = doc_cls_attention
        self.doc_query_attention = doc_query_attention
        self.depth = depth

    @property
    def shares_query(self) -> bool:
        """The query sees only itself, so one encoding per query serves all its docs."""
        return not (self.query_cls_attention or self.query_doc_attention)


# ------------------------------------------------------------------------------------------------------------ inputs
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
        q_ids, q_len = _pad([torch.as_tensor(q, dtype=torch.long) for q in queries], pad_token_id)
        d_ids, d_len = _pad(flat, pad_token_id)
        return cls(q_ids, q_len, d_ids, d_len, index).to(device)

    @classmethod
    def from_padded(
        cls, query_ids: torch.Tensor, doc_ids: torch.Tensor, doc_query_index: torch.Tensor, pad_token_id: int = 0
    ) -> SparseCrossEncoderBatch:
        """Right-padded id tensors; lengths count the non-pad ids (the reference derives its masks the same way)."""
        lengths = [(ids != pad_token_id).sum(-1) for ids in (query_ids, doc_ids)]
        return cls(query_ids, lengths[0], doc_ids, lengths[1], doc_query_index)

    def to(self, device: torch.device | str | None) -> SparseCrossEncoderBatch:
        if device is None:
            return self
        return SparseCrossEncoderBatch(*(t.to(device) for t in self.__dict__.values()))


def _pad(seqs: list[torch.Tensor], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    lengths = torch.tensor([len(s) for s in seqs], dtype=torch.long)
    if not seqs:
        return torch.zeros(0, 0, dtype=torch.long), lengths
    return nn.utils.rnn.pad_sequence(seqs, batch_first=True, padding_value=pad), lengths


def _append_sep(ids: torch.Tensor, lengths: torch.Tensor, sep: int, pad: int) -> torch.Tensor:
    """[B, L] raw ids -> [B, L+1] with [SEP] right after each sequence's last token."""
    out = nn.functional.pad(ids, (0, 1), value=pad)
    return out.scatter(1, lengths[:, None], torch.full_like(lengths[:, None], sep))


# ------------------------------------------------------------------------------------------------------------ layers
@dataclass
class Segments:
    """Hidden states of the three sub-sequences. ``query`` is [Q, Lq, H] shared via ``query_index`` [N], or [N, Lq, H]
    per pair (``query_index`` None). Lengths count real tokens, [SEP] included."""

    cls: torch.Tensor
    query: torch.Tensor
    doc: torch.Tensor
    query_lengths: torch.Tensor
    doc_lengths: torch.Tensor
    query_index: torch.Tensor | None

    def replace(self, cls: torch.Tensor, query: torch.Tensor, doc: torch.Tensor) -> Segments:
        return Segments(cls, query, doc, self.query_lengths, self.doc_lengths, self.query_index)


class SparseCrossEncoderEmbeddings(nn.Module):
    """BERT embeddings (word + absolute position + token type, LayerNorm), with explicit positions and types."""

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
        self.window = config.attention_window_size
        self.flags = {name: bool(getattr(config, name)) for name in FLAGS}
        self._fused = ConcatenatedLinears()  # Q|K|V as one GEMM (checkpoints keep the three tensors)

    def _qkv(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Q, K, V [B, heads, L, d] from ONE projection GEMM: views of one [B, L, 3, heads, d] tensor, so they share
        strides and the fused attention kernel reads them without copies."""
        b, length, hidden = x.shape
        weight, bias = self._fused.get("qkv", (self.query, self.key, self.value))
        qkv = F.linear(x, weight, bias).view(b, length, 3, self.heads, hidden // self.heads)
        return tuple(qkv[:, :, i].transpose(1, 2) for i in range(3))

    def forward(self, s: Segments) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        f, p = self.flags, self.dropout if self.training else 0.0
        (qc, kc, vc), (qq, kq, vq), (qd, kd, vd) = self._qkv(s.cls), self._qkv(s.query), self._qkv(s.doc)
        cls_keys = KeyGroup(kc, vc)
        query_keys = KeyGroup(kq, vq, s.query_lengths, s.query_index)
        doc_keys = KeyGroup(kd, vd, s.doc_lengths)
        groups = [query_keys] * f["cls_query_attention"] + [doc_keys] * f["cls_doc_attention"]
        cls = grouped_attention(qc, kc, vc, None, None, groups, dropout=p)
        groups = [cls_keys] * f["query_cls_attention"] + [doc_keys] * f["query_doc_attention"]
        query = grouped_attention(qq, kq, vq, None, s.query_lengths, groups, dropout=p)
        groups = [cls_keys] * f["doc_cls_attention"] + [query_keys] * f["doc_query_attention"]
        doc = grouped_attention(qd, kd, vd, self.window, s.doc_lengths, groups, dropout=p)
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
        return self.LayerNorm(self.dropout(self.dense(x)) + residual)


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
    """Final states per segment (``query`` shared per query when ``query_index`` is set) and the pooled [CLS].

    ``hidden_states``: (embedding output, layer 1, ..., layer N), each a ``(cls, query, doc)`` triple.
    """

    last_cls_state: torch.Tensor | None = None
    pooler_output: torch.Tensor | None = None
    segments: Segments | None = None
    hidden_states: tuple[tuple[torch.Tensor, torch.Tensor, torch.Tensor], ...] | None = None


@dataclass
class SparseCrossEncoderOutput(ModelOutput):
    """``logits`` [N]: one score per doc, in input order; ``doc_query_index`` [N] says which query each doc belongs
    to (``split_by_query`` gives the reference's list-per-query view)."""

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
        """Reference init: normal(0, initializer_range) weights, zero biases, zero padding row, unit norms."""
        std = self.config.initializer_range
        if isinstance(module, nn.Linear):
            module.weight.normal_(0.0, std)
            if module.bias is not None:
                module.bias.zero_()
        elif isinstance(module, nn.Embedding):
            module.weight.normal_(0.0, std)
            if module.padding_idx is not None:
                module.weight[module.padding_idx].zero_()
        elif isinstance(module, nn.LayerNorm):
            module.weight.fill_(1.0)
            module.bias.zero_()
        elif isinstance(module, SparseCrossEncoderEmbeddings):
            module.position_ids.copy_(torch.arange(module.position_ids.shape[-1])[None])

    @classmethod
    def from_bert(cls, path_or_model, **config_overrides):
        """Any plain BERT checkpoint (folder / hub id, or a loaded ``BertModel`` / ``BertFor*``) as a sparse
        cross-encoder with the given window and flags, e.g. ``from_bert(path, attention_window_size=4,
        query_cls_attention=False, query_doc_attention=False)``. A sparse checkpoint loads exactly. Missing heads
        (pooler, classifier) start fresh, with a warning; any other missing or unused tensor is an error."""
        if isinstance(path_or_model, PreTrainedModel):
            return cls._from_bert_module(path_or_model, **config_overrides)
        from pyterrier_tite.convert.checkpoint import local_checkpoint
        from pyterrier_tite.convert.sparse_ce import load_sparse_cross_encoder

        if cls is not SparseCrossEncoderModelForSequenceClassification:
            raise TypeError(f"{cls.__name__}.from_bert takes a model; load folders with SparseCrossEncoder")
        return load_sparse_cross_encoder(local_checkpoint(path_or_model), **config_overrides)

    @classmethod
    def _from_bert_module(cls, bert: PreTrainedModel, **config_overrides):
        """A loaded BERT's weights in a sparse model: the encoder must be complete; heads it lacks are reported."""
        fields = {k: v for k, v in bert.config.to_dict().items() if k not in ("id2label", "label2id")}
        model = cls(SparseCrossEncoderConfig(**{**fields, **config_overrides}))
        state = bert.state_dict()
        prefix = "" if any(k.startswith("bert.") for k in state) else "bert."
        target = cls.base_model_prefix + "." if cls is not SparseCrossEncoderModel else ""
        missing, _ = model.load_state_dict({_rebase(k, prefix, target): v for k, v in state.items()}, strict=False)
        missing = [k for k in missing if not k.endswith("position_ids")]
        lost = [k for k in missing if "embeddings." in k or "encoder." in k]
        if lost:
            raise ValueError(f"not a BERT checkpoint, missing encoder weights: {lost[:4]}")
        if missing:
            from pyterrier_tite.convert.cross_encoder import note_fresh

            note_fresh(f"score head {', '.join(missing)} (from a {type(bert).__name__})")
        return model.to(bert.dtype)


def _rebase(key: str, prefix: str, target: str) -> str:
    """Key of a BERT state dict -> key in this model (``bert.`` prefix added or dropped)."""
    key = prefix + key
    return key if target else key.removeprefix("bert.")


def load_config(path: str | os.PathLike, **overrides) -> SparseCrossEncoderConfig:
    """Reads ``config.json`` of a local folder directly (no AutoConfig: model_type "bert" maps to BertConfig there)."""
    file = Path(path) / "config.json"
    if file.is_file():
        return SparseCrossEncoderConfig(**{**json.loads(file.read_text()), **overrides})
    return SparseCrossEncoderConfig.from_pretrained(path, **overrides)


class SparseCrossEncoderModel(SparseCrossEncoderPreTrainedModel):
    """The encoder (``bert.*`` of the checkpoint): embeddings, layers, pooler. ``forward(batch)`` ->
    ``SparseCrossEncoderModelOutput``."""

    def __init__(self, config: SparseCrossEncoderConfig):
        super().__init__(config)
        self.embeddings = SparseCrossEncoderEmbeddings(config)
        self.encoder = SparseCrossEncoderEncoder(config)
        self.pooler = SparseCrossEncoderPooler(config)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embeddings.word_embeddings

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.embeddings.word_embeddings = value

    def embed(self, batch: SparseCrossEncoderBatch) -> Segments:
        """Token layout of ``[CLS] q [SEP] d [SEP]`` per pair, split into the three segments."""
        c = self.config
        q_len, d_len, index = batch.query_lengths, batch.doc_lengths, batch.doc_query_index
        longest = int((q_len[index] + d_len).max()) + 3 if len(index) else 0
        if longest > c.max_position_embeddings:
            raise ValueError(f"a query-doc pair needs {longest} positions, the model has {c.max_position_embeddings}")
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
        self, batch: SparseCrossEncoderBatch, output_hidden_states: bool = False
    ) -> SparseCrossEncoderModelOutput:
        s = self.embed(batch)
        states = [(s.cls, s.query, s.doc)] if output_hidden_states else None
        for layer in self.encoder.layer:
            s = layer(s)
            if states is not None:
                states.append((s.cls, s.query, s.doc))
        cls = s.cls[:, 0]
        return SparseCrossEncoderModelOutput(
            last_cls_state=cls,
            pooler_output=self.pooler(cls),
            segments=s,
            hidden_states=tuple(states) if states is not None else None,
        )


class SparseCrossEncoderModelForSequenceClassification(SparseCrossEncoderPreTrainedModel):
    """Sparse cross-encoder with the BERT pooler and a linear score head: one logit per (query, doc).

    ``model(queries, docs)`` takes one list of raw ids per query and a list of docs (raw ids) per query, or a
    ``SparseCrossEncoderBatch``; ids carry no special tokens.
    """

    def __init__(self, config: SparseCrossEncoderConfig):
        super().__init__(config)
        self.bert = SparseCrossEncoderModel(config)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.bert.get_input_embeddings()

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.bert.set_input_embeddings(value)

    def make_batch(self, queries, docs) -> SparseCrossEncoderBatch:
        return SparseCrossEncoderBatch.from_lists(queries, docs, self.config.pad_token_id, self.device)

    def forward(
        self,
        query_input_ids: Sequence | SparseCrossEncoderBatch,
        doc_input_ids: Sequence | None = None,
        output_hidden_states: bool = False,
    ) -> SparseCrossEncoderOutput:
        batch = query_input_ids
        if not isinstance(batch, SparseCrossEncoderBatch):
            batch = self.make_batch(query_input_ids, doc_input_ids)
        index = batch.doc_query_index
        if len(index) == 0:
            empty = self.classifier.weight.new_zeros(0)
            return SparseCrossEncoderOutput(
                logits=empty, pooler_output=empty.view(0, self.config.hidden_size), doc_query_index=index
            )
        out = self.bert(batch, output_hidden_states=output_hidden_states)
        logits = self.classifier(self.dropout(out.pooler_output))
        return SparseCrossEncoderOutput(
            logits=logits.squeeze(-1) if logits.shape[-1] == 1 else logits,
            pooler_output=out.pooler_output,
            doc_query_index=index,
            segments=out.segments,
            hidden_states=out.hidden_states,
        )


SparseCrossEncoder = SparseCrossEncoderModelForSequenceClassification
