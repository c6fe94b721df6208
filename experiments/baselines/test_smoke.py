"""The BM25 baselines on their tiny config (smoke.toml): cranfield and DL19's provided run, the figures of the
committed table (experiments/baselines/results.json)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

SMOKE = os.path.join(os.path.dirname(__file__), "smoke.toml")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.slow
def test_baselines_smoke(irds_home, tite_cache):
    cmd = [sys.executable, "-m", "experiments.baselines", "--config", SMOKE]
    env = {**os.environ, "PYTERRIER_TITE_HOME": tite_cache}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [line.split(" | ") for line in done.stdout.splitlines() if line.startswith("| ") and "---" not in line]
    table = {r[0].lstrip("| "): r[1:] for r in rows[1:]}
    assert list(table) == ["cranfield", "TREC DL 2019 (provided top-100 run)"]
    assert table["cranfield"][:3] == ["0.3276", "0.2947", "0.7310"]  # nDCG@10, AP, R@100
    assert table["TREC DL 2019 (provided top-100 run)"][:3] == ["0.5058", "0.2993", "0.4531"]
    bad = subprocess.run([*cmd, "--collections", "cranfield,trec"], capture_output=True, text=True, env=env, cwd=ROOT)
    assert bad.returncode != 0 and "unknown collection(s) ['trec']" in bad.stderr
