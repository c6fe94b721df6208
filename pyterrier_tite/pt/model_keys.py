"""Folder names for what is cached per model (dense indexes, re-ranker scores): they change whenever the checkpoint
or a setting the model computes with changes, so nothing cached for an old checkpoint is ever read for a new one."""

from __future__ import annotations

import os
import re


def slug(text: str) -> str:
    """``text`` as one safe path component."""
    return re.sub(r"[^A-Za-z0-9._-]+", "__", text)


def model_key(name: str, source: object, settings: object = None) -> str:
    """``name`` + a hash of what a model was loaded from (``source``: its resolved folder, or any repr-able
    description), the ``settings`` it computes with (repr-able; None: none beyond the folder) and, for a folder, its
    weight files' modification times: the folder name of its cached indexes or scores, new whenever the checkpoint is
    rewritten."""
    import glob
    import hashlib

    stamp = repr(source) if settings is None else repr((source, settings))
    if isinstance(source, str) and os.path.isdir(source):
        weights = sorted(glob.glob(os.path.join(source, "*.safetensors")) + glob.glob(os.path.join(source, "*.bin")))
        stamp += "".join(f"{w}:{os.path.getmtime(w)}" for w in weights)
    return f"{slug(name)}-{hashlib.sha256(stamp.encode()).hexdigest()[:10]}"
