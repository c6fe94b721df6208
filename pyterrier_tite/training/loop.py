"""One training loop for every model: AdamW, linear warm-up/decay, accumulation, clipping, checkpoints with exact
resume, a fixed seed, and data parallelism under ``torchrun``. It knows no model or loss: ``batches(epoch, rank,
world_size)`` is deterministic in its arguments (a resumed run sees the same data), ``loss_fn(model, batch, step)``
returns the loss or ``(loss, {name: float})``, and a resume under other ``recipe`` (loss settings) is refused.
Gradients are averaged by one all-reduce per step: ``DistributedDataParallel``'s hooks see ``forward`` calls only."""

from __future__ import annotations

import atexit
import json
import os
import random
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from pyterrier_tite.cpu_allocator import keep_large_blocks
from pyterrier_tite.devices import PRECISIONS, autocast
from pyterrier_tite.ops.dropout import use_fast_dropout

CHECKPOINT = "checkpoint"
STATE_FILE = "trainer_state.pt"
#: settings that shape the run's trajectory: a resume with other values would silently train something else
RUN_DEFINING = ("max_steps", "learning_rate", "weight_decay", "warmup_steps", "grad_accumulation", "max_grad_norm",
                "seed")  # fmt: skip

LossOutput = torch.Tensor | tuple[torch.Tensor, dict[str, float]]


@dataclass
class TrainingArguments:
    """Optimisation settings; ``max_steps`` counts optimizer steps (each ``grad_accumulation`` micro-batches)."""

    output_dir: str
    max_steps: int
    learning_rate: float = 2e-5
    weight_decay: float = 0.01
    warmup_steps: int = 0
    grad_accumulation: int = 1
    max_grad_norm: float | None = 1.0
    seed: int = 42
    save_every: int = 0
    log_every: int = 10
    verbose: bool = True
    precision: str = "fp32"  # fp32 | bf16 | fp16: autocast of the forward passes (devices.py); fp16 scales the loss

    def __post_init__(self) -> None:
        if self.max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {self.max_steps}")
        if self.grad_accumulation < 1:
            raise ValueError(f"grad_accumulation must be >= 1, got {self.grad_accumulation}")
        if self.warmup_steps < 0 or self.save_every < 0:
            raise ValueError("warmup_steps and save_every must be >= 0")
        if self.precision not in PRECISIONS:  # int8 is an inference-only precision of the re-rankers
            raise ValueError(f"precision must be one of {sorted(PRECISIONS)}, got {self.precision!r}")


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch (all devices) so a run is repeatable."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def epoch_rng(seed: int, epoch: int) -> random.Random:
    """The data order of one epoch, a function of (seed, epoch) only: a resumed run or another rank sees it too."""
    return random.Random(seed * 1_000_003 + epoch)


def distributed_context() -> tuple[int, int]:
    """``(rank, world_size)``; joins the process group when started by ``torchrun`` (``WORLD_SIZE`` > 1)."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1:
        return 0, 1
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo")
        atexit.register(leave_process_group, wait_for_others=False)  # see leave_process_group
    return dist.get_rank(), dist.get_world_size()


def leave_process_group(wait_for_others: bool = True) -> None:
    """Leave the ``torchrun`` process group, after a barrier when ``wait_for_others`` (not after an error: the others
    may never reach it). A gloo group left to static destructors now and then aborted a rank that had finished."""
    if not dist.is_initialized():
        return
    if wait_for_others:
        dist.barrier()
    dist.destroy_process_group()


@contextmanager
def main_process_first() -> Iterator[bool]:
    """Run the block on rank 0 first, then on the others (yields ``is_main``): rank 0 writes shared files (e.g. a
    tokenizer), the others load them instead of racing to write them."""
    rank, world_size = distributed_context()
    if rank != 0:
        dist.barrier()
    yield rank == 0  # an error on rank 0 skips the barrier: torchrun then stops the waiting ranks
    if rank == 0 and world_size > 1:
        dist.barrier()


def make_optimizer(model: nn.Module, args: TrainingArguments) -> torch.optim.Optimizer:
    """AdamW; biases and normalisation weights are not decayed (the usual BERT recipe)."""
    decayed: list[nn.Parameter] = []
    kept: list[nn.Parameter] = []
    for name, param in model.named_parameters():
        if param.requires_grad:
            if name.endswith(".bias") or "norm" in name.lower():
                kept.append(param)
            else:
                decayed.append(param)
    groups = [{"params": decayed, "weight_decay": args.weight_decay}, {"params": kept, "weight_decay": 0.0}]
    return torch.optim.AdamW([g for g in groups if g["params"]], lr=args.learning_rate)


def linear_schedule(optimizer: torch.optim.Optimizer, args: TrainingArguments) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warm-up to the peak rate, then linear decay to zero at ``max_steps``."""

    def factor(step: int) -> float:
        if step < args.warmup_steps:
            return (step + 1) / (args.warmup_steps + 1)
        return max(0.0, (args.max_steps - step) / max(1, args.max_steps - args.warmup_steps))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


