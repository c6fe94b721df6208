"""``pyterrier_tite.load(name)`` and ``pt.Artifact.load(folder)`` return the right transformer for every model kind:
released checkpoints by hub id (recognised by their files, not their names) and every folder we save."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyterrier as pt
import pytest
from _hub import hub_repos, require_fixtures

import pyterrier_tite as t

pytestmark = pytest.mark.usefixtures("single_thread")

QUERIES = pd.DataFrame({"qid": ["1", "2"], "query": ["what is sparse retrieval", "neural ranking of documents"]})
RESULTS = pd.DataFrame(
    {
        "qid": ["1", "1", "2"],
        "query": ["what is sparse retrieval"] * 2 + ["neural ranking of documents"],
        "docno": ["a", "b", "a"],
        "text": ["sparse retrieval uses an inverted index", "a zebra", "rank documents with a neural model"],
    }
)


def kind_of(repo: str) -> type:
    from pyterrier_tite.pt.aggretriever import Aggretriever
    from pyterrier_tite.pt.rerankers import SparseCE
    from pyterrier_tite.pt.splade import Splade

    if "tite" in repo:
        return t.TITE
    if "sparse-cross-encoder" in repo:
        return SparseCE
    return Aggretriever if "aggretriever" in repo else Splade


@pytest.mark.parametrize("repo", hub_repos() or ["(no fixtures)"], ids=lambda r: f"hub:{r}")
def test_load_recognises_released_checkpoints(repo):
    require_fixtures()
    assert type(t.load(repo)) is kind_of(repo)


def outputs(model) -> np.ndarray:
    """What the model computes on a small input, whatever its kind."""
    if hasattr(model, "encode_queries"):
        return np.asarray(model.encode_queries(QUERIES["query"].tolist()))
    if hasattr(model, "query_encoder") and not hasattr(model, "scorer"):  # SPLADE: term weights
        toks = model.query_encoder()(QUERIES)["query_toks"]
        return np.array([sorted(d.values())[-3:] for d in toks])
    return model(RESULTS)["score"].to_numpy()


def saved_models():
    """One model of every kind we save, built from the tiny hub fixtures (new heads where a kind needs one)."""
    return {
        "SparseCE": lambda: t.SparseCE.from_pretrained("webis/sparse-cross-encoder-4-4096"),
        "MonoCE": lambda: t.MonoCE("webis/sparse-cross-encoder-4-4096"),
        "CELI": lambda: t.CELI("webis/sparse-cross-encoder-4-4096", token_dim=8),
        "TITE": lambda: t.TITE.from_pretrained("webis/tite-2-late-msmarco"),
        "BertBiEncoder": lambda: t.BertBiEncoder.from_pretrained("naver/efficient-splade-V-large-query"),
        "Splade": lambda: t.Splade.from_pretrained("naver/splade-cocondenser-ensembledistil"),
        "Aggretriever": lambda: t.Aggretriever.from_pretrained("castorini/aggretriever-cocondenser"),
    }


@pytest.mark.parametrize("kind", list(saved_models()))
def test_every_saved_model_is_a_pyterrier_artifact(kind, tmp_path):
    require_fixtures()
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # MonoCE / CELI on a sparse checkpoint: "new head" warnings are expected
        model = saved_models()[kind]()
    model.save_pretrained(str(tmp_path / kind))
    loaded = pt.Artifact.load(str(tmp_path / kind))
    assert type(loaded) is type(model)
    assert type(t.load(tmp_path / kind)) is type(model)
    np.testing.assert_allclose(outputs(loaded), outputs(model), rtol=1e-5, atol=1e-5)


def test_unknown_folders_are_named(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]}')
    with pytest.raises(ValueError, match="cannot tell which model"):
        t.load(tmp_path)
    (tmp_path / "pt_meta.json").write_text('{"type": "sparse_index", "format": "pisa"}')
    with pytest.raises(ValueError, match="not a model of pyterrier-tite"):
        t.load(tmp_path)
    with pytest.raises(FileNotFoundError, match="no checkpoint folder"):
        t.load("./does/not/exist")
