"""TREC run files written so that evaluation tools and TIRA accept them: ids checked, one line per (query, document),
ranks from 1 in descending score order, and the file appears complete or not at all (written beside, then renamed).
``.gz`` names are compressed."""

from __future__ import annotations

import errno
import gzip
import os
from pathlib import Path

import pandas as pd

from pyterrier_tite.pt.validation import checked_id


def normalised_run(results: pd.DataFrame) -> pd.DataFrame:
    """``qid, docno, rank, score`` with ids as ``str``, each (qid, docno) once (its best score), queries in first-seen
    order, scores descending within a query (ties by docno, so the order is reproducible) and ranks from 1."""
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


def write_trec_run(results: pd.DataFrame, path: str | os.PathLike, system: str = "pyterrier-tite") -> pd.DataFrame:
    """Write ``results`` as ``qid Q0 docno rank score system`` lines (see :func:`normalised_run`); returns the rows
    written. All or nothing, one writer at a time (:func:`write_file`): a crash, a full disk or a second writer never
    leaves half a run."""
    if not system or any(c.isspace() for c in system):
        raise ValueError(f"the system name must be one token without whitespace, got {system!r}")
    run = normalised_run(results)
    lines = "".join(f"{q} Q0 {d} {r} {s!r} {system}\n" for q, d, r, s in run.itertuples(index=False, name=None))
    data = lines.encode("utf-8")
    write_file(path, gzip.compress(data, mtime=0) if str(path).endswith(".gz") else data, "run file")
    return run


def write_file(path: str | os.PathLike, data: bytes, what: str = "file") -> None:
    """``data`` into ``path``, all or nothing: under ``path``'s write lock (:func:`~pyterrier_tite.pt.locks.write_lock`:
    a second writer fails naming this process), written to a hidden sibling, flushed to the disk (``fsync``: a full
    disk may only show there) and checked, then renamed into place. A failed write is a
    :class:`~pyterrier_tite.pt.locks.WriteFailedError` naming the path and the cause (``No space left on device``,
    ``File too large``); the previous file, if any, stays as it was."""
    from pyterrier_tite.pt.index_build import remove_stale_builds
    from pyterrier_tite.pt.locks import WriteFailedError, write_failure, write_lock

    target = Path(path)
    with write_lock(target):
        remove_stale_builds(target, holding_lock=True)
        staging = target.with_name(f".{target.name}.writing-{os.getpid()}")
        try:
            with open(staging, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
                written = os.fstat(f.fileno()).st_size
            if written != len(data):
                raise OSError(errno.EIO, f"only {written} of {len(data)} bytes reached the disk")
            os.replace(staging, target)
        except OSError as exc:
            raise WriteFailedError(f"cannot write the {what} {target}: {write_failure(exc)}; nothing was written"
                                   + (" (the previous file is unchanged)" if target.exists() else "")) from exc
        finally:
            if os.path.lexists(staging):
                staging.unlink()


def read_trec_run(path: str | os.PathLike, duplicates: str = "refuse") -> pd.DataFrame:
    """A TREC run file (``.gz`` too) as ``qid, docno, rank, score, name``, ids exactly as written (``NA`` stays a
    string). A line that is not ``qid Q0 docno rank score system``, a score that is not a number (``nan`` included),
    a rank that is not an integer and an empty file are errors naming file and line. A (qid, docno) on two lines is
    refused (``duplicates="refuse"``: evaluation tools would count it once or twice, changing the metrics) or, with
    ``duplicates="warn"``, kept with a warning giving the count (re-ranking scores each pair once)."""
    from pyterrier_tite.pt.inputs import line_number, whitespace_table

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
    from pyterrier_tite.pt.inputs import line_number

    qids, docnos = pd.factorize(run["qid"])[0], pd.factorize(run["docno"])[0]
    repeated = pd.Series(qids.astype("int64") * (int(docnos.max()) + 1) + docnos).duplicated(keep="first")
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
    import warnings

    warnings.warn(f"{message}; each pair is re-ranked once, at its best score", UserWarning, stacklevel=3)
