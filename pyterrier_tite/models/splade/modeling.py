"""SPLADE: a text is ``max_t log(1 + relu(logits_t)) * mask_t`` over its tokens, one weight per vocabulary id, from any
masked-LM checkpoint. CPU encoding never builds the ``[B, L, V]`` logits (:func:`splade_pool_projected`);
Aggretriever's per-token softmax was tried that way too: equal vectors, but slower than its full logits."""

from __future__ import annotations

import os

import torch
from torch import nn

from pyterrier_tite.models.backbone import mlm_from_pretrained
from pyterrier_tite.models.batch_tensors import takes_token_types
from pyterrier_tite.models.packed_bert import PackedEncoder, PackedPairs, packed_mlm_encoder
from pyterrier_tite.models.packing import block_columns
from pyterrier_tite.models.splade.tokenization import Role

#: MLMs whose logits are exactly ``get_output_embeddings()(head states)``: the projection is last, on every token.
PROJECTION_LAST = frozenset({"bert", "distilbert", "roberta"})


def projection_is_last(mlm: nn.Module) -> bool:
    """Whether :func:`head_states` applies to ``mlm`` (a known architecture with a linear output projection)."""
    projection = mlm.get_output_embeddings() if hasattr(mlm, "get_output_embeddings") else None
    model_type = getattr(getattr(mlm, "config", None), "model_type", None)
    return model_type in PROJECTION_LAST and isinstance(projection, nn.Linear)


