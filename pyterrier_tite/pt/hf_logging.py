"""Silencing transformers' load reports where a mismatch is expected (e.g. a checkpoint's pooler that a bi-encoder
does not use), so users see only the reports that mean something."""

from __future__ import annotations

import warnings
from collections.abc import Sequence

from pyterrier_tite.convert.checkpoint import quiet_transformers

__all__ = ["quiet_transformers", "warn_about_loading"]


def warn_about_loading(path: str, info: dict, expected_unexpected: Sequence[str] = ()) -> None:
    """Re-raise, as one warning, what a quietened ``from_pretrained(..., output_loading_info=True)`` found wrong:
    missing or mismatched weights, and unexpected ones except those under the ``expected_unexpected`` prefixes."""
    unexpected = sorted(k for k in info.get("unexpected_keys", ()) if not k.startswith(tuple(expected_unexpected)))
    problems = {
        "missing (newly initialised)": sorted(info.get("missing_keys", ())),
        "unexpected (ignored)": unexpected,
        "mismatched shapes": sorted(str(k) for k in info.get("mismatched_keys", ())),
    }
    found = "; ".join(f"{what}: {', '.join(keys[:5])}{' ...' if len(keys) > 5 else ''}"
                      for what, keys in problems.items() if keys)  # fmt: skip
    if found:
        warnings.warn(f"loading {path}: {found}", stacklevel=3)
