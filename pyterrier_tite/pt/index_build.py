"""Index builds that are all-or-nothing: a build happens in a hidden sibling folder that is renamed into place only when
it finished, every problem of the corpus reaches the caller (engines that read the corpus in another thread, like
PISA's, would only print it), and an index is checked before an engine that aborts on damaged files opens it."""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import shutil
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from pyterrier_tite._native_output import native_output_silenced
from pyterrier_tite.pt.locks import WriteFailedError, _alive, write_lock
from pyterrier_tite.pt.validation import checked_id, checked_text


class CorruptIndexError(OSError):
    """An index folder that is incomplete or damaged (names the file)."""


#: what builds and writes leave beside a target while they run: ``.NAME.building-PID`` (a build), nested as
#: ``..NAME.building-PID.building-PID`` (an engine building inside a build), ``.NAME.replaced-PID`` (the old copy
#: while ``overwrite`` swaps it) and ``.NAME.writing-PID`` (a run file)
_STAGING = r"(?:\.(?:building|replaced|writing)-(\d+))"


def _staging_pids(name: str, target: str) -> list[int] | None:
    """The pids in ``name`` when it is a staging name of ``target`` (see :data:`_STAGING`), else None."""
    match = re.fullmatch(rf"\.+{re.escape(target)}((?:{_STAGING})+)", name)
    return [int(pid) for pid in re.findall(_STAGING, match.group(1))] if match else None


def remove_stale_builds(path: str | os.PathLike, holding_lock: bool = False) -> list[Path]:
    """Remove what builds and writes of ``path`` left beside it when their process died (see :data:`_STAGING`, nested
    staging folders included); returns what was removed. Those of running processes are left alone, unless the
    caller holds ``path``'s write lock (``holding_lock``: then only this process's own are kept)."""
    final = Path(path)
    removed: list[Path] = []
    if not final.parent.is_dir():
        return removed
    for sibling in final.parent.iterdir():
        pids = _staging_pids(sibling.name, final.name)
        if not pids or os.getpid() in pids or (not holding_lock and all(_alive(pid) for pid in pids)):
            continue
        _remove(sibling)
        removed.append(sibling)
    return removed


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def _own_staging(path: Path) -> bool:
    """``path`` is a staging folder of this process (an engine's all-or-nothing build inside one of ours)."""
    return re.fullmatch(rf"\..+\.building-{os.getpid()}", path.name) is not None


def refuse_existing(path: str | os.PathLike, overwrite: bool, flag: str = "--overwrite") -> None:
    """A clear error when ``path`` exists and may not be replaced."""
    if os.path.lexists(path) and not overwrite:
        raise FileExistsError(f"{path} already exists; pass {flag} to replace it (or choose another path)")


@contextmanager
def atomic_build(path: str | os.PathLike, overwrite: bool = False) -> Iterator[Path]:
    """Yields a fresh hidden sibling of ``path`` to build into; renames it to ``path`` when the block succeeds and
    removes it when anything (an error, Ctrl-C) leaves the block, so ``path`` is either complete or absent.
    ``overwrite=True`` replaces an existing ``path``, only once the new build is complete. The build holds ``path``'s
    write lock (:func:`~pyterrier_tite.pt.locks.write_lock`): a second build of the same path fails at once naming
    this process, and what dead builds left beside ``path`` is removed. A write that fails for want of room (a full
    disk, ``ulimit -f``) is a :class:`~pyterrier_tite.pt.locks.WriteFailedError` naming ``path`` and the cause."""
    final = Path(path)
    nested = _own_staging(final)  # an engine's build inside ours: our lock covers it
    with contextlib.nullcontext() if nested else write_lock(final):
        if final.exists() and not overwrite:
            raise FileExistsError(f"{final} already exists; remove it (or choose another path) to build it again")
        final.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_builds(final, holding_lock=not nested)
        staging = final.with_name(f".{final.name}.building-{os.getpid()}")
        shutil.rmtree(staging, ignore_errors=True)
        try:
            yield staging
            if not staging.exists():
                raise RuntimeError(f"the build of {final} produced nothing")
            _swap_into_place(staging, final, overwrite)
        except OSError as exc:
            reason = _want_of_room(exc, staging)
            _remove(staging)
            if reason is None:
                raise
            error = WriteFailedError(f"cannot build {final}: {reason}; nothing was written to {final}")
            error.reason = reason  # the outermost build names its own target
            raise error from exc
        except BaseException:
            _remove(staging)
            raise


