"""Reading the JSON files of a model folder (``config.json``, ``pt_meta.json``)."""

from __future__ import annotations

import json
import os

from pyterrier_tite.families import PT_META


class CheckpointError(ValueError):
    """A checkpoint that cannot be loaded exactly: missing or unused tensors, wrong shapes, an unknown layout, a
    folder that asks to run its own code or whose settings contradict its weights."""


def read_json(file: str | os.PathLike) -> dict:
    """A JSON object from ``file``; a malformed file raises ``ValueError`` naming the file."""
    try:
        with open(file, encoding="utf-8") as f:
            value = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{file} is not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise ValueError(f"{file} must hold a JSON object, got {type(value).__name__}")
    return value


def read_meta(folder: str | os.PathLike, name: str = PT_META) -> dict:
    """A model folder's ``pt_meta.json`` (or another JSON file ``name``); ``{}`` when there is none (a plain Hugging
    Face checkpoint). A malformed file raises ``ValueError``."""
    file = os.path.join(os.fspath(folder), name)
    return read_json(file) if os.path.isfile(file) else {}
