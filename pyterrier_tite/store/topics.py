"""Topics (``qid, query``) from a file (``.jsonl``; ``.tsv``: ``qid<TAB>query`` without quoting; ``.xml``: TREC topic
XML; else TREC ``<top>`` blocks) or an ir_datasets id. Ids stay the strings written (``001`` is not ``1``)."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator

import pandas as pd

from pyterrier_tite.store.input_files import open_input
from pyterrier_tite.store.text_files import (
    field_name,
    is_file_argument,
    json_id,
    json_text,
    jsonl_records,
    text_lines,
)
from pyterrier_tite.store.values import checked_id, checked_text


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
    kind = path.removesuffix(".gz").rsplit(".", 1)[-1]
    if kind == "jsonl":
        for number, record in jsonl_records(path):
            where = f"{path}, line {number}"
            qid = json_id(record, ("qid", "query_id"), where)
            name = field_name(record, ("query", "text"), where)
            yield qid, json_text(record[name], name, where, f"qid {qid!r}")
    elif kind == "tsv":
        yield from _tsv_topics(path)
    elif kind == "xml":
        yield from _xml_topics(path)
    else:
        yield from _trec_topics(path)


def _tsv_topics(path: str) -> Iterator[tuple[str, str]]:
    """``qid<TAB>query`` lines without quoting; a first line ``qid<TAB>query`` is pandas' header, not a query."""
    for number, line in text_lines(path):
        if not line.strip() or (number == 1 and line == "qid\tquery"):
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
    """TREC ``<top>`` blocks: ``<num>`` (``001`` stays, as in ir_datasets) and ``<title>``, less their labels."""
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
    with open_input(path) as f:  # read once: a FIFO or pipe too, compressed or not
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
