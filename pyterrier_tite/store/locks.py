"""One writer per target (an index folder, a run file), locked before anything is computed for it: ``flock`` on
``.NAME.lock`` beside it (released by the kernel even on SIGKILL; it holds the holder's pid and host for the message).
Taking the lock proves the target's folder writable, so a command fails before it loads a model."""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import resource
import socket
import stat
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class WriteTargetError(OSError):
    """A target that cannot be written (busy, unwritable, or a write that failed); the message names the path."""


class TargetBusyError(WriteTargetError):
    """Another process is writing the same target (the message names its pid)."""


class UnwritableTargetError(WriteTargetError):
    """The target's folder cannot be created or written."""


class WriteFailedError(WriteTargetError):
    """A write failed (full disk, file-size limit) or was cut short; nothing was left at the target."""


#: errno of writes that ran out of room
NO_ROOM = {errno.ENOSPC, errno.EFBIG, errno.EDQUOT}

_held: dict[str, int] = {}  # lock file -> the thread holding it
_held_guard = threading.Lock()


#: the longest name a file system takes (bytes); side files of longer target names are shortened (:func:`side_stem`)
NAME_MAX = 255
#: room kept for what follows the stem in a side file's name (``.building-PID.building-PID``, ``.lock``)
_SUFFIX_ROOM = 40


def side_stem(name: str) -> str:
    """What the side files of a target ``name`` are named after: ``name``, or for a name too long to take a suffix,
    its first bytes + ``~`` + a hash of it (so any legal target name can be locked and built)."""
    if len(name.encode()) + 1 + _SUFFIX_ROOM <= NAME_MAX:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:16]
    head = name.encode()[:120].decode(errors="ignore")
    return f"{head}~{digest}"


def side_file(target: str | os.PathLike, suffix: str) -> Path:
    """The side file ``.STEM<suffix>`` of ``target``, in its folder."""
    target = Path(os.path.abspath(target))
    return target.with_name(f".{side_stem(target.name)}{suffix}")


class PlantedLinkError(WriteTargetError):
    """A side file of a target (lock, staging file or folder) is a link or a file this project did not make."""


def planted(path: Path, target: str | os.PathLike, what: str) -> PlantedLinkError:
    """The error for something found at ``path`` (a side file of ``target``) that is not ours: never followed."""
    kind = "a symbolic link" if os.path.islink(path) else "not a plain file made by pyterrier-tite"
    return PlantedLinkError(f"cannot write {target}: its {what} {path} is {kind}; it is never followed or written "
                            "through: remove it (and check who made it), then run again")  # fmt: skip


@contextmanager
def write_lock(target: str | os.PathLike, wait: bool = False) -> Iterator[Path]:
    """Hold the write lock of ``target`` in the block, re-entrant within a thread; yields the lock file. A second
    writer fails at once naming the holder (:class:`TargetBusyError`), or waits (``wait=True``: caches). Folders
    created for it are removed again when the block leaves them empty."""
    lock = side_file(target, ".lock")
    key = str(lock)
    with _held_guard:
        holder = _held.get(key)
    if holder == threading.get_ident():  # re-entered by the thread that holds it
        yield lock
        return
    if holder is not None and not wait:
        raise _busy(target, lock, f"{os.getpid()} {socket.gethostname()} (this process)")
    created = _make_folders(lock.parent, Path(target))
    try:
        fd = _acquire(lock, Path(target), wait)
    except BaseException:
        _remove_empty(created)
        raise
    with _held_guard:
        _held[key] = threading.get_ident()
    try:
        yield lock
    finally:
        with _held_guard:
            del _held[key]
        try:
            os.unlink(lock)  # before the unlock: a writer that opened this file sees it gone and opens afresh
        except OSError:
            pass
        os.close(fd)
        _remove_empty(created)


#: how a lock file is opened: never through a link, never blocking on a planted FIFO, closed in children
_OPEN = os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
#: the holder's record is written at the start of the lock file, padded to this size: never truncated
_RECORD = 128


