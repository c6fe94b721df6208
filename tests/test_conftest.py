"""The shared fixtures keep tests independent: a test that changes torch's thread count does not change it for the
tests after it (the two tests below run in file order)."""

from __future__ import annotations

import torch

_seen: dict[str, int] = {}


def test_a_test_may_change_the_thread_count():
    _seen["before"] = torch.get_num_threads()
    torch.set_num_threads(1 if _seen["before"] != 1 else 2)


def test_the_next_test_finds_the_count_restored():
    assert "before" in _seen, "run the module as a whole: the previous test sets the count"
    assert torch.get_num_threads() == _seen["before"]


def test_two_conftests_importing_the_cache_fixture_share_one_folder(pytester):
    """``experiments/conftest.py`` imports ``tite_cache``, which gives a second fixture with its own session instance.
    A test that holds the first folder must still find ``PYTERRIER_TITE_HOME`` naming it after the second was built
    (it once named ``tite_cache1`` under a test holding ``tite_cache0``, and the BM25 cache test failed in CI)."""
    check = "import os\n\ndef test_{}(tite_cache):\n    assert os.environ['PYTERRIER_TITE_HOME'] == tite_cache\n"
    pytester.makeconftest("from tests.conftest import tite_cache  # noqa: F401\n")
    pytester.makepyfile(test_1=check.format("first"), test_3=check.format("again"))
    second = pytester.mkpydir("test_2")
    (second / "conftest.py").write_text("from tests.conftest import tite_cache  # noqa: F401\n")
    (second / "test_second.py").write_text(check.format("second"))
    result = pytester.runpytest_inprocess("-p", "no:randomly", "-p", "no:xdist", "-v")
    result.assert_outcomes(passed=3)
    order = [line.split("::")[0] for line in result.outlines if "PASSED" in line]
    assert order == ["test_1.py", "test_2/test_second.py", "test_3.py"], order  # the order that failed


def test_the_hub_fixtures_come_from_hf_home_and_their_absence_is_in_the_summary(pytester, monkeypatch):
    """Outside a checkout with ``../shared/hub`` and without ``HF_HOME`` holding the fixtures, the tests that need
    them skip and the summary says how many (it once read "4 passed, 20 skipped", exit 0); an ``HF_HOME`` that holds
    them is used (``conftest.py`` once replaced it by ``../shared/hub``)."""
    from pathlib import Path

    for name in ("conftest.py", "_hub.py"):
        (pytester.path / name).write_text((Path(__file__).parent / name).read_text(encoding="utf-8"))
    pytester.makepyfile(test_needs_hub="""
        import pytest
        from _hub import require_fixtures

        @pytest.fixture(autouse=True)
        def _torch_threads_restored():  # conftest's imports torch: seconds this test does not need
            yield

        def test_x():
            require_fixtures()
    """)
    monkeypatch.delenv("HF_HOME", raising=False)
    monkeypatch.delenv("CI", raising=False)
    result = pytester.runpytest_subprocess("-p", "no:xdist", "-p", "no:cacheprovider")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["1 tests skipped: hub fixtures not found (neither HF_HOME nor *"])
    (pytester.path / "hf" / "expected").mkdir(parents=True)
    monkeypatch.setenv("HF_HOME", str(pytester.path / "hf"))
    monkeypatch.setenv("CI", "true")  # where a missing fixture set fails
    pytester.runpytest_subprocess("-p", "no:xdist", "-p", "no:cacheprovider").assert_outcomes(passed=1)
