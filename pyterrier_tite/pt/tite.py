"""TITE as a ``pyterrier_dr.BiEncoder``: the model pools every text to one vector inside its layers, scored by dot
product. Reference conventions: marker tokens ``[QUE]`` / ``[DOC]`` first, queries cut to 32 and documents to 256
tokens (the marker included).

``TITE.from_pretrained(folder_or_hub_id)`` loads every TITE layout (``models.tite.convert``): the reference
pre-training module (``webis/tite-2-late``), Lightning IR bi-encoders (``webis/tite-2-late-msmarco``, whose stored
lengths, markers and similarity are used) and folders saved by ``save_pretrained`` (settings in ``pt_meta.json``);
explicit keyword arguments override stored settings. ``TITE.from_bert(bert_folder, ...)`` inserts pooling into a BERT
checkpoint (``tite_from_bert``) so TITE can be fine-tuned from e.g. MiniLM.

``query_model``: another bi-encoder that encodes the queries (TITE only the documents). ``distill-tite`` saves the
teacher it distilled TITE from in the checkpoint's ``query_encoder/`` folder (by default), which ``from_pretrained``
loads back: documents are encoded at TITE's speed, a query (a few tokens, one per search) by the model the index
imitates; ``from_pretrained(folder, query_model=None)`` uses TITE's own query vectors instead.
"""

from __future__ import annotations

import os

import numpy as np
import torch

from pyterrier_tite.models.bert_biencoder.modeling import PooledEncoder
from pyterrier_tite.models.bert_biencoder.tokenization import DOC_MARKER, QUERY_MARKER, BiEncoderInputs
from pyterrier_tite.models.checkpoint import Checkpoint, load_tokenizer, local_checkpoint
from pyterrier_tite.models.tite.from_bert import tite_from_bert
from pyterrier_tite.models.tite.load import load
from pyterrier_tite.models.tite.modeling import TiteModel
from pyterrier_tite.pt.bert_biencoder import BertBiEncoder
from pyterrier_tite.pt.biencoder import DenseBiEncoder
from pyterrier_tite.pt.model_artifact import is_model_name, shown_name

#: the sub-folder of a saved TITE that holds its query model, when it has one
QUERY_ENCODER_FOLDER = "query_encoder"


