"""Access to IR collections through ir_datasets, offline when ``IR_DATASETS_HOME`` points at a mirror.

Standard IDs (``irds:vaswani``, ``irds:cranfield``, ``irds:beir/scifact/test``,
``irds:msmarco-passage/trec-dl-2019/judged``, ...) go straight to ``pt.get_dataset``. Collections that ir_datasets
does not know are read from ``$IR_DATASETS_HOME/local/`` and registered here under stable names:

- ``irds:local/cisi``, ``irds:local/cacm``: docs, queries, qrels
- ``irds:local/cranfield-graded``: Cranfield docs and queries with graded qrels (gain = 5 - Cleverdon code)
- :func:`msmarco_train_triples`: the 100 MS MARCO train triples (query, positive, negative text)

Nothing hard-codes a folder: the home is ir_datasets' own (``IR_DATASETS_HOME`` or ``~/.ir_datasets``).
"""

from __future__ import annotations

import os

import ir_datasets
import pandas as pd
import pyterrier as pt

#: short names accepted everywhere a dataset is expected, mapped to their ir_datasets IDs
ALIASES: dict[str, str] = {
    "vaswani": "vaswani",
    "cranfield": "cranfield",
    "cranfield-graded": "local/cranfield-graded",
    "scifact": "beir/scifact/test",
    "scifact-train": "beir/scifact/train",
    "cisi": "local/cisi",
    "cacm": "local/cacm",
    "dl19": "msmarco-passage/trec-dl-2019/judged",
    "dl20": "msmarco-passage/trec-dl-2020/judged",
}

#: the collections with a full document set, i.e. those where first-stage retrieval is meaningful
FULL_COLLECTIONS = ("vaswani", "cranfield", "beir/scifact/test", "local/cisi", "local/cacm")

#: the collections the project evaluates on (README, docs/results.md): no training command may default to one
EVALUATION_COLLECTIONS = (
    *FULL_COLLECTIONS,
    "local/cranfield-graded",
    "msmarco-passage/trec-dl-2019/judged",
    "msmarco-passage/trec-dl-2020/judged",
    "msmarco-passage/trec-dl-2019",
    "msmarco-passage/trec-dl-2020",
)


def is_evaluation_collection(name: str) -> bool:
    """Whether ``name`` (an ID, alias or TREC DL year) names a collection the project reports results on."""
    name = {"2019": "dl19", "2020": "dl20"}.get(str(name), str(name))
    return irds_id(name) in EVALUATION_COLLECTIONS


_LOCAL_TSV = ("cisi", "cacm")


def home() -> str:
    """The ir_datasets home in use (``IR_DATASETS_HOME`` or ir_datasets' default)."""
    return str(ir_datasets.util.home_path())


def local_dir(*parts: str) -> str:
    """Path under ``<home>/local``, where collections unknown to ir_datasets live."""
    return os.path.join(home(), "local", *parts)


def irds_id(name: str) -> str:
    """Normalise ``'irds:beir/scifact/test'``, ``'beir/scifact/test'`` or an alias like ``'scifact'`` to an ID."""
    name = name[len("irds:") :] if name.startswith("irds:") else name
    return ALIASES.get(name, name)


def get_dataset(name: str):
    """``pt.get_dataset`` for an ID or alias, after the local collections are registered."""
    register_local()
    return pt.get_dataset("irds:" + irds_id(name))


def register_local() -> list[str]:
    """Register the local collections found under ``<home>/local`` (idempotent); returns the registered IDs."""
    registered = []
    for name in _LOCAL_TSV:
        base = local_dir(name)
        if os.path.exists(os.path.join(base, "docs.tsv")):
            _register(
                f"local/{name}",
                lambda base=base: ir_datasets.create_dataset(
                    docs_tsv=os.path.join(base, "docs.tsv"),
                    queries_tsv=os.path.join(base, "queries.tsv"),
                    qrels_trec=os.path.join(base, "qrels.txt"),
                ),
            )
            registered.append(f"local/{name}")
    graded = local_dir("cranfield-graded", "qrels.txt")
    if os.path.exists(graded):
        _register("local/cranfield-graded", lambda: _cranfield_graded(graded))
        registered.append("local/cranfield-graded")
    return registered


def msmarco_train_triples(name: str = "msmarco-train-triples-100") -> pd.DataFrame:
    """Text triples ``query, text_pos, text_neg`` from ``<home>/local/<name>/triples.tsv``."""
    path = local_dir(name, "triples.tsv")
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"{path} not found: the MS MARCO triples are read from the local folder of the ir_datasets home "
            f"(set IR_DATASETS_HOME to a mirror that has local/{name}/triples.tsv)"
        )
    rows = []
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            parts = line.rstrip("\n").split("\t")
            if len(parts) != 3:
                raise ValueError(f"{path}:{line_no}: expected 3 tab-separated fields, got {len(parts)}")
            rows.append(parts)
    return pd.DataFrame(rows, columns=["query", "text_pos", "text_neg"])


def _register(dataset_id: str, make) -> None:
    if dataset_id not in ir_datasets.registry:
        ir_datasets.registry.register(dataset_id, make())


def _cranfield_graded(qrels_path: str):
    cranfield = ir_datasets.load("cranfield")
    qrels = ir_datasets.formats.TrecQrels(
        ir_datasets.util.LocalDownload(qrels_path),
        {0: "not relevant", 1: "minimum interest", 2: "useful background", 3: "high relevance", 4: "complete answer"},
    )
    return ir_datasets.datasets.base.Dataset(cranfield.docs_handler(), cranfield.queries_handler(), qrels)
