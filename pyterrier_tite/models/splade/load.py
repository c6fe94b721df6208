"""The SPLADE family's loader: an MLM checkpoint with its tokenizer, or a query / doc pair of them (two names, or a
saved pair whose ``pt_meta.json`` names its two sub-folders)."""

from __future__ import annotations

import os

from pyterrier_tite.models.checkpoint import Checkpoint, Loaded, load_tokenizer, open_checkpoint
from pyterrier_tite.models.splade.modeling import SpladeEncoder, SpladePair

Name = str | os.PathLike | Checkpoint


def _name(path_or_id: Name) -> str:
    return path_or_id.name if isinstance(path_or_id, Checkpoint) else os.fspath(path_or_id)


def _side(path_or_id: Name, new_head: bool) -> tuple[SpladeEncoder, object]:
    """One MLM and its tokenizer, the checkpoint opened once."""
    checkpoint = open_checkpoint(path_or_id, "splade")
    return SpladeEncoder.from_pretrained(checkpoint, new_head=new_head), load_tokenizer(checkpoint)


def load(path_or_id: Name | None = None, *, query: Name | None = None, doc: Name | None = None,
         new_head: bool = False) -> Loaded:  # fmt: skip
    """A :class:`SpladeEncoder` or a :class:`SpladePair`, the documents' tokenizer and ``settings``:
    ``query_tokenizer`` (a pair's, else None) and ``name`` (the name given, ``query=..., doc=...`` for two).
    ``new_head``: a missing MLM head starts fresh, with one warning. A path, or both ``query`` and ``doc``."""
    if (path_or_id is None) == (query is None and doc is None) or (query is None) != (doc is None):
        raise TypeError("Splade.from_pretrained takes a path, or both query= and doc=, not a mix")
    name = f"query={_name(query)}, doc={_name(doc)}" if path_or_id is None else _name(path_or_id)
    if path_or_id is not None:
        checkpoint = open_checkpoint(path_or_id, "splade")
        pair = checkpoint.meta.get("pair")
        if not pair:
            encoder, tokenizer = _side(checkpoint, new_head)
            return Loaded(encoder, tokenizer, {"query_tokenizer": None, "name": name}, checkpoint.folder)
        query, doc = (os.path.join(checkpoint.folder, pair[role]) for role in ("query", "doc"))
    query_encoder, query_tokenizer = _side(query, new_head)
    doc_encoder, doc_tokenizer = _side(doc, new_head)
    settings = {"query_tokenizer": query_tokenizer, "name": name}
    return Loaded(SpladePair(query_encoder, doc_encoder), doc_tokenizer, settings, None)
