"""The files PISA derives from an index when a retriever first opens it (block-max data, the compressed index), written
so that no fault costs the process, the index or the user's time: by a helper process (PISA aborts its process when a
write fails), recorded complete (PISA reuses a file cut short), under a lock, and for an index this user may not write
into a per-user cache; ``num_results`` is cut to the number of documents (PISA allocates it up front)."""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import inspect
import json
import os
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from pyterrier_tite.store.atomic import write_file
from pyterrier_tite.store.cache import cache_root
from pyterrier_tite.store.locks import write_failure, write_lock
from pyterrier_tite.store.pisa_files import check_pisa_index, native_output_silenced, num_documents, pisa_child

#: the derived files: block-max data ``<scorer>.q<n>.bmw.<block>``, the compressed index ``<that>.<encoding>``
PISA_DERIVED = "*.bmw.*"
#: the derived files that were written completely, each with its size, inode, change time and digest
PISA_DERIVED_RECORD = "pt_derived.json"
#: the scorers of pyterrier_pisa's retriever factories (``PisaIndex.bm25(k1=...)``): setting -> ``prepare_index`` name
SCORER_SETTINGS = {"bm25": {"k1": "bm25_k1", "b": "bm25_b"}, "pl2": {"c": "pl2_c"}, "qld": {"mu": "qld_mu"},
                   "dph": {}, "quantized": {}}  # fmt: skip
#: PISA's block size for block-max data (``prepare_index``'s default; the factories do not change it)
BLOCK_SIZE = 64


class DerivedFilesError(OSError):
    """PISA cannot write the files it derives from an index (names the folder, the cause and what to do)."""


def open_pisa_retriever(index, scorer: str = "bm25", num_results: int = 1000, threads: int = 1, **settings):
    """``index.<scorer>(num_results=..., threads=..., **settings)``, a ``PisaRetrieve`` (``index``: a ``PisaIndex``
    or its folder), opened without PISA's faults (see the module docstring), the index checked first."""
    from pyterrier_pisa import PisaIndex

    if not isinstance(index, PisaIndex):
        index = PisaIndex(str(index), threads=threads)
    if scorer not in SCORER_SETTINGS:
        raise ValueError(f"unknown PISA scorer {scorer!r}; expected one of {sorted(SCORER_SETTINGS)}")
    check_pisa_index(index.path)
    num_results = max(1, min(int(num_results), num_documents(index.path)))
    stemmer = "" if index.stemmer.value == "none" else index.stemmer.value
    defaults = inspect.signature(getattr(PisaIndex, scorer)).parameters
    native = {key: float(settings.get(name, defaults[name].default)) for name, key in SCORER_SETTINGS[scorer].items()}
    native["quantize"] = int(bool(settings.get("precompute_impact", False)))
    needed = derived_names(scorer, index.index_encoding.value, native)
    with pisa_derived_files(index.path, needed) as folder:
        if folder != Path(index.path):
            index = PisaIndex(str(folder), text_field=index.text_field, stemmer=index.stemmer, threads=index.threads,
                              index_encoding=index.index_encoding, stops=index.stops)  # fmt: skip
        if not all((folder / name).is_file() for name in needed):
            derive(folder, [index.index_encoding.value, scorer, stemmer], native)
        with native_output_silenced():
            return getattr(index, scorer)(num_results=num_results, threads=threads, **settings)


def derived_names(scorer: str, encoding: str, native: dict) -> list[str]:
    """The names ``prepare_index`` gives the derived files (one that differs only costs a run of the helper)."""

    def number(value: float) -> str:  # fmt's shortest form of a C float: 0.9, 1, 1000
        text = str(np.float32(value))
        return text[:-2] if text.endswith(".0") else text

    prefix = {
        "bm25": lambda: f"bm25.k1-{number(native['bm25_k1'])}.b-{number(native['bm25_b'])}",
        "pl2": lambda: f"pl2.c-{number(native['pl2_c'])}",
        "qld": lambda: f"qld.mu-{number(native['qld_mu'])}",
    }.get(scorer, lambda: scorer)()
    wand = f"{prefix}.q{native['quantize']}.bmw.{BLOCK_SIZE}"
    return [wand, f"{wand}.{encoding}"]


def derive(folder: Path, args: list, kwargs: dict) -> None:
    """PISA's ``prepare_index`` into ``folder`` in a helper process; its failure is a :class:`DerivedFilesError`."""
    call = ("folder, (args, kwargs) = sys.argv[3], json.loads(sys.argv[4])\n"
            "pisa.prepare_index(pisa.RetrievalContext(), folder, *args, **kwargs)")  # fmt: skip
    done = subprocess.run(pisa_child(call, folder, json.dumps([args, kwargs])), capture_output=True,
                          text=True, stdin=subprocess.DEVNULL, errors="replace")  # fmt: skip
    if done.returncode == 0:
        return
    cause = write_failure(None, folder)
    if not cause:
        said = [line.split("what():", 1)[-1].strip() for line in done.stderr.splitlines() if "what():" in line]
        ended = f"signal {-done.returncode}" if done.returncode < 0 else f"exit code {done.returncode}"
        cause = f"{said[-1] if said else 'PISA failed'} ({ended})"
    advice = "raise the file-size limit (ulimit -f)" if "ulimit -f" in cause else "free space there"
    raise DerivedFilesError(
        f"PISA cannot write the files it derives from the index on first use (block-max data, compressed index) into "
        f"{folder}: {cause}; {advice} and run again"
    )


