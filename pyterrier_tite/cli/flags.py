"""Optimisation flags shared by every training command, so ``train-*`` / ``pretrain*`` read the same way.

Long names follow ``TrainingArguments`` (``--output-dir``, ``--max-steps``, ``--learning-rate``); the short forms
``--output``, ``--steps`` and ``--lr`` are accepted as aliases.
"""

from __future__ import annotations

import argparse


def add_training_arguments(
    parser: argparse.ArgumentParser,
    *,
    learning_rate: float = 2e-5,
    max_steps: int = 100,
    warmup_steps: int = 10,
    batch_size: int | None = 8,
) -> None:
    """The flags of :class:`~pyterrier_tite.training.loop.TrainingArguments` plus threads, resume and quiet;
    ``batch_size=None`` leaves ``--batch-size`` to the command (e.g. when it means something else there)."""
    parser.add_argument(
        "--output-dir", "--output", dest="output_dir", required=True,
        help="output folder (checkpoint/ inside; a rerun resumes from it)",
    )  # fmt: skip
    parser.add_argument("--max-steps", "--steps", dest="max_steps", type=int, default=max_steps, help="optimizer steps")
    if batch_size is not None:
        parser.add_argument("--batch-size", type=int, default=batch_size)
    parser.add_argument("--learning-rate", "--lr", dest="learning_rate", type=float, default=learning_rate)
    parser.add_argument("--warmup-steps", type=int, default=warmup_steps, help="learning-rate warm-up")
    parser.add_argument("--grad-accumulation", type=int, default=1)
    parser.add_argument("--save-every", type=int, default=0, help="checkpoint every N steps (0: only at the end)")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads per process (default: torch's)")
    parser.add_argument("--no-resume", action="store_true", help="start over even if output-dir has a checkpoint")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def training_arguments(args: argparse.Namespace):
    """``TrainingArguments`` from the parsed flags (and ``--threads`` applied to torch)."""
    import torch

    from pyterrier_tite.training.loop import TrainingArguments

    if args.threads:
        torch.set_num_threads(args.threads)
    return TrainingArguments(
        output_dir=args.output_dir,
        max_steps=args.max_steps,
        learning_rate=args.learning_rate,
        warmup_steps=args.warmup_steps,
        grad_accumulation=args.grad_accumulation,
        save_every=args.save_every,
        seed=args.seed,
        verbose=not args.quiet,
    )
