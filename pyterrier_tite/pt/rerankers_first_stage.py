"""Candidate lists for reranking and for training rerankers: BM25 top-k with a ``text`` column, and the qrels to
score them with (graded Cranfield qrels, since the raw Cleverdon codes run the wrong way)."""

from __future__ import annotations

import pandas as pd
import pyterrier as pt

from pyterrier_tite import datasets
from pyterrier_tite.pt.first_stage import TREC_DL, bm25, trec_dl_bm25
from pyterrier_tite.text import join_text_columns, text_fields

#: collections whose qrels for graded measures come from another ID
QRELS_ID = {"cranfield": "cranfield-graded"}


def candidates(dataset: str, depth: int = 100) -> pt.Transformer:
    """Queries -> BM25 top-``depth`` (qid, query, docno, score, rank, text). TREC DL uses the provided top-100."""
    if str(dataset) in TREC_DL:
        return trec_dl_bm25(dataset) % depth
    ds = datasets.get_dataset(dataset)
    fields = text_fields(datasets.irds_id(dataset))
    return bm25(dataset, num_results=depth) >> ds.text_loader(fields) >> pt.apply.generic(join_text_columns)


def topics_and_qrels(dataset: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Topics (qid, query) and qrels (qid, docno, label) of a collection or TREC DL year ('2019', 'dl20', ...)."""
    name = TREC_DL.get(str(dataset), dataset)
    topics = datasets.get_dataset(name).get_topics()
    qrels = datasets.get_dataset(QRELS_ID.get(name, name)).get_qrels()
    return topics[topics["qid"].isin(set(qrels["qid"]))], qrels
