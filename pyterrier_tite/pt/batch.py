"""The work behind the batch commands (``index``, ``retrieve``, ``rerank``, ``tirex``): which kind of model a name is,
building its index all or nothing, opening an index for retrieval with the model that built it, and re-ranking
runs query chunk by query chunk with document texts from a collection or a corpus file.

An index built here is the engine's own folder (``pt_meta.json`` of a FlexIndex or a PISA index) plus
:data:`INDEX_INFO`, a small JSON naming the model that built it (and its hub id), so retrieval needs no ``--model``; a
model from a folder is kept inside the index (``model/``, see :mod:`~pyterrier_tite.pt.index_model`), so the index
folder, or its package downloaded elsewhere, needs nothing outside itself.
"""

from __future__ import annotations

import inspect
import json
import os
import re
from collections.abc import Iterable, Iterator
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd
import pyterrier as pt

from pyterrier_tite.pt.dense_index import build_flex_index, checked_documents, dense_retriever, encode_in_order
from pyterrier_tite.pt.index_build import atomic_build
from pyterrier_tite.pt.validation import checked_id, checked_text, one_query_per_qid

#: the keyword of the lexical baseline (PISA BM25, no Java)
BM25 = "bm25"
#: written into every index built here: the kind of index and the model that built it
INDEX_INFO = "pyterrier_tite_index.json"
#: kinds of model a name can resolve to
KINDS = ("bm25", "dense", "splade", "reranker")


def model_name_for_record(name: str) -> str:
    """What to store as the model of an index: a folder as an absolute path, a hub id or keyword as given (``bm25``
    also where a folder of that name is in the working directory)."""
    return os.path.abspath(name) if os.path.isdir(name) and name.lower() != BM25 else name


def load_model(
    name: str,
    device: str | None = None,
    batch_size: int | None = None,
    verbose: bool = False,
    precision: str | None = None,
):
    """``(kind, transformer)`` for a model name: ``bm25`` -> ``("bm25", None)``; anything else through
    :func:`pyterrier_tite.load` (shipped name, folder or hub id); ``precision`` (fp32 / bf16 / fp16) is its
    ``dtype`` (default: the device's)."""
    if name.lower() == BM25:
        return BM25, None
    from pyterrier_tite.pt.artifacts import load

    kwargs = {"verbose": verbose}
    if device:
        kwargs["device"] = device
    if batch_size:
        kwargs["batch_size"] = batch_size
    if precision:
        kwargs["dtype"] = precision
    try:
        model = load(name, **kwargs)
    except OSError as exc:  # hub id not cached offline, missing folder, ...
        raise ValueError(f"cannot load the model {name!r}: {exc}") from exc
    return model_kind(model), model


def model_kind(model) -> str:
    """``dense`` (a ``pyterrier_dr.BiEncoder``), ``splade`` or ``reranker``."""
    import pyterrier_dr

    from pyterrier_tite.pt.splade import Splade

    if isinstance(model, pyterrier_dr.BiEncoder):
        return "dense"
    if isinstance(model, Splade):
        return "splade"
    return "reranker"


def index_info(path: str | os.PathLike) -> dict:
    """``{kind, model, ...}`` of an index folder: from :data:`INDEX_INFO` when we built it, else from the engine's
    ``pt_meta.json`` (a FlexIndex is ``dense``; a PISA index ``bm25``, or ``splade`` when built without a stemmer)."""
    folder = Path(path)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder} is not an index folder (it does not exist)")
    info_file = folder / INDEX_INFO
    if info_file.is_file():
        return json.loads(info_file.read_text(encoding="utf-8"))
    meta_file = folder / "pt_meta.json"
    if not meta_file.is_file():
        raise FileNotFoundError(f"{folder} has no pt_meta.json: not an index (or an incomplete one); rebuild it")
    meta = json.loads(meta_file.read_text(encoding="utf-8"))
    if meta.get("type") == "dense_index" and meta.get("format") == "flex":
        return {"kind": "dense", "model": None}
    if meta.get("format") == "pisa":
        return {"kind": "splade" if meta.get("stemmer") == "none" else BM25, "model": None}
    raise ValueError(f"{meta_file}: type {meta.get('type')!r} / format {meta.get('format')!r} is no index we read")


