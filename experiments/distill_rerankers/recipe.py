"""The ``distill-rerankers`` study: cross-encoders (MonoCE, SparseCE with any window, CELI) trained from one start
point with the same data, steps and seeds, taught by the offline teacher, and compared in one table.

The recipe: training queries (MS MARCO dev/small, optionally Inverse-Cloze pseudo-queries ``ict:<collection>``) with
BM25 candidates, scored by :class:`~experiments.common.offline_teacher.OfflineTeacher` (norm-sum of all-MiniLM-L6-v2 and
the shipped 2-layer SPLADE); every model variant x seed is trained with MarginMSE against those scores
(:mod:`experiments.distill_rerankers.data`) into ``<output-dir>/<variant>/seed-<seed>``; finally every
variant re-ranks BM25 on each evaluation collection (:func:`~experiments.common.rerank_experiment.rerank_experiment`:
mean ± std over seeds, paired t-tests). A rerun skips finished models, resumes unfinished ones, reuses the teacher's
document vectors and reads back the scores of every model that an earlier evaluation scored
(``<output-dir>/score-cache``, :mod:`experiments.common.score_cache`; a retrained model is scored again).

    python -m experiments.distill_rerankers --config experiments/distill_rerankers/config.toml
    python -m experiments.distill_rerankers --models mono,sparse-w4 --seeds 1,2,3 --output-dir runs/rerankers
"""

from __future__ import annotations

import argparse
import os
import re

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
from pyterrier_tite.cli.flags import add_training_arguments, training_arguments

DEFAULT_MODELS = "mono,sparse-w4"
DEFAULT_SOURCES = "msmarco-passage/dev/small"  # training queries (data.DEFAULT_SOURCES)
DEFAULT_EVALUATION = "dl19,dl20,scifact,vaswani,cranfield,cisi,cacm"
_VARIANT = re.compile(r"^(mono|celi-mono|(sparse|celi)-w(\d+|inf)(-sym)?)$")
_VARIANTS = "mono, sparse-w<k|inf>[-sym], celi-mono or celi-w<k|inf>[-sym]"


def parse_variant(name: str) -> dict:
    """``mono`` | ``sparse-w<k|inf>`` | ``celi-mono`` | ``celi-w<k|inf>`` -> the reranker's class and settings; a
    ``-sym`` suffix lets a sparse model's query attend to [CLS] and the document (``symmetric=True``)."""
    match = _VARIANT.match(name)
    if not match:
        raise ValueError(f"unknown model {name!r}: expected {_VARIANTS}")
    if name == "mono":
        return {"kind": "MonoCE"}
    if name == "celi-mono":
        return {"kind": "CELI", "sparse": False}
    family, window, symmetric = match.group(2), match.group(3), match.group(4)
    w = None if window == "inf" else int(window)
    spec = {"kind": "SparseCE", "w": w} if family == "sparse" else {"kind": "CELI", "sparse": True, "w": w}
    return {**spec, "symmetric": True} if symmetric else spec


def comparisons(variants: list[str]) -> dict[str, list[str]]:
    """What each variant is tested against: BM25; a windowed SparseCE also against the widest attention of the same
    query pattern in the run (full attention, ``sparse-winf``, when it is trained; so a window sweep pairs every window
    with it); a symmetric one (``-sym``) against its asymmetric twin; every SparseCE against MonoCE (``mono``) when
    it is trained (the paper's question: does the sparse pattern cost effectiveness?); CELI against the same backbone's
    [CLS] model (``celi-mono`` vs ``mono``, ``celi-w<k>`` vs ``sparse-w<k>``)."""
    sparse = [v for v in variants if v.startswith("sparse-w")]

    def width(variant: str) -> float:
        w = parse_variant(variant)["w"]
        return float("inf") if w is None else w

    def symmetric(variant: str) -> bool:
        return variant.endswith("-sym")

    widest = {s: max((v for v in sparse if symmetric(v) == s), key=width, default=None) for s in (False, True)}
    out = {}
    for v in variants:
        against = ["BM25"]
        if v in sparse and v != widest[symmetric(v)]:
            against.append(widest[symmetric(v)])
        if v in sparse and symmetric(v) and v[: -len("-sym")] in variants:
            against.append(v[: -len("-sym")])
        if v in sparse and "mono" in variants:
            against.append("mono")
        if v.startswith("celi-"):
            base = "mono" if v == "celi-mono" else "sparse-" + v[len("celi-") :]
            if base in variants:
                against.append(base)
        out[v] = against
    return out


