"""Inference of a full-attention BERT / ELECTRA encoder on packed rows: no compute on padding.

The rows of a batch are concatenated (``[T, H]`` states, ``cu_seqlens`` offsets), so every linear layer, norm and
activation runs on real tokens only; attention scatters the fused Q|K|V projection into a padded ``[B, heads, L, d]``
buffer for SDPA (key mask) and gathers the result back. When only the [CLS] state is read, the last layer computes
keys and values of every token and the rest for the [CLS] rows alone. The maths is the ``transformers`` forward's
(same operations per token); only rows that change no output are skipped. Inference only (no grad), absolute positions.
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
    if config is None or type(base) not in (BertModel, ElectraModel) or config.is_decoder:
        return False
    absolute = getattr(config, "position_embedding_type", "absolute") == "absolute"
    if not absolute or getattr(base, "embeddings_project", None) is not None:
        return False
    layers = getattr(getattr(base, "encoder", None), "layer", None)
    return layers is not None and all(not getattr(layer, "add_cross_attention", False) for layer in layers)


class PackedEncoder:
    """The packed forward of one backbone's encoder; holds the fused projections."""

    def __init__(self, backbone: nn.Module):
        self.backbone = backbone
        self.fused = [ConcatenatedLinears() for _ in backbone.base_model.encoder.layer]

    def __call__(self, pairs: PackedPairs, cls_only: bool) -> torch.Tensor:
        """Last-layer states: ``[B, H]`` of the [CLS] rows when ``cls_only``, else ``[B, L, H]`` padded with zeros."""
        return self._forward(pairs, cls_only) if cls_only else pairs.layout.pad(self._forward(pairs, False))

    def tokens(self, pairs: PackedPairs) -> torch.Tensor:
        """Last-layer states of every token, packed ``[T, H]`` as in ``pairs``: what an MLM head runs on."""
        return self._forward(pairs, False)[: pairs.layout.total]

    def _forward(self, pairs: PackedPairs, cls_only: bool) -> torch.Tensor:
        """Last-layer states of the [CLS] rows, or of every row (``PackedLayout.scratch`` rows included)."""
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
        """The last layer for the [CLS] rows alone ``[B, H]``: keys and values of every token, the rest of [CLS]."""
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
    bert_mlm = not mlm.training and getattr(mlm.config, "model_type", None) == "bert" and hasattr(mlm, "cls")
    if not (bert_mlm and supports_packed(mlm)):
        return None
    return current if current is not None and current.backbone is mlm else PackedEncoder(mlm)
