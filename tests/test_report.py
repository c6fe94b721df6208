"""docs/results.md is generated from the studies' data files (experiments/report.py): these tests keep the page, the
data and the study folders from drifting apart. Standard library only; no model or dataset is touched."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import shutil
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = ROOT / "experiments"
PAGE = ROOT / "docs" / "results.md"
STUDY_FILES = ("README.md", "config.toml", "command.txt", "results.json", "results.csv")


def load_report() -> ModuleType:
    """The script by its path: it is a standalone file, whatever ``experiments`` becomes as a package."""
    spec = importlib.util.spec_from_file_location("experiments_report", EXPERIMENTS / "report.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


report = load_report()


def study_folders(root: Path = EXPERIMENTS) -> list[Path]:
    """Folders that hold any study file (shared code such as experiments/common/ holds none)."""
    return sorted(
        p for p in root.iterdir()
        if p.is_dir() and not p.name.startswith((".", "_")) and any((p / f).exists() for f in STUDY_FILES)
    )  # fmt: skip


def copy_data(tmp_path: Path) -> Path:
    """The studies' data files, without code, in a folder of their own."""
    target = tmp_path / "experiments"
    shutil.copytree(EXPERIMENTS, target, ignore=shutil.ignore_patterns("*.py", "__pycache__", "common"))
    return target


def set_cell(folder: Path, study: str, table: str, row: str, column: str, value: object) -> None:
    path = folder / study / "results.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    rows = {r["id"]: r for r in data["tables"][table]["rows"]}
    rows[row]["values"][column] = value
    path.write_text(json.dumps(data, ensure_ascii=False, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def test_committed_page_is_what_the_data_gives(capsys: pytest.CaptureFixture[str]) -> None:
    assert report.main(["--check"]) == 0, "docs/results.md is stale: run `python experiments/report.py`"
    assert capsys.readouterr().err == ""


def test_no_line_of_the_page_is_a_lab_log() -> None:
    """The results page says answers: no line over MAX_LINE characters (the TITE claims cell had 4,734)."""
    text = PAGE.read_text(encoding="utf-8")
    assert max(len(line) for line in text.splitlines()) <= report.MAX_LINE == 1500
    with pytest.raises(report.DataError, match="at most 1500"):
        report.check_line_lengths("short\n" + "x" * 1501)


def test_page_is_at_most_200_lines_and_keeps_the_claims_anchor() -> None:
    text = PAGE.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    assert "## The papers' claims, as far as this machine can test them" in text  # README.md links its anchor
    assert report.slug(report.CLAIMS_TITLE) == "the-papers-claims-as-far-as-this-machine-can-test-them"


def test_a_changed_number_changes_the_page_and_fails_the_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = copy_data(tmp_path)
    page = tmp_path / "results.md"
    assert report.main(["--experiments", str(data), "--output", str(page)]) == 0
    before = page.read_text(encoding="utf-8")
    assert before == PAGE.read_text(encoding="utf-8")  # the copy renders the committed page
    assert "| vaswani | 0.4667 | 0.3053 |" in before

    set_cell(data, "baselines", "bm25", "vaswani", "AP", 0.3054)
    assert report.main(["--experiments", str(data), "--output", str(page), "--check"]) == 1
    message = capsys.readouterr().err.strip()
    assert "\n" not in message and "run `python experiments/report.py`" in message
    assert report.render(str(data)) != before
    assert "| vaswani | 0.4667 | 0.3054 |" in report.render(str(data))


def test_a_claim_whose_quoted_figure_changed_is_refused(tmp_path: Path) -> None:
    data = copy_data(tmp_path)
    set_cell(data, "aggretriever_vs_cls", "three_seeds", "scifact", "CLS", {"mean": 0.3431, "std": 0.0144})
    with pytest.raises(report.DataError, match="quotes"):
        report.render(str(data))
    assert report.main(["--experiments", str(data), "--output", str(tmp_path / "page.md")]) == 2


def test_every_study_has_a_readme_a_config_and_results() -> None:
    studies = study_folders()
    assert len(studies) >= 4
    for folder in studies:
        assert folder.name.isidentifier(), f"{folder.name}: `python -m experiments.{folder.name}` needs an identifier"
        readme = folder / "README.md"
        assert readme.exists(), f"{folder.name}: no README.md"
        assert len(readme.read_text(encoding="utf-8").splitlines()) <= 40, f"{folder.name}: README.md over 40 lines"
        assert (folder / "config.toml").exists() or (folder / "command.txt").exists(), f"{folder.name}: no config"
        assert (folder / "results.json").exists() or (folder / "results.csv").exists(), f"{folder.name}: no results"
        assert report.read_command(str(folder)), f"{folder.name}: its config names no command"


def test_results_files_are_written_with_sorted_keys() -> None:
    """One canonical layout, so that a rerun that changes nothing changes no byte."""
    for path in [EXPERIMENTS / "claims.json", *(f / "results.json" for f in study_folders())]:
        if path.exists():
            text = path.read_text(encoding="utf-8")
            assert text == json.dumps(json.loads(text), ensure_ascii=False, indent=1, sort_keys=True) + "\n", path


def test_every_table_cell_renders() -> None:
    """Every cell of every table is a kind the page can print (not only the cells the page shows)."""
    for name, study in report.load_studies(str(EXPERIMENTS)):
        for table_id, table in study["tables"].items():
            assert table["columns"], f"{name}/{table_id}"
            assert len({r["id"] for r in table["rows"]}) == len(table["rows"]), f"{name}/{table_id}: duplicate ids"
            for row in table["rows"]:
                assert set(row["values"]) <= set(table["columns"]), f"{name}/{table_id}/{row['id']}"
                for column, value in row["values"].items():
                    report.fmt_cell(value, report.cell_format(table, column, row))


def test_the_script_holds_no_numbers_of_its_own() -> None:
    """Every number on the page comes from the data: no string of report.py that can reach the page has a digit."""
    tree = ast.parse((EXPERIMENTS / "report.py").read_text(encoding="utf-8"))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef))
        and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)
    }  # fmt: skip
    helps = {id(k.value) for node in ast.walk(tree) if isinstance(node, ast.Call) for k in node.keywords
             if k.arg == "help"}  # fmt: skip
    strings = [
        node.value for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings | helps
    ]  # fmt: skip
    assert not [s for s in strings if any(c.isdigit() for c in s) and s != "utf-8"]


