"""BM25 candidates for *training* re-rankers (the distillation studies): over a collection's PISA index, or over the
mirrored MS MARCO passages for an MS MARCO ID, where retrieval is no evaluation (the collection is partial)."""

from __future__ import annotations

import pyterrier as pt
from pyterrier_pisa import PisaIndex

from pyterrier_tite import datasets
from pyterrier_tite.pt.first_stage import bm25
from pyterrier_tite.pt.validation import CheckedQueries
from pyterrier_tite.store.cache import cache_dir
from pyterrier_tite.store.pisa_build import cached_pisa_index
from pyterrier_tite.store.pisa_derived import open_pisa_retriever

#: every msmarco-passage ID holds the same 9,658 mirrored passages (the BM25 top-100 of DL19 and DL20)
MIRRORED_PASSAGES = "msmarco-passage/trec-dl-2019/judged"


def mirrored_passages_bm25(num_results: int = 1000, k1: float = 0.9, b: float = 0.4) -> pt.Transformer:
    """BM25 over the 9,658 mirrored MS MARCO passages, for drawing *training* candidates only (e.g. for MS MARCO
    dev queries): retrieval on this partial collection is no evaluation, which is why :func:`bm25` refuses it."""
    path = cache_dir("pisa", "msmarco-passage-mirrored-9658.text")

    def corpus():
        return datasets.get_dataset(MIRRORED_PASSAGES).get_corpus_iter(verbose=False)

    cached_pisa_index(path, corpus, ["text"], progress="indexing the mirrored MS MARCO passages")
    index = PisaIndex(path, text_field="text")
    retriever = open_pisa_retriever(index, "bm25", num_results, index.threads, k1=k1, b=b)
    return CheckedQueries() >> retriever


def training_bm25(collection: str, depth: int) -> pt.Transformer:
    """BM25 top-``depth`` over a collection for training candidates: the mirrored passages for an MS MARCO ID."""
    if datasets.irds_id(collection).startswith("msmarco-passage/"):
        return mirrored_passages_bm25(num_results=depth)
    return bm25(collection, num_results=depth)
