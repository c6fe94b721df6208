"""Keep glibc's heap for the large, short-lived tensors of CPU training.

glibc maps each allocation above its mmap threshold afresh and unmaps it when freed, so every CPU training step pays
the kernel for zeroing those pages again (half an Aggretriever step's wall time on a 2-core machine). Raised mmap and
trim thresholds keep freed blocks in the heap, at the price of a resident size near the step's peak.
``PYTERRIER_TITE_KEEP_HEAP=0`` turns it off; elsewhere than glibc nothing changes."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os

#: ``mallopt`` parameters (malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
#: blocks up to this size are kept in the heap when freed; larger ones (rare) are still mapped and unmapped
MMAP_THRESHOLD = 1 << 30
#: free memory at the top of the heap is returned to the system only above this
TRIM_THRESHOLD = 2 << 30
ENV = "PYTERRIER_TITE_KEEP_HEAP"


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6")
    except OSError:
        return None
    return libc if hasattr(libc, "gnu_get_libc_version") and hasattr(libc, "mallopt") else None


def keep_large_blocks() -> bool:
    """Raise glibc's mmap and trim thresholds for this process (idempotent); True when they were set."""
    if os.environ.get(ENV, "1").strip().lower() in ("0", "false", "no", "off"):
        return False
    libc = _glibc()
    if libc is None:
        return False
    mmap_set = libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    return bool(mmap_set) and bool(libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
