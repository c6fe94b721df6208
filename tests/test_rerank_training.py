"""Reranker fine-tuning: losses against hand-written formulas, the group sampler, a tiny training run that learns,
resume, and the ``train-reranker`` CLI on a tiny model with real TREC DL candidates."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
import torch

from pyterrier_tite.models import SparseCrossEncoder
from pyterrier_tite.models.cross_encoder.celi import pair_states_from_sparse
from pyterrier_tite.pt.rerankers import CELI, CrossEncoderReranker, MonoCE, SparseCE
from pyterrier_tite.training.loop import TrainingArguments
from pyterrier_tite.training.rerankers import (
    RerankerTrainingData,
    lce_loss,
    margin_mse_loss,
    ranknet_loss,
    reranker_loss,
    train_reranker,
)
from tests._tiny import save_tiny_bert, sparse_ce, word_tokenizer

WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(40)] + ["good"]


pytestmark = pytest.mark.usefixtures("single_thread")


@pytest.fixture(scope="module")
def tokenizer():
    tok = word_tokenizer(WORDS)
    assert tok("w1 w7", add_special_tokens=False)["input_ids"] == [WORDS.index("w1"), WORDS.index("w7")]
    return tok


def tiny_sparse(window=4) -> SparseCrossEncoder:
    no_dropout = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return sparse_ce(window, vocab_size=len(WORDS), num_hidden_layers=1, initializer_range=0.2, **no_dropout).train()


# ------------------------------------------------------------------------------------------------------------ losses
def test_lce_is_negative_log_softmax_of_the_positive():
    scores = torch.tensor([[2.0, 1.0, -1.0], [0.0, 3.0, 0.5]])
    expected = []
    for row in scores.tolist():
        expected.append(-(row[0] - math.log(sum(math.exp(s) for s in row))))
    assert lce_loss(scores).item() == pytest.approx(sum(expected) / 2, rel=1e-6)


def test_ranknet_is_mean_pairwise_logistic_over_ordered_pairs():
    scores = torch.tensor([[2.0, 1.0, -1.0, 0.5]])
    labels = torch.tensor([[2, 1, 0, 0]])
    s, y = scores[0].tolist(), labels[0].tolist()
    pairs = [(i, j) for i in range(4) for j in range(4) if y[i] > y[j]]
    expected = sum(math.log(1 + math.exp(s[j] - s[i])) for i, j in pairs) / len(pairs)
    assert len(pairs) == 5
    assert ranknet_loss(scores, labels).item() == pytest.approx(expected, rel=1e-6)
    assert ranknet_loss(scores, torch.zeros_like(labels)).item() == 0.0


def test_margin_mse_against_formula():
    scores = torch.tensor([[3.0, 1.0, 0.0]])
    teacher = torch.tensor([[5.0, 4.0, 1.0]])
    expected = ((2.0 - 1.0) ** 2 + (3.0 - 4.0) ** 2) / 2
    assert margin_mse_loss(scores, teacher).item() == pytest.approx(expected)


# ------------------------------------------------------------------------------------------------------------ data
def synthetic(n_queries=12, n_docs=10, seed=0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Each query's relevant docs contain the word "good"; the others do not."""
    rng = np.random.default_rng(seed)
    rows, qrels = [], []
    for q in range(n_queries):
        query = " ".join(f"w{i}" for i in rng.integers(0, 40, 3))
        for d in range(n_docs):
            words = [f"w{i}" for i in rng.integers(0, 40, 8)]
            relevant = d in (0, 5)
            if relevant:
                words[int(rng.integers(0, 8))] = "good"
            rows.append({"qid": f"q{q}", "query": query, "docno": f"{q}-{d}", "text": " ".join(words), "rank": d})
            qrels.append({"qid": f"q{q}", "docno": f"{q}-{d}", "label": 2 if d == 0 else int(relevant)})
    return pd.DataFrame(rows), pd.DataFrame(qrels)


