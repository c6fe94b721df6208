"""Several ``nn.Linear`` applied as one GEMM, and oneDNN's linear + GELU on a bounded set of row counts.

Checkpoints keep the separate tensors; the concatenation is rebuilt when autograd needs it and, in inference, cached
until one of the parameters changes (in place or by reassignment).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable, Sequence

import torch
import torch.nn.functional as F
from torch import nn
from transformers.activations import GELUActivation


class ConcatenatedLinears:
    """Cache of concatenated projection weights, one entry per key (e.g. which projections are fused)."""

    def __init__(self) -> None:
        self._cache: dict[Hashable, tuple[tuple, torch.Tensor, torch.Tensor]] = {}

    def get(
        self,
        key: Hashable,
        linears: Sequence[nn.Linear],
        prepare: Callable[[int, torch.Tensor], torch.Tensor] | None = None,
        dtype: torch.dtype | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Weight [sum(out), in] and bias [sum(out)] of ``linears``, for ``F.linear``, each first transformed by
        ``prepare(index, tensor)`` (e.g. a row reordering); in ``dtype`` when given (the autocast dtype: the cast
        autocast would make on every call, made once)."""
        stamp = tuple((t.data_ptr(), t._version) for lin in linears for t in (lin.weight, lin.bias))
        cacheable = not torch.is_grad_enabled()
        if cacheable and (hit := self._cache.get((key, dtype))) is not None and hit[0] == stamp:
            return hit[1], hit[2]
        weights = [lin.weight if prepare is None else prepare(i, lin.weight) for i, lin in enumerate(linears)]
        biases = [lin.bias if prepare is None else prepare(i, lin.bias) for i, lin in enumerate(linears)]
        weight, bias = (weights[0], biases[0]) if len(linears) == 1 else (torch.cat(weights), torch.cat(biases))
        if dtype is not None:
            weight, bias = weight.to(dtype), bias.to(dtype)
        if cacheable:
            self._cache[(key, dtype)] = (stamp, weight, bias)
        return weight, bias


def linear_gelu(dense: nn.Module, act: Callable[[torch.Tensor], torch.Tensor] | None, x: torch.Tensor) -> torch.Tensor:
    """``act(dense(x))``; for the exact (erf) GELU on float32 CPU tensors, one oneDNN kernel (a linear layer with a
    GELU post-op): the same numbers without a second pass over the ``[T, 4H]`` activations."""
    exact_gelu = act is F.gelu or (type(act) is GELUActivation and act.act is F.gelu)
    if (
        exact_gelu
        and type(dense) is nn.Linear
        and x.device.type == "cpu"
        and x.dtype == dense.weight.dtype == torch.float32
        and not torch.is_autocast_enabled("cpu")
        and _fused_linear_gelu_works()
    ):
        return _fused_linear_gelu_bounded(x, dense.weight, dense.bias)
    return act(dense(x))


#: rows per call of the fused kernel; longer inputs run in chunks (a row's result does not depend on the other rows)
FUSED_CHUNK_ROWS = 1024


def fused_row_bucket(rows: int) -> int:
    """The row count a oneDNN kernel is called with for ``rows`` rows: a multiple of 2^(floor(log2 rows) - 3), i.e.
    8 sizes per octave (at most 12.5% more rows), so a few dozen sizes below :data:`FUSED_CHUNK_ROWS`."""
    step = max(16, 1 << max(0, rows.bit_length() - 4))
    return -(-rows // step) * step


def _onednn_linear_gelu(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "gelu", [], "none")


def in_autocast_dtype(x: torch.Tensor) -> torch.Tensor:
    """CPU states in the autocast dtype where autocast runs, so the residual stream stays bf16 / fp16: float32 states
    would be cast again by every linear layer (10% of a bf16 forward on an AMX CPU) and added and normalised at twice
    the memory traffic. Scores agree with float32 as closely (Spearman per query >= 0.999 on DL19)."""
    if x.device.type == "cpu" and torch.is_autocast_enabled("cpu"):
        return x.to(torch.get_autocast_dtype("cpu"))
    return x


def gemm_rows(rows: int, x: torch.Tensor) -> int:
    """The row count to give ``rows`` packed CPU states ``x`` whose linear layers run in bf16 / fp16:
    :func:`fused_row_bucket`, since oneDNN builds a kernel for every new row count (2.7x a cached shape's time on an
    AMX CPU). ``rows`` elsewhere: float32 runs MKL, which builds nothing per shape, and int8 bounds its own."""
    low = torch.is_autocast_enabled("cpu") or x.dtype in (torch.bfloat16, torch.float16)
    return fused_row_bucket(rows) if x.device.type == "cpu" and low and rows > 0 else rows


def _fused_linear_gelu_bounded(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """oneDNN's linear + GELU on a bounded set of row counts: oneDNN caches a primitive with its own buffers per input
    shape, so each batch's token count would grow a long run's memory with its number of pairs."""
    leading, features = x.shape[:-1], x.shape[-1]
    rows = x.reshape(-1, features)
    n = rows.shape[0]
    whole = n - n % FUSED_CHUNK_ROWS
    parts = [
        _onednn_linear_gelu(rows[s : s + FUSED_CHUNK_ROWS], weight, bias) for s in range(0, whole, FUSED_CHUNK_ROWS)
    ]
    if n > whole:
        rest, pad = rows[whole:], fused_row_bucket(n - whole) - (n - whole)
        if pad:  # F.pad copies even when it pads nothing
            rest = F.pad(rest, (0, 0, 0, pad))
        parts.append(_onednn_linear_gelu(rest, weight, bias)[: n - whole])
    out = parts[0] if len(parts) == 1 else torch.cat(parts)
    return out.reshape(*leading, out.shape[-1])


@functools.cache
def _fused_linear_gelu_works() -> bool:
    """oneDNN's ``linear + erf GELU`` kernel exists in this torch build and gives ``gelu(linear(x))``."""
    try:
        x, w, b = torch.randn(5, 8), torch.randn(16, 8), torch.randn(16)
        got = _onednn_linear_gelu(x, w, b)
        return torch.backends.mkldnn.is_available() and torch.allclose(got, F.gelu(F.linear(x, w, b)))
    except (AttributeError, RuntimeError, NotImplementedError):
        return False


#: the attention projection layers by their letter in a ``parts`` string of :func:`attention_projections`
PROJECTIONS = {"q": "query", "k": "key", "v": "value"}


def attention_projections(
    attention: nn.Module, x: torch.Tensor, parts: str, cache: ConcatenatedLinears
) -> torch.Tensor:
    """The projections ``parts`` ("qkv", "kv", "q") of an attention module, concatenated on the last dimension: its
    joint int8 layers where it was quantized (``int8_projections``), else one GEMM over weights cached in ``cache``
    (one call per layer where they are not plain ``nn.Linear`` with a bias)."""
    int8 = getattr(attention, "int8_projections", {})
    if parts in int8:
        return int8[parts](x)
    linears = tuple(getattr(attention, PROJECTIONS[p]) for p in parts)
    if any(type(linear) is not nn.Linear or linear.bias is None for linear in linears):
        return torch.cat([linear(x) for linear in linears], dim=-1)
    device = x.device.type
    dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else None
    weight, bias = cache.get(parts, linears, dtype=dtype)
    out = F.linear(x.reshape(-1, x.shape[-1]), weight, bias)  # 2-D: a strided [B, 1, H] went to bmm with B weights
    return out.view(*x.shape[:-1], out.shape[-1])
