"""Package-level behaviour: the fallback without the compiled extension, and the command line."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from pyterrier_tite.cli import main
from pyterrier_tite.cli.demo import run_demo

NO_COMPILER = """
import warnings
import torch
import pyterrier_tite as t
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    names = t.ops.backends()['packed_mean_pool']
    x = torch.randn(5, 3)
    out, cu = t.ops.packed_mean_pool(x, torch.tensor([0, 5], dtype=torch.int32), 2, 2)
print(names, out.shape[0], [str(w.message) for w in caught if 'kernels not available' in str(w.message)])
"""


@pytest.mark.parametrize("compiler, why", [("no-such-c++", "no C++ compiler"), ("/bin/false", "failed")])
def test_without_a_working_compiler_the_reference_ops_run_after_one_warning(tmp_path, compiler, why):
    """Kernels not yet compiled for this torch (an empty cache) and no compiler, or one that fails: one line says so
    and why, every op runs on the pure-torch reference, and nothing half-built is left in the cache."""
    cxx = str(tmp_path / compiler) if compiler == "no-such-c++" else compiler
    env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(tmp_path / "kernels"), "CXX": cxx}
    out = subprocess.run([sys.executable, "-c", NO_COMPILER], capture_output=True, text=True, check=True, env=env)
    names, rows, warned = out.stdout.strip().split(" ", 2)
    assert (names, rows) == ("['torch']", "3")
    assert warned.count("kernels not available") == 1 and why in warned and "\\n" not in warned
    left = os.listdir(tmp_path / "kernels") if (tmp_path / "kernels").exists() else []
    assert len(left) == (why == "failed") and all(name.endswith(".log") for name in left)  # the compiler's output
    assert all(str(tmp_path / "kernels" / name) in warned for name in left)  # named in the warning


FAKE_COMPILE = """
import os, shutil, sys, time
import torch
from torch.utils import cpp_extension
from pyterrier_tite.ops import _extension

def compile_slowly(name, sources, build_directory, **kwargs):  # the kernels of this checkout, as if compiled now
    time.sleep(2)
    shutil.copy(sys.argv[1], os.path.join(build_directory, name + ".so"))
    return _extension._import(os.path.join(build_directory, name + ".so"))

cpp_extension.load = compile_slowly
print(_extension.extension().__file__)
"""


def test_two_processes_starting_at_once_compile_the_kernels_once(tmp_path):
    """An empty kernel cache and two processes that need the kernels at once (two pytest workers, two services): one
    compiles (said in one line) while the other waits on the cache's lock, and both load the one result."""
    from pyterrier_tite.ops import _extension

    if _extension.extension() is None:
        pytest.skip("the kernels are not compiled here")
    library = os.path.join(_extension.build_folder(_extension.sources()), _extension._NAME + ".so")
    env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(tmp_path / "kernels")}
    users = [subprocess.Popen([sys.executable, "-c", FAKE_COMPILE, library], env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)]  # fmt: skip
    outputs = [user.communicate(timeout=300) for user in users]
    assert [user.returncode for user in users] == [0, 0], [err for _, err in outputs]
    assert sum("compiling the CPU kernels" in err for _, err in outputs) == 1, [err for _, err in outputs]
    (built,) = os.listdir(tmp_path / "kernels")  # one folder, complete (no staging left behind)
    final = str(tmp_path / "kernels" / built / (_extension._NAME + ".so"))
    staged = [out.strip() for out, _ in outputs if out.strip() != final]  # the compiler's, from its build folder
    assert len(staged) == 1 and os.path.basename(os.path.dirname(staged[0])).startswith(f".{built}.building"), outputs


HELP_IMPORTS = """
import sys
from pyterrier_tite.cli import build_parser
build_parser()
heavy = ('transformers', 'pyterrier', 'pyterrier_dr', 'pyterrier_pisa', 'ir_datasets')
print(sorted(m for m in sys.modules if m.split('.')[0] in heavy or m.startswith('pyterrier_tite.models')))
"""


