"""Where models run by default (the GPU when there is one, else the CPU) and in which precision.

Precisions: ``fp32``, ``bf16`` / ``fp16`` (autocast; softmax statistics, losses and score heads in float32). Default:
bf16 on GPUs that support it, else fp32, also on CPUs with native bf16, where ``bf16`` is faster but opt-in."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import TypeVar

import torch

T = TypeVar("T")

PRECISIONS: dict[str, torch.dtype | None] = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


def default_device(device: str | torch.device | None = None) -> torch.device:
    """``device`` when given, else ``cuda`` if available, else ``cpu``. A device this torch cannot run on is a
    ``ValueError`` saying why, at once, not a traceback from inside the first model call."""
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    problem = device_problem(device)
    if problem is not None:
        raise ValueError(f"device={str(device)!r}: {problem}; or use device='cpu'")
    return torch.device(device)


def device_problem(device: str | torch.device) -> str | None:
    """Why this torch cannot run on ``device``, in words (None where it can): ``device=`` and ``--device``'s check."""
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        return "not a torch device (cpu, cuda, cuda:N, mps)"
    if parsed.type == "cuda":
        if torch.version.cuda is None and getattr(torch.version, "hip", None) is None:
            return f"this torch ({torch.__version__}) has no CUDA (a CPU-only build): install a CUDA build of torch"
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            return f"this torch ({torch.__version__}) sees no CUDA GPU (check the driver and CUDA_VISIBLE_DEVICES)"
        if parsed.index is not None and parsed.index >= count:
            return f"this machine has {count} CUDA GPU{'s' if count > 1 else ''} (cuda:0 to cuda:{count - 1})"
    elif parsed.type == "mps" and not torch.backends.mps.is_available():
        return "MPS (Apple GPUs) is not available here"
    return None


@functools.cache
def cpu_flags() -> frozenset[str]:
    """This CPU's feature flags (``/proc/cpuinfo``, read once; none where it cannot be read): which kernels pay here."""
    try:
        with open("/proc/cpuinfo") as f:
            return frozenset(next((line for line in f if line.startswith("flags")), "").split())
    except OSError:
        return frozenset()


def cpu_has_native_bf16() -> bool:
    """Whether this CPU computes bf16 products natively (AVX-512 BF16 or AMX); elsewhere bf16 is emulated."""
    return bool(cpu_flags() & {"avx512_bf16", "amx_bf16"})


def default_precision(device: str | torch.device | None = None) -> str:
    """``bf16`` on a CUDA device that supports it, else ``fp32``."""
    device = default_device(device)
    if device.type == "cuda" and torch.cuda.is_bf16_supported():
        return "bf16"
    return "fp32"


def precision_dtype(precision: str | torch.dtype | None) -> torch.dtype | None:
    """The autocast dtype of a precision name or dtype (None for fp32 and ``int8``, whose activations are float32)."""
    if precision is None or precision == torch.float32 or precision == "int8":
        return None
    if isinstance(precision, torch.dtype):
        if precision not in (torch.bfloat16, torch.float16):
            raise ValueError(f"dtype must be float32, bfloat16 or float16, got {precision}")
        return precision
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {sorted(PRECISIONS)}, got {precision!r}")
    return PRECISIONS[precision]


_ALIASES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "half": "fp16"}
_DTYPE_NAMES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}


def resolve_precision(
    dtype: torch.dtype | str | None, device: str | torch.device | None = None, int8: bool = False
) -> str:
    """The precision name of a model's ``dtype`` argument: a torch dtype, a name (``"bfloat16"``, ``"bf16"``, ...)
    or None for the device's default. ``int8``: the model also accepts ``"int8"`` / ``torch.qint8`` (CPU only)."""
    if dtype is None:
        return default_precision(device)
    if int8 and (dtype == torch.qint8 or dtype in ("int8", "qint8")):
        if (torch.device(device) if device is not None else default_device()).type != "cpu":  # no check of CUDA here
            raise ValueError(f"dtype='int8' (dynamic int8 linear layers) runs on the CPU only, not on {device}")
        return "int8"
    if isinstance(dtype, torch.dtype):
        if dtype not in _DTYPE_NAMES:
            raise ValueError(f"dtype must be float32, bfloat16 or float16{_INT8 if int8 else ''}, got {dtype}")
        name = _DTYPE_NAMES[dtype]
    else:
        name = _ALIASES.get(str(dtype), str(dtype))
    if name not in PRECISIONS:
        raise ValueError(
            f"dtype must be float32, bfloat16 or float16 (or fp32 / bf16 / fp16){_INT8 if int8 else ''}, got {dtype!r}"
        )
    if name == "bf16" and default_device(device).type == "cpu":
        warn_emulated_bf16()
    return name


_INT8 = " or 'int8'"
_warned_bf16 = False


def warn_emulated_bf16() -> None:
    """Once per process: bf16 on a CPU without native bf16 is emulated, 5x slower than fp32 on an AVX2 CPU."""
    global _warned_bf16
    if _warned_bf16 or cpu_has_native_bf16():
        return
    _warned_bf16 = True
    warnings.warn(
        "dtype=torch.bfloat16 on a CPU without native bf16 (no avx512_bf16 / amx_bf16 flag): it is emulated and "
        "several times slower than float32; pass dtype=torch.float32 (or dtype='int8' for a re-ranker)",
        RuntimeWarning,
        stacklevel=3,
    )


def autocast(device: str | torch.device, precision: str | torch.dtype | None) -> AbstractContextManager:
    """``torch.autocast`` for a precision on a device; nothing for fp32."""
    dtype = precision_dtype(precision)
    return torch.autocast(torch.device(device).type, dtype=dtype) if dtype is not None else nullcontext()


def as_dtype(value: T, dtype: torch.dtype) -> T:
    """A floating-point tensor in ``dtype``; anything else unchanged."""
    if isinstance(value, torch.Tensor) and value.is_floating_point() and value.dtype != dtype:
        return value.to(dtype)
    return value


def autocast_off(device: str | torch.device) -> AbstractContextManager:
    """Leave an enclosing autocast region: operations inside run in their inputs' dtype."""
    return torch.autocast(torch.device(device).type, enabled=False)


def in_dtype(dtype: torch.dtype, fn: Callable[..., T], *args, **kwargs) -> T:
    """``fn(*args, **kwargs)`` with autocast off and every floating-point tensor argument in ``dtype``.

    For losses and score heads: a bf16 score keeps 8 significant bits, so about 13 of 100 TREC DL candidates tie.
    Heads pass their weights' dtype: float32 under autocast, the model's own when a user cast it as a whole."""
    tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
    device = tensors[0].device if tensors else torch.device("cpu")
    with autocast_off(device):
        return fn(*(as_dtype(a, dtype) for a in args), **{key: as_dtype(v, dtype) for key, v in kwargs.items()})


def in_float32(fn: Callable[..., T], *args, **kwargs) -> T:
    """:func:`in_dtype` in float32: what every loss computes in."""
    return in_dtype(torch.float32, fn, *args, **kwargs)


def capturing_cuda_graph() -> bool:
    """A CUDA graph is being captured on this stream, where a host sync (``.item()``) would fail."""
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()
