"""The package as a user installs it: the sdist and the wheel built as pip builds them (isolated), the wheel installed
with pip's defaults into a fresh virtualenv holding only torch, and used from outside the checkout: the CPU kernels
load the kernels compiled for that torch (compiled on first use, or found in the cache under the same key) and a saved
model scores as it does here."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
import torch
from _tolerance import assert_float_close

ROOT = Path(__file__).resolve().parents[1]
TORCH = os.environ.get("PYTERRIER_TITE_INSTALL_TORCH", "torch==2.13.0")  # the CPU build on this machine's disk
#: what a checkout has that no package carries (and what only a developer's machine has)
NOT_SHIPPED = ("tests", "experiments", "notebooks", "benchmarks", "examples", "docs", "scripts", "runs")
FRAME = {"qid": ["1"] * 3, "query": ["neural ranking"] * 3, "docno": ["a", "b", "c"],
         "text": ["sparse attention over passages", "a dense index", "ranking with neural models"]}  # fmt: skip

USER = """
import json, sys, time
import pandas as pd
import torch
start = time.time()
import pyterrier_tite as t
from pyterrier_tite.ops import _extension
compiled = t.ops.extension()
first_kernel = time.time() - start
scores = t.SparseCE(sys.argv[1])(pd.DataFrame(json.loads(sys.argv[2]))).sort_values("docno")["score"].tolist()
print(json.dumps({"module": getattr(compiled, "__file__", None), "first_kernel_s": round(first_kernel, 1),
                  "window_attention": _extension.choose_backend("window_attention", torch.device("cpu"), None),
                  "torch": torch.__version__, "package": t.__file__, "scores": scores}))
"""


def run(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run(command, capture_output=True, text=True, **kwargs)
    assert done.returncode == 0, f"{' '.join(map(str, command))} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.mark.slow
def test_wheel_installs_with_pips_defaults_and_compiles_its_kernels_for_the_torch_at_hand(tmp_path):
    pytest.importorskip("build")
    source = tmp_path / "checkout"
    unpacked = (".venv", ".git", "runs", "build", "dist", "*.egg-info", "__pycache__", "*.so", ".*_cache", "cache")
    shutil.copytree(ROOT, source, symlinks=True, ignore=shutil.ignore_patterns(*unpacked))
    run([sys.executable, "-m", "build", "--outdir", str(tmp_path / "dist"), str(source)])  # sdist, wheel from it
    (sdist,), (wheel,) = (tmp_path / "dist").glob("*.tar.gz"), (tmp_path / "dist").glob("*.whl")
    shipped = zipfile.ZipFile(wheel).namelist()
    assert wheel.name.endswith("-py3-none-any.whl")  # pure Python: nothing compiled at install
    assert {Path(n).name for n in shipped if n.startswith("pyterrier_tite/csrc/")} >= {"module.cpp", "window_simd.h"}
    assert not [n for n in shipped if n.split("/")[0] in NOT_SHIPPED or n.endswith((".so", ".ipynb", ".png"))]
    assert any(n.endswith("/csrc/module.cpp") for n in tarfile.open(sdist).getnames())

    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", str(venv)])
    python = str(venv / "bin" / "python")
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env.update(PATH="/usr/local/bin:/usr/bin:/bin", TORCH_EXTENSIONS_DIR=str(tmp_path / "kernels"), MAX_JOBS="1")
    pip = run([python, "-m", "pip", "--version"], env=env).stdout.split(" from ")[0]
    run([python, "-m", "pip", "install", TORCH], env=env)
    run([python, "-m", "pip", "install", str(wheel)], env=env)  # pip's defaults: no flags

    reused = reuse_compiled_kernels(tmp_path / "kernels")
    model = tmp_path / "model"
    expected = saved_model_scores(tmp_path, model)
    users = [subprocess.Popen([python, "-c", USER, str(model), json.dumps(FRAME)], cwd=tmp_path, env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)]  # fmt: skip
    outputs = [user.communicate(timeout=900) for user in users]
    for user, (_, err) in zip(users, outputs, strict=True):
        assert user.returncode == 0, err[-3000:]
    reports = [json.loads(out.strip().splitlines()[-1]) for out, _ in outputs]
    print(f"\n{pip}; {TORCH}; wheel {wheel.name}; " + "; ".join(
        f"torch {r['torch']}: first kernel call after {r['first_kernel_s']} s" for r in reports))  # fmt: skip
    compiled = sum("compiling the CPU kernels" in err for _, err in outputs)  # once, or reused: same sources, torch
    assert compiled == (0 if reused else 1), [err for _, err in outputs]
    for report in reports:
        assert report["package"].startswith(str(venv))  # the installed package, not the checkout
        assert report["module"] and report["module"].startswith(str(tmp_path / "kernels"))
        assert report["window_attention"] == "csrc-cpu"
        assert_float_close(report["scores"], expected, dtype=torch.float32)


def reuse_compiled_kernels(cache: Path) -> bool:
    """The kernels this checkout compiled for the same torch, copied into the fresh install's ``cache``: the wheel
    carries the same sources, so it finds them under the same key and compiles nothing (the compile itself runs in
    ``scripts/setup-env.sh`` of every fresh machine, and ``test_package.py`` pins one compile for two processes).
    ``PYTERRIER_TITE_INSTALL_COMPILE=1`` (or another torch) compiles afresh: about 2.5 minutes on one core."""
    from pyterrier_tite.ops import _extension

    if os.environ.get("PYTERRIER_TITE_INSTALL_COMPILE") == "1" or TORCH != f"torch=={torch.__version__}".split("+")[0]:
        return False
    if _extension.extension() is None:
        return False
    built = _extension.build_folder(_extension.sources())
    shutil.copytree(built, cache / os.path.basename(built))
    return True


def saved_model_scores(tmp_path: Path, folder: Path) -> list[float]:
    """A tiny sparse cross-encoder saved into ``folder``, and its scores here (the checkout's package)."""
    import warnings

    import pandas as pd
    from _tiny import save_tiny_bert

    import pyterrier_tite as t

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the fresh score head
        model = t.SparseCE(save_tiny_bert(tmp_path / "bert"), w=4)
    model.save_pretrained(str(folder))
    return t.SparseCE(str(folder))(pd.DataFrame(FRAME)).sort_values("docno")["score"].tolist()
