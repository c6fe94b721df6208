"""``BertBiEncoder``: the baseline bi-encoder over any BERT-like encoder (BERT, DistilBERT, MiniLM), pooled by its
[CLS] vector or the masked mean of all tokens, optionally L2-normalised. The shared PyTerrier side (encoders, scorer,
FlexIndex indexing, equality) is :class:`~pyterrier_tite.pt.biencoder.DenseBiEncoder`."""

from __future__ import annotations

import os
from typing import Literal

import torch

from pyterrier_tite.models.bert_biencoder.modeling import PooledEncoder
from pyterrier_tite.models.bert_biencoder.tokenization import BiEncoderInputs
from pyterrier_tite.models.checkpoint import load_tokenizer, local_checkpoint, read_meta
from pyterrier_tite.pt.biencoder import DenseBiEncoder

__all__ = ["BertBiEncoder", "DenseBiEncoder"]
#: settings of ``pt_meta.json`` that ``from_pretrained`` reads back as keyword arguments
SETTINGS = ("query_max_length", "doc_max_length", "query_marker", "doc_marker")


class BertBiEncoder(DenseBiEncoder):
    """Queries cut to ``query_max_length`` and documents to ``doc_max_length`` tokens; ``query_marker`` /
    ``doc_marker`` (e.g. ``[QUE]`` / ``[DOC]``) are prepended as single tokens after [CLS] (new tokens start from
    their name's word pieces).

    Example::

        minilm = t.BertBiEncoder.from_pretrained(resolve('minilm'))   # mean pooling + cosine, from modules.json
        pipeline = t.bm25('vaswani') % 50 >> t.datasets.get_dataset('vaswani').text_loader() >> minilm.scorer()
    """

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer,
        pooling: Literal["cls", "mean"] = "cls",
        normalize: bool = False,
        *,
        query_max_length: int = 32,
        doc_max_length: int = 256,
        query_marker: str | None = None,
        doc_marker: str | None = None,
        **kwargs,
    ):
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
        cls, path: str, pooling: Literal["cls", "mean"] | None = None, normalize: bool | None = None, **kwargs
    ) -> BertBiEncoder:
        """A folder saved by ``save_pretrained`` (settings from ``pt_meta.json``), a sentence-transformers folder
        (pooling and normalisation from its ``modules.json``, e.g. all-MiniLM-L6-v2: mean + L2 = cosine), or any
        BERT-like checkpoint (BERT, DistilBERT; [CLS], unnormalised, unless told otherwise), folder or hub id.

        Loading is exact: a tensor the encoder lacks or an unused one raises ``CheckpointError``, except the
        checkpoint's pooler and MLM head, which a bi-encoder that pools itself legitimately drops."""
        from pyterrier_tite.models.backbone import encoder_from_pretrained, sentence_transformers_settings

        folder = local_checkpoint(path)
        meta = {**sentence_transformers_settings(folder), **read_meta(folder)}
        settings = {k: meta[k] for k in SETTINGS if k in meta}
        pooling = pooling or meta.get("pooling", "cls")
        normalize = meta.get("normalize", False) if normalize is None else normalize
        model = encoder_from_pretrained(folder)
        encoder = cls(model, load_tokenizer(folder), pooling, normalize, **{**settings, **kwargs})
        encoder._loaded_from(path, os.path.realpath(folder))
        return encoder

    ARTIFACT_FORMAT = "bert-biencoder"  # pt_meta.json's format: a pt.Artifact of type "model" (pt/model_artifact.py)

    def save_pretrained(self, path: str) -> None:
        """HF layout + ``pt_meta.json`` (pooling, normalisation, lengths, markers) + model card; ``from_pretrained``
        reloads it."""
        self._save(path, "bert-biencoder")
        self._write_card(path)

    def __repr__(self) -> str:
        norm = ", normalize=True" if self.normalize else ""
        return f"BertBiEncoder({getattr(self, 'model_name', '')!r}, pooling={self.pooling!r}{norm})"
