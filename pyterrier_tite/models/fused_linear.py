"""Several ``nn.Linear`` applied as one GEMM: their weights and biases concatenated along the output dimension.

Checkpoints keep the separate tensors (so reference weights load unchanged); the concatenation is rebuilt when autograd
needs it and, in inference, cached until one of the parameters changes (in place or by reassignment).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

import torch
from torch import nn

#: optional per-projection transform of a weight or bias, e.g. a row reordering: (index of the linear, tensor) -> tensor
Prepare = Callable[[int, torch.Tensor], torch.Tensor]


class ConcatenatedLinears:
    """Cache of concatenated projection weights, one entry per key (e.g. which projections are fused)."""

    def __init__(self) -> None:
        self._cache: dict[Hashable, tuple[tuple, torch.Tensor, torch.Tensor]] = {}

    def get(
        self, key: Hashable, linears: Sequence[nn.Linear], prepare: Prepare | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Weight [sum(out), in] and bias [sum(out)] of ``linears``, for ``F.linear``."""
        stamp = tuple((t.data_ptr(), t._version) for lin in linears for t in (lin.weight, lin.bias))
        cacheable = not torch.is_grad_enabled()
        if cacheable and (hit := self._cache.get(key)) is not None and hit[0] == stamp:
            return hit[1], hit[2]
        weights = [lin.weight if prepare is None else prepare(i, lin.weight) for i, lin in enumerate(linears)]
        biases = [lin.bias if prepare is None else prepare(i, lin.bias) for i, lin in enumerate(linears)]
        weight, bias = (weights[0], biases[0]) if len(linears) == 1 else (torch.cat(weights), torch.cat(biases))
        if cacheable:
            self._cache[key] = (stamp, weight, bias)
        return weight, bias
