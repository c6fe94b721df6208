"""What the recipe commands (``distill-tite``, ``distill-rerankers``, ``aggretriever-vs-cls``,
``splade-from-scratch``) share: comma lists, the variants x seeds they train, their precision, how a rerun
tells a finished model folder from an unfinished one, and the training time their tables report."""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable, Sequence


def names(value: str) -> list[str]:
    """A comma list (``''`` or ``'none'``: empty)."""
    return [] if value.strip().lower() in ("", "none") else [v.strip() for v in value.split(",") if v.strip()]


def variants_and_seeds(models: str, seeds: str, check: Callable[[str], object]) -> tuple[list[str], list[int]]:
    """``--models`` and ``--seeds`` parsed; ``check(variant)`` raises on an unknown one, so a typo is refused
    before any work."""
    variants = names(models)
    for variant in variants:
        check(variant)
    try:
        numbers = [int(s) for s in names(seeds)]
    except ValueError as exc:
        raise SystemExit(f"--seeds takes integers: {exc}") from exc
    if not variants or not numbers:
        raise SystemExit("--models and --seeds each need at least one entry")
    return variants, numbers


def seed_folders(output_dir: str, variants: list[str], seeds: list[int]) -> dict[tuple[str, int], str]:
    """(variant, seed) -> the model folder a recipe trains it into: ``<output-dir>/<variant>/seed-<seed>``."""
    return {(v, s): os.path.join(output_dir, v, f"seed-{s}") for v in variants for s in seeds}


def recipe_precision(args: argparse.Namespace) -> str:
    """``--precision``, else bf16 where the hardware computes it natively (GPU or CPU), else fp32."""
    from pyterrier_tite.devices import cpu_has_native_bf16, default_precision

    if args.precision:
        return args.precision
    gpu_default = default_precision(None)
    return "bf16" if gpu_default == "bf16" or cpu_has_native_bf16() else gpu_default


def model_dtype(precision: str) -> str:
    """The model ``dtype`` that evaluates in a training precision."""
    return {"bf16": "bfloat16", "fp16": "float16"}.get(precision, "float32")


def finished_steps(folder: str) -> int:
    """Optimizer steps a model folder's log records (0 when it holds no saved model)."""
    log = os.path.join(folder, "log.jsonl")
    if not (os.path.exists(os.path.join(folder, "model.safetensors")) and os.path.exists(log)):
        return 0
    with open(log) as f:
        return sum(1 for line in f if line.strip())


def training_minutes(folders: Sequence[str]) -> float:
    """Mean wall-clock training minutes of model folders (each summed from its log, resumes included); NaN when a
    folder's log does not record step times, so a table never shows a partial figure as the cost."""
    from pyterrier_tite.training.loop import training_seconds

    seconds = [training_seconds(folder) for folder in folders]
    if not seconds or any(s is None for s in seconds):
        return math.nan
    return sum(seconds) / len(seconds) / 60