def write_index_info(
    folder: str | os.PathLike, kind: str, model: str, corpus: str | None, count: int, transformer=None
) -> None:
    """:data:`INDEX_INFO`: kind, model (name as recorded, ``hub_id``), corpus, size, date; with ``transformer``, a
    model from a folder is saved into the index (``packaged_model``: the folder inside it)."""
    from pyterrier_tite.pt.index_model import model_fields, package_model, should_package

    info = {"kind": kind, **model_fields(model)} if kind != BM25 else {"kind": kind, "model": model}
    if transformer is not None and should_package(model):
        info["packaged_model"] = package_model(folder, transformer)
    info.update(corpus=corpus, documents=count, built=datetime.now(timezone.utc).isoformat(timespec="seconds"))
    (Path(folder) / INDEX_INFO).write_text(json.dumps(info, indent=1) + "\n", encoding="utf-8")


class _Counted:
    """Counts the documents that pass through (for :data:`INDEX_INFO`)."""

    def __init__(self, docs: Iterable[dict]):
        self.docs, self.count = docs, 0

    def __iter__(self) -> Iterator[dict]:
        for doc in self.docs:
            self.count += 1
            yield doc


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
    """Index ``corpus`` (``{docno, text}`` dicts) with a model into ``path``, all or nothing: dense models into a
    FlexIndex, SPLADE and ``bm25`` into PISA. Returns the kind. With ``world_size > 1`` every rank calls this with
    the same corpus, each encodes its share and rank 0 writes the index (BM25 is built by rank 0 alone). A model from
    a folder is saved into the index (``model/``) unless ``package_model=False``."""
    if model is None:
        kind, model = load_model(model_name, device=device, batch_size=batch_size, precision=precision)
    else:
        kind = BM25 if model_name.lower() == BM25 else model_kind(model)
    recorded = model_name_for_record(model_name)
    label = f"indexing with {os.path.basename(recorded.rstrip('/')) or recorded}" if verbose else None
    if kind == "reranker":
        raise ValueError(f"{model_name!r} is a re-ranker ({type(model).__name__}): it scores query-document pairs "
                         "and cannot index; use `pyterrier-tite rerank --model ...` instead")  # fmt: skip
    counted = _Counted(corpus)
    packaged = model if package_model and kind != BM25 else None
    if kind == "dense":

        def finalize(staging: Path) -> None:
            write_index_info(staging, kind, recorded, corpus_name, counted.count, packaged)

        build_flex_index(
            model, counted, path, batch_size=batch_size, overwrite=overwrite, rank=rank, world_size=world_size,
            progress=label, finalize=finalize, chunk_size=8 * (batch_size or model.batch_size),
        )  # fmt: skip
        return kind
    if rank != 0 and kind == BM25:
        return kind
    if kind == "splade" and world_size > 1:
        info = (kind, recorded, corpus_name, packaged)
        _build_splade_sharded(model, counted, path, overwrite, threads, rank, world_size, label, batch_size, info)
        return kind
    with atomic_build(path, overwrite) as staging:
        if kind == BM25:
            from pyterrier_tite.pt.first_stage import build_pisa_index

            build_pisa_index(counted, str(staging), ["text"], threads=threads, progress=label)  # checks the docs
        else:
            _build_splade(model, counted, staging, threads, label)
        write_index_info(staging, kind, recorded, corpus_name, counted.count, packaged)
    return kind


def _build_splade(model, corpus: Iterable[dict], staging: Path, threads: int, label: str | None) -> None:
    """SPLADE into PISA with the model's own indexer (itself all or nothing, PISA silenced, documents checked)."""
    docs = corpus
    if label:
        docs = pt.tqdm(docs, desc=label, unit="doc")
    model.indexer(str(staging), threads=threads, verbose=False).index(docs)


