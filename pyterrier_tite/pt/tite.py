"""TITE as a ``pyterrier_dr.BiEncoder``: the model pools every text to one vector inside its layers, scored by dot
product. Reference conventions: marker tokens ``[QUE]`` / ``[DOC]`` first, queries cut to 32 and documents to 256
tokens (the marker included).

``TITE.from_pretrained(folder_or_hub_id)`` loads every TITE layout (``pyterrier_tite.convert.tite``): the reference
pre-training module (``webis/tite-2-late``), Lightning IR bi-encoders (``webis/tite-2-late-msmarco``, whose stored
lengths, markers and similarity are used) and folders saved by ``save_pretrained`` (settings in ``pt_meta.json``);
explicit keyword arguments override stored settings. ``TITE.from_bert(bert_folder, ...)`` inserts pooling into a BERT
checkpoint (``tite_from_bert``) so TITE can be fine-tuned from e.g. MiniLM.
"""

from __future__ import annotations

import torch

from pyterrier_tite.convert.checkpoint import local_checkpoint
from pyterrier_tite.convert.tite import (
    DOC_MARKER,
    QUERY_MARKER,
    biencoder_settings,
    load_tite_model,
    load_tite_tokenizer,
)
from pyterrier_tite.modeling.tite import TiteModel
from pyterrier_tite.modeling.tite_from_bert import tite_from_bert
from pyterrier_tite.pt.bert_biencoder import SETTINGS, DenseBiEncoder, read_meta


class TITE(DenseBiEncoder):
    """Single-vector dense retrieval with a ``TiteModel`` (its one output row per text is the vector).

    ``normalize``: L2-normalise the vectors (Lightning IR ``cosine`` similarity or normalisation), so that the dot
    product a FlexIndex retrieves with is the checkpoint's cosine score.
    """

    def __init__(
        self,
        model: TiteModel,
        tokenizer,
        *,
        query_max_length: int = 32,
        doc_max_length: int = 256,
        query_marker: str | None = QUERY_MARKER,
        doc_marker: str | None = DOC_MARKER,
        normalize: bool = False,
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
        self.normalize = normalize

    @classmethod
    def from_pretrained(cls, path: str, **kwargs) -> TITE:
        """A TITE checkpoint (folder or hub id, any layout) loaded exactly, with its own tokenizer and the settings it
        stores (Lightning IR ``config.json`` or our ``pt_meta.json``); keyword arguments override them."""
        folder = local_checkpoint(path)
        meta = read_meta(folder)
        stored = {k: meta[k] for k in (*SETTINGS, "normalize") if k in meta}
        settings = {**biencoder_settings(folder), **stored, **kwargs}
        model = cls(load_tite_model(folder), load_tite_tokenizer(folder), **settings)
        model.model_name = str(path)
        return model

    @classmethod
    def from_bert(cls, bert_path: str, tite_kwargs: dict | None = None, **kwargs) -> TITE:
        """Insert pooling into a BERT or DistilBERT checkpoint (folder or hub id; ``tite_from_bert(bert_path,
        **tite_kwargs)``, loaded exactly) and wrap it.

        The BERT tokenizer keeps its [CLS] ... [SEP] template; the markers go right after [CLS] (new tokens whose
        embeddings start from their name's word pieces).
        """
        from transformers import AutoTokenizer

        model = cls(
            tite_from_bert(bert_path, **(tite_kwargs or {})), AutoTokenizer.from_pretrained(bert_path), **kwargs
        )
        model.model_name = f"tite_from_bert({bert_path!r})"
        return model

    def settings(self) -> dict:
        """Lengths, markers and normalisation (``pt_meta.json``)."""
        return {**super().settings(), "normalize": self.normalize}

    def save_pretrained(self, path: str) -> None:
        """TITE checkpoint (reference ``config.json`` + safetensors) + tokenizer + ``pt_meta.json``."""
        self._save(path, "tite")

    def embed(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        if hidden.shape[1] != 1:
            raise ValueError(f"this TITE does not pool to one vector (output length {hidden.shape[1]})")
        return torch.nn.functional.normalize(hidden[:, 0], dim=-1) if self.normalize else hidden[:, 0]

    def __repr__(self) -> str:
        return f"TITE({getattr(self, 'model_name', '')!r})"
