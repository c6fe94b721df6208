"""The shared training loop: it learns, accumulation equals a bigger batch, resume is exact, torchrun averages."""

from __future__ import annotations

import json
import os
import textwrap

import pytest
import torch
from _torchrun import torchrun
from torch import nn

from pyterrier_tite.training.loop import Trainer, TrainingArguments, check_recipe, training_seconds

TRUE_W = torch.tensor([[1.5, -2.0, 0.5]])


def batches_of(size: int):
    """Deterministic regression data per (epoch, rank, world): rank r takes every world-th example."""

    def batches(epoch: int, rank: int, world_size: int):
        gen = torch.Generator().manual_seed(1000 + epoch)
        x = torch.randn(16, 3, generator=gen)
        x = x[rank::world_size]
        for i in range(0, len(x), size):
            yield x[i : i + size]

    return batches


def mse(model: nn.Module, x: torch.Tensor, step: int):
    loss = (model(x) - x @ TRUE_W.T).pow(2).mean()
    return loss, {"half": loss.item() / 2}


def save(model: nn.Module, path: str) -> None:
    os.makedirs(path, exist_ok=True)
    torch.save(model.state_dict(), os.path.join(path, "weights.pt"))


def make_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Linear(3, 1)


def run(
    tmp_path, name: str, size: int, accumulation: int = 1, steps: int = 6, loss_fn=mse, lr: float = 0.05, **kwargs
) -> tuple[nn.Module, list]:
    model = make_model()
    args = TrainingArguments(
        str(tmp_path / name),
        max_steps=steps,
        learning_rate=lr,
        grad_accumulation=accumulation,
        verbose=False,
        warmup_steps=2,
        **kwargs,
    )
    history = Trainer(model, batches_of(size), loss_fn, save, args).train()
    return model, history


def test_loss_goes_down_and_log_is_written(tmp_path):
    _, history = run(tmp_path, "a", size=4, steps=40, lr=0.3)
    assert history[-1]["loss"] < 0.1 * history[0]["loss"]
    assert history[0]["half"] == pytest.approx(history[0]["loss"] / 2)
    assert os.path.exists(tmp_path / "a" / "weights.pt")
    with open(tmp_path / "a" / "log.jsonl") as f:
        assert len(f.readlines()) == 40


def test_accumulation_equals_bigger_batch(tmp_path):
    big, _ = run(tmp_path, "big", size=4, accumulation=1)
    small, _ = run(tmp_path, "small", size=2, accumulation=2)
    for a, b in zip(big.parameters(), small.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


def test_resume_continues_the_same_run(tmp_path):
    straight, history = run(tmp_path, "straight", size=3, steps=8)

    def crash_at_step_5(model, batch, step):
        if step == 5:
            raise KeyboardInterrupt
        return mse(model, batch, step)

    with pytest.raises(KeyboardInterrupt):  # checkpoints at steps 3 (kept) and would at 6
        run(tmp_path, "resumed", size=3, steps=8, loss_fn=crash_at_step_5, save_every=3)
    resumed, resumed_history = run(tmp_path, "resumed", size=3, steps=8, save_every=3)
    for a, b in zip(straight.parameters(), resumed.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert [h["loss"] for h in resumed_history] == pytest.approx([h["loss"] for h in history])


def test_log_records_step_times_and_their_sum_survives_a_resume(tmp_path):
    """Every log row carries its step's wall time; a resumed run's training time sums all its steps, the steps
    redone after the checkpoint counted once (their rows were dropped)."""

    def crash_at_step_3(model, batch, step):
        if step == 3:
            raise KeyboardInterrupt
        return mse(model, batch, step)

    with pytest.raises(KeyboardInterrupt):  # checkpoint at step 2, rows of steps 1-3 written
        run(tmp_path, "a", size=3, steps=6, loss_fn=crash_at_step_3, save_every=2)
    run(tmp_path, "a", size=3, steps=6, save_every=2)  # resumes at step 2: step 3 is redone
    rows = [json.loads(line) for line in open(tmp_path / "a" / "log.jsonl")]
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6] and all(r["seconds"] > 0 for r in rows)
    assert training_seconds(str(tmp_path / "a")) == pytest.approx(sum(r["seconds"] for r in rows))
    assert training_seconds(str(tmp_path / "nothing")) is None
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "log.jsonl").write_text('{"step": 1, "seconds": 2.0}\n{"step": 2}\n')
    assert training_seconds(str(tmp_path / "old")) is None  # a log from before step times: no partial sum


@pytest.mark.parametrize(
    ("change", "named"),
    [({"lr": 0.01}, "learning_rate 0.05 -> 0.01"), ({"steps": 2}, "trained 4 steps"), ({"seed": 7}, "seed 42 -> 7")],
)
def test_resume_with_changed_settings_is_refused_by_name(tmp_path, change, named):
    run(tmp_path, "a", size=3, steps=4)
    with pytest.raises(ValueError, match=named) as raised:
        run(tmp_path, "a", size=3, **{"steps": 4, **change})
    assert "no-resume" in str(raised.value)
    model, history = run(tmp_path, "a", size=3, steps=4)  # the same settings resume (nothing left to do)
    assert len(history) == 4


