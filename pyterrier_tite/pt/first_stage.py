"""First-stage retrievers: BM25 through PISA (no Java) and the provided TREC DL BM25 top-100 runs."""

from __future__ import annotations

import errno
import json
import os
import re
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pandas as pd
import pyterrier as pt
import pyterrier_alpha as pta
from pyterrier_pisa import PisaIndex

from pyterrier_tite import datasets
from pyterrier_tite.pt.index_build import build_pisa, check_pisa_index
from pyterrier_tite.pt.locks import write_lock
from pyterrier_tite.pt.pisa_derived import open_pisa_retriever
from pyterrier_tite.pt.validation import CheckedQueries
from pyterrier_tite.text import text_fields

#: TREC DL aliases whose provided BM25 run stands in for full retrieval (the local MS MARCO collection is partial)
TREC_DL = {"2019": "dl19", "2020": "dl20", "dl19": "dl19", "dl20": "dl20"}


def cache_dir(*parts: str) -> str:
    """Where built artefacts (indexes) are cached: ``$PYTERRIER_TITE_HOME`` or ``~/.cache/pyterrier_tite``."""
    root = os.environ.get("PYTERRIER_TITE_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "pyterrier_tite")
    return os.path.join(root, *parts)


@contextmanager
def cache_lock(path: str | os.PathLike) -> Iterator[bool]:
    """Around the build of a cached index: yields whether ``path`` is still to be built. While it is, the block holds
    its write lock, waiting for another process building the same cache (two recipes started together), which then
    finds the index built."""
    if os.path.exists(path):
        yield False
        return
    with write_lock(path, wait=True):
        yield not os.path.exists(path)


def pisa_index(
    dataset: str, path: str | None = None, fields: list[str] | None = None, threads: int = 1, verbose: bool = True
) -> PisaIndex:
    """The PISA index of a collection, built once (with a progress bar) and cached on disk."""
    dataset_id = datasets.irds_id(dataset)
    if dataset_id.startswith("msmarco-passage/"):
        raise ValueError(
            f"{dataset_id}: the local MS MARCO collection is partial, so full retrieval on it is meaningless; "
            "rerank the provided BM25 top-100 with pyterrier_tite.trec_dl_bm25('2019') instead"
        )
    fields = fields or text_fields(dataset_id)
    path = path or cache_dir("pisa", re.sub(r"[^A-Za-z0-9._-]+", "__", dataset_id) + "." + "+".join(fields))
    text_field = fields if len(fields) > 1 else fields[0]
    with cache_lock(path) as missing:
        if missing:
            corpus = datasets.get_dataset(dataset_id).get_corpus_iter(verbose=False)
            progress = f"indexing {dataset_id}" if verbose else None
            build_pisa_index(corpus, path, fields, threads=threads, progress=progress)
    check_pisa_index(path)
    return PisaIndex(path, text_field=text_field, threads=threads)


def build_pisa_index(
    corpus, path: str, fields: list[str], threads: int = 1, progress: str | None = None, stemmer: str = "porter2"
) -> None:
    """Index ``corpus`` (dicts with docno + ``fields``) into a new PISA index at ``path``, all or nothing: built
    beside ``path`` and renamed when complete; a corpus error, Ctrl-C or a write that fails (PISA's, checked after
    the build: a full disk, ``ulimit -f``) leaves no ``path`` behind. ``progress``: the label of a progress bar (none
    when None). PISA runs in a child process (:func:`pisa_text_index`)."""
    text_field = fields if len(fields) > 1 else fields[0]

    def index(staging, docs) -> None:
        pisa_text_index(staging, docs, text_field, stemmer=stemmer, threads=threads)

    build_pisa(corpus, path, fields, index, progress=progress)


def pisa_text_index(folder, docs, text_field, stemmer: str = "porter2", threads: int = 1, batch_size: int = 100_000):
    """What ``PisaIndex(folder, text_field=..., stemmer=...).index(docs)`` does, with PISA in a child process that
    reads the documents from a named pipe this thread writes. PISA aborts its process when it cannot go on (a file it
    could not write in full: a full disk, ``ulimit -f``), printing its reason on its stderr only; the child's death is
    a :class:`~pyterrier_tite.pt.locks.WriteFailedError` (the cause found) or a ``RuntimeError`` giving PISA's last
    message, and the caller removes the build. The child dies with this process (and on Ctrl-C)."""
    import collections
    import subprocess
    import sys
    import tempfile
    import threading

    from pyterrier_pisa import PisaStemmer, _pisathon

    from pyterrier_tite.pt.locks import WriteFailedError, write_failure

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


def bm25(dataset: str, k1: float = 0.9, b: float = 0.4, num_results: int = 1000, **index_args) -> pt.Transformer:
    """BM25 over a collection's cached PISA index (built on first use). No Java anywhere.

    Example::

        ds = t.datasets.get_dataset('vaswani')
        pt.Experiment([t.bm25('vaswani')], ds.get_topics(), ds.get_qrels(), ['nDCG@10'])
    """
    if datasets.irds_id(dataset).startswith("msmarco-passage/"):
        pisa_index(dataset)  # raises the explanatory error
    index = pisa_index(dataset, **index_args)
    retriever = open_pisa_retriever(index, "bm25", num_results, index.threads, k1=k1, b=b)  # PISA's faults handled
    return CheckedQueries() >> retriever  # `% k` still fuses into PISA's retriever when the pipeline is compiled


#: every msmarco-passage ID holds the same 9,658 mirrored passages (the BM25 top-100 of DL19 and DL20)
MIRRORED_PASSAGES = "msmarco-passage/trec-dl-2019/judged"


def mirrored_passages_bm25(num_results: int = 1000, k1: float = 0.9, b: float = 0.4) -> pt.Transformer:
    """BM25 over the 9,658 mirrored MS MARCO passages, for drawing *training* candidates only (e.g. for MS MARCO
    dev queries): retrieval on this partial collection is no evaluation, which is why :func:`bm25` refuses it."""
    path = cache_dir("pisa", "msmarco-passage-mirrored-9658.text")
    with cache_lock(path) as missing:
        if missing:
            corpus = datasets.get_dataset(MIRRORED_PASSAGES).get_corpus_iter(verbose=False)
            build_pisa_index(corpus, path, ["text"], progress="indexing the mirrored MS MARCO passages")
    check_pisa_index(path)
    index = PisaIndex(path, text_field="text")
    retriever = open_pisa_retriever(index, "bm25", num_results, index.threads, k1=k1, b=b)
    return CheckedQueries() >> retriever


def training_bm25(collection: str, depth: int) -> pt.Transformer:
    """BM25 top-``depth`` over a collection for training candidates: the mirrored passages for an MS MARCO ID."""
    if datasets.irds_id(collection).startswith("msmarco-passage/"):
        return mirrored_passages_bm25(num_results=depth)
    return bm25(collection, num_results=depth)


def trec_dl_bm25(year: str = "2019", text: bool = True) -> pt.Transformer:
    """The provided BM25 top-100 run of TREC DL 2019/2020 as a first stage: ``dl19 >> reranker`` works."""
    if str(year) not in TREC_DL:
        raise ValueError(f"unknown TREC DL year {year!r}; expected one of {sorted(TREC_DL)}")
    dataset = datasets.get_dataset(TREC_DL[str(year)])
    run = RunRetriever(dataset.get_results(), name=f"TREC DL {year} BM25 top-100")
    return run >> dataset.text_loader() if text else run


class RunRetriever(pt.Transformer):
    """Serves a fixed result frame as a retriever: for each input query, its rows of the run (re-ranked by score)."""

    def __init__(self, run: pd.DataFrame, name: str = "run"):
        missing = {"qid", "docno", "score"} - set(run.columns)
        if missing:
            raise ValueError(f"run is missing columns {sorted(missing)}")
        self.run = run[["qid", "docno", "score"]].assign(qid=run["qid"].astype(str), docno=run["docno"].astype(str))
        self.name = name

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        pta.validate.query_frame(inp, extra_columns=[])
        queries = inp.drop(columns=[c for c in ("docno", "score", "rank") if c in inp.columns]).drop_duplicates("qid")
        queries = queries.assign(qid=queries["qid"].astype(str))
        result = queries.merge(self.run, on="qid", how="inner")
        if result.empty:
            return pd.DataFrame(columns=[*queries.columns, "docno", "score", "rank"])
        return pt.model.add_ranks(result)

    def __repr__(self) -> str:
        return f"RunRetriever({self.name!r})"
