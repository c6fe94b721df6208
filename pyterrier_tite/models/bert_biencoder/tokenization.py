"""Inputs of the dense bi-encoders (``BertBiEncoder``, ``TITE``, ``Aggretriever``): marker tokens, truncation and which
tensors a model gets (tokenizers load in :func:`pyterrier_tite.models.checkpoint.load_tokenizer`).

- A marker (``[QUE]`` / ``[DOC]``, the TITE / Lightning IR convention) is prepended to the text as one special token,
  after the tokenizer's own leading specials (BERT: ``[CLS] [QUE] text [SEP]``; TITE's ``$A`` template: ``[QUE] text``).
- ``query_max_length`` / ``doc_max_length`` count every token the model sees, the marker and the tokenizer's specials
  included (the reference convention: a TITE query of length 32 is ``[QUE]`` + 31 word pieces).
- Token type ids reach only models whose ``forward`` takes them (DistilBERT's does not).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

from pyterrier_tite.models.batch_tensors import padded_tensors, takes_token_types, tokenize

QUERY_MARKER, DOC_MARKER = "[QUE]", "[DOC]"
Role = Literal["query", "doc"]


@dataclass(frozen=True, eq=False)
class BiEncoderInputs:
    """How a bi-encoder turns query and document texts into model inputs (see the module docstring)."""

    tokenizer: object
    query_max_length: int = 32
    doc_max_length: int = 256
    query_marker: str | None = None
    doc_marker: str | None = None
    token_types: bool = False

    def __post_init__(self) -> None:
        for name in ("query_max_length", "doc_max_length"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")

    def for_model(self, model) -> BiEncoderInputs:
        """These inputs with token types exactly when ``model`` takes them."""
        return replace(self, token_types=takes_token_types(model))

    def settings(self) -> dict:
        """Lengths and markers: what, besides the weights, decides the vectors (stored in ``pt_meta.json``)."""
        return {
            "query_max_length": self.query_max_length,
            "doc_max_length": self.doc_max_length,
            "query_marker": self.query_marker,
            "doc_marker": self.doc_marker,
        }

    def max_length(self, role: Role) -> int:
        return self.query_max_length if role == "query" else self.doc_max_length

    def marker(self, role: Role) -> str | None:
        return self.query_marker if role == "query" else self.doc_marker

    def marked(self, texts: Sequence[str], role: Role) -> list[str]:
        """``texts`` with the role's marker in front (unchanged without one)."""
        marker = self.marker(role)
        return [f"{marker} {t}" for t in texts] if marker else list(texts)

    def __call__(self, texts: Sequence[str], role: Role) -> dict:
        """One padded batch of ``texts`` as CPU tensors: ``input_ids``, ``attention_mask`` (and ``token_type_ids``
        for models that take them), each text cut to the role's length, marker included."""
        batch = tokenize(
            self.tokenizer,
            self.marked(texts, role),
            padding=True,
            truncation=True,
            max_length=self.max_length(role),
            return_token_type_ids=self.token_types,
        )
        names = (
            ("input_ids", "attention_mask", "token_type_ids") if self.token_types else ("input_ids", "attention_mask")
        )
        return padded_tensors(batch, names)

    def add_markers(self) -> dict[int, list[int]]:
        """Add the markers the tokenizer lacks as special tokens; returns ``{new id: ids of the word pieces of the
        marker's name}`` (``[QUE]`` -> "que"), from which a model starts the new embedding rows."""
        missing = [m for m in (self.query_marker, self.doc_marker) if m and m not in self.tokenizer.get_vocab()]
        if not missing:
            return {}
        self.tokenizer.add_tokens(missing, special_tokens=True)
        return {
            self.tokenizer.convert_tokens_to_ids(m): self.tokenizer(m.strip("[]").lower(), add_special_tokens=False)[
                "input_ids"
            ]
            for m in missing
        }
