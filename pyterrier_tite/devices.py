"""Where models run by default: the GPU when there is one, else the CPU."""

from __future__ import annotations

import torch


def default_device(device: str | torch.device | None = None) -> torch.device:
    """``device`` when given, else ``cuda`` if available, else ``cpu``."""
    return torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
