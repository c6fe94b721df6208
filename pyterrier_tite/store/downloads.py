"""Packages in and out of PyTerrier's artifact cache: :func:`fetch_package` is ``pt.Artifact.from_url`` without its
holes (once per URL, cached only when verified complete, size and expansion caps, plain members only, the folder
following the umask: PyTerrier makes it 0777), :func:`package_saved` packages a fresh save. Every refusal is a
one-line :class:`PackageError`."""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import stat
import tarfile
import tempfile
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path, PurePosixPath

from pyterrier_tite.store.atomic import atomic_build, umask, write_file
from pyterrier_tite.store.locks import write_lock

#: environment variable: the most bytes a package may extract to (default :data:`DEFAULT_MAX_BYTES`)
MAX_BYTES_ENV = "PYTERRIER_TITE_MAX_PACKAGE_BYTES"
DEFAULT_MAX_BYTES = 20 * 2**30
#: environment variable: the most extracted bytes per compressed byte (default :data:`DEFAULT_MAX_RATIO`, 0: no cap)
MAX_RATIO_ENV = "PYTERRIER_TITE_MAX_PACKAGE_RATIO"
DEFAULT_MAX_RATIO = 100
#: bytes after the tar's end-of-archive blocks that are still read (tar pads to records of 10 KiB)
_TRAILER = 1 << 20
_CHUNK = 1 << 20


class PackageError(ValueError):
    """A package that is refused (too large, a link member, cut short, a wrong sha256); one line."""


def _cap(variable: str, default: int, unit: str) -> int:
    """A cap from the environment (``variable``; unset or empty: ``default``): a whole number of ``unit``."""
    value = os.environ.get(variable, "").strip()
    if not value:
        return default
    if not value.isdigit():
        raise ValueError(f"{variable}={value!r} is not {unit}")
    return int(value)


def resolve_url(url: str) -> tuple[str, dict[str, str]]:
    """``(url, headers)`` after PyTerrier's URL resolvers (``hf:``, ``zenodo:``), as ``pt.Artifact.from_url``."""
    import pyterrier as pt

    parsed = urllib.parse.urlparse(url)
    headers: dict[str, str] = {}
    resolvers = {ep.name: ep for ep in pt.utils.entry_points("pyterrier.artifact.url_protocol_resolver")}
    while parsed.scheme in resolvers:
        result = resolvers.pop(parsed.scheme).load()(parsed)
        if result is None:
            continue
        if isinstance(result, str):
            url = result
        else:
            url, more = (result[0], result[1]) if isinstance(result, tuple) else (result.url, result.headers)
            headers.update(more or {})
        parsed = urllib.parse.urlparse(url)
    return url, headers


def artifact_cache() -> str:
    """PyTerrier's artifact cache folder (``$PYTERRIER_HOME/artifacts``)."""
    import pyterrier as pt

    return os.path.join(pt.io.pyterrier_home(), "artifacts")


def fetch_package(url: str, expected_sha256: str | None = None) -> str:
    """The folder of the package at ``url`` in ``$PYTERRIER_HOME/artifacts/<sha256 of the URL>`` (where PyTerrier
    finds it too), fetched on first use, all or nothing, under a waiting lock; a local folder is returned as it is."""
    resolved, headers = resolve_url(url)
    if not urllib.parse.urlparse(resolved).scheme and os.path.isdir(resolved):
        return resolved
    cache = artifact_cache()
    os.makedirs(cache, exist_ok=True)
    final = os.path.join(cache, hashlib.sha256(_cache_key(resolved).encode()).hexdigest())
    if os.path.isdir(final):
        return checked_cache_folder(final, url)
    with write_lock(final, wait=True):
        if os.path.isdir(final):  # fetched by another process while this one waited
            return checked_cache_folder(final, url)
        declared = _declared(resolved, headers, url)
        sha = declared.get("expected_sha256")
        if expected_sha256 is not None and sha is not None and expected_sha256.lower() != sha:
            raise PackageError(f"{url}: its .json declares sha256 {sha}, not the expected {expected_sha256}")
        sha = (expected_sha256 or sha or "").lower() or None
        bound = _cap(MAX_BYTES_ENV, DEFAULT_MAX_BYTES, "a number of bytes")
        cap = min(declared["total_size"], bound) if "total_size" in declared else bound
        with atomic_build(final) as staging:  # a dead fetch's staging folder is removed
            _download_and_extract(resolved, headers, url, staging, cap, bound, sha)
            info = {"url": resolved} if urllib.parse.urlparse(resolved).scheme else {"path": resolved}
            write_file(f"{final}.json", (json.dumps(info) + "\n").encode(), "package record")
    return final


def _cache_key(resolved: str) -> str:
    """A package's URL; a local file's also its size and time, so one rebuilt under its name is unpacked afresh."""
    parsed = urllib.parse.urlparse(resolved)
    if parsed.scheme not in ("", "file"):
        return resolved
    try:
        status = os.stat(urllib.request.url2pathname(parsed.path) if parsed.scheme else resolved)
    except OSError:
        return resolved
    return f"{resolved}\0{status.st_size}\0{status.st_mtime_ns}"


