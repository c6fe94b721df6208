"""First-stage retrievers: BM25 through PISA (no Java) and the provided TREC DL BM25 top-100 runs."""

from __future__ import annotations

import os
import re

import pandas as pd
import pyterrier as pt
import pyterrier_alpha as pta
from pyterrier_pisa import PisaIndex

from pyterrier_tite import datasets
from pyterrier_tite._native_output import native_output_silenced
from pyterrier_tite.pt.index_build import build_pisa, check_pisa_index, pisa_derived_files
from pyterrier_tite.pt.validation import CheckedQueries
from pyterrier_tite.text import text_fields

#: TREC DL aliases whose provided BM25 run stands in for full retrieval (the local MS MARCO collection is partial)
TREC_DL = {"2019": "dl19", "2020": "dl20", "dl19": "dl19", "dl20": "dl20"}


def cache_dir(*parts: str) -> str:
    """Where built artefacts (indexes) are cached: ``$PYTERRIER_TITE_HOME`` or ``~/.cache/pyterrier_tite``."""
    root = os.environ.get("PYTERRIER_TITE_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "pyterrier_tite")
    return os.path.join(root, *parts)


def pisa_index(
    dataset: str, path: str | None = None, fields: list[str] | None = None, threads: int = 1, verbose: bool = True
) -> PisaIndex:
    """The PISA index of a collection, built once (with a progress bar) and cached on disk."""
    dataset_id = datasets.irds_id(dataset)
    if dataset_id.startswith("msmarco-passage/"):
        raise ValueError(
            f"{dataset_id}: the local MS MARCO collection is partial, so full retrieval on it is meaningless; "
            "rerank the provided BM25 top-100 with pyterrier_tite.trec_dl_bm25('2019') instead"
        )
    fields = fields or text_fields(dataset_id)
    path = path or cache_dir("pisa", re.sub(r"[^A-Za-z0-9._-]+", "__", dataset_id) + "." + "+".join(fields))
    text_field = fields if len(fields) > 1 else fields[0]
    if not os.path.exists(path):
        corpus = datasets.get_dataset(dataset_id).get_corpus_iter(verbose=False)
        build_pisa_index(corpus, path, fields, threads=threads, progress=f"indexing {dataset_id}" if verbose else None)
    check_pisa_index(path)
    return PisaIndex(path, text_field=text_field, threads=threads)


def build_pisa_index(
    corpus, path: str, fields: list[str], threads: int = 1, progress: str | None = None, stemmer: str = "porter2"
) -> None:
    """Index ``corpus`` (dicts with docno + ``fields``) into a new PISA index at ``path``, all or nothing: built
    beside ``path`` and renamed when complete; a corpus error or Ctrl-C leaves no ``path`` behind. ``progress``:
    the label of a progress bar (none when None)."""
    text_field = fields if len(fields) > 1 else fields[0]

    def index(staging, docs) -> None:
        PisaIndex(str(staging), text_field=text_field, threads=threads, stemmer=stemmer).index(docs)

    build_pisa(corpus, path, fields, index, progress=progress)


def bm25(dataset: str, k1: float = 0.9, b: float = 0.4, num_results: int = 1000, **index_args) -> pt.Transformer:
    """BM25 over a collection's cached PISA index (built on first use). No Java anywhere.

    Example::

        ds = t.datasets.get_dataset('vaswani')
        pt.Experiment([t.bm25('vaswani')], ds.get_topics(), ds.get_qrels(), ['nDCG@10'])
    """
    if datasets.irds_id(dataset).startswith("msmarco-passage/"):
        pisa_index(dataset)  # raises the explanatory error
    index = pisa_index(dataset, **index_args)
    with pisa_derived_files(index.path), native_output_silenced():  # the first retriever compresses the index
        retriever = index.bm25(k1=k1, b=b, num_results=num_results)
    return CheckedQueries() >> retriever  # `% k` still fuses into PISA's retriever when the pipeline is compiled


#: every msmarco-passage ID holds the same 9,658 mirrored passages (the BM25 top-100 of DL19 and DL20)
MIRRORED_PASSAGES = "msmarco-passage/trec-dl-2019/judged"


def mirrored_passages_bm25(num_results: int = 1000, k1: float = 0.9, b: float = 0.4) -> pt.Transformer:
    """BM25 over the 9,658 mirrored MS MARCO passages, for drawing *training* candidates only (e.g. for MS MARCO
    dev queries): retrieval on this partial collection is no evaluation, which is why :func:`bm25` refuses it."""
    path = cache_dir("pisa", "msmarco-passage-mirrored-9658.text")
    if not os.path.exists(path):
        corpus = datasets.get_dataset(MIRRORED_PASSAGES).get_corpus_iter(verbose=False)
        build_pisa_index(corpus, path, ["text"], progress="indexing the mirrored MS MARCO passages")
    check_pisa_index(path)
    index = PisaIndex(path, text_field="text")
    with pisa_derived_files(index.path), native_output_silenced():
        retriever = index.bm25(k1=k1, b=b, num_results=num_results)
    return CheckedQueries() >> retriever


def training_bm25(collection: str, depth: int) -> pt.Transformer:
    """BM25 top-``depth`` over a collection for training candidates: the mirrored passages for an MS MARCO ID."""
    if datasets.irds_id(collection).startswith("msmarco-passage/"):
        return mirrored_passages_bm25(num_results=depth)
    return bm25(collection, num_results=depth)


def trec_dl_bm25(year: str = "2019", text: bool = True) -> pt.Transformer:
    """The provided BM25 top-100 run of TREC DL 2019/2020 as a first stage: ``dl19 >> reranker`` works."""
    if str(year) not in TREC_DL:
        raise ValueError(f"unknown TREC DL year {year!r}; expected one of {sorted(TREC_DL)}")
    dataset = datasets.get_dataset(TREC_DL[str(year)])
    run = RunRetriever(dataset.get_results(), name=f"TREC DL {year} BM25 top-100")
    return run >> dataset.text_loader() if text else run


class RunRetriever(pt.Transformer):
    """Serves a fixed result frame as a retriever: for each input query, its rows of the run (re-ranked by score)."""

    def __init__(self, run: pd.DataFrame, name: str = "run"):
        missing = {"qid", "docno", "score"} - set(run.columns)
        if missing:
            raise ValueError(f"run is missing columns {sorted(missing)}")
        self.run = run[["qid", "docno", "score"]].assign(qid=run["qid"].astype(str), docno=run["docno"].astype(str))
        self.name = name

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        pta.validate.query_frame(inp, extra_columns=[])
        queries = inp.drop(columns=[c for c in ("docno", "score", "rank") if c in inp.columns]).drop_duplicates("qid")
        queries = queries.assign(qid=queries["qid"].astype(str))
        result = queries.merge(self.run, on="qid", how="inner")
        if result.empty:
            return pd.DataFrame(columns=[*queries.columns, "docno", "score", "rank"])
        return pt.model.add_ranks(result)

    def __repr__(self) -> str:
        return f"RunRetriever({self.name!r})"
