"""Flags that several commands share, defined once so that they read the same everywhere. One name per concept
(``--model``, ``--dataset``, ``--output-dir`` a folder, ``--output`` a run file, ``-k`` / ``--depth``, ...); the
spellings they replaced still parse for one release (:func:`rename`)."""

from __future__ import annotations

import argparse


def add_training_arguments(
    parser: argparse.ArgumentParser,
    *,
    learning_rate: float = 2e-5,
    max_steps: int = 100,
    warmup_steps: int = 10,
    batch_size: int | None = 8,
    recipe: bool = False,
    batch_size_help: str = "training examples (queries or texts) per batch and process",
) -> None:
    """The flags of ``TrainingArguments`` plus threads, resume, quiet and precision (``recipe``: bf16 on CPUs with
    native bf16 too); ``batch_size=None`` leaves ``--batch-size`` to the command."""
    parser.add_argument("--output-dir", required=True, help="output folder (checkpoint/ inside; reruns resume from it)")
    parser.add_argument("--max-steps", type=int, default=max_steps, help="optimizer steps")
    if batch_size is not None:
        parser.add_argument("--batch-size", type=int, default=batch_size, help=batch_size_help)
    parser.add_argument("--learning-rate", type=float, default=learning_rate, help="peak learning rate")
    rename(parser, {"--output": "--output-dir", "--steps": "--max-steps", "--lr": "--learning-rate"})
    parser.add_argument("--warmup-steps", type=int, default=warmup_steps, help="learning-rate warm-up")
    parser.add_argument("--grad-accumulation", type=int, default=1, help="batches per optimizer step")
    parser.add_argument("--save-every", type=int, default=0, help="checkpoint every N steps (0: only at the end)")
    parser.add_argument("--seed", type=int, default=42, help="seed of initialisation, sampling, dropout and order")
    parser.add_argument("--no-resume", action="store_true", help="start over even if output-dir has a checkpoint")
    add_process_arguments(parser, threads_help="torch CPU threads per process (default: torch's)")
    add_precision_argument(parser, recipe=recipe)


def rename(parser: argparse.ArgumentParser, renamed: dict[str, str]) -> None:
    """Old spelling -> current flag: the old one still parses for one release (``cli.Parser``), never listed."""
    vars(parser).setdefault("renamed", {}).update(renamed)


def add_process_arguments(parser: argparse.ArgumentParser, threads_help: str) -> None:
    parser.add_argument("--threads", type=int, default=None, help=threads_help)
    parser.add_argument("--quiet", action="store_true", help="no progress bars")


def add_depth_argument(parser: argparse.ArgumentParser, k: int, help: str) -> None:
    parser.add_argument("-k", "--depth", dest="k", type=positive_int, default=k, help=help)


