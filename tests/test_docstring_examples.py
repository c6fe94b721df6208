"""Every example in the package's docstrings runs as written: each ``Example::`` block (and ``>>>`` session) of every
module compiles, and those of the public API (``help(t.bm25)`` and the other names of ``pyterrier_tite.__all__``)
run offline on the data mirror and the hub-layout fixtures, with the imports a reader has (``pt``, ``t``,
``pyterrier_dr``), in a fresh folder; the few that cannot run here are listed in ``NOT_RUN`` with why.
(``help(t.bm25)``'s example failed under PyTerrier 1.1, which refuses measures given as strings.)"""

from __future__ import annotations

import ast
import doctest
import inspect
import re
import textwrap
from pathlib import Path

import pyterrier as pt
import pyterrier_dr
import pytest
from _hub import require_fixtures

import pyterrier_tite as t

pytestmark = pytest.mark.usefixtures("single_thread")

PACKAGE = Path(__file__).resolve().parents[1] / "pyterrier_tite"
#: ``Example::``, a blank line, then the indented block
EXAMPLE = re.compile(r"Example::\n\n((?:[ \t]+\S.*\n|\n)+)")
#: a public example that does not run here -> why (each still compiles)
NOT_RUN = {
    "load": "a model folder, an upload and an index of the reader's",
    "MonoCE": "cross-encoder/ms-marco-MiniLM-L-6-v2 is no hub fixture",
    "TITE": "indexes all of vaswani (30 s on the fixtures); README's blocks run the same calls",
    "Splade": "indexes all of vaswani (20 s on the fixtures); README's blocks run the same calls",
    "Aggretriever": "indexes all of vaswani (as TITE's)",
}


def examples(doc: str | None) -> list[str]:
    """The code of a docstring's ``Example::`` blocks and of its ``>>>`` lines (one block)."""
    blocks = [textwrap.dedent(code) for code in EXAMPLE.findall((doc or "") + "\n")]
    session = "".join(example.source for example in doctest.DocTestParser().get_examples(doc or ""))
    return blocks + [session] * bool(session)


def package_examples() -> dict[str, str]:
    """``{"<file>:<line>": code}`` of every docstring example in the package, read with ``ast`` (nothing imported)."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                for number, code in enumerate(examples(ast.get_docstring(node))):
                    found[f"{path.relative_to(PACKAGE.parent)}:{getattr(node, 'lineno', 1)}#{number}"] = code
    return found


#: the public names whose docstrings hold examples
PUBLIC = sorted(name for name in t.__all__ if examples(inspect.getdoc(getattr(t, name))))


def test_every_docstring_example_compiles():
    found = package_examples()
    assert len(found) >= len(PUBLIC) >= 8, "the examples are no longer found: the pattern is broken"
    for where, code in found.items():
        try:
            compile(code, where, "exec")
        except SyntaxError as exc:
            pytest.fail(f"the example at {where} does not compile: {exc}")


def test_the_examples_not_run_are_public_examples():
    assert set(NOT_RUN) <= set(PUBLIC)


@pytest.mark.filterwarnings("ignore:.*new weights \\(random init")  # CELI's example says so itself: train it first
@pytest.mark.parametrize("name", [name for name in PUBLIC if name not in NOT_RUN])
def test_a_public_example_runs_as_written(name, irds_home, tite_cache, tmp_path, monkeypatch):
    code = "\n".join(examples(inspect.getdoc(getattr(t, name))))
    if re.search(r"""['"][\w.-]+/[\w.-]+['"]""", code):  # names a hub id
        require_fixtures()
    monkeypatch.chdir(tmp_path)
    exec(compile(code, f"the example of t.{name}", "exec"), {"pt": pt, "t": t, "pyterrier_dr": pyterrier_dr})
