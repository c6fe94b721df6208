"""int8 linear layers that keep a cross-encoder's ranking (issue 73.4, ``benchmarks/int8_quality.py``).

torch's dynamic quantization gives a batch one activation scale, so BERT's outlier channels and tokens squeeze the rest
into a few int8 levels (0.034 nDCG@10 lost on DL19 by a trained MonoCE). Two changes keep the ranking (0.003 below
fp32 with AVX2 kernels, 0.008 with VNNI): **one activation scale per token**, rows multiplied by ``torch._int_mm`` (or
oneDNN's AMX matmul, where ``_int_mm`` is 3.5x slower than bf16); and **outlier channels migrated into the weights**
(SmoothQuant, ``x W^T = (x / s) (W s)^T``) where a LayerNorm feeds the layer, with ``max|x|`` read from the LayerNorm's
parameters (``|gamma| * SPREAD + |beta|``: no calibration data). BERT is post-LN (the LayerNorm's output is also the
residual), so ``1 / s`` is applied to the layer's input, not folded into the LayerNorm.
"""

from __future__ import annotations

import functools
import re

import torch
import torch.nn.functional as F
from torch import nn

from pyterrier_tite.devices import cpu_flags
from pyterrier_tite.models.fused_linear import fused_row_bucket
from pyterrier_tite.ops.int8_rows import dequantize_rows, quantize_rows

#: SmoothQuant's migration strength ``a`` (0.5 kept nDCG@10 within 0.014 on DL19, 0.8 within 0.003)
MIGRATION = 0.8
#: a normalised activation's assumed reach in standard deviations, for the data-free ``max|x|`` of a LayerNorm output
SPREAD = 4.0
#: an encoder layer's linear layers by name: ``<prefix>.layer.<i>.<rest>``
_LAYER = re.compile(r"^(?P<prefix>.*)\.layer\.(?P<index>\d+)\.(?P<rest>.+)$")


@functools.cache
def weight_levels() -> int:
    """The largest int8 weight level this machine's ``torch._int_mm`` multiplies exactly: 127, or 63 where oneDNN
    (AVX2, no VNNI) adds pairs of u8 x s8 products in int16, which overflows past 2 x 255 x 63 = 32,130."""
    rows, weights = torch.full((2, 64), 127, dtype=torch.int8), torch.full((64, 8), 127, dtype=torch.int8)
    return 127 if int(torch._int_mm(rows, weights)[0, 0]) == 64 * 127 * 127 else 63


@functools.cache
def amx_int8_matmul() -> bool:
    """Whether int8 products run on oneDNN's AMX matmul: a CPU with ``amx_int8`` where it gives ``torch._int_mm``'s
    products."""
    if "amx_int8" not in cpu_flags():
        return False
    try:
        rows, weight = (torch.randint(-127, 128, shape, dtype=torch.int8) for shape in ((40, 64), (24, 64)))
        got = _onednn_int8_mm(rows, torch.ops.onednn.qlinear_prepack(weight, None), torch.ones(24))
        return torch.equal(got, torch._int_mm(rows, weight.t().contiguous()).float())
    except (AttributeError, RuntimeError, NotImplementedError):
        return False


def _onednn_int8_mm(rows: torch.Tensor, packed: torch.Tensor, weight_scale: torch.Tensor) -> torch.Tensor:
    """``rows [T, K] int8 @ weight^T * weight_scale`` in float32 (``onednn.qlinear_pointwise``, whose AMX kernel
    takes uint8 rows: ``q + 128``, the sign bit flipped, with zero point 128)."""
    shifted, zero = rows.view(torch.uint8).bitwise_xor(128), torch.zeros(weight_scale.shape, dtype=torch.int64)
    float32 = (1.0, 0, torch.float32, "none", [], "")  # output: scale, zero point, dtype, no post-op
    return torch.ops.onednn.qlinear_pointwise(shifted, 1.0, 128, packed, weight_scale, zero, None, *float32)


def _amx_layout(weight_t: torch.Tensor) -> torch.Tensor | None:
    """oneDNN's AMX layout of the int8 weights ``[K, N]`` where :func:`amx_int8_matmul` (opaque: no state dict)."""
    return torch.ops.onednn.qlinear_prepack(weight_t.t().contiguous(), None) if amx_int8_matmul() else None