def test_cli_help_imports_no_models_or_pyterrier():
    """Every sub-command registers its parser without loading models, transformers or PyTerrier, so
    ``pyterrier-tite --help`` and argument errors answer in about torch's import time (not 8 s)."""
    done = subprocess.run([sys.executable, "-c", HELP_IMPORTS], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_cli_backends_lists_compiled_pooling(capsys):
    assert main(["backends"]) == 0
    assert "packed_mean_pool: csrc-cpu" in capsys.readouterr().out


def test_cli_demo_prints_vaswani_table(irds_home, tite_cache, capsys):
    assert main(["demo", "--systems", "bm25"]) == 0
    out = capsys.readouterr().out
    assert "nDCG@10" in out and "R@100" in out and "mrt" in out
    assert "0.4667" in out  # BM25 nDCG@10 on vaswani (../shared/DATA.md)


@pytest.mark.slow
def test_demo_neural_systems_on_cranfield(irds_home, tite_cache):
    """The shipped SPLADE (indexed into PISA) and the MiniLM re-ranker run end to end inside pt.Experiment."""
    table = run_demo("cranfield", systems=["bm25", "splade", "minilm"], rerank_depth=3).set_index("name")
    assert len(table) == 3
    bm25_row, splade_row, minilm_row = (table.iloc[i] for i in range(3))
    assert bm25_row["nDCG@10"] == pytest.approx(0.3276, abs=0.005)  # ../shared/DATA.md
    assert splade_row["nDCG@10"] > 0.25  # zero-shot 2-layer SPLADE: 0.3299 measured (README)
    assert minilm_row["R@100"] == pytest.approx(bm25_row["R@100"], abs=1e-9)  # only the top 3 are re-ordered
    assert minilm_row["nDCG@10"] != pytest.approx(bm25_row["nDCG@10"], abs=1e-6)


def test_demo_rejects_unknown_systems():
    with pytest.raises(ValueError, match="unknown demo systems"):
        run_demo("vaswani", systems=["bm25", "colbert"])


def test_public_api_docstrings_carry_an_example():
    import pyterrier_tite as t

    names = ["SparseCE", "MonoCE", "CELI", "TITE", "BertBiEncoder", "Aggretriever", "Splade", "load", "bm25"]
    missing = [n for n in names if "Example::" not in (getattr(t, n).__doc__ or "")]
    assert not missing, f"no runnable example in the docstring of {missing}"


def test_demo_finds_model_folders_of_a_recipe_but_not_inside_a_model(tmp_path):
    """A recipe writes ``<variant>/seed-<seed>/``; a model's own sub-folders (checkpoint/) and a recipe's cached
    indexes (artifacts of another format) are never rows."""
    import os

    from pyterrier_tite.cli.demo import model_folders

    for folder in ("a-tite", "rerankers/mono/seed-1", "rerankers/mono/seed-2", "rerankers/teacher-cache",
                   "a-tite/checkpoint/model", "x/y/z/too-deep", "agg/indexes/cls-1a2b/scifact.flex"):  # fmt: skip
        (tmp_path / folder).mkdir(parents=True)
    for folder in ("a-tite", "rerankers/mono/seed-1", "rerankers/mono/seed-2", "a-tite/checkpoint/model",
                   "x/y/z/too-deep"):  # fmt: skip
        (tmp_path / folder / "pt_meta.json").write_text('{"format": "cross-encoder"}')
    flex_meta = '{"type": "dense_index", "format": "flex"}'
    (tmp_path / "agg/indexes/cls-1a2b/scifact.flex/pt_meta.json").write_text(flex_meta)
    elsewhere = tmp_path.parent / f"{tmp_path.name}-elsewhere"
    (elsewhere / "linked").mkdir(parents=True)
    (elsewhere / "linked" / "pt_meta.json").write_text('{"format": "cross-encoder"}')
    (tmp_path / "linked-model").symlink_to(elsewhere / "linked")  # a model folder linked in is a row too
    (tmp_path / "loop").symlink_to(tmp_path)  # a link cycle ends at the depth limit
    found = [os.path.relpath(f, tmp_path) for f in model_folders(str(tmp_path))]
    assert "linked-model" in found
    assert [f for f in found if not f.startswith("loop")] == [
        "a-tite", "linked-model", "rerankers/mono/seed-1", "rerankers/mono/seed-2"]


@pytest.mark.slow
def test_demo_adds_a_row_per_trained_model_folder(irds_home, tite_cache, tmp_path):
    """``--models DIR``: each saved model becomes a row (dense: own FlexIndex; SPLADE: own PISA index; cross-encoder:
    BM25 re-ranked); a retrained folder is indexed again instead of reusing the old model's index."""
    import os
    import warnings

    from _hub import require_fixtures

    import pyterrier_tite as t
    from pyterrier_tite.cli.demo import trained_system

    require_fixtures()
    models = tmp_path / "models"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t.TITE.from_pretrained("webis/tite-2-late-msmarco").save_pretrained(str(models / "a-tite"))
        # windowed attention: the fixture's 187-token vocabulary spells cranfield's documents letter by letter
        # (~1,000 tokens each), which full attention (MonoCE) re-ranks for minutes
        t.SparseCE("webis/sparse-cross-encoder-4-4096").save_pretrained(str(models / "b-sparse-ce"))
        t.Splade.from_pretrained("naver/splade-cocondenser-ensembledistil").save_pretrained(str(models / "c-splade"))
    (models / "not-a-model").mkdir()
    table = run_demo("cranfield", systems=["bm25"], rerank_depth=5, models_dir=str(models)).set_index("name")
    assert list(table.index) == ["BM25 (PISA, k1=0.9, b=0.4)", "a-tite", "b-sparse-ce", "c-splade"]
    assert table.loc["b-sparse-ce", "R@100"] == pytest.approx(table.iloc[0]["R@100"], abs=1e-9)  # top 5 re-ordered
    assert all(0 <= v <= 1 for v in table["nDCG@10"])
    dense = os.path.join(tite_cache, "demo-dense")
    before = set(os.listdir(dense))
    os.utime(models / "a-tite" / "model.safetensors", (1, 1))  # "retrained"
    trained_system(str(models / "a-tite"), "cranfield")  # builds its index
    assert len(set(os.listdir(dense)) - before) == 1
    with pytest.raises(FileNotFoundError, match="not a folder"):
        run_demo("cranfield", systems=["bm25"], models_dir=str(tmp_path / "missing"))
