"""PISA index builds, all or nothing (built beside the target, checked, renamed into place), one per kind:

- :func:`build_pisa_index`: text (BM25), PISA's indexer in a child process, so its aborts are errors;
- :func:`build_toks_index`: learned-sparse ``toks`` (SPLADE), the one SPLADE -> PISA writer, optionally sharded over
  ``torchrun`` ranks; the encoder is passed in, so this floor knows no model;
- :func:`pisa_index`: a collection's text index, built once into the cache and shared by processes.

Quantisation for PISA is decided here and only here (:data:`PISA_SCALE`): PISA stores ``int(w * scale)`` per posting
and repeats each query term ``int(w * toks_scale)`` times, so its score is ``sum_t int(100 q_t) * int(100 d_t)``.
"""

from __future__ import annotations

import errno
import itertools
import json
import os
import re
import signal
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

from pyterrier_tite.store.atomic import atomic_build
from pyterrier_tite.store.cache import cache_dir, cache_lock, slug
from pyterrier_tite.store.corpus import GuardedCorpus, checked_corpus, known_size
from pyterrier_tite.store.locks import WriteFailedError, write_failure
from pyterrier_tite.store.native_output import native_output_silenced
from pyterrier_tite.store.pisa_files import check_built_pisa, check_pisa_index
from pyterrier_tite.store.sharding import SINGLE, Shard, encode_in_order
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
    """Build a PISA index of ``corpus`` at ``path``, all or nothing: ``index(staging_folder, documents)`` runs the
    engine (a text or a ``toks`` indexer) on the validated documents (see :class:`GuardedCorpus`, which checks
    ``fields``) in a sibling that is renamed to ``path`` when complete; a corpus error or Ctrl-C leaves no ``path``.
    PISA does not check its own writes: the finished files are checked (:func:`check_built_pisa`) before the rename.
    PISA's native logging is silenced; ``progress`` labels a progress bar over the documents (none when None).
    ``finalize(staging)`` adds files (an index record, a model) to the checked index before the rename."""
    import pyterrier as pt

    with atomic_build(path, overwrite) as staging, native_output_silenced():  # the bar is made inside: it must
        if progress:  # reach the terminal; a known corpus size gives it an ETA
            corpus = pt.tqdm(corpus, desc=progress, unit="doc", total=known_size(corpus))
        guarded = GuardedCorpus(corpus, fields)
        docs = iter(guarded)
        first = next(docs, None)
        if first is None:  # an error in the first document, or no documents: PISA would fail obscurely
            guarded.raise_if_failed()
        index(staging, itertools.chain([first], docs))
        guarded.raise_if_failed()
        check_built_pisa(staging, path, guarded.count)
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
    """Index ``corpus`` (dicts with docno + ``fields``) into a new PISA index at ``path``, all or nothing: built
    beside ``path`` and renamed when complete; a corpus error, Ctrl-C or a write that fails (PISA's, checked after
    the build: a full disk, ``ulimit -f``) leaves no ``path`` behind. ``progress``: the label of a progress bar (none
    when None). PISA runs in a child process (:func:`pisa_text_index`). ``finalize(staging)`` adds files to the
    complete index before it is renamed into place."""
    text_field = list(fields) if len(fields) > 1 else fields[0]

    def index(staging, docs) -> None:
        pisa_text_index(staging, docs, text_field, stemmer=stemmer, threads=threads)

    build_pisa(corpus, path, fields, index, progress=progress, overwrite=overwrite, finalize=finalize)


def pisa_text_index(folder, docs, text_field, stemmer: str = "porter2", threads: int = 1, batch_size: int = 100_000):
    """What ``PisaIndex(folder, text_field=..., stemmer=...).index(docs)`` does, with PISA in a child process that
    reads the documents from a named pipe this thread writes. PISA aborts its process when it cannot go on (a file it
    could not write in full: a full disk, ``ulimit -f``), printing its reason on its stderr only; the child's death is
    a :class:`~pyterrier_tite.store.locks.WriteFailedError` (the cause found) or a ``RuntimeError`` giving PISA's last
    message, and the caller removes the build. The child dies with this process (and on Ctrl-C)."""
    import collections
    import subprocess
    import sys
    import tempfile
    import threading

    from pyterrier_pisa import PisaStemmer, _pisathon

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    fields = [text_field] if isinstance(text_field, str) else list(text_field)
    stem = PisaStemmer(stemmer)
    with tempfile.TemporaryDirectory(prefix="pyterrier-tite-pisa-") as scratch:
        pipe = os.path.join(scratch, "documents")
        os.mkfifo(pipe)
        arguments = [_pisathon.__file__, pipe, str(folder), "" if stem == PisaStemmer.none else stem.value,
                     str(batch_size), str(threads), str(os.getpid())]  # fmt: skip
        child = subprocess.Popen([sys.executable, "-c", _PISA_CHILD, *arguments], stdin=subprocess.DEVNULL,
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
    with open(folder / "pt_meta.json", "w") as f:
        json.dump(meta, f)


def _feed(pipe: str, child, docs, fields: list[str]) -> None:
    """Write ``docs`` as PISA's ``docno text`` lines into the named pipe the child reads; stop if the child died."""
    import time

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


#: the child process of :func:`pisa_text_index`: PISA's indexer alone (its extension loaded without PyTerrier)
_PISA_CHILD = """
import ctypes, importlib.machinery, importlib.util, os, signal, sys
library, pipe, path, stemmer, batch_size, threads, parent = sys.argv[1:]
signal.signal(signal.SIGINT, signal.SIG_DFL)
try:
    ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: die with the process that started this one
except (OSError, AttributeError):
    pass
if os.getppid() != int(parent):
    sys.exit(1)
loader = importlib.machinery.ExtensionFileLoader("pyterrier_pisa._pisathon", library)
pisa = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
loader.exec_module(pisa)
pisa.index(pipe, path, stemmer, int(batch_size), int(threads))
"""


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
    """A PISA index of learned-sparse ``toks`` at ``path``, all or nothing (:func:`build_pisa`: documents checked,
    files checked, renamed when complete): ``encode(docs)`` turns a chunk of checked documents into one
    ``{term: weight}`` dict each (a SPLADE doc encoder), quantised with :data:`PISA_SCALE`. Sharded when
    ``shard.world_size > 1``: every rank calls this with the same corpus and encodes every ``world_size``-th document of
    each chunk (:func:`~pyterrier_tite.store.sharding.encode_in_order`); rank 0 writes the index and returns its
    ``PisaIndex``, the others return None. ``finalize(staging)`` adds files before the rename."""
    from pyterrier_pisa import PisaIndex

    if shard.rank != 0:
        for _ in encode_in_order(checked_corpus(corpus, [text_field]), encode, chunk_size, shard):
            pass  # takes part in every gather
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
    """The text index at ``path``, built from ``corpus()`` unless it is there (:func:`~pyterrier_tite.store.cache.
    cache_lock`: a second process building the same cache waits, then uses it), checked; returns ``path``."""
    with cache_lock(path) as missing:
        if missing:
            build_pisa_index(corpus(), path, fields, threads=threads, progress=progress)
    check_pisa_index(path)
    return path