class Trainer:
    """Runs ``args.max_steps`` optimizer steps of ``loss_fn`` over ``batches``. ``save_fn(model, path)`` writes a
    loadable model folder, for every checkpoint and the final model. The model's plain ``nn.Dropout`` modules are
    swapped in place for the counter-based CPU kernel (:func:`use_fast_dropout`)."""

    def __init__(
        self,
        model: nn.Module,
        batches: Callable[[int, int, int], Iterable],
        loss_fn: Callable[[nn.Module, object, int], LossOutput],
        save_fn: Callable[[nn.Module, str], None],
        args: TrainingArguments,
        recipe: dict | None = None,
    ):
        self.model = model
        self.recipe = dict(recipe or {})
        use_fast_dropout(model)
        self.batches = batches
        self.loss_fn = loss_fn
        self.save_fn = save_fn
        self.args = args
        self.rank, self.world_size = distributed_context()
        seed_everything(args.seed + self.rank)
        self.optimizer = make_optimizer(model, args)
        self.scheduler = linear_schedule(self.optimizer, args)
        self.device = next((p.device for p in model.parameters()), torch.device("cpu"))
        # fp16 gradients underflow without loss scaling; bf16 has fp32's range and needs none
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=args.precision == "fp16")
        self.step = 0
        self.epoch = 0
        self.batches_done_in_epoch = 0
        self.history: list[dict[str, float]] = []

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def checkpoint_dir(self) -> str:
        return os.path.join(self.args.output_dir, CHECKPOINT)

    def save_checkpoint(self) -> None:
        """Model, optimizer, schedule, data position and RNG states: resuming continues the same run exactly."""
        if not self.is_main:
            return
        os.makedirs(self.checkpoint_dir, exist_ok=True)
        state = {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict(),
            "step": self.step,
            "epoch": self.epoch,
            "batches_done_in_epoch": self.batches_done_in_epoch,
            "rng": {
                "python": random.getstate(),
                "numpy": _numpy_state_as_tensors(),
                "torch": torch.get_rng_state(),
                "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
            },
            "args": asdict(self.args),
            "recipe": self.recipe,
        }
        tmp = os.path.join(self.checkpoint_dir, STATE_FILE + ".tmp")
        torch.save(state, tmp)
        os.replace(tmp, os.path.join(self.checkpoint_dir, STATE_FILE))
        self.save_fn(self.model, os.path.join(self.checkpoint_dir, "model"))

    def load_checkpoint(self) -> bool:
        """Resume from ``output_dir/checkpoint`` when it exists; returns whether it did."""
        path = os.path.join(self.checkpoint_dir, STATE_FILE)
        if not os.path.exists(path):
            return False
        state = _load_resume_state(path)
        check_resumable(state.get("args", {}), self.args, state["step"], path)
        check_recipe(state.get("recipe"), self.recipe, path)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        if state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
        self.step, self.epoch = state["step"], state["epoch"]
        self.batches_done_in_epoch = state["batches_done_in_epoch"]
        random.setstate(state["rng"]["python"])
        _restore_numpy_state(state["rng"]["numpy"])
        torch.set_rng_state(state["rng"]["torch"])
        if state["rng"].get("cuda") is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["rng"]["cuda"])
        log_path = os.path.join(self.args.output_dir, "log.jsonl")
        self.history = _read_log(log_path)[: self.step]
        if self.is_main:  # steps after the checkpoint are redone: drop their lines
            with open(log_path, "w") as log:
                log.writelines(json.dumps(entry) + "\n" for entry in self.history)
        return True

    def _average_gradients(self) -> None:
        if self.world_size == 1:
            return
        grads = [p.grad for p in self.model.parameters() if p.grad is not None]
        if not grads:
            return
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat)
        flat /= self.world_size
        for g, mean in zip(grads, flat.split([g.numel() for g in grads]), strict=True):
            g.copy_(mean.view_as(g))

    def _micro_batches(self):
        """Endless micro-batches, epoch after epoch, skipping those a resumed run already consumed."""
        while True:
            produced = 0
            for index, batch in enumerate(self.batches(self.epoch, self.rank, self.world_size)):
                produced += 1
                if index < self.batches_done_in_epoch:
                    continue
                self.batches_done_in_epoch = index + 1
                yield batch
            if produced == 0:
                raise ValueError(f"the batch source yielded nothing for epoch {self.epoch} (rank {self.rank})")
            self.epoch += 1
            self.batches_done_in_epoch = 0

    def train(self, resume: bool = True) -> list[dict[str, float]]:
        """Train to ``max_steps`` (resuming if asked), save the final model and return the per-step log (``loss``,
        ``lr``, ``seconds`` and what ``loss_fn`` reported; also ``output_dir/log.jsonl``)."""
        from tqdm.auto import tqdm  # what pt.tqdm is, without importing PyTerrier into training

        args = self.args
        if self.device.type == "cpu":
            keep_large_blocks()  # each step's large tensors reuse the heap instead of fresh pages
        if self.is_main:
            os.makedirs(args.output_dir, exist_ok=True)
        resumed = resume and self.load_checkpoint()
        if not resumed and self.is_main:
            open(os.path.join(args.output_dir, "log.jsonl"), "w").close()
        if self.world_size > 1:  # every rank starts from rank 0's weights
            for tensor in self.model.state_dict().values():
                dist.broadcast(tensor, src=0)
        self.model.train()
        batches = self._micro_batches()
        bar = tqdm(
            total=args.max_steps, initial=self.step, desc="training", disable=not (args.verbose and self.is_main)
        )
        while self.step < args.max_steps:
            started = time.perf_counter()
            totals: dict[str, float] = {}
            for _ in range(args.grad_accumulation):
                with autocast(self.device, args.precision):
                    output = self.loss_fn(self.model, next(batches), self.step)
                loss, parts = output if isinstance(output, tuple) else (output, {})
                loss = loss.float()
                if not torch.isfinite(loss):
                    raise FloatingPointError(f"loss is {loss.item()} at step {self.step}")
                self.scaler.scale(loss / args.grad_accumulation).backward()
                for name, value in {"loss": loss.item(), **parts}.items():
                    totals[name] = totals.get(name, 0.0) + float(value) / args.grad_accumulation
            self._average_gradients()
            self.scaler.unscale_(self.optimizer)  # clipping sees the true gradients (no-op unless fp16)
            if args.max_grad_norm:
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), args.max_grad_norm)
            totals["lr"] = self.scheduler.get_last_lr()[0]
            scale = self.scaler.get_scale() if self.scaler.is_enabled() else None
            self.scaler.step(self.optimizer)
            self.scaler.update()
            if scale is None or self.scaler.get_scale() >= scale:  # fp16 skips a step with inf/nan gradients
                self.scheduler.step()
            self.optimizer.zero_grad(set_to_none=True)
            self.step += 1
            totals["step"] = self.step
            totals["seconds"] = round(time.perf_counter() - started, 4)
            self.history.append(totals)
            if self.is_main:
                with open(os.path.join(args.output_dir, "log.jsonl"), "a") as log:
                    log.write(json.dumps(totals) + "\n")
            bar.update(1)
            if args.log_every and self.step % args.log_every == 0:
                bar.set_postfix(loss=f"{totals['loss']:.4f}")
            if args.save_every and self.step % args.save_every == 0 and self.step < args.max_steps:
                self.save_checkpoint()
        bar.close()
        self.model.eval()
        if self.is_main:
            self.save_fn(self.model, args.output_dir)
            self.save_checkpoint()
        if self.world_size > 1:
            dist.barrier()
        return self.history