class TITE(DenseBiEncoder):
    """Single-vector dense retrieval with a ``TiteModel`` (its one output row per text is the vector).

    ``normalize``: L2-normalise the vectors (Lightning IR ``cosine`` similarity or normalisation), so that the dot
    product a FlexIndex retrieves with is the checkpoint's cosine score. ``query_model``: a bi-encoder of the same
    dimension that encodes the queries instead (module docstring).

    ``model``: a folder or hub id (``TITE(name, **kw)`` is ``from_pretrained(name, **kw)``) or a ``TiteModel`` with
    its ``tokenizer``.

    Example::

        tite = t.TITE('webis/tite-2-late-msmarco')
        index = pyterrier_dr.FlexIndex('vaswani.flex')
        (tite >> index).index(t.datasets.get_dataset('vaswani').get_corpus_iter())
        retriever = tite.query_encoder() >> index.np_retriever()
    """

    def __init__(
        self,
        model: TiteModel | str | os.PathLike,
        tokenizer=None,
        *,
        query_max_length: int = 32,
        doc_max_length: int = 256,
        query_marker: str | None = QUERY_MARKER,
        doc_marker: str | None = DOC_MARKER,
        normalize: bool = False,
        query_model: DenseBiEncoder | None = None,
        **kwargs,
    ):
        if is_model_name(model):
            return  # built by from_pretrained (LoadsByName)
        if tokenizer is None:
            raise ValueError("pass tokenizer= when the model is given as a module")
        longest = max(query_max_length, doc_max_length)
        if longest > model.config.max_position_embeddings:
            raise ValueError(
                f"max length {longest} exceeds the model's {model.config.max_position_embeddings} positions"
            )
        inputs = BiEncoderInputs(tokenizer, query_max_length, doc_max_length, query_marker, doc_marker)
        super().__init__(PooledEncoder(model, inputs, "single", normalize), **kwargs)
        if query_model is not None and query_model.dim != self.dim:
            raise ValueError(f"the query model's vectors have {query_model.dim} dimensions, TITE's {self.dim}")
        self.query_model = query_model

    @property
    def normalize(self) -> bool:
        return self.text_encoder.normalize

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike | Checkpoint, **kwargs) -> TITE:
        """A TITE checkpoint (folder or hub id, any layout) loaded exactly, with its own tokenizer and the settings it
        stores (Lightning IR ``config.json`` or our ``pt_meta.json``); keyword arguments override them. Another
        model type (e.g. a BERT folder) raises ``CheckpointError`` pointing to :meth:`from_bert`."""
        loaded = load(path)  # the family loader: models/tite/load.py
        settings = {**loaded.settings, **kwargs}
        query_folder = settings.pop("query_encoder", None)
        if "query_model" not in settings and query_folder:
            runtime = {k: kwargs[k] for k in ("batch_size", "device", "dtype", "verbose") if k in kwargs}
            settings["query_model"] = BertBiEncoder.from_pretrained(query_folder, **runtime)
        model = cls(loaded.module, loaded.tokenizer, **settings)
        model._loaded_from(path, loaded.source)
        return model

    @classmethod
    def from_bert(cls, bert_path: str, tite_kwargs: dict | None = None, **kwargs) -> TITE:
        """Insert pooling into a BERT or DistilBERT checkpoint (folder or hub id; ``tite_from_bert(bert_path,
        **tite_kwargs)``, loaded exactly) and wrap it.

        The BERT tokenizer keeps its [CLS] ... [SEP] template; the markers go right after [CLS] (new tokens whose
        embeddings start from their name's word pieces).
        """
        tite_kwargs = dict(tite_kwargs or {})
        folder = local_checkpoint(bert_path)
        model = cls(tite_from_bert(folder, **tite_kwargs), load_tokenizer(folder), **kwargs)
        model._loaded_from(f"tite_from_bert({bert_path!r})", ("from_bert", os.path.realpath(folder), repr(tite_kwargs)))
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

    def encode(self, texts, role: str, batch_size: int | None = None, progress: str | None = None) -> np.ndarray:
        """Queries go to the query model when there is one, documents (and queries otherwise) to TITE."""
        if role == "query" and self.query_model is not None:
            return self.query_model.encode(texts, role, batch_size or self.batch_size, progress)
        return super().encode(texts, role, batch_size, progress)

    def encoding_model(self, role: str) -> DenseBiEncoder:
        return self.query_model if role == "query" and self.query_model is not None else self

    def encode_queries_torch(self, texts, batch_size: int | None = None) -> torch.Tensor:
        if self.query_model is not None:
            return self.query_model.encode_queries_torch(texts, batch_size or self.batch_size)
        return super().encode_queries_torch(texts, batch_size)

    ARTIFACT_FORMAT = "tite"  # pt_meta.json's format: a pt.Artifact of type "model" (pt/model_artifact.py)

    def save_pretrained(self, path: str) -> None:
        """TITE checkpoint (reference ``config.json`` + safetensors) + tokenizer + ``pt_meta.json`` + model card; the
        query model, when there is one, in ``query_encoder/``."""
        self._save(path, "tite")
        if self.query_model is not None:
            self.query_model.save_pretrained(os.path.join(path, QUERY_ENCODER_FOLDER))
        self._write_card(path)

    def __repr__(self) -> str:
        queries = f", query_model={self.query_model!r}" if self.query_model is not None else ""
        return f"TITE({shown_name(getattr(self, 'model_name', None)) or ''!r}{queries})"
