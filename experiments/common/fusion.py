"""Score fusion of result frames that needs no training: the per-query min-max-normalised sum.

``pyterrier_alpha.fusion`` has reciprocal rank fusion (``rr_fusion``); its ``PerQueryMaxMinScore`` would do the scaling
below, but in pyterrier-alpha 0.16.5 it fails on import (``from .validate import validate``), so the scaling is here.
"""

from __future__ import annotations

import pandas as pd
import pyterrier as pt


def min_max_per_query(frame: pd.DataFrame, column: str = "score") -> pd.Series:
    """``column`` scaled to [0, 1] within each qid (a query whose scores are all equal gets 0)."""
    grouped = frame.groupby("qid")[column]
    low, high = grouped.transform("min"), grouped.transform("max")
    return ((frame[column] - low) / (high - low).where(high > low, 1.0)).fillna(0.0)


def normalised_sum(*frames: pd.DataFrame) -> pd.DataFrame:
    """Per query, each frame's scores min-max scaled to [0, 1], then summed (a document missing from a frame counts
    0 there); ranks recomputed. Frames need ``qid, query, docno, score``."""
    scaled = [frame[["qid", "query", "docno"]].assign(score=min_max_per_query(frame)) for frame in frames]
    merged = pd.concat(scaled).groupby(["qid", "query", "docno"], as_index=False, sort=False)["score"].sum()
    return pt.model.add_ranks(merged)