def _want_of_room(exc: OSError, staging: Path) -> str | None:
    """Why a build's write failed for want of room (``No space left on device`` / ``File too large``, naming the
    file), None for other errors (they pass through unchanged)."""
    from pyterrier_tite.pt.locks import NO_ROOM, write_failure

    if isinstance(exc, WriteFailedError):
        return getattr(exc, "reason", None) or str(exc)
    if exc.errno not in NO_ROOM:
        return None
    cause = write_failure(None, staging) or write_failure(exc)  # the file at the size limit, if one is
    return f"{cause} ({exc.filename})" if exc.filename and str(exc.filename) not in cause else cause


def _swap_into_place(staging: Path, final: Path, overwrite: bool) -> None:
    if final.exists() and not overwrite:  # written meanwhile by a process that took no lock: keep theirs, say so
        raise FileExistsError(f"{final} was created by another process during this build; this build was discarded")
    if os.path.lexists(final):
        replaced = final.with_name(f".{final.name}.replaced-{os.getpid()}")
        os.rename(final, replaced)
        os.rename(staging, final)
        _remove(replaced)
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
    PISA does not check its own writes: the finished files are checked (:func:`check_built_pisa`) before the rename.
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
        check_built_pisa(staging, path, guarded.count)


def check_built_pisa(folder: str | os.PathLike, target: str | os.PathLike, count: int | None = None) -> None:
    """A freshly built PISA index in ``folder`` (to become ``target``) is whole: :func:`check_pisa_index`, plus what
    only a build can cut short unnoticed (PISA writes without checking: a full disk or ``ulimit -f`` leaves short
    files and exit code 0): ``count`` documents, one term of ``fwd.terms`` per lexicon entry, one posting list per
    term. Else a :class:`~pyterrier_tite.pt.locks.WriteFailedError` naming the file and, where known, the cause."""
    from pyterrier_tite.pt.locks import WriteFailedError, write_failure

    folder = Path(folder)
    try:
        check_pisa_index(folder)
        terms = int(np.fromfile(folder / "fwd.termlex", dtype=np.uint64, count=1)[0])
        with open(folder / "fwd.terms", "rb") as f:
            lines = sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))
        if lines != terms:
            raise CorruptIndexError(f"PISA index {folder}: fwd.terms lists {lines} terms for {terms} in fwd.termlex")
        lists = _posting_lists(folder / "inv.docs")
        if lists != terms:
            raise CorruptIndexError(f"PISA index {folder}: inv.docs holds {lists} posting lists for {terms} terms")
        documents = int(np.fromfile(folder / "inv.docs", dtype=np.uint32, count=2)[1])
        if count is not None and documents != count:
            raise CorruptIndexError(f"PISA index {folder}: {documents} documents indexed of {count} given")
    except (CorruptIndexError, OSError, IndexError) as exc:
        cause = write_failure(None, folder) or "a file was cut short (a full disk or a file-size limit?)"
        detail = str(exc).removeprefix(f"PISA index {folder}: ").removesuffix("; rebuild the index")
        error = WriteFailedError(f"the PISA index built for {target} is incomplete: {cause}; {detail}")
        error.reason = f"{cause}; the index PISA wrote is incomplete ({detail})"
        raise error from exc


def _posting_lists(file: Path) -> int:
    """The number of posting lists (``[n][n doc ids]`` each, after the ``[1][documents]`` header) of ``inv.docs``;
    a list cut short raises :class:`CorruptIndexError`."""
    data = np.memmap(file, dtype=np.uint32, mode="r") if file.stat().st_size >= 8 else np.zeros(0, np.uint32)
    position, lists, size = 2, 0, len(data)
    while position < size:
        position += int(data[position]) + 1
        lists += 1
    del data
    if position != size:
        raise CorruptIndexError(f"PISA index {file.parent}: inv.docs ends inside a posting list")
    return lists


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


def _expect_size(file: Path, size: int) -> None:
    if file.stat().st_size != size:
        actual = file.stat().st_size
        raise CorruptIndexError(f"PISA index {file.parent}: {file.name} has {actual} bytes, expected {size}")
