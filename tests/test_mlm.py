"""MLM pretraining from scratch: both objectives learn, the MLM+FLOPS terms follow their definition, masks are
deterministic, and a crashed run resumes exactly through the shared loop."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from pyterrier_tite.models.splade.modeling import splade_pool
from pyterrier_tite.training.loop import Trainer, TrainingArguments
from pyterrier_tite.training.losses import flops
from pyterrier_tite.training.mlm import BertSize, MlmBatches, MlmLoss, bert_mlm, pretrain_mlm, save_mlm
from pyterrier_tite.training.tokenizer import train_wordpiece

TEXTS = [
    "the effect of magnetic fields on plasma flow in a tube",
    "information retrieval systems for scientific libraries and archives",
    "boundary layer flow over a flat plate at high speed",
    "indexing and classification of documents in technical libraries",
    "heat transfer in laminar flow between parallel plates",
    "automatic indexing of scientific papers by computer",
]
SIZE = BertSize(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64, max_position_embeddings=64)


@pytest.fixture(scope="module")
def tokenizer():
    return train_wordpiece(TEXTS * 3, vocab_size=150, min_frequency=1)


def args(tmp_path, name, steps, **kw) -> TrainingArguments:
    defaults = dict(learning_rate=3e-3, log_every=0, verbose=False, seed=3, max_grad_norm=None)
    return TrainingArguments(output_dir=str(tmp_path / name), max_steps=steps, **{**defaults, **kw})


@pytest.mark.parametrize("objective", ["mlm", "mlm+flops"])
def test_pretraining_learns_and_saves_a_loadable_checkpoint(tmp_path, tokenizer, objective):
    torch.set_num_threads(1)
    model, history = pretrain_mlm(
        TEXTS, tokenizer, args(tmp_path, objective, 60), size=SIZE, objective=objective, batch_size=6,
        mlm_probability=0.3, max_length=32, flops_weight=1e-3, flops_warmup_steps=10, device="cpu",
    )  # fmt: skip
    first, last = sum(h["mlm"] for h in history[:5]) / 5, sum(h["mlm"] for h in history[-5:]) / 5
    assert last < first - 0.7, (first, last)  # measured drops: 1.1-1.2
    if objective == "mlm+flops":
        assert {"mlm_splade", "flops", "doc_terms"} <= set(history[-1])
        assert history[0]["flops"] == 0.0  # quadratic warm-up starts at zero
    from pyterrier_tite.pt.splade import Splade

    splade = Splade.from_pretrained(str(tmp_path / objective), device="cpu")  # a SPLADE-loadable MLM + tokenizer
    assert splade.encode(["magnetic flow"], 16).shape == (1, len(tokenizer))


def test_mlm_flops_loss_matches_its_definition(tokenizer):
    torch.manual_seed(0)
    model = bert_mlm(tokenizer, SIZE).eval()
    batch = next(iter(MlmBatches(TEXTS, tokenizer, batch_size=4, max_length=32, mlm_probability=0.3)(0, 0, 1)))
    loss, parts = MlmLoss("mlm+flops", flops_weight=0.5, flops_warmup_steps=0)(model, batch, step=7)
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    masked = batch["labels"] != -100
    assert masked.any() and (batch["input_ids"][masked] != batch["labels"][masked]).any()
    mlm = F.cross_entropy(logits[masked], batch["labels"][masked])
    mlm_splade = F.cross_entropy(torch.log1p(torch.relu(logits[masked])), batch["labels"][masked])
    expected = mlm + mlm_splade + 0.5 * flops(splade_pool(logits, batch["attention_mask"]))
    torch.testing.assert_close(loss, expected)
    assert parts["mlm"] == pytest.approx(mlm.item(), rel=1e-5)
    plain, _ = MlmLoss("mlm")(model, batch, step=7)
    torch.testing.assert_close(plain, mlm)


def test_masks_depend_only_on_seed_epoch_and_position(tokenizer):
    batches = MlmBatches(TEXTS, tokenizer, batch_size=4, max_length=32, seed=5)
    a = list(batches(1, 0, 1))
    torch.manual_seed(123)  # the global RNG does not matter
    b = list(batches(1, 0, 1))
    assert len(a) == 2 and all(torch.equal(x["input_ids"], y["input_ids"]) for x, y in zip(a, b, strict=True))
    assert not torch.equal(next(iter(batches(2, 0, 1)))["labels"], a[0]["labels"])  # a new epoch, new masks
    shards = [sum(len(x["input_ids"]) for x in batches(0, r, 2)) for r in range(2)]
    assert shards == [3, 3]


def test_resume_after_a_crash_is_exact(tmp_path, tokenizer):
    torch.set_num_threads(1)
    batches = MlmBatches(TEXTS, tokenizer, batch_size=2, max_length=32)
    loss = MlmLoss("mlm+flops", flops_weight=1e-2, flops_warmup_steps=4)

    def run(name, loss_fn):
        torch.manual_seed(0)
        model = bert_mlm(tokenizer, SIZE)
        trainer = Trainer(model, batches, loss_fn, save_mlm(tokenizer), args(tmp_path, name, 7, save_every=3))
        return model, trainer.train()

    straight, history = run("straight", loss)

    def crash_at_step_5(model, batch, step):
        if step == 5:
            raise KeyboardInterrupt
        return loss(model, batch, step)

    with pytest.raises(KeyboardInterrupt):
        run("resumed", crash_at_step_5)
    resumed, resumed_history = run("resumed", loss)
    assert [h["loss"] for h in resumed_history] == pytest.approx([h["loss"] for h in history], rel=1e-6)
    for a, b in zip(straight.parameters(), resumed.parameters(), strict=True):
        torch.testing.assert_close(a, b)


def test_bad_settings_raise(tokenizer):
    with pytest.raises(ValueError, match="objective"):
        MlmLoss("splade")
    with pytest.raises(ValueError, match="multiple"):
        bert_mlm(tokenizer, BertSize(hidden_size=30, num_heads=4))
    with pytest.raises(ValueError, match="no non-empty"):
        MlmBatches(["", ""], tokenizer, batch_size=2, max_length=16)


def test_cli_pretrains_on_a_real_collection_slice_and_resumes(tmp_path, irds_home):
    import json

    from pyterrier_tite.cli import main

    out = tmp_path / "cli"
    flags = ["pretrain-mlm", "--dataset", "cranfield", "--output-dir", str(out), "--vocab-size", "1000",
             "--max-docs", "100", "--hidden-size", "32", "--layers", "1", "--heads", "2", "--intermediate-size", "64",
             "--max-length", "48", "--batch-size", "8", "--quiet", "--save-every", "2"]  # fmt: skip
    assert main([*flags, "--max-steps", "3"]) == 0
    assert main([*flags, "--max-steps", "5"]) == 0  # continues from the step-3 checkpoint with the same vocabulary
    log = [json.loads(line) for line in open(out / "log.jsonl")]
    assert [h["step"] for h in log] == [1, 2, 3, 4, 5]
    assert {"mlm", "mlm_splade", "flops"} <= set(log[-1])
    assert (out / "model.safetensors").exists() and (out / "tokenizer" / "tokenizer_config.json").exists()


@pytest.mark.slow
def test_cli_pretrain_mlm_under_torchrun_two_processes(tmp_path, irds_home):
    """``torchrun -m pyterrier_tite pretrain-mlm``: rank 0 trains the vocabulary once, both ranks train on their shard,
    rank 0 saves a loadable model whose vocabulary is the trained one."""
    import json

    from _torchrun import torchrun
    from transformers import AutoTokenizer, BertForMaskedLM

    out = tmp_path / "ddp"
    torchrun(
        "-m", "pyterrier_tite", "pretrain-mlm", "--dataset", "cranfield", "--output-dir", str(out),
        "--vocab-size", "600", "--max-docs", "64", "--hidden-size", "32", "--layers", "1", "--heads", "2",
        "--intermediate-size", "64", "--max-length", "32", "--batch-size", "4", "--max-steps", "3", "--quiet",
        "--threads", "1",
    )  # fmt: skip
    log = [json.loads(line) for line in open(out / "log.jsonl")]
    assert [h["step"] for h in log] == [1, 2, 3]
    tokenizer = AutoTokenizer.from_pretrained(out / "tokenizer")
    model = BertForMaskedLM.from_pretrained(out)
    assert model.config.vocab_size == len(tokenizer) <= 600
