"""TREC run files written so that evaluation tools and TIRA accept them: ids checked, one line per (query, document),
ranks from 1 in descending score order, and the file appears complete or not at all (written beside, then renamed).
``.gz`` names are compressed."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import pandas as pd

from pyterrier_tite.pt.validation import checked_id


def normalised_run(results: pd.DataFrame) -> pd.DataFrame:
    """``qid, docno, rank, score`` with ids as ``str``, each (qid, docno) once (its best score), queries in first-seen
    order, scores descending within a query (ties by docno, so the order is reproducible) and ranks from 1."""
    missing = {"qid", "docno", "score"} - set(results.columns)
    if missing:
        raise ValueError(f"a run needs columns qid, docno, score; missing {sorted(missing)}")
    run = pd.DataFrame(
        {
            "qid": [checked_id(q, "qid") for q in results["qid"]],
            "docno": [checked_id(d, "docno") for d in results["docno"]],
            "score": pd.to_numeric(results["score"], errors="raise").astype("float64"),
        }
    )
    if run["score"].isna().any():
        bad = run.loc[run["score"].isna()].iloc[0]
        raise ValueError(f"missing score for qid {bad['qid']!r}, docno {bad['docno']!r}")
    order = {q: i for i, q in enumerate(dict.fromkeys(run["qid"]))}
    run = run.assign(_q=run["qid"].map(order)).sort_values(["_q", "score", "docno"], ascending=[True, False, True])
    run = run.drop_duplicates(["qid", "docno"], keep="first").drop(columns="_q")
    run["rank"] = run.groupby("qid", sort=False).cumcount() + 1
    return run[["qid", "docno", "rank", "score"]].reset_index(drop=True)


def write_trec_run(results: pd.DataFrame, path: str | os.PathLike, system: str = "pyterrier-tite") -> pd.DataFrame:
    """Write ``results`` as ``qid Q0 docno rank score system`` lines (see :func:`normalised_run`); returns the rows
    written. The file is written beside ``path`` and renamed into place, so a crash never leaves half a run."""
    if not system or any(c.isspace() for c in system):
        raise ValueError(f"the system name must be one token without whitespace, got {system!r}")
    run = normalised_run(results)
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.with_name(f".{target.name}.writing-{os.getpid()}")
    lines = "".join(f"{q} Q0 {d} {r} {s!r} {system}\n" for q, d, r, s in run.itertuples(index=False, name=None))
    data = lines.encode("utf-8")
    try:
        with open(staging, "wb") as f:
            f.write(gzip.compress(data, mtime=0) if target.name.endswith(".gz") else data)
        os.replace(staging, target)
    finally:
        if staging.exists():
            staging.unlink()
    return run


def read_trec_run(path: str | os.PathLike) -> pd.DataFrame:
    """A TREC run file (``.gz`` too) as ``qid, docno, rank, score, name`` with string ids."""
    import pyterrier as pt

    return pt.io.read_results(str(path))
