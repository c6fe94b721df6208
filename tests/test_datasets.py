"""Dataset access through IR_DATASETS_HOME: standard IDs, local collections, TREC DL first stage."""

from __future__ import annotations

import pandas as pd
import pyterrier as pt
import pytest

from pyterrier_tite import datasets, trec_dl_bm25


def test_irds_id_aliases():
    assert datasets.irds_id("irds:beir/scifact/test") == "beir/scifact/test"
    assert datasets.irds_id("scifact") == "beir/scifact/test"
    assert datasets.irds_id("dl19") == "msmarco-passage/trec-dl-2019/judged"
    assert datasets.irds_id("irds:vaswani") == "vaswani"


@pytest.mark.parametrize(
    "name,docs,queries,qrels",
    [
        ("vaswani", 11429, 93, 2083),
        ("cranfield", 1400, 225, 1837),
        ("beir/scifact/test", 5183, 300, 339),
        ("local/cisi", 1460, 112, 3114),
        ("local/cacm", 3204, 64, 796),
        ("local/cranfield-graded", 1400, 225, 1837),
    ],
)
def test_collection_counts(irds_home, name, docs, queries, qrels):
    ds = datasets.get_dataset(name)
    assert ds.irds_ref().docs_count() == docs
    assert len(ds.get_topics()) == queries
    assert len(ds.get_qrels()) == qrels


def test_cranfield_graded_gains(irds_home):
    raw = datasets.get_dataset("cranfield").get_qrels()
    graded = datasets.get_dataset("cranfield-graded").get_qrels()
    merged = raw.merge(graded, on=["qid", "docno"], suffixes=("_raw", "_graded"))
    assert len(merged) == len(raw)
    expected = merged["label_raw"].map(lambda code: 0 if code == -1 else 5 - code)
    assert (merged["label_graded"] == expected).all()


def test_local_collections_registered(irds_home):
    assert set(datasets.register_local()) >= {"local/cisi", "local/cacm", "local/cranfield-graded"}
    doc = next(iter(datasets.get_dataset("irds:local/cisi").get_corpus_iter(verbose=False)))
    assert doc["docno"] and doc["text"]


@pytest.mark.parametrize("year,queries,rows", [("2019", 43, 4300), ("2020", 54, 5400)])
def test_trec_dl_first_stage(irds_home, year, queries, rows):
    ds = datasets.get_dataset("dl19" if year == "2019" else "dl20")
    topics = ds.get_topics()
    res = trec_dl_bm25(year)(topics)
    assert res["qid"].nunique() == queries and len(res) == rows
    assert {"qid", "query", "docno", "score", "rank", "text"} <= set(res.columns)
    assert res["text"].str.len().gt(0).all()
    assert (res.groupby("qid")["rank"].min() == 0).all()


def test_trec_dl_first_stage_subset_and_empty(irds_home):
    first_stage = trec_dl_bm25("2019", text=False)
    one = pd.DataFrame({"qid": ["156493"], "query": ["do goldfish grow"]})
    assert first_stage(one)["qid"].unique().tolist() == ["156493"]
    empty = first_stage(pd.DataFrame({"qid": pd.Series([], dtype=str), "query": pd.Series([], dtype=str)}))
    assert empty.empty and {"qid", "docno", "score", "rank"} <= set(empty.columns)


def test_trec_dl_first_stage_names_missing_column(irds_home):
    with pytest.raises(Exception, match="qid"):
        trec_dl_bm25("2019", text=False)(pd.DataFrame({"query": ["x"]}))


def test_trec_dl_unknown_year():
    with pytest.raises(ValueError, match="TREC DL year"):
        trec_dl_bm25("2031")


def test_pt_get_dataset_sees_local_ids(irds_home):
    datasets.register_local()
    assert len(pt.get_dataset("irds:local/cacm").get_topics()) == 64
