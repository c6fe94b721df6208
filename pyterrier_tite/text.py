"""The one rule for a document's text, used by indexing, re-ranking, training data and commands alike, so a document
reads the same to every model: the collection's text fields in order (BEIR: title, then text; others: text, whose
Cranfield/Vaswani text already holds the title), empty or missing parts skipped, joined by one space."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

#: fields read when a collection does not say otherwise
DEFAULT_FIELDS = ("title", "text")


def text_fields(dataset_id: str) -> list[str]:
    """The fields that make up a document of an ir_datasets collection: BEIR keeps title and text apart."""
    return ["title", "text"] if dataset_id.startswith("beir/") else ["text"]


def _as_text(value, field: str) -> str:
    """A field's value as text: ``bytes`` are UTF-8 (never ``"b'...'"``), anything else its ``str``."""
    if isinstance(value, (bytes, bytearray)):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"{field} is bytes that are not valid UTF-8 ({exc.reason} at position {exc.start}): "
                             "decode it to str with its encoding first") from None
    return str(value)


def _present(value, field: str = "text") -> bool:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return False
    return bool(_as_text(value, field).strip())


def document_text(doc: Mapping, fields: Sequence[str] = DEFAULT_FIELDS) -> str:
    """``fields`` of ``doc`` that are present and non-empty, joined by a space ("" when none is)."""
    return " ".join(_as_text(doc[f], f).strip() for f in fields if f in doc and _present(doc[f], f))


def join_text_columns(frame, fields: Sequence[str] = DEFAULT_FIELDS):
    """A frame's ``text`` column made by :func:`document_text` over ``fields`` (other columns kept, the extra
    ``fields`` besides ``text`` dropped)."""
    present = [f for f in fields if f in frame.columns]
    if present == ["text"] or not present:
        return frame
    texts = [document_text(row, present) for row in frame[present].to_dict("records")]
    return frame.assign(text=texts).drop(columns=[f for f in present if f != "text"])
