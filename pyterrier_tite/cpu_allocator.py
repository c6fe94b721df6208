"""Keep glibc's heap for the large, short-lived tensors of CPU training.

glibc serves every allocation above its mmap threshold (at most 32 MB by default) with a fresh ``mmap`` and gives it
back with ``munmap`` when freed. A CPU training step allocates and frees many such tensors (activations, their
gradients, an MLM's ``[batch, length, vocabulary]`` distributions), so each step pays the kernel for zeroing those pages
again: on the 2-core machine of docs/results.md that was half the wall time of an Aggretriever step. Raising the mmap
threshold (and the trim threshold with it) makes freed blocks stay in the heap for the next step; the price is a
resident size that stays near the step's peak while the process lives. ``experiments/efficiency/cpu_allocator.py``
measures it.

The ``pyterrier-tite`` command and the training loop on the CPU apply this (:func:`keep_large_blocks`);
``PYTERRIER_TITE_KEEP_HEAP=0`` turns it off. Elsewhere than glibc (musl, macOS, Windows) nothing changes.
"""

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
    """Raise glibc's mmap and trim thresholds for this process (idempotent); True when they were set.

    False when ``PYTERRIER_TITE_KEEP_HEAP=0``, when the C library is not glibc, or when glibc refused a value."""
    if os.environ.get(ENV, "1").strip().lower() in ("0", "false", "no", "off"):
        return False
    libc = _glibc()
    if libc is None:
        return False
    mmap_set = libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    return bool(mmap_set) and bool(libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
