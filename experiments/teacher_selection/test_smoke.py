"""The teacher selection on its tiny config (smoke.toml): every ranker and fusion re-scores the first two DL19
queries' BM25 top-100, one ``pt.Experiment`` row each against BM25, written to ``teachers.csv``."""

from __future__ import annotations

import os
import subprocess
import sys

import pandas as pd
import pytest

SMOKE = os.path.join(os.path.dirname(__file__), "smoke.toml")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RANKERS = [
    "BM25", "MiniLM bi-encoder", "SPLADE 2-layer", "RRF(BM25, MiniLM)", "RRF(MiniLM, SPLADE)",
    "RRF(BM25, MiniLM, SPLADE)", "norm-sum(MiniLM, SPLADE)", "norm-sum(BM25, MiniLM, SPLADE)",
]  # fmt: skip


@pytest.mark.slow
def test_teacher_selection_smoke(irds_home, tite_cache, tmp_path):
    cmd = [sys.executable, "-m", "experiments.teacher_selection", "--config", SMOKE, "--out", str(tmp_path)]
    env = {**os.environ, "PYTERRIER_TITE_HOME": tite_cache}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    table = pd.read_csv(tmp_path / "teachers.csv")
    assert table["name"].tolist() == RANKERS and (table["year"] == 2019).all()
    for measure in ("nDCG@10", "AP(rel=2)", "RR(rel=2)"):
        assert table[measure].between(0, 1).all()
    assert table["nDCG@10 p-value"].iloc[1:].between(0, 1).all() and pd.isna(table["nDCG@10 p-value"].iloc[0])
    assert table["nDCG@10"].iloc[0] != table["nDCG@10"].iloc[1]  # the re-scorers re-rank the candidates
