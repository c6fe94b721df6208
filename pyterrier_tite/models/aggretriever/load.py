"""The Aggretriever family's loader: a folder or hub id in our, pyserini's or dhr's layout -> encoder, tokenizer and
the text lengths the checkpoint stores or its layout implies."""

from __future__ import annotations

import os

from pyterrier_tite.models.aggretriever.modeling import load_aggretriever
from pyterrier_tite.models.checkpoint import Checkpoint, Loaded, load_tokenizer, open_checkpoint


def load(
    path_or_id: str | os.PathLike | Checkpoint,
    agg_dim: int | None = None,
    cls_dim: int | None = None,
    new_heads: bool = False,
) -> Loaded:
    """A plain MLM needs ``new_heads=True`` (fresh heads, with a warning; ``source`` None)."""
    checkpoint = open_checkpoint(path_or_id, "aggretriever")
    loaded = load_aggretriever(checkpoint, agg_dim=agg_dim, cls_dim=cls_dim, new_heads=new_heads)
    loaded.tokenizer = load_tokenizer(checkpoint)
    return loaded