def positive_int(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {number}")
    return number


def add_length_arguments(
    parser: argparse.ArgumentParser, query_max_length: int | None = None, doc_max_length: int | None = None
) -> None:
    stored = "as stored with the model"
    parser.add_argument(
        "--query-max-length", type=int, default=query_max_length,
        help=f"word pieces per query (default: {query_max_length or stored})",
    )  # fmt: skip
    parser.add_argument(
        "--doc-max-length", type=int, default=doc_max_length,
        help=f"word pieces per document (default: {doc_max_length or stored + ', else all the model reads'})",
    )  # fmt: skip


def add_precision_argument(parser: argparse.ArgumentParser, recipe: bool = False) -> None:
    parser.add_argument(
        "--precision", choices=["fp32", "bf16", "fp16"], default=None,
        help="autocast precision (default: bf16 where the GPU or CPU computes it natively, else fp32)" if recipe
        else "autocast precision (default: bf16 on GPUs that support it, else fp32)",
    )  # fmt: skip


def apply_process_arguments(args: argparse.Namespace) -> None:
    """``--threads`` to torch; ``--quiet`` also to transformers' bars and ir_datasets' INFO lines (ir_datasets sets
    a level on each of its loggers: only a process-wide switch reaches them all; the command owns its process)."""
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    if args.quiet:
        import logging as std_logging

        from transformers.utils import logging

        logging.disable_progress_bar()
        std_logging.disable(std_logging.INFO)


def flag_values(args: argparse.Namespace, *names: str) -> dict:
    """The named flags as keyword arguments; a ``no_x`` switch as ``x=not no_x``."""
    return {
        name.removeprefix("no_"): (not getattr(args, name)) if name.startswith("no_") else getattr(args, name)
        for name in names
    }


#: the training flags that are :class:`~pyterrier_tite.training.loop.TrainingArguments` fields of the same name
TRAINING_FLAGS = ("output_dir", "max_steps", "learning_rate", "warmup_steps", "grad_accumulation", "save_every", "seed")


def model_options(args: argparse.Namespace) -> dict:
    return flag_values(args, "device", "batch_size", "precision")


def training_arguments(args: argparse.Namespace):
    """``TrainingArguments`` from the flags, with ``--threads`` / ``--quiet`` applied."""
    from pyterrier_tite.devices import default_precision
    from pyterrier_tite.training.loop import TrainingArguments

    apply_process_arguments(args)
    precision = args.precision or default_precision(getattr(args, "device", None))
    return TrainingArguments(**flag_values(args, *TRAINING_FLAGS), verbose=not args.quiet, precision=precision)


def add_runtime_arguments(parser: argparse.ArgumentParser, writes: str) -> None:
    """The flags of every batch command; ``writes``: what ``--overwrite`` replaces."""
    parser.add_argument("--overwrite", action="store_true", help=f"replace {writes}")
    parser.add_argument("--device", default=None, help="torch device, e.g. cpu, cuda, cuda:1 (default: cuda if any)")
    parser.add_argument("--batch-size", type=int, default=None, help="texts per model call (default: the model's own)")
    add_process_arguments(parser, threads_help="torch CPU threads and PISA threads")
    add_precision_argument(parser)


def apply_runtime_arguments(args: argparse.Namespace) -> None:
    """Check ``--batch-size``, ``--threads`` and ``--device`` before any work, then apply the process flags."""
    for flag in ("batch_size", "threads"):
        value = getattr(args, flag, None)
        if value is not None and value < 1:
            raise SystemExit(f"--{flag.replace('_', '-')} must be at least 1, got {value}")
    if getattr(args, "device", None):
        from pyterrier_tite.devices import device_problem

        problem = device_problem(args.device)
        if problem is not None:
            raise ValueError(f"--device {args.device}: {problem}; or use --device cpu")
    apply_process_arguments(args)


def add_evaluation_data_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--allow-evaluation-data", action="store_true",
        help="train on the queries and qrels of evaluation data (a collection the results are reported on: vaswani, "
        "cranfield, cisi, cacm, scifact = beir/scifact/test, TREC DL; or any test / dev / trec-dl split): refused "
        "without this flag; said at run time and recorded in the model card. A bare ID holding several splits "
        "(beir/scifact) means its train split",
    )  # fmt: skip


def checked_training_data(args: argparse.Namespace, name: str, uses: str = "labels") -> str:
    """The dataset to read (a bare ID's train split), checked before any model is loaded; evaluation data let through
    is noted in ``args.evaluation_data`` for the model card."""
    from pyterrier_tite import datasets

    allow = getattr(args, "allow_evaluation_data", False)
    dataset = datasets.check_training_data(name, uses=uses, allow=allow)
    reason = datasets.evaluation_reason(dataset)
    if reason:
        if uses == "documents":
            note = f"{datasets.training_id(dataset)}: documents only (no queries or qrels)"
        else:
            fold = getattr(args, "hold_out_fold", None)
            queries = f"queries outside fold {fold} (its fold {fold.split('/')[0]} held out)" if fold else "queries"
            note = f"{datasets.training_id(dataset)}: {queries} and qrels, {reason} (--allow-evaluation-data)"
        args.evaluation_data = [*getattr(args, "evaluation_data", []), note]
    return dataset
