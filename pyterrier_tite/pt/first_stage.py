"""First-stage retrievers: BM25 through PISA (no Java) and the provided TREC DL BM25 top-100 runs; the candidates
re-rankers are evaluated and trained on, with their qrels."""

from __future__ import annotations

import pandas as pd
import pyterrier as pt
import pyterrier_alpha as pta

from pyterrier_tite import datasets
from pyterrier_tite.pt.schematic import KeyedEquality
from pyterrier_tite.pt.validation import CheckedQueries
from pyterrier_tite.store.pisa_build import pisa_index
from pyterrier_tite.store.pisa_derived import open_pisa_retriever
from pyterrier_tite.text import join_text_columns, text_fields

#: TREC DL aliases whose provided BM25 run stands in for full retrieval (the local MS MARCO collection is partial)
TREC_DL = {"2019": "dl19", "2020": "dl20", "dl19": "dl19", "dl20": "dl20"}
#: collections whose qrels for graded measures come from another ID (Cranfield's raw Cleverdon codes run the wrong way)
QRELS_ID = {"cranfield": "cranfield-graded"}


def bm25(dataset: str, k1: float = 0.9, b: float = 0.4, num_results: int = 1000, **index_args) -> BM25:
    """BM25 over a collection's cached PISA index (built on first use). No Java anywhere. See :class:`BM25`.

    Example::

        from pyterrier.measures import nDCG   # measures as objects: PyTerrier 1.x refuses the string 'nDCG@10'
        ds = t.datasets.get_dataset('vaswani')
        pt.Experiment([t.bm25('vaswani')], ds.get_topics(), ds.get_qrels(), [nDCG@10])
    """
    return BM25(dataset, k1=k1, b=b, num_results=num_results, **index_args)


class BM25(KeyedEquality, pt.Transformer):
    """BM25 over a collection's cached PISA index, queries checked first (:class:`CheckedQueries`). Its repr names
    the collection and settings, never the cache folder, so ``pt.Experiment(..., save_dir=)`` can name files after
    it; ``(bm25 % k).compile()`` asks PISA for ``k`` results."""

    def __init__(self, dataset: str, k1: float = 0.9, b: float = 0.4, num_results: int = 1000, **index_args):
        if datasets.irds_id(dataset).startswith("msmarco-passage/"):
            pisa_index(dataset)  # raises the explanatory error
        self.dataset, self.k1, self.b, self.num_results, self.index_args = dataset, k1, b, num_results, index_args
        index = pisa_index(dataset, **index_args)
        self.retriever = open_pisa_retriever(index, "bm25", num_results, index.threads, k1=k1, b=b)  # faults handled
        self.checked = CheckedQueries()

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        return self.retriever(self.checked(inp))

    def fuse_rank_cutoff(self, k: int) -> BM25 | None:
        """``% k`` with ``k`` below ``num_results`` becomes PISA's own cut (after ``.compile()``)."""
        if k >= self.num_results:
            return None
        return BM25(self.dataset, k1=self.k1, b=self.b, num_results=k, **self.index_args)

    def eq_key(self) -> tuple:
        return (self.dataset, self.k1, self.b, self.num_results, tuple(sorted(self.index_args.items())))

    def __repr__(self) -> str:
        extra = "".join(f", {k}={v!r}" for k, v in sorted(self.index_args.items()))
        return f"BM25({self.dataset!r}, k1={self.k1}, b={self.b}, num_results={self.num_results}{extra})"


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
        self._source = pt.Transformer.from_df(self.run)  # the run's rows of each query asked

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        pta.validate.query_frame(inp, extra_columns=[])
        queries = inp.drop(columns=[c for c in ("docno", "score", "rank") if c in inp.columns]).drop_duplicates("qid")
        results = self._source(queries.assign(qid=queries["qid"].astype(str)))
        return pt.model.add_ranks(results)

    def __repr__(self) -> str:
        return f"RunRetriever({self.name!r})"


def candidates(dataset: str, depth: int = 100) -> pt.Transformer:
    """Queries -> BM25 top-``depth`` (qid, query, docno, score, rank, text). TREC DL uses the provided top-100."""
    if str(dataset) in TREC_DL:
        return trec_dl_bm25(dataset) % depth
    ds = datasets.get_dataset(dataset)
    fields = text_fields(datasets.irds_id(dataset))
    return bm25(dataset, num_results=depth) >> ds.text_loader(fields) >> pt.apply.generic(join_text_columns)


def topics_and_qrels(dataset: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Topics (qid, query) and qrels (qid, docno, label) of a collection or TREC DL year ('2019', 'dl20', ...)."""
    name = TREC_DL.get(str(dataset), dataset)
    topics = datasets.get_dataset(name).get_topics()
    qrels = datasets.get_dataset(QRELS_ID.get(name, name)).get_qrels()
    return topics[topics["qid"].isin(set(qrels["qid"]))], qrels