def reference_folders(
    reference_dir: str, output_dir: str, variants: list[str], seeds: list[int], max_steps: int
) -> dict[tuple[str, int], str]:
    """(variant, seed) -> its model folder in ``reference_dir``: the same variants and seeds trained there with
    another recipe (e.g. other ``--sources``). Refused unless each one is trained to exactly ``max_steps``, since a
    comparison at another step count would not isolate the recipe's difference."""
    if os.path.realpath(reference_dir) == os.path.realpath(output_dir):
        raise SystemExit("--reference-dir must be another folder than --output-dir")
    folders = seed_folders(reference_dir, variants, seeds)
    steps = {path: finished_steps(path) for path in folders.values()}
    wrong = [f"{path} ({n} steps)" for path, n in steps.items() if n != max_steps]
    if wrong:
        raise SystemExit(f"--reference-dir needs every model trained to --max-steps {max_steps}: " + ", ".join(wrong))
    return folders


def reference_names(variants: list[str], reference_dir: str) -> dict[str, str]:
    """variant -> the table row of its counterpart in ``reference_dir``: ``<variant> @ <folder name>``."""
    label = os.path.basename(os.path.normpath(reference_dir))
    return {v: f"{v} @ {label}" for v in variants}


def build_variant(name: str, start: str, **kwargs):
    """A new reranker of the variant from ``start`` (fresh heads: seed torch first; the fresh-weights warning is
    silenced, since the recipe trains them next)."""
    import warnings

    from pyterrier_tite.pt.rerankers import CELI, MonoCE, SparseCE

    spec = parse_variant(name)
    kind = spec.pop("kind")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*new weights.*train before use")
        if kind == "MonoCE":
            return MonoCE(start, head="cls", **kwargs)
        if kind == "SparseCE":
            return SparseCE(start, head="cls", **spec, **kwargs)
        return CELI(start, **spec, **kwargs)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m experiments.distill_rerankers",
        description="Train cross-encoder variants with the same data, steps and seeds from an offline teacher "
        "(norm-sum of MiniLM and SPLADE), then compare them re-ranking BM25.",
    )
    parser.add_argument("--start", default="minilm", help="start point of every model ('minilm' or a BERT folder)")
    parser.add_argument(
        "--models",
        default=DEFAULT_MODELS,
        help=f"comma list of {_VARIANTS} (default {DEFAULT_MODELS})",
    )
    parser.add_argument("--seeds", default="42", help="comma list of seeds (one model per variant and seed)")
    parser.add_argument(
        "--sources", default=DEFAULT_SOURCES, help="training queries: msmarco-passage/dev/small and/or ict:<collection>"
    )
    parser.add_argument("--depth", type=int, default=30, help="BM25 candidates per training query")
    parser.add_argument("--max-queries", type=int, default=None, help="training queries per source (seeded sample)")
    parser.add_argument("--positives", type=int, default=3, help="the teacher's top-k that a group's positive is from")
    parser.add_argument("--negatives", type=int, default=7)
    parser.add_argument(
        "--train-doc-max-length",
        type=int,
        default=None,
        help="document tokens kept per training candidate (default: all the model reads); evaluation reads whole "
        "documents",
    )
    parser.add_argument("--queries-per-batch", type=int, default=4)
    parser.add_argument("--score-batch-size", type=int, default=64, help="pairs per forward pass when evaluating")
    parser.add_argument(
        "--evaluate",
        default=DEFAULT_EVALUATION,
        help=f"collections of the final table ('none': skip; default {DEFAULT_EVALUATION})",
    )
    parser.add_argument("--eval-depth", type=int, default=100, help="BM25 candidates re-ranked per test query")
    parser.add_argument("--no-teacher-row", action="store_true", help="leave the teacher out of the final table")
    parser.add_argument(
        "--reference-dir",
        default=None,
        help="another --output-dir with the same models and seeds trained to the same steps on other data: each is "
        "evaluated as '<variant> @ <folder name>' and paired with its counterpart",
    )
    add_training_arguments(parser, learning_rate=2e-4, max_steps=600, warmup_steps=50, batch_size=None, recipe=True)
    return parser


