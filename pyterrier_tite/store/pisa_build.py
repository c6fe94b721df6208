"""PISA index builds, all or nothing (built beside the target, checked, renamed into place): text (PISA's indexer in
a child process, so its aborts are errors) and learned-sparse ``toks`` (the one SPLADE -> PISA writer), quantised
here only (:data:`PISA_SCALE`): PISA stores ``int(w * scale)`` per posting and repeats each query term
``int(w * toks_scale)`` times, so its score is ``sum_t int(100 q_t) * int(100 d_t)``."""

from __future__ import annotations

import collections
import errno
import functools
import json
import os
import re
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

from more_itertools import consume, countable, peekable

from pyterrier_tite.store.atomic import atomic_build
from pyterrier_tite.store.cache import cache_dir, cache_lock, slug
from pyterrier_tite.store.corpus import SINGLE, Shard, checked_corpus, encode_in_order, known_size
from pyterrier_tite.store.locks import WriteFailedError, write_failure
from pyterrier_tite.store.pisa_files import check_built_pisa, check_pisa_index, native_output_silenced, pisa_child
from pyterrier_tite.text import text_fields

#: the one quantisation factor, applied to document weights at indexing and to query weights at retrieval
PISA_SCALE = 100.0


def build_pisa(
    corpus: Iterable[dict],
    path: str | os.PathLike,
    fields: Sequence[str],
    index: Callable[[Path, Iterator[dict]], object],
    progress: str | None = None,
    overwrite: bool = False,
    finalize: Callable[[Path], None] | None = None,
) -> None:
    """Build a PISA index of ``corpus`` (checked with ``fields``) at ``path``, all or nothing: ``index(staging,
    documents)`` runs the engine; its files are checked before ``finalize(staging)`` adds files and the rename."""
    import pyterrier as pt

    with atomic_build(path, overwrite) as staging, native_output_silenced():  # the bar is made inside: it must
        if progress:  # reach the terminal; a known corpus size gives it an ETA
            corpus = pt.tqdm(corpus, desc=progress, unit="doc", total=known_size(corpus))
        counted = countable(checked_corpus(corpus, fields))
        docs = peekable(counted)
        if not docs:  # PISA would fail obscurely
            raise ValueError("the corpus is empty: nothing to index")
        index(staging, docs)
        check_built_pisa(staging, path, counted.items_seen)
        if finalize is not None:
            finalize(staging)


def build_pisa_index(
    corpus: Iterable[dict],
    path: str | os.PathLike,
    fields: Sequence[str],
    threads: int = 1,
    progress: str | None = None,
    stemmer: str = "porter2",
    overwrite: bool = False,
    finalize: Callable[[Path], None] | None = None,
) -> None:
    """Index ``corpus`` (dicts with docno + ``fields``) into a new PISA text index at ``path``, all or nothing: a
    corpus error, Ctrl-C or a failed write (a full disk, ``ulimit -f``) leaves no ``path``."""
    text_field = list(fields) if len(fields) > 1 else fields[0]
    index = functools.partial(pisa_text_index, text_field=text_field, stemmer=stemmer, threads=threads)
    build_pisa(corpus, path, fields, index, progress=progress, overwrite=overwrite, finalize=finalize)


