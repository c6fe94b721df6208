"""TIREx / TIRA inputs and outputs, read and written without the ``tira`` package or the network.

TIRA mounts the input at ``$inputDataset`` (or ``$TIRA_INPUT_DATASET``) and collects ``$outputDir`` (or
``$TIRA_OUTPUT_DIR``). Re-ranking inputs are ``rerank.jsonl(.gz)`` (qid, query, docno, text, rank, score and
``original_*`` fields); full-rank inputs are ``documents.jsonl(.gz)`` or ``corpus.jsonl.gz`` (docno or doc_id; text or
default_text) with ``queries.jsonl`` (qid, query) or ``queries.xml``. Ids may be JSON integers: they become strings.
The output is ``run.txt`` (``qid Q0 docno rank score system``) and ``ir-metadata.yml``.
"""

from __future__ import annotations

import json
import os
import platform
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from pyterrier_tite.pt.inputs import field, iter_corpus, load_topics, read_jsonl
from pyterrier_tite.pt.run_files import write_trec_run
from pyterrier_tite.pt.validation import checked_id, checked_text

INPUT_VARIABLES = ("inputDataset", "TIRA_INPUT_DATASET")
OUTPUT_VARIABLES = ("outputDir", "TIRA_OUTPUT_DIR")


def tira_dir(given: str | None, variables: tuple[str, ...], what: str) -> Path:
    """``given``, else the first of TIRA's environment variables that is set; a clear error when none is."""
    value = given or next((os.environ[v] for v in variables if os.environ.get(v)), None)
    if not value:
        raise ValueError(f"no {what} folder: pass it or set ${variables[0]} / ${variables[1]}")
    return Path(value)


def _first_file(folder: Path, names: tuple[str, ...]) -> Path | None:
    return next((folder / n for n in names if (folder / n).is_file()), None)


def read_rerank(folder: str | os.PathLike) -> pd.DataFrame:
    """The re-ranking input as a result frame ``qid, query, docno, text, score, rank`` (ids as str)."""
    folder = Path(folder)
    file = _first_file(folder, ("rerank.jsonl.gz", "rerank.jsonl"))
    if file is None:
        raise FileNotFoundError(f"{folder} has no rerank.jsonl(.gz): not a TIREx re-ranking input")
    rows = []
    for r in read_jsonl(file):
        qid, docno = checked_id(field(r, ("qid",), file), "qid"), checked_id(field(r, ("docno",), file), "docno")
        rows.append(
            {
                "qid": qid,
                "query": checked_text(field(r, ("query",), file), "query", f"qid {qid!r}"),
                "docno": docno,
                "text": checked_text(field(r, ("text",), file), "text", f"docno {docno!r}"),
                "score": float(r.get("score", 0.0) or 0.0),
                "rank": int(r.get("rank", 0) or 0),
            }
        )
    return pd.DataFrame(rows, columns=["qid", "query", "docno", "text", "score", "rank"])


def iter_documents(folder: str | os.PathLike) -> Iterator[dict]:
    """The full-rank corpus as ``{docno, text}`` dicts (for indexing), read by the corpus-file rules of
    :func:`~pyterrier_tite.pt.inputs.iter_corpus`."""
    folder = Path(folder)
    file = _first_file(folder, ("documents.jsonl.gz", "documents.jsonl", "corpus.jsonl.gz", "corpus.jsonl"))
    if file is None:
        raise FileNotFoundError(f"{folder} has no documents.jsonl(.gz) or corpus.jsonl.gz")
    yield from iter_corpus(str(file))


def read_queries(folder: str | os.PathLike) -> pd.DataFrame:
    """The topics as ``qid, query``: ``queries.jsonl`` or, failing that, ``queries.xml`` (TREC topic XML)."""
    folder = Path(folder)
    file = _first_file(folder, ("queries.jsonl", "queries.xml"))
    if file is None:
        raise FileNotFoundError(f"{folder} has no queries.jsonl or queries.xml")
    return load_topics(str(file))


def write_tirex_output(results: pd.DataFrame, folder: str | os.PathLike, system: str, metadata: dict) -> Path:
    """``run.txt`` (normalised, see :func:`~pyterrier_tite.pt.run_files.write_trec_run`) and ``ir-metadata.yml``
    describing how it was made; returns the run file."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    run = write_trec_run(results, folder / "run.txt", system=system)
    if run["qid"].nunique() < 3:
        import warnings

        warnings.warn(f"TIRA expects runs for at least 3 queries; this one has {run['qid'].nunique()}", stacklevel=2)
    (folder / "ir-metadata.yml").write_text(_ir_metadata(system, metadata), encoding="utf-8")
    return folder / "run.txt"


def _ir_metadata(system: str, metadata: dict) -> str:
    """A small ir_metadata (https://www.ir-metadata.org) record: tag, software, platform and the run's settings."""
    import pyterrier_tite

    lines = [
        "schema version: '0.1'",
        f"tag: {json.dumps(system)}",
        f"date: {json.dumps(datetime.now(timezone.utc).isoformat(timespec='seconds'))}",
        "implementation:",
        "  source:",
        "    name: pyterrier-tite",
        f"    version: {json.dumps(pyterrier_tite.__version__)}",
        "platform:",
        f"  python: {json.dumps(platform.python_version())}",
        f"  machine: {json.dumps(platform.machine())}",
        "method:",
        *(f"  {key}: {json.dumps(value)}" for key, value in metadata.items()),
    ]
    return "\n".join(lines) + "\n"
