"""Aggretriever as a ``pyterrier_dr.BiEncoder``: FlexIndex indexing and numpy / FAISS retrieval come for free.

``model >> pyterrier_dr.FlexIndex(path)`` indexes; ``model.query_encoder() >> index.np_retriever()`` retrieves;
``model.scorer()`` re-ranks. Vectors are float32 ``[projected CLS (128) ; agg* (640)]``, scored by dot product.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable

import numpy as np
import pyterrier_dr
import torch
from more_itertools import chunked

from pyterrier_tite.devices import default_device
from pyterrier_tite.modeling.aggretriever import AggretrieverEncoder

_MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids")  # the encoder drops types its MLM lacks


class Aggretriever(pyterrier_dr.BiEncoder):
    """Dense retrieval with Aggretriever vectors over any MLM checkpoint."""

    def __init__(
        self,
        encoder: AggretrieverEncoder,
        tokenizer,
        batch_size: int = 16,
        query_max_length: int = 64,
        doc_max_length: int = 256,
        text_field: str = "text",
        device: str | torch.device | None = None,
        verbose: bool = False,
    ):
        super().__init__(batch_size=batch_size, text_field=text_field, verbose=verbose)
        self.device = default_device(device)
        self.encoder = encoder.to(self.device).eval()
        self.tokenizer = tokenizer
        self.query_max_length = query_max_length
        self.doc_max_length = doc_max_length

    @classmethod
    def from_pretrained(
        cls,
        path: str,
        agg_dim: int | None = None,
        cls_dim: int | None = None,
        new_heads: bool = False,
        query_max_length: int | None = None,
        doc_max_length: int | None = None,
        **kwargs,
    ) -> Aggretriever:
        """An Aggretriever checkpoint (folder or hub id, in our, pyserini's or dhr's layout) with its tokenizer, loaded
        exactly; text lengths come from the checkpoint (pyserini: 32 / 512) unless given. A plain MLM needs
        ``new_heads=True`` (fresh heads, with a warning)."""
        from transformers import AutoTokenizer

        from pyterrier_tite.convert.aggretriever import load_aggretriever

        loaded = load_aggretriever(path, agg_dim=agg_dim, cls_dim=cls_dim, new_heads=new_heads)
        lengths = {
            "query_max_length": query_max_length or loaded.query_max_length,
            "doc_max_length": doc_max_length or loaded.doc_max_length,
        }
        kwargs.update({k: v for k, v in lengths.items() if v is not None})
        model = cls(loaded.encoder, AutoTokenizer.from_pretrained(loaded.folder), **kwargs)
        model.model_name = path
        return model

    def save_pretrained(self, path: str) -> None:
        """Encoder (MLM + heads + settings, text lengths included) and tokenizer; ``from_pretrained(path)`` reloads
        them."""
        lengths = {"query_max_length": self.query_max_length, "doc_max_length": self.doc_max_length}
        self.encoder.save_pretrained(path, extra=lengths)
        self.tokenizer.save_pretrained(path)
        with open(os.path.join(path, "pt_meta.json"), "w") as f:  # a PyTerrier artifact as well
            json.dump({"type": "model", "format": "aggretriever", "package_hint": "pyterrier-tite"}, f)

    def __repr__(self) -> str:
        return f"Aggretriever({getattr(self, 'model_name', '')!r})"

    def encode_torch(self, texts: Iterable[str], max_length: int, batch_size: int | None = None) -> torch.Tensor:
        """Texts -> ``[N, cls_dim + agg_dim]``; keeps gradients when they are enabled (training)."""
        out = []
        for batch in chunked((str(t) for t in texts), batch_size or self.batch_size):
            inputs = self.tokenizer(batch, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
            inputs = {k: v.to(self.device) for k, v in inputs.items() if k in _MODEL_INPUTS}
            out.append(self.encoder(**inputs).vector)
        return torch.cat(out) if out else torch.zeros(0, self.encoder.dim, device=self.device)

    def encode_queries_torch(self, texts, batch_size: int | None = None) -> torch.Tensor:
        return self.encode_torch(texts, self.query_max_length, batch_size)

    def encode_docs(self, texts, batch_size: int | None = None) -> np.ndarray:
        with torch.no_grad():
            return self.encode_torch(texts, self.doc_max_length, batch_size).float().cpu().numpy()

    def encode_queries(self, texts, batch_size: int | None = None) -> np.ndarray:
        with torch.no_grad():
            return self.encode_queries_torch(texts, batch_size).float().cpu().numpy()
