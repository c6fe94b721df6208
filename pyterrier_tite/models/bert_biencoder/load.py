"""The BERT bi-encoder family's loader: a folder or hub id -> encoder (no pooler), tokenizer and the stored settings
(our ``pt_meta.json``, a sentence-transformers folder's pooling and normalisation, else [CLS], unnormalised)."""

from __future__ import annotations

import os

from pyterrier_tite.models.backbone import encoder_from_pretrained, sentence_transformers_settings
from pyterrier_tite.models.bert_biencoder.tokenization import SETTINGS
from pyterrier_tite.models.checkpoint import Checkpoint, Loaded, load_tokenizer, open_checkpoint


def load(
    path_or_id: str | os.PathLike | Checkpoint, pooling: str | None = None, normalize: bool | None = None
) -> Loaded:
    """``settings``: ``pooling``, ``normalize`` (given ones override the stored) and the stored :data:`SETTINGS`."""
    checkpoint = open_checkpoint(path_or_id, "bert-biencoder")
    folder = checkpoint.folder
    meta = {**sentence_transformers_settings(folder), **checkpoint.meta}
    settings = {k: meta[k] for k in SETTINGS if k in meta}
    settings["pooling"] = pooling or meta.get("pooling", "cls")
    settings["normalize"] = meta.get("normalize", False) if normalize is None else normalize
    return Loaded(encoder_from_pretrained(checkpoint), load_tokenizer(checkpoint), settings, os.path.realpath(folder))