def head_states(mlm: nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    """The MLM head's states just before its output projection, for the encoder's last-layer ``hidden``. The head's
    layers are called one by one: the module is shared by every thread calling the model, so nothing on it (a
    ``forward``, a hook) may be swapped for one call."""
    model_type = mlm.config.model_type
    if model_type == "bert":
        return mlm.cls.predictions.transform(hidden)
    if model_type == "distilbert":
        return mlm.vocab_layer_norm(mlm.activation(mlm.vocab_transform(hidden)))
    if model_type == "roberta":
        from transformers.activations import gelu

        return mlm.lm_head.layer_norm(gelu(mlm.lm_head.dense(hidden)))
    raise ValueError(f"no head states for a {model_type!r} MLM (projection_is_last is False for it)")


def splade_pool_tokens(
    tokens: torch.Tensor,
    lengths: list[int],
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    block: int = 256,
    vocab_tile: int = 2048,
) -> torch.Tensor:
    """:func:`splade_pool_projected` of texts given as their tokens' head states one after another (``tokens [N, H]``,
    ``lengths`` per text, at least one token in all). Each ``[vocab_tile, block]`` piece of logits (``rows @
    tokens.T``, BLAS's faster orientation here) stays in cache while each text's columns of it are reduced: padding
    costs nothing and short texts share one pass over the weight."""
    pieces = [(tokens[begin:end].T, columns) for begin, end, columns in block_columns(lengths, block)]
    if not pieces:
        raise ValueError("no tokens: every text is empty")
    best = None
    for first in range(0, weight.shape[0], vocab_tile):
        rows = weight[first : first + vocab_tile]
        for block_tokens, columns in pieces:
            logits = rows @ block_tokens  # [v, n]
            if best is None:
                best = logits.new_full((len(lengths), weight.shape[0]), float("-inf"))
            target = best[:, first : first + vocab_tile]
            for text, low, high in columns:
                torch.maximum(target[text], logits[:, low:high].amax(dim=1), out=target[text])
    if bias is not None:
        best += bias.to(best.dtype)
    return best.relu_().log1p_()  # -inf (a text of no tokens) -> 0


def splade_pool(logits: torch.Tensor, attention_mask: torch.Tensor, inplace: bool = False) -> torch.Tensor:
    """``max_t log(1 + relu(logits[:, t])) * mask[:, t]``: ``[B, L, V]`` logits -> ``[B, V]`` term weights.

    ``inplace`` reuses the logits' memory (``[B, L, V]`` is the largest tensor of the model); only without autograd.
    """
    mask = attention_mask.unsqueeze(-1).to(logits.dtype)
    if inplace:
        activated = logits.relu_().log1p_().mul_(mask)
    else:
        activated = torch.log1p(torch.relu(logits)) * mask
    if activated.shape[1] == 0:  # no tokens at all: the zero vector
        return activated.new_zeros(activated.shape[0], activated.shape[2])
    return activated.amax(dim=1)


def splade_pool_projected(
    hidden: torch.Tensor,
    attention_mask: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    block: int = 256,
    vocab_tile: int = 2048,
) -> torch.Tensor:
    """:func:`splade_pool` of the logits ``hidden @ weight.T + bias`` without building the ``[B, L, V]`` logits.

    ``log1p`` and ``relu`` do not decrease and the bias is the same for every token, so the max moves inside:
    ``max_t log1p(relu(h_t W + b)) = log1p(relu(max_t (h_t W) + b))`` over the unmasked tokens, exactly in floating
    point too (rounding does not decrease either); the elementwise work is ``[B, V]``, not ``[B, L, V]``. Only the
    unmasked tokens are projected (:func:`splade_pool_tokens`).
    """
    keep = attention_mask.bool()
    if not keep.any():  # no tokens at all: the zero vectors
        return hidden.new_zeros(hidden.shape[0], weight.shape[0])
    return splade_pool_tokens(hidden[keep], keep.sum(dim=1).tolist(), weight, bias, block, vocab_tile)


class SpladeEncoder(nn.Module):
    """An MLM (``AutoModelForMaskedLM``) whose logits are SPLADE-pooled into one sparse vector per text."""

    def __init__(self, mlm: nn.Module):
        super().__init__()
        self.mlm = mlm
        self._token_types = takes_token_types(mlm)
        self._projection_last = projection_is_last(mlm)
        self.packed = True  # CPU inference of a BERT MLM: the packed forward (no compute on padding)
        self._packed_encoder: PackedEncoder | None = None

    @property
    def vocab_size(self) -> int:
        return int(self.mlm.config.vocab_size)

    def side(self, role: Role) -> SpladeEncoder:
        """The encoder of queries or documents: one model encodes both."""
        return self

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Token ids ``[B, L]`` -> term weights ``[B, V]``. On a GPU the full logits stay: one fused pass over them is
        cheap there, and per-text reductions would cost a kernel launch each."""
        kwargs = {"token_type_ids": token_type_ids} if token_type_ids is not None and self._token_types else {}
        if self._projection_last and not torch.is_grad_enabled() and input_ids.device.type == "cpu":
            projection = self.mlm.get_output_embeddings()
            packed = self._packed_rows(input_ids, attention_mask, kwargs.get("token_type_ids"))
            if packed is not None:  # every token's states with no padding, then the MLM head on real tokens only
                encoder, pairs = packed
                states = head_states(self.mlm, encoder.tokens(pairs))
                lengths = attention_mask.sum(dim=1).tolist()
                return splade_pool_tokens(states, lengths, projection.weight, projection.bias)
            hidden = self.mlm.base_model(input_ids=input_ids, attention_mask=attention_mask, **kwargs).last_hidden_state
            return splade_pool_projected(head_states(self.mlm, hidden), attention_mask, projection.weight,
                                         projection.bias)  # fmt: skip
        logits = self.mlm(input_ids=input_ids, attention_mask=attention_mask, **kwargs).logits
        return splade_pool(logits, attention_mask, inplace=not torch.is_grad_enabled())

    def _packed_rows(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor | None
    ) -> tuple[PackedEncoder, PackedPairs] | None:
        """The packed encoder and batch, where they apply (a BERT MLM, inference). The encoder is kept for the next
        call; this call uses the one it got, whatever another thread stores meanwhile."""
        encoder = packed_mlm_encoder(self.mlm, self._packed_encoder) if self.packed else None
        self._packed_encoder = encoder
        if encoder is None:
            return None
        pairs = PackedPairs.from_padded(
            {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}
        )
        return None if pairs is None else (encoder, pairs)

    @classmethod
    def from_pretrained(cls, path: str, new_head: bool = False, **kwargs) -> SpladeEncoder:
        """An MLM checkpoint (folder or hub id), loaded exactly."""
        return cls(mlm_from_pretrained(path, new_head=new_head, **kwargs))

    def save_pretrained(self, path: str) -> None:
        """The Hugging Face layout of the MLM: a SPLADE checkpoint is just an MLM checkpoint."""
        os.makedirs(path, exist_ok=True)
        self.mlm.save_pretrained(path)


class SpladePair(nn.Module):
    """Two MLMs over one vocabulary, for queries and documents (naver's efficient-splade ``-query`` / ``-doc``)."""

    def __init__(self, query: SpladeEncoder, doc: SpladeEncoder):
        super().__init__()
        if query.vocab_size != doc.vocab_size:
            raise ValueError(f"query and doc MLMs differ in vocabulary size ({query.vocab_size} vs {doc.vocab_size})")
        self.query = query
        self.doc = doc

    @property
    def vocab_size(self) -> int:
        return self.doc.vocab_size

    def side(self, role: Role) -> SpladeEncoder:
        """The encoder of ``role`` (``"query"`` or ``"doc"``)."""
        if role not in ("query", "doc"):
            raise ValueError(f"role must be 'query' or 'doc', got {role!r}")
        return self.query if role == "query" else self.doc

    def forward(self, *args, **kwargs) -> torch.Tensor:
        raise TypeError("a SpladePair encodes through .side('query') or .side('doc'): say which texts these are")

    def save_pretrained(self, path: str) -> None:
        """Each MLM in its own sub-folder (``query/``, ``doc/``), each a plain MLM checkpoint."""
        for role in ("query", "doc"):
            self.side(role).save_pretrained(os.path.join(path, role))
