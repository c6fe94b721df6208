"""The notebooks under ``notebooks/``: committed with clean outputs, in sync with their sources, and each one runs top
to bottom in quick mode (``PYTERRIER_TITE_QUICK=1``), so a broken notebook fails CI.

Quick mode still trains tiny models and builds indexes (about 20 s to 2.5 min per notebook on 2 cores): slow tests.
"""

from __future__ import annotations

import re

import pytest
from _notebook_run import NOTEBOOKS, ROOT, TRAINING, outputs_text, run_in_quick_mode

#: absolute paths of a machine must not reach committed outputs
ABSOLUTE = re.compile(r"(/work/|/root/|/home/|/tmp/|/private/|/Users/)")


def test_every_notebook_has_a_source():
    sources = {p.stem for p in (ROOT / "notebooks" / "src").glob("[0-9][0-9]_*.py")}
    assert sources == {p.stem for p in NOTEBOOKS}
    assert len(NOTEBOOKS) >= 6


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_committed_outputs_are_clean(path):
    """Executed (every code cell has run), no errors, tracebacks, warnings or absolute paths in the outputs."""
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(c.execution_count is not None for c in code), f"{path.name} is not executed"
    assert any(o.get("output_type") == "display_data" and "image/png" in o.get("data", {}) for c in code
               for o in c.outputs) or path.stem.startswith("06"), f"{path.name} has no plot"  # fmt: skip
    for number, cell in enumerate(code):
        for output in cell.outputs:
            text = outputs_text(output)
            assert output.get("output_type") != "error", f"{path.name} code cell {number}: {output.get('evalue')}"
            assert "Traceback (most recent call last)" not in text, f"{path.name} code cell {number}: traceback"
            assert not (output.get("output_type") == "stream" and output.get("name") == "stderr"), (
                f"{path.name} code cell {number} writes to stderr: {text[:200]!r}"
            )
            match = ABSOLUTE.search(text)
            assert match is None, f"{path.name} code cell {number}: absolute path ...{text[match.start() :][:80]!r}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_matches_its_source(path):
    """The committed notebook was built from ``notebooks/src/<name>.py`` (``python notebooks/build_notebooks.py``)."""
    jupytext = pytest.importorskip("jupytext")
    nbformat = pytest.importorskip("nbformat")
    source = jupytext.read(ROOT / "notebooks" / "src" / f"{path.stem}.py")
    committed = nbformat.read(path, as_version=4)
    want = [(c.cell_type, c.source.strip()) for c in source.cells]
    got = [(c.cell_type, c.source.strip()) for c in committed.cells]
    assert got == want, f"{path.name} is out of date: run python notebooks/build_notebooks.py {path.stem[:2]}"


@pytest.mark.slow
@pytest.mark.parametrize("path", [p for p in NOTEBOOKS if p.stem not in TRAINING], ids=lambda p: p.stem)
def test_notebook_runs_in_quick_mode(path, irds_home, tite_cache, monkeypatch, tmp_path):
    """Top to bottom in quick mode (the training notebooks: ``test_notebooks_training.py``)."""
    run_in_quick_mode(path, monkeypatch, tmp_path)


@pytest.mark.parametrize("path", sorted((ROOT / "notebooks" / "src").glob("[0-9][0-9]_*.py")), ids=lambda p: p.stem)
def test_notebook_runs_on_the_installed_package(path):
    """A notebook imports the package, not the checkout's folders, and takes data locations from the environment
    (IR_DATASETS_HOME, HF_HOME), never a path beside this repository."""
    source = path.read_text()
    for pattern in ("sys.path.insert", "../benchmarks", "shared/hub", "shared/ir_datasets", 'os.environ["HF_HOME"]'):
        assert pattern not in source, f"{path.name} depends on the checkout: {pattern}"
