"""The compiled CPU kernels (``csrc/``) and the registry of kernel backends.

The C++ sources ship in the package and are compiled on first use for the torch at hand (cached per torch version, C++
ABI, Python and source hash); without a compiler one warning says so and every op falls back to the torch reference.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import platform
import shutil
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import torch

from pyterrier_tite._user_warnings import warn_user

_BACKEND_ENV = "PYTERRIER_TITE_BACKEND"
_NAME = "pyterrier_tite_C"  # the module csrc/module.cpp defines (TORCH_EXTENSION_NAME)
_FLAGS = ("-O3", "-fopenmp")  # the C++ standard is left to cpp_extension: the one the torch at hand needs
_LOADING = threading.Lock()


def sources() -> list[Path]:
    """The kernels' C++ sources (``*.cpp``, ``*.h``): ``pyterrier_tite/csrc`` of an installed wheel, else ``csrc/``
    of a checkout; empty when neither exists."""
    package = Path(__file__).resolve().parents[1]
    for folder in (package / "csrc", package.parent / "csrc"):
        if (folder / "module.cpp").is_file():
            return sorted(p for p in folder.iterdir() if p.suffix in (".cpp", ".h"))
    return []


def build_folder(sources: list[Path]) -> str:
    """The cache folder of the kernels compiled from ``sources`` for this torch, C++ ABI, Python and machine."""
    digest = hashlib.sha256(repr(_FLAGS).encode())
    for path in sources:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    abi = "cxx11abi" if torch.compiled_with_cxx11_abi() else "oldabi"
    key = f"pyterrier_tite-torch{torch.__version__}-{abi}-{sys.implementation.cache_tag}-{platform.machine()}"
    root = os.environ.get("TORCH_EXTENSIONS_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "torch_extensions"
    )
    return os.path.join(root, f"{key}-{digest.hexdigest()[:12]}".replace("+", "_"))


def extension() -> ModuleType | None:
    """The compiled kernels (compiled now if this torch has none yet), or None with one warning saying why."""
    with _LOADING:  # two threads asking at once: one loads, the other gets its module
        return _extension()


@functools.cache
def _extension() -> ModuleType | None:
    found = sources()
    if not found:
        return _unavailable("the package carries no csrc/ sources")
    target = build_folder(found)
    library = os.path.join(target, _NAME + ".so")
    if os.path.isfile(library):
        try:
            return _import(library)
        except ImportError as exc:  # a cache folder another machine wrote (a shared home)
            return _unavailable(f"{library} does not load: {exc}; remove its folder to compile them again")
    try:
        return _build([s for s in found if s.suffix == ".cpp"], target)
    except _NoToolchain as exc:
        return _unavailable(str(exc))
    except Exception as exc:  # a compile error: its output goes to a log, the warning names it
        log = target + ".log"
        try:
            os.makedirs(os.path.dirname(log), exist_ok=True)
            with open(log, "w", encoding="utf-8") as f:
                f.write(str(exc))
        except OSError:
            log = "not written"
        first = (str(exc).splitlines() or [type(exc).__name__])[0][:200]
        return _unavailable(f"compiling {found[0].parent} failed: {first}; compiler output: {log}")


class _NoToolchain(RuntimeError):
    """No C++ compiler or no ninja: nothing to compile with."""


def _build(cpp: list[Path], target: str) -> ModuleType:
    """Compile ``cpp`` into ``target`` under its lock (waiting for another process compiling them), all or nothing."""
    compiler = os.environ.get("CXX", "c++")
    if shutil.which(compiler) is None:
        raise _NoToolchain(f"no C++ compiler ({compiler}) found: install g++ or set CXX")
    if shutil.which("ninja") is None:
        try:
            import ninja  # the PyPI package; its binary is not on PATH when the virtualenv is not activated
        except ImportError:
            raise _NoToolchain("ninja is not installed: pip install ninja") from None
        os.environ["PATH"] = ninja.BIN_DIR + os.pathsep + os.environ.get("PATH", "")
    from pyterrier_tite.store.atomic import atomic_build
    from pyterrier_tite.store.cache import cache_lock

    with cache_lock(target) as to_build:
        if not to_build:  # compiled by another process while this one waited
            return _import(os.path.join(target, _NAME + ".so"))
        print(
            f"pyterrier_tite: compiling the CPU kernels for torch {torch.__version__} (once, about 2 minutes on 2 "
            f"cores) into {target}",
            file=sys.stderr,
            flush=True,
        )
        from torch.utils import cpp_extension

        with atomic_build(target) as staging:
            return cpp_extension.load(
                _NAME, [str(s) for s in cpp], extra_cflags=list(_FLAGS), extra_ldflags=["-fopenmp"],
                build_directory=str(staging),
            )  # fmt: skip


def _import(library: str) -> ModuleType:
    """The compiled module at ``library`` (importing it registers ``torch.ops.tite.*``; torch is imported first)."""
    spec = importlib.util.spec_from_file_location(_NAME, library)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _unavailable(reason: str) -> None:
    warn_user(f"pyterrier_tite: compiled CPU kernels not available ({reason}); using the pure-torch reference ops")
    return None


def has_csrc(device: torch.device | str = "cpu") -> bool:
    """Whether the compiled kernels exist for ``device``."""
    return torch.device(device).type == "cpu" and extension() is not None


@functools.cache
def has_triton() -> bool:
    """Triton kernels run on CUDA devices, or anywhere under ``TRITON_INTERPRET=1``."""
    if importlib.util.find_spec("triton") is None:
        return False
    return torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1"


# op name -> list of (backend name, availability check)
_REGISTRY: dict[str, list[tuple[str, Callable[[], bool]]]] = {}
#: the device type each compiled backend runs on ("torch" runs anywhere)
_RUNS_ON = {"csrc-cpu": "cpu", "triton": "cuda"}


def register_backends(op: str, backends: list[tuple[str, Callable[[], bool]]]) -> None:
    """Declare the backends of an op, most preferred first; the reference ('torch') should come last."""
    _REGISTRY[op] = backends


def backends() -> dict[str, list[str]]:
    """The backends available here for every op, most preferred first: ``csrc-cpu`` (compiled CPU kernels),
    ``triton``, ``torch`` (the reference)."""
    return {op: [name for name, available in entries if available()] for op, entries in _REGISTRY.items()}


def choose_backend(op: str, device: torch.device, requested: str | None) -> str:
    """The backend to run ``op`` on ``device``: ``requested``, else $PYTERRIER_TITE_BACKEND_<OP> (e.g.
    ``PYTERRIER_TITE_BACKEND_DROPOUT=torch``: one op alone), else $PYTERRIER_TITE_BACKEND, else the fastest."""
    requested = requested or os.environ.get(f"{_BACKEND_ENV}_{op.upper()}") or os.environ.get(_BACKEND_ENV) or None
    if requested == "torch":  # the reference: nothing to probe (nor to compile)
        return requested
    candidates = [name for name, available in _REGISTRY[op] if available()]
    if requested is not None:
        if requested not in {name for name, _ in _REGISTRY[op]}:
            raise ValueError(f"unknown backend {requested!r} for {op}; known: {[n for n, _ in _REGISTRY[op]]}")
        if requested not in candidates:
            raise RuntimeError(f"backend {requested!r} for {op} is not available here (available: {candidates})")
        return requested
    return next((name for name in candidates if name == "torch" or _RUNS_ON.get(name) == device.type), "torch")
