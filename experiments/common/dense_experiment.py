"""One ``pt.Experiment`` per collection for dense bi-encoders side by side: full retrieval from a cached FlexIndex on
the collections with all their documents, re-ranking of the provided BM25 top-100 on TREC DL (whose mirrored
passages are only those candidates), with BM25 as a reference row and a paired t-test against a baseline model.

Indexes live under ``index_root/<model key>/<dataset>.flex`` and are built once (all or nothing), so a second
run of the same comparison only encodes queries; the key names the model and changes with its checkpoint (source
and weights' modification time), so a retrained model is indexed again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd
import pyterrier as pt
from pyterrier.measures import nDCG

from experiments.common.rerank_experiment import BM25, per_query, summarise, table_columns
from pyterrier_tite import datasets
from pyterrier_tite.pt.biencoder import DenseBiEncoder
from pyterrier_tite.pt.dense_pipeline import RERANKED, dense_pipeline
from pyterrier_tite.pt.first_stage import bm25, trec_dl_bm25


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
    ci_low, ci_high, p`` as in :func:`~experiments.common.rerank_experiment.rerank_experiment` (mean ± std over the
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
