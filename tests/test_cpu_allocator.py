"""glibc keeps large freed blocks in the heap once ``keep_large_blocks`` ran (so a training step's big tensors reuse
pages instead of mapping fresh ones), and the switch can be turned off."""

from __future__ import annotations

import subprocess
import sys

import pytest

from pyterrier_tite.cpu_allocator import _glibc, keep_large_blocks

needs_glibc = pytest.mark.skipif(_glibc() is None, reason="the C library is not glibc")

PROBE = """
import ctypes
from pyterrier_tite.cpu_allocator import _glibc, keep_large_blocks

class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]

libc = _glibc()
libc.mallinfo2.restype = MallInfo2
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]

def mapped_by(size):
    before = libc.mallinfo2().hblkhd
    block = libc.malloc(size)
    mapped = libc.mallinfo2().hblkhd - before
    libc.free(block)
    return mapped

size = 100 << 20
print(mapped_by(size) >= size, keep_large_blocks(), mapped_by(size))
"""


@needs_glibc
def test_large_blocks_come_from_the_heap_after_the_switch():
    if not hasattr(_glibc(), "mallinfo2"):
        pytest.skip("glibc older than 2.33 (no mallinfo2)")
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True", "0"]  # mapped by default; from the heap afterwards


@needs_glibc
def test_the_switch_can_be_turned_off(monkeypatch):
    monkeypatch.setenv("PYTERRIER_TITE_KEEP_HEAP", "0")
    assert keep_large_blocks() is False
    monkeypatch.setenv("PYTERRIER_TITE_KEEP_HEAP", "1")
    assert keep_large_blocks() is True
