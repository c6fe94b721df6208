"""Inputs of the dense bi-encoders: a marker (``[QUE]`` / ``[DOC]``, the TITE / Lightning IR convention) is one special
token after the tokenizer's own leading ones; ``query_max_length`` / ``doc_max_length`` count every token the model
sees, marker and specials included (the reference's: a TITE query of 32 is ``[QUE]`` + 31 word pieces)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

from pyterrier_tite.models.batch_tensors import padded_tensors, takes_token_types, tokenize

QUERY_MARKER, DOC_MARKER = "[QUE]", "[DOC]"
Role = Literal["query", "doc"]
#: what, besides the weights, decides the vectors: stored in ``pt_meta.json``, read back as keyword arguments
SETTINGS = ("query_max_length", "doc_max_length", "query_marker", "doc_marker")


@dataclass(frozen=True, eq=False)
class BiEncoderInputs:
    """How a bi-encoder turns query and document texts into model inputs."""

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
        return {name: getattr(self, name) for name in SETTINGS}

    def max_length(self, role: Role) -> int:
        return self.query_max_length if role == "query" else self.doc_max_length

    def marker(self, role: Role) -> str | None:
        return self.query_marker if role == "query" else self.doc_marker

    def marked(self, texts: Sequence[str], role: Role) -> list[str]:
        """``texts`` with the role's marker in front (unchanged without one)."""
        marker = self.marker(role)
        return [f"{marker} {t}" for t in texts] if marker else list(texts)

    def __call__(self, texts: Sequence[str], role: Role) -> dict:
        """One padded batch of ``texts`` as CPU tensors, each cut to the role's length (token types for models that
        take them)."""
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
        """Add the markers the tokenizer lacks; returns ``{new id: ids of the marker name's word pieces}`` (``[QUE]``
        -> "que"), from which a model starts the new embedding rows."""
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
