"""TREC run files as evaluation tools and TIRA accept them (one line per query and document, ranks from 1 by
descending score, all or nothing), with the collection a run ranks recorded beside it (:data:`RUN_RECORD`), so
``evaluate`` / ``rerank`` refuse it against another; TREC qrels read exactly (:func:`load_qrels`)."""

from __future__ import annotations

import gzip
import json
import os
import stat
import warnings
from pathlib import Path

import pandas as pd

from pyterrier_tite.store.atomic import write_file
from pyterrier_tite.store.text_files import is_file_argument, line_number, whitespace_table
from pyterrier_tite.store.values import checked_id


def normalised_run(results: pd.DataFrame) -> pd.DataFrame:
    """``qid, docno, rank, score``: ids as ``str``, each (qid, docno) once (its best score), queries in first-seen
    order, scores descending (ties by docno, so the order is reproducible), ranks from 1."""
    missing = {"qid", "docno", "score"} - set(results.columns)
    if missing:
        raise ValueError(f"a run needs columns qid, docno, score; missing {sorted(missing)}")
    run = pd.DataFrame(
        {
            "qid": [checked_id(q, "qid") for q in results["qid"]],
            "docno": [checked_id(d, "docno") for d in results["docno"]],
            "score": pd.to_numeric(results["score"], errors="raise").astype("float64"),
        }
    )
    if run["score"].isna().any():
        bad = run.loc[run["score"].isna()].iloc[0]
        raise ValueError(f"missing score for qid {bad['qid']!r}, docno {bad['docno']!r}")
    order = {q: i for i, q in enumerate(dict.fromkeys(run["qid"]))}
    run = run.assign(_q=run["qid"].map(order)).sort_values(["_q", "score", "docno"], ascending=[True, False, True])
    run = run.drop_duplicates(["qid", "docno"], keep="first").drop(columns="_q")
    run["rank"] = run.groupby("qid", sort=False).cumcount() + 1
    return run[["qid", "docno", "rank", "score"]].reset_index(drop=True)


#: the suffix of the record beside a run (``<run>.meta.json``: ``{"collection": ID}``)
RUN_RECORD = ".meta.json"


def write_trec_run(
    results: pd.DataFrame, path: str | os.PathLike, system: str = "pyterrier-tite", collection: str | None = None
) -> pd.DataFrame:
    """Write ``results`` as ``qid Q0 docno rank score system`` lines (:func:`normalised_run`), all or nothing;
    returns the rows written. ``collection`` (the ir_datasets ID ranked) is recorded beside the run, else removed."""
    if not system or any(c.isspace() for c in system):
        raise ValueError(f"the system name must be one token without whitespace, got {system!r}")
    run = normalised_run(results)
    lines = "".join(f"{q} Q0 {d} {r} {s!r} {system}\n" for q, d, r, s in run.itertuples(index=False, name=None))
    data = lines.encode("utf-8")
    record = os.fspath(path) + RUN_RECORD
    Path(record).unlink(missing_ok=True)
    write_file(path, gzip.compress(data, mtime=0) if str(path).endswith(".gz") else data, "run file")
    if collection is not None:
        write_file(record, (json.dumps({"collection": collection}) + "\n").encode(), "run record")
    return run


