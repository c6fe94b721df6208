"""Max over a text's tokens of a per-token vocabulary vector, without building ``[B, L, V]``.

An MLM's logits ``[B, L, V]`` are the largest tensor of a model over them (30,522 floats per token). When a text's
vector is a max of per-token vectors and nothing needs gradients (SPLADE encoding), the MLM runs up to its output
projection (:func:`head_states`) and :func:`max_over_tokens` projects the unmasked tokens of all texts, concatenated,
a block at a time, so each block stays in cache, padding costs nothing and short texts share one pass over the
projection's weight. (Aggretriever's per-token softmax over the vocabulary was tried this way: equal vectors, but
slower than its full logits on the CPU, so it keeps them.)
"""

from __future__ import annotations

import torch
from torch import nn

#: MLMs whose logits are exactly ``get_output_embeddings()(head states)``: the projection is last, on every token.
PROJECTION_LAST = frozenset({"bert", "distilbert", "roberta"})


def projection_is_last(mlm: nn.Module) -> bool:
    """Whether :func:`head_states` applies to ``mlm`` (a known architecture with a linear output projection)."""
    projection = mlm.get_output_embeddings() if hasattr(mlm, "get_output_embeddings") else None
    model_type = getattr(getattr(mlm, "config", None), "model_type", None)
    return model_type in PROJECTION_LAST and isinstance(projection, nn.Linear)


def head_states(mlm: nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    """The MLM head's states ``[..., H]`` just before its output projection, for the encoder's last-layer ``hidden``
    (what the head of :data:`PROJECTION_LAST` architectures computes before ``get_output_embeddings()``). The head's
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


def max_over_tokens(
    tokens: torch.Tensor, lengths: list[int], weight: torch.Tensor, block: int = 256, vocab_tile: int = 2048
) -> torch.Tensor:
    """``[B, V]``: for each text the elementwise max over its tokens of ``weight @ token`` (-inf for a text of no
    tokens; at least one text must have one), computed ``vocab_tile`` vocabulary rows by ``block`` tokens at a time.

    ``tokens`` ``[N, H]`` holds the texts' tokens one text after another (``lengths`` of them each); ``weight`` is the
    ``[V, H]`` projection. Each ``[vocab_tile, block]`` piece of logits (``rows @ tokens.T``, the faster orientation
    for BLAS here) stays in cache while each text's columns of it are reduced.
    """
    ends = torch.tensor(lengths, dtype=torch.long).cumsum(dim=0).tolist()
    starts = [0, *ends[:-1]]
    pieces = []  # per block of tokens: the texts it holds, each with its columns
    for begin in range(0, tokens.shape[0], block):
        end = min(begin + block, tokens.shape[0])
        columns = [(text, max(starts[text], begin) - begin, min(ends[text], end) - begin) for text in range(len(ends))
                   if max(starts[text], begin) < min(ends[text], end)]  # fmt: skip
        pieces.append((tokens[begin:end].T, columns))
    if not pieces:
        raise ValueError("no tokens: every text is empty")
    best = None
    for first in range(0, weight.shape[0], vocab_tile):
        rows = weight[first : first + vocab_tile]
        for block_tokens, columns in pieces:
            logits = rows @ block_tokens  # [v, n]
            if best is None:
                best = logits.new_full((len(ends), weight.shape[0]), float("-inf"))
            target = best[:, first : first + vocab_tile]
            for text, low, high in columns:
                torch.maximum(target[text], logits[:, low:high].amax(dim=1), out=target[text])
    return best
