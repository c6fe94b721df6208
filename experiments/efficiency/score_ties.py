"""Ties among a re-ranker's scores, per precision, measured in one run: how many of each query's candidates share their
score with another candidate of the same query (their order is then arbitrary), and what the precision does to
nDCG@10 and to the time.

Re-ranks BM25's top-``depth`` of a collection (TREC DL: the provided top-100) with a model loaded from a folder, hub id
or start point, once per precision, e.g.::

    python -m experiments.efficiency.score_ties \
        runs/rerankers/minilm-distilled-lr2e-4/sparse-w4/seed-43 --collection dl20

Writes each run's scores to ``--out DIR/<precision>.csv`` when given (to compare two code versions' scores).
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import pandas as pd
import pyterrier as pt
import torch
from pyterrier.measures import nDCG

import pyterrier_tite as t
from pyterrier_tite.pt.first_stage import candidates, topics_and_qrels


def tied_per_query(frame: pd.DataFrame) -> pd.Series:
    """Per query: the number of candidates whose score another candidate of that query also has."""
    return frame.groupby("qid")["score"].apply(lambda s: int(s.duplicated(keep=False).sum()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="model folder, hub id or start point (anything t.load takes)")
    parser.add_argument("--collection", default="dl20", help="dataset alias or ir_datasets id (default dl20)")
    parser.add_argument("--depth", type=int, default=100)
    parser.add_argument("--precisions", default="fp32,bf16", help="comma-separated: fp32, bf16, fp16")
    parser.add_argument("--max-queries", type=int, default=None, help="only the first N queries (sorted by qid)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default=None, help="folder for <precision>.csv with every score")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    topics, qrels = topics_and_qrels(args.collection)
    if args.max_queries:
        topics = topics.sort_values("qid").head(args.max_queries)
    first_stage = candidates(args.collection, args.depth)(topics)
    print(f"{args.collection}: {topics['qid'].nunique()} queries, {len(first_stage)} pairs; model {args.model}")
    rows, scores = [], {}
    for precision in args.precisions.split(","):
        model = t.load(args.model, dtype=precision, batch_size=args.batch_size)
        start = time.perf_counter()
        ranked = model(first_stage)
        seconds = time.perf_counter() - start
        ties = tied_per_query(ranked)
        run = ranked.drop(columns=["text"])
        ndcg = pt.Experiment([run], topics, qrels, [nDCG @ 10], names=[precision]).iloc[0][str(nDCG @ 10)]
        scores[precision] = ranked.set_index(["qid", "docno"])["score"].sort_index()
        with_ties = f"{int((ties > 0).sum())} / {len(ties)}"
        rows.append({"precision": precision, "seconds": round(seconds, 1), "tied per query": round(ties.mean(), 2),
                     "queries with ties": with_ties, "nDCG@10": round(ndcg, 6)})
        if args.out:
            os.makedirs(args.out, exist_ok=True)
            ranked[["qid", "docno", "score"]].to_csv(os.path.join(args.out, f"{precision}.csv"), index=False)
    print(pd.DataFrame(rows).to_string(index=False))
    if "fp32" in scores:
        for precision, values in scores.items():
            if precision != "fp32":
                diff = np.abs(values.to_numpy() - scores["fp32"].to_numpy())
                print(f"{precision} vs fp32: max |difference| {diff.max():.3g}, mean {diff.mean():.3g}")


if __name__ == "__main__":
    main()
