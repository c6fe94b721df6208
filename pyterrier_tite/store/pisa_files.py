"""PISA made safe to call: it segfaults on a truncated index and never checks its writes, so an index is checked
before PISA opens it and a fresh build before its rename; its writers run in a child process (:func:`pisa_child`), so
their aborts are errors; its C-level output is silenced (:func:`native_output_silenced`)."""

from __future__ import annotations

import contextlib
import io
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from pyterrier_tite.store.input_files import count_lines
from pyterrier_tite.store.locks import WriteFailedError, write_failure


class CorruptIndexError(OSError):
    """An index folder that is incomplete or damaged (names the file)."""


#: files every PISA index of ours has, whatever built it (text or learned-sparse ``toks``)
PISA_FILES = ("pt_meta.json", "fwd.documents", "fwd.doclex", "fwd.terms", "fwd.termlex", "inv.docs", "inv.freqs",
              "inv.sizes")  # fmt: skip


def check_pisa_index(path: str | os.PathLike) -> None:
    """Raise :class:`CorruptIndexError` naming the file if a PISA index is incomplete or truncated."""
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
    lines = count_lines(folder / "fwd.documents")
    if lines != num_docs:
        raise CorruptIndexError(f"PISA index {folder}: fwd.documents lists {lines} docnos for {num_docs} documents")
    _check_payload_vector(folder / "fwd.doclex", num_docs)
    _check_payload_vector(folder / "fwd.termlex")


def _check_payload_vector(file: Path, count: int | None = None) -> None:
    """A lexicon (``[n: u64][n + 1 offsets: u64][payloads]``) is whole (of ``count`` entries)."""
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


def check_built_pisa(folder: str | os.PathLike, target: str | os.PathLike, count: int | None = None) -> None:
    """A fresh build in ``folder`` (for ``target``) is whole, else a ``WriteFailedError`` naming file and cause: a full
    disk or ``ulimit -f`` leaves PISA short files and exit code 0, so ``count`` documents, one term per lexicon entry
    and one posting list per term are checked too."""
    folder = Path(folder)
    try:
        check_pisa_index(folder)
        terms = int(np.fromfile(folder / "fwd.termlex", dtype=np.uint64, count=1)[0])
        lines = count_lines(folder / "fwd.terms")
        if lines != terms:
            raise CorruptIndexError(f"PISA index {folder}: fwd.terms lists {lines} terms for {terms} in fwd.termlex")
        lists = _posting_lists(folder / "inv.docs")
        if lists != terms:
            raise CorruptIndexError(f"PISA index {folder}: inv.docs holds {lists} posting lists for {terms} terms")
        documents = num_documents(folder)
        if count is not None and documents != count:
            raise CorruptIndexError(f"PISA index {folder}: {documents} documents indexed of {count} given")
    except (CorruptIndexError, OSError, IndexError) as exc:
        cause = write_failure(None, folder) or "a file was cut short (a full disk or a file-size limit?)"
        detail = str(exc).removeprefix(f"PISA index {folder}: ").removesuffix("; rebuild the index")
        error = WriteFailedError(f"the PISA index built for {target} is incomplete: {cause}; {detail}")
        error.reason = f"{cause}; the index PISA wrote is incomplete ({detail})"
        raise error from exc


def _posting_lists(file: Path) -> int:
    """The posting lists (``[n][n doc ids]`` each, after the ``[1][documents]`` header) of ``inv.docs``, all whole."""
    data = np.memmap(file, dtype=np.uint32, mode="r") if file.stat().st_size >= 8 else np.zeros(0, np.uint32)
    position, lists, size = 2, 0, len(data)
    while position < size:
        position += int(data[position]) + 1
        lists += 1
    del data
    if position != size:
        raise CorruptIndexError(f"PISA index {file.parent}: inv.docs ends inside a posting list")
    return lists


def num_documents(path: str | os.PathLike) -> int:
    """The number of documents of a (checked) PISA index, from the header of ``inv.docs``."""
    return int(np.fromfile(Path(path) / "inv.docs", dtype=np.uint32, count=2)[1])


#: the start of a child process that runs PISA's extension alone, as ``pisa`` (no PyTerrier import: fast, and no files
#: of its own); it dies with the process that started it (``argv[1]``) and at once on Ctrl-C
_CHILD = """
import ctypes, importlib.machinery, importlib.util, json, os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_DFL)
try:
    ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: a writer outliving its starter would race
except (OSError, AttributeError):
    pass
if os.getppid() != int(sys.argv[1]):
    sys.exit(1)
loader = importlib.machinery.ExtensionFileLoader("pyterrier_pisa._pisathon", sys.argv[2])
pisa = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
loader.exec_module(pisa)
"""


def pisa_child(call: str, *args: object) -> list[str]:
    """The command line of a child process that runs ``call`` (Python using ``pisa`` and ``sys.argv[3:]``: ``args``
    as strings) after loading PISA's extension module alone."""
    from pyterrier_pisa import _pisathon

    return [sys.executable, "-c", _CHILD + call, str(os.getpid()), _pisathon.__file__, *map(str, args)]


#: how much of the native output a failing block attaches to its exception
TAIL_LINES = 20


@contextlib.contextmanager
def native_output_silenced(enabled: bool = True) -> Iterator[None]:
    """Within the block, fds 1 and 2 (PISA logs every percent there; ``pyterrier_pisa.log_level`` fails in 0.4.9) go
    to a temporary file, whose last lines a raised exception gets as a note, while ``sys.stdout`` / ``sys.stderr``
    still reach the terminal (through duplicated fds; in Jupyter and under pytest they are not fds 1/2)."""
    if not enabled or not _fds_open():
        yield
        return
    swap_python_streams = _python_streams_on_fds()
    sys.stdout.flush()
    sys.stderr.flush()
    saved = {fd: os.dup(fd) for fd in (1, 2)}
    py_streams = (sys.stdout, sys.stderr)
    log = tempfile.TemporaryFile()
    try:
        if swap_python_streams:
            sys.stdout = io.TextIOWrapper(os.fdopen(os.dup(saved[1]), "wb", buffering=0), write_through=True)
            sys.stderr = io.TextIOWrapper(os.fdopen(os.dup(saved[2]), "wb", buffering=0), write_through=True)
        for fd in (1, 2):
            os.dup2(log.fileno(), fd)
        yield
    except BaseException as exc:
        log.flush()
        log.seek(0)
        tail = "\n".join(log.read().decode("utf-8", "replace").splitlines()[-TAIL_LINES:])
        if tail:
            exc.add_note(f"native library output before the error (last {TAIL_LINES} lines):\n{tail}")
        raise
    finally:
        if swap_python_streams:
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):
                    stream.flush()
                    stream.close()
        sys.stdout, sys.stderr = py_streams
        for fd, copy in saved.items():
            os.dup2(copy, fd)
            os.close(copy)
        log.close()


def _fds_open() -> bool:
    try:
        os.fstat(1)
        os.fstat(2)
        return True
    except OSError:
        return False


def _python_streams_on_fds() -> bool:
    """Whether ``sys.stdout`` / ``sys.stderr`` write to fds 1 / 2 themselves (a plain terminal or pipe)."""
    try:
        return sys.stdout.fileno() == 1 and sys.stderr.fileno() == 2
    except (AttributeError, io.UnsupportedOperation, ValueError):
        return False