def _numpy_state_as_tensors() -> dict:
    """NumPy's global RNG state as tensors and numbers: what ``torch.load(weights_only=True)`` can read back."""
    name, keys, position, has_gauss, cached_gaussian = np.random.get_state()
    return {
        "name": name,
        "keys": torch.from_numpy(keys.astype(np.int64)),
        "position": int(position),
        "has_gauss": int(has_gauss),
        "cached_gaussian": float(cached_gaussian),
    }


def _restore_numpy_state(state: dict) -> None:
    keys = state["keys"].numpy().astype(np.uint32)
    np.random.set_state((state["name"], keys, state["position"], state["has_gauss"], state["cached_gaussian"]))


def _load_resume_state(path: str) -> dict:
    """The resume state, read without running pickled code (a planted file is refused in one line)."""
    from pyterrier_tite.models.checkpoint import CheckpointError

    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # UnpicklingError for refused globals, RuntimeError / EOFError for damaged files
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(
            f"{path}: not a resume state this version wrote ({reason[:200]}); delete the checkpoint folder "
            "to train from the start"
        ) from None
    if not isinstance(state, dict) or not {"step", "model", "rng"} <= set(state):
        raise CheckpointError(f"{path}: not a resume state (missing step, model or rng)")
    return state


def check_resumable(saved: dict, args: TrainingArguments, step: int, path: str) -> None:
    """A new ``max_steps`` re-plans the decay (with a warning); fewer steps than trained, or any other run-defining
    setting changed (the checkpoint's optimizer state would override it), is refused, never silently ignored."""
    if args.max_steps < step:
        raise ValueError(
            f"cannot resume {path}: it has trained {step} steps, more than --max-steps {args.max_steps}; "
            "pass --no-resume (resume=False) to start over or choose another output directory"
        )
    changed = {k: (saved[k], getattr(args, k)) for k in RUN_DEFINING if k in saved and saved[k] != getattr(args, k)}
    steps = changed.pop("max_steps", None)
    _refuse_changes(changed, "settings", path)
    if steps is not None:
        warnings.warn(
            f"resuming {path} at step {step} with max_steps {steps[0]} -> {steps[1]}: the learning-rate decay is "
            f"re-planned to reach zero at step {steps[1]}",
            stacklevel=3,
        )


