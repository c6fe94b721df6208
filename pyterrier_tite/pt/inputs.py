"""What batch commands read: topics, qrels and corpora given either as an ir_datasets id (or alias) or as a file, so
the same command works on TREC DL / BEIR ids and on a user's own ``.jsonl`` / ``.tsv`` / TREC files.

File formats: corpora ``.jsonl(.gz)`` (docno or doc_id; text or default_text, else title + text) or ``.tsv(.gz)``
(``docno<TAB>text``); topics ``.jsonl`` (qid, query), ``.tsv`` (``qid<TAB>query``), ``.xml`` (TREC topic XML:
``<topic number=..><query>..</query></topic>``) or a TREC topics file (``<top> <num> .. <title> .. </top>``); qrels a
TREC qrels file (``qid iteration docno grade``).

Files are read exactly: ids stay the strings written (``NA``, ``null`` and ``001`` are ids, never NaN or ``1``), TSV
has no quoting (a ``"`` is part of the query), JSON ids are strings or integers (integers become ``str``) and JSON
texts strings or numbers. Anything else is a ``ValueError`` naming the file, the line and what the format is."""

from __future__ import annotations

import gzip
import json
import os
import re
import warnings
from collections.abc import Iterator

import pandas as pd

from pyterrier_tite.pt.validation import checked_id, checked_text
from pyterrier_tite.text import document_text, text_fields

#: the text fields a JSONL corpus record may carry
_TEXT_FIELDS = ("default_text", "title", "text")


def is_file_argument(value: str) -> bool:
    """A path to an existing file (anything else is taken as an ir_datasets id or alias)."""
    return os.path.isfile(value)


def _open_text(path: str):
    """Text lines split at ``\\n`` only (a ``\\r`` inside a query stays text; a CRLF ending is removed by
    :func:`text_lines`)."""
    path = os.fspath(path)
    if path.endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8", newline="\n")
    return open(path, encoding="utf-8", newline="\n")


def text_lines(path: str | os.PathLike) -> Iterator[tuple[int, str]]:
    """``(line number, line without its line ending)`` of a UTF-8 text file (``.gz`` too)."""
    number = 0
    try:
        with _open_text(path) as f:
            for number, line in enumerate(f, 1):  # noqa: B007 (the number names a line that is not UTF-8)
                yield number, line.rstrip("\n").removesuffix("\r")
    except UnicodeDecodeError as exc:
        message = f"{path}, line {number + 1}: not UTF-8 text ({exc.reason}); convert the file to UTF-8"
        raise ValueError(message) from None


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


def read_jsonl(path: str | os.PathLike) -> Iterator[dict]:
    """The records of a ``.jsonl(.gz)`` file (see :func:`jsonl_records`)."""
    for _, record in jsonl_records(path):
        yield record


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def field(record: dict, names: tuple[str, ...], where: str | os.PathLike) -> object:
    """The first of ``names`` present in ``record`` (alternative spellings such as docno / doc_id)."""
    return record[_field_name(record, names, where)]


def _field_name(record: dict, names: tuple[str, ...], where) -> str:
    for name in names:
        if name in record:
            return name
    raise ValueError(f"{where}: a record lacks {' / '.join(names)} (it has {sorted(record)})")


def _json_kind(value) -> str | None:
    """The JSON type of a value no id or text may have (None for strings, numbers and null)."""
    if isinstance(value, bool):
        return "boolean"
    return "list" if isinstance(value, list) else "object" if isinstance(value, dict) else None


def json_id(record: dict, names: tuple[str, ...], where: str) -> str:
    """An id field of a JSON record as ``str``: strings and integers; null, floats, booleans, lists and objects are
    refused naming ``where`` (file and line) and the field."""
    name = _field_name(record, names, where)
    value = record[name]
    kind = _json_kind(value) or ("number with a fraction / exponent" if isinstance(value, float) else None)
    if kind:
        raise ValueError(f"{where}: {name} is a JSON {kind} ({_short(value)}); ids are strings or integers")
    if value is None:
        raise ValueError(f"{where}: {name} is null; every record needs an id")
    try:
        return checked_id(value, name)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def json_text(value, name: str, where: str, row_id: str) -> str:
    """A text field of a JSON record as ``str`` (numbers too); null is a missing text, booleans, lists and objects
    are refused, each naming ``where`` (file and line), the field and ``row_id``."""
    kind = _json_kind(value)
    if kind:
        raise ValueError(f"{where}: {name} is a JSON {kind} ({_short(value)}) for {row_id}; texts are strings")
    try:
        return checked_text(value, name, row_id)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def _stem(path: str) -> str:
    return path[: -len(".gz")] if path.endswith(".gz") else path


