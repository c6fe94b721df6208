"""Cross-validation folds over the queries of collections without training queries (vaswani, cranfield): model ``i``
trains on every query outside fold ``i`` and answers fold ``i``'s, so the concatenated run covers all queries. Folds
depend only on the query ids, their number and a seed, so training and evaluation agree without passing a file."""

from __future__ import annotations

import random
from collections.abc import Iterable


def parse_fold(spec: str) -> tuple[int, int]:
    """``'2/5'`` -> ``(2, 5)``: fold 2 (1-based) of 5."""
    try:
        fold, folds = (int(part) for part in spec.split("/"))
    except ValueError:
        raise ValueError(f"a fold is written I/N (e.g. 1/2), got {spec!r}") from None
    if folds < 2 or not 1 <= fold <= folds:
        raise ValueError(f"fold {spec!r}: need N >= 2 and 1 <= I <= N")
    return fold, folds


def assign_folds(qids: Iterable[str], folds: int, seed: int = 0) -> dict[str, int]:
    """Each distinct query id -> its fold (1..folds): a seeded shuffle dealt round-robin (sizes differ by <= 1)."""
    if folds < 2:
        raise ValueError(f"cross-validation needs at least 2 folds, got {folds}")
    ordered = sorted({str(q) for q in qids})
    if len(ordered) < folds:
        raise ValueError(f"{len(ordered)} queries cannot fill {folds} folds")
    random.Random(seed).shuffle(ordered)
    return {qid: position % folds + 1 for position, qid in enumerate(ordered)}


def training_qids(qids: Iterable[str], spec: str, seed: int = 0) -> list[str]:
    """The queries a model for fold ``spec`` (``I/N``) is trained on: all but fold I's."""
    fold, folds = parse_fold(spec)
    return sorted(q for q, f in assign_folds(qids, folds, seed).items() if f != fold)
