"""The segments ([CLS], query, doc) a sparse cross-encoder passes between layers, and its CPU inference with the doc
segment packed: every linear layer, norm and activation of the docs runs on their real tokens only; attention reads
their Q|K|V scattered into one zeroed padded buffer per batch (reused by every layer, so padded rows stay zero), through
the same ``attend`` as the padded forward. ``cls_only``: the last layer computes the [CLS] rows alone."""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import nn

from pyterrier_tite.models.fused_linear import gemm_rows, in_autocast_dtype, linear_gelu
from pyterrier_tite.models.packing import PackedLayout


@dataclass
class Segments:
    """Hidden states of [CLS], query and doc. ``query`` is [Q, Lq, H] shared via ``query_index`` [N], or [N, Lq, H]
    per pair (``query_index`` None). Lengths count real tokens, [SEP] included."""

    cls: torch.Tensor
    query: torch.Tensor
    doc: torch.Tensor
    query_lengths: torch.Tensor
    doc_lengths: torch.Tensor
    query_index: torch.Tensor | None

    def replace(self, cls: torch.Tensor, query: torch.Tensor, doc: torch.Tensor) -> Segments:
        return Segments(cls, query, doc, self.query_lengths, self.doc_lengths, self.query_index)


def packed_applies(model: nn.Module) -> bool:
    """Inference on the CPU (GPUs keep static shapes for their graphs)."""
    if model.training or torch.is_grad_enabled():
        return False
    return next(model.parameters()).device.type == "cpu"


def packed_forward(model: nn.Module, s: Segments, cls_only: bool) -> Segments | torch.Tensor:
    """Final segments (doc padded back with zero rows), or the final [CLS] states ``[B, 1, H]`` (``cls_only``)."""
    s = s.replace(*(in_autocast_dtype(x) for x in (s.cls, s.query, s.doc)))
    docs = PackedLayout.from_lengths(s.doc_lengths, s.doc.device)
    docs = replace(docs, scratch=gemm_rows(docs.total, s.doc) - docs.total)  # a few oneDNN shapes (PackedLayout)
    doc = docs.unpad(s.doc[:, : docs.max_len])
    buffers: dict[int, torch.Tensor] = {}  # the padded doc Q|K|V (and K|V) of attention, reused by every layer
    layers = model.encoder.layer
    for i, layer in enumerate(layers):
        attn = layer.attention.self
        if cls_only and i == len(layers) - 1:
            key, value = docs.padded_heads(attn.project(doc, "kv"), 2, attn.heads, buffers)
            cls, _, _ = attn.attend(s, (None, key, value), cls_only=True)
            cls = layer.attention.output(cls, s.cls)
            return layer.output(linear_gelu(layer.intermediate.dense, layer.intermediate.act, cls), cls)
        cls, query, attended = attn.attend(s, docs.padded_heads(attn.project(doc, "qkv"), 3, attn.heads, buffers))
        out = layer.attention.output
        cls, query, doc = out(cls, s.cls), out(query, s.query), out(docs.unpad(attended), doc)
        cls, query, doc = (layer.output(linear_gelu(layer.intermediate.dense, layer.intermediate.act, x), x)
                           for x in (cls, query, doc))  # fmt: skip
        s = s.replace(cls, query, doc)
    return s.replace(s.cls, s.query, docs.pad(doc))
