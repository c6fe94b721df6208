"""Inference of a full-attention BERT / ELECTRA encoder on packed rows: no compute on padding.

The pairs ``[CLS] q [SEP] d [SEP]`` of a batch are concatenated into one row of tokens (``[T, H]`` hidden states,
``cu_seqlens`` offsets), so every linear layer, norm and activation runs on real tokens only; attention scatters the
fused query / key / value projection into a padded ``[B, heads, L, d]`` layout for SDPA (key mask) and gathers the
result back (one zeroed padded buffer per batch, reused by every layer). The feed-forward's first linear layer runs
with its exact GELU fused (oneDNN's linear with a GELU post-op, on float32 CPU tensors): the same erf GELU without a
pass over the ``[T, 4H]`` activations (``benchmarks/passages.py`` measures the whole path). When only the
[CLS] state is read (the "cls" head, [CLS] pooling), the last layer projects keys and values of every token and
computes the rest (query, attention, output projection, feed-forward) for the [CLS] rows alone. The maths is the
``transformers`` forward's (same operations per token); only rows that change no output are not computed.

Used in inference (no grad) for BERT and ELECTRA backbones with absolute positions by
:class:`~pyterrier_tite.models.cross_encoder.modeling.CrossEncoderScorer` (pairs) and by
:class:`~pyterrier_tite.models.bert_biencoder.modeling.PooledEncoder` (single texts, from their right-padded batch),
and for every token's states (:meth:`PackedEncoder.tokens`) by SPLADE and Aggretriever, whose MLM heads then run on
real tokens only; anything else runs the ``transformers`` forward.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn

from pyterrier_tite.models.fused_linear import (
    ConcatenatedLinears,
    attention_projections,
    gemm_rows,
    in_autocast_dtype,
    linear_gelu,
)
from pyterrier_tite.models.packing import PackedLayout


@dataclass
class PackedPairs:
    """Token ids and token types ``[T]`` of B rows (pairs or single texts) packed back to back, with their
    :class:`~pyterrier_tite.models.packing.PackedLayout` (positions, padded slots, key mask)."""

    input_ids: torch.Tensor
    token_type_ids: torch.Tensor
    layout: PackedLayout

    @classmethod
    def from_lists(cls, queries, docs, cls_id: int, sep_id: int, device) -> PackedPairs:
        """The pairs ``[CLS] q [SEP] d [SEP]`` of every query's docs, in order."""
        ids, types, lengths = [], [], []
        for q, ds in zip(queries, docs, strict=True):
            head = [cls_id, *q, sep_id]
            for d in ds:
                ids += head
                ids += d
                ids.append(sep_id)
                types += [0] * len(head) + [1] * (len(d) + 1)
                lengths.append(len(head) + len(d) + 1)
        return cls(
            torch.tensor(ids, dtype=torch.long, device=device),
            torch.tensor(types, dtype=torch.long, device=device),
            PackedLayout.from_lengths(torch.tensor(lengths), device),
        )

    @classmethod
    def from_padded(cls, batch: dict[str, torch.Tensor]) -> PackedPairs | None:
        """The rows of a right-padded tokenizer batch (``input_ids``, ``attention_mask``, optional
        ``token_type_ids``); None when the mask is not a prefix of every row (left padding, holes)."""
        ids, mask = batch["input_ids"], batch.get("attention_mask")
        if mask is None:
            mask = torch.ones_like(ids)
        lengths = mask.sum(1).cpu()
        if ids.shape[0] == 0 or int(lengths.min()) == 0:
            return None
        prefix = torch.arange(ids.shape[1])[None, :] < lengths[:, None]
        if not torch.equal(mask.cpu().bool(), prefix):
            return None
        keep = prefix.to(ids.device)
        types = batch.get("token_type_ids")
        return cls(
            ids[keep],
            types[keep] if types is not None else torch.zeros_like(ids[keep]),
            PackedLayout.from_lengths(lengths, ids.device),
        )


def supports_packed(backbone: nn.Module) -> bool:
    """A ``transformers`` BERT / ELECTRA model (or a model with one as its base, e.g. a sequence classifier) whose
    encoder the packed forward reproduces."""
    from transformers import BertModel, ElectraModel

    config = getattr(backbone, "config", None)
    base = getattr(backbone, "base_model", None)
    if config is None or type(base) not in (BertModel, ElectraModel):
        return False
    if getattr(config, "position_embedding_type", "absolute") != "absolute" or config.is_decoder:
        return False
    if getattr(base, "embeddings_project", None) is not None:
        return False
    layers = getattr(getattr(base, "encoder", None), "layer", None)
    return layers is not None and all(not getattr(layer, "add_cross_attention", False) for layer in layers)


