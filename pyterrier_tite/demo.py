"""The main job: a ``pt.Experiment`` on a collection with every first stage the package offers."""

from __future__ import annotations

import pandas as pd
import pyterrier as pt
from pyterrier.measures import AP, R, nDCG

from pyterrier_tite import datasets
from pyterrier_tite.pt.first_stage import bm25

MEASURES = [nDCG @ 10, AP, R @ 100, "mrt"]


def run_demo(dataset: str = "vaswani") -> pd.DataFrame:
    """Index (once, cached) and evaluate on ``dataset``; returns the experiment table."""
    ds = datasets.get_dataset(dataset)
    systems = [bm25(dataset)]
    names = ["BM25 (PISA, k1=0.9, b=0.4)"]
    return pt.Experiment(systems, ds.get_topics(), ds.get_qrels(), MEASURES, names=names, round=4)
