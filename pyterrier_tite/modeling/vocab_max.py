"""Max over a text's tokens of a per-token vocabulary vector, without building ``[B, L, V]``.

An MLM's logits ``[B, L, V]`` are the largest tensor of a model over them (30,522 floats per token). When a text's
vector is a max of per-token vectors and nothing needs gradients (SPLADE encoding), the MLM runs up to its output
projection (:func:`head_states`) and :func:`max_over_tokens` projects the unmasked tokens of all texts, concatenated,
a block at a time, so each block stays in cache, padding costs nothing and short texts share one pass over the
projection's weight. (Aggretriever's per-token softmax over the vocabulary was tried this way: equal vectors, but
slower than its full logits on the CPU, so it keeps them.)
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch
from torch import nn

#: MLMs whose logits are exactly ``get_output_embeddings()(head states)``: the projection is last, on every token.
PROJECTION_LAST = frozenset({"bert", "distilbert", "roberta"})


def projection_is_last(mlm: nn.Module) -> bool:
    """Whether :func:`head_states` applies to ``mlm`` (a known architecture with a linear output projection)."""
    projection = mlm.get_output_embeddings() if hasattr(mlm, "get_output_embeddings") else None
    model_type = getattr(getattr(mlm, "config", None), "model_type", None)
    return model_type in PROJECTION_LAST and isinstance(projection, nn.Linear)


@contextlib.contextmanager
def head_states(mlm: nn.Module) -> Iterator[nn.Linear]:
    """Within the block the MLM's output projection passes its input through, so ``mlm(...).logits`` are the head's
    states ``[B, L, H]`` before the projection; yields the projection (an instance attribute shadows its ``forward``
    until the block ends)."""
    projection = mlm.get_output_embeddings()
    projection.forward = _passthrough
    try:
        yield projection
    finally:
        del projection.forward


def _passthrough(states: torch.Tensor) -> torch.Tensor:
    return states


def max_over_tokens(
    tokens: torch.Tensor,
    lengths: list[int],
    project: Callable[[torch.Tensor, int, int], torch.Tensor],
    token_dim: int,
    block: int = 256,
) -> torch.Tensor | None:
    """``[B, V]``: for each text the elementwise max over its tokens of ``project``'s vectors; -inf for a text of no
    tokens, None when there are no tokens at all.

    ``tokens`` ``[N, H]`` holds the texts' tokens one text after another (``lengths`` of them each);
    ``project(tokens[begin:end], begin, end)`` gives their vectors with the token axis at ``token_dim`` (0: ``[n, V]``,
    1: ``[V, n]``, whichever orientation is faster for the caller's matmul).
    """
    ends = torch.tensor(lengths).cumsum(dim=0).tolist()
    starts = [0, *ends[:-1]]
    best: torch.Tensor | None = None
    first_text = 0
    for begin in range(0, tokens.shape[0], block):
        end = min(begin + block, tokens.shape[0])
        vectors = project(tokens[begin:end], begin, end)
        if best is None:
            best = vectors.new_full((len(ends), vectors.shape[1 - token_dim]), float("-inf"))
        while ends[first_text] <= begin:
            first_text += 1
        for text in range(first_text, len(ends)):
            if starts[text] >= end:
                break
            low, high = max(starts[text], begin) - begin, min(ends[text], end) - begin
            if high > low:
                text_max = vectors.narrow(token_dim, low, high - low).amax(dim=token_dim)
                torch.maximum(best[text], text_max, out=best[text])
    return best
