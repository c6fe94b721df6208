"""Reading the text files users give exactly: UTF-8 lines split at ``\\n`` only, JSON records one a line (ids and
texts by the value rules), whitespace tables without quoting or NA values. Every problem is a ``ValueError`` naming
the file and the line."""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Iterator

import pandas as pd

from pyterrier_tite.store.input_files import binary_lines, is_plain_file
from pyterrier_tite.store.values import checked_id, checked_text


def is_file_argument(value: str) -> bool:
    """A path to something that exists (a file, a FIFO, ``/dev/stdin``), not an ir_datasets id; a folder is refused."""
    if os.path.isdir(value):
        raise ValueError(f"{value} is a folder; expected a file or an ir_datasets id")
    return os.path.exists(value)


def text_lines(path: str | os.PathLike) -> Iterator[tuple[int, str]]:
    """``(line number, line without its line ending)`` of a UTF-8 text file, read once (a stream, compressed too)."""
    for number, raw in binary_lines(path):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            message = f"{path}, line {number}: not UTF-8 text ({exc.reason}); convert the file to UTF-8"
            raise ValueError(message) from None
        yield number, line.removesuffix("\r")


def jsonl_records(path: str | os.PathLike) -> Iterator[tuple[int, dict]]:
    """``(line number, record)`` of a ``.jsonl(.gz)`` file; a line that is not a JSON object names file and line."""
    for number, line in text_lines(path):
        if line.strip():
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}, line {number}: not JSON ({exc})") from exc
            if not isinstance(record, dict):
                raise ValueError(f"{path}, line {number}: not a JSON object ({_short(record)}); one record a line")
            yield number, record


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def field_name(record: dict, names: tuple[str, ...], where) -> str:
    """The first of ``names`` present in ``record`` (alternative spellings such as docno / doc_id)."""
    for name in names:
        if name in record:
            return name
    raise ValueError(f"{where}: a record lacks {' / '.join(names)} (it has {sorted(record)})")


def json_kind(value) -> str | None:
    """The JSON type of a value no id or text may have (None for strings, numbers and null)."""
    if isinstance(value, bool):
        return "boolean"
    return "list" if isinstance(value, list) else "object" if isinstance(value, dict) else None


def json_id(record: dict, names: tuple[str, ...], where: str) -> str:
    """An id field of a JSON record as ``str``: strings and integers; anything else is refused naming ``where``."""
    name = field_name(record, names, where)
    value = record[name]
    kind = json_kind(value) or ("number with a fraction / exponent" if isinstance(value, float) else None)
    if kind:
        raise ValueError(f"{where}: {name} is a JSON {kind} ({_short(value)}); ids are strings or integers")
    if value is None:
        raise ValueError(f"{where}: {name} is null; every record needs an id")
    try:
        return checked_id(value, name)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def json_text(value, name: str, where: str, row_id: str) -> str:
    """A text field of a JSON record as ``str`` (numbers too); null, booleans, lists and objects are refused, naming
    ``where``, the field and ``row_id``."""
    kind = json_kind(value)
    if kind:
        raise ValueError(f"{where}: {name} is a JSON {kind} ({_short(value)}) for {row_id}; texts are strings")
    try:
        return checked_text(value, name, row_id)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def whitespace_table(
    path: str | os.PathLike, width: int, what: str, layout: str, hints: dict[int, str] | None = None
) -> pd.DataFrame:
    """The non-blank lines of a whitespace-separated file as ``width`` string columns, values exactly as written; a
    line of another width (``hints[n]``: a hint for ``n`` fields) or an empty file is an error naming ``layout``."""
    _LINE_NUMBERS.pop(os.fspath(path), None)
    if not is_plain_file(path):  # a stream (FIFO, pipe, stdin) or compressed data: read once, line by line
        return _scanned_table(path, width, what, layout, hints or {})
    try:  # pandas' C reader (fast); anything unusual is read again line by line to name the line
        table = pd.read_csv(
            path, sep=r"\s+", header=None, dtype=object, na_filter=False, quoting=csv.QUOTE_NONE, encoding="utf-8"
        )
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, EOFError, OSError):
        table = None
    if table is None or table.shape[1] != width or (table[width - 1] == "").any():
        table = _scanned_table(path, width, what, layout, hints or {})
    return table


def _scanned_table(path, width: int, what: str, layout: str, hints: dict[int, str]) -> pd.DataFrame:
    rows, numbers = [], []
    for number, line in text_lines(path):
        fields = line.split()
        if fields and len(fields) != width:
            hint = hints.get(len(fields), "")
            raise ValueError(f"{path}, line {number}: {len(fields)} fields; a {what} line is `{layout}`{hint}")
        if fields:
            rows.append(fields)
            numbers.append(number)
    if not rows:
        raise ValueError(f"{path}: empty (no {what} lines); a {what} line is `{layout}`")
    table = pd.DataFrame(rows, dtype=object)
    _LINE_NUMBERS[os.fspath(path)] = numbers  # a stream cannot be read again to name a line
    return table


#: the line numbers of the rows of the last table read line by line from each path
_LINE_NUMBERS: dict[str, list[int]] = {}


def line_number(path: str | os.PathLike, row: int) -> int:
    """The line of the ``row``-th non-blank line of a file (remembered from a stream, else read again)."""
    numbers = _LINE_NUMBERS.get(os.fspath(path))
    if numbers is not None and row < len(numbers):
        return numbers[row]
    seen = -1
    for number, line in text_lines(path):
        seen += bool(line.split())
        if seen == row:
            return number
    raise IndexError(f"{path} has no row {row}")
