"""Aggretriever as a ``pyterrier_dr.BiEncoder``: float32 vectors ``[projected CLS (128) ; agg* (640)]``, scored by
dot product."""

from __future__ import annotations

import os

import torch

from pyterrier_tite.models.aggretriever.load import load
from pyterrier_tite.models.aggretriever.modeling import AggretrieverEncoder, AggretrieverTextEncoder
from pyterrier_tite.models.bert_biencoder.tokenization import BiEncoderInputs
from pyterrier_tite.models.checkpoint import Checkpoint, write_pt_meta
from pyterrier_tite.pt.biencoder import DenseBiEncoder
from pyterrier_tite.pt.model_artifact import given_name, opened, shown_name


class Aggretriever(DenseBiEncoder):
    """Dense retrieval with Aggretriever vectors (aggregated MLM term weights + projected [CLS]) over any MLM
    checkpoint. ``encoder``: a folder or hub id in our, pyserini's or dhr's layout, loaded exactly with its tokenizer
    (text lengths from the checkpoint, pyserini: 32 / 512, unless given); a plain MLM needs ``new_heads=True`` (fresh
    heads, with a warning; ``agg_dim`` / ``cls_dim`` size them). In memory: :meth:`from_module`.

    Example::

        agg = t.Aggretriever('castorini/aggretriever-cocondenser')   # pyserini / dhr layouts too
        index = pyterrier_dr.FlexIndex('vaswani.agg')
        (agg >> index).index(t.datasets.get_dataset('vaswani').get_corpus_iter())
        retriever = agg.query_encoder() >> index.np_retriever()   # or t.load('vaswani.agg')
    """

    ARTIFACT_FORMAT = "aggretriever"  # families.py's format: pt_meta.json's, a pt.Artifact of type "model"
    RELOADS = ("agg_dim", "cls_dim", "new_heads")
    GIVEN = ("encoder", "tokenizer", "agg_dim", "cls_dim", "new_heads")

    PRETRAINED_POSITIONAL = ("agg_dim", "cls_dim", "new_heads", "query_max_length", "doc_max_length")

    def __init__(
        self,
        encoder: AggretrieverEncoder | str | os.PathLike | Checkpoint,
        tokenizer=None,
        batch_size: int = 16,
        query_max_length: int | None = None,  # the checkpoint's, else 64
        doc_max_length: int | None = None,  # the checkpoint's, else 256
        text_field: str = "text",
        device: str | torch.device | None = None,
        verbose: bool = False,
        dtype: torch.dtype | str | None = None,
        *,
        agg_dim: int | None = None,
        cls_dim: int | None = None,
        new_heads: bool = False,
    ):
        loaded = opened(encoder, tokenizer, load, agg_dim, cls_dim, new_heads)
        lengths = {"query_max_length": 64, "doc_max_length": 256, **loaded.settings}
        inputs = BiEncoderInputs(loaded.tokenizer, query_max_length or lengths["query_max_length"],
                                 doc_max_length or lengths["doc_max_length"])  # fmt: skip
        self._construct(locals(), loaded, AggretrieverTextEncoder(loaded.module, inputs))
        if given_name(encoder) is not None and loaded.source is None:  # fresh heads: equal only to itself
            self.fresh_weights = "Aggretriever heads"

    encoder = property(lambda self: self.model)  # the AggretrieverEncoder

    def settings(self) -> dict:
        """Lengths and the encoder's dims / aggregation (what decides the vectors besides the weights)."""
        return {**super().settings(), **self.encoder.settings()}

    def _save_into(self, folder: str) -> None:
        """Encoder (MLM + heads + settings, text lengths included) and tokenizer."""
        lengths = {"query_max_length": self.query_max_length, "doc_max_length": self.doc_max_length}
        self.encoder.save_pretrained(folder, extra=lengths)
        self.tokenizer.save_pretrained(folder)
        write_pt_meta(folder, self.ARTIFACT_FORMAT)

    def __repr__(self) -> str:
        return f"Aggretriever({shown_name(getattr(self, 'model_name', None)) or ''!r})"