def check_recipe(saved: dict | None, recipe: dict, path: str) -> None:
    """Other loss settings than the checkpoint's are refused; one that recorded none (older) resumes with a warning."""
    if saved is None:
        if recipe:
            warnings.warn(f"{path} records no loss settings; resuming with {recipe}", stacklevel=3)
        return
    keys = sorted(set(saved) | set(recipe))
    _refuse_changes({k: (saved.get(k), recipe.get(k)) for k in keys if saved.get(k) != recipe.get(k)},
                    "loss settings", path)  # fmt: skip


def _refuse_changes(changed: dict, what: str, path: str) -> None:
    """Raise naming each ``{name: (checkpoint's, now)}`` difference and the ways out."""
    if changed:
        listed = ", ".join(f"{k} {old!r} -> {new!r}" for k, (old, new) in changed.items())
        raise ValueError(
            f"cannot resume {path} with changed {what} ({listed}): rerun with the checkpoint's values to continue, "
            "pass --no-resume (resume=False) to start over, or choose another output directory"
        )


def training_seconds(output_dir: str) -> float | None:
    """Wall-clock seconds of the steps in ``output_dir/log.jsonl``; None when a row lacks them (an older log): a
    partial sum would understate."""
    rows = _read_log(os.path.join(output_dir, "log.jsonl"))
    if not rows or any("seconds" not in row for row in rows):
        return None
    return float(sum(row["seconds"] for row in rows))


def _read_log(path: str) -> list[dict[str, float]]:
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]
