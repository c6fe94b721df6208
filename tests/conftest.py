"""Shared fixtures: real data from IR_DATASETS_HOME (a missing mirror FAILS under CI=true instead of skipping)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

#: the offline Hugging Face cache of hub-layout fixtures: an ``HF_HOME`` already set that holds them (``expected/``),
#: else ``../shared/hub`` beside the checkout; set before transformers is imported. Without them the tests that need
#: them skip (fail under CI=true: ``_hub.require_fixtures``) and the summary says how many
HUB_FIXTURES = Path(os.environ.get("HF_HOME", ""))
if not os.environ.get("HF_HOME") or not (HUB_FIXTURES / "expected").is_dir():
    HUB_FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "hub"
if (HUB_FIXTURES / "expected").is_dir():
    os.environ["HF_HOME"] = str(HUB_FIXTURES)
    os.environ.pop("HF_HUB_CACHE", None)
    os.environ["HF_HUB_OFFLINE"] = "1"
#: what a test that needs the hub fixtures skips with (counted in the terminal summary)
NO_HUB_FIXTURES = f"hub fixtures not found (neither HF_HOME nor {HUB_FIXTURES} holds expected/)"


def pytest_configure(config) -> None:
    """Under pytest-xdist (``scripts/test.sh`` runs one worker per core, at most 4), each worker gets its share of the
    cores as torch threads, and so do the processes its tests start (``OMP_NUM_THREADS``, unless set): workers x
    threads stays at the core count (OpenMP threads beyond the cores spin-wait)."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        import torch

        share = max(1, len(os.sched_getaffinity(0)) // workers)
        os.environ.setdefault("OMP_NUM_THREADS", str(share))
        torch.set_num_threads(share)


#: the longest test files (``--durations`` of a fresh clone's run, seconds on one of 2 workers), started first: with
#: ``--dist loadfile --no-loadscope-reorder`` (scripts/test.sh) files go to the workers in collection order, longest
#: first, and the many short files fill in at the end; xdist's own reorder (most tests first) started these last
LONGEST_FILES = (
    "tests/test_install.py",  # 240 s: a fresh virtualenv, the kernels compiled on one core
    "tests/test_readme.py",  # 150 s
    "tests/test_package.py",  # 110 s
    "tests/test_notebooks.py",  # 100 s
    "tests/test_notebooks_training.py",  # 90 s (180 s while the notebooks ran 2 threads on a worker's 1 core)
    "tests/test_cli_batch.py",  # 80 s
    "experiments/splade_from_scratch/test_smoke.py",  # 45 s
    "experiments/aggretriever_vs_cls/test_smoke.py",  # 45 s
)


def pytest_collection_modifyitems(session, config, items) -> None:
    """The files of :data:`LONGEST_FILES` first, in that order, then the other files with slow tests, then the rest;
    each file's tests keep their order (a stable sort)."""
    slow_files = {item.nodeid.split("::")[0] for item in items if item.get_closest_marker("slow")}

    def rank(item) -> int:
        path = item.nodeid.split("::")[0]
        return LONGEST_FILES.index(path) if path in LONGEST_FILES else len(LONGEST_FILES) + (path not in slow_files)

    items.sort(key=rank)


def pytest_terminal_summary(terminalreporter) -> None:
    """A run that skipped tests for want of the hub fixtures says so beside the counts, not only under ``-rs``."""
    skipped = [r for r in terminalreporter.stats.get("skipped", []) if NO_HUB_FIXTURES in str(r.longrepr)]
    if skipped:
        terminalreporter.write_line(
            f"{len(skipped)} tests skipped: {NO_HUB_FIXTURES}; point HF_HOME at them", yellow=True, bold=True
        )


def _data_available() -> bool:
    home = os.environ.get("IR_DATASETS_HOME")
    return bool(home) and os.path.isdir(os.path.join(home, "vaswani"))


@pytest.fixture(scope="session")
def irds_home() -> str:
    """The ir_datasets mirror; tests that need real data take this fixture."""
    if not _data_available():
        message = "IR_DATASETS_HOME does not point at the offline ir_datasets mirror (see ../shared/DATA.md)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI run without data: {message}")
        pytest.skip(message)
    return os.environ["IR_DATASETS_HOME"]


@pytest.fixture(scope="session")
def tite_cache(tmp_path_factory) -> str:
    """A per-session cache for built indexes, so tests never touch the user's cache.

    One fixed folder under the session's base temp, not ``mktemp``: ``experiments/conftest.py`` imports this
    fixture, which makes it a second fixture with its own instance, and a numbered ``tite_cache1`` from there
    used to replace the environment variable under the tests that held ``tite_cache0``."""
    folder = tmp_path_factory.getbasetemp() / "tite_cache"
    folder.mkdir(exist_ok=True)
    path = str(folder)
    os.environ["PYTERRIER_TITE_HOME"] = path
    return path


@pytest.fixture(autouse=True)
def _seeded():
    """Every test starts from the same global random state, whichever tests ran before it in its worker: an unseeded
    draw (a test's random gradient) otherwise changed with the order xdist gave the tests, and a tolerance that one
    draw in a hundred exceeded failed only now and then."""
    import random

    import numpy as np
    import torch

    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _torch_threads_restored():
    """A test that calls ``torch.set_num_threads`` leaves the count as it found it: without this, one test's
    ``set_num_threads(1)`` silently ran every later test of the session on one core."""
    import torch

    threads = torch.get_num_threads()
    yield
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def single_thread():
    """Tiny models and tensors: one torch thread is fastest and stays fast on a shared CPU (no OpenMP spin-waits).
    Modules opt in with ``pytestmark = pytest.mark.usefixtures("single_thread")``; kernel tests keep all threads."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
