"""The reranker benchmark's FLOP-ratio limits match the issue's figures for MiniLM dimensions (2.75 at 4,096 tokens,
1.07 at 174 tokens for w=4), and sharing the query lowers the asymmetric model's FLOPs."""

from __future__ import annotations

import importlib.util
import os
import sys

import pytest

PATH = os.path.join(os.path.dirname(__file__), "..", "benchmarks", "rerank_efficiency.py")


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("rerank_efficiency", PATH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


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
