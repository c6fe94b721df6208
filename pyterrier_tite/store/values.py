"""The value rules of every id and text that enters an index, a run file or a transformer (the storage floor,
``pt/`` and ``training/`` check with these): ids are single-token ``str``, None / NaN is an error naming column and
row, ``bytes`` are UTF-8, a qid carries one query text."""

from __future__ import annotations

import math
from collections.abc import Iterable

import pandas as pd

#: the values a text column may hold as UTF-8 bytes
BYTES = (bytes, bytearray, memoryview)


def missing_value(value) -> bool:
    """None and NaN (and pandas' NA) are missing values."""
    if value is None or value is pd.NA:
        return True
    return isinstance(value, float) and math.isnan(value)


def checked_id(value, column: str) -> str:
    """An identifier as ``str`` (integers accepted); missing, empty, whitespace or NUL (which would shift every later
    id of a line-based lexicon such as PISA's) is refused."""
    if missing_value(value):
        raise ValueError(f"missing {column} (None/NaN)")
    text = str(value)
    if not text or any(c.isspace() for c in text) or "\0" in text:
        raise ValueError(f"{column} {text!r} is empty or contains whitespace / NUL; ids must be single tokens")
    return text


def checked_text(value, column: str, row_id: str) -> str:
    """A text field as ``str``; None/NaN is an error naming the row, ``bytes`` are decoded as UTF-8 (``str(b"..")``
    would give the text ``"b'..'"``). NUL bytes become spaces (engines cut at them)."""
    if missing_value(value):
        raise ValueError(f"missing {column} (None/NaN) for {row_id}")
    if isinstance(value, BYTES):
        value = decoded(value, column, row_id)
    return str(value).replace("\0", " ")


def checked_texts(values: Iterable, ids: Iterable, column: str, id_column: str) -> list[str]:
    """Each text of a column checked (:func:`checked_text`), a missing one named by its row's ``id_column``."""
    return [checked_text(v, column, f"{id_column} {i!r}") for v, i in zip(values, ids, strict=True)]


def one_query_per_qid(qids: Iterable, queries: Iterable, column: str = "query") -> None:
    """Refuse a qid that carries two different query texts (e.g. concatenated topic sets; ``str`` and its UTF-8
    ``bytes`` are one text): it would be scored or retrieved against one of them."""
    queries, qids = pd.Series(queries), pd.Series(qids).astype(str).to_numpy()
    if any(isinstance(q, BYTES) for q in queries):
        queries = queries.map(lambda q: bytes(q).decode("utf-8", "replace") if isinstance(q, BYTES) else q)
    texts = queries.groupby(qids, sort=False).nunique(dropna=False)
    clashing = texts[texts > 1]
    if len(clashing):
        qid = clashing.index[0]
        found = queries[qids == qid].unique()[:2].tolist()
        raise ValueError(
            f"qid {qid!r} has {int(clashing.iloc[0])} different {column} texts (e.g. {found}); give each query its "
            "own qid"
        )


def decoded(value: bytes | bytearray | memoryview, column: str, row_id: str) -> str:
    """UTF-8 ``bytes`` as ``str``; other bytes are a ``ValueError`` naming the column, the row and the bad byte."""
    try:
        return bytes(value).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"{column} for {row_id} is bytes that are not valid UTF-8 (byte {exc.object[exc.start]:#04x} at position "
            f"{exc.start}): decode it to str with its encoding first"
        ) from None
