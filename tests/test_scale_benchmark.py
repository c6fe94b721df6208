"""``benchmarks/scale.py --quick`` runs end to end at 10,000 documents and writes its measurements (the full run's
figures, at 10k / 100k / 1M, are the study's data)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "scale.py"


@pytest.mark.slow
def test_scale_benchmark_quick(tmp_path):
    pytest.importorskip("faiss")
    pytest.importorskip("pyterrier_pisa")
    out = tmp_path / "scale.json"
    done = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--out", str(out)], capture_output=True, text=True,
                          timeout=900, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["sizes"] == [10_000]
    bm25, splade, dense = (report["rows"][system][0] for system in ("bm25", "splade", "dense"))
    assert bm25["docs"] == 10_000 and bm25["build_s"] > 0 and bm25["ms_per_query"] > 0
    assert splade["docs"] == 10_000 and splade["size_mb"] > 1 and splade["ms_per_query"] > 0
    assert 0.5 <= dense["hnsw_recall@10"] <= 1 and 0 < dense["ivf_recall@100"] <= 1
    assert report["ms_marco_8.8M"]["dense_size_gb"] > 10


def test_ms_marco_gpu_estimates_come_from_the_studys_h100_table():
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import scale
    finally:
        sys.path.remove(str(SCRIPT.parent))
    column = "docs/s, width 384, batch 512"
    study = {"tables": {"encode_h100": {"rows": [{"id": "tite-late", "values": {column: 44_210.0}},
                                                 {"id": "bert-hf-sdpa", "values": {column: None}}]}}}  # fmt: skip
    estimates = scale.gpu_encoding_minutes(study)
    assert list(estimates) == ["tite_late_encode_h100_min (encode_h100 table, 12 layers x 384)"]
    assert next(iter(estimates.values())) == pytest.approx(scale.MS_MARCO / 44_210.0 / 60)
    assert scale.gpu_encoding_minutes({"tables": {}}) == {}
    assert scale.estimate_label("tite_late_encode_h100_min (a note)").startswith("TITE-late")


def test_gpu_script_runs_on_a_cpu_and_writes_its_own_tables(tmp_path):
    """``benchmarks/scale_gpu.py`` end to end at tiny sizes (``--device cpu``: the GPU run's code path, no GPU), then
    its tables and one page row into a study, next to the CPU scale rows it must keep."""
    pytest.importorskip("pyterrier_dr")
    out, study = tmp_path / "gpu.json", tmp_path / "results.json"
    study.write_text(json.dumps({"tables": {"passages_h200": {}}, "efficiency": [{"table": "scale", "what": "cpu"}]}))
    command = [sys.executable, str(SCRIPT.parent / "scale_gpu.py"), "--device", "cpu", "--sizes", "300", "1000",
               "--encode-sample", "4", "--encode-batch", "4", "--out", str(out),
               "--into-results", str(study)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert [r["docs"] for r in report["rows"]["dense"]] == [300, 1000]
    assert all(r["exact_ms_per_query"] > 0 and "hnsw_ms_per_query" not in r for r in report["rows"]["dense"])
    written = json.loads(study.read_text())
    rows = {row["id"] for row in written["tables"]["scale_gpu"]["rows"]}
    assert rows == {"dense-exact-300", "dense-exact-1000"}
    encode = {row["id"] for row in written["tables"]["scale_gpu_encode"]["rows"]}
    assert encode == {"tite-encode", "splade-encode", "splade-toks-encode"}  # toks: the rate the PISA writer sees
    assert [e["table"] for e in written["efficiency"]] == ["scale", "scale_gpu"]
    cells = written["efficiency"][-1]["cells"]
    assert cells[0] == ["monoce-bf16", "speed-up, batch 256", "passages_h200"] and cells[2][0] == "dense-exact-1000"
