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