def _build_splade_sharded(model, corpus, path, overwrite, threads, rank, world_size, label, batch_size, info) -> None:
    """Each rank turns its share into ``toks``; rank 0 writes them to PISA in corpus order (quantised by the same
    ``toks_indexer(scale=PISA_SCALE)`` the model's indexer uses)."""
    from pyterrier_pisa import PisaIndex

    from pyterrier_tite._native_output import native_output_silenced
    from pyterrier_tite.pt.splade import PISA_SCALE

    docs = checked_documents(corpus)
    if label and rank == 0:
        docs = pt.tqdm(docs, desc=label, unit="doc")

    def encode(texts: list[str]) -> list[dict]:
        reps = model.encode(texts, model.doc_max_length, batch_size or model.batch_size, False, role="doc")
        return model.to_toks(reps)

    import more_itertools

    chunk = 8 * (batch_size or model.batch_size)
    encoded = more_itertools.peekable(encode_in_order(docs, encode, chunk, rank, world_size))
    if rank != 0:
        for _ in encoded:
            pass
        return
    if not encoded:
        raise ValueError("the corpus is empty: nothing to index")
    with atomic_build(path, overwrite) as staging, native_output_silenced():
        indexer = PisaIndex(str(staging), stemmer="none", threads=threads).toks_indexer(scale=PISA_SCALE)
        indexer.index({"docno": d, "toks": toks} for d, toks in encoded)
        kind, recorded, corpus_name, packaged = info
        write_index_info(staging, kind, recorded, corpus_name, corpus.count, packaged)


def index_retriever(
    path: str | os.PathLike,
    model_name: str | None = None,
    k: int = 1000,
    *,
    device: str | None = None,
    batch_size: int | None = None,
    precision: str | None = None,
    threads: int = 1,
    model=None,
) -> pt.Transformer:
    """Queries (qid, query) -> top ``k`` of an index built by :func:`build_index` (or any FlexIndex / PISA index),
    with the model the index holds or names unless ``model_name`` (or an already loaded ``model``) is given."""
    from pyterrier_tite.pt.index_model import model_for_index

    info = index_info(path)
    kind = info["kind"]
    if not model_name and model is None and kind != BM25:
        model_name = model_for_index(path, info)
    model_name = model_name or info.get("model")
    if kind == BM25:
        if model_name and model_name.lower() != BM25:
            raise ValueError(f"{path} is a BM25 index; --model {model_name} cannot query it")
        from pyterrier_tite.pt.pisa_derived import open_pisa_retriever

        return open_pisa_retriever(path, "bm25", k, threads, k1=0.9, b=0.4)  # checked; k cut to the collection
    if not model_name and model is None:
        raise ValueError(f"{path} does not name the model that built it ({INDEX_INFO} is missing): pass --model")
    if model is None:
        loaded_kind, model = load_model(model_name, device=device, batch_size=batch_size, precision=precision)
    else:
        loaded_kind = model_kind(model)
    if loaded_kind != kind:
        raise ValueError(f"{path} is a {kind} index but {model_name or model!r} is a {loaded_kind} model")
    if kind == "splade":
        return model.retriever(str(path), num_results=k, threads=threads, verbose=False)  # checked; k cut
    return dense_retriever(model, path, k)


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


def scorer_of(model) -> pt.Transformer:
    """The transformer that re-scores a result frame: a cross-encoder itself, a bi-encoder's / SPLADE's scorer."""
    scorer = getattr(model, "scorer", None)
    return scorer(verbose=False) if inspect.ismethod(scorer) else model