def _open_lock(lock: Path, target: Path) -> int:
    """The lock file, created (``O_EXCL``) or opened without following a link; not one plain file: refused."""
    try:
        return os.open(lock, _OPEN | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        pass
    except OSError as exc:
        raise _unwritable(target, lock.parent, exc) from exc
    try:
        fd = os.open(lock, _OPEN)
    except FileNotFoundError:  # its holder removed it meanwhile: create it afresh
        return _open_lock(lock, target)
    except OSError as exc:
        if exc.errno == errno.ELOOP or os.path.islink(lock):
            raise planted(lock, target, "lock file") from None
        raise _unwritable(target, lock.parent, exc) from exc
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
        os.close(fd)
        raise planted(lock, target, "lock file")
    return fd


def _acquire(lock: Path, target: Path, wait: bool) -> int:
    while True:
        fd = _open_lock(lock, target)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise _busy(target, lock, holder) from None
        except OSError:  # a file system without locks (some network mounts): trust the pid in the file
            holder = _holder(fd)
            pid = int(holder.split()[0]) if holder.split() and holder.split()[0].isdigit() else None
            if pid not in (None, os.getpid()) and holder.split()[1:2] == [socket.gethostname()] and _alive(pid):
                os.close(fd)
                raise _busy(target, lock, holder) from None
        try:
            same = os.fstat(fd).st_ino == os.lstat(lock).st_ino
        except FileNotFoundError:
            same = False
        if not same:  # its holder removed it between our open and our lock: lock the file now there
            os.close(fd)
            continue
        record = f"{os.getpid()} {socket.gethostname()}"[: _RECORD - 1].ljust(_RECORD - 1) + "\n"
        try:
            os.pwrite(fd, record.encode(), 0)  # fixed size, at the start: a lock file is never truncated
        except OSError as exc:
            os.close(fd)
            raise _unwritable(target, lock.parent, exc) from exc
        return fd


def _holder(fd: int) -> str:
    try:
        return os.pread(fd, 200, 0).decode(errors="replace").strip()
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _busy(target: str | os.PathLike, lock: Path, holder: str) -> TargetBusyError:
    pid, _, host = holder.partition(" ")
    who = f"pid {pid} on {host}" if pid else "another process"
    return TargetBusyError(
        f"{target} is being written by {who} (lock {lock}); wait for it to finish or stop that process, then run "
        "again (a lock whose process has ended is taken over)"
    )


def _unwritable(target: Path, folder: Path, exc: OSError) -> UnwritableTargetError:
    blocker = next((p for p in [folder, *folder.parents] if p.exists()), folder)
    if not blocker.is_dir():
        reason = f"{blocker} is a file, not a folder"
    elif isinstance(exc, PermissionError) or exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        reason = f"{blocker} is not writable ({exc.strerror})"
    else:
        reason = f"{exc.strerror or exc} in {blocker}"
    return UnwritableTargetError(f"cannot write {target}: {reason}; choose another path")


def _make_folders(folder: Path, target: Path) -> list[Path]:
    """Create ``folder`` and its missing parents; returns those created (deepest first)."""
    missing = []
    for path in [folder, *folder.parents]:
        if os.path.lexists(path):
            break
        missing.append(path)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        _remove_empty(missing)
        raise _unwritable(target, folder, exc) from exc
    return missing


def _remove_empty(folders: list[Path]) -> None:
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:
            return


def write_failure(exc: OSError | None = None, folder: str | os.PathLike | None = None) -> str:
    """Why a write failed, in words: ``exc``'s reason (with the ``ulimit -f`` limit) or, for writes that failed
    silently (PISA's) into ``folder``, a file of it at the file-size limit or a full file system; else empty."""
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    limited = limit != resource.RLIM_INFINITY
    if exc is not None and exc.strerror:
        if exc.errno == errno.EFBIG and limited:
            return f"{exc.strerror} (the file-size limit, ulimit -f, is {limit} bytes)"
        return exc.strerror
    if folder is None:
        return str(exc or "")
    folder = Path(folder)
    if limited and folder.is_dir():
        for file in sorted(folder.rglob("*")):
            if file.is_file() and file.stat().st_size >= limit:
                return f"File too large: {file.name} reached the file-size limit of {limit} bytes (ulimit -f)"
    try:
        space = os.statvfs(folder if folder.is_dir() else folder.parent)
    except OSError:
        return ""
    free = space.f_bavail * space.f_frsize
    return f"No space left on device ({free} bytes free)" if free < (1 << 20) else ""
