"""Pseudo-queries from a collection's own documents (the Inverse Cloze Task, Lee et al., ACL 2019) for collections
with too few queries to train on and still test (Vaswani 93, Cranfield 225): a sentence of a document is the query,
the rest its positive (the sentence kept in it with probability ``keep``, the paper's 10%), hard negatives the
query's hits from a retriever minus its own document. No real query or judgement is used."""

from __future__ import annotations

import random
import re
from collections.abc import Sequence

import pandas as pd

from pyterrier_tite.training.splade_data import Example, doc_texts, retrieved_docnos

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def cloze_pair(text: str, rng: random.Random, keep: float = 0.1, span_words: int = 12) -> tuple[str, str] | None:
    """``(pseudo-query, positive)``: a random sentence of 4+ words, else (one-sentence abstracts) a random span of
    ``span_words`` words; None when the document is too short to split."""
    sentences = [s for s in _SENTENCE_END.split(text.strip()) if s]
    if len(sentences) >= 2:
        candidates = [i for i, s in enumerate(sentences) if len(s.split()) >= 4]
        if candidates:
            i = rng.choice(candidates)
            rest = sentences if rng.random() < keep else sentences[:i] + sentences[i + 1 :]
            return sentences[i], " ".join(rest)
    words = text.split()
    if len(words) < 2 * span_words:
        return None
    start = rng.randrange(len(words) - span_words + 1)
    query = " ".join(words[start : start + span_words])
    rest = words if rng.random() < keep else words[:start] + words[start + span_words :]
    return query, " ".join(rest)


def pseudo_query_examples(
    dataset: str,
    retriever,
    depth: int = 100,
    max_docs: int | None = None,
    keep: float = 0.1,
    seed: int = 42,
    fields: Sequence[str] | None = None,
) -> list[Example]:
    """One Inverse-Cloze example per document (a seeded sample of ``max_docs``), negatives from ``retriever``; only
    documents are read, so an evaluation collection is allowed (and said)."""
    from pyterrier_tite import datasets

    texts = doc_texts(datasets.check_training_data(dataset, uses="documents"), fields)
    rng = random.Random(seed)
    docnos = sorted(texts)
    if max_docs is not None and len(docnos) > max_docs:
        docnos = sorted(rng.sample(docnos, max_docs))
    pairs = {d: pair for d in docnos if (pair := cloze_pair(texts[d], rng, keep=keep)) is not None}
    if not pairs:
        return []
    topics = pd.DataFrame({"qid": [f"ict-{d}" for d in pairs], "query": [q for q, _ in pairs.values()]})
    retrieved = retrieved_docnos(retriever, topics, depth)
    examples = []
    for docno, (query, positive) in pairs.items():
        qid = f"ict-{docno}"
        negatives = [texts[d] for d in retrieved.get(qid, []) if d != docno and d in texts]
        if negatives:
            examples.append(Example(qid, query, positive, negatives))
    return examples
