"""``ir-metadata.yml`` of the TIREx commands: tirex-tracker's record (platform, resources, implementation, data) when
it is installed, completed with the run's tag and settings; the short hand-written record when it is not (its import
made to fail here). docs/tirex.md lists the fields of each."""

from __future__ import annotations

import sys

import pandas as pd
import pytest
import yaml

from pyterrier_tite.store.ir_metadata import render, tracked_run
from pyterrier_tite.store.tira import write_tirex_output

SETTINGS = {"task": "rerank", "model": "webis/x", "k": 10, "input": "in-folder"}
RESULTS = pd.DataFrame(
    {"qid": [q for q in "123" for _ in range(2)], "docno": ["a", "b"] * 3, "score": [2.0, 1.0] * 3}
)


def tracked_output(tmp_path) -> dict:
    with tracked_run("pyterrier-tite.x") as record:
        sum(range(100_000))  # the work measured
    write_tirex_output(RESULTS, tmp_path / "out", "pyterrier-tite.x", SETTINGS, record.tracked)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["ir-metadata.yml", "run.txt"]
    return yaml.safe_load((tmp_path / "out" / "ir-metadata.yml").read_text(encoding="utf-8"))


def test_with_tirex_tracker_the_record_is_the_trackers(tmp_path):
    pytest.importorskip("tirex_tracker")
    meta = tracked_output(tmp_path)
    assert {"platform", "resources", "implementation", "method", "data"} <= set(meta)
    assert meta["tag"] == "pyterrier-tite.x"
    assert {"wallclock", "start time", "stop time"} <= set(meta["resources"]["runtime"])
    assert "cpu" in meta["platform"]["hardware"] and "operating system" in meta["platform"]
    assert any(p.startswith("pyterrier") for p in meta["implementation"]["python"]["packages"])
    source = meta["implementation"]["source"]
    assert source["name"] == "pyterrier-tite" and "archive path" not in source  # the code archive stays behind
    assert {k: meta["method"][k] for k in SETTINGS} == SETTINGS and meta["method"]["name"] == "pyterrier-tite.x"
    assert meta["data"]["test collection"]["source"] == "in-folder"


def test_without_tirex_tracker_the_record_is_the_short_one(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tirex_tracker", None)  # `import tirex_tracker` raises ImportError
    meta = tracked_output(tmp_path)
    assert set(meta) == {"schema version", "tag", "date", "implementation", "platform", "method"}
    assert meta["tag"] == "pyterrier-tite.x" and meta["method"] == SETTINGS
    assert meta["implementation"]["source"]["name"] == "pyterrier-tite" and "python" in meta["platform"]


def test_a_tracker_that_cannot_start_falls_back_with_a_warning(monkeypatch):
    tracker = pytest.importorskip("tirex_tracker")

    def broken(**kwargs):
        raise RuntimeError("no native library for this platform")

    monkeypatch.setattr(tracker, "tracking", broken)
    with pytest.warns(UserWarning, match="tirex-tracker could not start"), tracked_run("s") as record:
        pass
    assert record.tracked is None and "schema version: '0.1'" in render("s", {"k": 1}, record.tracked)
