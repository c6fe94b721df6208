"""Input checks at the PyTerrier boundary, one rule per kind of column, the same in every transformer, index and
command: ids written into an index, a run file or PISA's query batch become ``str`` and must be single tokens (in
other frames they pass through as given); a missing value (None / NaN) in a text or query column is a
``ValueError`` naming the column and the first offending id (never the words "None" / "nan"); an empty string is an
empty text; one qid carrying two different query texts is refused (it would be scored against one of them)."""

from __future__ import annotations

import math

import pandas as pd
import pyterrier as pt
import pyterrier_alpha as pta


def missing_value(value) -> bool:
    """None and NaN (and pandas' NA) are missing values."""
    if value is None or value is pd.NA:
        return True
    return isinstance(value, float) and math.isnan(value)


def checked_id(value, column: str) -> str:
    """An identifier as ``str``: integers are accepted; missing values, empty ids and ids with whitespace or NUL
    (which would shift every later id in a line-based lexicon such as PISA's) are refused."""
    if missing_value(value):
        raise ValueError(f"missing {column} (None/NaN)")
    text = str(value)
    if not text or any(c.isspace() for c in text) or "\0" in text:
        raise ValueError(f"{column} {text!r} is empty or contains whitespace / NUL; ids must be single tokens")
    return text


def checked_text(value, column: str, row_id: str) -> str:
    """A text field as ``str``; None/NaN is an error naming the row. NUL bytes become spaces (engines cut at them)."""
    if missing_value(value):
        raise ValueError(f"missing {column} (None/NaN) for {row_id}")
    return str(value).replace("\0", " ")


def text_column(frame: pd.DataFrame, column: str, id_column: str) -> list[str]:
    """The values of a text column, checked (see :func:`checked_text`), in row order."""
    ids = frame[id_column] if id_column in frame.columns else pd.Series(range(len(frame)))
    return [checked_text(v, column, f"{id_column} {i!r}") for v, i in zip(frame[column], ids, strict=True)]


def one_query_per_qid(frame: pd.DataFrame, query_column: str = "query") -> None:
    """Refuse a frame where a qid carries two different query texts (e.g. concatenated topic sets)."""
    if frame.empty or query_column not in frame.columns or "qid" not in frame.columns:
        return
    texts = frame.groupby(frame["qid"].astype(str), sort=False)[query_column].nunique(dropna=False)
    clashing = texts[texts > 1]
    if len(clashing):
        qid = clashing.index[0]
        found = frame.loc[frame["qid"].astype(str) == qid, query_column].unique()[:2].tolist()
        raise ValueError(
            f"qid {qid!r} has {int(clashing.iloc[0])} different {query_column} texts (e.g. {found}); give each "
            "query its own qid"
        )


class CheckedQueries(pt.Transformer):
    """Checks the ``query`` column before an engine sees it: qids become ``str``, a missing query is a ``ValueError``
    naming its qid, so is a qid with two query texts, NUL bytes become spaces (PISA would fail with an opaque
    ``SystemError``). Stateless, so all
    instances are equal and pipelines that start with one still share prefixes in ``pt.Experiment``."""

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        pta.validate.query_frame(inp, extra_columns=["query"])  # names a missing qid / query column
        if inp.empty:
            return inp
        queries = text_column(inp, "query", "qid")
        one_query_per_qid(inp)  # PISA would return both queries' results under the one qid
        return inp.assign(qid=[checked_id(q, "qid") for q in inp["qid"]], query=queries)

    def __eq__(self, other) -> bool:
        return isinstance(other, CheckedQueries)

    def __hash__(self) -> int:
        return hash("CheckedQueries")

    def __repr__(self) -> str:
        return "CheckedQueries()"
