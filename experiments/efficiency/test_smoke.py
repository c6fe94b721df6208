"""The efficiency study's own scripts, smoke-tested on tiny sizes."""

from __future__ import annotations

import pytest

from pyterrier_tite.cpu_allocator import _glibc


@pytest.mark.skipif(_glibc() is None, reason="the C library is not glibc")
def test_allocator_benchmark_runs_both_allocators_for_every_case(capsys):
    """``cpu_allocator`` (smoke): one row per case, each from two processes in which the switch was off and on as
    asked (the script refuses to print a row otherwise)."""
    from experiments.efficiency import cpu_allocator as bench

    assert bench.main(["--quick", "--repeats", "1", "--threads", "1"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ") and "x |" in line]
    assert len(rows) == len(bench.CASES) and all(float(r.split("|")[5].strip().rstrip("x")) > 0 for r in rows)
