"""One loader per family (``models/<family>/load.py``): a folder or hub id is resolved and its ``config.json`` read
once, and what it returns (module, tokenizer, settings) is passed down, so one ``SparseCE.from_pretrained`` opens
``config.json`` at most 3 times (transformers' ``AutoTokenizer`` reads it once itself). Hub ids come from the offline
fixtures (``../shared/hub``, set up by ``conftest.py``)."""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager

import pytest
from _hub import require_fixtures

pytestmark = pytest.mark.usefixtures("single_thread")

SPARSE_CE = "webis/sparse-cross-encoder-4-4096"


@contextmanager
def config_opens():
    """Collects the paths of every ``config.json`` opened inside (Python's ``open`` audit event: ``open``,
    ``io.open`` and ``os.open`` alike). Audit hooks cannot be removed, so the hook stays, switched off, after the
    block."""
    opened: list[str] = []
    active = [True]

    def hook(event: str, args: tuple) -> None:
        if active[0] and event == "open" and args and isinstance(args[0], (str, bytes, os.PathLike)):
            if os.path.basename(os.fsdecode(args[0])) == "config.json":
                opened.append(os.fsdecode(args[0]))

    sys.addaudithook(hook)
    try:
        yield opened
    finally:
        active[0] = False


def test_sparse_ce_load_opens_config_json_at_most_three_times() -> None:
    require_fixtures()
    from pyterrier_tite.pt.rerankers import SparseCE

    with config_opens() as opened:
        model = SparseCE.from_pretrained(SPARSE_CE, device="cpu")
    assert model.scorer.config.attention_window_size == 4  # it did read the checkpoint
    assert 1 <= len(opened) <= 3, f"config.json opened {len(opened)} times: {opened}"


# ------------------------------------------------------------------------------------------------ one family list
def test_setup_py_entry_points_are_the_family_list(monkeypatch) -> None:
    """setup.py's ``pyterrier.artifact`` entry points, as computed by setup.py itself (``setup()`` captured, nothing
    built), are one per family of ``families.py``, each loading through ``pt.artifacts.load``."""
    import runpy
    from pathlib import Path

    import setuptools

    from pyterrier_tite.families import ARTIFACT_ENTRY_POINTS, FORMATS

    root = Path(__file__).resolve().parents[1]
    captured: dict = {}
    monkeypatch.setattr(setuptools, "setup", lambda **kwargs: captured.update(kwargs))
    monkeypatch.chdir(root)
    runpy.run_path(str(root / "setup.py"), run_name="__main__")
    points = captured["entry_points"]["pyterrier.artifact"]
    assert points == ARTIFACT_ENTRY_POINTS
    assert sorted(points) == sorted(f"model.{fmt} = pyterrier_tite.pt.artifacts:load" for fmt in FORMATS)
    assert set(FORMATS) == {"cross-encoder", "tite", "bert-biencoder", "splade", "aggretriever"}


def test_families_py_imports_nothing_setup_py_lacks() -> None:
    """setup.py runs families.py before the package is built: it may import only the standard library's typing."""
    import ast
    from pathlib import Path

    import pyterrier_tite.families as families

    tree = ast.parse(Path(families.__file__).read_text(encoding="utf-8"))
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert imported <= {"__future__", "typing"}, imported


def test_every_reader_of_the_family_list_agrees() -> None:
    """``t.load``'s formats, the public names, the model cards and each transformer's artifact format all come from
    the one list."""
    import importlib

    import pyterrier_tite as t
    from pyterrier_tite.families import FAMILIES, FORMATS, PUBLIC
    from pyterrier_tite.models.model_card import CARDS, family
    from pyterrier_tite.pt.artifacts import FORMATS as LOADERS

    assert tuple(LOADERS) == FORMATS
    assert set(PUBLIC) <= set(t.__all__) and set(CARDS) == set(PUBLIC)
    for fam in FAMILIES:
        loader = getattr(importlib.import_module(fam.module), fam.loader)
        assert loader.ARTIFACT_FORMAT == fam.format
        for name in fam.public:
            cls = getattr(t, name)
            assert issubclass(cls, loader) and cls.ARTIFACT_FORMAT == fam.format
            meta = {"format": fam.format, **({"reranker": name} if len(fam.public) > 1 else {})}
            assert family(meta)[1] == name
        assert fam.kind in ("dense", "splade", "rerank")
        assert all(importlib.util.find_spec(f"pyterrier_tite.models.{folder}.load") for folder in fam.folders)


# ------------------------------------------------------------------------------------------------ names
HUB_NAMES = {
    "TITE": "webis/tite-2-late-msmarco",
    "SparseCE": SPARSE_CE,
    "Splade": "naver/splade-cocondenser-ensembledistil",
    "Aggretriever": "castorini/aggretriever-cocondenser",
}


@pytest.mark.parametrize("name", sorted(HUB_NAMES))
def test_every_family_builds_from_a_hub_id(name: str) -> None:
    """``t.X('<hub id>')`` is ``t.X.from_pretrained('<hub id>')`` (equal: same checkpoint, same settings), and
    keyword arguments reach it."""
    require_fixtures()
    import pyterrier_tite as t

    cls = getattr(t, name)
    by_name = cls(HUB_NAMES[name], batch_size=3, device="cpu")
    assert type(by_name) is cls and by_name.batch_size == 3
    assert by_name == cls.from_pretrained(HUB_NAMES[name], batch_size=3, device="cpu")


def test_bert_biencoder_builds_from_a_folder_and_a_module(tmp_path) -> None:
    """``BertBiEncoder(<folder>)`` reads the folder's settings (sentence-transformers: mean pooling + normalised); the
    module + tokenizer constructor still works, and a module without its tokenizer is refused by name."""
    from _tiny import save_tiny_bert

    import pyterrier_tite as t

    folder = save_tiny_bert(tmp_path / "bert", sentence_transformers=True)
    model = t.BertBiEncoder(folder, device="cpu")
    assert (model.pooling, model.normalize) == ("mean", True)
    assert model == t.BertBiEncoder.from_pretrained(folder, device="cpu")
    again = t.BertBiEncoder(model.model, model.tokenizer, "mean", True, device="cpu")
    assert again.encode(["a text"], "doc").tolist() == model.encode(["a text"], "doc").tolist()
    with pytest.raises(ValueError, match="tokenizer"):
        t.BertBiEncoder(model.model)


def test_tite_built_from_a_module_keeps_working() -> None:
    """The module + tokenizer constructor of TITE is unchanged by the name path."""
    require_fixtures()
    import pyterrier_tite as t

    loaded = t.TITE(HUB_NAMES["TITE"], device="cpu")
    again = t.TITE(loaded.model, loaded.tokenizer, device="cpu", **loaded.settings())
    assert again.encode(["a query"], "query").tolist() == loaded.encode(["a query"], "query").tolist()
