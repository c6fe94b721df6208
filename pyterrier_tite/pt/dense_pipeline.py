"""A dense bi-encoder as a ranker on a named collection: full retrieval from a FlexIndex cached per model and
collection (the key changes with the checkpoint, so a retrained model is indexed again), or re-ranking of the
provided BM25 top-100 on TREC DL (whose mirrored passages are only those candidates)."""

from __future__ import annotations

import os

from pyterrier_tite import datasets
from pyterrier_tite.pt.biencoder import DenseBiEncoder
from pyterrier_tite.pt.first_stage import trec_dl_bm25
from pyterrier_tite.store.cache import cache_lock, model_key, slug
from pyterrier_tite.text import document_text, text_fields

#: the TREC DL aliases whose mirrored passages are only the BM25 candidates: re-ranked, not retrieved
RERANKED = {"dl19": "2019", "dl20": "2020", datasets.ALIASES["dl19"]: "2019", datasets.ALIASES["dl20"]: "2020"}


def dense_index_path(model: DenseBiEncoder, name: str, dataset: str, index_root: str) -> str:
    """Where :func:`dense_pipeline` caches ``model``'s FlexIndex of ``dataset``, so other tools read it too."""
    key = model_key(name, model.source or id(model))
    return os.path.join(index_root, key, slug(datasets.irds_id(dataset)) + ".flex")


def dense_pipeline(model: DenseBiEncoder, name: str, dataset: str, index_root: str, verbose: bool = True):
    """``model`` as a ranker on ``dataset``: query encoder >> its FlexIndex (built on first use, at
    :func:`dense_index_path`), or BM25 top-100 >> its scorer on TREC DL."""
    import pyterrier_dr

    if dataset in RERANKED:
        return trec_dl_bm25(RERANKED[dataset]) >> model.scorer()
    dataset_id = datasets.irds_id(dataset)
    index = pyterrier_dr.FlexIndex(dense_index_path(model, name, dataset, index_root))
    with cache_lock(index.index_path) as missing:  # a second process building the same cache waits, then uses it
        if missing:
            fields = text_fields(dataset_id)
            corpus = datasets.get_dataset(dataset_id).get_corpus_iter(verbose=verbose)
            (model >> index).index({"docno": d["docno"], "text": document_text(d, fields)} for d in corpus)
    return model.query_encoder() >> index.np_retriever(num_results=1000)
