"""Fine-tuning samples from real data: judged queries, hard negatives from a first-stage run, teacher scores from
any PyTerrier scorer (a cross-encoder, a bi-encoder's ``scorer()``), or labels when there is no teacher."""

from __future__ import annotations

import random
from collections.abc import Callable

import pandas as pd

from pyterrier_tite.text import DEFAULT_FIELDS, document_text
from pyterrier_tite.training.biencoder import Sample


def build_samples(
    topics: pd.DataFrame,
    qrels: pd.DataFrame,
    run: pd.DataFrame,
    doc_text: Callable[[str], str | None],
    num_negatives: int = 7,
    teacher=None,
    min_label: int = 1,
    seed: int = 42,
) -> list[Sample]:
    """One sample per judged (query, positive) pair: the positive and the ``num_negatives`` best-ranked unjudged-or-
    non-relevant docs of ``run`` (BM25 hard negatives). Scores are the teacher's (``qid, query, docno, text`` ->
    ``score``) or 1 / 0 labels. Pairs whose texts are missing are skipped."""
    rng = random.Random(seed)
    topics = topics.assign(qid=topics["qid"].astype(str))
    qrels = qrels.assign(qid=qrels["qid"].astype(str), docno=qrels["docno"].astype(str))
    run = run.assign(qid=run["qid"].astype(str), docno=run["docno"].astype(str)).sort_values(["qid", "rank"])
    positives = qrels[qrels["label"] >= min_label].groupby("qid")["docno"].apply(list).to_dict()
    judged_relevant = {q: set(d) for q, d in positives.items()}
    candidates = run.groupby("qid")["docno"].apply(list).to_dict()
    rows = []
    for qid, query in zip(topics["qid"], topics["query"], strict=True):
        negatives = [d for d in candidates.get(qid, []) if d not in judged_relevant.get(qid, set())]
        negatives = [d for d in negatives if doc_text(d)][:num_negatives]
        if len(negatives) < num_negatives:
            continue
        for pos in positives.get(qid, []):
            if doc_text(pos):
                rows.append((qid, query, [pos, *negatives]))
    rng.shuffle(rows)
    if teacher is None:
        return [Sample(q, [doc_text(d) for d in docs], [1.0] + [0.0] * num_negatives) for _, q, docs in rows]
    frame = pd.DataFrame(
        [
            {"qid": f"{i}", "query": q, "docno": d, "text": doc_text(d), "slot": j}
            for i, (_, q, docs) in enumerate(rows)
            for j, d in enumerate(docs)
        ]
    )
    scored = teacher(frame).sort_values(["qid", "slot"])
    by_sample = scored.groupby("qid")["score"].apply(list).to_dict()
    return [
        Sample(q, [doc_text(d) for d in docs], [float(s) for s in by_sample[f"{i}"]])
        for i, (_, q, docs) in enumerate(rows)
    ]


def corpus_text(dataset, fields: tuple[str, ...] = DEFAULT_FIELDS) -> Callable[[str], str | None]:
    """``docno -> text`` over a PyTerrier/irds dataset's corpus (the document-text rule of :mod:`pyterrier_tite.text`
    over ``fields``)."""
    return {str(doc["docno"]): document_text(doc, fields) for doc in dataset.get_corpus_iter(verbose=False)}.get
