"""The cross-encoder family's loader (SparseCE, MonoCE, CELI): a folder or hub id -> scorer, tokenizer and the stored
input caps and reranker class. The keyword ``w`` (the paper's) is the config's ``attention_window_size``."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from torch import nn

from pyterrier_tite.models.checkpoint import Checkpoint, Loaded, load_tokenizer, one_fresh_warning, open_checkpoint
from pyterrier_tite.models.cross_encoder.convert import (
    checkpoint_scorer,
    is_sparse_model,
    load_scorer,
    load_sequence_classifier,
    sequence_classifier,
    sparse_backbone,
    sparse_overrides,
    stored_lengths,
)
from pyterrier_tite.models.cross_encoder.modeling import CrossEncoderScorer
from pyterrier_tite.models.cross_encoder.tokenization import QUERY_MAX_LENGTH, fill_special_ids, special_ids
from pyterrier_tite.models.sparse_ce.convert import KEEP
from pyterrier_tite.models.sparse_ce.modeling import load_sparse_cross_encoder


@dataclass(frozen=True)
class Sparse:
    """A sparse backbone's settings (``SparseCE(w=..., symmetric=..., **flags)``)."""

    w: int | None | str = KEEP
    symmetric: bool | None = None
    flags: dict = field(default_factory=dict)

    def backbone_fn(self, tokenizer):
        """Folder / module -> sparse backbone; special ids the checkpoint lacks come from ``tokenizer``."""
        return lambda m: sparse_backbone(m, self.w, self.symmetric, special_ids(tokenizer), **self.flags)


def _loaded(scorer: CrossEncoderScorer, fresh: list, tokenizer, settings: dict) -> Loaded:
    """Fresh parts leave ``source`` None; a standard backbone's config gets the tokenizer's special ids."""
    if fresh:
        scorer.source = None
    if not scorer.is_sparse:
        fill_special_ids(scorer.config, tokenizer)
    return Loaded(scorer, tokenizer, settings, scorer.source)


def load(
    path_or_id: str | os.PathLike | Checkpoint,
    sparse: Sparse | None | bool = True,
    head: str | None = None,
    token_dim: int | None = None,
    tokenizer=None,
) -> Loaded:
    """A reranker checkpoint loaded exactly. ``sparse``: a :class:`Sparse`, None (a full-attention sequence
    classifier) or True (the checkpoint's kind and settings). ``tokenizer``: default the folder's. Fresh parts are
    said in one warning. ``settings``: the stored caps and ``reranker`` (the class ``pt_meta.json`` names)."""
    checkpoint = open_checkpoint(path_or_id, "cross-encoder")
    if sparse is True:
        sparse = Sparse() if is_sparse_model(checkpoint) else None
    tokenizer = load_tokenizer(checkpoint) if tokenizer is None else tokenizer
    with one_fresh_warning(checkpoint.folder) as fresh:
        if sparse is not None:
            overrides = sparse_overrides(checkpoint, sparse.w, sparse.symmetric, sparse.flags)
            backbone = load_sparse_cross_encoder(checkpoint, special_ids(tokenizer), **overrides)
        else:
            backbone = load_sequence_classifier(checkpoint)
        scorer = checkpoint_scorer(checkpoint, backbone, head, token_dim)
    settings = {**stored_lengths(checkpoint), "reranker": checkpoint.meta.get("reranker")}
    return _loaded(scorer, fresh, tokenizer, settings)


def from_module(
    model: nn.Module, tokenizer, sparse: Sparse | None, head: str | None = None, token_dim: int | None = None
) -> Loaded:
    """The same for a module in memory (a :class:`CrossEncoderScorer`, a sparse model or a BERT module): the caps
    are the package defaults."""
    backbone_fn = sparse.backbone_fn(tokenizer) if sparse is not None else sequence_classifier
    with one_fresh_warning(type(model).__name__) as fresh:
        scorer = load_scorer(model, backbone_fn, head, token_dim)
    return _loaded(scorer, fresh, tokenizer, {"query_max_length": QUERY_MAX_LENGTH, "doc_max_length": None,
                                              "reranker": None})  # fmt: skip
