"""TITE as a ``pyterrier_dr.BiEncoder`` (:class:`TITE`)."""

from __future__ import annotations

import os

import torch

from pyterrier_tite.models.bert_biencoder.modeling import PooledEncoder
from pyterrier_tite.models.bert_biencoder.tokenization import DOC_MARKER, QUERY_MARKER, BiEncoderInputs
from pyterrier_tite.models.checkpoint import Checkpoint, load_tokenizer, open_checkpoint
from pyterrier_tite.models.tite.from_bert import tite_from_bert
from pyterrier_tite.models.tite.load import load
from pyterrier_tite.models.tite.modeling import TiteModel
from pyterrier_tite.pt.bert_biencoder import BertBiEncoder
from pyterrier_tite.pt.biencoder import STORED, DenseBiEncoder, merged_settings
from pyterrier_tite.pt.model_artifact import opened, shown_name

#: the sub-folder of a saved TITE that holds its query model, when it has one
QUERY_ENCODER_FOLDER = "query_encoder"
#: TITE's settings where neither the call nor the checkpoint gives them (the reference's conventions)
DEFAULTS = {"query_max_length": 32, "doc_max_length": 256, "query_marker": QUERY_MARKER, "doc_marker": DOC_MARKER,
            "normalize": False, "query_model": None}  # fmt: skip


class TITE(DenseBiEncoder):
    """Single-vector dense retrieval with a ``TiteModel``, which pools every text to one vector inside its layers
    (scored by dot product). Reference conventions: marker tokens ``[QUE]`` / ``[DOC]`` first, queries cut to 32 and
    documents to 256 tokens (the marker included).

    ``model``: a folder or hub id of any TITE layout (the reference pre-training module ``webis/tite-2-late``,
    Lightning IR bi-encoders such as ``webis/tite-2-late-msmarco``, folders saved by ``save_pretrained``), loaded
    exactly with its own tokenizer; a setting left :data:`~pyterrier_tite.pt.biencoder.STORED` is the checkpoint's,
    else the default in parentheses. A BERT folder raises ``CheckpointError`` pointing to :meth:`from_bert`. A
    ``TiteModel`` in memory: :meth:`from_module`.

    ``normalize``: L2-normalise the vectors (Lightning IR ``cosine``), so a FlexIndex's dot product is the
    checkpoint's cosine. ``query_model``: a bi-encoder of the same dimension that encodes the queries instead
    (``distill-tite`` saves its teacher in ``query_encoder/``, which ``TITE(folder)`` loads back); ``None``: TITE's.

    Example::

        tite = t.TITE('webis/tite-2-late-msmarco')
        index = pyterrier_dr.FlexIndex('vaswani.flex')
        (tite >> index).index(t.datasets.get_dataset('vaswani').get_corpus_iter())
        retriever = tite.query_encoder() >> index.np_retriever()
    """

    ARTIFACT_FORMAT = "tite"  # families.py's format: pt_meta.json's, a pt.Artifact of type "model"

    def __init__(
        self,
        model: str | os.PathLike | Checkpoint | TiteModel,
        tokenizer=None,
        *,
        query_max_length: int | str = STORED,  # (32)
        doc_max_length: int | str = STORED,  # (256)
        query_marker: str | None = STORED,  # ([QUE])
        doc_marker: str | None = STORED,  # ([DOC])
        normalize: bool | str = STORED,  # (False)
        query_model: DenseBiEncoder | None | str = STORED,  # (None; the saved query_encoder/)
        batch_size: int = 32,
        text_field: str = "text",
        device: str | torch.device | None = None,
        verbose: bool = False,
        dtype: torch.dtype | str | None = None,
    ):
        loaded = opened(model, tokenizer, load)
        s = merged_settings(DEFAULTS, loaded.settings, locals())
        if isinstance(query_model, str) and loaded.settings.get("query_encoder"):  # STORED: the saved query model
            runtime = dict(batch_size=batch_size, device=device, verbose=verbose, dtype=dtype)
            s["query_model"] = BertBiEncoder(loaded.settings["query_encoder"], **runtime)
        longest = max(s["query_max_length"], s["doc_max_length"])
        if longest > loaded.module.config.max_position_embeddings:
            raise ValueError(f"max length {longest} exceeds the model's {loaded.module.config.max_position_embeddings}"
                             " positions")  # fmt: skip
        inputs = BiEncoderInputs(loaded.tokenizer, s["query_max_length"], s["doc_max_length"],
                                 s["query_marker"], s["doc_marker"])  # fmt: skip
        self._construct(locals(), loaded, PooledEncoder(loaded.module, inputs, "single", s["normalize"]))
        if s["query_model"] is not None and s["query_model"].dim != self.dim:
            raise ValueError(f"the query model's vectors have {s['query_model'].dim} dimensions, TITE's {self.dim}")
        self.query_model = s["query_model"]

    normalize = property(lambda self: self.text_encoder.normalize)

    @classmethod
    def from_bert(cls, bert_path: str, tite_kwargs: dict | None = None, **kwargs) -> TITE:
        """Insert pooling into a BERT or DistilBERT checkpoint (folder or hub id; ``tite_from_bert(bert_path,
        **tite_kwargs)``) and wrap it; the markers go right after [CLS], new tokens started from their word pieces."""
        tite_kwargs = dict(tite_kwargs or {})
        folder = open_checkpoint(bert_path).folder
        model = cls.from_module(tite_from_bert(folder, **tite_kwargs), load_tokenizer(folder), **kwargs)
        model.model_name = f"tite_from_bert({bert_path!r})"
        model.source = ("from_bert", os.path.realpath(folder), repr(tite_kwargs))
        return model

    def settings(self) -> dict:
        """Lengths, markers and normalisation (``pt_meta.json``); the query model's folder when there is one."""
        settings = {**super().settings(), "normalize": self.normalize}
        if self.query_model is not None:
            settings["query_encoder"] = QUERY_ENCODER_FOLDER
        return settings

    def eq_key(self) -> tuple:
        """The document model's key and the query model's (None: TITE encodes its queries)."""
        return (*super().eq_key(), self.query_model.eq_key() if self.query_model is not None else None)

    def encoding_model(self, role: str) -> DenseBiEncoder:
        """Queries go to the query model when there is one, documents (and queries otherwise) to TITE."""
        return self.query_model if role == "query" and self.query_model is not None else self

    def _save_into(self, folder: str) -> None:
        """TITE checkpoint, tokenizer and ``pt_meta.json``; the query model, when there is one, in its sub-folder."""
        super()._save_into(folder)
        if self.query_model is not None:
            self.query_model.save_pretrained(os.path.join(folder, QUERY_ENCODER_FOLDER))

    def __repr__(self) -> str:
        queries = f", query_model={self.query_model!r}" if self.query_model is not None else ""
        return f"TITE({shown_name(getattr(self, 'model_name', None)) or ''!r}{queries})"
