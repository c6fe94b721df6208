"""TITE as a ``pyterrier_dr.BiEncoder``: the model pools every text to one vector inside its layers, scored by dot
product. Reference conventions: marker tokens ``[QUE]`` / ``[DOC]`` first, queries cut to 32 and documents to 256
tokens.

``TITE.from_pretrained(folder)`` loads a TITE checkpoint in the reference format (``config.json`` with
``model_type: tite`` + tokenizer) or a folder saved by ``save_pretrained``; ``TITE.from_bert(bert_folder, ...)``
inserts pooling into a BERT checkpoint (``tite_from_bert``) so TITE can be fine-tuned from e.g. MiniLM.
"""

from __future__ import annotations

import torch

from pyterrier_tite.modeling.tite import TiteModel
from pyterrier_tite.modeling.tite_from_bert import tite_from_bert
from pyterrier_tite.pt.bert_biencoder import SETTINGS, DenseBiEncoder, read_meta

QUERY_MARKER = "[QUE]"
DOC_MARKER = "[DOC]"


class TITE(DenseBiEncoder):
    """Single-vector dense retrieval with a ``TiteModel`` (its one output row per text is the vector)."""

    def __init__(
        self,
        model: TiteModel,
        tokenizer,
        *,
        query_max_length: int = 32,
        doc_max_length: int = 256,
        query_marker: str | None = QUERY_MARKER,
        doc_marker: str | None = DOC_MARKER,
        **kwargs,
    ):
        longest = max(query_max_length, doc_max_length)
        if longest > model.config.max_position_embeddings:
            raise ValueError(
                f"max length {longest} exceeds the model's {model.config.max_position_embeddings} positions"
            )
        super().__init__(
            model,
            tokenizer,
            query_max_length=query_max_length,
            doc_max_length=doc_max_length,
            query_marker=query_marker,
            doc_marker=doc_marker,
            **kwargs,
        )

    @classmethod
    def from_pretrained(cls, path: str, **kwargs) -> TITE:
        """A TITE checkpoint folder (reference format) with its tokenizer; settings from ``pt_meta.json`` if any."""
        from transformers import AutoTokenizer

        meta = read_meta(path)
        settings = {k: meta[k] for k in SETTINGS if k in meta}
        model = cls(TiteModel.from_pretrained(path), AutoTokenizer.from_pretrained(path), **{**settings, **kwargs})
        model.model_name = path
        return model

    @classmethod
    def from_bert(cls, bert_path: str, tite_kwargs: dict | None = None, **kwargs) -> TITE:
        """Insert pooling into a BERT checkpoint (``tite_from_bert(bert_path, **tite_kwargs)``) and wrap it.

        The BERT tokenizer keeps its [CLS] ... [SEP] template; the markers go right after [CLS] (new tokens whose
        embeddings start from their name's word pieces).
        """
        from transformers import AutoTokenizer

        model = cls(
            tite_from_bert(bert_path, **(tite_kwargs or {})), AutoTokenizer.from_pretrained(bert_path), **kwargs
        )
        model.model_name = f"tite_from_bert({bert_path!r})"
        return model

    def save_pretrained(self, path: str) -> None:
        """TITE checkpoint (reference ``config.json`` + safetensors) + tokenizer + ``pt_meta.json``."""
        self._save(path, "tite")

    def embed(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        if hidden.shape[1] != 1:
            raise ValueError(f"this TITE does not pool to one vector (output length {hidden.shape[1]})")
        return hidden[:, 0]

    def __repr__(self) -> str:
        return f"TITE({getattr(self, 'model_name', '')!r})"
