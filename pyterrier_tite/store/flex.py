"""The one builder of a FlexIndex (pyterrier_dr's indexer writes straight into ``path``, stores duplicate docnos twice
and fails obscurely on integer docnos, an empty corpus and a single document) and its retrievers: exact, or
approximate (HNSW or IVF, by inner product) over a FAISS index of ours, built once beside the FlexIndex (in the
per-user cache when that is read-only), all or nothing, under a lock (pyterrier_dr's own builds are neither)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import numpy as np
import pyterrier as pt
from more_itertools import consume, peekable

from pyterrier_tite.store.atomic import atomic_build, write_file
from pyterrier_tite.store.cache import cache_dir, slug
from pyterrier_tite.store.corpus import SINGLE, Shard, checked_corpus, encode_in_order, known_size
from pyterrier_tite.store.locks import write_lock


def build_flex_index(
    corpus: Iterable[dict],
    path: str | os.PathLike,
    encode: Callable[[list[dict]], Sequence],
    *,
    text_field: str = "text",
    overwrite: bool = False,
    chunk_size: int = 1024,
    shard: Shard = SINGLE,
    progress: str | None = None,
    finalize: Callable[[Path], None] | None = None,
):
    """Encode ``corpus`` (checked, not empty) into a FlexIndex at ``path``, all or nothing: ``encode(docs)`` gives one
    vector per document of a chunk; ``finalize(staging)`` adds files before the rename. Sharded, every rank calls
    this with the same corpus; rank 0 writes the index and returns it, the others None."""
    from pyterrier_dr import FlexIndex

    total = known_size(corpus)  # a known corpus size gives the bar an ETA
    docs = peekable(checked_corpus(corpus, [text_field]))
    if not docs:
        raise ValueError("the corpus is empty: nothing to index")
    if shard.rank == 0 and progress:
        docs = pt.tqdm(docs, desc=progress, unit="doc", total=total)
    encoded = encode_in_order(docs, encode, chunk_size, shard)
    if shard.rank != 0:
        consume(encoded)  # takes part in every gather
        return None
    with atomic_build(path, overwrite) as staging:
        docnos: list[str] = []
        dim = None
        with open(staging / "vecs.f4", "wb") as vecs:
            for docno, vec in encoded:
                vector = np.asarray(vec, dtype=np.float32)
                if vector.ndim != 1 or vector.shape[0] != (dim or vector.shape[0]):
                    raise ValueError(f"doc_vec of docno {docno!r} has shape {vector.shape}, not ({dim},)")
                dim = vector.shape[0]
                vecs.write(vector.tobytes())
                docnos.append(docno)
        write_docnos(staging / "docnos.npids", docnos)
        meta = {"type": FlexIndex.ARTIFACT_TYPE, "format": FlexIndex.ARTIFACT_FORMAT, "vec_size": dim}
        (staging / "pt_meta.json").write_text(json.dumps({**meta, "doc_count": len(docnos)}))  # last, as pyterrier_dr
        if finalize is not None:
            finalize(staging)
    return FlexIndex(str(path), verbose=False)


def write_docnos(file, docnos: list[str]) -> None:
    """A FlexIndex's ``docnos.npids``; npids cannot read a block of one id (zero-width rows once its prefix is cut:
    one document, or a last id shaped unlike the others), so such a store is written again as one block of whole ids."""
    from npids import Lookup

    try:
        Lookup.build(docnos, file, return_self=False)
        return
    except ZeroDivisionError:
        os.remove(file)
    from npids.builder import FwdLookupBuilder, InvLookupBuilder
    from npids.codecs.fwd_fixedbytes import FwdFixedBytes

    class WholeIds(FwdFixedBytes):
        def seed(self, id) -> bool:
            super().seed(id)
            self.prefix = b""
            return True

    builder = FwdLookupBuilder(file, min_block=len(docnos) + 1)  # one block, written on close
    builder.formats = builder.seeded_formats = {WholeIds.NAME: WholeIds()}
    for docno in docnos:
        builder.add(docno)
    builder.close()
    InvLookupBuilder.build(file)


#: the kinds of search a dense retriever offers
SEARCHES = ("exact", "hnsw", "ivf")
#: defaults: HNSW neighbours per node and candidate list at search time; IVF lists (None: 4 sqrt(n)) and lists probed
SEARCH_DEFAULTS = {"hnsw_neighbours": 32, "ef_search": 128, "ivf_lists": None, "n_probe": 32}


def open_flex_retriever(
    index, k: int = 1000, device: str = "cpu", search: str = "exact", **search_options
) -> pt.Transformer:
    """The top ``k`` (cut to the number of documents) of a FlexIndex (or its folder) for ``query_vec`` s on
    ``device``, cells scalar; ``search='hnsw'`` or ``'ivf'`` searches approximately (:func:`faiss_retriever`)."""
    from pyterrier_dr import FlexIndex

    if search not in SEARCHES:
        raise ValueError(f"search must be one of {', '.join(SEARCHES)}; got {search!r}")
    if not isinstance(index, FlexIndex):
        index = FlexIndex(str(index), verbose=False)
    k = max(1, min(int(k), len(index)))
    if search != "exact":
        return ScalarResults(faiss_retriever(index, search, k, **search_options))
    if str(device).startswith("cuda"):
        return ScalarResults(index.torch_retriever(num_results=k, device=str(device)))
    return ScalarResults(index.np_retriever(num_results=k))


class ScalarResults(pt.Transformer):
    """A pyterrier_dr retriever whose cells are scalars also when each query has one result (``k=1``): its
    ``DataFrameBuilder`` keeps 1-element arrays then, which pandas can neither compare nor hash. ``% k`` fuses in."""

    COLUMNS = ("docno", "docid", "score", "rank")

    def __init__(self, retriever: pt.Transformer):
        self.retriever = retriever

    def transform(self, inp):
        out = self.retriever.transform(inp)
        arrays = [c for c in self.COLUMNS if c in out.columns and len(out) and isinstance(out[c].iloc[0], np.ndarray)]
        if not arrays:
            return out
        columns = {c: np.concatenate(out[c].to_list()) for c in arrays}
        if any(len(values) != len(out) for values in columns.values()):
            raise RuntimeError(f"{self.retriever!r} returned array cells of more than one value")
        return out.assign(**columns)

    def fuse_rank_cutoff(self, k: int):
        fuse = getattr(self.retriever, "fuse_rank_cutoff", None)
        fused = fuse(k) if fuse is not None else None
        return None if fused is None else ScalarResults(fused)

    def __eq__(self, other) -> bool:
        return type(other) is type(self) and other.retriever == self.retriever

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.retriever))

    def __repr__(self) -> str:
        return f"ScalarResults({self.retriever!r})"


def faiss_retriever(flex, search: str, k: int, **options) -> pt.Transformer:
    """pyterrier_dr's FAISS retriever over the ``search`` (hnsw / ivf) index of ``flex``; ``options`` (None: the
    default) override :data:`SEARCH_DEFAULTS` (recall depends on the vectors: ``benchmarks/scale.py``)."""
    from pyterrier_dr.flex.faiss_retr import FaissRetriever

    unknown = set(options) - set(SEARCH_DEFAULTS)
    if unknown:
        raise ValueError(f"unknown search settings {sorted(unknown)}; known: {sorted(SEARCH_DEFAULTS)}")
    options = {**SEARCH_DEFAULTS, **{key: value for key, value in options.items() if value is not None}}
    if search == "hnsw":
        settings = {"m": int(options["hnsw_neighbours"])}
        search_options = {"ef_search": max(int(options["ef_search"]), k)}
    else:  # FAISS wants >= 39 training points per list
        settings = {"lists": int(options["ivf_lists"] or max(1, min(len(flex) // 39, int(4 * np.sqrt(len(flex))))))}
        search_options = {"n_probe": int(options["n_probe"])}
    index = faiss_index(flex, search, settings)
    return FaissRetriever(flex, index, num_results=k, drop_query_vec=True, index_spec=(search, *settings.values()),
                          **search_options)  # fmt: skip


def faiss_index(flex, search: str, settings: dict):
    """The FAISS index of ``flex`` for ``search`` and ``settings``: read, else built and written under its lock."""
    import faiss

    index_path = Path(flex.index_path)
    name = f"faiss-{search}-" + "-".join(f"{k}{v}" for k, v in sorted(settings.items())) + ".index"
    folder = index_path if os.access(index_path, os.W_OK) else Path(cache_dir("faiss", slug(str(index_path.resolve()))))
    path = folder / name
    if path.is_file():
        return faiss.read_index(str(path))
    with write_lock(path, wait=True):  # creates the folder
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
        write_file(path, faiss.serialize_index(index).tobytes(), "FAISS index")  # re-enters the lock held here
    return index
