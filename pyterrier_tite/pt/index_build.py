"""Index builds that are all-or-nothing: a build happens in a hidden sibling folder that is renamed into place only when
it finished, every problem of the corpus reaches the caller (engines that read the corpus in another thread, like
PISA's, would only print it), and an index is checked before an engine that aborts on damaged files opens it."""

from __future__ import annotations

import fcntl
import itertools
import json
import os
import shutil
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from pyterrier_tite._native_output import native_output_silenced
from pyterrier_tite.pt.validation import checked_id, checked_text


class CorruptIndexError(OSError):
    """An index folder that is incomplete or damaged (names the file)."""


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
def atomic_build(path: str | os.PathLike, overwrite: bool = False) -> Iterator[Path]:
    """Yields a fresh hidden sibling of ``path`` to build into; renames it to ``path`` when the block succeeds and
    removes it when anything (an error, Ctrl-C) leaves the block, so ``path`` is either complete or absent.
    ``overwrite=True`` replaces an existing ``path``, only once the new build is complete."""
    final = Path(path)
    if final.exists() and not overwrite:
        raise FileExistsError(f"{final} already exists; remove it (or choose another path) to build it again")
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
    if final.exists() and not overwrite:  # another process finished the same build first: keep theirs
        shutil.rmtree(staging, ignore_errors=True)
        return
    if final.exists():
        replaced = final.with_name(f".{final.name}.replaced-{os.getpid()}")
        os.rename(final, replaced)
        os.rename(staging, final)
        shutil.rmtree(replaced, ignore_errors=True)
        return
    os.rename(staging, final)


def build_pisa(
    corpus: Iterable[dict],
    path: str | os.PathLike,
    fields: Sequence[str],
    index: Callable[[Path, Iterator[dict]], object],
    progress: str | None = None,
    overwrite: bool = False,
) -> None:
    """Build a PISA index of ``corpus`` at ``path``, all or nothing: ``index(staging_folder, documents)`` runs the
    engine (a text or a ``toks`` indexer) on the validated documents (see :class:`GuardedCorpus`, which checks
    ``fields``) in a sibling that is renamed to ``path`` when complete; a corpus error or Ctrl-C leaves no ``path``.
    PISA's native logging is silenced; ``progress`` labels a progress bar over the documents (none when None)."""
    import pyterrier as pt

    with atomic_build(path, overwrite) as staging, native_output_silenced():  # the bar is made inside: it must
        if progress:  # reach the terminal
            corpus = pt.tqdm(corpus, desc=progress, unit="doc")
        guarded = GuardedCorpus(corpus, fields)
        docs = iter(guarded)
        first = next(docs, None)
        if first is None:  # an error in the first document, or no documents: PISA would fail obscurely
            guarded.raise_if_failed()
        index(staging, itertools.chain([first], docs))
        guarded.raise_if_failed()


def checked_corpus(corpus: Iterable[dict], fields: Sequence[str]) -> Iterator[dict]:
    """The documents of an index build, checked: ``docno`` as a single-token ``str`` (integers accepted), each docno
    once, every field of ``fields`` present and not missing (None/NaN refused by docno; NUL bytes become spaces)."""
    seen: set[str] = set()
    for number, doc in enumerate(corpus, 1):
        if not isinstance(doc, dict) or "docno" not in doc:
            raise ValueError(f"document {number} of the corpus has no docno (missing docno)")
        docno = checked_id(doc["docno"], "docno")
        if docno in seen:
            raise ValueError(f"duplicate docno {docno!r} in the corpus")
        seen.add(docno)
        absent = [f for f in fields if f not in doc]
        if absent:
            raise KeyError(f"document {docno!r} lacks fields {absent}; available: {sorted(doc)}")
        yield {**doc, "docno": docno, **{f: checked_text(doc[f], f, f"docno {docno!r}") for f in fields}}


class GuardedCorpus:
    """A corpus iterator for an engine that consumes it in another thread: documents are validated (ids as ``str``,
    unique, single tokens; text fields present and not missing), and the first exception is kept for
    :meth:`raise_if_failed` instead of ending as a message printed by that thread."""

    def __init__(self, corpus: Iterable[dict], fields: Sequence[str]):
        self.corpus, self.fields = corpus, list(fields)
        self.error: BaseException | None = None
        self.count = 0

    def __iter__(self) -> Iterator[dict]:
        try:
            for doc in checked_corpus(self.corpus, self.fields):
                yield doc
                self.count += 1
        except BaseException as exc:  # noqa: B036 - kept and re-raised in the caller's thread
            self.error = exc

    def raise_if_failed(self) -> None:
        if self.error is not None:
            raise self.error
        if self.count == 0:
            raise ValueError("the corpus is empty: nothing to index")


