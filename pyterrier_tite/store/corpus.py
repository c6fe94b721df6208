"""Corpora, read and checked by one rule: a corpus file or an ir_datasets collection as ``{docno, text}`` dicts, the
documents of every index build checked once (:func:`checked_corpus`), the texts of a run's documents by docno, and a
corpus encoded over several processes (:func:`encode_in_order`: the floor knows no torch, the gather is passed in)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

import pandas as pd
from more_itertools import chunked

from pyterrier_tite.store.input_files import count_lines, is_plain_file
from pyterrier_tite.store.text_files import (
    is_file_argument,
    json_id,
    json_kind,
    json_text,
    jsonl_records,
    text_lines,
)
from pyterrier_tite.store.values import checked_id, checked_text
from pyterrier_tite.text import document_text, join_text_columns, text_fields

#: the text fields a JSONL corpus record may carry
_TEXT_FIELDS = ("default_text", "title", "text")


def _doc_text(record: dict, where: str, docno: str) -> str:
    """``default_text`` as given, else title + text by the one document-text rule."""
    for name in _TEXT_FIELDS:
        if name in record and json_kind(record[name]):
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
    """``{docno, text}`` dicts from a corpus file (``.jsonl(.gz)``: docno or doc_id, text or default_text, else title
    + text; ``.tsv(.gz)``: ``docno<TAB>text``), or an ir_datasets collection's documents (all its text fields)."""
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
    kind = path.removesuffix(".gz").rsplit(".", 1)[-1]
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


def checked_corpus(corpus: Iterable[dict], fields: Sequence[str]) -> Iterator[dict]:
    """The documents of an index build, checked: ``docno`` as a single-token ``str`` (integers accepted), each docno
    once, every field of ``fields`` present and not missing (None/NaN refused by docno; NUL bytes become spaces)."""
    seen: set[str] = set()
    for number, doc in enumerate(corpus, 1):
        if not isinstance(doc, dict) or "docno" not in doc:
            raise ValueError(f"document {number} of the corpus has no docno (missing docno)")
        docno = checked_id(doc["docno"], "docno")
        if docno in seen:
            raise ValueError(f"duplicate docno {docno!r} in the corpus")
        seen.add(docno)
        absent = [f for f in fields if f not in doc]
        if absent:
            raise KeyError(f"document {docno!r} lacks fields {absent}; available: {sorted(doc)}")
        yield {**doc, "docno": docno, **{f: checked_text(doc[f], f, f"docno {docno!r}") for f in fields}}


class SpilledTexts:
    """The ``wanted`` texts of a corpus file by docno in an unnamed temporary file, memory holding only where each one
    lies (re-ranking 300,000 pairs needs their texts a chunk at a time). A docno twice is an error, as in ``index``."""

    def __init__(self, path: str, wanted: set[str] | None):
        self.file = tempfile.TemporaryFile(prefix="pyterrier-tite-texts-")
        self.where: dict[str, tuple[int, int, int]] = {}  # docno -> (offset, length, line it was read from)
        size = 0
        for line, docno, text in corpus_file_records(path):
            if wanted is not None and docno not in wanted:
                continue
            if docno in self.where:
                first = self.where[docno][2]
                raise ValueError(f"{path}, line {line}: docno {docno!r} appears twice (first at line {first}); "
                                 "docnos must be unique in a corpus: remove or rename one")  # fmt: skip
            data = text.encode("utf-8", "surrogatepass")  # a lone surrogate from JSON comes back as it went in
            self.file.write(data)
            self.where[docno] = (size, len(data), line)
            size += len(data)
        self.file.flush()

    def __contains__(self, docno: object) -> bool:
        return docno in self.where

    def __len__(self) -> int:
        return len(self.where)

    def __getitem__(self, docno: str) -> str:
        offset, length, _ = self.where[docno]
        return os.pread(self.file.fileno(), length, offset).decode("utf-8", "surrogatepass")


