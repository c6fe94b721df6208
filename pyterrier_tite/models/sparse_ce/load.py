"""The sparse cross-encoder's loader: a folder or hub id -> :class:`SparseCrossEncoder`, its tokenizer and the input
caps the checkpoint stands for (the rerankers load through ``cross_encoder.load``, which adds the score head)."""

from __future__ import annotations

import os

from pyterrier_tite.models.checkpoint import Checkpoint, Loaded, load_tokenizer, open_checkpoint
from pyterrier_tite.models.sparse_ce.convert import stored_lengths
from pyterrier_tite.models.sparse_ce.modeling import load_sparse_cross_encoder
from pyterrier_tite.models.sparse_ce.tokenization import special_ids


def load(path_or_id: str | os.PathLike | Checkpoint, tokenizer=None, **overrides) -> Loaded:
    """Loaded exactly (a plain BERT converts, its new score head said in a warning); ``overrides``: config fields.
    ``tokenizer``: default the folder's; special ids the config lacks come from it."""
    checkpoint = open_checkpoint(path_or_id, "cross-encoder")
    tokenizer = load_tokenizer(checkpoint) if tokenizer is None else tokenizer
    module = load_sparse_cross_encoder(checkpoint, special_ids(tokenizer), **overrides)
    return Loaded(module, tokenizer, stored_lengths(checkpoint), os.path.realpath(checkpoint.folder))
