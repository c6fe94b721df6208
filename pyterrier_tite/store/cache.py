"""Where cached things live (``$PYTERRIER_TITE_HOME``), the one rule that turns a name into a path component, and the
folder names of what is cached per model, new whenever the checkpoint or a setting it computes with changes."""

from __future__ import annotations

import glob
import hashlib
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager

from pyterrier_tite.store.locks import write_lock


def slug(text: str, joiner: str = "__") -> str:
    """``text`` as one safe path component (or run tag): other characters than ``[A-Za-z0-9._-]`` become ``joiner``."""
    return re.sub(r"[^A-Za-z0-9._-]+", joiner, text)


def cache_root() -> str:
    """``$PYTERRIER_TITE_HOME``, else ``~/.cache/pyterrier_tite``."""
    return os.environ.get("PYTERRIER_TITE_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "pyterrier_tite")


def cache_dir(*parts: str) -> str:
    """Where built artefacts (indexes) are cached: ``parts`` under :func:`cache_root`."""
    return os.path.join(cache_root(), *parts)


@contextmanager
def cache_lock(path: str | os.PathLike) -> Iterator[bool]:
    """Around the build of a cached index: yields whether ``path`` is still to be built, holding its write lock while
    it is (a second process building the same cache waits, then finds it built)."""
    if os.path.exists(path):
        yield False
        return
    with write_lock(path, wait=True):
        yield not os.path.exists(path)


def model_key(name: str, source: object, settings: object = None) -> str:
    """The folder name of a model's cached indexes or scores: ``name`` + a hash of its ``source`` (a folder, or any
    repr-able description), the ``settings`` it computes with and a folder's weight files' modification times."""
    stamp = repr(source) if settings is None else repr((source, settings))
    if isinstance(source, str) and os.path.isdir(source):
        weights = sorted(glob.glob(os.path.join(source, "*.safetensors")) + glob.glob(os.path.join(source, "*.bin")))
        stamp += "".join(f"{w}:{os.path.getmtime(w)}" for w in weights)
    return f"{slug(name)}-{hashlib.sha256(stamp.encode()).hexdigest()[:10]}"
