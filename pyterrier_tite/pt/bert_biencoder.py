"""``BertBiEncoder``: the baseline bi-encoder over any BERT-like encoder (BERT, DistilBERT, MiniLM), pooled by its
[CLS] vector or the masked mean of all tokens, optionally L2-normalised."""

from __future__ import annotations

import os
from typing import Literal

import torch

from pyterrier_tite.models.bert_biencoder.load import load
from pyterrier_tite.models.bert_biencoder.modeling import PooledEncoder
from pyterrier_tite.models.bert_biencoder.tokenization import BiEncoderInputs
from pyterrier_tite.models.checkpoint import Checkpoint
from pyterrier_tite.pt.biencoder import STORED, DenseBiEncoder, merged_settings
from pyterrier_tite.pt.model_artifact import opened, shown_name

__all__ = ["BertBiEncoder", "DenseBiEncoder"]

#: the BERT bi-encoder's settings where neither the call nor the checkpoint gives them
DEFAULTS = {"pooling": "cls", "normalize": False, "query_max_length": 32, "doc_max_length": 256, "query_marker": None,
            "doc_marker": None}  # fmt: skip


class BertBiEncoder(DenseBiEncoder):
    """Queries cut to ``query_max_length`` and documents to ``doc_max_length`` tokens; ``query_marker`` /
    ``doc_marker`` (e.g. ``[QUE]`` / ``[DOC]``) are prepended as single tokens after [CLS] (new tokens start from
    their name's word pieces).

    ``model``: a folder or hub id: saved by ``save_pretrained``, a sentence-transformers folder (pooling and
    normalisation from its ``modules.json``, e.g. all-MiniLM-L6-v2: mean + L2 = cosine), or any BERT-like checkpoint,
    loaded exactly but for its pooler and MLM head. A setting left :data:`~pyterrier_tite.pt.biencoder.STORED` is the
    checkpoint's, else the default in parentheses. An encoder module in memory: :meth:`from_module`.

    Example::

        minilm = t.BertBiEncoder('minilm')            # mean pooling + cosine, from modules.json
        pipeline = t.bm25('vaswani') % 50 >> t.datasets.get_dataset('vaswani').text_loader() >> minilm.scorer()
    """

    ARTIFACT_FORMAT = "bert-biencoder"  # families.py's format: pt_meta.json's, a pt.Artifact of type "model"

    PRETRAINED_POSITIONAL = ("pooling", "normalize")

    def __init__(
        self,
        model: torch.nn.Module | str | os.PathLike | Checkpoint,
        tokenizer=None,
        pooling: Literal["cls", "mean"] | str = STORED,  # ("cls")
        normalize: bool | str = STORED,  # (False)
        *,
        query_max_length: int | str = STORED,  # (32)
        doc_max_length: int | str = STORED,  # (256)
        query_marker: str | None = STORED,  # (None)
        doc_marker: str | None = STORED,  # (None)
        batch_size: int = 32,
        text_field: str = "text",
        device: str | torch.device | None = None,
        verbose: bool = False,
        dtype: torch.dtype | str | None = None,
    ):
        loaded = opened(model, tokenizer, load)
        s = merged_settings(DEFAULTS, loaded.settings, locals())
        if s["pooling"] not in ("cls", "mean"):
            raise ValueError(f"pooling must be 'cls' or 'mean', got {s['pooling']!r}")
        inputs = BiEncoderInputs(loaded.tokenizer, s["query_max_length"], s["doc_max_length"],
                                 s["query_marker"], s["doc_marker"])  # fmt: skip
        self._construct(locals(), loaded, PooledEncoder(loaded.module, inputs, s["pooling"], s["normalize"]))

    pooling = property(lambda self: self.text_encoder.pooling)
    normalize = property(lambda self: self.text_encoder.normalize)

    def settings(self) -> dict:
        return {**super().settings(), "pooling": self.pooling, "normalize": self.normalize}

    def __repr__(self) -> str:
        norm = ", normalize=True" if self.normalize else ""
        return f"BertBiEncoder({shown_name(getattr(self, 'model_name', None)) or ''!r}, pooling={self.pooling!r}{norm})"