def _doc_text(record: dict, where: str, docno: str) -> str:
    """``default_text`` as given, else title + text by the one document-text rule."""
    for name in _TEXT_FIELDS:
        if name in record and _json_kind(record[name]):
            json_text(record[name], name, where, f"docno {docno!r}")  # raises, naming the field
    if "default_text" in record:
        return json_text(record["default_text"], "default_text", where, f"docno {docno!r}")
    if "text" in record:
        text = None if record["text"] is None else document_text(record)
        return json_text(text, "text", where, f"docno {docno!r}")
    if "title" in record:
        return json_text(record["title"], "title", where, f"docno {docno!r}")
    raise ValueError(f"{where}: a document lacks text / default_text (it has {sorted(record)})")


def iter_corpus(source: str) -> Iterator[dict]:
    """``{docno, text}`` dicts from a corpus file, or an ir_datasets collection's documents (all its text fields)."""
    if is_file_argument(source):
        for _, docno, text in corpus_file_records(source):
            yield {"docno": docno, "text": text}
        return
    from pyterrier_tite import datasets

    dataset_id = datasets.irds_id(source)
    fields = text_fields(dataset_id)
    for doc in datasets.get_dataset(dataset_id).get_corpus_iter(verbose=False):
        yield {"docno": checked_id(doc["docno"], "docno"), "text": document_text(doc, fields)}


def corpus_file_records(path: str) -> Iterator[tuple[int, str, str]]:
    """``(line, docno, text)`` per document of a ``.jsonl`` or ``.tsv`` corpus file, checked."""
    kind = _stem(path).rsplit(".", 1)[-1]
    if kind == "jsonl":
        for number, record in jsonl_records(path):
            where = f"{path}, line {number}"
            docno = json_id(record, ("docno", "doc_id"), where)
            yield number, docno, _doc_text(record, where, docno)
    elif kind == "tsv":
        for number, line in text_lines(path):
            if line.strip():
                raw_id, tab, text = line.partition("\t")
                where = f"{path}, line {number}"
                if not tab:
                    raise ValueError(f"{where}: no tab; a corpus TSV line is `docno<TAB>text`")
                try:
                    yield number, checked_id(raw_id, "docno"), text
                except ValueError as exc:
                    raise ValueError(f"{where}: {exc}") from None
    else:
        raise ValueError(f"{path}: corpus files are .jsonl(.gz) or .tsv(.gz)")


# ------------------------------------------------------------------------------------------------------------ topics
def load_topics(source: str) -> pd.DataFrame:
    """``qid, query`` (str ids) from a topics file or an ir_datasets id."""
    if not is_file_argument(source):
        from pyterrier_tite import datasets

        topics = datasets.get_dataset(source).get_topics()
        topics = topics.assign(qid=topics["qid"].astype(str))
        for qid, query in zip(topics["qid"], topics["query"], strict=True):
            checked_text(query, "query", f"qid {qid!r}")
        return topics
    rows = list(_topics_file(source))
    if not rows:
        raise ValueError(f"{source}: no topics in the file; nothing to retrieve")
    return pd.DataFrame(rows, columns=["qid", "query"])


def _topics_file(path: str) -> Iterator[tuple[str, str]]:
    kind = _stem(path).rsplit(".", 1)[-1]
    if kind == "jsonl":
        for number, record in jsonl_records(path):
            where = f"{path}, line {number}"
            qid = json_id(record, ("qid", "query_id"), where)
            name = _field_name(record, ("query", "text"), where)
            yield qid, json_text(record[name], name, where, f"qid {qid!r}")
    elif kind == "tsv":
        yield from _tsv_topics(path)
    elif kind == "xml":
        yield from _xml_topics(path)
    else:
        yield from _trec_topics(path)


def _tsv_topics(path: str) -> Iterator[tuple[str, str]]:
    """``qid<TAB>query`` lines, read without quoting: the query is the rest of the line, exactly."""
    for number, line in text_lines(path):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) != 2:
            found = "no tab" if len(fields) == 1 else f"{len(fields)} tab-separated fields"
            raise ValueError(f"{path}, line {number}: {found}; a topics TSV line is `qid<TAB>query` (no tab inside "
                             "the query)")  # fmt: skip
        try:
            yield checked_id(fields[0], "qid"), fields[1]
        except ValueError as exc:
            raise ValueError(f"{path}, line {number}: {exc}") from None


_TOP = re.compile(r"<top>", re.I)
_TOP_END = re.compile(r"</top>", re.I)
_NUM = re.compile(r"<num>\s*(?:Number:)?(.*?)(?=<|\Z)", re.I | re.S)
_TITLE = re.compile(r"<title>\s*(?:Topic:)?(.*?)(?=<|\Z)", re.I | re.S)


