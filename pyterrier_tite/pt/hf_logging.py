"""Silencing transformers' load reports where a mismatch is expected (e.g. a checkpoint's pooler that a bi-encoder
does not use), so users see only the reports that mean something."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def quiet_transformers() -> Iterator[None]:
    """transformers logs errors only inside the block; the previous verbosity comes back afterwards."""
    from transformers.utils import logging

    verbosity = logging.get_verbosity()
    logging.set_verbosity_error()
    try:
        yield
    finally:
        logging.set_verbosity(verbosity)