#: files every PISA index of ours has, whatever built it (text or learned-sparse ``toks``)
PISA_FILES = ("pt_meta.json", "fwd.documents", "fwd.doclex", "fwd.terms", "fwd.termlex", "inv.docs", "inv.freqs",
              "inv.sizes")  # fmt: skip


def check_pisa_index(path: str | os.PathLike) -> None:
    """Raise :class:`CorruptIndexError` naming the file if a PISA index is incomplete or truncated (PISA itself
    aborts or segfaults on such files, killing the Python process without a message)."""
    folder = Path(path)
    for name in PISA_FILES:
        file = folder / name
        if not file.is_file() or file.stat().st_size == 0:
            raise CorruptIndexError(f"PISA index {folder}: {name} is missing or empty; rebuild the index")
    header = np.fromfile(folder / "inv.docs", dtype=np.uint32, count=2)
    if len(header) != 2 or header[0] != 1:
        raise CorruptIndexError(f"PISA index {folder}: inv.docs does not start with a document-count header")
    num_docs = int(header[1])
    _expect_size(folder / "inv.sizes", 4 * (num_docs + 1))
    _expect_size(folder / "inv.freqs", (folder / "inv.docs").stat().st_size - 8)
    with open(folder / "fwd.documents", "rb") as f:
        lines = sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))
    if lines != num_docs:
        raise CorruptIndexError(f"PISA index {folder}: fwd.documents lists {lines} docnos for {num_docs} documents")
    _check_payload_vector(folder / "fwd.doclex", num_docs)
    _check_payload_vector(folder / "fwd.termlex")


def _check_payload_vector(file: Path, count: int | None = None) -> None:
    """PISA's lexicon files (a payload vector: ``[n: u64][n + 1 offsets: u64][payloads]``, the last offset being the
    payload size) are whole and, given ``count``, hold ``count`` entries (PISA aborts without a message otherwise)."""
    size = file.stat().st_size
    header = np.fromfile(file, dtype=np.uint64, count=1)
    entries = int(header[0]) if len(header) else -1
    offsets_end = 8 * (entries + 2)
    last = np.fromfile(file, dtype=np.uint64, count=1, offset=offsets_end - 8) if 0 <= offsets_end <= size else []
    if not len(last) or offsets_end + int(last[0]) != size or (count is not None and entries != count):
        expected = "" if count is None else f" of {count} entries"
        problem = f"{file.name} is not a whole lexicon{expected}"
        raise CorruptIndexError(f"PISA index {file.parent}: {problem}; rebuild the index")


#: what PISA writes beside an index the first time a retriever opens it: block-max data ``<scorer>.q<n>.bmw.<block>``
#: and the compressed index ``<that>.<encoding>``
PISA_DERIVED = "*.bmw.*"
#: the sizes of the derived files that were written completely (name -> bytes)
PISA_DERIVED_RECORD = "pt_derived.json"
#: the lock file that serialises the opening of one index's first retrievers across processes
PISA_DERIVED_LOCK = ".pt_derived.lock"


@contextmanager
def pisa_derived_files(path: str | os.PathLike) -> Iterator[None]:
    """Wrap the opening of a PISA retriever. PISA writes its compressed index and block-max data in place when a
    retriever first opens an index and reuses any file of that name later, so a process killed meanwhile leaves a
    truncated file that every later run uses (a segfault, or silently no results). Derived files not recorded as
    complete in ``pt_derived.json`` are removed before the block, so PISA writes them again; those present after the
    block are recorded. The block holds an exclusive lock on the folder (``.pt_derived.lock``): two processes opening
    the same index at once (two recipes started together on a fresh cache) would otherwise remove or overwrite each
    other's half-written files. An index folder we may not write is left as it is (and not locked)."""
    folder = Path(path)
    record = folder / PISA_DERIVED_RECORD
    if not os.access(folder, os.W_OK):
        yield
        return
    with open(folder / PISA_DERIVED_LOCK, "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also if the block raises
        except OSError:  # a file system without locks (some network mounts): go on unlocked, as before
            pass
        try:
            complete = json.loads(record.read_text()) if record.is_file() else {}
        except ValueError:
            complete = {}
        for file in folder.glob(PISA_DERIVED):
            if not isinstance(complete, dict) or complete.get(file.name) != file.stat().st_size:
                file.unlink()
        yield
        staged = record.with_name(f".{record.name}.{os.getpid()}")
        staged.write_text(json.dumps({f.name: f.stat().st_size for f in sorted(folder.glob(PISA_DERIVED))}, indent=1))
        os.replace(staged, record)


def _expect_size(file: Path, size: int) -> None:
    if file.stat().st_size != size:
        actual = file.stat().st_size
        raise CorruptIndexError(f"PISA index {file.parent}: {file.name} has {actual} bytes, expected {size}")