def top_k(run: pd.DataFrame, k: int) -> pd.DataFrame:
    """Each (qid, docno) once (its best row) and the best ``k`` rows of each query: by score, as evaluation tools
    order a run (a run whose ranks are all 1 is still cut by score), ties by rank (when every rank is positive:
    inputs without scores), then by row order. A NaN score is an error naming qid and docno."""
    run = run.assign(
        qid=[checked_id(q, "qid") for q in run["qid"]], docno=[checked_id(d, "docno") for d in run["docno"]]
    )
    first_seen = {q: i for i, q in enumerate(dict.fromkeys(run["qid"]))}
    keys = {"_q": run["qid"].map(first_seen).to_numpy()}
    ascending = [True]
    if "score" in run.columns:
        scores = pd.to_numeric(run["score"], errors="raise")
        if scores.isna().any():
            bad = run.loc[scores.isna()].iloc[0]
            raise ValueError(f"score NaN for qid {bad['qid']!r}, docno {bad['docno']!r}: candidates need scores")
        keys["_score"], ascending = scores.to_numpy(), [*ascending, False]
    ranks = pd.to_numeric(run["rank"], errors="coerce") if "rank" in run.columns else None
    if ranks is not None and (ranks > 0).all():
        keys["_rank"], ascending = ranks.to_numpy(), [*ascending, True]
    run = run.assign(**keys).sort_values(list(keys), ascending=ascending, kind="stable")
    run = run.drop_duplicates(["qid", "docno"], keep="first")
    return run.groupby("qid", sort=False).head(k).drop(columns=list(keys)).reset_index(drop=True)


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


def _corpus_file_texts(path: str, wanted: set[str] | None) -> dict[str, str]:
    """``{docno: text}`` of a corpus file (only ``wanted`` docnos); one of them twice is an error, as in ``index``."""
    from pyterrier_tite.pt.inputs import corpus_file_records

    texts, lines = {}, {}
    for line, docno, text in corpus_file_records(path):
        if wanted is not None and docno not in wanted:
            continue
        if docno in lines:
            raise ValueError(f"{path}, line {line}: docno {docno!r} appears twice (first at line {lines[docno]}); "
                             "docnos must be unique in a corpus: remove or rename one")  # fmt: skip
        texts[docno], lines[docno] = text, line
    return texts


class DocumentTexts:
    """Texts of documents by docno, from an ir_datasets collection (its docstore, the collection's text fields by
    the one text rule) or from a corpus file (read once, keeping only the docnos asked for; one of them twice in the
    file is an error naming it)."""

    def __init__(self, source: str, docnos: Iterable[str] | None = None):
        from pyterrier_tite.pt.inputs import is_file_argument

        self.source = source
        self.texts: dict[str, str] | None = None
        if is_file_argument(source):
            self.texts = _corpus_file_texts(source, set(docnos) if docnos is not None else None)
        else:
            from pyterrier_tite import datasets
            from pyterrier_tite.text import text_fields

            self.dataset = datasets.get_dataset(source)
            self.fields = text_fields(datasets.irds_id(source))

    def add_text(self, frame: pd.DataFrame) -> pd.DataFrame:
        """``frame`` with a ``text`` column; a docno the source lacks is an error naming it."""
        if self.texts is not None:
            missing = [d for d in frame["docno"] if d not in self.texts]
            if missing:
                raise ValueError(f"docno {missing[0]!r} of the run is not in the corpus {self.source}")
            return frame.assign(text=[self.texts[d] for d in frame["docno"]])
        from pyterrier_tite.text import join_text_columns

        try:
            with_text = pt.text.get_text(self.dataset, self.fields, verbose=False).transform(frame.drop(
                columns=[c for c in ("text", "title") if c in frame.columns]))  # fmt: skip
        except KeyError as exc:
            raise ValueError(f"a docno of the run is not in {self.source}: {exc}") from exc
        with_text = join_text_columns(with_text, self.fields)
        bad = with_text["text"].isna() if "text" in with_text.columns else None
        if bad is None or bad.any():
            docno = with_text.loc[bad, "docno"].iloc[0] if bad is not None else frame["docno"].iloc[0]
            raise ValueError(f"no text for docno {docno!r} in {self.source}")
        return with_text


def rerank(
    scorer: pt.Transformer,
    candidates: pd.DataFrame,
    texts: DocumentTexts | None = None,
    chunk: int = 32,
    verbose: bool = True,
) -> pd.DataFrame:
    """Re-score ``candidates`` (qid, query, docno[, text]) ``chunk`` queries at a time; texts are added per chunk
    when ``texts`` is given. Returns ``qid, docno, score`` for every input row."""
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
    return "pyterrier-tite." + (re.sub(r"[^A-Za-z0-9._-]+", "-", base).strip("-") or "model")