def _trec_topics(path: str) -> Iterator[tuple[str, str]]:
    """TREC ``<top>`` blocks: the qid is ``<num>`` less an optional ``Number:`` label (``001`` stays ``001``, as in
    ir_datasets), the query is ``<title>`` less an optional ``Topic:`` label, whitespace runs made one space."""
    data = "\n".join(line for _, line in text_lines(path))
    starts = [m.start() for m in _TOP.finditer(data)]
    if not starts:
        raise ValueError(f"{path}: no <top> topics; a TREC topics file holds `<top> <num> ID <title> QUERY </top>` "
                         "blocks (or use .tsv: qid<TAB>query, .jsonl or .xml)")  # fmt: skip
    for start, after in zip(starts, [*starts[1:], len(data)], strict=True):
        block = data[start:after]
        end = _TOP_END.search(block)
        block = block[: end.start()] if end else block
        where = f"{path}, line {data.count(chr(10), 0, start) + 1}"
        num = _NUM.search(block)
        if num is None or not num.group(1).strip():
            raise ValueError(f"{where}: a <top> topic without <num>; each topic needs `<num> ID`")
        try:
            qid = checked_id(num.group(1).strip(), "qid")
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
        title = _TITLE.search(block)
        if title is None:
            raise ValueError(f"{where}: topic {qid!r} has no <title>; the query of a TREC topic is its <title>")
        yield qid, " ".join(title.group(1).split())


def _xml_topics(path: str) -> Iterator[tuple[str, str]]:
    """TREC topic XML (TIREx ``queries.xml``): ``<topic number="ID">`` (or a ``<number>`` child) with ``<query>``."""
    import xml.etree.ElementTree as ET

    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    try:
        root = ET.fromstring(data)
    except ET.ParseError as exc:
        (line, column), reason = exc.position, str(exc).rsplit(": line ", 1)[0]
        raise ValueError(f"{path}, line {line}, column {column}: not well-formed XML ({reason}); write & and < in "
                         "a query as &amp; and &lt;") from None  # fmt: skip
    topics = list(root.iter("topic"))
    if not topics:
        raise ValueError(f"{path}: no <topic> elements; TREC topic XML is `<topics><topic number=\"ID\"><query>"
                         "QUERY</query></topic>...</topics>`")  # fmt: skip
    text = data.decode("utf-8", errors="replace")
    lines = [text.count("\n", 0, m.start()) + 1 for m in re.finditer(r"<topic(?=[\s>/])", text)]
    for i, topic in enumerate(topics):
        where = f"{path}, line {lines[i]}" if len(lines) == len(topics) else f"{path}, topic {i + 1}"
        number = topic.get("number")
        if number is None and topic.find("number") is not None:
            number = "".join(topic.find("number").itertext()).strip()
        if number is None:
            raise ValueError(f'{where}: a <topic> without number="ID" or <number>')
        try:
            qid = checked_id(number, "qid")
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
        queries = topic.findall("query")
        if not queries:
            raise ValueError(f"{where}: topic {qid!r} has no <query> element; each <topic> needs <query>QUERY</query>")
        yield qid, " ".join("".join(q.itertext()).strip() for q in queries)


# ------------------------------------------------------------------------------------------------------------- qrels
def whitespace_table(
    path: str | os.PathLike, width: int, what: str, layout: str, hints: dict[int, str] | None = None
) -> pd.DataFrame:
    """The non-blank lines of a whitespace-separated file as ``width`` string columns ``0..width-1`` (row ``i`` is
    the ``i``-th non-blank line: :func:`line_number`), values exactly as written (no NA values, no quoting); a line
    with another number of fields, or an empty file, is an error naming the file (and line) and ``layout`` (and
    ``hints[n]`` for a line of ``n`` fields)."""
    import csv

    try:  # pandas' C reader (fast); anything unusual is read again line by line to name the line
        table = pd.read_csv(
            path, sep=r"\s+", header=None, dtype=object, na_filter=False, quoting=csv.QUOTE_NONE, encoding="utf-8"
        )
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError):
        table = None
    if table is None or table.shape[1] != width or (table[width - 1] == "").any():
        table = _scanned_table(path, width, what, layout, hints or {})
    return table


def _scanned_table(path, width: int, what: str, layout: str, hints: dict[int, str]) -> pd.DataFrame:
    rows = []
    for number, line in text_lines(path):
        fields = line.split()
        if fields and len(fields) != width:
            hint = hints.get(len(fields), "")
            raise ValueError(f"{path}, line {number}: {len(fields)} fields; a {what} line is `{layout}`{hint}")
        if fields:
            rows.append(fields)
    if not rows:
        raise ValueError(f"{path}: empty (no {what} lines); a {what} line is `{layout}`")
    return pd.DataFrame(rows, dtype=object)


def line_number(path: str | os.PathLike, row: int) -> int:
    """The line of the ``row``-th non-blank line of a file (for messages: reads the file up to it)."""
    seen = -1
    for number, line in text_lines(path):
        seen += bool(line.split())
        if seen == row:
            return number
    raise IndexError(f"{path} has no row {row}")


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
