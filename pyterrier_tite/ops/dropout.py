"""Dropout for CPU training: the compiled counter-based kernel (``csrc/dropout_cpu.cpp``) or ``F.dropout``.

ATen draws one Bernoulli number per element (about 15% of a cross-encoder's bf16 training step on 2 CPU cores). The
kernel hashes (seed, position) instead: no mask kept for the backward pass, the same result for any number of threads,
and the seed comes from torch's CPU generator, so ``torch.manual_seed`` keeps training reproducible. Each element is
still dropped independently with probability p (to 1/65536). Other devices keep ``F.dropout``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from pyterrier_tite.ops._extension import choose_backend, has_csrc, register_backends

register_backends("dropout", [("csrc-cpu", has_csrc), ("torch", lambda: True)])


class _CounterDropout(torch.autograd.Function):
    """Dropout whose backward pass is the same masking (same seed) applied to the gradient."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, p: float, seed: int) -> torch.Tensor:
        ctx.p, ctx.seed = p, seed
        return torch.ops.tite.dropout(x, p, seed)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return torch.ops.tite.dropout(grad, ctx.p, ctx.seed), None, None


def dropout(x: torch.Tensor, p: float = 0.5, training: bool = True, backend: str | None = None) -> torch.Tensor:
    """``F.dropout(x, p, training)``, on the counter-based kernel for CPU tensors where it is built."""
    if not training or p == 0.0:
        return x
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if choose_backend("dropout", x.device, backend) == "torch":
        return F.dropout(x, p, True)
    seed = int(torch.empty((), dtype=torch.int64).random_())  # from the global CPU generator
    return _CounterDropout.apply(x, p, seed)


class Dropout(nn.Dropout):
    """``nn.Dropout`` computed by :func:`dropout` (a subclass, so ``isinstance`` checks and state dicts are
    unchanged; ``inplace`` is not supported by the kernel and falls back to ``F.dropout``)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.inplace:
            return super().forward(x)
        return dropout(x, self.p, self.training)


def use_fast_dropout(model: nn.Module) -> int:
    """Swap every plain ``nn.Dropout`` inside ``model`` for :class:`Dropout` (in place; returns how many), so the
    model's own modules and those of Hugging Face backbones train with the kernel."""
    swapped = 0
    for parent in model.modules():
        for name, child in parent.named_children():
            if type(child) is nn.Dropout:
                fast = Dropout(child.p, child.inplace)
                fast.train(child.training)
                setattr(parent, name, fast)
                swapped += 1
    return swapped
