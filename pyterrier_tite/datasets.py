"""Access to IR collections through ir_datasets, offline when ``IR_DATASETS_HOME`` points at a mirror.

Standard IDs go straight to ``pt.get_dataset``; ``local/cisi``, ``local/cacm`` and ``local/cranfield-graded`` (graded
qrels: gain = 5 - Cleverdon code) are read from ``<ir_datasets home>/local/`` and registered here."""

from __future__ import annotations

import os
import re
import sys

import ir_datasets
import pyterrier as pt

from pyterrier_tite.start_points import did_you_mean

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


class EvaluationDataError(ValueError):
    """Training on evaluation data without saying so: one line naming the collection, why and the flag to allow it."""


#: a segment of an ir_datasets ID that names a held-out split (``test``, ``dev/small``, ``split200-valid``, ``eval``,
#: ``trec-dl-2019``, ``test-b``); ``judged`` alone is no split (``msmarco-passage/train/judged`` is training data)
EVALUATION_SPLIT = re.compile(r"(?:^|-)(?:test|dev|eval|valid|validation)(?:$|-)|^trec-dl")
#: the names ir_datasets gives training splits
TRAIN_SPLITS = ("train", "training")
#: what a training entry point reads of a collection: its queries / qrels, or only its documents
TRAINING_USES = ("labels", "documents")
_SAID: set[str] = set()  # each note once per process: the command and the library it calls check the same data


def training_id(name: str) -> str:
    """The ir_datasets ID of a training command's data: an ID, alias, ``irds:`` ID or TREC DL year."""
    return irds_id({"2019": "dl19", "2020": "dl20"}.get(str(name), str(name)))


def evaluation_reason(name: str) -> str | None:
    """Why the queries and qrels of ``name`` (an ID, alias or TREC DL year) are evaluation data, or None (BEIR's
    qrels are test qrels unless the split is ``train``)."""
    dataset_id = training_id(name)
    segments = dataset_id.split("/")
    if dataset_id in EVALUATION_COLLECTIONS:
        return "the project reports results on it"
    split = next((s for s in segments[1:] if EVALUATION_SPLIT.search(s)), None)
    if split is not None:
        return f"{split!r} is a held-out evaluation split"
    if segments[0] == "beir" and not set(TRAIN_SPLITS) & set(segments):
        return "a BEIR collection's qrels are its test set"
    return None


def _train_split(name: str) -> str:
    """``name``, or the ``train`` split of a bare ID (``beir/scifact`` -> ``beir/scifact/train``, said in one line)."""
    dataset_id = irds_id(name)
    if any(EVALUATION_SPLIT.search(s) or s in TRAIN_SPLITS for s in dataset_id.split("/")[1:]):
        return name  # already a split (its sub-splits, e.g. train/judged, are subsets of it)
    prefix = dataset_id + "/"
    splits = sorted({k[len(prefix) :].split("/")[0] for k in ir_datasets.registry if k.startswith(prefix)})
    held_out = [s for s in splits if EVALUATION_SPLIT.search(s)]
    train = next((s for s in TRAIN_SPLITS if s in splits), None)
    if train is not None:
        _say(f"note: {name} holds the splits {', '.join(splits)}: training on {prefix}{train}")
        return prefix + train
    if held_out:
        raise EvaluationDataError(
            f"{name} mixes the evaluation splits {', '.join(held_out)} and has no train split: name one split "
            f"({prefix}{held_out[0]}, ...) with --allow-evaluation-data, or train on another collection"
        )
    return name


def check_training_data(name: str, *, uses: str = "labels", allow: bool = False) -> str:
    """The dataset a training entry point reads as ``name`` (``uses``: ``'labels'``, its queries / qrels, or
    ``'documents'``). Labels of evaluation data are refused with :class:`EvaluationDataError` unless ``allow``
    (``--allow-evaluation-data``); a bare ID becomes its train split. Documents of an evaluation collection are
    allowed (the transductive setting of SPLADE from scratch). What is allowed is said in one line on stderr."""
    if uses not in TRAINING_USES:
        raise ValueError(f"uses must be one of {TRAINING_USES}, got {uses!r}")
    if uses == "documents":
        if evaluation_reason(name):
            _say(f"note: training on the documents of {training_id(name)} only, an evaluation collection")
        return name
    dataset = _train_split(name)
    reason = evaluation_reason(dataset)
    if reason is None:
        return dataset
    if not allow:
        raise EvaluationDataError(
            f"{name} is evaluation data ({reason}): training on its queries would make its reported results "
            "meaningless; train on a training split (e.g. scifact-train), or pass --allow-evaluation-data (Python: "
            "allow_evaluation_data=True) to train on it knowingly"
        )
    _say(f"note: training on the queries of {training_id(dataset)}, evaluation data ({reason}), as allowed")
    return dataset


