"""benchmarks/mixed_precision.py runs (smoke): it reports the CPU's bf16 features and one timing row per case."""

from __future__ import annotations

from _scripts import load_script


def test_benchmark_prints_features_and_every_case(capsys):
    bench = load_script("benchmarks/mixed_precision.py")
    assert bench.main(["--quick", "--repeats", "1", "--threads", "1"]) == 0
    out = capsys.readouterr().out
    assert "avx512_bf16" in out and "amx_bf16" in out
    rows = [line for line in out.splitlines() if line.startswith("| ") and "x |" in line]
    assert len(rows) == 4 and all(float(r.split("|")[-2].strip().rstrip("x")) > 0 for r in rows)
