"""The training notebooks (SPLADE from scratch, Aggretriever and dense) run top to bottom in quick mode; a file of
their own so that they run on another pytest-xdist worker than the other notebooks (``--dist loadfile``)."""

from __future__ import annotations

import pytest
from _notebook_run import NOTEBOOKS, TRAINING, run_in_quick_mode


@pytest.mark.slow
@pytest.mark.parametrize("path", [p for p in NOTEBOOKS if p.stem in TRAINING], ids=lambda p: p.stem)
def test_notebook_runs_in_quick_mode(path, irds_home, tite_cache, monkeypatch, tmp_path):
    run_in_quick_mode(path, monkeypatch, tmp_path)


def test_the_training_notebooks_exist():
    assert {p.stem for p in NOTEBOOKS} >= set(TRAINING)
