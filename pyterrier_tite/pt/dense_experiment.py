"""One ``pt.Experiment`` per collection for dense bi-encoders side by side: full retrieval from a cached FlexIndex on
the collections with all their documents, re-ranking of the provided BM25 top-100 on TREC DL (whose mirrored
passages are only those candidates), with BM25 as a reference row and a paired t-test against a baseline model.

Indexes live under ``index_root/<model key>/<dataset>.flex`` and are built once (all or nothing), so a second
run of the same comparison only encodes queries; the key names the model and changes with its checkpoint (source
and weights' modification time), so a retrained model is indexed again.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import pandas as pd
import pyterrier as pt
from pyterrier.measures import nDCG

from pyterrier_tite import datasets
from pyterrier_tite.pt.biencoder import DenseBiEncoder
from pyterrier_tite.pt.first_stage import bm25, trec_dl_bm25
from pyterrier_tite.pt.model_keys import model_key, slug
from pyterrier_tite.pt.rerank_experiment import BM25, per_query, summarise, table_columns
from pyterrier_tite.text import document_text, text_fields

#: the TREC DL aliases whose mirrored passages are only the BM25 candidates: re-ranked, not retrieved
RERANKED = {"dl19": "2019", "dl20": "2020", datasets.ALIASES["dl19"]: "2019", datasets.ALIASES["dl20"]: "2020"}


def dense_index_path(model: DenseBiEncoder, name: str, dataset: str, index_root: str) -> str:
    """Where :func:`dense_pipeline` caches ``model``'s FlexIndex of ``dataset`` (under :func:`model_key`), so other
    tools read the same vectors."""
    key = model_key(name, model.source or id(model))
    return os.path.join(index_root, key, slug(datasets.irds_id(dataset)) + ".flex")


def dense_pipeline(model: DenseBiEncoder, name: str, dataset: str, index_root: str, verbose: bool = True):
    """``model`` as a ranker on ``dataset``: query encoder >> its FlexIndex (built on first use, at
    :func:`dense_index_path`), or BM25 top-100 >> its scorer on TREC DL."""
    import pyterrier_dr

    if dataset in RERANKED:
        return trec_dl_bm25(RERANKED[dataset]) >> model.scorer()
    dataset_id = datasets.irds_id(dataset)
    index = pyterrier_dr.FlexIndex(dense_index_path(model, name, dataset, index_root))
    if not index.built():
        fields = text_fields(dataset_id)
        corpus = datasets.get_dataset(dataset_id).get_corpus_iter(verbose=verbose)
        (model >> index).index({"docno": d["docno"], "text": document_text(d, fields)} for d in corpus)
    return model.query_encoder() >> index.np_retriever(num_results=1000)


def dense_experiment(
    models: Mapping[str, DenseBiEncoder],
    collections: Sequence[str],
    index_root: str,
    *,
    baseline: str | None = None,
    measures: Sequence = (nDCG @ 10,),
    with_bm25: bool = True,
    verbose: bool = True,
) -> pd.DataFrame:
    """Rows ``dataset, name, <measures>`` (+ p-values against ``baseline`` when given): one ``pt.Experiment`` per
    collection over BM25 (when ``with_bm25``) and ``models``."""
    if baseline is not None and baseline not in models:
        raise ValueError(f"baseline {baseline!r} is not one of the models {list(models)}")
    tables = []
    for dataset in collections:
        ds = datasets.get_dataset(datasets.irds_id(dataset))
        systems, names = [], []
        if with_bm25:
            systems.append(trec_dl_bm25(RERANKED[dataset], text=False) if dataset in RERANKED else bm25(dataset))
            names.append("BM25")
        for name, model in models.items():
            systems.append(dense_pipeline(model, name, dataset, index_root, verbose))
            names.append(name)
        table = pt.Experiment(
            systems, ds.get_topics(), ds.get_qrels(), list(measures), names=names,
            baseline=names.index(baseline) if baseline is not None else None, round=4,
        )  # fmt: skip
        table.insert(0, "dataset", dataset)
        tables.append(table)
    return pd.concat(tables, ignore_index=True)


def dense_seed_experiment(
    systems: Mapping[str, Sequence[DenseBiEncoder]],
    collections: Sequence[str],
    index_root: str,
    *,
    comparisons: Mapping[str, Sequence[str]] | None = None,
    measure=nDCG @ 10,
    with_bm25: bool = True,
    verbose: bool = True,
) -> pd.DataFrame:
    """Dense models trained with several seeds, side by side: rows ``dataset, name, seeds, <measure>, std, vs, delta,
    ci_low, ci_high, p`` as in :func:`~pyterrier_tite.pt.rerank_experiment.rerank_experiment` (mean ± std over the
    seeds' means, paired t-test and 95% interval of the difference over queries of the seed-averaged values against
    each name in ``comparisons[name]``; ``'BM25'`` is there
    when ``with_bm25``). Each seed's model ranks through :func:`dense_pipeline` (its own cached FlexIndex)."""
    comparisons = dict(comparisons or {})
    tables = []
    for dataset in collections:
        ds = datasets.get_dataset(datasets.irds_id(dataset))
        topics, qrels = ds.get_topics(), ds.get_qrels()
        frames, runs = {}, {}
        if with_bm25:
            first = trec_dl_bm25(RERANKED[dataset], text=False) if dataset in RERANKED else bm25(dataset)
            frames[BM25], runs[BM25] = first(topics), [BM25]
        for name, models in systems.items():
            runs[name] = []
            for i, model in enumerate(models):
                run_name = f"{name} #{i}"
                frames[run_name] = dense_pipeline(model, run_name, dataset, index_root, verbose)(topics)
                runs[name].append(run_name)
        values = per_query(frames, topics, qrels, measure)
        tables.append(pd.DataFrame(summarise(values, runs, comparisons)).assign(dataset=dataset))
    table = pd.concat(tables, ignore_index=True).rename(columns={"mean": str(measure)})
    return table[table_columns(measure)]
