"""``benchmarks/scale.py --quick`` runs end to end at 10,000 documents and writes its measurements (the full run's
figures, at 10k / 100k / 1M, are the study's data)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "scale.py"


@pytest.mark.slow
def test_scale_benchmark_quick(tmp_path):
    pytest.importorskip("faiss")
    pytest.importorskip("pyterrier_pisa")
    out = tmp_path / "scale.json"
    done = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--out", str(out)], capture_output=True, text=True,
                          timeout=900, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["sizes"] == [10_000]
    bm25, dense = report["rows"]["bm25"][0], report["rows"]["dense"][0]
    assert bm25["docs"] == 10_000 and bm25["build_s"] > 0 and bm25["ms_per_query"] > 0
    assert 0.5 <= dense["hnsw_recall@10"] <= 1 and 0 < dense["ivf_recall@100"] <= 1
    assert report["ms_marco_8.8M"]["dense_size_gb"] > 10
