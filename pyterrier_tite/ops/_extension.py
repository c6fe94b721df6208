"""Loading of the compiled extension ``pyterrier_tite._C`` and the registry of kernel backends.

The package must work without the extension (pure-torch reference ops), so a failed import is reported once as a
warning and every dispatcher falls back to the reference.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import warnings
from collections.abc import Callable

import torch

_BACKEND_ENV = "PYTERRIER_TITE_BACKEND"


@functools.cache
def extension():
    """The compiled module, or None (with one warning) when it is not built."""
    try:
        from pyterrier_tite import _C  # noqa: F401  (importing registers torch.ops.tite.*)
    except ImportError as exc:
        warnings.warn(
            f"pyterrier_tite: compiled extension not available ({exc}); using the pure-torch reference ops. "
            "Build it with `pip install --no-build-isolation -e .`.",
            stacklevel=2,
        )
        return None
    return _C


def has_csrc(device: torch.device | str = "cpu") -> bool:
    """Whether the compiled kernels exist for ``device``."""
    ext = extension()
    if ext is None:
        return False
    return torch.device(device).type == "cpu"


@functools.cache
def has_triton() -> bool:
    """Triton kernels run on CUDA devices, or anywhere under ``TRITON_INTERPRET=1``."""
    if importlib.util.find_spec("triton") is None:
        return False
    return torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1"


# op name -> list of (backend name, availability check)
_REGISTRY: dict[str, list[tuple[str, Callable[[], bool]]]] = {}


def register_backends(op: str, backends: list[tuple[str, Callable[[], bool]]]) -> None:
    """Declare the backends of an op, most preferred first; the reference ('torch') should come last."""
    _REGISTRY[op] = backends


def backends() -> dict[str, list[str]]:
    """The backends available on this machine for every op, most preferred first.

    ``csrc-cpu`` are the compiled CPU kernels, ``triton`` the Triton kernels, ``torch`` the reference.
    """
    return {op: [name for name, available in entries if available()] for op, entries in _REGISTRY.items()}


def choose_backend(op: str, device: torch.device, requested: str | None) -> str:
    """The backend to run ``op`` on ``device``: ``requested``, else $PYTERRIER_TITE_BACKEND_<OP> (e.g.
    ``PYTERRIER_TITE_BACKEND_DROPOUT=torch``: one op alone), else $PYTERRIER_TITE_BACKEND, else the fastest."""
    requested = requested or os.environ.get(f"{_BACKEND_ENV}_{op.upper()}") or os.environ.get(_BACKEND_ENV) or None
    candidates = [name for name, available in _REGISTRY[op] if available()]
    if requested is not None:
        if requested not in {name for name, _ in _REGISTRY[op]}:
            raise ValueError(f"unknown backend {requested!r} for {op}; known: {[n for n, _ in _REGISTRY[op]]}")
        if requested not in candidates:
            raise RuntimeError(f"backend {requested!r} for {op} is not available here (available: {candidates})")
        return requested
    for name in candidates:
        if _runs_on(name, device):
            return name
    return "torch"


def _runs_on(backend: str, device: torch.device) -> bool:
    if backend == "torch":
        return True
    if backend == "csrc-cpu":
        return device.type == "cpu"
    if backend == "triton":
        return device.type == "cuda"
    return False
