"""Opening a file a user names, once, whatever it is (a regular file, a FIFO, a pipe or ``/dev/stdin``), decompressed
by its first bytes, not its name (gzip, bzip2, xz; zstd with ``zstandard``). A stream can be read only once: callers
keep the line numbers they need. Every problem is a ``ValueError`` naming the file."""

from __future__ import annotations

import bz2
import contextlib
import gzip
import io
import lzma
import os
import select
import stat
from collections.abc import Iterator
from typing import BinaryIO

#: how long an input FIFO may stay without a writer (or data) before it is refused
FIFO_WAIT_SECONDS = 5.0

#: the first bytes of each compressed format read here
MAGIC = {b"\x1f\x8b": "gzip", b"BZh": "bzip2", b"\xfd7zXZ\x00": "xz", b"\x28\xb5\x2f\xfd": "zstd"}
#: the standard library's reader of each (zstd: ``zstandard``'s)
OPENERS = {"gzip": gzip.open, "bzip2": bz2.open, "xz": lzma.open}


def is_plain_file(path: str | os.PathLike) -> bool:
    """A regular file whose content is not compressed (or gzip named ``.gz``): what pandas may read by itself."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return False
        with open(path, "rb") as f:
            kind = compression(f.read(6))
    except OSError:
        return False
    return kind is None or (kind == "gzip" and os.fspath(path).endswith(".gz"))


def count_lines(path: str | os.PathLike) -> int:
    """The ``\\n`` bytes of a regular file, read a block at a time."""
    with open(path, "rb") as f:
        return sum(block.count(b"\n") for block in iter(lambda: f.read(1 << 20), b""))


def compression(head: bytes) -> str | None:
    """The compressed format whose magic bytes start ``head`` (None: not compressed)."""
    return next((kind for magic, kind in MAGIC.items() if head.startswith(magic)), None)


@contextlib.contextmanager
def open_input(path: str | os.PathLike) -> Iterator[BinaryIO]:
    """The decompressed bytes of ``path``, read once from its start."""
    path = os.fspath(path)
    raw = _open_raw(path)
    try:
        buffered = io.BufferedReader(raw) if not isinstance(raw, io.BufferedReader) else raw
        kind = compression(buffered.peek(6)[:6])
        if kind is None:
            yield buffered
        else:
            with _decompressed(buffered, kind, path) as stream:
                yield stream
    finally:
        raw.close()


def binary_lines(path: str | os.PathLike) -> Iterator[tuple[int, bytes]]:
    """``(line number, line)`` of ``path`` split at ``\\n`` only, the ``\\n`` removed."""
    number = 0
    try:
        with open_input(path) as stream:
            for number, line in enumerate(stream, 1):  # noqa: B007 (names the line a damaged stream stopped at)
                yield number, line.removesuffix(b"\n")
    except (EOFError, OSError, lzma.LZMAError) as exc:
        if isinstance(exc, (FileNotFoundError, PermissionError, IsADirectoryError)):
            raise
        raise ValueError(f"{path}, after line {number}: the compressed data is damaged or cut ({exc})") from None


def _open_raw(path: str) -> BinaryIO:
    """The file opened for reading; a folder is refused, a FIFO waited on for a writer :data:`FIFO_WAIT_SECONDS`."""
    if os.path.isdir(path):
        raise ValueError(f"{path} is a folder; expected a file (or an ir_datasets id)")
    mode = os.stat(path).st_mode  # FileNotFoundError names the path
    if not stat.S_ISFIFO(mode):
        return open(path, "rb")
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # opening a FIFO for reading blocks until a writer comes
    try:
        ready, _, _ = select.select([fd], [], [], FIFO_WAIT_SECONDS)
        if not ready:
            waited = f"{FIFO_WAIT_SECONDS:.0f} s"
            raise ValueError(f"{path} is a FIFO that nothing wrote to in {waited}; start its writer first")
        os.set_blocking(fd, True)
        return open(fd, "rb", closefd=True)
    except BaseException:
        os.close(fd)
        raise


@contextlib.contextmanager
def _decompressed(stream: BinaryIO, kind: str, path: str) -> Iterator[BinaryIO]:
    if kind in OPENERS:
        with OPENERS[kind](stream, "rb") as f:
            yield f
    else:
        try:
            import zstandard
        except ImportError:
            message = f"{path} is zstd-compressed; install zstandard to read it (pip install zstandard)"
            raise ValueError(message) from None
        with zstandard.ZstdDecompressor().stream_reader(stream, read_across_frames=True) as reader:
            yield io.BufferedReader(reader)