@contextmanager
def pisa_derived_files(path: str | os.PathLike, needed: Sequence[str] = ()) -> Iterator[Path]:
    """Wrap the opening of a PISA retriever of the index at ``path``; yields the folder to open it from: ``path``, or
    for an index this user may not write (its ``needed`` files not recorded complete) a per-user cache folder.
    Derived files not recorded complete in ``pt_derived.json`` (a killed process's, which PISA would reuse: a segfault
    or silently no results) are removed before the block and when it raises; those present after it are recorded.
    The block holds the folder's lock: two processes would remove or overwrite each other's half-written files."""
    folder = Path(path)
    if not os.access(folder, os.W_OK):
        complete = _record_of(folder)
        if needed and all(_complete(folder / n, complete.get(n)) for n in needed):
            yield folder
            return
        folder = derived_cache(folder)
    with write_lock(folder / PISA_DERIVED_RECORD, wait=True):  # the record's own lock: write_file re-enters it
        _remove_unrecorded(folder)
        try:
            yield folder
        except BaseException:
            _remove_unrecorded(folder)  # what a failed writer left
            raise
        record = {f.name: _stamp(f, digest=True) for f in sorted(folder.glob(PISA_DERIVED))}
        with contextlib.suppress(OSError):  # a full disk: unrecorded files are only written again next time
            write_file(folder / PISA_DERIVED_RECORD, json.dumps(record).encode(), "record of derived files")


def _stamp(file: Path, digest: bool = False) -> dict:
    """Size, inode (a package cannot carry it), time and digest (a rewrite keeping size and time) of a file."""
    info = file.stat()
    stamp = {"size": info.st_size, "inode": info.st_ino, "mtime_ns": info.st_mtime_ns}
    return {**stamp, "blake2b": _digest(file)} if digest else stamp


def _digest(file: Path) -> str:
    hasher = hashlib.blake2b(digest_size=32)
    with open(file, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            hasher.update(block)
    return hasher.hexdigest()


#: (path, inode, modification time) of the derived files whose digest this process has verified
_VERIFIED: set[tuple[str, int, int]] = set()


def _complete(file: Path, recorded) -> bool:
    """``file`` is the one recorded (stamp; digest once per process): PISA would map any other and crash."""
    if not isinstance(recorded, dict) or not file.is_file() or file.is_symlink():
        return False
    stamp = _stamp(file)
    if any(recorded.get(key) != value for key, value in stamp.items()):
        return False
    key = (str(file), stamp["inode"], stamp["mtime_ns"])
    if key not in _VERIFIED:
        if recorded.get("blake2b") != _digest(file):
            return False
        _VERIFIED.add(key)
    return True


def _record_of(folder: Path) -> dict:
    try:
        complete = json.loads((folder / PISA_DERIVED_RECORD).read_text())
    except (OSError, ValueError):
        return {}
    return complete if isinstance(complete, dict) else {}


def _remove_unrecorded(folder: Path) -> None:
    complete = _record_of(folder)
    for file in folder.glob(PISA_DERIVED):
        if not _complete(file, complete.get(file.name)):
            file.unlink()


def derived_cache(index: str | os.PathLike) -> Path:
    """A per-user folder of links to the files of an index this user may not write, in ``$PYTERRIER_TITE_HOME/
    pisa-derived/``, named by the index's path and its files' sizes and times (a rebuilt index gets a new one)."""
    index = Path(index)
    own = sorted(f for f in index.iterdir() if f.is_file() and not f.name.startswith(".")
                 and f.name != PISA_DERIVED_RECORD and not fnmatch.fnmatch(f.name, PISA_DERIVED))  # fmt: skip
    stamp = json.dumps([str(index.resolve()), [(f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in own]])
    cache = Path(cache_root()) / "pisa-derived" / f"{index.name}.{hashlib.sha256(stamp.encode()).hexdigest()[:16]}"
    try:
        cache.mkdir(parents=True, exist_ok=True)
        for file in own:
            link = cache / file.name
            if not link.is_symlink():
                with contextlib.suppress(FileExistsError):  # another process made it meanwhile
                    link.symlink_to(file.resolve())
        if not os.access(cache, os.W_OK):
            raise PermissionError(13, "Permission denied")
    except OSError as exc:
        raise DerivedFilesError(
            f"PISA index {index} is read-only for this user and the cache folder for the files PISA derives from it, "
            f"{cache}, cannot be written either ({exc.strerror or exc}); make one of them writable (or set "
            "PYTERRIER_TITE_HOME to a writable folder)"
        ) from exc
    return cache
