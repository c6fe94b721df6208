"""Re-rankers trained with several seeds, compared on re-ranking BM25's top-``depth``: mean ± std over seeds of a
measure, and a paired t-test over queries (each query's measure averaged over the seeds) against a named comparison,
with the 95% confidence interval of the mean difference (a claim "A is within x of B" holds where the whole interval
lies inside ±x; a t-test that fails to reject is no evidence of equality).

One ``pt.Experiment`` (``perquery=True``) per collection scores every run; BM25 (the candidates themselves) is a row
of its own. TREC DL re-ranks the provided top-100 (see :func:`~pyterrier_tite.pt.first_stage.candidates`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import pyterrier as pt
from pyterrier.measures import nDCG
from scipy import stats

from experiments.common.score_cache import cached_scores
from pyterrier_tite.pt.first_stage import candidates, topics_and_qrels

BM25 = "BM25"


def table_columns(measure) -> list[str]:
    """The column order of a seed table (shared with the dense one)."""
    return ["dataset", "name", "seeds", str(measure), "std", "vs", "delta", "ci_low", "ci_high", "p"]


def per_query(frames: Mapping[str, pd.DataFrame], topics: pd.DataFrame, qrels: pd.DataFrame, measure) -> pd.DataFrame:
    """``[run, qid]`` table of ``measure`` (a query a run has no result for counts 0)."""
    names = list(frames)
    table = pt.Experiment(list(frames.values()), topics, qrels, [measure], names=names, perquery=True)
    wide = table.pivot_table(index="name", columns="qid", values="value", aggfunc="first")
    qids = sorted(set(topics["qid"].astype(str)) & set(qrels["qid"].astype(str)))
    return wide.reindex(index=names, columns=qids).fillna(0.0)


def summarise(
    values: pd.DataFrame, systems: Mapping[str, Sequence[str]], comparisons: Mapping[str, Sequence[str]]
) -> list[dict]:
    """Rows ``name, seeds, mean, std, vs, delta, ci_low, ci_high, p`` from per-query values of each run (``systems``:
    name -> its runs' names): one row per comparison of ``comparisons[name]`` (one with ``vs`` None when it has none).
    ``std`` is over the seeds' means (NaN for one seed); ``p`` the paired t-test of the seed-averaged per-query values
    and ``ci_low, ci_high`` the 95% t-interval of their mean difference."""
    averaged = {name: values.loc[list(runs)].mean(axis=0) for name, runs in systems.items()}
    rows = []
    for name, runs in systems.items():
        means = values.loc[list(runs)].mean(axis=1).to_numpy()
        std = means.std(ddof=1) if len(runs) > 1 else np.nan
        base = {"name": name, "seeds": len(runs), "mean": means.mean(), "std": std}
        against = list(comparisons.get(name, []))
        if not against:
            rows.append({**base, "vs": None, "delta": np.nan, "ci_low": np.nan, "ci_high": np.nan, "p": np.nan})
        for other in against:
            if other not in averaged:
                raise ValueError(f"{name!r} is compared with {other!r}, which is not one of {list(systems)}")
            a, b = averaged[name], averaged[other]
            p = float(stats.ttest_rel(a, b).pvalue) if len(a) > 1 and not np.allclose(a, b) else 1.0
            low, high = paired_interval(a.to_numpy() - b.to_numpy())
            rows.append(
                {**base, "vs": other, "delta": float(a.mean() - b.mean()), "ci_low": low, "ci_high": high, "p": p}
            )
    return rows


def paired_interval(differences: np.ndarray, confidence: float = 0.95) -> tuple[float, float]:
    """The ``confidence`` t-interval of the mean of per-query ``differences`` (NaN for fewer than two queries)."""
    n = len(differences)
    if n < 2:
        return np.nan, np.nan
    mean = float(np.mean(differences))
    half = float(stats.t.ppf(0.5 + confidence / 2, n - 1) * np.std(differences, ddof=1) / np.sqrt(n))
    return mean - half, mean + half


def rerank_experiment(
    systems: Mapping[str, Sequence[pt.Transformer]],
    collections: Sequence[str],
    *,
    depth: int = 100,
    comparisons: Mapping[str, Sequence[str]] | None = None,
    measure=nDCG @ 10,
    with_bm25: bool = True,
    score_cache: str | None = None,
    verbose: bool = False,
) -> pd.DataFrame:
    """One block of rows per collection: ``dataset, name, seeds, <measure>, std, vs, delta, ci_low, ci_high, p``.

    ``systems``: name -> its re-rankers (one per seed); ``comparisons``: name -> the names it is tested against
    (``'BM25'`` is available when ``with_bm25``); ``score_cache``: a folder where re-rankers loaded from folders keep
    their scores for the next evaluation (:mod:`~experiments.common.score_cache`; ``verbose`` reports its hits)."""
    comparisons = dict(comparisons or {})
    tables = []
    for dataset in collections:
        topics, qrels = topics_and_qrels(dataset)
        first_stage = candidates(dataset, depth)(topics)
        frames = {BM25: first_stage.drop(columns=["text"])} if with_bm25 else {}
        runs = {BM25: [BM25]} if with_bm25 else {}
        for name, models in systems.items():
            runs[name] = []
            for i, model in enumerate(models):
                run_name = f"{name} #{i}"
                with cached_scores(model, score_cache, dataset, verbose) as scorer:
                    frames[run_name] = scorer(first_stage).drop(columns=["text"])
                runs[name].append(run_name)
        values = per_query(frames, topics, qrels, measure)
        rows = summarise(values, runs, comparisons)
        tables.append(pd.DataFrame(rows).assign(dataset=dataset))
    table = pd.concat(tables, ignore_index=True).rename(columns={"mean": str(measure)})
    return table[table_columns(measure)]
