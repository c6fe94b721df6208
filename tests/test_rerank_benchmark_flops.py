"""The reranker benchmark's FLOP-ratio limits match the issue's figures for MiniLM dimensions (2.75 at 4,096 tokens,
1.07 at 174 tokens for w=4), and sharing the query lowers the asymmetric model's FLOPs."""

from __future__ import annotations

import pytest
from _scripts import load_script


@pytest.fixture(scope="module")
def bench():
    return load_script("benchmarks/rerank_efficiency.py")


def limit(bench, name: str, doc: int, batch: int = 4) -> float:
    setting = next(s for s in bench.SETTINGS if s.name == name)
    full = bench.flops_per_doc(bench.SETTINGS[0], 10, doc, batch, 384, 1536, 6)
    return full / bench.flops_per_doc(setting, 10, doc, batch, 384, 1536, 6)


def test_flop_ratio_limits_match_the_issue(bench):
    assert limit(bench, "SparseCE w=4 sym", 4086) == pytest.approx(2.75, abs=0.02)
    assert limit(bench, "SparseCE w=4 sym", 164) == pytest.approx(1.07, abs=0.02)
    assert limit(bench, "SparseCE w=inf sym", 4086) == pytest.approx(1.0)


def test_asymmetric_query_sharing_and_wider_windows(bench):
    assert limit(bench, "SparseCE w=4 asym", 164, batch=16) > limit(bench, "SparseCE w=4 sym", 164, batch=16)
    assert limit(bench, "SparseCE w=64 sym", 4086) < limit(bench, "SparseCE w=4 sym", 4086)
    assert 1.0 < limit(bench, "SparseCE w=inf asym", 164, batch=16) < 1.1
