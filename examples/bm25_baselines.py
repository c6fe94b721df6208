"""BM25 (PISA, k1=0.9, b=0.4) on every full collection of the offline mirror, plus the provided TREC DL runs.

Run: python examples/bm25_baselines.py   (prints the README's BM25 table as Markdown)
"""

from __future__ import annotations

import argparse

import pandas as pd
import pyterrier as pt
from pyterrier.measures import AP, R, nDCG

import pyterrier_tite as t
from experiments.common.tables import markdown_table

# (label, index dataset, evaluation dataset)
FULL = [
    ("vaswani", "vaswani", "vaswani"),
    ("cranfield", "cranfield", "cranfield"),
    ("cranfield (graded qrels)", "cranfield", "cranfield-graded"),
    ("scifact test (title+text)", "scifact", "scifact"),
    ("cisi", "cisi", "cisi"),
    ("cacm", "cacm", "cacm"),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.parse_args()
    rows = []
    for label, index_name, eval_name in FULL:
        ds = t.datasets.get_dataset(eval_name)
        res = pt.Experiment([t.bm25(index_name)], ds.get_topics(), ds.get_qrels(), [nDCG @ 10, AP, R @ 100, "mrt"])
        rows.append({"collection": label, **res.iloc[0].drop("name").to_dict()})
    for year in ("2019", "2020"):
        ds = t.datasets.get_dataset("dl19" if year == "2019" else "dl20")
        res = pt.Experiment(
            [t.trec_dl_bm25(year, text=False)], ds.get_topics(), ds.get_qrels(), [nDCG @ 10, AP, R @ 100]
        )
        rows.append({"collection": f"TREC DL {year} (provided top-100 run)", **res.iloc[0].drop("name").to_dict()})
    table = pd.DataFrame(rows)[["collection", "nDCG@10", "AP", "R@100", "mrt"]]
    print(markdown_table(table))


if __name__ == "__main__":
    main()