def test_groups_put_a_positive_first_and_are_deterministic_per_epoch(tokenizer):
    reranker = SparseCE(tiny_sparse(), tokenizer=tokenizer)
    cands, qrels = synthetic()
    qrels = qrels[qrels["qid"] != "q3"]  # q3 has no positive: skipped
    data = RerankerTrainingData(reranker.inputs, cands, qrels, negatives=3, queries_per_batch=5, depth=8)
    assert len(data) == 11
    batches = list(data(0))
    assert [len(b["queries"]) for b in batches] == [5, 5, 1]
    for b in batches:
        assert b["labels"].shape == (len(b["queries"]), 4)
        assert (b["labels"][:, 0] >= 1).all() and (b["labels"][:, 1:] == 0).all()
        good = tokenizer.convert_tokens_to_ids("good")
        assert all(good in docs[0] and all(good not in d for d in docs[1:]) for docs in b["docs"])
    again = list(data(0))
    assert all(a["docs"] == b["docs"] for a, b in zip(batches, again, strict=True))
    assert any(a["docs"] != b["docs"] for a, b in zip(batches, data(1), strict=False))
    # depth 8: candidate 9 is never sampled, the positive at rank 5 is
    assert all(len(q.docs) == 8 for q in data.queries)
    shards = [list(data(0, rank, 2)) for rank in (0, 1)]
    assert sum(len(b["queries"]) for s in shards for b in s) == 11


def test_teacher_scores_join_and_missing_ones_raise(tokenizer):
    reranker = SparseCE(tiny_sparse(), tokenizer=tokenizer)
    cands, qrels = synthetic(3, 4)
    teacher = cands[["qid", "docno"]].assign(score=np.arange(len(cands), dtype=float))
    data = RerankerTrainingData(reranker.inputs, cands, qrels, negatives=2, teacher=teacher)
    batch = next(iter(data(0)))
    assert batch["teacher"].shape == (3, 3)
    with pytest.raises(ValueError, match="teacher"):
        RerankerTrainingData(reranker.inputs, cands, qrels, teacher=teacher.head(5))


def test_a_training_length_cap_keeps_document_prefixes_and_leaves_the_saved_model_uncapped(tokenizer, tmp_path):
    reranker = SparseCE(tiny_sparse(), tokenizer=tokenizer)
    cands, qrels = synthetic(4, 6)
    whole = RerankerTrainingData(reranker.inputs, cands, qrels, negatives=2)
    capped = RerankerTrainingData(reranker.inputs, cands, qrels, negatives=2, doc_max_length=3)
    assert max(len(d) for q in whole.queries for d in q.docs) > 3
    for a, b in zip(whole.queries, capped.queries, strict=True):
        assert [d[:3] for d in a.docs] == b.docs
    with pytest.raises(ValueError, match="doc_max_length"):
        RerankerTrainingData(reranker.inputs, cands, qrels, doc_max_length=0)
    args = TrainingArguments(str(tmp_path), max_steps=2, learning_rate=1e-3, warmup_steps=1, verbose=False)
    train_reranker(reranker, cands, qrels, args, negatives=2, doc_max_length=3)
    reloaded = CrossEncoderReranker.from_pretrained(tmp_path)
    assert reloaded.doc_max_length is None and len(reloaded.inputs.docs([cands["text"].iloc[0]])[0]) > 3


# ------------------------------------------------------------------------------------------------------------ train
def mean_loss(history, part=slice(None)):
    return float(np.mean([h["loss"] for h in history[part]]))


@pytest.mark.parametrize("loss", ["lce", "ranknet", "margin_mse"])
def test_tiny_training_lowers_the_loss_and_ranks_relevant_docs_first(loss, tokenizer, tmp_path):
    reranker = SparseCE(tiny_sparse(), tokenizer=tokenizer, batch_size=16)
    cands, qrels = synthetic()
    teacher = cands[["qid", "docno"]].assign(score=cands["text"].str.contains("good").astype(float) * 5.0)
    args = TrainingArguments(str(tmp_path), max_steps=40, learning_rate=1e-2, warmup_steps=2, verbose=False, seed=1)
    history = train_reranker(reranker, cands, qrels, args, loss=loss, negatives=3, queries_per_batch=4,
                             teacher=teacher if loss == "margin_mse" else None)  # fmt: skip
    assert len(history) == 40
    assert mean_loss(history, slice(-8, None)) < 0.5 * mean_loss(history, slice(0, 8))
    ranked = reranker(cands)
    top = ranked[ranked["rank"] < 2]
    assert top["text"].str.contains("good").mean() >= 0.75
    reloaded = CrossEncoderReranker.from_pretrained(tmp_path)
    assert isinstance(reloaded, SparseCE)
    diff = ranked.merge(reloaded(cands), on=["qid", "docno"]).eval("score_x - score_y").abs().max()
    assert diff < 1e-5


