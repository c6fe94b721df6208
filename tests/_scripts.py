"""Import a script of ``examples/`` or ``benchmarks/`` as a module, so tests can call its functions."""

from __future__ import annotations

import importlib.util
import os
import sys
from types import ModuleType

ROOT = os.path.join(os.path.dirname(__file__), "..")


def load_script(relative_path: str) -> ModuleType:
    """``load_script("benchmarks/passages.py")``; registered in ``sys.modules`` (dataclasses look it up)."""
    name = os.path.splitext(os.path.basename(relative_path))[0]
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, relative_path))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
