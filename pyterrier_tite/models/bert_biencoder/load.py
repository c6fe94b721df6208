"""The one loader of the BERT bi-encoder family: a folder or hub id -> encoder (``AutoModel`` without pooler, loaded
exactly), tokenizer and the settings the checkpoint stores: ``pt_meta.json`` of our saves, a sentence-transformers
folder's pooling and normalisation (``modules.json``), else [CLS] pooling, unnormalised. ``pt/bert_biencoder.py``
builds ``BertBiEncoder`` from what this returns."""

from __future__ import annotations

import os

from pyterrier_tite.models.backbone import encoder_from_pretrained, sentence_transformers_settings
from pyterrier_tite.models.checkpoint import Checkpoint, Loaded, load_tokenizer, open_checkpoint

#: settings of ``pt_meta.json`` that a bi-encoder reads back as keyword arguments (TITE's too)
SETTINGS = ("query_max_length", "doc_max_length", "query_marker", "doc_marker")


def load(
    path_or_id: str | os.PathLike | Checkpoint, pooling: str | None = None, normalize: bool | None = None
) -> Loaded:
    """Encoder, tokenizer and ``settings`` (``pooling``, ``normalize`` and the stored lengths / markers of
    :data:`SETTINGS`); ``pooling`` / ``normalize`` given override the stored ones."""
    checkpoint = open_checkpoint(path_or_id, "bert-biencoder")
    folder = checkpoint.folder
    meta = {**sentence_transformers_settings(folder), **checkpoint.meta}
    settings = {k: meta[k] for k in SETTINGS if k in meta}
    settings["pooling"] = pooling or meta.get("pooling", "cls")
    settings["normalize"] = meta.get("normalize", False) if normalize is None else normalize
    return Loaded(encoder_from_pretrained(checkpoint), load_tokenizer(checkpoint), settings, os.path.realpath(folder))
