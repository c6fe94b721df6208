"""Reading the JSON files of a model folder (``config.json``, ``pt_meta.json``), shared by the loaders
(:mod:`~pyterrier_tite.models.checkpoint`) and the model card (:mod:`~pyterrier_tite.models.model_card`)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager

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


def read_meta(folder: str | os.PathLike) -> dict:
    """A model folder's ``pt_meta.json`` (what this package stored besides the weights); ``{}`` when there is none
    (a plain Hugging Face checkpoint). A malformed file raises ``ValueError`` naming it."""
    file = os.path.join(os.fspath(folder), PT_META)
    return read_json(file) if os.path.isfile(file) else {}


#: the files a tokenizer loads from, named when they do not load
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "tokenizer_config.json")


@contextmanager
def tokenizer_files_load(folder: str | os.PathLike) -> Iterator[None]:
    """Around loading a folder's tokenizer: a damaged ``tokenizer.json`` / vocabulary raises the tokenizers library's
    own parse errors (``KeyError: 'added_tokens'``, a bare decode error), which become one :class:`CheckpointError`
    naming the folder's tokenizer files. A missing file (``OSError``) stays what it is."""
    try:
        yield
    except (OSError, CheckpointError):
        raise
    except Exception as exc:
        files = [name for name in TOKENIZER_FILES if os.path.isfile(os.path.join(folder, name))]
        raise CheckpointError(
            f"{os.fspath(folder)}: its tokenizer files ({', '.join(files) or 'none'}) do not load "
            f"({type(exc).__name__}: {str(exc)[:120]})"
        ) from None
