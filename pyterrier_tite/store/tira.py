"""TIREx / TIRA inputs and outputs, without the ``tira`` package or the network: TIRA mounts the input at
``$inputDataset`` (``rerank.jsonl(.gz)``, or documents with queries) and collects ``$outputDir`` (``run.txt`` and
``ir-metadata.yml``)."""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Iterator
from pathlib import Path

import pandas as pd

from pyterrier_tite.store.atomic import write_file
from pyterrier_tite.store.corpus import iter_corpus
from pyterrier_tite.store.ir_metadata import render
from pyterrier_tite.store.locks import write_lock
from pyterrier_tite.store.runs import write_trec_run
from pyterrier_tite.store.text_files import field_name, json_id, json_text, jsonl_records
from pyterrier_tite.store.topics import load_topics

INPUT_VARIABLES = ("inputDataset", "TIRA_INPUT_DATASET")
OUTPUT_VARIABLES = ("outputDir", "TIRA_OUTPUT_DIR")


def tira_dir(given: str | None, variables: tuple[str, ...], what: str) -> Path:
    """``given``, else the first of TIRA's environment variables that is set; a clear error when none is."""
    value = given or next((os.environ[v] for v in variables if os.environ.get(v)), None)
    if not value:
        raise ValueError(f"no {what} folder: pass it or set ${variables[0]} / ${variables[1]}")
    return Path(value)


def _input_file(folder: str | os.PathLike, names: tuple[str, ...], missing: str) -> Path:
    """The first of ``names`` in ``folder``; none there is a ``FileNotFoundError``: "FOLDER has no ``missing``"."""
    folder = Path(folder)
    found = next((folder / n for n in names if (folder / n).is_file()), None)
    if found is None:
        raise FileNotFoundError(f"{folder} has no {missing}")
    return found


def read_rerank(folder: str | os.PathLike) -> pd.DataFrame:
    """The re-ranking input as a result frame ``qid, query, docno, text, score, rank`` (ids as str; a missing score
    or rank is 0); a (qid, docno) on two lines is kept with a warning (it is re-ranked once)."""
    file = _input_file(folder, ("rerank.jsonl.gz", "rerank.jsonl"), "rerank.jsonl(.gz): not a TIREx re-ranking input")
    rows, lines = [], []
    for number, r in jsonl_records(file):
        where = f"{file}, line {number}"
        qid, docno = json_id(r, ("qid",), where), json_id(r, ("docno",), where)
        rows.append(
            {
                "qid": qid,
                "query": json_text(r[field_name(r, ("query",), where)], "query", where, f"qid {qid!r}"),
                "docno": docno,
                "text": json_text(r[field_name(r, ("text",), where)], "text", where, f"docno {docno!r}"),
                "score": _number(r, "score", float, where),
                "rank": _number(r, "rank", int, where),
            }
        )
        lines.append(number)
    frame = pd.DataFrame(rows, columns=["qid", "query", "docno", "text", "score", "rank"])
    repeated = frame.duplicated(["qid", "docno"])
    if repeated.any():
        i = int(repeated.to_numpy().argmax())
        warnings.warn(f"{file}: {int(repeated.sum())} duplicate (qid, docno) line(s), the first at line {lines[i]} "
                      f"(qid {frame.at[i, 'qid']!r}, docno {frame.at[i, 'docno']!r}); each pair is re-ranked once",
                      UserWarning, stacklevel=2)  # fmt: skip
    return frame


def _number(record: dict, name: str, kind: type, where: str):
    """A numeric field (absent or null: 0); another JSON type, NaN or, for ranks, a fraction names file and line."""
    value = record.get(name)
    if value is None:
        return kind(0)
    ok = isinstance(value, int | float) and not isinstance(value, bool) and not math.isnan(value)
    if not ok or (kind is int and not float(value).is_integer()):
        what = "an integer" if kind is int else "a number"
        raise ValueError(f"{where}: {name} {value!r} is not {what}")
    return kind(value)


def iter_documents(folder: str | os.PathLike) -> Iterator[dict]:
    """The full-rank corpus as ``{docno, text}`` dicts, read by the corpus-file rules."""
    names = ("documents.jsonl.gz", "documents.jsonl", "corpus.jsonl.gz", "corpus.jsonl")
    yield from iter_corpus(str(_input_file(folder, names, "documents.jsonl(.gz) or corpus.jsonl.gz")))


def read_queries(folder: str | os.PathLike) -> pd.DataFrame:
    """The topics as ``qid, query``: ``queries.jsonl`` or, failing that, ``queries.xml`` (TREC topic XML)."""
    return load_topics(str(_input_file(folder, ("queries.jsonl", "queries.xml"), "queries.jsonl or queries.xml")))


def write_tirex_output(
    results: pd.DataFrame, folder: str | os.PathLike, system: str, metadata: dict, tracked: dict | None = None
) -> Path:
    """``run.txt`` and its ``ir-metadata.yml`` (``tracked``: what tirex-tracker measured, else the short record), all
    or nothing under ``run.txt``'s write lock (the run is removed when its metadata cannot be written)."""
    folder = Path(folder)
    run_file = folder / "run.txt"
    with write_lock(run_file):
        run = write_trec_run(results, run_file, system=system)
        try:
            write_file(folder / "ir-metadata.yml", render(system, metadata, tracked).encode("utf-8"), "metadata file")
        except BaseException:
            run_file.unlink()
            raise
    if run["qid"].nunique() < 3:
        warnings.warn(f"TIRA expects runs for at least 3 queries; this one has {run['qid'].nunique()}", stacklevel=2)
    return run_file
