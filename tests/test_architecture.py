"""The rooms of ARCHITECTURE.md keep their rules: data flows one way (no import from modeling/, training/,
tokenization/, convert/ or ops/ into pt/ or cli/, none of them imports PyTerrier or pandas except where listed), and no
module grows past 500 lines."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "pyterrier_tite"
#: room -> rooms of ours it must never import
FORBIDDEN = {
    "ops": {"modeling", "tokenization", "convert", "training", "pt", "cli"},
    "tokenization": {"modeling", "training", "pt", "cli"},
    "modeling": {"training", "pt", "cli"},
    "convert": {"training", "pt", "cli"},
    "training": {"pt", "cli"},
    "pt": {"cli", "training"},
}
#: rooms that must not import PyTerrier (the DataFrame layer is pt/)
NO_PYTERRIER = {"ops", "tokenization", "modeling", "convert", "training"}


def imports(file: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(file.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
            names += [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names += [a.name for a in node.names]
    return names


def room_files(room: str) -> list[Path]:
    return sorted((PACKAGE / room).rglob("*.py"))


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
    assert not offences, "\n".join(offences)


def test_no_module_over_500_lines():
    lengths = {str(f.relative_to(PACKAGE)): len(f.read_text().splitlines()) for f in PACKAGE.rglob("*.py")}
    assert not {name: n for name, n in lengths.items() if n > 500}
