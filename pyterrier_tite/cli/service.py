"""The work behind the batch commands: which kind of model a name is, building its index, opening an index with the
model that built it, re-ranking runs chunk by chunk. An index records its model (kept inside it when from a folder),
so retrieval needs no ``--model`` and the index, or its package, nothing outside itself."""

from __future__ import annotations

import inspect
import os
from collections.abc import Iterable

import pandas as pd
import pyterrier as pt

from pyterrier_tite.pt.validation import one_query_per_qid
from pyterrier_tite.store.cache import slug
from pyterrier_tite.store.corpus import SINGLE, DocumentTexts, Shard
from pyterrier_tite.store.index_info import BM25, INDEX_INFO, index_info
from pyterrier_tite.store.values import checked_id, checked_text


def load_model(
    name: str,
    device: str | None = None,
    batch_size: int | None = None,
    verbose: bool = False,
    precision: str | None = None,
):
    """``(kind, transformer)`` of a model name (``bm25`` -> ``("bm25", None)``, else :func:`pyterrier_tite.load`);
    ``precision`` is its ``dtype``."""
    if name.lower() == BM25:
        return BM25, None
    from pyterrier_tite.pt.artifacts import load

    given = {"device": device, "batch_size": batch_size, "dtype": precision}
    try:
        model = load(name, verbose=verbose, **{key: value for key, value in given.items() if value})
    except OSError as exc:  # hub id not cached offline, missing folder, ...
        raise ValueError(f"cannot load the model {name!r}: {exc}") from exc
    # the card's own record (set by a save of fresh weights, cleared by training): its scores or vectors are random
    card = getattr(model, "card", None)
    fresh = card.get("fresh_weights") if isinstance(card, dict) else None
    if fresh and isinstance(fresh, str):
        from pyterrier_tite._user_warnings import warn_user

        verb = "are" if fresh.endswith("s") else "is"
        warn_user(f"{name}: its model card says its {fresh} {verb} untrained (random init, saved before any training):"
                  " its scores mean nothing; train it first")  # fmt: skip
    return model_kind(model), model


def model_kind(model) -> str:
    """``dense``, ``splade`` or ``rerank``."""
    return model.family.kind


def build_index(
    model_name: str,
    corpus: Iterable[dict],
    path: str | os.PathLike,
    *,
    corpus_name: str | None = None,
    device: str | None = None,
    batch_size: int | None = None,
    precision: str | None = None,
    threads: int = 1,
    overwrite: bool = False,
    verbose: bool = True,
    rank: int = 0,
    world_size: int = 1,
    model=None,
    package_model: bool = True,
) -> str:
    """Index ``corpus`` (``{docno, text}`` dicts) into ``path`` (dense: FlexIndex; SPLADE, ``bm25``: PISA) and return
    the kind. With ``world_size > 1`` every rank calls it with the same corpus and encodes its share; rank 0 writes.
    A model from a folder is saved into the index unless ``package_model=False``."""
    from pyterrier_tite.pt.artifacts import IndexRecord
    from pyterrier_tite.store.flex import build_flex_index
    from pyterrier_tite.store.pisa_build import build_pisa_index, build_toks_index

    if model is None:
        kind, model = load_model(model_name, device=device, batch_size=batch_size, precision=precision)
    else:
        kind = BM25 if model_name.lower() == BM25 else model_kind(model)
    # a folder as an absolute path, a hub id or keyword as given (bm25 also beside a folder of that name)
    recorded = os.path.abspath(model_name) if os.path.isdir(model_name) and model_name.lower() != BM25 else model_name
    label = f"indexing with {os.path.basename(recorded.rstrip('/')) or recorded}" if verbose else None
    if kind == "rerank":
        raise ValueError(f"{model_name!r} is a re-ranker ({type(model).__name__}): it scores query-document pairs "
                         "and cannot index; use `pyterrier-tite rerank --model ...` instead")  # fmt: skip
    if rank != 0 and kind == BM25:
        return kind
    counted = IndexRecord(corpus, model, kind, recorded, corpus_name, package=package_model)
    common = {"progress": label, "overwrite": overwrite, "finalize": counted.finalize}
    if kind == BM25:
        build_pisa_index(counted, path, ["text"], threads=threads, **common)
        return kind
    batch_size = batch_size or model.batch_size
    common.update(shard=torch_shard(rank, world_size), chunk_size=8 * batch_size)
    if kind == "dense":
        build_flex_index(counted, path, dense_vectors(model, batch_size), **common)
    else:
        from pyterrier_tite.pt.splade import doc_toks

        build_toks_index(counted, path, doc_toks(model, batch_size), threads=threads, **common)
    return kind


