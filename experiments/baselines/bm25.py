"""BM25 (PISA, k1=0.9, b=0.4) on every full collection of the offline mirror, plus the provided TREC DL runs.

Run ``python -m experiments.baselines`` (prints the BM25 table as Markdown; ``--collections cranfield,dl19`` for some).
"""

from __future__ import annotations

import argparse

import pandas as pd
import pyterrier as pt
from pyterrier.measures import AP, R, nDCG

import pyterrier_tite as t
from experiments.common.config import parse_with_config
from experiments.common.recipes import names
from experiments.common.tables import markdown_table

# evaluation dataset -> (label, index dataset)
FULL = {
    "vaswani": ("vaswani", "vaswani"),
    "cranfield": ("cranfield", "cranfield"),
    "cranfield-graded": ("cranfield (graded qrels)", "cranfield"),
    "scifact": ("scifact test (title+text)", "scifact"),
    "cisi": ("cisi", "cisi"),
    "cacm": ("cacm", "cacm"),
}
#: the provided BM25 top-100 runs of TREC DL
TREC_DL = {"dl19": "2019", "dl20": "2020"}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m experiments.baselines", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--collections",
        default=",".join([*FULL, *TREC_DL]),
        help=f"comma list of {', '.join([*FULL, *TREC_DL])} (default: all)",
    )
    return parser


def bm25_table(collections: list[str]) -> pd.DataFrame:
    """One row per collection: nDCG@10, AP, R@100 and (full collections) the mean response time in ms."""
    unknown = [c for c in collections if c not in FULL and c not in TREC_DL]
    if unknown:
        raise SystemExit(f"unknown collection(s) {unknown}: expected {', '.join([*FULL, *TREC_DL])}")
    rows = []
    for name in collections:
        ds = t.datasets.get_dataset(name)
        if name in FULL:
            label, index_name = FULL[name]
            res = pt.Experiment([t.bm25(index_name)], ds.get_topics(), ds.get_qrels(), [nDCG @ 10, AP, R @ 100, "mrt"])
        else:
            year = TREC_DL[name]
            label = f"TREC DL {year} (provided top-100 run)"
            res = pt.Experiment(
                [t.trec_dl_bm25(year, text=False)], ds.get_topics(), ds.get_qrels(), [nDCG @ 10, AP, R @ 100]
            )
        rows.append({"collection": label, **res.iloc[0].drop("name").to_dict()})
    return pd.DataFrame(rows).reindex(columns=["collection", "nDCG@10", "AP", "R@100", "mrt"])


def main(argv: list[str] | None = None) -> int:
    args = parse_with_config(build_parser(), argv)
    print(markdown_table(bm25_table(names(args.collections))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
