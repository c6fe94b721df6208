"""Every model family in one folder each, plus what they share (checkpoints, backbones, fused and packed layers).
Tensors in, tensors out: nothing here imports PyTerrier or pandas. The names below load on first use, so importing one
family never imports the others."""

from __future__ import annotations

import importlib

_LAZY = {
    "CheckpointError": "checkpoint",
    "TiteConfig": "tite.configuration",
    "TiteModel": "tite.modeling",
    "TiteModelOutput": "tite.modeling",
    "TitePackedOutput": "tite.modeling",
    "tite_config_from_bert": "tite.from_bert",
    "tite_from_bert": "tite.from_bert",
    "SparseCrossEncoder": "sparse_ce.modeling",
    "SparseCrossEncoderConfig": "sparse_ce.configuration",
    "SparseCrossEncoderModel": "sparse_ce.modeling",
    "SparseCrossEncoderModelForSequenceClassification": "sparse_ce.modeling",
    "SparseCrossEncoderBatch": "cross_encoder.tokenization",
    "CeliHead": "cross_encoder.celi",
    "MeanPoolHead": "cross_encoder.celi",
    "PairStates": "cross_encoder.celi",
    "CrossEncoderScorer": "cross_encoder.modeling",
}
__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
