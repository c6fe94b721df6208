"""Aggretriever as a ``pyterrier_dr.BiEncoder``: FlexIndex indexing and numpy / FAISS retrieval come for free.

``model >> pyterrier_dr.FlexIndex(path)`` indexes; ``model.query_encoder() >> index.np_retriever()`` retrieves;
``model.scorer()`` re-ranks. Vectors are float32 ``[projected CLS (128) ; agg* (640)]``, scored by dot product.
"""

from __future__ import annotations

import os

import torch

from pyterrier_tite.models.aggretriever.load import load
from pyterrier_tite.models.aggretriever.modeling import AggretrieverEncoder, AggretrieverTextEncoder
from pyterrier_tite.models.bert_biencoder.tokenization import BiEncoderInputs
from pyterrier_tite.models.checkpoint import Checkpoint, write_pt_meta
from pyterrier_tite.pt.biencoder import DenseBiEncoder
from pyterrier_tite.pt.model_artifact import is_model_name, shown_name


class Aggretriever(DenseBiEncoder):
    """Dense retrieval with Aggretriever vectors (aggregated MLM term weights + projected [CLS]) over any MLM
    checkpoint; ``encoder`` is the torch module: given here with its ``tokenizer``, or a folder / hub id
    (``Aggretriever(name, **kw)`` is ``from_pretrained(name, **kw)``).

    Example::

        agg = t.Aggretriever('castorini/aggretriever-cocondenser')   # pyserini / dhr layouts too
        agg >> pyterrier_dr.FlexIndex('vaswani.agg')                                 # index, then retrieve with
        agg.query_encoder() >> pyterrier_dr.FlexIndex('vaswani.agg').np_retriever()
    """

    def __init__(
        self,
        encoder: AggretrieverEncoder | str | os.PathLike,
        tokenizer=None,
        batch_size: int = 16,
        query_max_length: int = 64,
        doc_max_length: int = 256,
        text_field: str = "text",
        device: str | torch.device | None = None,
        verbose: bool = False,
        dtype: torch.dtype | str | None = None,
    ):
        if is_model_name(encoder):
            return  # built by from_pretrained (LoadsByName)
        if tokenizer is None:
            raise ValueError("pass tokenizer= when the encoder is given as a module")
        inputs = BiEncoderInputs(tokenizer, query_max_length, doc_max_length)
        text_encoder = AggretrieverTextEncoder(encoder, inputs)
        common = dict(batch_size=batch_size, text_field=text_field, device=device, verbose=verbose, dtype=dtype)
        super().__init__(text_encoder, **common)

    @property
    def encoder(self) -> AggretrieverEncoder:
        return self.model

    def settings(self) -> dict:
        """Lengths and the encoder's dims / aggregation (what decides the vectors besides the weights)."""
        return {**super().settings(), **self.encoder.settings()}

    @classmethod
    def from_pretrained(
        cls,
        path: str | os.PathLike | Checkpoint,
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
        loaded = load(path, agg_dim, cls_dim, new_heads)  # the family loader: models/aggretriever/load.py
        lengths = {"query_max_length": query_max_length, "doc_max_length": doc_max_length}
        kwargs.update({**loaded.settings, **{k: v for k, v in lengths.items() if v}})
        model = cls(loaded.module, loaded.tokenizer, **kwargs)
        model._loaded_from(path, loaded.source)  # source None: fresh heads, equal only to itself
        if loaded.source is None:
            model.fresh_weights = "Aggretriever heads"
        return model

    ARTIFACT_FORMAT = "aggretriever"  # pt_meta.json's format: a pt.Artifact of type "model" (pt/model_artifact.py)

    def save_pretrained(self, path: str) -> None:
        """Encoder (MLM + heads + settings, text lengths included), tokenizer and model card;
        ``from_pretrained(path)`` reloads them."""
        lengths = {"query_max_length": self.query_max_length, "doc_max_length": self.doc_max_length}
        self.encoder.save_pretrained(path, extra=lengths)
        self.tokenizer.save_pretrained(path)
        write_pt_meta(path, "aggretriever")
        self._write_card(path)

    def __repr__(self) -> str:
        return f"Aggretriever({shown_name(getattr(self, 'model_name', None)) or ''!r})"
