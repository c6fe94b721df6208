"""A tokenizer's padded batch as tensors through numpy, without transformers' ``return_tensors="pt"``, which builds
each tensor id by id (on an H200, 3.4 of ``TITE.encode``'s 3.9 s for 8,192 passages; numpy converts at C speed).

:func:`tokenize` holds the tokenizer's lock: a fast tokenizer first sets its Rust truncation and padding (shared by
every thread), then encodes, so two threads truncating to different lengths would encode with each other's settings.
"""

from __future__ import annotations

import inspect
import threading
import weakref
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import torch

#: one lock per tokenizer (its Rust backend where it has one: copies of a wrapper may share it)
_LOCKS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_LOCKS_GUARD = threading.Lock()


def tokenize(tokenizer, texts: Sequence[str] | str, **settings) -> Mapping[str, list]:
    """``tokenizer(texts, **settings)`` holding the tokenizer's lock (see the module docstring)."""
    key = getattr(tokenizer, "_tokenizer", tokenizer)
    with _LOCKS_GUARD:
        lock = _LOCKS.get(key)
        if lock is None:
            lock = _LOCKS[key] = threading.Lock()
    with lock:
        return tokenizer(texts, **settings)


def takes_token_types(model) -> bool:
    """Whether ``model(...)`` accepts ``token_type_ids`` (BERT, TITE: yes; DistilBERT: no)."""
    return "token_type_ids" in inspect.signature(model.forward).parameters


def padded_tensors(encoded: Mapping[str, list], names: Iterable[str]) -> dict[str, torch.Tensor]:
    """The ``names`` found in ``encoded`` (a tokenizer's output with ``padding=True``: equal-length id lists) as
    ``[batch, length]`` int64 tensors, exactly what ``return_tensors="pt"`` gives."""
    out = {}
    for name in names:
        if name not in encoded:
            continue
        try:
            array = np.asarray(encoded[name], dtype=np.int64)
        except ValueError as e:  # numpy: "inhomogeneous shape"
            raise ValueError(f"{name}: rows of different lengths; tokenize with padding=True") from e
        if array.size == 0:  # an empty batch
            array = array.reshape(0, 0)
        elif array.ndim != 2:
            raise ValueError(f"{name}: expected a batch (a list of id lists), got shape {array.shape}")
        out[name] = torch.from_numpy(array)
    return out
