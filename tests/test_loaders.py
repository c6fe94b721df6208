"""One loader per family (``models/<family>/load.py``): a folder or hub id is resolved and its ``config.json`` read once,
and what it returns (module, tokenizer, settings) is passed down, so one ``SparseCE.from_pretrained`` opens
``config.json`` at most 3 times (transformers' ``AutoTokenizer`` reads it once itself). Hub ids come from the offline
fixtures (``../shared/hub``, set up by ``conftest.py``)."""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager

import pytest
from _hub import require_fixtures

pytestmark = pytest.mark.usefixtures("single_thread")

SPARSE_CE = "webis/sparse-cross-encoder-4-4096"


@contextmanager
def config_opens():
    """Collects the paths of every ``config.json`` opened inside (Python's ``open`` audit event: ``open``,
    ``io.open`` and ``os.open`` alike). Audit hooks cannot be removed, so the hook stays, switched off, after the
    block."""
    opened: list[str] = []
    active = [True]

    def hook(event: str, args: tuple) -> None:
        if active[0] and event == "open" and args and isinstance(args[0], (str, bytes, os.PathLike)):
            if os.path.basename(os.fsdecode(args[0])) == "config.json":
                opened.append(os.fsdecode(args[0]))

    sys.addaudithook(hook)
    try:
        yield opened
    finally:
        active[0] = False


def test_sparse_ce_load_opens_config_json_at_most_three_times() -> None:
    require_fixtures()
    from pyterrier_tite.pt.rerankers import SparseCE

    with config_opens() as opened:
        model = SparseCE.from_pretrained(SPARSE_CE, device="cpu")
    assert model.scorer.config.attention_window_size == 4  # it did read the checkpoint
    assert 1 <= len(opened) <= 3, f"config.json opened {len(opened)} times: {opened}"
