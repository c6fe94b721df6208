"""Index builds for the batch commands: all or nothing, optionally over several processes.

- builds happen in a hidden sibling of the target renamed into place when complete (``index_build.atomic_build``),
  complete; ``overwrite`` swaps an existing target only then (an interrupted rebuild keeps the old index), and
  leftovers of builds whose process died (``kill -9``) are removed before a new build starts.
- :func:`checked_documents`: a corpus stream with ids as single-token ``str``, unique, and text present.
- :func:`encode_in_order`: documents encoded in chunks; under ``torchrun`` each rank encodes every ``world_size``-th
  document of a chunk (strided) and rank 0 receives the results in corpus order, so the index it writes is the one a
  single process writes (same docnos in the same order, vectors equal up to batching round-off).
- :func:`build_flex_index`: a dense model's ``pyterrier_dr.FlexIndex`` (written by FlexIndex's own indexer).
- :func:`dense_retriever`: retrieval from it, ``k`` cut to its size and one scalar row per result even for ``k=1``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import numpy as np
import pyterrier as pt

from pyterrier_tite.pt.index_build import atomic_build, checked_corpus


def checked_documents(corpus: Iterable[dict], text_field: str = "text") -> Iterator[dict]:
    """``{docno, text}`` dicts of a corpus checked by the one rule of index builds (:func:`checked_corpus`)."""
    for doc in checked_corpus(corpus, [text_field]):
        yield {"docno": doc["docno"], "text": doc[text_field]}


def encode_in_order(
    docs: Iterable[dict],
    encode: Callable[[list[str]], object],
    chunk_size: int = 1024,
    rank: int = 0,
    world_size: int = 1,
) -> Iterator[tuple[str, object]]:
    """``(docno, encoding)`` in corpus order, where ``encode(texts)`` returns one encoding per text (an array's rows
    or a list). With ``world_size > 1`` (an initialised ``torch.distributed`` group) every rank must iterate the same
    ``docs``: rank ``r`` encodes documents ``r, r + world_size, ...`` of each chunk of ``chunk_size * world_size``
    documents, and rank 0 gathers them and yields all of them; the other ranks yield nothing."""
    from more_itertools import chunked

    for chunk in chunked(docs, chunk_size * world_size):
        mine = chunk[rank::world_size]
        encoded = list(encode([d["text"] for d in mine])) if mine else []
        if len(encoded) != len(mine):
            raise RuntimeError(f"the encoder returned {len(encoded)} encodings for {len(mine)} documents")
        if world_size == 1:
            yield from zip((d["docno"] for d in chunk), encoded, strict=True)
            continue
        import torch.distributed as dist

        gathered = [None] * world_size if rank == 0 else None
        dist.gather_object(encoded, gathered, dst=0)
        if rank != 0:
            continue
        for position, doc in enumerate(chunk):
            yield doc["docno"], gathered[position % world_size][position // world_size]


def dense_encoder(model, batch_size: int | None = None) -> Callable[[list[str]], np.ndarray]:
    """Texts -> float32 ``[N, D]`` with a ``pyterrier_dr.BiEncoder``'s ``encode_docs``."""

    def encode(texts: list[str]) -> np.ndarray:
        vectors = np.asarray(model.encode_docs(texts, batch_size=batch_size or model.batch_size), dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[0] != len(texts):
            raise RuntimeError(f"{model!r}.encode_docs returned shape {vectors.shape} for {len(texts)} texts")
        return vectors

    return encode


def write_flex_index(encoded: Iterable[tuple[str, np.ndarray]], path: str | os.PathLike, verbose: bool = False):
    """A ``pyterrier_dr.FlexIndex`` at the new folder ``path`` from ``(docno, vector)`` pairs (any number of
    documents from one; an empty stream is refused)."""
    from pyterrier_dr import FlexIndex

    from pyterrier_tite.pt.biencoder import write_flex_files

    Path(path).mkdir(parents=True, exist_ok=False)
    write_flex_files(Path(path), encoded)
    return FlexIndex(str(path), verbose=verbose)


def build_flex_index(
    model,
    corpus: Iterable[dict],
    path: str | os.PathLike,
    *,
    batch_size: int | None = None,
    overwrite: bool = False,
    chunk_size: int = 1024,
    rank: int = 0,
    world_size: int = 1,
    progress: str | None = None,
    finalize: Callable[[Path], None] | None = None,
):
    """Encode ``corpus`` (``{docno, text}`` dicts) with a dense bi-encoder into a FlexIndex at ``path``, all or
    nothing (``index_build.atomic_build``). Sharded when ``world_size > 1``: every rank calls this with the same corpus;
    rank 0 writes the index and returns it, the others return None. ``finalize(staging)`` adds files to the
    complete index before it is renamed into place."""
    docs = checked_documents(corpus)
    if rank == 0 and progress:
        docs = pt.tqdm(docs, desc=progress, unit="doc")
    encoded = encode_in_order(docs, dense_encoder(model, batch_size), chunk_size, rank, world_size)
    if rank != 0:
        for _ in encoded:  # takes part in every gather
            pass
        return None
    with atomic_build(path, overwrite) as staging:
        write_flex_index(encoded, staging)
        if finalize is not None:
            finalize(staging)
    from pyterrier_dr import FlexIndex

    return FlexIndex(str(path))


def dense_retriever(model, index, k: int = 1000):
    """``model.query_encoder() >>`` the top ``k`` of a FlexIndex (``index``: one or its folder) on the model's device
    (pyterrier_dr's torch retriever on a GPU, its numpy one else), ``k`` cut to the number of documents, with scalar
    cells also where each query has a single result (:class:`ScalarResults`)."""
    from pyterrier_dr import FlexIndex

    if not isinstance(index, FlexIndex):
        index = FlexIndex(str(index), verbose=False)
    k = max(1, min(int(k), len(index)))
    if str(model.device).startswith("cuda"):
        retriever = index.torch_retriever(num_results=k, device=str(model.device))
    else:
        retriever = index.np_retriever(num_results=k)
    return model.query_encoder(verbose=False) >> ScalarResults(retriever)


class ScalarResults(pt.Transformer):
    """A pyterrier_dr retriever whose result cells are scalars also when each query has a single result (``k=1``, a
    one-document index): its ``DataFrameBuilder`` keeps them as 1-element arrays then, which pandas can neither
    compare nor hash (``Invalid object type``, ``unhashable type: 'numpy.ndarray'``). ``% k`` still fuses into it."""

    COLUMNS = ("docno", "docid", "score", "rank")

    def __init__(self, retriever: pt.Transformer):
        self.retriever = retriever

    def transform(self, inp):
        out = self.retriever.transform(inp)
        arrays = [c for c in self.COLUMNS if c in out.columns and len(out) and isinstance(out[c].iloc[0], np.ndarray)]
        if not arrays:
            return out
        columns = {c: np.concatenate(out[c].to_list()) for c in arrays}
        if any(len(values) != len(out) for values in columns.values()):
            raise RuntimeError(f"{self.retriever!r} returned array cells of more than one value")
        return out.assign(**columns)

    def fuse_rank_cutoff(self, k: int):
        fuse = getattr(self.retriever, "fuse_rank_cutoff", None)
        fused = fuse(k) if fuse is not None else None
        return None if fused is None else ScalarResults(fused)

    def __eq__(self, other) -> bool:
        return type(other) is type(self) and other.retriever == self.retriever

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.retriever))

    def __repr__(self) -> str:
        return f"ScalarResults({self.retriever!r})"
