"""Texts -> vectors on the torch side, shared by inference (``pyterrier_tite.pt`` bi-encoders) and training: a
:class:`~pyterrier_tite.models.bert_biencoder.tokenization.BiEncoderInputs` makes the batches, a module encodes
them, and the subclass pools the states into one vector per text. Gradients flow when they are enabled (training)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from more_itertools import chunked
from torch import nn

from pyterrier_tite.models.bert_biencoder.tokenization import BiEncoderInputs, Role

#: ``cls``: the first token's state; ``mean``: masked mean of all states; ``single``: the model pools every text to
#: exactly one state itself (TITE) and that state is the vector
POOLINGS = ("cls", "mean", "single")


def grow_embeddings(model: nn.Module, new_rows: dict[int, list[int]], size: int) -> None:
    """Grow ``model``'s word embeddings to ``size`` rows for tokens just added to its tokenizer; each new row starts
    from the mean embedding of the ids in ``new_rows`` (the word pieces of a marker's name; the whole table's mean
    when there are none), so an untrained marker is a plausible token instead of noise. A table that already has
    ``size`` rows is kept as it is."""
    if not new_rows:
        return
    embeddings = model.get_input_embeddings()
    old = embeddings.weight.data
    if size <= old.shape[0]:
        return
    grown = nn.Embedding(size, old.shape[1], padding_idx=embeddings.padding_idx, device=old.device)
    grown.weight.data[: old.shape[0]] = old
    for row, source in new_rows.items():
        known = [i for i in source if i < old.shape[0]]
        grown.weight.data[row] = old[known].mean(0) if known else old.mean(0)
    grown.weight.data = grown.weight.data.to(old.dtype)
    model.set_input_embeddings(grown)
    model.config.vocab_size = size


class TextEncoder(nn.Module):
    """``model`` + its inputs: ``encode(texts, role)`` -> ``[N, dim]`` in input order. Subclasses define ``forward``
    (a batch of model inputs -> ``[B, dim]``). Markers the tokenizer lacks are added to it and to ``model``."""

    def __init__(self, model: nn.Module, inputs: BiEncoderInputs):
        super().__init__()
        self.model = model
        grow_embeddings(model, inputs.add_markers(), len(inputs.tokenizer))
        self.inputs = inputs.for_model(model)

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        raise NotImplementedError

    @property
    def dim(self) -> int:
        return int(self.model.config.hidden_size)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def encode(self, texts: Sequence[str], role: Role, batch_size: int = 32) -> torch.Tensor:
        """``[N, dim]`` vectors of ``texts`` (as the role's inputs), ``batch_size`` texts per forward pass."""
        out = []
        for chunk in chunked(texts, batch_size):
            batch = {k: v.to(self.device) for k, v in self.inputs(chunk, role).items()}
            out.append(self(batch))
        if not out:
            return torch.zeros(0, self.dim, device=self.device, dtype=next(self.model.parameters()).dtype)
        return torch.cat(out)

    def encode_queries(self, texts: Sequence[str], batch_size: int = 32) -> torch.Tensor:
        return self.encode(texts, "query", batch_size)

    def encode_docs(self, texts: Sequence[str], batch_size: int = 32) -> torch.Tensor:
        return self.encode(texts, "doc", batch_size)


class PooledEncoder(TextEncoder):
    """A Hugging Face style encoder (``last_hidden_state``) pooled by ``pooling`` (:data:`POOLINGS`), optionally
    L2-normalised (then the dot product is the cosine)."""

    def __init__(self, model: nn.Module, inputs: BiEncoderInputs, pooling: str = "cls", normalize: bool = False):
        if pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}, got {pooling!r}")
        super().__init__(model, inputs)
        self.pooling = pooling
        self.normalize = normalize

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.pool(self.model(**batch).last_hidden_state, batch)

    def pool(self, hidden: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The text vectors of the model's ``last_hidden_state`` for ``batch`` (split from ``forward`` so a caller that
        runs the model itself, e.g. for its hidden states, pools exactly as ``encode`` does)."""
        if self.pooling == "mean":
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            vectors = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1)
        else:
            if self.pooling == "single" and hidden.shape[1] != 1:
                raise ValueError(f"this model does not pool to one vector (output length {hidden.shape[1]})")
            vectors = hidden[:, 0]
        return nn.functional.normalize(vectors, dim=-1) if self.normalize else vectors