def pisa_text_index(folder, docs, text_field, stemmer: str = "porter2", threads: int = 1, batch_size: int = 100_000):
    """``PisaIndex(folder, text_field=..., stemmer=...).index(docs)`` with PISA in a child process reading a named
    pipe, as PISA aborts its process on a failed write: the child's death is a ``WriteFailedError`` (the cause found)
    or a ``RuntimeError`` giving PISA's last message."""
    from pyterrier_pisa import PisaStemmer

    folder = Path(folder)
    fields = [text_field] if isinstance(text_field, str) else list(text_field)
    stem = PisaStemmer(stemmer)
    with tempfile.TemporaryDirectory(prefix="pyterrier-tite-pisa-") as scratch:
        pipe = os.path.join(scratch, "documents")
        os.mkfifo(pipe)
        call = (
            "pipe, path, stemmer, batch, threads = sys.argv[3:]\n"
            "pisa.index(pipe, path, stemmer, int(batch), int(threads))"
        )
        stemmed = "" if stem == PisaStemmer.none else stem.value
        child = subprocess.Popen(pisa_child(call, pipe, folder, stemmed, batch_size, threads), stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
        log: collections.deque[str] = collections.deque(maxlen=20)
        reader = threading.Thread(target=lambda: log.extend(line.decode(errors="replace") for line in child.stdout))
        reader.start()
        try:
            _feed(pipe, child, docs, fields)
            code = child.wait()
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
            reader.join()
            child.stdout.close()
    if code != 0:
        how = f"signal {signal.Signals(-code).name}" if code < 0 and -code in signal.valid_signals() else f"exit {code}"
        lines = [line.strip() for line in log if line.strip()]
        errors = [line for line in lines if "[error]" in line or "what():" in line]
        last = re.sub(r"^\[[^]]*\] \[\w+\]|^what\(\):", "", (errors or lines or ["no message"])[-1]).strip()
        cause = write_failure(None, folder)
        if not cause:
            raise RuntimeError(f"PISA failed ({how}) indexing into {folder}: {last}")
        error = WriteFailedError(f"PISA failed ({how}) indexing into {folder}: {cause}")
        error.reason = f"{cause}; PISA stopped ({how}): {last}"
        raise error
    meta = {"type": "sparse_index", "format": "pisa", "package_hint": "pyterrier-pisa", "stemmer": stem.value}
    (folder / "pt_meta.json").write_text(json.dumps(meta))


def _feed(pipe: str, child, docs, fields: list[str]) -> None:
    """Write ``docs`` as PISA's ``docno text`` lines into the named pipe the child reads; stop if the child died."""
    while True:  # a plain open waits forever for a reader that died before opening the pipe
        try:
            fd = os.open(pipe, os.O_WRONLY | os.O_NONBLOCK)
            break
        except OSError as exc:
            if exc.errno != errno.ENXIO:
                raise  # the caller stops the child
            if child.poll() is not None:
                return
            time.sleep(0.005)
    os.set_blocking(fd, True)
    try:
        with open(fd, "w", encoding="utf-8") as out:
            for doc in docs:
                text = " ".join(doc[f] for f in fields).replace("\n", " ").replace("\r", " ")
                out.write(f"{doc['docno']} {text}\n")
    except BrokenPipeError:  # the child died: its exit code tells why
        pass


def build_toks_index(
    corpus: Iterable[dict],
    path: str | os.PathLike,
    encode: Callable[[list[dict]], list[dict[str, float]]],
    *,
    text_field: str = "text",
    threads: int = 1,
    overwrite: bool = False,
    progress: str | None = None,
    chunk_size: int = 1024,
    shard: Shard = SINGLE,
    finalize: Callable[[Path], None] | None = None,
):
    """A PISA index of learned-sparse ``toks`` at ``path``, all or nothing: ``encode(docs)`` gives one ``{term:
    weight}`` dict per document of a chunk, quantised with :data:`PISA_SCALE`. Sharded, every rank calls this with
    the same corpus; rank 0 writes the index and returns its ``PisaIndex``, the others None."""
    from pyterrier_pisa import PisaIndex

    if shard.rank != 0:
        consume(encode_in_order(checked_corpus(corpus, [text_field]), encode, chunk_size, shard))  # every gather
        return None

    def index(staging: Path, docs: Iterator[dict]) -> None:
        toks = PisaIndex(str(staging), stemmer="none", threads=threads).toks_indexer(scale=PISA_SCALE, threads=threads)
        encoded = encode_in_order(docs, encode, chunk_size, shard)
        toks.index({"docno": docno, "toks": weights} for docno, weights in encoded)

    build_pisa(corpus, path, [text_field], index, progress, overwrite=overwrite, finalize=finalize)
    return PisaIndex(str(path), stemmer="none", threads=threads)


def pisa_index(dataset: str, path: str | None = None, fields: list[str] | None = None, threads: int = 1,
               verbose: bool = True):  # fmt: skip
    """The PISA text index of a collection (a ``PisaIndex``), built once (with a progress bar) and cached on disk."""
    from pyterrier_pisa import PisaIndex

    from pyterrier_tite import datasets

    dataset_id = datasets.irds_id(dataset)
    if dataset_id.startswith("msmarco-passage/"):
        raise ValueError(
            f"{dataset_id}: the local MS MARCO collection is partial, so full retrieval on it is meaningless; "
            "rerank the provided BM25 top-100 with pyterrier_tite.trec_dl_bm25('2019') instead"
        )
    fields = fields or text_fields(dataset_id)
    path = path or cache_dir("pisa", slug(dataset_id) + "." + "+".join(fields))
    progress = f"indexing {dataset_id}" if verbose else None
    cached_pisa_index(path, lambda: datasets.get_dataset(dataset_id).get_corpus_iter(verbose=False), fields, threads,
                      progress)  # fmt: skip
    return PisaIndex(path, text_field=fields if len(fields) > 1 else fields[0], threads=threads)


def cached_pisa_index(path: str, corpus: Callable[[], Iterable[dict]], fields: Sequence[str], threads: int = 1,
                      progress: str | None = None) -> str:  # fmt: skip
    """The text index at ``path``, built from ``corpus()`` unless it is there (a second builder waits), checked."""
    with cache_lock(path) as missing:
        if missing:
            build_pisa_index(corpus(), path, fields, threads=threads, progress=progress)
    check_pisa_index(path)
    return path
