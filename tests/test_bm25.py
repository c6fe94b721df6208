"""BM25 first stage through PISA: caching, errors, and the sanity figures of ../shared/DATA.md (within 0.005)."""

from __future__ import annotations

import os

import pyterrier as pt
import pyterrier_alpha as pta
import pytest
from pyterrier.measures import AP, nDCG

from pyterrier_tite import bm25, datasets, pisa_index, trec_dl_bm25

# (dataset used for the index, dataset used for topics/qrels, nDCG@10, MAP or None)
FIGURES = [
    ("vaswani", "vaswani", 0.4667, 0.3053),
    ("cranfield", "cranfield", 0.3276, 0.2947),
    ("cranfield", "local/cranfield-graded", 0.3488, None),
    ("beir/scifact/test", "beir/scifact/test", 0.6776, 0.6379),
    ("local/cisi", "local/cisi", 0.3141, 0.1685),
    ("local/cacm", "local/cacm", 0.4390, 0.2948),
]


@pytest.mark.slow
@pytest.mark.parametrize("index_name,eval_name,ndcg,ap", FIGURES, ids=[f[1] for f in FIGURES])
def test_bm25_reproduces_sanity_figures(irds_home, tite_cache, index_name, eval_name, ndcg, ap):
    ds = datasets.get_dataset(eval_name)
    res = pt.Experiment([bm25(index_name)], ds.get_topics(), ds.get_qrels(), [nDCG @ 10, AP])
    assert res["nDCG@10"][0] == pytest.approx(ndcg, abs=0.005)
    if ap is not None:
        assert res["AP"][0] == pytest.approx(ap, abs=0.005)


@pytest.mark.slow
@pytest.mark.parametrize("year,ndcg", [("2019", 0.5058), ("2020", 0.4796)])
def test_trec_dl_run_reproduces_figures(irds_home, year, ndcg):
    ds = datasets.get_dataset("dl19" if year == "2019" else "dl20")
    res = pt.Experiment([trec_dl_bm25(year, text=False)], ds.get_topics(), ds.get_qrels(), [nDCG @ 10])
    assert res["nDCG@10"][0] == pytest.approx(ndcg, abs=0.005)


def test_index_is_cached_on_disk(irds_home, tite_cache):
    index = pisa_index("local/cisi")
    assert index.built() and str(index.path).startswith(tite_cache)
    stamp = os.path.getmtime(index.path)
    assert pisa_index("cisi").path == index.path  # alias resolves to the same cached index
    assert os.path.getmtime(index.path) == stamp


def test_bm25_retrieves_with_ranks(irds_home, tite_cache):
    res = bm25("local/cisi", num_results=10).search("information retrieval evaluation")
    assert len(res) == 10 and res["rank"].tolist() == list(range(10))
    assert res["score"].is_monotonic_decreasing


def test_bm25_refuses_partial_msmarco():
    with pytest.raises(ValueError, match="trec_dl_bm25"):
        bm25("irds:msmarco-passage/trec-dl-2019/judged")


def test_bm25_unknown_field_is_clear(irds_home, tmp_path):
    with pytest.raises(KeyError, match="available"):
        pisa_index("local/cisi", path=str(tmp_path / "idx"), fields=["abstract"])
    assert not (tmp_path / "idx").exists()  # no half-built index left to be reused


def test_bm25_queries_are_checked_and_the_cut_still_fuses(irds_home, tite_cache):
    import pandas as pd

    retriever = bm25("vaswani")
    assert retriever(pd.DataFrame({"qid": [7], "query": ["plasma\0 physics"]}))["qid"].iloc[0] == "7"  # NUL: a space
    with pytest.raises(ValueError, match="missing query .* qid '3'"):
        retriever(pd.DataFrame({"qid": ["3"], "query": [None]}))
    with pytest.raises(pta.validate.InputValidationError, match="query"):
        retriever(pd.DataFrame({"qid": ["3"]}))
    assert retriever(pd.DataFrame({"qid": [], "query": []})).empty
    cut = (retriever % 10).compile()  # the cut reaches PISA: it asks for 10 results, not 1000 then cuts
    assert "10," in repr(cut.retriever) and "1000" not in repr(cut.retriever) and cut.num_results == 10
    assert len(cut.search("plasma")) == 10
