"""The loop behind every re-ranker's ``transform``, free of PyTerrier so that torch-only scripts score exactly as the
transformer does."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np
import torch

from pyterrier_tite.devices import autocast


def score_by_query(
    scorer: Callable[[list[list[int]], list[list[list[int]]]], torch.Tensor],
    inputs,
    qids: Sequence[str],
    query_ids: Mapping[str, list[int]],
    doc_ids: Sequence[list[int]],
    batch_size: int,
    device: str | torch.device,
    precision: str,
    progress: Callable[[Iterable], Iterable] | None = None,
) -> np.ndarray:
    """float64 scores of the pairs ``(query_ids[qids[i]], doc_ids[i])`` in input order. A sparse cross-encoder (the
    default for other callables) scores by query, longest docs first (a query is encoded once per batch); a
    full-attention one scores longest pairs first across queries (a batch pads to its longest). ``progress`` wraps
    the batch starts."""
    order = {q: i for i, q in enumerate(dict.fromkeys(qids))}
    lengths = np.array([len(d) for d in doc_ids])
    if getattr(scorer, "is_sparse", True):
        rows = np.lexsort((-lengths, np.array([order[q] for q in qids])))
    else:
        pair_lengths = lengths + np.array([len(query_ids[q]) for q in qids])
        rows = np.argsort(-pair_lengths, kind="stable")
    scores = np.zeros(len(qids), dtype="float64")
    starts: Iterable[int] = range(0, len(rows), batch_size)
    if progress is not None:
        starts = progress(starts)
    with torch.no_grad(), autocast(device, precision):
        for start in starts:
            groups: dict[str, list[int]] = {}
            for i in rows[start : start + batch_size]:
                groups.setdefault(qids[i], []).append(int(i))
            queries = [query_ids[q] for q in groups]
            docs = [
                [inputs.fit_doc(q, doc_ids[i]) for i in members]
                for q, members in zip(queries, groups.values(), strict=True)
            ]
            scores[np.concatenate(list(groups.values()))] = scorer(queries, docs).float().cpu().numpy()
    return scores
