"""Silence what compiled libraries (PISA) print on the process's fds 1 and 2, keeping Python's own output: PISA logs
every percent of its indexing there, and ``pyterrier_pisa.log_level`` raises AttributeError in 0.4.9. The native output
is kept in a temporary file: when the block raises, its last lines are attached to the exception.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import tempfile
from collections.abc import Iterator

#: how much of the native output a failing block attaches to its exception
TAIL_LINES = 20


@contextlib.contextmanager
def native_output_silenced(enabled: bool = True) -> Iterator[None]:
    """Within the block, fds 1 and 2 go to a temporary file while ``sys.stdout`` / ``sys.stderr`` still reach the
    terminal (through duplicated fds; in Jupyter and under pytest they are not fds 1/2 and stay untouched)."""
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
        tail = _tail(log)
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


def _tail(log) -> str:
    log.flush()
    log.seek(0)
    lines = log.read().decode("utf-8", "replace").splitlines()
    return "\n".join(lines[-TAIL_LINES:])


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
