"""Index builds for the batch commands: all or nothing, optionally over several processes.

- :func:`staged_build`: a build happens in a hidden sibling of the target that is renamed into place when it is
  complete; ``overwrite`` swaps an existing target only then (an interrupted rebuild keeps the old index), and
  leftovers of builds whose process died (``kill -9``) are removed before a new build starts.
- :func:`checked_documents`: a corpus stream with ids as single-token ``str``, unique, and text present.
- :func:`encode_in_order`: documents encoded in chunks; under ``torchrun`` each rank encodes every ``world_size``-th
  document of a chunk (strided) and rank 0 receives the results in corpus order, so the index it writes is the one a
  single process writes (same docnos in the same order, vectors equal up to batching round-off).
- :func:`build_flex_index`: a dense model's ``pyterrier_dr.FlexIndex`` (written by FlexIndex's own indexer).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from pyterrier_tite.pt.validation import checked_id, checked_text


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_builds(path: str | os.PathLike) -> list[Path]:
    """Remove hidden ``.NAME.building-PID`` / ``.NAME.replaced-PID`` siblings of ``path`` whose process is gone
    (a build killed without clean-up); returns what was removed. Builds of running processes are left alone."""
    final = Path(path)
    removed = []
    if not final.parent.is_dir():
        return removed
    for sibling in final.parent.glob(f".{final.name}.*-*"):
        kind, _, pid = sibling.name[len(final.name) + 2 :].rpartition("-")
        if kind in ("building", "replaced") and pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(sibling, ignore_errors=True)
            removed.append(sibling)
    return removed


def refuse_existing(path: str | os.PathLike, overwrite: bool, flag: str = "--overwrite") -> None:
    """A clear error when ``path`` exists and may not be replaced."""
    if os.path.lexists(path) and not overwrite:
        raise FileExistsError(f"{path} already exists; pass {flag} to replace it (or choose another path)")


@contextmanager
def staged_build(path: str | os.PathLike, overwrite: bool = False) -> Iterator[Path]:
    """Yields a fresh, not yet existing sibling path to build into; when the block succeeds it becomes ``path``
    (an existing ``path`` is replaced only then, and only with ``overwrite``); when anything leaves the block
    (an error, Ctrl-C) the partial build is removed and ``path`` is untouched."""
    final = Path(path)
    refuse_existing(final, overwrite)
    final.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_builds(final)
    staging = final.with_name(f".{final.name}.building-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        yield staging
        if not staging.exists():
            raise RuntimeError(f"the build of {final} produced nothing")
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    old = final.with_name(f".{final.name}.replaced-{os.getpid()}")
    if os.path.lexists(final):
        refuse_existing(final, overwrite)  # someone else created it meanwhile
        os.rename(final, old)
    os.rename(staging, final)
    shutil.rmtree(old, ignore_errors=True)


def checked_documents(corpus: Iterable[dict], text_field: str = "text") -> Iterator[dict]:
    """``{docno, text}`` dicts with ids as single-token ``str`` (integers accepted), each docno once, and text
    present (None/NaN refused by docno; an empty text is a document with no words)."""
    seen: set[str] = set()
    for number, doc in enumerate(corpus, 1):
        if not isinstance(doc, dict) or "docno" not in doc:
            raise ValueError(f"document {number} of the corpus has no docno")
        docno = checked_id(doc["docno"], f"docno (document {number})")
        if docno in seen:
            raise ValueError(f"duplicate docno {docno!r} in the corpus (document {number})")
        seen.add(docno)
        if text_field not in doc:
            raise KeyError(f"document {docno!r} has no {text_field!r} field; it has {sorted(doc)}")
        yield {"docno": docno, "text": checked_text(doc[text_field], text_field, f"docno {docno!r}")}


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
    nothing (see :func:`staged_build`). Sharded when ``world_size > 1``: every rank calls this with the same corpus;
    rank 0 writes the index and returns it, the others return None. ``finalize(staging)`` adds files to the
    complete index before it is renamed into place."""
    docs = checked_documents(corpus)
    if rank == 0 and progress:
        import pyterrier as pt

        docs = pt.tqdm(docs, desc=progress, unit="doc")
    encoded = encode_in_order(docs, dense_encoder(model, batch_size), chunk_size, rank, world_size)
    if rank != 0:
        for _ in encoded:  # takes part in every gather
            pass
        return None
    with staged_build(path, overwrite) as staging:
        write_flex_index(encoded, staging)
        if finalize is not None:
            finalize(staging)
    from pyterrier_dr import FlexIndex

    return FlexIndex(str(path))
