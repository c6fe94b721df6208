"""Approximate dense search (FAISS HNSW / IVF over a FlexIndex's vectors): the exact top hits found at high recall,
the FAISS index built once beside the index and reused, wrong settings refused in one line, and the CLI flag wired
through (issue 73.3)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("faiss")

from pyterrier_tite.store.flex import open_flex_retriever  # noqa: E402


@pytest.fixture(scope="module")
def flex(tmp_path_factory):
    from pyterrier_dr import FlexIndex

    rng = np.random.default_rng(0)
    centres = rng.standard_normal((20, 32)).astype(np.float32)
    vectors = (centres[rng.integers(0, 20, 4000)] + 0.3 * rng.standard_normal((4000, 32))).astype(np.float32)
    index = FlexIndex(str(tmp_path_factory.mktemp("flex") / "v.flex"), verbose=False)
    index.index([{"docno": f"d{i}", "doc_vec": v} for i, v in enumerate(vectors)])
    queries = (centres[rng.integers(0, 20, 30)] + 0.3 * rng.standard_normal((30, 32))).astype(np.float32)
    return index, pd.DataFrame({"qid": [str(i) for i in range(30)], "query": "q", "query_vec": list(queries)})


def _top(results: pd.DataFrame) -> dict[str, list[str]]:
    return {qid: list(group.sort_values("rank")["docno"]) for qid, group in results.groupby("qid")}


@pytest.mark.parametrize("search, floor", [("hnsw", 0.95), ("ivf", 0.8)])
def test_approximate_search_finds_the_exact_top_hits(flex, search, floor):
    index, queries = flex
    exact = _top(open_flex_retriever(index, 10)(queries))
    approximate = _top(open_flex_retriever(index, 10, search=search)(queries))
    recall = np.mean([len(set(exact[q]) & set(approximate[q])) / 10 for q in exact])
    assert recall >= floor, recall
    scores = open_flex_retriever(index, 10, search=search)(queries)
    exact_scores = open_flex_retriever(index, 10)(queries)
    merged = scores.merge(exact_scores, on=["qid", "docno"], suffixes=("", "_exact"))
    np.testing.assert_allclose(merged["score"], merged["score_exact"], rtol=1e-5, atol=1e-5)  # same inner products


def test_the_faiss_index_is_built_once_and_kept(flex):
    index, queries = flex
    open_flex_retriever(index, 5, search="hnsw")(queries)
    built = sorted(p.name for p in index.index_path.glob("faiss-hnsw-*.index"))
    assert built == ["faiss-hnsw-m32.index"]
    stamp = (index.index_path / built[0]).stat().st_mtime_ns
    open_flex_retriever(index, 5, search="hnsw", ef_search=64)(queries)  # a search setting: the same build
    assert (index.index_path / built[0]).stat().st_mtime_ns == stamp
    assert not list(index.index_path.glob(".faiss-*"))  # no staging file left


def test_wrong_settings_are_one_line(flex):
    index, _ = flex
    with pytest.raises(ValueError, match="search must be one of exact, hnsw, ivf"):
        open_flex_retriever(index, 5, search="lsh")
    with pytest.raises(ValueError, match="unknown search settings"):
        open_flex_retriever(index, 5, search="hnsw", efsearch=3)


def test_the_cli_offers_approximate_search():
    from pyterrier_tite.cli import build_parser

    args = build_parser().parse_args(["retrieve", "--index", "i", "--topics", "t", "--output", "o", "--search", "hnsw",
                                      "--search-width", "256"])  # fmt: skip
    assert (args.search, args.search_width) == ("hnsw", 256)
    assert build_parser().parse_args(["retrieve", "--index", "i", "--topics", "t", "--output", "o"]).search == "exact"