@pytest.mark.parametrize(
    ("value", "fmt", "text"),
    [
        (0.488, {"digits": 4}, "0.4880"),
        ({"mean": 0.7805, "std": 0.0059}, {"digits": 3}, "0.781 ± 0.006"),
        ({"diff": 0.127, "lo": 0.057, "hi": 0.198, "p": 7e-4}, {}, "+0.127 [+0.057, +0.198], p 7e-4"),
        ({"diff": -0.0}, {}, "\u22120.000"),
        ({"value": 0.7021, "p": 4.8e-08}, {}, "0.7021 (p 4.8e-8)"),
        ({"mean": 0.644, "std": 0.008, "mark": "\u25b2"}, {"digits": 3}, "0.644 ± 0.008\u25b2"),
        (1370.8, {"digits": 1, "thousands": True}, "1,370.8"),
        (2.68, {"digits": 2, "unit": "x"}, "2.68x"),
        (None, {}, "\u2013"),
    ],
)
def test_cell_formats(value: object, fmt: dict, text: str) -> None:
    """Fixed decimals rounded half up from the number as written; the page's minus sign; p-values shortest."""
    assert report.fmt_cell(value, {**report.DEFAULT_FORMAT, **fmt}) == text


def test_a_csv_study_renders_as_written(tmp_path: Path) -> None:
    study = tmp_path / "tiny_study"
    study.mkdir()
    (study / "README.md").write_text("# A tiny study\n", encoding="utf-8")
    (study / "command.txt").write_text("python -m experiments.tiny_study\n", encoding="utf-8")
    (study / "results.csv").write_text("run,nDCG@10\nBM25,0.4667\n", encoding="utf-8")
    text = report.render(str(tmp_path))
    assert "## A tiny study" in text and "| BM25 | 0.4667 |" in text
    assert "`python -m experiments.tiny_study`" in text
    assert os.path.basename(str(study)) in text


def test_an_efficiency_row_names_the_machine_of_every_table_it_quotes() -> None:
    """A row quoting cells of two tables measured on two machines names both, once each: the first table's machine
    alone would claim the second figure for a CPU it never ran on."""
    table = {"columns": ["x"], "rows": [{"id": "a", "label": "a", "values": {"x": 1.5}}]}
    study = {"title": "Speed", "tables": {
        "cpu": {**table, "machine": {"device": "an AVX2 CPU", "threads": 2}},
        "gpu": {**table, "machine": {"device": "a GPU"}},
        "gpu_2": {**table, "machine": {"device": "a GPU"}}},
        "efficiency": [{"what": "w", "table": "cpu", "cells": [["a", "x"], ["a", "x", "gpu"], ["a", "x", "gpu_2"]]}]}
    row = [line for line in report.efficiency_lines({"speed": study}, "speed") if line.startswith("| w |")]
    assert row and "| an AVX2 CPU, 2 threads / a GPU |" in row[0], row