def test_celi_trains_both_terms_with_their_own_loss(tokenizer, tmp_path):
    reranker = CELI(tiny_sparse(), token_dim=4, tokenizer=tokenizer)
    cands, qrels = synthetic(6, 6)
    args = TrainingArguments(str(tmp_path), max_steps=3, learning_rate=1e-3, verbose=False)
    history = train_reranker(reranker, cands, qrels, args, negatives=2, queries_per_batch=2)
    assert {"loss_cls", "loss_late"} <= set(history[0])
    assert history[0]["loss"] == pytest.approx(history[0]["loss_cls"] + history[0]["loss_late"], rel=1e-5)


def test_loss_fn_of_a_celi_scorer_is_the_sum_of_the_lce_of_each_term(tokenizer):
    reranker = CELI(tiny_sparse(), token_dim=4, tokenizer=tokenizer)
    cands, qrels = synthetic(2, 5)
    batch = next(iter(RerankerTrainingData(reranker.inputs, cands, qrels, negatives=2)(0)))
    total, parts = reranker_loss("lce")(reranker.scorer, batch, 0)
    backbone = reranker.scorer.backbone
    segments = backbone.bert(backbone.make_batch(batch["queries"], batch["docs"])).segments
    s_cls, s_late = reranker.scorer.head.score_parts(pair_states_from_sparse(segments))
    expected = lce_loss(s_cls.view(2, -1)) + lce_loss(s_late.view(2, -1))
    assert total.item() == pytest.approx(expected.item(), rel=1e-5)


def test_resume_after_an_interruption_continues_the_same_run(tokenizer, tmp_path, monkeypatch):
    import pyterrier_tite.training.rerankers as training

    cands, qrels = synthetic()

    def run(path):
        reranker = SparseCE(tiny_sparse(), tokenizer=tokenizer)
        args = TrainingArguments(str(path), max_steps=6, learning_rate=1e-3, save_every=2, verbose=False)
        return train_reranker(reranker, cands, qrels, args, negatives=2, queries_per_batch=3), reranker

    straight, model_a = run(tmp_path / "a")
    real = training.reranker_loss

    steps_run = []

    def recording(loss, crash_at=None):
        fn = real(loss)

        def loss_fn(scorer, batch, step):
            if step == crash_at:
                raise KeyboardInterrupt
            steps_run.append(step)
            return fn(scorer, batch, step)

        return loss_fn

    monkeypatch.setattr(training, "reranker_loss", lambda loss: recording(loss, crash_at=5))
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path / "b")  # dies in step 6, after the checkpoint of step 4
    monkeypatch.setattr(training, "reranker_loss", recording)
    steps_run.clear()
    resumed, model_b = run(tmp_path / "b")
    assert steps_run == [4, 5]  # only the steps after the checkpoint were run again
    assert [h["loss"] for h in resumed] == pytest.approx([h["loss"] for h in straight], rel=1e-5)
    a, b = model_a.scorer.state_dict(), model_b.scorer.state_dict()
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)


# ------------------------------------------------------------------------------------------------------------ CLI
@pytest.fixture(scope="module")
def tiny_bert_folder(tmp_path_factory) -> str:
    """A 1-layer BERT with the MiniLM vocabulary, saved like a plain BERT start point."""
    return save_tiny_bert(tmp_path_factory.mktemp("tiny_bert"))


@pytest.mark.parametrize("extra", [["--arch", "sparse", "--w", "4"], ["--arch", "mono", "--head", "celi"]],
                         ids=["sparse-w4", "mono-celi"])  # fmt: skip
def test_train_reranker_cli_on_trec_dl_candidates(extra, tiny_bert_folder, irds_home, tmp_path, capsys):
    from pyterrier_tite.cli import main

    out = tmp_path / "model"
    argv = ["train-reranker", "--model", tiny_bert_folder, "--dataset", "2020", "--max-queries", "4", "--depth", "20",
            "--max-steps", "3", "--queries-per-batch", "2", "--num-negatives", "3", "--doc-max-length", "48",
            "--threads", "1", "--quiet", "--output-dir", str(out), "--allow-evaluation-data", *extra]  # fmt: skip
    assert main(argv) == 0
    assert "trained" in capsys.readouterr().out
    meta = json.loads((out / "pt_meta.json").read_text())
    reranker = CrossEncoderReranker.from_pretrained(out)
    if "mono" in extra:
        assert meta["head"] == "celi" and isinstance(reranker, CELI) and not reranker.scorer.is_sparse
    else:
        assert meta["backbone"] == "sparse" and reranker.scorer.config.attention_window_size == 4
        assert not isinstance(reranker, MonoCE)
    assert len((out / "log.jsonl").read_text().splitlines()) == 3
    card = (out / "README.md").read_text()  # the model card says how the model was made
    assert "pyterrier-tite train-reranker --model" in card and "2020" in card