def checked_cache_folder(folder: str, url: str) -> str:
    """A cached package folder, its mode brought back to the umask's when PyTerrier left it writable by others (ours
    only: another user's folder that anyone may write is refused)."""
    info = os.lstat(folder)
    if stat.S_ISLNK(info.st_mode):
        raise PackageError(f"the cached package {folder} of {url} is a link; remove it and fetch again")
    loose = stat.S_IMODE(info.st_mode) & 0o022 & ~(0o777 & ~umask())
    if loose:
        if info.st_uid != os.geteuid():
            raise PackageError(f"the cached package {folder} of {url} belongs to another user and others may write "
                               "it (mode {:o}): anyone could have swapped its files; remove it and fetch again"
                               .format(stat.S_IMODE(info.st_mode)))  # fmt: skip
        os.chmod(folder, stat.S_IMODE(info.st_mode) & ~loose)
    return folder


def _open(url: str, headers: dict[str, str]) -> io.BufferedIOBase:
    """A byte stream of ``url`` (``http(s)://``, ``file://`` or a local path); OSError when it cannot be read."""
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme in ("http", "https"):
        response = urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=120)  # noqa: S310
        if getattr(response, "status", 200) != 200:
            response.close()
            raise OSError(f"HTTP {response.status} for {url}")
        return response
    if parsed.scheme == "file":
        return open(urllib.request.url2pathname(parsed.path), "rb")
    if parsed.scheme:
        raise OSError(f"{url}: no downloader for {parsed.scheme}: URLs (http, https, file, hf, zenodo)")
    return open(url, "rb")


def _declared(url: str, headers: dict[str, str], shown: str) -> dict:
    """What ``<url>.json`` declares (``total_size``, ``expected_sha256``), checked; {} when there is none."""
    try:
        with _open(f"{url}.json", headers) as fin:
            raw = fin.read(1 << 20)
    except OSError:
        return {}
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise PackageError(f"{shown}: its .json is not JSON") from None
    if not isinstance(data, dict):
        raise PackageError(f"{shown}: its .json is not an object")
    if "segments" in data:
        raise PackageError(f"{shown} is split into segments, which pyterrier-tite does not fetch; download and join "
                           "the segments, then pass the folder")  # fmt: skip
    declared: dict = {}
    size = data.get("total_size")
    if size is not None:
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise PackageError(f"{shown}: its .json declares total_size {size!r}, not a number of bytes")
        declared["total_size"] = size
    sha = data.get("expected_sha256")
    if sha is not None:
        if not isinstance(sha, str) or not re.fullmatch(r"[0-9a-fA-F]{64}", sha):
            raise PackageError(f"{shown}: its .json declares expected_sha256 {sha!r}, not a sha256")
        declared["expected_sha256"] = sha.lower()
    return declared


class _Counting(io.RawIOBase):
    """Reads through ``stream`` counting bytes, hashing them (``hash``) and keeping the last ``window`` bytes."""

    def __init__(self, stream, hash: bool = False, window: int = 0):
        self.stream, self.count, self.window, self.tail = stream, 0, window, bytearray()
        self.sha = hashlib.sha256() if hash else None

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = self.stream.read(len(buffer))
        n = len(data)
        buffer[:n] = data
        self.count += n
        if self.sha is not None:
            self.sha.update(data)
        if self.window:
            self.tail += data
            del self.tail[: max(0, len(self.tail) - self.window)]
        return n

    def drain(self, limit: int) -> int:
        """Read to the end, at most ``limit`` more bytes; returns how many were read."""
        read = 0
        while read <= limit and (chunk := self.read(_CHUNK)):
            read += len(chunk)
        return read


def _download_and_extract(url: str, headers: dict, shown: str, dest: Path, cap: int, bound: int, sha) -> None:
    with contextlib.ExitStack() as stack:
        raw = _Counting(stack.enter_context(_open(url, headers)), hash=True)
        path = urllib.parse.urlparse(url).path
        if path.endswith(".lz4"):
            from lz4.frame import LZ4FrameFile

            inner = stack.enter_context(LZ4FrameFile(io.BufferedReader(raw, _CHUNK)))
        elif path.endswith((".gz", ".tgz")):
            inner = stack.enter_context(gzip.GzipFile(fileobj=io.BufferedReader(raw, _CHUNK)))
        else:
            inner = raw
        plain = _Counting(inner, window=_TRAILER + 2 * tarfile.BLOCKSIZE)
        try:
            tar = stack.enter_context(tarfile.open(fileobj=plain, mode="r|"))
            _extract_members(tar, dest, shown, cap, bound, raw)
            _check_end(tar, plain, shown)
            raw.drain(_TRAILER)
        except (tarfile.TarError, EOFError, RuntimeError, OSError) as exc:
            if isinstance(exc, OSError) and not isinstance(exc, tarfile.TarError) and exc.errno is not None:
                raise
            raise PackageError(f"{shown} is not a complete package ({exc}); nothing was cached") from None
    if sha is not None and raw.sha.hexdigest() != sha:
        raise PackageError(f"{shown}: sha256 {raw.sha.hexdigest()} is not the declared {sha} (a damaged or "
                           "swapped download); nothing was cached")  # fmt: skip


