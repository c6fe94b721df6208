"""Approximate search over a FlexIndex's vectors with FAISS, by inner product as exact search scores: HNSW (a
graph; recall set by ``ef_search``) or IVF (clusters; recall set by ``n_probe``), for collections where exact search
(every vector for every query) is too slow, at a recall that depends on the vectors (``benchmarks/scale.py``). The
FAISS index is built once, beside the FlexIndex (in the per-user cache when that is read-only), all or nothing.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd
import pyterrier as pt

from pyterrier_tite.store.cache import cache_dir, slug
from pyterrier_tite.store.locks import write_lock

#: the kinds of search a dense retriever offers
SEARCHES = ("exact", "hnsw", "ivf")
#: defaults: HNSW neighbours per node and candidate list at search time; IVF lists (None: 4 sqrt(n)) and lists probed
DEFAULTS = {"hnsw_neighbours": 32, "ef_search": 128, "ivf_lists": None, "n_probe": 32}


def check_search(search: str) -> str:
    if search not in SEARCHES:
        raise ValueError(f"search must be one of {', '.join(SEARCHES)}; got {search!r}")
    return search


def faiss_file(index_path: Path, search: str, settings: dict) -> Path:
    """Where the FAISS index of ``index_path`` for ``search`` with build ``settings`` is kept."""
    name = f"faiss-{search}-" + "-".join(f"{k}{v}" for k, v in sorted(settings.items())) + ".index"
    if os.access(index_path, os.W_OK):
        return index_path / name
    return Path(cache_dir("faiss", slug(str(index_path.resolve())))) / name


def load_or_build(flex, search: str, settings: dict):
    """The FAISS index of ``flex`` (a pyterrier_dr FlexIndex) for ``search``: read from its file, else built from the
    vectors and written all or nothing under the index's lock."""
    import faiss

    path = faiss_file(Path(flex.index_path), search, settings)
    if path.is_file():
        return faiss.read_index(str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    with write_lock(path, wait=True):
        if path.is_file():  # another process built it meanwhile
            return faiss.read_index(str(path))
        vectors = np.ascontiguousarray(flex.payload(return_docnos=False)[0], dtype=np.float32)
        dim = vectors.shape[1]
        if search == "hnsw":
            index = faiss.IndexHNSWFlat(dim, settings["m"], faiss.METRIC_INNER_PRODUCT)
        else:
            quantizer = faiss.IndexFlatIP(dim)
            index = faiss.IndexIVFFlat(quantizer, dim, settings["lists"], faiss.METRIC_INNER_PRODUCT)
            sample = vectors[np.random.default_rng(0).permutation(len(vectors))[: 256 * settings["lists"]]]
            index.train(sample)
            index.quantizer = quantizer  # keep the quantizer alive with the index
        index.add(vectors)
        staging = path.with_name(f".{path.name}.{os.getpid()}")
        faiss.write_index(index, str(staging))
        os.replace(staging, path)
    return index


class FaissRetriever(pt.Transformer):
    """``qid, query_vec`` -> the top ``k`` documents of a FlexIndex by FAISS search (module docstring)."""

    def __init__(self, flex, search: str, k: int = 1000, **options):
        self.flex, self.search, self.k = flex, check_search(search), int(k)
        unknown = set(options) - set(DEFAULTS)
        if unknown:
            raise ValueError(f"unknown search settings {sorted(unknown)}; known: {sorted(DEFAULTS)}")
        self.options = {**DEFAULTS, **{key: value for key, value in options.items() if value is not None}}
        self._index = None

    def __repr__(self) -> str:
        return f"FaissRetriever({os.path.basename(str(self.flex.index_path))!r}, {self.search!r}, k={self.k})"

    def index(self):
        if self._index is None:
            n, lists = len(self.flex), self.options["ivf_lists"]
            lists = lists or max(1, min(n // 39, int(4 * np.sqrt(n))))  # FAISS wants >= 39 training points per list
            settings = {"m": int(self.options["hnsw_neighbours"])} if self.search == "hnsw" else {"lists": int(lists)}
            self._index = load_or_build(self.flex, self.search, settings)
        index = self._index
        if self.search == "hnsw":
            index.hnsw.efSearch = max(int(self.options["ef_search"]), self.k)
        else:
            index.nprobe = int(self.options["n_probe"])
        return index

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        if "query_vec" not in inp.columns:
            raise ValueError("FaissRetriever needs query vectors (query_vec): put the model's query encoder first")
        if len(inp) == 0:
            return inp.assign(docno=[], docid=[], score=[], rank=[]).drop(columns=["query_vec"])
        k = max(1, min(self.k, len(self.flex)))
        queries = np.ascontiguousarray(np.stack(inp["query_vec"].to_list()), dtype=np.float32)
        scores, ids = self.index().search(queries, k)
        docnos = self.flex.payload(return_dvecs=False)[0]
        rows = []
        keep = [c for c in inp.columns if c != "query_vec"]
        for (_, query), query_scores, query_ids in zip(inp[keep].iterrows(), scores, ids, strict=True):
            found = query_ids >= 0  # FAISS pads with -1 when fewer than k are reachable
            for rank, (docid, score) in enumerate(zip(query_ids[found], query_scores[found], strict=True)):
                rows.append({**query.to_dict(), "docno": str(docnos.fwd[int(docid)]), "docid": int(docid),
                             "score": float(score), "rank": rank})  # fmt: skip
        columns = [*keep, "docno", "docid", "score", "rank"]
        return pd.DataFrame(rows, columns=columns)
