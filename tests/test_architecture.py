"""The rooms of ARCHITECTURE.md keep their rules: data flows one way (kernels know no model; models and training never
import pt/ or cli/, nor PyTerrier; the storage floor store/ imports no model, kernel, transformer, training or CLI
code and no torch), one family imports only the families it builds on, there is no import circle anywhere in the
package (lazy imports inside functions count, for every rule), and no module grows past 500 lines."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "pyterrier_tite"
#: room -> rooms of ours it must never import
FORBIDDEN = {
    "ops": {"models", "training", "pt", "cli"},
    "models": {"training", "pt", "cli"},
    "training": {"pt", "cli"},
    "pt": {"cli", "training"},
    "store": {"models", "ops", "pt", "training", "cli"},
}
#: rooms that must not import torch (nor what imports it): the storage floor gets encoders passed in
NO_TORCH = {"store"}
#: what the storage floor may import of ours besides itself: the package root and plain modules without models
STORE_MAY_IMPORT = {"store", "text", "datasets"}
#: rooms that must not import PyTerrier (the DataFrame layer is pt/)
NO_PYTERRIER = {"ops", "models", "training"}
#: rooms that must not import pandas either (training reads its data tables with it)
NO_PANDAS = {"ops", "models"}
#: model family -> the other families it builds on (a DAG: a change to one family stays in its folder)
FAMILY_BASES = {
    "bert_biencoder": set(),
    "tite": {"bert_biencoder"},
    "aggretriever": {"bert_biencoder"},
    "splade": set(),
    "sparse_ce": set(),
    "cross_encoder": {"sparse_ce"},
}


def imports(file: Path) -> list[str]:
    """Every module a file imports, at the top or inside a function; ``from a import b`` names ``a.b`` too."""
    names = []
    for node in ast.walk(ast.parse(file.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
            names += [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names += [a.name for a in node.names]
    return names


def module_name(file: Path) -> str:
    parts = ["pyterrier_tite", *file.relative_to(PACKAGE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def room_files(room: str) -> list[Path]:
    return sorted((PACKAGE / room).rglob("*.py"))


def import_graph() -> dict[str, set[str]]:
    """module -> the package's modules it imports (names that are attributes, not modules, map to their module;
    the importer's own parent packages are left out)."""
    modules = {module_name(f): f for f in PACKAGE.rglob("*.py")}
    graph = {}
    for name, file in modules.items():
        targets = set()
        for imported in imports(file):
            while imported and imported not in modules:
                imported = imported.rpartition(".")[0]
            # a package is initialised before its modules: a module importing from its own package is no circle
            if imported and imported != name and not name.startswith(imported + "."):
                targets.add(imported)
        graph[name] = targets
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import circle of ``graph`` as a path that ends where it starts, or [] when there is none."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        state[node] = 2
        stack.pop()
        return []

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return []


def test_the_cycle_finder_finds_a_circle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_no_import_circle():
    cycle = find_cycle(import_graph())
    assert not cycle, "import circle: " + " -> ".join(cycle)


@pytest.mark.parametrize("room", sorted(FORBIDDEN))
def test_data_flows_one_way(room):
    offences = []
    for file in room_files(room):
        for name in imports(file):
            parts = name.split(".")
            if parts[0] == "pyterrier_tite" and len(parts) > 1 and parts[1] in FORBIDDEN[room]:
                offences.append(f"{file.relative_to(PACKAGE)} imports {name}")
            if room in NO_PYTERRIER and parts[0] in ("pyterrier", "pyterrier_dr", "pyterrier_pisa", "pyterrier_alpha"):
                offences.append(f"{file.relative_to(PACKAGE)} imports {name}")
            if room in NO_PANDAS and parts[0] == "pandas":
                offences.append(f"{file.relative_to(PACKAGE)} imports {name}")
            if room in NO_TORCH and parts[0] in ("torch", "transformers", "triton"):
                offences.append(f"{file.relative_to(PACKAGE)} imports {name}")
    assert not offences, "\n".join(offences)


def test_the_storage_floor_imports_only_plain_modules_of_ours():
    """``store/`` reaches nothing of ours but itself and modules without models, also not through the package's
    lazy names (``from pyterrier_tite import SparseCE`` would load a model family)."""
    offences = []
    for file in room_files("store"):
        for name in imports(file):
            parts = name.split(".")
            if parts[0] == "pyterrier_tite" and len(parts) > 1 and parts[1] not in STORE_MAY_IMPORT | {"__version__"}:
                offences.append(f"{file.relative_to(PACKAGE)} imports {name}")
    assert not offences, "\n".join(offences)


