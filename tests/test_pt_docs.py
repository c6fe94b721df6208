"""``pyterrier_tite/pt_docs/``, the pages PyTerrier's documentation copies for its extensions list (it reads the
installed package's ``pt_docs`` folder): every page has API entries and a runnable example, every example runs
(offline, tiny hub fixtures under the released ids), and the pages build with Sphinx (autodoc imports every entry)."""

from __future__ import annotations

import re
import shutil
import warnings
from pathlib import Path

import pytest
from _hub import require_fixtures

DOCS = Path(__file__).resolve().parents[1] / "pyterrier_tite" / "pt_docs"
PAGES = ["index", "tite", "bert_biencoder", "aggretriever", "splade", "sparse_ce", "cross_encoder", "artifacts"]

pytestmark = pytest.mark.usefixtures("single_thread")


def code_blocks(page: str) -> list[tuple[str, dict]]:
    """``(code, options)`` of every ``.. code-block:: python`` of a page, dedented."""
    lines = (DOCS / f"{page}.rst").read_text().splitlines()
    blocks = []
    for i, line in enumerate(lines):
        if line.strip() != ".. code-block:: python":
            continue
        options, j = {}, i + 1
        while j < len(lines) and re.match(r"\s+:(\w+):(.*)", lines[j]):
            key, value = re.match(r"\s+:(\w+):(.*)", lines[j]).groups()
            options[key] = value.strip()
            j += 1
        body = []
        for text in lines[j:]:
            if text.strip() and not text.startswith("    "):
                break
            body.append(text[4:])
        blocks.append(("\n".join(body).strip() + "\n", options))
    return blocks


def test_every_page_is_in_the_toctree_and_has_api_entries_and_an_example():
    assert sorted(p.stem for p in DOCS.glob("*.rst")) == sorted(PAGES)
    index = (DOCS / "index.rst").read_text()
    for page in PAGES:
        text = (DOCS / f"{page}.rst").read_text()
        assert page == "index" or f"    {page}\n" in index, f"{page} is not in index.rst's toctree"
        assert re.search(r"^\.\. auto(class|function):: pyterrier_tite\.", text, re.M), f"{page}: no API entry"
        assert any("not-run" not in options.get("class", "") for _, options in code_blocks(page)), page


@pytest.mark.parametrize("page", PAGES)
def test_the_examples_of_a_page_run(page, tmp_path, monkeypatch, capsys):
    """The page's python blocks run in order in one namespace, in a fresh folder (those marked ``:class: not-run``
    need the network and are only compiled)."""
    require_fixtures()
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": f"pt_docs_{page}"}
    for code, options in code_blocks(page):
        compiled = compile(code, f"pt_docs/{page}.rst", "exec")
        if "not-run" in options.get("class", ""):
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # new-head warnings of examples that start from a plain encoder
            try:
                exec(compiled, namespace)
            except FileNotFoundError as exc:  # a shipped start point's package missing (extra `minilm`)
                if "is not installed" not in str(exc):
                    raise
                pytest.skip(str(exc))
    assert capsys.readouterr().out.strip(), f"{page}: the example printed nothing"


CONF = """
extensions = ['sphinx.ext.autodoc']
autodoc_typehints = 'none'
exclude_patterns = ['_build']
"""


def test_the_pages_build_with_sphinx(tmp_path):
    """``sphinx-build -b dummy``: exit 0, every autodoc entry imports, no warning about the pages themselves."""
    pytest.importorskip("sphinx")
    from sphinx.cmd.build import build_main

    source = tmp_path / "source"
    shutil.copytree(DOCS, source)
    (source / "conf.py").write_text(CONF)
    warning_file = tmp_path / "warnings.txt"
    code = build_main(["-b", "dummy", "-q", "-w", str(warning_file), str(source), str(tmp_path / "out")])
    reported = warning_file.read_text() if warning_file.exists() else ""
    assert code == 0, reported
    assert "failed to import" not in reported and "import" not in reported.lower(), reported
    page_warnings = [line for line in reported.splitlines() if re.match(rf"{re.escape(str(source))}/\w+\.rst:", line)]
    assert not page_warnings, "\n".join(page_warnings)
