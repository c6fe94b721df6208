"""``pyterrier-tite doctor``: the environment report users paste into bug reports."""

from __future__ import annotations

import os
import subprocess
import sys

import torch

from pyterrier_tite.cli import main
from pyterrier_tite.ops import _extension


def report_lines(capsys) -> dict[str, str]:
    assert main(["doctor"]) == 0
    lines = capsys.readouterr().out.splitlines()
    return dict(line.strip().split(": ", 1) for line in lines if line.startswith("  "))


def test_doctor_reports_versions_kernels_cpu_and_caches(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("PYTERRIER_TITE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PYTERRIER_TITE_BACKEND_DROPOUT", "torch")
    report = report_lines(capsys)
    assert report["torch"] == torch.__version__ and report["pyterrier-tite"] == "0.1.0"
    for name in ("transformers", "pyterrier", "pyterrier_dr", "pyterrier_pisa", "ir_datasets"):
        assert report[name][0].isdigit(), (name, report[name])
    assert report["CPU kernels"] == "compiled"  # the kernels this checkout's tests run on
    assert report["window_attention"].startswith("cpu -> csrc-cpu (available: csrc-cpu")
    assert report["dropout"].startswith("cpu -> torch")  # the chosen backend follows the user's override
    assert report["int8_rows"].startswith("cpu -> csrc-cpu")
    assert {report[k] for k in ("native bf16", "VNNI (int8)", "AMX")} <= {"yes", "no"}
    assert report["PYTERRIER_TITE_HOME"] == str(tmp_path / "home")
    assert report["compiled kernels"] == _extension.build_folder(_extension.sources())
    assert report["PyTerrier artifacts"].endswith("artifacts") and report["HF_HOME"]


NO_COMPILER = "from pyterrier_tite.cli import main; main(['doctor'])"


def test_doctor_says_when_the_kernels_could_not_be_compiled(tmp_path):
    env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(tmp_path), "CXX": str(tmp_path / "no-such-c++")}
    done = subprocess.run([sys.executable, "-c", NO_COMPILER], capture_output=True, text=True, check=True, env=env)
    assert "CPU kernels: NOT compiled" in done.stdout and "window_attention: cpu -> torch" in done.stdout
    assert f"compiled kernels: {tmp_path}" in done.stdout
    assert "no C++ compiler" in done.stderr