def run_collection(path: str | os.PathLike) -> str | None:
    """The collection recorded beside a run, or None; the record is data (no link followed, at most 64 KiB)."""
    record = os.fspath(path) + RUN_RECORD
    try:
        fd = os.open(record, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        message = f"{record} cannot be read as the record of the run {path} ({exc.strerror}): remove it"
        raise ValueError(message) from None
    with os.fdopen(fd, "rb") as f:
        raw = f.read(1 << 16) if stat.S_ISREG(os.fstat(f.fileno()).st_mode) else b""
    try:
        collection = json.loads(raw).get("collection")
    except (UnicodeDecodeError, json.JSONDecodeError, AttributeError):
        collection = 0
    if collection is not None and not isinstance(collection, str):
        raise ValueError(f'{record} is no run record ({{"collection": ID}}): remove it, or write the run again')
    return collection


def top_k(run: pd.DataFrame, k: int) -> pd.DataFrame:
    """Each (qid, docno) once and the best ``k`` rows of each query: by score, as evaluation tools order a run, ties
    by rank (when every rank is positive), then by row order; a NaN score is an error."""
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


def read_trec_run(path: str | os.PathLike, duplicates: str = "refuse") -> pd.DataFrame:
    """A TREC run file (``.gz`` too) as ``qid, docno, rank, score, name``, ids exactly as written; a malformed line,
    a score that is no number (``nan`` too) and an empty file are errors naming file and line. A (qid, docno) on two
    lines is refused (tools would count it once or twice) or, with ``duplicates="warn"``, kept with a warning."""
    if duplicates not in ("refuse", "warn"):
        raise ValueError(f"duplicates is 'refuse' or 'warn', got {duplicates!r}")
    hints = {5: " (is the Q0 column missing?)"}
    table = whitespace_table(path, 6, "TREC run", "qid Q0 docno rank score system", hints)
    scores = pd.to_numeric(table[4], errors="coerce")
    if scores.isna().any():
        i = int(scores.isna().to_numpy().argmax())
        score, qid, docno = table.at[i, 4], table.at[i, 0], table.at[i, 2]
        raise ValueError(f"{path}, line {line_number(path, i)}: score {score!r} is not a number (qid {qid!r}, docno "
                         f"{docno!r}); every line needs a numeric score")  # fmt: skip
    try:
        ranks = table[3].astype("int64")
    except (ValueError, OverflowError):
        i = int((~table[3].str.fullmatch(r"[+-]?\d{1,18}")).to_numpy().argmax())
        raise ValueError(f"{path}, line {line_number(path, i)}: rank {table.at[i, 3]!r} is not an integer; a TREC "
                         "run line is `qid Q0 docno rank score system`") from None  # fmt: skip
    run = pd.DataFrame({"qid": table[0], "docno": table[2], "rank": ranks, "score": scores, "name": table[5]})
    _refuse_or_warn_duplicates(run, path, duplicates)
    return run


def _refuse_or_warn_duplicates(run: pd.DataFrame, path, duplicates: str) -> None:
    repeated = run.duplicated(["qid", "docno"], keep="first")
    if not repeated.any():
        return
    count, i = int(repeated.sum()), int(repeated.to_numpy().argmax())
    qid, docno = run.at[i, "qid"], run.at[i, "docno"]
    first = int(((run["qid"] == qid) & (run["docno"] == docno)).to_numpy().argmax())
    message = (
        f"{path}: {count} duplicate (qid, docno) line{'s' if count > 1 else ''}; the first: line "
        f"{line_number(path, i)}, qid {qid!r}, docno {docno!r} (also line {line_number(path, first)})"
    )
    if duplicates == "refuse":
        raise ValueError(f"{message}; a run lists each document once per query: remove the repeated lines")
    warnings.warn(f"{message}; each pair is re-ranked once, at its best score", UserWarning, stacklevel=3)


def load_qrels(source: str) -> pd.DataFrame:
    """``qid, docno, label`` (str ids, int grades) from a TREC qrels file or an ir_datasets id. A document judged
    twice for a query is refused when the grades differ and counted once (with a warning) when they agree."""
    if is_file_argument(source):
        hints = {3: " (is the iteration column missing? e.g. `1 0 doc7 2`)"}
        table = whitespace_table(source, 4, "qrels", "qid iteration docno label", hints)
        bad = ~table[3].str.fullmatch(r"[+-]?\d+")
        if bad.any():
            i = int(bad.to_numpy().argmax())
            line = line_number(source, i)
            raise ValueError(f"{source}, line {line}: label {table.at[i, 3]!r} is not an integer relevance grade")
        qrels = pd.DataFrame({"qid": table[0], "docno": table[2], "label": table[3].astype("int64")})
        return _one_grade_each(qrels, source, from_file=True)
    from pyterrier_tite import datasets

    qrels = datasets.get_dataset(source).get_qrels()
    qrels = qrels.assign(qid=qrels["qid"].astype(str), docno=qrels["docno"].astype(str))
    return _one_grade_each(qrels, source, from_file=False)


def _one_grade_each(qrels: pd.DataFrame, source: str, from_file: bool) -> pd.DataFrame:
    qrels = qrels.reset_index(drop=True)
    repeated = qrels.duplicated(["qid", "docno"], keep="first")
    if not repeated.any():
        return qrels

    def at(i: int) -> str:
        return f"line {line_number(source, i)}" if from_file else f"row {i + 1}"

    pairs = (
        qrels[repeated]
        .reset_index()
        .merge(qrels[~repeated].reset_index(), on=["qid", "docno"], suffixes=("", "_first"))
    )
    clash = pairs[pairs["label"] != pairs["label_first"]].sort_values("index")
    if len(clash):
        row = clash.iloc[0]
        raise ValueError(
            f"{source}, {at(int(row['index']))}: qid {row['qid']!r}, docno {row['docno']!r} is judged {row['label']} "
            f"here and {row['label_first']} at {at(int(row['index_first']))}; a document has one grade per query: "
            "remove one of the lines"
        )
    count = int(repeated.sum())
    i = int(qrels.index[repeated][0])
    warnings.warn(
        f"{source}: {count} duplicate judgement line{'s' if count > 1 else ''} (same grade; each counted once), the "
        f"first at {at(i)}: qid {qrels.at[i, 'qid']!r}, docno {qrels.at[i, 'docno']!r}",
        UserWarning,
        stacklevel=3,
    )
    return qrels[~repeated].reset_index(drop=True)
