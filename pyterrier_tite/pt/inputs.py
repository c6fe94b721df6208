"""What batch commands read: topics, qrels and corpora given either as an ir_datasets id (or alias) or as a file, so
the same command works on TREC DL / BEIR ids and on a user's own ``.jsonl`` / ``.tsv`` / TREC files.

File formats: corpora ``.jsonl(.gz)`` (docno or doc_id; text or default_text, else title + text) or ``.tsv(.gz)``
(``docno<TAB>text``); topics ``.jsonl`` (qid, query), ``.tsv`` (``qid<TAB>query``), ``.xml`` (TREC topic XML) or a
TREC topics file; qrels a TREC qrels file (``qid 0 docno label``)."""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Iterator

import pandas as pd

from pyterrier_tite.pt.validation import checked_id, checked_text
from pyterrier_tite.text import document_text, text_fields


def is_file_argument(value: str) -> bool:
    """A path to an existing file (anything else is taken as an ir_datasets id or alias)."""
    return os.path.isfile(value)


def _open_text(path: str):
    return gzip.open(path, "rt", encoding="utf-8") if path.endswith(".gz") else open(path, encoding="utf-8")


def read_jsonl(path: str | os.PathLike) -> Iterator[dict]:
    """The records of a ``.jsonl(.gz)`` file; a line that is not JSON is an error naming the file and line."""
    with _open_text(os.fspath(path)) as f:
        for number, line in enumerate(f, 1):
            if line.strip():
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{path}, line {number}: not JSON ({exc})") from exc


def field(record: dict, names: tuple[str, ...], path: str | os.PathLike) -> object:
    """The first of ``names`` present in ``record`` (alternative spellings such as docno / doc_id)."""
    for name in names:
        if name in record:
            return record[name]
    raise ValueError(f"{path}: a record lacks {' / '.join(names)} (it has {sorted(record)})")


def _stem(path: str) -> str:
    return path[: -len(".gz")] if path.endswith(".gz") else path


def _doc_text(record: dict, path: str) -> object:
    """``default_text`` as given, else title + text by the one document-text rule."""
    if "default_text" in record:
        return record["default_text"]
    if "text" in record:
        return None if record["text"] is None else document_text(record)
    if "title" in record:
        return record["title"]
    raise ValueError(f"{path}: a document lacks text / default_text (it has {sorted(record)})")


def iter_corpus(source: str) -> Iterator[dict]:
    """``{docno, text}`` dicts from a corpus file, or an ir_datasets collection's documents (all its text fields)."""
    if is_file_argument(source):
        yield from _iter_corpus_file(source)
        return
    from pyterrier_tite import datasets
    dataset_id = datasets.irds_id(source)
    fields = text_fields(dataset_id)
    for doc in datasets.get_dataset(dataset_id).get_corpus_iter(verbose=False):
        yield {"docno": checked_id(doc["docno"], "docno"), "text": document_text(doc, fields)}


def _iter_corpus_file(path: str) -> Iterator[dict]:
    kind = _stem(path).rsplit(".", 1)[-1]
    for number, (raw_id, text) in enumerate(_corpus_records(path, kind), 1):
        docno = checked_id(raw_id, f"docno (record {number} of {path})")
        yield {"docno": docno, "text": checked_text(text, "text", f"docno {docno!r}")}


def _corpus_records(path: str, kind: str) -> Iterator[tuple[object, object]]:
    """``(docno, text)`` per document of a ``.jsonl`` or ``.tsv`` corpus file."""
    if kind == "jsonl":
        for record in read_jsonl(path):
            yield field(record, ("docno", "doc_id"), path), _doc_text(record, path)
    elif kind == "tsv":
        with _open_text(path) as f:
            for line in f:
                if line.strip():
                    raw_id, _, text = line.rstrip("\n").partition("\t")
                    yield raw_id, text
    else:
        raise ValueError(f"{path}: corpus files are .jsonl(.gz) or .tsv(.gz)")


def load_topics(source: str) -> pd.DataFrame:
    """``qid, query`` (str ids) from a topics file or an ir_datasets id."""
    if not is_file_argument(source):
        from pyterrier_tite import datasets

        topics = datasets.get_dataset(source).get_topics()
        topics = topics.assign(qid=topics["qid"].astype(str))
    else:
        topics = _topics_file(source)
    for qid, query in zip(topics["qid"], topics["query"], strict=True):
        checked_text(query, "query", f"qid {qid!r}")
    return topics


def _topics_file(path: str) -> pd.DataFrame:
    import pyterrier as pt

    kind = _stem(path).rsplit(".", 1)[-1]
    if kind == "jsonl":
        rows = [
            (checked_id(field(r, ("qid", "query_id"), path), "qid"), field(r, ("query", "text"), path))
            for r in read_jsonl(path)
        ]
        return pd.DataFrame(rows, columns=["qid", "query"])
    if kind == "tsv":
        frame = pd.read_csv(path, sep="\t", header=None, names=["qid", "query"], dtype=str, keep_default_na=False)
        return frame.assign(qid=[checked_id(q, "qid") for q in frame["qid"]])
    if kind == "xml":
        topics = pt.io.read_topics(path, format="trecxml", tags=["query"])
        return topics.assign(qid=topics["qid"].astype(str))[["qid", "query"]]
    return pt.io.read_topics(path, format="trec")


def load_qrels(source: str) -> pd.DataFrame:
    """``qid, docno, label`` (str ids) from a TREC qrels file or an ir_datasets id."""
    import pyterrier as pt

    if is_file_argument(source):
        qrels = pt.io.read_qrels(source)
    else:
        from pyterrier_tite import datasets

        qrels = datasets.get_dataset(source).get_qrels()
    return qrels.assign(qid=qrels["qid"].astype(str), docno=qrels["docno"].astype(str))
