"""README.md is a front door whose every line runs: its fenced Python and shell blocks, top to bottom, in one fresh
folder, on the offline data mirror and the hub-layout checkpoints (``../shared/hub``).

Hub ids the README names must be in those fixtures (the released layouts verified offline), or be listed in
``SUBSTITUTES`` with an equivalent that is: a README line that names a model nobody checked is how users meet a
checkpoint that loads and computes something else.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from _hub import require_fixtures
from conftest import HUB_FIXTURES

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
#: hub ids that the README may name but the fixtures lack -> an equivalent present in them (none today)
SUBSTITUTES: dict[str, str] = {}
FENCE = re.compile(r"^```(python|bash)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
#: a hub id as the blocks write one: quoted in Python, after --model in shell
HUB_ID = re.compile(r"""(?:['"]|--model\s+)([A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*)(?=['"\s])""")

#: runs the blocks in order in one interpreter: Python blocks share a namespace, shell blocks run in bash
DRIVER = """
import json, subprocess, sys
blocks = json.load(open(sys.argv[1]))
namespace = {"__name__": "__main__"}
for number, (language, code) in enumerate(blocks):
    print(f"--- README block {number} ({language})", flush=True)
    if language == "python":
        exec(compile(code, f"README block {number}", "exec"), namespace)
    else:
        subprocess.run(["bash", "-euo", "pipefail", "-c", code], check=True)
"""


def readme_blocks() -> list[tuple[str, str]]:
    return [(language, code) for language, code in FENCE.findall(README.read_text())]


def fixture_repos() -> set[str]:
    hub = HUB_FIXTURES / "hub"
    if not hub.is_dir():
        return set()
    return {p.name.removeprefix("models--").replace("--", "/", 1) for p in hub.glob("models--*")}


def test_readme_has_python_and_shell_blocks():
    languages = [language for language, _ in readme_blocks()]
    assert languages.count("python") >= 2 and languages.count("bash") >= 2, languages


def test_readme_names_only_verified_hub_ids():
    """Every hub id in a fenced block is one of the released layouts in the fixtures, or has a listed substitute."""
    require_fixtures()
    repos = fixture_repos()
    named = {match for _, code in readme_blocks() for match in HUB_ID.findall(code)}
    assert named, "the README's blocks name no hub id: the pattern is broken"
    unverified = sorted(name for name in named if name not in repos and SUBSTITUTES.get(name) not in repos)
    assert not unverified, f"README blocks name hub ids that are not verified offline: {unverified}"


@pytest.mark.slow
def test_every_readme_block_runs(tmp_path, irds_home):
    """The blocks, in order, in a fresh folder (with ``examples/`` beside, as in a checkout); the shell lines create
    every file a later line reads."""
    require_fixtures()
    blocks = []
    for language, code in readme_blocks():
        for name, substitute in SUBSTITUTES.items():
            code = code.replace(name, substitute)
        blocks.append((language, code))
    (tmp_path / "blocks.json").write_text(json.dumps(blocks))
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    env = dict(os.environ, HF_HOME=str(HUB_FIXTURES), HF_HUB_OFFLINE="1", IR_DATASETS_HOME=irds_home,
               PYTERRIER_TITE_HOME=str(tmp_path / "cache"), TQDM_DISABLE="1",
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")  # fmt: skip
    env.pop("HF_HUB_CACHE", None)
    result = subprocess.run([sys.executable, "-c", DRIVER, "blocks.json"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=1200)  # fmt: skip
    assert result.returncode == 0, f"{result.stdout[-3000:]}\n{result.stderr[-5000:]}"
    for made in ("bm25.run", "tite.run.gz", "sce.run", "out/run.txt", "vaswani.flex", "vaswani.splade"):
        assert (tmp_path / made).exists(), f"no README line made {made}"