class DocumentTexts:
    """Texts of documents by docno, from an ir_datasets collection (its docstore, by the one text rule) or from a
    corpus file (read once, keeping only the docnos asked for, not in memory)."""

    def __init__(self, source: str, docnos: Iterable[str] | None = None):
        self.source = source
        self.texts: SpilledTexts | None = None
        if is_file_argument(source):
            self.texts = SpilledTexts(source, set(docnos) if docnos is not None else None)
        else:
            from pyterrier_tite import datasets

            self.dataset = datasets.get_dataset(source)
            self.fields = text_fields(datasets.irds_id(source))

    def missing(self, docnos: Iterable[str], chunk: int = 10_000) -> list[str]:
        """The ``docnos`` (each once) that the source does not hold (a docstore is asked ``chunk`` at a time)."""
        wanted = list(dict.fromkeys(docnos))
        if self.texts is not None:
            return [d for d in wanted if d not in self.texts]
        store = self.dataset.irds_ref().docs_store()
        missing = []
        for start in range(0, len(wanted), chunk):
            found = store.get_many(wanted[start : start + chunk])
            missing += [d for d in wanted[start : start + chunk] if d not in found]
        return missing

    def add_text(self, frame: pd.DataFrame) -> pd.DataFrame:
        """``frame`` with a ``text`` column; a docno the source lacks is an error naming it."""
        if self.texts is not None:
            missing = [d for d in frame["docno"] if d not in self.texts]
            if missing:
                raise ValueError(f"docno {missing[0]!r} of the run is not in the corpus {self.source}")
            return frame.assign(text=[self.texts[d] for d in frame["docno"]])
        import pyterrier as pt

        try:
            with_text = pt.text.get_text(self.dataset, self.fields, verbose=False).transform(frame.drop(
                columns=[c for c in ("text", "title") if c in frame.columns]))  # fmt: skip
        except KeyError as exc:
            raise ValueError(f"a docno of the run is not in {self.source}: {exc}") from exc
        with_text = join_text_columns(with_text, self.fields)
        bad = with_text["text"].isna() if "text" in with_text.columns else None
        if bad is None or bad.any():
            docno = with_text.loc[bad, "docno"].iloc[0] if bad is not None else frame["docno"].iloc[0]
            raise ValueError(f"no text for docno {docno!r} in {self.source}")
        return with_text


class SizedCorpus:
    """Documents with their number known in advance (``len``), so a progress bar over them shows an ETA."""

    def __init__(self, documents: Iterable[dict], size: int):
        self.documents, self.size = documents, size

    def __iter__(self) -> Iterator[dict]:
        return iter(self.documents)

    def __len__(self) -> int:
        return self.size


def known_size(corpus) -> int | None:
    """``len(corpus)`` where the corpus knows it (:class:`SizedCorpus`), else None (a generator, a stream)."""
    try:
        return len(corpus)
    except TypeError:
        return None


def corpus_size(source: str) -> int | None:
    """The number of documents of an ir_datasets collection or lines of a plain corpus file; None where it is not
    known without reading the documents (compressed files, streams)."""
    if os.path.exists(source):
        return count_lines(source) if is_plain_file(source) and not os.fspath(source).endswith(".gz") else None
    try:
        from pyterrier_tite import datasets

        return int(datasets.get_dataset(source).irds_ref().docs_count())
    except Exception:  # noqa: BLE001 - a size is only a nicety of the progress bar
        return None


@dataclass(frozen=True)
class Shard:
    """This process's part of a sharded build: its ``rank`` of ``world_size`` processes and ``gather(encodings)``,
    which every rank calls with its encodings of a chunk and which returns, on rank 0, every rank's in rank order,
    elsewhere None (``torch.distributed.gather_object`` to rank 0)."""

    rank: int = 0
    world_size: int = 1
    gather: Callable[[list], list[list] | None] | None = None

    def __post_init__(self):
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank {self.rank} is not one of {self.world_size} processes")
        if self.world_size > 1 and self.gather is None:
            raise ValueError("a sharded build needs gather (how rank 0 receives the other ranks' encodings)")


#: one process encodes everything
SINGLE = Shard()


def encode_in_order(
    docs: Iterable[dict], encode: Callable[[list[dict]], Sequence], chunk_size: int = 1024, shard: Shard = SINGLE
) -> Iterator[tuple[str, object]]:
    """``(docno, encoding)`` in corpus order, ``encode(docs)`` giving one encoding per document of a chunk; the index
    rank 0 writes is the one a single process writes. Sharded, every rank iterates the same ``docs`` (each chunk is a
    gather): rank ``r`` encodes documents ``r, r + world_size, ...`` of a chunk, rank 0 yields them all, others none."""
    rank, world_size = shard.rank, shard.world_size
    for chunk in chunked(docs, chunk_size * world_size):
        mine = chunk[rank::world_size]
        encoded = list(encode(mine)) if mine else []
        if len(encoded) != len(mine):
            raise RuntimeError(f"the encoder returned {len(encoded)} encodings for {len(mine)} documents")
        if world_size == 1:
            yield from zip((d["docno"] for d in chunk), encoded, strict=True)
            continue
        gathered = shard.gather(encoded)
        if rank != 0:
            continue
        for position, doc in enumerate(chunk):
            yield doc["docno"], gathered[position % world_size][position // world_size]