def test_resume_with_more_steps_trains_on_and_says_the_schedule_changed(tmp_path):
    run(tmp_path, "a", size=3, steps=4)
    with pytest.warns(UserWarning, match="max_steps 4 -> 6"):
        _, history = run(tmp_path, "a", size=3, steps=6)
    assert [h["step"] for h in history] == [1, 2, 3, 4, 5, 6]


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_low_precision_training_lowers_the_loss_like_fp32(tmp_path, precision):
    """Autocast forward passes (fp16 with loss scaling) learn the same regression as fp32, to bf16 accuracy."""
    model32, fp32 = run(tmp_path, "fp32", size=4, steps=40, lr=0.3)
    model, low = run(tmp_path, precision, size=4, steps=40, lr=0.3, precision=precision)
    assert low[-1]["loss"] < 0.1 * low[0]["loss"]
    assert low[-1]["loss"] == pytest.approx(fp32[-1]["loss"], abs=0.05 * fp32[0]["loss"])
    torch.testing.assert_close(model.weight, model32.weight, atol=0.1, rtol=0)  # fp16 skips its first overflowing steps


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="max_steps"):
        TrainingArguments("x", max_steps=0)
    with pytest.raises(ValueError, match="grad_accumulation"):
        TrainingArguments("x", max_steps=1, grad_accumulation=0)
    with pytest.raises(ValueError, match="precision must be one of"):
        TrainingArguments("x", max_steps=1, precision="int8")


SCRIPT = textwrap.dedent(
    """
    import atexit, os, sys, torch
    import torch.distributed as dist
    def group_left_at_exit():  # registered first, so it runs after the library's own exit hook
        with open(os.path.join({out!r} + "-exit", os.environ["RANK"]), "w") as f:
            f.write(str(dist.is_initialized()))
    atexit.register(group_left_at_exit)
    sys.path.insert(0, {tests!r})
    from test_training_loop import batches_of, make_model, mse, save
    from pyterrier_tite.training.loop import Trainer, TrainingArguments
    model = make_model()
    args = TrainingArguments({out!r}, max_steps=5, learning_rate=0.05, warmup_steps=2, verbose=False)
    Trainer(model, batches_of(2), mse, save, args).train()
    """
)


def test_torchrun_two_processes_average_gradients(tmp_path):
    """2 gloo processes with 2 examples each take the same steps as 1 process with the 4 examples together."""
    script = tmp_path / "ddp.py"
    script.write_text(SCRIPT.format(tests=os.path.dirname(__file__), out=str(tmp_path / "ddp")))
    (tmp_path / "ddp-exit").mkdir()
    torchrun(str(script))
    # each rank tore its gloo group down before the interpreter's exit (left to static destructors, a rank that had
    # finished aborted now and then: "terminate called without an active exception")
    assert {p.name: p.read_text() for p in (tmp_path / "ddp-exit").iterdir()} == {"0": "False", "1": "False"}
    single, _ = run(tmp_path, "single", size=4, steps=5)
    ddp_state = torch.load(tmp_path / "ddp" / "weights.pt")
    for name, value in single.state_dict().items():
        torch.testing.assert_close(ddp_state[name], value, rtol=1e-5, atol=1e-6)


def test_loss_settings_are_checked_on_resume_and_unrecorded_ones_are_named():
    check_recipe({"kl": 1.0, "anchor": 1.0}, {"anchor": 1.0, "kl": 1.0}, "ckpt")  # the same: resumes
    with pytest.raises(ValueError, match=r"changed loss settings \(anchor 1.0 -> 0.0, hidden None -> 2.0\)"):
        check_recipe({"kl": 1.0, "anchor": 1.0}, {"kl": 1.0, "anchor": 0.0, "hidden": 2.0}, "ckpt")
    with pytest.warns(UserWarning, match="records no loss settings; resuming with"):
        check_recipe(None, {"anchor": 1.0}, "ckpt")  # a checkpoint from before recipes were recorded
    check_recipe(None, {}, "ckpt")  # a caller without a recipe: nothing to say


class _Planted:
    """A pickle that runs code when unpickled (writes a marker file)."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_resume_refuses_a_planted_pickle_without_running_it(tmp_path):
    """``output_dir/checkpoint/trainer_state.pt`` is data: one holding code is refused by name, never executed."""
    from pyterrier_tite.models.checkpoint import CheckpointError

    marker = tmp_path / "ran"
    folder = tmp_path / "out" / "checkpoint"
    folder.mkdir(parents=True)
    torch.save({"step": 1, "model": {}, "rng": _Planted(str(marker))}, folder / "trainer_state.pt")
    with pytest.raises(CheckpointError, match="trainer_state.pt"):
        run(tmp_path, "out", size=3, steps=2)
    assert not marker.exists()
