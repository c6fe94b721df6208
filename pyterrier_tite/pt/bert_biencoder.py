"""``BertBiEncoder``: the baseline bi-encoder over any BERT-like encoder (BERT, DistilBERT, MiniLM), pooled by its
[CLS] vector or the masked mean of all tokens, optionally L2-normalised. The shared PyTerrier side (encoders, scorer,
FlexIndex indexing, equality) is :class:`~pyterrier_tite.pt.biencoder.DenseBiEncoder`."""

from __future__ import annotations

import os
from typing import Literal

import torch

from pyterrier_tite.models.bert_biencoder.load import SETTINGS, load
from pyterrier_tite.models.bert_biencoder.modeling import PooledEncoder
from pyterrier_tite.models.bert_biencoder.tokenization import BiEncoderInputs
from pyterrier_tite.models.checkpoint import Checkpoint
from pyterrier_tite.pt.biencoder import DenseBiEncoder
from pyterrier_tite.pt.model_artifact import is_model_name, shown_name

__all__ = ["SETTINGS", "BertBiEncoder", "DenseBiEncoder"]


class BertBiEncoder(DenseBiEncoder):
    """Queries cut to ``query_max_length`` and documents to ``doc_max_length`` tokens; ``query_marker`` /
    ``doc_marker`` (e.g. ``[QUE]`` / ``[DOC]``) are prepended as single tokens after [CLS] (new tokens start from
    their name's word pieces). ``model``: a folder or hub id (``BertBiEncoder(name, **kw)`` is
    ``from_pretrained(name, **kw)``) or an encoder module with its ``tokenizer``.

    Example::

        minilm = t.BertBiEncoder(resolve('minilm'))   # mean pooling + cosine, from modules.json
        pipeline = t.bm25('vaswani') % 50 >> t.datasets.get_dataset('vaswani').text_loader() >> minilm.scorer()
    """

    def __init__(
        self,
        model: torch.nn.Module | str | os.PathLike,
        tokenizer=None,
        pooling: Literal["cls", "mean"] = "cls",
        normalize: bool = False,
        *,
        query_max_length: int = 32,
        doc_max_length: int = 256,
        query_marker: str | None = None,
        doc_marker: str | None = None,
        **kwargs,
    ):
        if is_model_name(model):
            return  # built by from_pretrained (LoadsByName)
        if tokenizer is None:
            raise ValueError("pass tokenizer= when the model is given as a module")
        if pooling not in ("cls", "mean"):
            raise ValueError(f"pooling must be 'cls' or 'mean', got {pooling!r}")
        inputs = BiEncoderInputs(tokenizer, query_max_length, doc_max_length, query_marker, doc_marker)
        super().__init__(PooledEncoder(model, inputs, pooling, normalize), **kwargs)

    @property
    def pooling(self) -> str:
        return self.text_encoder.pooling

    @property
    def normalize(self) -> bool:
        return self.text_encoder.normalize

    def settings(self) -> dict:
        return {**super().settings(), "pooling": self.pooling, "normalize": self.normalize}

    @classmethod
    def from_pretrained(
        cls,
        path: str | os.PathLike | Checkpoint,
        pooling: Literal["cls", "mean"] | None = None,
        normalize: bool | None = None,
        **kwargs,
    ) -> BertBiEncoder:
        """A folder saved by ``save_pretrained`` (settings from ``pt_meta.json``), a sentence-transformers folder
        (pooling and normalisation from its ``modules.json``, e.g. all-MiniLM-L6-v2: mean + L2 = cosine), or any
        BERT-like checkpoint (BERT, DistilBERT; [CLS], unnormalised, unless told otherwise), folder or hub id.

        Loading is exact: a tensor the encoder lacks or an unused one raises ``CheckpointError``, except the
        checkpoint's pooler and MLM head, which a bi-encoder that pools itself legitimately drops."""
        loaded = load(path, pooling, normalize)  # the family loader: models/bert_biencoder/load.py
        encoder = cls(loaded.module, loaded.tokenizer, **{**loaded.settings, **kwargs})
        encoder._loaded_from(path, loaded.source)
        return encoder

    ARTIFACT_FORMAT = "bert-biencoder"  # pt_meta.json's format: a pt.Artifact of type "model" (pt/model_artifact.py)

    def save_pretrained(self, path: str) -> None:
        """HF layout + ``pt_meta.json`` (pooling, normalisation, lengths, markers) + model card; ``from_pretrained``
        reloads it."""
        self._save(path, "bert-biencoder")
        self._write_card(path)

    def __repr__(self) -> str:
        norm = ", normalize=True" if self.normalize else ""
        return f"BertBiEncoder({shown_name(getattr(self, 'model_name', None)) or ''!r}, pooling={self.pooling!r}{norm})"
