"""Texts -> vectors, shared by the bi-encoders' inference and training (gradients flow when enabled)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from more_itertools import chunked
from torch import nn

from pyterrier_tite.models.bert_biencoder.tokenization import BiEncoderInputs, Role
from pyterrier_tite.models.packed_bert import PackedEncoder, PackedPairs, supports_packed

#: ``cls``: the first token's state; ``mean``: masked mean of all states; ``single``: the model pools every text to
#: exactly one state itself (TITE) and that state is the vector
POOLINGS = ("cls", "mean", "single")


def grow_embeddings(model: nn.Module, new_rows: dict[int, list[int]], size: int) -> None:
    """Grow ``model``'s word embeddings to ``size`` rows, each new row the mean of the ids in ``new_rows`` (a
    marker's word pieces; else the whole table's), so an untrained marker is a plausible token, not noise."""
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

    def encode(
        self, texts: Sequence[str], role: Role, batch_size: int = 32, progress: Callable[[int], object] | None = None
    ) -> torch.Tensor:
        """``[N, dim]`` vectors in input order; in inference longest texts first (little padding). ``progress``: called
        with each batch's size."""
        order = list(range(len(texts)))
        if not torch.is_grad_enabled():
            order.sort(key=lambda i: -len(texts[i]))
        out = []
        for chunk in chunked(order, batch_size):
            batch = {k: v.to(self.device) for k, v in self.inputs([texts[i] for i in chunk], role).items()}
            out.append(self(batch))
            if progress is not None:
                progress(len(chunk))
        if not out:
            return torch.zeros(0, self.dim, device=self.device, dtype=next(self.model.parameters()).dtype)
        vectors = torch.cat(out)
        if order == sorted(order):
            return vectors
        inverse = torch.empty(len(order), dtype=torch.long)
        inverse[torch.tensor(order)] = torch.arange(len(order))
        return vectors[inverse.to(vectors.device)]

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
        self.packed = True  # inference on BERT / ELECTRA: the packed forward (no compute on padding)
        self._packed_encoder: PackedEncoder | None = None

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        packed = self._packed_rows(batch)
        if packed is not None:  # inference: no compute on padding, the same states (zeros on padded rows)
            if self.pooling == "cls":
                vectors = self._packed_encoder(packed, cls_only=True)
                return nn.functional.normalize(vectors, dim=-1) if self.normalize else vectors
            hidden = self._packed_encoder(packed, cls_only=False)
            return self.pool(hidden, {"attention_mask": batch["attention_mask"][:, : hidden.shape[1]]})
        return self.pool(self.model(**batch).last_hidden_state, batch)

    def _packed_rows(self, batch: dict[str, torch.Tensor]) -> PackedPairs | None:
        """The batch packed, where it applies: inference, a BERT / ELECTRA encoder, [CLS] or mean pooling."""
        if not self.packed or self.training or torch.is_grad_enabled() or self.pooling == "single":
            return None
        if not supports_packed(self.model):
            return None
        if self._packed_encoder is None or self._packed_encoder.backbone is not self.model:
            self._packed_encoder = PackedEncoder(self.model)
        return PackedPairs.from_padded(batch)

    def pool(self, hidden: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The text vectors of ``last_hidden_state`` (for callers that run the model themselves)."""
        if self.pooling == "mean":
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            vectors = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1)
        else:
            if self.pooling == "single" and hidden.shape[1] != 1:
                raise ValueError(f"this model does not pool to one vector (output length {hidden.shape[1]})")
            vectors = hidden[:, 0]
        return nn.functional.normalize(vectors, dim=-1) if self.normalize else vectors
