"""Aggretriever settings that the model and the checkpoint readers share: file names of a saved folder and castorini's
vocabulary offset (the released models' slicing)."""

from __future__ import annotations

CONFIG_NAME = "aggretriever.json"
HEADS_NAME = "aggretriever_heads.safetensors"
#: the vocabulary size castorini's aggregation derives its slicing from, whatever the model's vocabulary
CASTORINI_VOCAB = 30522


def castorini_offset(width: int, vocab_size: int = CASTORINI_VOCAB) -> int:
    """castorini's vocabulary offset for slices of ``width`` ids (dhr ``cal_remove_dim``; pyserini copies it): ``k >=
    0`` drops the first ``k`` ids (BERT's [unused] block), ``k < 0`` appends ``-k`` zeros. It is computed from 30,522
    for every model, so for d = 640 (width 1,280) it always appends 198 zeros."""
    offset = vocab_size % width
    return offset - width if offset > 1000 else offset
