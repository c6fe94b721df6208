"""The one loader of the sparse cross-encoder family: a folder or hub id -> the :class:`SparseCrossEncoder` module,
its tokenizer and the input caps the checkpoint stands for, with ``config.json`` read once. The rerankers
(``pt/rerankers.py``) load through :mod:`pyterrier_tite.models.cross_encoder.load`, which adds the score head and
builds the backbone with the same function as here (:func:`load_sparse_cross_encoder`)."""

from __future__ import annotations

import os

from pyterrier_tite.models.checkpoint import Checkpoint, Loaded, load_tokenizer, open_checkpoint
from pyterrier_tite.models.sparse_ce.convert import stored_lengths
from pyterrier_tite.models.sparse_ce.modeling import load_sparse_cross_encoder
from pyterrier_tite.models.sparse_ce.tokenization import special_ids


def load(path_or_id: str | os.PathLike | Checkpoint, tokenizer=None, **overrides) -> Loaded:
    """The sparse cross-encoder of a checkpoint, loaded exactly (a plain BERT converts, its new score head said in a
    warning); ``overrides``: config fields (``attention_window_size``, the six attention flags, ...), checked by
    :class:`~pyterrier_tite.models.sparse_ce.configuration.SparseCrossEncoderConfig`. ``tokenizer``: default the
    folder's; special ids the config lacks come from it. ``settings``: the query / doc caps (word pieces) the
    checkpoint was trained with: ``pt_meta.json``'s, the reference's for a released checkpoint, else ours."""
    checkpoint = open_checkpoint(path_or_id, "cross-encoder")
    tokenizer = load_tokenizer(checkpoint) if tokenizer is None else tokenizer
    module = load_sparse_cross_encoder(checkpoint, special_ids(tokenizer), **overrides)
    return Loaded(module, tokenizer, stored_lengths(checkpoint), os.path.realpath(checkpoint.folder))
