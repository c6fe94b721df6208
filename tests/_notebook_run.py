"""Running a notebook top to bottom in quick mode, shared by ``test_notebooks.py`` and ``test_notebooks_training.py``
(two files so that pytest-xdist's ``--dist loadfile`` can give the two training notebooks their own worker)."""

from __future__ import annotations

from pathlib import Path

import pytest
from _hub import require_fixtures
from conftest import HUB_FIXTURES

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
#: the notebooks that train models in quick mode (the longest to run)
TRAINING = ("04_splade_from_scratch", "05_aggretriever_and_dense")


def outputs_text(output: dict) -> str:
    parts = [output.get("text", "")]
    for mime, value in output.get("data", {}).items():
        if mime.startswith("text/"):
            parts.append(value if isinstance(value, str) else "".join(value))
    return "".join(p if isinstance(p, str) else "".join(p) for p in parts)


def run_in_quick_mode(path: Path, monkeypatch, tmp_path: Path) -> None:
    """Top to bottom in quick mode, with the kernel ``python3``, in a folder of its own outside the checkout (as a
    notebook copied elsewhere runs); no cell may fail or write to stderr (warnings included), and the notebook writes
    nothing but its own ``runs/`` there (no figures unless ``PYTERRIER_TITE_FIGURES`` asks, nothing beside)."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("matplotlib")
    if path.stem.startswith("06"):
        require_fixtures()
    monkeypatch.setenv("PYTERRIER_TITE_QUICK", "1")
    monkeypatch.setenv("HF_HOME", str(HUB_FIXTURES))  # 06 reads the hub-layout fixtures through the environment
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("PYTERRIER_TITE_FIGURES", raising=False)
    nb = nbformat.read(path, as_version=4)
    (tmp_path / "here").mkdir()
    client = nbclient.NotebookClient(
        nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(tmp_path / "here")}}
    )
    client.execute()
    written = {p.name for p in tmp_path.iterdir()} | {f"here/{p.name}" for p in (tmp_path / "here").iterdir()}
    assert written <= {"here", "here/runs"}, f"{path.name} wrote outside its own folder (runs/): {sorted(written)}"
    for number, cell in enumerate(c for c in nb.cells if c.cell_type == "code"):
        for output in cell.outputs:
            assert not (output.get("output_type") == "stream" and output.get("name") == "stderr"), (
                f"{path.name} code cell {number} writes to stderr: {outputs_text(output)[:300]!r}"
            )