class PackedEncoder:
    """The packed forward of one backbone's encoder (see the module docstring); holds the fused projections."""

    def __init__(self, backbone: nn.Module):
        self.backbone = backbone
        self.fused = [ConcatenatedLinears() for _ in backbone.base_model.encoder.layer]

    def __call__(self, pairs: PackedPairs, cls_only: bool) -> torch.Tensor:
        """Last-layer states: ``[B, H]`` of the [CLS] rows when ``cls_only``, else ``[B, L, H]`` padded with zeros."""
        return self._forward(pairs, cls_only) if cls_only else pairs.layout.pad(self._forward(pairs, False))

    def tokens(self, pairs: PackedPairs) -> torch.Tensor:
        """Last-layer states of every token, packed ``[T, H]`` (rows one after another, as in ``pairs``): what a head
        that reads every token (an MLM's) runs on, with no padding."""
        return self._forward(pairs, False)[: pairs.layout.total]

    def _forward(self, pairs: PackedPairs, cls_only: bool) -> torch.Tensor:
        """Last-layer states of the [CLS] rows, or of every row (scratch rows included: ``PackedLayout.scratch``)."""
        base = self.backbone.base_model
        emb = base.embeddings
        layout = pairs.layout
        layout = replace(layout, scratch=gemm_rows(layout.total, emb.word_embeddings.weight) - layout.total)
        scratch = (0, layout.scratch)
        x = emb.word_embeddings(F.pad(pairs.input_ids, scratch))
        x = x + emb.token_type_embeddings(F.pad(pairs.token_type_ids, scratch))
        x = x + emb.position_embeddings(F.pad(layout.positions, scratch))
        x = in_autocast_dtype(emb.LayerNorm(x))
        layers = base.encoder.layer
        buffers: dict[int, torch.Tensor] = {}  # the padded Q|K|V (and K|V) of attention, reused by every layer
        for i, layer in enumerate(layers):
            if cls_only and i == len(layers) - 1:
                return self._cls_layer(layer, self.fused[i], x, layout, buffers)
            x = self._layer(layer, self.fused[i], x, layout, buffers)
        return x[layout.cu_seqlens[:-1].long()] if cls_only else x

    @staticmethod
    def _layer(layer, fused, x, layout: PackedLayout, buffers) -> torch.Tensor:
        """One encoder layer over every token."""
        attn = layer.attention.self
        heads, size = attn.num_attention_heads, attn.attention_head_size
        q, k, v = layout.padded_heads(attention_projections(attn, x, "qkv", fused), 3, heads, buffers)
        scale = getattr(attn, "scaling", size**-0.5)
        context = F.scaled_dot_product_attention(q, k, v, attn_mask=layout.key_mask, scale=scale)
        context = layout.unpad(context.transpose(1, 2).reshape(layout.batch_size, layout.max_len, heads * size))
        x = layer.attention.output(context, x)  # dense, dropout (eval: none), LayerNorm(. + x)
        return layer.output(linear_gelu(layer.intermediate.dense, layer.intermediate.intermediate_act_fn, x), x)

    @staticmethod
    def _cls_layer(layer, fused, x, layout: PackedLayout, buffers) -> torch.Tensor:
        """The last layer for the [CLS] rows alone ``[B, H]``: keys and values of every token, queries, output and
        feed-forward of the [CLS] rows only (the score reads nothing else)."""
        attn = layer.attention.self
        heads, size = attn.num_attention_heads, attn.attention_head_size
        batch = layout.batch_size
        k, v = layout.padded_heads(attention_projections(attn, x, "kv", fused), 2, heads, buffers)
        x = x[layout.cu_seqlens[:-1].long()]
        q = attention_projections(attn, x, "q", fused).view(batch, heads, 1, size)
        scale = getattr(attn, "scaling", size**-0.5)
        context = F.scaled_dot_product_attention(q, k, v, attn_mask=layout.key_mask, scale=scale)
        x = layer.attention.output(context.reshape(batch, heads * size), x)
        return layer.output(linear_gelu(layer.intermediate.dense, layer.intermediate.intermediate_act_fn, x), x)


def packed_mlm_encoder(mlm: nn.Module, current: PackedEncoder | None = None) -> PackedEncoder | None:
    """The packed encoder of a BERT masked LM whose head is ``mlm.cls`` (``current`` when it already wraps ``mlm``, so
    its fused projections are kept); None where the packed forward does not apply (another architecture, training)."""
    if mlm.training or getattr(mlm.config, "model_type", None) != "bert" or not hasattr(mlm, "cls"):
        return None
    if not supports_packed(mlm):
        return None
    return current if current is not None and current.backbone is mlm else PackedEncoder(mlm)