def torch_shard(rank: int, world_size: int) -> Shard:
    """This process's ``Shard``: rank 0 gathers the other ranks' encodings (``torch.distributed.gather_object``)."""
    if world_size == 1:
        return SINGLE

    def gather(encoded: list) -> list[list] | None:
        import torch.distributed as dist

        gathered = [None] * world_size if rank == 0 else None
        dist.gather_object(encoded, gathered, dst=0)
        return gathered

    return Shard(rank, world_size, gather)


def dense_vectors(model, batch_size: int):
    """``docs -> float32 [N, D]`` with a ``pyterrier_dr.BiEncoder``'s ``encode_docs``."""
    import numpy as np

    def encode(docs: list[dict]) -> np.ndarray:
        texts = [d["text"] for d in docs]
        vectors = np.asarray(model.encode_docs(texts, batch_size=batch_size), dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[0] != len(texts):
            raise RuntimeError(f"{model!r}.encode_docs returned shape {vectors.shape} for {len(texts)} texts")
        return vectors

    return encode


def index_retriever(
    path: str | os.PathLike,
    model_name: str | None = None,
    k: int = 1000,
    *,
    threads: int = 1,
    model=None,
    search: str = "exact",
    search_options: dict | None = None,
    **load_options,
) -> pt.Transformer:
    """Queries -> top ``k`` of an index with the model it holds or names, or ``model_name`` / ``model``, refused
    unless of the index's kind with the weights it records; ``search``: exact, or hnsw / ivf for dense indexes."""
    from pyterrier_tite.pt.artifacts import check_search, weights_fingerprint
    from pyterrier_tite.pt.artifacts import index_retriever as retriever_of
    from pyterrier_tite.store.index_info import check_fingerprint, model_for_index

    info = index_info(path)
    kind = info["kind"]
    if not model_name and model is None and kind != BM25:
        model_name = model_for_index(path, info)
    model_name = model_name or info.get("model")
    if kind == BM25 and model_name and model_name.lower() != BM25:
        raise ValueError(f"{path} is a BM25 index; --model {model_name} cannot query it")
    check_search(path, kind, search)
    if kind != BM25:
        if not model_name and model is None:
            raise ValueError(f"{path} does not name the model that built it ({INDEX_INFO} is missing): pass --model")
        loaded_kind, model = load_model(model_name, **load_options) if model is None else (model_kind(model), model)
        if loaded_kind != kind:
            shown = "a re-ranker" if loaded_kind == "rerank" else f"a {loaded_kind} model"
            raise ValueError(f"{path} is a {kind} index but {model_name or model!r} is {shown}")
        check_fingerprint(path, info, model_name or repr(model), weights_fingerprint(model))
    return retriever_of(path, k, model=model, threads=threads, search=search, search_options=search_options)


def check_topics_collection(index: str | os.PathLike, info: dict, topics: str) -> None:
    """Refuse topics of one collection against an index of another (a topics file: no check)."""
    from pyterrier_tite.datasets import collection_id, same_documents
    from pyterrier_tite.store.index_info import indexed_collection

    indexed, asked = indexed_collection(info), collection_id(topics)
    if not same_documents(indexed, asked):
        raise ValueError(f"the index {index} holds the documents of {indexed}, the topics are {asked}'s: their "
                         f"results would be documents of another collection; retrieve with topics of {indexed}, or "
                         f"from an index of {asked}")  # fmt: skip


def retrieve(retriever: pt.Transformer, topics: pd.DataFrame, chunk: int = 256, verbose: bool = True) -> pd.DataFrame:
    """``retriever`` over the topics ``chunk`` queries at a time (one progress bar over queries)."""
    topics = topics.assign(qid=[checked_id(q, "qid") for q in topics["qid"]])
    topics = topics.drop_duplicates(["qid", "query"])
    one_query_per_qid(topics)
    if topics.empty:
        raise ValueError("the topics are empty: nothing to retrieve")
    bar = pt.tqdm(total=len(topics), desc="retrieving", unit="query", disable=not verbose)
    frames = []
    for start in range(0, len(topics), chunk):
        batch = topics.iloc[start : start + chunk][["qid", "query"]]
        frames.append(retriever.transform(batch))
        bar.update(len(batch))
    bar.close()
    results = pd.concat(frames, ignore_index=True)
    return results[[c for c in ("qid", "query", "docno", "score", "rank") if c in results.columns]]


def attach_queries(run: pd.DataFrame, topics: pd.DataFrame) -> pd.DataFrame:
    """The run with each query's text; a run query missing from the topics is an error naming it."""
    topics = topics.assign(qid=[checked_id(q, "qid") for q in topics["qid"]]).drop_duplicates(["qid", "query"])
    one_query_per_qid(topics)
    queries = dict(zip(topics["qid"], topics["query"], strict=True))
    missing = [q for q in dict.fromkeys(run["qid"]) if q not in queries]
    if missing:
        raise ValueError(f"{len(missing)} queries of the run are not in the topics (first: qid {missing[0]!r})")
    return run.drop(columns=[c for c in ("query",) if c in run.columns]).assign(
        query=[checked_text(queries[q], "query", f"qid {q!r}") for q in run["qid"]]
    )


def rerank(
    model: pt.Transformer,
    candidates: pd.DataFrame,
    texts: DocumentTexts | None = None,
    chunk: int = 32,
    verbose: bool = True,
) -> pd.DataFrame:
    """``qid, docno, score`` of every candidate, ``chunk`` queries at a time, by a re-ranker or a retriever's scorer
    (texts added per chunk from ``texts``)."""
    scorer = model.scorer(verbose=False) if inspect.ismethod(getattr(model, "scorer", None)) else model
    if candidates.empty:
        raise ValueError("nothing to re-rank: the run has no rows for the topics")
    qids = list(dict.fromkeys(candidates["qid"]))
    groups = candidates.groupby("qid", sort=False)
    bar = pt.tqdm(total=len(candidates), desc="re-ranking", unit="pair", disable=not verbose)
    frames = []
    for start in range(0, len(qids), chunk):
        batch = pd.concat([groups.get_group(q) for q in qids[start : start + chunk]], ignore_index=True)
        if texts is not None:
            batch = texts.add_text(batch)
        for docno, text in zip(batch["docno"], batch["text"], strict=True):
            checked_text(text, "text", f"docno {docno!r}")
        scored = scorer.transform(batch.drop(columns=[c for c in ("score", "rank") if c in batch.columns]))
        if len(scored) != len(batch):
            raise RuntimeError(f"the re-ranker returned {len(scored)} rows for {len(batch)}")
        frames.append(scored[["qid", "docno", "score"]])
        bar.update(len(batch))
    bar.close()
    return pd.concat(frames, ignore_index=True)


def system_name(model_name: str) -> str:
    """A run's system tag (one token) from a model name: ``webis/tite-2-late`` -> ``pyterrier-tite.tite-2-late``."""
    base = os.path.basename(os.path.normpath(model_name)) or model_name
    return "pyterrier-tite." + (slug(base, "-").strip("-") or "model")
