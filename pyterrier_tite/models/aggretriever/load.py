"""The one loader of the Aggretriever family: a folder or hub id in our, pyserini's or dhr's layout -> encoder
(loaded exactly), tokenizer and the text lengths the checkpoint stores (pyserini: 32 / 512).
``pt/aggretriever.py`` builds ``Aggretriever`` from what this returns."""

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
    """Encoder, tokenizer and ``settings`` (``query_max_length`` / ``doc_max_length`` where stored). A plain MLM
    needs ``new_heads=True`` (fresh heads, with a warning; ``source`` None: the model equals only itself)."""
    checkpoint = open_checkpoint(path_or_id, "aggretriever")
    loaded = load_aggretriever(checkpoint, agg_dim=agg_dim, cls_dim=cls_dim, new_heads=new_heads)
    loaded.tokenizer = load_tokenizer(checkpoint)
    return loaded