def _say(line: str) -> None:
    if line not in _SAID:
        _SAID.add(line)
        print(line, file=sys.stderr, flush=True)


_LOCAL_TSV = ("cisi", "cacm")


def local_dir(*parts: str) -> str:
    """Path under ``<ir_datasets home>/local``, where collections unknown to ir_datasets live."""
    return os.path.join(str(ir_datasets.util.home_path()), "local", *parts)


def irds_id(name: str) -> str:
    """Normalise ``'irds:beir/scifact/test'``, ``'beir/scifact/test'`` or an alias like ``'scifact'`` to an ID."""
    name = name[len("irds:") :] if name.startswith("irds:") else name
    return ALIASES.get(name, name)


def collection_id(name: str | None) -> str | None:
    """The ir_datasets ID that ``name`` (an ID, alias or ``irds:`` ID) names, or None where it names no registered
    collection (a file, a folder, anything else): None is a side of a join that does not know its collection."""
    if not isinstance(name, str) or not name or os.path.exists(name):
        return None
    register_local()
    dataset_id = irds_id(name)
    return dataset_id if dataset_id in ir_datasets.registry else None


def same_documents(first: str | None, second: str | None) -> bool:
    """Whether two collections (ir_datasets IDs) share ir_datasets' docs handler (the splits of ``beir/scifact``
    do); True where a side is unknown (None) or has no documents: nothing to compare."""
    if first is None or second is None or first == second:
        return True
    handlers = []
    for dataset_id in (first, second):
        dataset = ir_datasets.load(dataset_id)
        if not dataset.has_docs():
            return True
        handlers.append(dataset.docs_handler())
    return handlers[0] is handlers[1] or handlers[0] == handlers[1]


def get_dataset(name: str):
    """``pt.get_dataset`` for an ID or alias, after the local collections are registered."""
    return pt.get_dataset("irds:" + known_id(name))


def known_id(name: str) -> str:
    """The ir_datasets ID that ``name`` (an ID, alias or ``irds:`` ID) names, else a ``FileNotFoundError`` naming
    the closest alias or ID."""
    register_local()
    dataset_id = irds_id(name)
    try:
        ir_datasets.registry[dataset_id]  # also the IDs ir_datasets makes from a pattern on first use
    except KeyError:
        close = did_you_mean(name.removeprefix("irds:"), [*ALIASES, *ir_datasets.registry])
        raise FileNotFoundError(f"{name!r} is neither a file nor a known ir_datasets id / alias{close}") from None
    return dataset_id


def register_local() -> list[str]:
    """Register the local collections found under ``<home>/local`` (idempotent); returns the registered IDs."""
    found = {}  # ID -> how to build it, built only where ir_datasets does not hold it yet
    for name in _LOCAL_TSV:
        base = local_dir(name)
        if os.path.exists(os.path.join(base, "docs.tsv")):
            found[f"local/{name}"] = lambda base=base: ir_datasets.create_dataset(
                docs_tsv=os.path.join(base, "docs.tsv"),
                queries_tsv=os.path.join(base, "queries.tsv"),
                qrels_trec=os.path.join(base, "qrels.txt"),
            )
    graded = local_dir("cranfield-graded", "qrels.txt")
    if os.path.exists(graded):
        found["local/cranfield-graded"] = lambda: _cranfield_graded(graded)
    for dataset_id, make in found.items():
        if dataset_id not in ir_datasets.registry:
            ir_datasets.registry.register(dataset_id, make())
    return list(found)


def _cranfield_graded(qrels_path: str):
    cranfield = ir_datasets.load("cranfield")
    qrels = ir_datasets.formats.TrecQrels(
        ir_datasets.util.LocalDownload(qrels_path),
        {0: "not relevant", 1: "minimum interest", 2: "useful background", 3: "high relevance", 4: "complete answer"},
    )
    return ir_datasets.datasets.base.Dataset(cranfield.docs_handler(), cranfield.queries_handler(), qrels)