def _member_path(dest: Path, name: str, shown: str) -> Path:
    parts = PurePosixPath(name).parts
    if not name or "\0" in name or name.startswith(("/", "\\")) or ".." in parts or re.match(r"[A-Za-z]:", name):
        raise PackageError(f"{shown}: member {name!r} leads outside the package folder; refused")
    parts = [p for p in parts if p not in (".", "")]
    return dest.joinpath(*parts) if parts else dest


def _extract_members(tar: tarfile.TarFile, dest: Path, shown: str, cap: int, bound: int,
                     compressed: _Counting) -> None:  # fmt: skip
    """Plain files and folders only, at most ``cap`` bytes and the expansion cap times the bytes read (>= 1 MiB)."""
    ratio = _cap(MAX_RATIO_ENV, DEFAULT_MAX_RATIO, "a whole number (extracted bytes per compressed byte)")
    total = extracted = 0
    for member in tar:
        target = _member_path(dest, member.name, shown)
        if member.isdir():
            target.mkdir(parents=True, exist_ok=True)
            continue
        if not member.isreg():
            kind = "link" if member.issym() or member.islnk() else "device or FIFO" if member.isdev() else "special"
            raise PackageError(f"{shown}: member {member.name!r} is a {kind} member; a package holds only files and "
                               "folders; refused")  # fmt: skip
        total += member.size
        if total > cap:
            limit = "the size cap" if cap == bound else "it declares"
            lift = f"; set {MAX_BYTES_ENV} above {bound} to allow it" if cap == bound else ""
            raise PackageError(f"{shown} extracts to more than {cap} bytes (at member {member.name!r}), more than "
                               f"{limit}{lift}; nothing was cached")  # fmt: skip
        if target == dest:
            raise PackageError(f"{shown}: member {member.name!r} is no file name; refused")
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
        except FileExistsError:
            raise PackageError(f"{shown}: member {member.name!r} appears twice; refused") from None
        source = tar.extractfile(member)
        written = 0
        with os.fdopen(fd, "wb") as out:
            while chunk := source.read(min(_CHUNK, member.size - written)):
                extracted += len(chunk)
                if ratio and extracted > ratio * max(compressed.count, _CHUNK):
                    raise PackageError(f"{shown} expands more than {ratio} times ({extracted} bytes from "
                                       f"{compressed.count} compressed, at member {member.name!r}), like a "
                                       f"decompression bomb; set {MAX_RATIO_ENV} above {ratio} (0: no limit) to "
                                       "allow it; nothing was cached")  # fmt: skip
                out.write(chunk)
                written += len(chunk)
        if written != member.size:
            raise PackageError(f"{shown} is cut short in member {member.name!r}; nothing was cached")


def _check_end(tar: tarfile.TarFile, plain: _Counting, shown: str) -> None:
    """The archive ended at its end-of-archive blocks (two zero blocks), not at a cut or a garbage header."""
    plain.drain(_TRAILER)
    end = tar.offset
    start = plain.count - len(plain.tail)
    block = bytes(plain.tail[end - start : end - start + 2 * tarfile.BLOCKSIZE]) if end >= start else b""
    if len(block) != 2 * tarfile.BLOCKSIZE or block.count(0) != len(block):
        raise PackageError(f"{shown} is cut short or damaged: the archive does not end with its end-of-archive "
                           "blocks; nothing was cached")  # fmt: skip


#: what a package URL starts with (a scheme of two or more letters: ``C:`` stays a path)
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]+:")


def is_package_url(location: str) -> bool:
    """``http(s)://...``, ``hf:org/name``, ``zenodo:ID``: a package to download rather than a folder."""
    return bool(_URL.match(location)) and not os.path.exists(location)


def index_folder(location: str | os.PathLike) -> str:
    """The index folder for a folder, a package URL or a local package file (``build_package``'s ``.tar.lz4``): a
    package is fetched (:func:`fetch_package`) and its folder returned; anything else is returned as is."""
    location = os.fspath(location)
    if os.path.isfile(location):
        location = os.path.abspath(location)
    elif not is_package_url(location):
        return location
    try:
        path = fetch_package(location)
    except OSError as exc:  # unreachable host, 404, no network
        raise ValueError(f"cannot download the index {location}: {exc}") from exc
    if not os.path.isdir(path):
        raise ValueError(f"{location} is not an index folder")
    return str(path)


def package_saved(save: Callable[[str], None], package_path: str, card: str | None = None, **kwargs) -> str:
    """A ``.tar.lz4`` package (``pta.Artifact.build_package``, keywords go there) of what ``save(folder)`` writes
    into a scratch folder; ``card``: a model card (README.md) to ship instead of the one ``save`` wrote."""
    import pyterrier_alpha as pta

    with tempfile.TemporaryDirectory(prefix="pyterrier-tite-package-") as tmp:
        folder = os.path.join(tmp, "model")
        save(folder)
        if card is not None:
            shutil.copyfile(card, os.path.join(folder, os.path.basename(card)))
        return pta.Artifact(folder).build_package(package_path, **kwargs)
