"""Fine-tuning data for first-stage retrievers: each judged (query, relevant document) pair of a dataset is one
example, its hard negatives drawn from the query's top ``depth`` of a retriever the caller passes in, minus its
relevant documents; batches hold ``B`` queries with ``1 + k`` documents each, the layout of ``losses``."""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import pandas as pd
import torch

from pyterrier_tite.training.loop import epoch_rng


@dataclass
class Example:
    """One query with one relevant document and a pool of hard negatives (texts)."""

    qid: str
    query: str
    positive: str
    negatives: list[str]
    #: teacher score per text, when a teacher scored them
    teacher: dict[str, float] = field(default_factory=dict)


def doc_texts(dataset: str, fields: Sequence[str] | None = None) -> dict[str, str]:
    """``docno -> text`` of a collection, fields joined as BM25 indexes them (title + text for BEIR)."""
    from pyterrier_tite import datasets
    from pyterrier_tite.text import document_text, text_fields

    dataset_id = datasets.irds_id(dataset)
    fields = list(fields or text_fields(dataset_id))
    return {
        str(d["docno"]): document_text(d, fields)
        for d in datasets.get_dataset(dataset_id).get_corpus_iter(verbose=False)
    }


def hard_negative_examples(
    dataset: str,
    retriever,
    depth: int = 100,
    max_queries: int | None = None,
    qids: Sequence[str] | None = None,
    fields: Sequence[str] | None = None,
    seed: int = 42,
    allow_evaluation_data: bool = False,
) -> list[Example]:
    """Examples from a dataset's qrels (label > 0), negatives from ``retriever`` (e.g. ``bm25(dataset)``), for
    ``qids`` (default: all; ``max_queries``: a seeded sample); queries without a retrieved negative are dropped.
    Evaluation data is refused unless ``allow_evaluation_data`` (a bare ID means its train split)."""
    from pyterrier_tite import datasets

    dataset = datasets.check_training_data(dataset, uses="labels", allow=allow_evaluation_data)
    ds = datasets.get_dataset(dataset)
    topics = ds.get_topics().assign(qid=lambda f: f["qid"].astype(str))
    qrels = ds.get_qrels().assign(qid=lambda f: f["qid"].astype(str), docno=lambda f: f["docno"].astype(str))
    relevant = qrels[qrels["label"] > 0]
    topics = topics[topics["qid"].isin(set(relevant["qid"]))]
    if qids is not None:
        topics = topics[topics["qid"].isin({str(q) for q in qids})]
    if max_queries is not None and len(topics) > max_queries:
        topics = topics.sample(n=max_queries, random_state=seed)
    if topics.empty:
        return []
    retrieved = retrieved_docnos(retriever, topics, depth)
    texts = doc_texts(dataset, fields)
    positives = relevant.groupby("qid")["docno"].apply(list).to_dict()
    examples = []
    for qid, query in zip(topics["qid"], topics["query"].astype(str), strict=True):
        relevant_set = set(positives[qid])
        negatives = [texts[d] for d in retrieved.get(qid, []) if d not in relevant_set and d in texts]
        if not negatives:
            continue
        examples.extend(Example(qid, query, texts[d], negatives) for d in positives[qid] if d in texts)
    return examples


def retrieved_docnos(retriever, topics: pd.DataFrame, depth: int) -> dict[str, list[str]]:
    """``qid -> docnos`` of each query's top ``depth`` from ``retriever``: the pool of hard negatives."""
    run = retriever(topics[["qid", "query"]]).assign(qid=lambda f: f["qid"].astype(str))
    run = run[run["rank"] < depth] if "rank" in run.columns else run
    return run.groupby("qid")["docno"].apply(lambda s: [str(d) for d in s]).to_dict()


def add_teacher_scores(examples: list[Example], teacher, batch_size: int = 256) -> list[Example]:
    """Score every example's positive and negatives with a PyTerrier re-ranker (``qid, query, docno, text``)."""
    rows = []
    for i, ex in enumerate(examples):
        for j, text in enumerate([ex.positive, *ex.negatives]):
            rows.append({"qid": f"{i}", "query": ex.query, "docno": f"{i}:{j}", "text": text, "score": 0.0})
    frame = pd.DataFrame(rows)
    scored = pd.concat([teacher(frame.iloc[s : s + batch_size]) for s in range(0, len(frame), batch_size)])
    scores = scored.set_index("docno")["score"].loc[frame["docno"]]
    for docno, text, score in zip(frame["docno"], frame["text"], scores, strict=True):
        examples[int(docno.split(":")[0])].teacher[text] = float(score)
    return examples


class ContrastiveBatches:
    """``{queries, docs, teacher}`` batches of ``B`` queries x ``(1 + k)`` docs, order and negatives seeded by
    ``(seed, epoch)``; ``teacher``: ``[B, 1 + k]`` when every example of the batch has scores, else None."""

    def __init__(self, examples: Sequence[Example], batch_size: int, num_negatives: int = 1, seed: int = 42):
        if not examples:
            raise ValueError("no training examples (no query with a judged positive and a retrieved negative?)")
        if batch_size < 1 or num_negatives < 0:
            raise ValueError("batch_size must be >= 1 and num_negatives >= 0")
        self.examples = list(examples)
        self.batch_size = batch_size
        self.num_negatives = num_negatives
        self.seed = seed

    def __len__(self) -> int:
        return len(self.examples)

    def __call__(self, epoch: int, rank: int, world_size: int) -> Iterator[dict]:
        rng = epoch_rng(self.seed, epoch)
        order = list(range(len(self.examples)))
        rng.shuffle(order)
        draws = [self._negatives(self.examples[i], rng) for i in order]  # drawn for all ranks: same stream
        per_rank = list(zip(order, draws, strict=True))[rank::world_size]
        for start in range(0, len(per_rank), self.batch_size):
            chunk = per_rank[start : start + self.batch_size]
            queries = [self.examples[i].query for i, _ in chunk]
            groups = [[self.examples[i].positive, *negs] for i, negs in chunk]
            teacher = None
            if all(self.examples[i].teacher for i, _ in chunk):
                scores = [[self.examples[i].teacher[t] for t in g] for (i, _), g in zip(chunk, groups, strict=True)]
                teacher = torch.tensor(scores)
            yield {"queries": queries, "docs": [t for g in groups for t in g], "teacher": teacher}

    def _negatives(self, example: Example, rng: random.Random) -> list[str]:
        pool = example.negatives
        if len(pool) >= self.num_negatives:
            return rng.sample(pool, self.num_negatives)
        return [rng.choice(pool) for _ in range(self.num_negatives)]
