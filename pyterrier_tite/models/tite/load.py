"""The TITE family's loader: a folder or hub id of any TITE layout -> ``TiteModel``, tokenizer and the bi-encoder
settings the checkpoint stores (Lightning IR's ``config.json``, our ``pt_meta.json``)."""

from __future__ import annotations

import os

from pyterrier_tite.models.bert_biencoder.tokenization import SETTINGS
from pyterrier_tite.models.checkpoint import Checkpoint, Loaded, load_tokenizer, open_checkpoint
from pyterrier_tite.models.tite.convert import lightning_ir_settings, load_tite_model, tite_layout
from pyterrier_tite.models.tite.modeling import TiteModel


def load(path_or_id: str | os.PathLike | Checkpoint, **overrides) -> Loaded:
    """``settings``: stored lengths / markers / ``normalize`` as ``TITE`` keyword arguments, and ``query_encoder``
    (the folder of a saved query model) where there is one. ``overrides``: ``TiteConfig`` fields to replace."""
    checkpoint = open_checkpoint(path_or_id, "tite")
    layout = tite_layout(checkpoint.config, checkpoint.name)
    settings = lightning_ir_settings(checkpoint.config, checkpoint.name) if layout == "lightning-ir" else {}
    meta = checkpoint.meta
    settings.update({k: meta[k] for k in (*SETTINGS, "normalize") if k in meta})
    if meta.get("query_encoder"):
        settings["query_encoder"] = os.path.join(checkpoint.folder, meta["query_encoder"])
    model = load_tite_model(checkpoint, model_class=TiteModel, **overrides)
    return Loaded(model, load_tokenizer(checkpoint), settings, os.path.realpath(checkpoint.folder))
