"""Readers of checkpoint layouts other than our own (reference pre-training, Lightning IR, pyserini, dhr, released
configs), one module per family, on top of :mod:`~pyterrier_tite.convert.checkpoint` (hub ids, strict loading)."""

from pyterrier_tite.convert.checkpoint import (
    CheckpointError,
    load_exactly,
    local_checkpoint,
    read_config,
    read_json,
    read_state_dict,
    strict_from_pretrained,
)

__all__ = [
    "CheckpointError",
    "load_exactly",
    "local_checkpoint",
    "read_config",
    "read_json",
    "read_state_dict",
    "strict_from_pretrained",
]
