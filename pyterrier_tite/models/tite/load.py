"""The one loader of the TITE family: a folder or hub id of any TITE layout (reference pre-training module, Lightning
IR bi-encoder, our saves) -> ``TiteModel`` (loaded exactly), tokenizer and the bi-encoder settings the checkpoint
stores (Lightning IR ``config.json``: lengths, markers, normalisation; our ``pt_meta.json``; the folder of a saved
query model). The checkpoint is opened once and handed to each step. ``pt/tite.py`` builds ``TITE`` from it."""

from __future__ import annotations

import os

from pyterrier_tite.models.bert_biencoder.load import SETTINGS
from pyterrier_tite.models.checkpoint import Checkpoint, Loaded, load_tokenizer, open_checkpoint
from pyterrier_tite.models.tite.convert import lightning_ir_settings, load_tite_model, tite_layout
from pyterrier_tite.models.tite.modeling import TiteModel


def load(path_or_id: str | os.PathLike | Checkpoint, **overrides) -> Loaded:
    """``TiteModel``, tokenizer and ``settings``: stored lengths / markers / ``normalize`` as ``TITE`` keyword
    arguments, plus ``query_encoder`` (the folder of the saved query model) when there is one. ``overrides``: stored
    ``TiteConfig`` fields to replace. Another model type raises ``CheckpointError`` pointing to ``TITE.from_bert``."""
    checkpoint = open_checkpoint(path_or_id, "tite")
    layout = tite_layout(checkpoint.config, checkpoint.name)
    settings = lightning_ir_settings(checkpoint.config, checkpoint.name) if layout == "lightning-ir" else {}
    meta = checkpoint.meta
    settings.update({k: meta[k] for k in (*SETTINGS, "normalize") if k in meta})
    if meta.get("query_encoder"):
        settings["query_encoder"] = os.path.join(checkpoint.folder, meta["query_encoder"])
    model = load_tite_model(checkpoint, model_class=TiteModel, **overrides)
    return Loaded(model, load_tokenizer(checkpoint), settings, os.path.realpath(checkpoint.folder))
