"""CLI commands of the foundation: ``demo`` (the main job) and ``backends``."""

from __future__ import annotations

import argparse


def register(commands: argparse._SubParsersAction) -> None:
    demo = commands.add_parser("demo", help="pt.Experiment on a collection (default: vaswani), printed as a table")
    demo.add_argument("--dataset", default="vaswani", help="ir_datasets ID or alias (vaswani, cranfield, scifact, ...)")
    demo.add_argument(
        "--systems", type=system_names, default="bm25,splade,minilm",
        help="comma-separated subset of bm25, splade, minilm (default: all)",
    )  # fmt: skip
    demo.add_argument(
        "--rerank-depth", type=positive_int, default=50, help="BM25 results re-scored by MiniLM (default 50)"
    )
    demo.add_argument(
        "--models", type=folder, default=None,
        help="a folder of saved model folders (e.g. training outputs): one more row each",
    )  # fmt: skip
    demo.set_defaults(func=run_demo)

    backends = commands.add_parser("backends", help="list the kernel backends available on this machine")
    backends.set_defaults(func=print_backends)


def system_names(value: str) -> list[str]:
    """``--systems``: comma-separated names of demo systems, at least one, each known."""
    from pyterrier_tite.demo import SYSTEMS

    names = [name.strip() for name in value.split(",") if name.strip()]
    unknown = [name for name in names if name not in SYSTEMS]
    if unknown or not names:
        problem = f"unknown system {unknown[0]!r}" if unknown else f"{value!r} names no system"
        raise argparse.ArgumentTypeError(f"{problem}; choose one or more of {', '.join(SYSTEMS)}")
    return names


def positive_int(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {number}")
    return number


def folder(value: str) -> str:
    import os

    if not os.path.isdir(value):
        raise argparse.ArgumentTypeError(f"{value} is not a folder")
    return value


def run_demo(args: argparse.Namespace) -> int:
    import pandas as pd

    from pyterrier_tite.demo import run_demo as experiment

    table = experiment(args.dataset, systems=args.systems, rerank_depth=args.rerank_depth, models_dir=args.models)
    with pd.option_context("display.width", 200, "display.max_columns", None):
        print(f"\n{args.dataset}:\n{table.to_string(index=False)}")
    return 0


def print_backends(args: argparse.Namespace) -> int:
    import pyterrier_tite

    for op, names in pyterrier_tite.ops.backends().items():
        print(f"{op}: {', '.join(names)}")
    return 0
