"""The hub-layout fixtures (``../shared/hub``): repo ids, their inputs / expected outputs, and skipping (or failing
under CI) when the fixtures are absent. ``conftest.py`` points ``HF_HOME`` there before transformers is imported."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import HUB_FIXTURES, NO_HUB_FIXTURES

EXPECTED = HUB_FIXTURES / "expected"


def hub_repos() -> list[str]:
    """Every repo id with expected outputs (folder ``ORG--NAME`` -> ``ORG/NAME``); [] without the fixtures."""
    if not EXPECTED.is_dir():
        return []
    return sorted(p.name.replace("--", "/", 1) for p in EXPECTED.iterdir() if (p / "outputs.json").is_file())


def expected(repo: str) -> tuple[dict, dict]:
    """``(inputs, outputs)`` of a repo's fixture."""
    folder = EXPECTED / repo.replace("/", "--", 1)
    with open(folder / "inputs.json") as f, open(folder / "outputs.json") as g:
        return json.load(f), json.load(g)


def require_fixtures() -> None:
    """Skip the test without the hub fixtures (the summary counts these skips); fail under CI=true."""
    if not EXPECTED.is_dir():
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI run without the hub fixtures: {NO_HUB_FIXTURES}")
        pytest.skip(NO_HUB_FIXTURES)


def snapshot(repo: str) -> Path:
    """The snapshot folder of a fixture repo (for tests that need the files themselves)."""
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(repo, local_files_only=True))
