"""Writes that are all or nothing: a folder (an index) is built in a hidden sibling renamed into place only when it is
complete (:func:`atomic_build`), a file (a run, ``ir-metadata.yml``) is written beside its target, flushed, checked and
renamed (:func:`write_file`); both under the target's write lock, and what dead writers left beside it is removed."""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pyterrier_tite.store.locks import (
    NO_ROOM,
    PlantedLinkError,
    WriteFailedError,
    _alive,
    planted,
    side_file,
    side_stem,
    write_failure,
    write_lock,
)

#: what builds and writes leave beside a target while they run: ``.NAME.building-PID`` (nested: an engine building
#: inside a build), ``.NAME.replaced-PID`` (the old copy while ``overwrite`` swaps it), ``.NAME.writing-PID`` (a file)
_STAGING = r"(?:\.(?:building|replaced|writing)-(\d+))"


def _staging_pids(name: str, target: str) -> list[int] | None:
    """The pids in ``name`` when it is a staging name of ``target``, else None."""
    match = re.fullmatch(rf"\.+{re.escape(side_stem(target))}((?:{_STAGING})+)", name)
    return [int(pid) for pid in re.findall(_STAGING, match.group(1))] if match else None


def remove_stale_builds(path: str | os.PathLike, holding_lock: bool = False) -> list[Path]:
    """Remove (and return) what dead processes' builds and writes of ``path`` left beside it; with ``holding_lock``
    (the caller holds its write lock), every other process's."""
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
    """Remove ``path``: a real folder with its contents, anything else (a link: never followed) by its name."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def refuse_existing(path: str | os.PathLike, overwrite: bool, flag: str = "--overwrite") -> None:
    """A clear error when ``path`` exists and may not be replaced."""
    if os.path.lexists(path) and not overwrite:
        raise FileExistsError(f"{path} already exists; pass {flag} to replace it (or choose another path)")


@contextmanager
def atomic_build(path: str | os.PathLike, overwrite: bool = False) -> Iterator[Path]:
    """Yields a fresh hidden sibling of ``path`` to build into, under ``path``'s write lock: renamed to ``path`` when
    the block succeeds (replacing it only with ``overwrite``), removed when anything (an error, Ctrl-C) leaves it. A
    write that fails for want of room (a full disk, ``ulimit -f``) is a ``WriteFailedError`` naming path and cause."""
    final = Path(path)
    nested = re.fullmatch(rf"\..+\.building-{os.getpid()}", final.name)  # an engine's build inside ours: locked
    with contextlib.nullcontext() if nested else write_lock(final):
        if final.exists() and not overwrite:
            raise FileExistsError(f"{final} already exists; remove it (or choose another path) to build it again")
        final.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_builds(final, holding_lock=not nested)
        staging = side_file(final, f".building-{os.getpid()}")
        _remove(staging)  # whatever has its name (a planted link, a dead build's folder) is removed by name
        try:
            try:
                os.mkdir(staging, 0o777)  # exclusively (never through a link), with the umask's mode
            except FileExistsError:  # planted again between the removal and the mkdir
                raise planted(staging, final, "staging folder") from None
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
    """Why a build's write failed for want of room (naming the file), None for other errors."""
    if isinstance(exc, WriteFailedError):
        return getattr(exc, "reason", None) or str(exc)
    if exc.errno not in NO_ROOM:
        return None
    cause = write_failure(None, staging) or write_failure(exc)  # the file at the size limit, if one is
    return f"{cause} ({exc.filename})" if exc.filename and str(exc.filename) not in cause else cause


def _swap_into_place(staging: Path, final: Path, overwrite: bool) -> None:
    if final.exists() and not overwrite:  # written meanwhile by a process that took no lock: keep theirs, say so
        raise FileExistsError(f"{final} was created by another process during this build; this build was discarded")
    replaced = side_file(final, f".replaced-{os.getpid()}")
    if os.path.lexists(final):
        _remove(replaced)  # a planted name is replaced by ours, never followed
        os.rename(final, replaced)
    os.rename(staging, final)
    _remove(replaced)


def write_file(path: str | os.PathLike, data: bytes, what: str = "file") -> None:
    """``data`` into ``path``, all or nothing, under its write lock: written beside it, ``fsync``-ed (a full disk may
    only show there), checked and renamed; a failed write is a :class:`WriteFailedError` naming path and cause."""
    target = Path(path)
    with write_lock(target):
        remove_stale_builds(target, holding_lock=True)
        staging = side_file(target, f".writing-{os.getpid()}")
        created = False
        try:
            fd = _create_exclusive(staging, target)
            created = True
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
                written = os.fstat(f.fileno()).st_size
            if written != len(data):
                raise OSError(errno.EIO, f"only {written} of {len(data)} bytes reached the disk")
            os.replace(staging, target)
            created = False
        except PlantedLinkError:
            raise
        except OSError as exc:
            raise WriteFailedError(f"cannot write the {what} {target}: {write_failure(exc)}; nothing was written"
                                   + (" (the previous file is unchanged)" if target.exists() else "")) from exc
        finally:
            if created:
                staging.unlink(missing_ok=True)


def _create_exclusive(staging: Path, target: Path) -> int:
    """A new file at ``staging``, created exclusively, never through a link (a name left there is removed first)."""
    _remove(staging)
    try:
        return os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    except FileExistsError:  # planted again meanwhile
        raise planted(staging, target, "staging file") from None


def umask() -> int:
    """This process's umask, read from /proc where it can be (changing it, even briefly, races other threads)."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def follow_umask(folder: str | os.PathLike) -> None:
    """Give what was written under ``folder`` the umask's modes (safetensors writes 0600: a shared model folder
    failed for other users); links are not followed."""
    mask = umask()
    for root, _dirs, files in os.walk(folder):
        os.chmod(root, 0o777 & ~mask)
        for name in files:
            file = os.path.join(root, name)
            if not os.path.islink(file):
                os.chmod(file, 0o666 & ~mask)


def keep_user_readme(old_folder: str | os.PathLike, staging: str | os.PathLike) -> None:
    """Copy the README.md (a regular file, never through a link) of the folder being replaced into the new one, so a
    card the user wrote survives a save."""
    readme = Path(old_folder) / "README.md"
    if readme.is_file() and not readme.is_symlink() and not Path(old_folder).is_symlink():
        shutil.copyfile(readme, Path(staging) / "README.md")


def keep_other_entries(old_folder: str | os.PathLike, staging: str | os.PathLike) -> None:
    """Give the new folder what the older one held besides the save (a training run's log and resume state): hard
    links (a failed save loses nothing), else copies; links are never followed or carried."""
    old, new = Path(old_folder), Path(staging)
    if not old.is_dir() or old.is_symlink():
        return
    for entry in old.iterdir():
        target = new / entry.name
        if entry.is_symlink() or target.exists() or target.is_symlink():
            continue
        if entry.is_dir():
            target.mkdir()
            keep_other_entries(entry, target)
        elif entry.is_file():
            try:
                os.link(entry, target, follow_symlinks=False)
            except OSError:
                shutil.copy2(entry, target, follow_symlinks=False)