class Int8Linear(nn.Module):
    """``x W^T + b`` with int8 weights (one scale per output channel) and int8 activations (one per token), the input
    channels optionally divided by ``smoothing`` (whose factors are already in the weights)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, smoothing: torch.Tensor | None = None):
        super().__init__()
        weight = weight.detach().float()
        if smoothing is not None:
            weight = weight * smoothing
        levels = weight_levels()
        scale = weight.abs().amax(1).clamp_min(1e-12) / levels
        self.in_features, self.out_features = weight.shape[1], weight.shape[0]
        self.register_buffer("weight_t", torch.round(weight / scale[:, None]).to(torch.int8).t().contiguous())
        self.register_buffer("weight_scale", scale)
        self.register_buffer("bias", None if bias is None else bias.detach().float().clone())
        self.register_buffer("inverse", None if smoothing is None else (1.0 / smoothing).float())
        self.amx_weight = _amx_layout(self.weight_t)

    def __getstate__(self) -> dict:
        return {**super().__getstate__(), "amx_weight": None}  # opaque (no storage to copy): rebuilt on arrival

    def __setstate__(self, state: dict) -> None:
        super().__setstate__(state)
        self.amx_weight = _amx_layout(self.weight_t)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, x.shape[-1]).float()
        quantized, scale = quantize_rows(rows, self.inverse)
        if self.amx_weight is not None and rows.device.type == "cpu":
            n = rows.shape[0]  # oneDNN builds a kernel per row count (4-8 ms each): a few counts, the rest scratch
            padded = F.pad(quantized, (0, 0, 0, fused_row_bucket(n) - n if n else 0))
            out = _onednn_int8_mm(padded, self.amx_weight, self.weight_scale)[:n]
            out = out * scale if self.bias is None else torch.addcmul(self.bias, out, scale)
        else:
            out = dequantize_rows(torch._int_mm(quantized, self.weight_t), scale, self.weight_scale, self.bias)
        return out.reshape(*x.shape[:-1], self.out_features).to(x.dtype)

    def extra_repr(self) -> str:
        return f"in={self.in_features}, out={self.out_features}, migrated={self.inverse is not None}"


def migration_factors(linears: list[nn.Linear], norm: nn.LayerNorm, alpha: float | None = None) -> torch.Tensor:
    """SmoothQuant's per-input-channel ``s`` for layers that share the input ``norm`` writes (data-free maxima;
    ``alpha`` defaults to :data:`MIGRATION`)."""
    alpha = MIGRATION if alpha is None else alpha
    x_max = norm.weight.detach().abs() * SPREAD + norm.bias.detach().abs()
    w_max = torch.cat([linear.weight.detach().abs() for linear in linears]).amax(0)
    return (x_max.clamp_min(1e-5) ** alpha / w_max.clamp_min(1e-5) ** (1 - alpha)).clamp_min(1e-5).float()


def _feeding_norm(model: nn.Module, name: str) -> nn.LayerNorm | None:
    """The LayerNorm feeding the BERT-style layer ``name`` (``attention.self.*``, ``intermediate.dense``), or None."""
    match = _LAYER.match(name)
    if match is None:
        return None
    prefix, index, rest = match["prefix"], int(match["index"]), match["rest"]
    if rest.startswith("attention.self."):
        if index == 0:
            candidate = f"{prefix.rsplit('.', 1)[0]}.embeddings.LayerNorm" if "." in prefix else "embeddings.LayerNorm"
        else:
            candidate = f"{prefix}.layer.{index - 1}.output.LayerNorm"
    elif rest == "intermediate.dense":
        candidate = f"{prefix}.layer.{index}.attention.output.LayerNorm"
    else:
        return None
    try:
        norm = model.get_submodule(candidate)
    except AttributeError:
        return None
    return norm if isinstance(norm, nn.LayerNorm) and norm.bias is not None else None


def quantize_linears(
    model: nn.Module, names: set[str], projections: dict[str, str], parts: tuple[str, ...]
) -> dict[str, dict[str, Int8Linear]]:
    """Replaces the ``nn.Linear`` layers ``names`` of ``model`` (in place) by :class:`Int8Linear`, migrating the
    LayerNorm-fed ones. Returns, for each attention module whose ``projections`` (letter -> layer name) are all in
    ``names``, its joint layers ``{p: Int8Linear}`` for each ``p`` of ``parts`` (e.g. "qkv"), equal to the separate."""
    factors: dict[str, torch.Tensor | None] = {}
    joints: dict[str, dict[str, Int8Linear]] = {}
    for name in sorted(names):
        parent, _, attribute = name.rpartition(".")
        members = [f"{parent}.{layer}" for layer in projections.values()]
        if name in members and parent not in joints and all(m in names for m in members):
            norm = _feeding_norm(model, members[0])
            linears = {letter: model.get_submodule(f"{parent}.{layer}") for letter, layer in projections.items()}
            shared = None if norm is None else migration_factors(list(linears.values()), norm)
            factors.update(dict.fromkeys(members, shared))
            joints[parent] = {}
            for p in parts:  # one quantization of the input and one GEMM for the concatenated projections
                weight = torch.cat([linears[c].weight.detach() for c in p])
                bias = torch.cat([linears[c].bias.detach() for c in p])
                joints[parent][p] = Int8Linear(weight, bias, shared)
        if name not in factors:
            norm = _feeding_norm(model, name)
            factors[name] = None if norm is None else migration_factors([model.get_submodule(name)], norm)
    for name in sorted(names):
        linear = model.get_submodule(name)
        parent, _, attribute = name.rpartition(".")
        setattr(model.get_submodule(parent), attribute, Int8Linear(linear.weight, linear.bias, factors[name]))
    return joints
