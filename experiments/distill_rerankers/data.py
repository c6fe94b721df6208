"""Training data of the cross-encoder distillation study: training queries, their BM25 candidates, and an offline
teacher's scores of every candidate (the library's ``train-reranker`` takes a teacher run file instead).

Sources of training queries (never a test query of an evaluation collection):

- ``msmarco-passage/dev/small``: the 6,980 real MS MARCO dev queries. Their judged passages are mostly not among the
  9,658 mirrored passages, so the candidates are BM25's top-``depth`` over the mirrored passages and the *teacher*,
  not the qrels, says which of them is better: the student learns the teacher's ranking of hard, topical candidates.
- ``ict:<collection>``: one Inverse-Cloze pseudo-query per sampled document of a collection
  (:func:`~pyterrier_tite.training.pseudo_queries.cloze_pair`), candidates from BM25 over that collection.

The student is trained with MarginMSE against the teacher's scores (``train_reranker(loss='margin_mse')``): each
group pairs one of the teacher's top ``positives`` candidates with negatives sampled from the rest.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd

from pyterrier_tite.training.pseudo_queries import cloze_pair
from pyterrier_tite.training.splade_data import doc_texts

MSMARCO_QUERIES = "msmarco-passage/dev/small"
#: the mirrored MS MARCO passages (every msmarco-passage ID holds the same 9,658)
MSMARCO_PASSAGES = "msmarco-passage/trec-dl-2019/judged"  # = experiments.common.training_bm25.MIRRORED_PASSAGES
DEFAULT_SOURCES = (MSMARCO_QUERIES,)


#: ``retriever_for(collection, depth)``: a first stage (``qid, query`` -> ``qid, docno, rank``) over a collection
RetrieverFor = Callable[[str, int], Callable[[pd.DataFrame], pd.DataFrame]]


def source_queries(source: str, max_queries: int | None, seed: int) -> tuple[pd.DataFrame, str]:
    """``(topics, collection)`` of one source: its queries (a seeded sample of ``max_queries``) and the collection
    their candidates come from."""
    from pyterrier_tite import datasets

    rng = random.Random(seed)
    if source.startswith("ict:"):
        collection = datasets.check_training_data(source[len("ict:") :], uses="documents")  # said: documents only
        texts = doc_texts(collection)
        docnos = sorted(texts)
        if max_queries is not None and len(docnos) > max_queries:
            docnos = sorted(rng.sample(docnos, max_queries))
        rows = []
        for docno in docnos:
            pair = cloze_pair(texts[docno], rng)
            if pair is not None:
                rows.append({"qid": f"ict-{docno}", "query": pair[0]})
        return pd.DataFrame(rows, columns=["qid", "query"]), collection
    if source != MSMARCO_QUERIES:
        raise ValueError(f"unknown source {source!r}: expected {MSMARCO_QUERIES!r} or 'ict:<collection>'")
    # a dev split, so evaluation data by the library's rule: allowed knowingly (said at run time) because no result
    # is reported on it (the studies evaluate on TREC DL and the small collections) and its qrels are never read
    source = datasets.check_training_data(source, uses="labels", allow=True)
    topics = datasets.get_dataset(source).get_topics()[["qid", "query"]]
    if max_queries is not None and len(topics) > max_queries:
        topics = topics.iloc[sorted(rng.sample(range(len(topics)), max_queries))]
    return topics.reset_index(drop=True), MSMARCO_PASSAGES


def training_candidates(
    sources: Sequence[str],
    retriever_for: RetrieverFor,
    depth: int = 30,
    max_queries: int | None = None,
    seed: int = 42,
) -> pd.DataFrame:
    """``qid, query, docno, text, rank, source`` for every training query of ``sources``: the top-``depth`` of
    ``retriever_for(collection, depth)`` (the command passes BM25; MS MARCO's over the mirrored passages). Each qid is
    prefixed with its source, so queries of different sources never share one."""
    for source in sources:  # refuse an unknown source before any retrieval
        if not source.startswith("ict:") and source != MSMARCO_QUERIES:
            raise ValueError(f"unknown source {source!r}: expected {MSMARCO_QUERIES!r} or 'ict:<collection>'")
    frames = []
    for source in sources:
        topics, collection = source_queries(source, max_queries, seed)
        if len(topics) == 0:
            continue
        texts = doc_texts(collection)
        run = retriever_for(collection, depth)(topics)
        run = run[run["rank"] < depth]
        original = dict(zip(topics["qid"].astype(str), topics["query"].astype(str), strict=True))
        run = run.assign(
            query=run["qid"].astype(str).map(original),
            qid=source + "/" + run["qid"].astype(str),
            text=run["docno"].astype(str).map(texts),
            source=source,
        )
        frames.append(run[["qid", "query", "docno", "text", "rank", "source"]].dropna(subset=["text"]))
    if not frames:
        raise ValueError(f"no training query in {list(sources)}")
    return pd.concat(frames, ignore_index=True)


def teacher_labels(scored: pd.DataFrame, positives: int = 3) -> pd.DataFrame:
    """qrels ``qid, docno, label``: label 1 for each query's ``positives`` best candidates by the teacher's
    ``score`` (ties broken by docno, so the labels do not depend on row order), else 0."""
    if positives < 1:
        raise ValueError("positives must be >= 1")
    ordered = scored.sort_values(["qid", "score", "docno"], ascending=[True, False, True], kind="stable")
    rank = ordered.groupby("qid").cumcount()
    return ordered.assign(label=(rank < positives).astype(int))[["qid", "docno", "label"]]


def teacher_frame(scored: pd.DataFrame) -> pd.DataFrame:
    """``qid, docno, score`` of the teacher, as ``train_reranker(teacher=...)`` takes it."""
    return scored[["qid", "docno", "score"]].astype({"score": np.float64})
