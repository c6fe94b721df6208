"""Dense bi-encoders over a torch encoder + HF tokenizer, as ``pyterrier_dr.BiEncoder`` s.

``DenseBiEncoder`` holds what every single-vector model of the package shares (tokenising with optional marker
tokens, length-sorted batches, a ``transform_iter`` doc encoder for ``model >> FlexIndex(path)`` indexing, torch
encoders with gradients for training); ``BertBiEncoder`` is the baseline over any BERT with CLS or mean pooling.
TITE (``pyterrier_tite.pt.tite``) subclasses the same base, so both get the same indexing, scoring and training.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from typing import Literal

import numpy as np
import pyterrier as pt
import pyterrier_alpha as pta
import pyterrier_dr
import torch
from more_itertools import chunked

from pyterrier_tite.devices import default_device

PT_META = "pt_meta.json"
SETTINGS = ("query_max_length", "doc_max_length", "query_marker", "doc_marker")  # kept in pt_meta.json


def read_meta(path: str) -> dict:
    """``pt_meta.json`` of a model folder ({} when there is none, e.g. a plain HF checkpoint)."""
    file = os.path.join(path, PT_META)
    if not os.path.exists(file):
        return {}
    with open(file) as f:
        return json.load(f)


def add_marker_tokens(tokenizer, model: torch.nn.Module, markers: Sequence[str]) -> None:
    """Add marker tokens the tokenizer lacks as special tokens and grow the word embeddings to match.

    A new marker row starts from the mean embedding of the word pieces of its name (``[QUE]`` -> "que"; the mean of
    the whole table when there are none), so an untrained marker is a plausible token instead of noise.
    """
    missing = [m for m in markers if m and m not in tokenizer.get_vocab()]
    if not missing:
        return
    tokenizer.add_tokens(missing, special_tokens=True)
    embeddings = model.get_input_embeddings()
    old = embeddings.weight.data
    size = len(tokenizer)
    if size <= old.shape[0]:
        return
    grown = torch.nn.Embedding(size, old.shape[1], padding_idx=embeddings.padding_idx, device=old.device)
    grown.weight.data[: old.shape[0]] = old
    for marker in missing:
        word = marker.strip("[]").lower()
        word_ids = [i for i in tokenizer(word, add_special_tokens=False)["input_ids"] if i < old.shape[0]]
        grown.weight.data[tokenizer.convert_tokens_to_ids(marker)] = old[word_ids].mean(0) if word_ids else old.mean(0)
    grown.weight.data = grown.weight.data.to(old.dtype)
    model.set_input_embeddings(grown)
    model.config.vocab_size = size


class DenseBiEncoder(pyterrier_dr.BiEncoder):
    """A torch encoder producing one vector per text; subclasses define ``embed(input_ids, attention_mask)``.

    Queries are cut to ``query_max_length`` and documents to ``doc_max_length`` tokens; ``query_marker`` /
    ``doc_marker`` (e.g. ``[QUE]`` / ``[DOC]``) are prepended as single tokens after the tokenizer's own specials.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer,
        *,
        query_max_length: int = 32,
        doc_max_length: int = 256,
        query_marker: str | None = None,
        doc_marker: str | None = None,
        batch_size: int = 32,
        text_field: str = "text",
        device: str | torch.device | None = None,
        verbose: bool = False,
    ):
        super().__init__(batch_size=batch_size, text_field=text_field, verbose=verbose)
        self.device = default_device(device)
        self.tokenizer = tokenizer
        add_marker_tokens(tokenizer, model, [m for m in (query_marker, doc_marker) if m])
        self.model = model.to(self.device).eval()
        self.query_max_length = query_max_length
        self.doc_max_length = doc_max_length
        self.query_marker = query_marker
        self.doc_marker = doc_marker

    # -- subclasses -------------------------------------------------------------------------------------------
    def embed(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """``[B, L]`` ids and mask -> ``[B, D]`` vectors."""
        raise NotImplementedError

    @property
    def dim(self) -> int:
        return int(self.model.config.hidden_size)

    def settings(self) -> dict:
        """What ``from_pretrained`` needs besides the weights (stored in ``pt_meta.json``)."""
        return {
            "query_max_length": self.query_max_length,
            "doc_max_length": self.doc_max_length,
            "query_marker": self.query_marker,
            "doc_marker": self.doc_marker,
        }

    # -- encoding ---------------------------------------------------------------------------------------------
    def _format(self, texts: Iterable[str], marker: str | None) -> list[str]:
        texts = [str(t) for t in texts]
        return [f"{marker} {t}" for t in texts] if marker else texts

    def encode_torch(
        self, texts: Iterable[str], max_length: int, marker: str | None = None, batch_size: int | None = None
    ) -> torch.Tensor:
        """Texts -> ``[N, D]`` in input order; keeps gradients when they are enabled (training)."""
        out = []
        for batch in chunked(self._format(texts, marker), batch_size or self.batch_size):
            inputs = self.tokenizer(batch, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
            out.append(self.embed(inputs["input_ids"].to(self.device), inputs["attention_mask"].to(self.device)))
        if not out:
            dtype = next(self.model.parameters()).dtype
            return torch.zeros(0, self.dim, device=self.device, dtype=dtype)
        return torch.cat(out)

    def encode_queries_torch(self, texts: Iterable[str], batch_size: int | None = None) -> torch.Tensor:
        return self.encode_torch(texts, self.query_max_length, self.query_marker, batch_size)

    def encode_docs_torch(self, texts: Iterable[str], batch_size: int | None = None) -> torch.Tensor:
        return self.encode_torch(texts, self.doc_max_length, self.doc_marker, batch_size)

    def _encode_sorted(self, texts, max_length: int, marker: str | None, batch_size: int | None) -> np.ndarray:
        """Inference: batches of similar length (less padding), float32 numpy in input order."""
        texts = [str(t) for t in texts]
        order = np.argsort([-len(t) for t in texts], kind="stable")
        with torch.no_grad():
            vectors = self.encode_torch([texts[i] for i in order], max_length, marker, batch_size)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        out[order] = vectors.float().cpu().numpy()
        return out

    def encode_queries(self, texts, batch_size: int | None = None) -> np.ndarray:
        return self._encode_sorted(texts, self.query_max_length, self.query_marker, batch_size)

    def encode_docs(self, texts, batch_size: int | None = None) -> np.ndarray:
        return self._encode_sorted(texts, self.doc_max_length, self.doc_marker, batch_size)

    def doc_encoder(self, verbose=None, batch_size=None) -> pt.Transformer:
        return IterDocEncoder(self, verbose=verbose, batch_size=batch_size)

    # -- persistence ------------------------------------------------------------------------------------------
    def _save(self, path: str, fmt: str, extra: dict | None = None) -> None:
        os.makedirs(path, exist_ok=True)
        self.model.save_pretrained(path)
        self.tokenizer.save_pretrained(path)
        meta = {"type": "model", "format": fmt, "package_hint": "pyterrier-tite", **self.settings(), **(extra or {})}
        with open(os.path.join(path, PT_META), "w") as f:
            json.dump(meta, f, indent=1)


class IterDocEncoder(pyterrier_dr.BiDocEncoder):
    """Doc encoder with ``transform_iter``: ``model >> FlexIndex(path)`` indexes chunk by chunk, no DataFrames."""

    def transform_iter(self, inp: pt.model.IterDict) -> pt.model.IterDict:
        for chunk in chunked(inp, max(self.batch_size, 256)):
            if chunk and self.text_field not in chunk[0]:
                raise KeyError(f"doc encoder needs a {self.text_field!r} field, got {sorted(chunk[0])}")
            vectors = self.encode([r[self.text_field] for r in chunk])
            for record, vector in zip(chunk, vectors, strict=True):
                yield {**record, "doc_vec": vector}

    def transform(self, inp):
        with pta.validate.any(inp) as v:
            v.document_frame(extra_columns=[self.text_field])
            v.columns(includes=[self.text_field])
        texts = inp[self.text_field]
        if self.verbose:
            texts = pt.tqdm(texts, desc="Encoding Docs", unit="doc")
        vectors = self.encode(list(texts))
        return inp.assign(doc_vec=list(vectors))


class BertBiEncoder(DenseBiEncoder):
    """Baseline bi-encoder over any BERT-like ``AutoModel``: the [CLS] vector or the masked mean of all tokens."""

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer,
        pooling: Literal["cls", "mean"] = "cls",
        normalize: bool = False,
        **kwargs,
    ):
        if pooling not in ("cls", "mean"):
            raise ValueError(f"pooling must be 'cls' or 'mean', got {pooling!r}")
        super().__init__(model, tokenizer, **kwargs)
        self.pooling = pooling
        self.normalize = normalize

    @classmethod
    def from_pretrained(
        cls, path: str, pooling: Literal["cls", "mean"] | None = None, normalize: bool | None = None, **kwargs
    ) -> BertBiEncoder:
        """A folder saved by ``save_pretrained`` (settings from ``pt_meta.json``), a sentence-transformers folder
        (pooling and normalisation from its ``modules.json``, e.g. all-MiniLM-L6-v2: mean + L2 = cosine), or any
        BERT-like checkpoint (BERT, DistilBERT; [CLS], unnormalised, unless told otherwise), folder or hub id.

        Loading is exact: a tensor the encoder lacks or an unused one raises ``CheckpointError``, except the
        checkpoint's pooler and MLM head, which a bi-encoder that pools itself legitimately drops."""
        from transformers import AutoTokenizer

        from pyterrier_tite.convert.backbone import encoder_from_pretrained
        from pyterrier_tite.convert.checkpoint import local_checkpoint

        folder = local_checkpoint(path)
        meta = {**sentence_transformers_settings(folder), **read_meta(folder)}
        settings = {k: meta[k] for k in SETTINGS if k in meta}
        model = encoder_from_pretrained(folder)
        pooling = pooling or meta.get("pooling", "cls")
        normalize = meta.get("normalize", False) if normalize is None else normalize
        tokenizer = AutoTokenizer.from_pretrained(folder)
        encoder = cls(model, tokenizer, pooling=pooling, normalize=normalize, **{**settings, **kwargs})
        encoder.model_name = path
        return encoder

    def save_pretrained(self, path: str) -> None:
        """HF layout + ``pt_meta.json`` (pooling, normalisation, lengths, markers); ``from_pretrained`` reloads it."""
        self._save(path, "bert-biencoder", {"pooling": self.pooling, "normalize": self.normalize})

    def embed(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        if self.pooling == "cls":
            vectors = hidden[:, 0]
        else:
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            vectors = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1)
        return torch.nn.functional.normalize(vectors, dim=-1) if self.normalize else vectors

    def __repr__(self) -> str:
        norm = ", normalize=True" if self.normalize else ""
        return f"BertBiEncoder({getattr(self, 'model_name', '')!r}, pooling={self.pooling!r}{norm})"


def sentence_transformers_settings(path: str) -> dict:
    """Pooling / normalisation declared by a sentence-transformers folder (``modules.json``); {} for other folders."""
    modules_file = os.path.join(path, "modules.json")
    if not os.path.isdir(path) or not os.path.exists(modules_file):
        return {}
    with open(modules_file) as f:
        modules = json.load(f)
    settings: dict = {"normalize": any(m.get("type", "").endswith(".Normalize") for m in modules)}
    for module in modules:
        if module.get("type", "").endswith(".Pooling"):
            with open(os.path.join(path, module.get("path", ""), "config.json")) as f:
                pooling = json.load(f)
            if pooling.get("pooling_mode_mean_tokens"):
                settings["pooling"] = "mean"
            elif pooling.get("pooling_mode_cls_token"):
                settings["pooling"] = "cls"
    return settings
