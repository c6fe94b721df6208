"""The unlabelled texts a vector distillation learns from: the documents of the collections, training queries and
one Inverse-Cloze pseudo-query per document (:func:`~pyterrier_tite.training.pseudo_queries.cloze_pair`'s
sentence), grouped so that a document and its pseudo-query share a batch.

Only queries of training splits are used (default: scifact train, MS MARCO dev/small), never a test query of an
evaluation collection; documents of the evaluation collections are used as text, without their judgements.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the recipe's --help reads the defaults below without importing the models
    from experiments.distill_tite.vector_distillation import DistillationTexts

#: documents of every mirrored collection (the DL id stands for the 9,658 mirrored MS MARCO passages)
DEFAULT_COLLECTIONS = ("beir/scifact", "vaswani", "cranfield", "local/cisi", "local/cacm",
                       "msmarco-passage/trec-dl-2019/judged")  # fmt: skip
#: training-split queries only
DEFAULT_QUERY_SETS = ("beir/scifact/train", "msmarco-passage/dev/small")


def normalise_text(text: str) -> str:
    """A text as the recipe stores it (runs of whitespace as one space), so a document can be looked up among them."""
    return " ".join(text.split())


def query_texts(dataset: str) -> list[str]:
    """The query texts of a dataset (``get_topics``' ``query`` column, as given)."""
    from pyterrier_tite import datasets

    topics = datasets.get_dataset(dataset).get_topics()
    return [str(q) for q in topics["query"]]


def collect_distillation_texts(
    collections: Sequence[str] = DEFAULT_COLLECTIONS,
    query_sets: Sequence[str] = DEFAULT_QUERY_SETS,
    *,
    pseudo_queries: bool = True,
    max_docs: int | None = None,
    max_queries: int | None = None,
    seed: int = 42,
) -> DistillationTexts:
    """Documents (``max_docs`` per collection, a seeded sample), their pseudo-queries and the query sets'
    queries (``max_queries`` per set), duplicates removed; groups: ``[doc, pseudo-query]`` or ``[doc]``, and
    ``[query]``."""
    from experiments.distill_tite.vector_distillation import DistillationTexts
    from pyterrier_tite.training.pseudo_queries import cloze_pair
    from pyterrier_tite.training.splade_data import doc_texts

    rng = random.Random(seed)
    texts: list[str] = []
    roles: list[str] = []
    groups: list[list[int]] = []
    seen: set[tuple[str, str]] = set()

    def add(text: str, role: str) -> int | None:
        text = normalise_text(text)
        if not text or (role, text) in seen:
            return None
        seen.add((role, text))
        texts.append(text)
        roles.append(role)
        return len(texts) - 1

    for collection in collections:
        docs = doc_texts(collection)
        docnos = sorted(docs)
        if max_docs is not None and len(docnos) > max_docs:
            docnos = sorted(rng.sample(docnos, max_docs))
        for docno in docnos:
            doc = add(docs[docno], "doc")
            if doc is None:
                continue
            group = [doc]
            pair = cloze_pair(docs[docno], rng) if pseudo_queries else None
            if pair is not None:
                query = add(pair[0], "query")
                if query is not None:
                    group.append(query)
            groups.append(group)
    for query_set in query_sets:
        queries = query_texts(query_set)
        if max_queries is not None and len(queries) > max_queries:
            queries = rng.sample(queries, max_queries)
        for text in queries:
            query = add(text, "query")
            if query is not None:
                groups.append([query])
    return DistillationTexts(texts, roles, groups)  # type: ignore[arg-type]
