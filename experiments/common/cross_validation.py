"""A PyTerrier transformer that answers each query with the model of its cross-validation fold.

With ``k`` models, model ``i`` fine-tuned on every query outside fold ``i`` (``--hold-out-fold i/k``),
``CrossValidated`` sends each query to the model that never saw it, so ``pt.Experiment`` scores one run over the whole
topic set, directly comparable with BM25 on the same topics.
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd
import pyterrier as pt


class CrossValidated(pt.Transformer):
    """Route every query (by ``qid``) to the pipeline of its fold and concatenate the results."""

    def __init__(self, pipelines: Mapping[int, pt.Transformer], fold_of: Mapping[str, int]):
        missing = set(fold_of.values()) - set(pipelines)
        if missing:
            raise ValueError(f"no pipeline for fold(s) {sorted(missing)}; pipelines exist for {sorted(pipelines)}")
        self.pipelines = dict(pipelines)
        self.fold_of = {str(q): f for q, f in fold_of.items()}

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        if "qid" not in inp.columns:
            raise KeyError(f"CrossValidated routes by qid, which the input lacks (columns: {list(inp.columns)})")
        qids = inp["qid"].astype(str)
        unknown = sorted(set(qids) - set(self.fold_of))
        if unknown:
            raise KeyError(f"{len(unknown)} queries have no fold (e.g. {unknown[:3]}): they are not in the fold split")
        folds = qids.map(self.fold_of)
        parts = [self.pipelines[fold](inp[folds == fold]) for fold in sorted(set(folds))]
        if not parts:  # an empty input: any fold's pipeline gives the right (empty) columns
            return next(iter(self.pipelines.values()))(inp)
        return pd.concat(parts, ignore_index=True)

    def __eq__(self, other) -> bool:
        """Equal routers send every qid to equal pipelines (``pt.Experiment(plan='tree')`` shares them)."""
        return type(other) is type(self) and self.fold_of == other.fold_of and self.pipelines == other.pipelines

    def __hash__(self) -> int:
        return hash((type(self), frozenset(self.fold_of.items()), tuple(sorted(self.pipelines.items()))))

    def __repr__(self) -> str:
        return f"CrossValidated({len(self.pipelines)} folds)"