def main(argv: list[str] | None = None) -> int:
    from pyterrier_tite.cpu_allocator import keep_large_blocks

    args = parse_with_config(build_parser(), argv)
    keep_large_blocks()  # the study owns its process: large tensors reuse the heap (see cpu_allocator)
    return run(args)


def run(args: argparse.Namespace) -> int:
    import dataclasses

    import pandas as pd

    from experiments.common.offline_teacher import OfflineTeacher
    from experiments.common.rerank_experiment import rerank_experiment
    from experiments.common.training_bm25 import training_bm25
    from experiments.distill_rerankers.data import teacher_frame, teacher_labels, training_candidates
    from pyterrier_tite.pt.rerankers import CrossEncoderReranker
    from pyterrier_tite.start_points import resolve
    from pyterrier_tite.training.loop import seed_everything
    from pyterrier_tite.training.rerankers import train_reranker

    variants, seeds = variants_and_seeds(args.models, args.seeds, parse_variant)
    folder = seed_folders(args.output_dir, variants, seeds)
    reference = (
        reference_folders(args.reference_dir, args.output_dir, variants, seeds, args.max_steps)
        if args.reference_dir
        else {}
    )
    base = training_arguments(args)
    base.precision = recipe_precision(args)
    dtype = model_dtype(base.precision)
    start = resolve(args.start)
    teacher = OfflineTeacher.default(
        os.path.join(args.output_dir, "teacher-cache"), dtype=dtype, verbose=not args.quiet
    )
    todo = [key for key, path in folder.items() if finished_steps(path) < args.max_steps]
    if todo:
        pool = training_candidates(_names(args.sources), training_bm25, args.depth, args.max_queries, seed=42)
        scored = teacher(pool)
        qrels, scores = teacher_labels(scored, args.positives), teacher_frame(scored)
        print(f"{pool['qid'].nunique()} training queries, {len(pool)} candidates; precision {base.precision}")
    for variant, seed in todo:
        print(f"training {variant}, seed {seed} -> {folder[variant, seed]}")
        seed_everything(seed)  # the fresh head starts from the seed
        reranker = build_variant(variant, start)
        targs = dataclasses.replace(base, output_dir=folder[variant, seed], seed=seed)
        train_reranker(
            reranker,
            pool,
            qrels,
            targs,
            loss="margin_mse",
            negatives=args.negatives,
            queries_per_batch=args.queries_per_batch,
            teacher=scores,
            resume=not args.no_resume,
            doc_max_length=args.train_doc_max_length,
        )
    collections = _names(args.evaluate)
    if not collections:
        return 0
    model_folders = {v: [folder[v, s] for s in seeds] for v in variants}  # table row -> its model per seed
    against = comparisons(variants)
    if reference:
        for v, name in reference_names(variants, args.reference_dir).items():
            model_folders[name] = [reference[v, s] for s in seeds]
            against[v].append(name)
            against[name] = ["BM25"]
    systems = {
        name: [
            CrossEncoderReranker.from_pretrained(
                path, batch_size=args.score_batch_size, dtype=dtype, verbose=not args.quiet
            )
            for path in paths
        ]
        for name, paths in model_folders.items()
    }
    if not args.no_teacher_row:
        systems = {"teacher": [teacher], **systems}
        against["teacher"] = ["BM25"]
    table = rerank_experiment(
        systems, collections, depth=args.eval_depth, comparisons=against,
        score_cache=os.path.join(args.output_dir, "score-cache"), verbose=not args.quiet,
    )  # fmt: skip
    table["train min"] = table["name"].map({name: training_minutes(paths) for name, paths in model_folders.items()})
    table.to_csv(os.path.join(args.output_dir, "results.csv"), index=False)
    with pd.option_context("display.width", 200, "display.max_columns", None, "display.float_format", "{:.4f}".format):
        print(table.to_string(index=False))
    return 0
