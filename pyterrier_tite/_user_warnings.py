"""Warnings that point at the user's line: the first frame outside this package (and the standard library's
``contextlib``, which the loaders' warning collectors run in), not the line inside the package that raised it."""

from __future__ import annotations

import os
import sys
import warnings

_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep
_PASS_THROUGH = (_PACKAGE, os.path.join(os.path.dirname(os.__file__), "contextlib.py"))


def warn_user(message: str, category: type[Warning] = UserWarning) -> None:
    """``warnings.warn`` attributed to the first frame outside the package."""
    frame, level = sys._getframe(1), 2  # our caller is level 2 for the warn call
    while frame is not None and frame.f_code.co_filename.startswith(_PASS_THROUGH):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)