def test_imports_sees_imports_inside_functions(tmp_path):
    """The rules hold for lazy imports too: :func:`imports` finds one inside a function."""
    file = tmp_path / "lazy.py"
    file.write_text("def f():\n    import torch\n    from pyterrier_tite.models import checkpoint\n")
    assert {"torch", "pyterrier_tite.models", "pyterrier_tite.models.checkpoint"} <= set(imports(file))


def test_the_library_never_imports_the_studies():
    """``experiments/`` is not installed: a library module importing it would work in the repository only."""
    offences = [
        f"{file.relative_to(PACKAGE)} imports {name}"
        for file in sorted(PACKAGE.rglob("*.py"))
        for name in imports(file)
        if name.split(".")[0] == "experiments"
    ]
    assert not offences, "\n".join(offences)


def test_every_family_has_its_own_folder():
    families = {p.name for p in (PACKAGE / "models").iterdir() if (p / "__init__.py").exists()}
    assert families == set(FAMILY_BASES)
    for family in families:
        assert (PACKAGE / "models" / family / "modeling.py").exists(), family


@pytest.mark.parametrize("family", sorted(FAMILY_BASES))
def test_a_family_imports_only_the_families_it_builds_on(family):
    allowed = FAMILY_BASES[family] | {family}
    offences = []
    for file in room_files(f"models/{family}"):
        for name in imports(file):
            parts = name.split(".")
            if parts[:2] == ["pyterrier_tite", "models"] and len(parts) > 2 and parts[2] in FAMILY_BASES:
                if parts[2] not in allowed:
                    offences.append(f"{file.relative_to(PACKAGE)} imports {name}")
    assert not offences, "\n".join(offences)


def test_no_module_over_500_lines():
    lengths = {str(f.relative_to(PACKAGE)): len(f.read_text().splitlines()) for f in PACKAGE.rglob("*.py")}
    assert not {name: n for name, n in lengths.items() if n > 500}


@pytest.mark.parametrize("folder", ["experiments", "benchmarks"])
def test_no_study_or_benchmark_file_over_500_lines(folder):
    """Studies stay studies: a script past 500 lines holds more than one question (split it by what it answers)."""
    root = PACKAGE.parent / folder
    lengths = {str(f.relative_to(PACKAGE.parent)): len(f.read_text().splitlines()) for f in root.rglob("*.py")}
    assert lengths and not {name: n for name, n in lengths.items() if n > 500}


# ------------------------------------------------------------------------------------------------ ARCHITECTURE.md
ROOT = PACKAGE.parent
#: where a path cited in ARCHITECTURE.md may be relative to (a room's files are named from the package or models/)
CITED_FROM = (ROOT, PACKAGE, PACKAGE / "models")
_FILE = re.compile(r"^[\w.*-]+(?:/[\w.*-]+)*\.(?:py|cpp|md|toml|sh)$")


def cited_files(text: str) -> set[str]:
    """The file paths a page cites: words in backticks and link targets that name a source, docs or config file (a
    placeholder such as ``experiments/<name>/config.toml`` is no path)."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)  # the picture
    quoted = re.findall(r"`([^`]+)`", text) + re.findall(r"\]\(([^)#\s]+)", text)
    return {word for cited in quoted for word in cited.split() if _FILE.match(word)}


def cited_file_exists(cited: str) -> bool:
    """A path with a folder exists under one of :data:`CITED_FROM` (globs too); a bare file name at the top level, in
    the package or one of its rooms, or in a study (``config.toml``)."""
    if "/" in cited:
        return any(list(base.glob(cited)) for base in CITED_FROM)
    return any(list(ROOT.glob(pattern + cited)) for pattern in ("", "pyterrier_tite/", "pyterrier_tite/*/",
                                                                 "experiments/*/"))  # fmt: skip


def test_every_file_architecture_md_cites_exists():
    cited = cited_files((ROOT / "ARCHITECTURE.md").read_text())
    assert len(cited) > 30  # the page is read: rooms, modules and tests
    missing = sorted(c for c in cited if not cited_file_exists(c))
    assert not missing, f"ARCHITECTURE.md names files that do not exist: {missing}"


def test_a_cited_file_that_is_gone_is_found():
    assert cited_files("see `store/values.py` and [x](docs/nothing.md); `pt_meta.json`") == {
        "store/values.py", "docs/nothing.md"}  # fmt: skip
    assert cited_file_exists("store/values.py") and cited_file_exists("tests/test_bad_inputs*.py")
    assert not cited_file_exists("docs/nothing.md") and not cited_file_exists("demo_gone.py")
