"""The ``distill-tite`` study: TITE as a drop-in accelerator of an existing bi-encoder.

The recipe: insert pooling into the teacher's own BERT (``TITE.from_bert``: same tokenizer, lengths and cosine, no
markers), then train it to reproduce the teacher's vectors on unlabelled text of the mirrored collections
(:mod:`experiments.distill_tite.vector_distillation`, texts from :mod:`experiments.distill_tite.texts`), and end with
one ``pt.Experiment`` per collection: BM25, the teacher, the undistilled start and the distilled TITE, with a paired
t-test against the teacher. A rerun resumes the training and reuses the cached teacher vectors and indexes.

    python -m experiments.distill_tite --config experiments/distill_tite/config.toml --output-dir runs/distill/tite
    python -m experiments.distill_tite --output-dir runs/distill/tite --max-steps 500 --max-docs 2000 --max-queries 2000
"""

from __future__ import annotations

import argparse
import os

from experiments.common.config import parse_with_config
from experiments.common.recipes import model_dtype, recipe_precision, training_minutes
from experiments.common.recipes import names as _names
from pyterrier_tite.cli.flags import add_training_arguments, training_arguments
from pyterrier_tite.start_points import resolve

DEFAULT_EVALUATION = "scifact,vaswani,cranfield-graded,dl19,dl20"
DEFAULT_STRUCTURE = "0/2/0/2/2/g"  # for a 6-layer teacher (MiniLM): layers 2, 4 and 5 halve the rows, 6 pools the rest
DEFAULT_POOLING_LAYERS = 4  # the late arrangement's layers: for --kernel/--arrangement and teachers of other depths
DEFAULT_QUERY_ENCODER = "teacher"  # the teacher encodes the queries of the saved and evaluated model
DEFAULT_ANCHOR_WEIGHT = 1.0  # the KL against the bank of the teacher's query vectors
#: the distilled student's name in the final tables: its evaluation indexes are cached under it (diagnostics reads them)
STUDENT_LABEL = "TITE, distilled"


def teacher_label(teacher: str) -> str:
    """The teacher's name in the final tables (and of its cached evaluation indexes) for ``--teacher``."""
    return f"teacher ({os.path.basename(os.path.normpath(teacher))})"


def build_parser() -> argparse.ArgumentParser:
    from experiments.distill_tite.texts import DEFAULT_COLLECTIONS, DEFAULT_QUERY_SETS

    parser = argparse.ArgumentParser(
        prog="python -m experiments.distill_tite",
        description="Distil a bi-encoder (default all-MiniLM-L6-v2) into a faster TITE made from its own BERT, on "
        "unlabelled text, then compare both with BM25 in pt.Experiment tables.",
    )
    parser.add_argument("--teacher", default="minilm", help="'minilm' or a sentence-transformers / BERT folder")
    parser.add_argument(
        "--structure", default=None,
        help="pooling placed per layer, one entry per layer: 0 none, a kernel (= stride), 'g' global (default for a "
        f"{DEFAULT_STRUCTURE.count('/') + 1}-layer teacher {DEFAULT_STRUCTURE}; not with the three flags below)",
    )  # fmt: skip
    parser.add_argument(
        "--pooling-layers", type=int, default=None,
        help=f"the last N layers pool instead (the late arrangement; default with --kernel/--arrangement or a teacher "
        f"of another depth: {DEFAULT_POOLING_LAYERS})",
    )  # fmt: skip
    parser.add_argument("--kernel", type=int, default=None, help="kernel = stride of the pooling layers (default 2)")
    parser.add_argument("--arrangement", choices=["late", "staggered"], default=None, help="default: late")
    parser.add_argument("--collections", default=",".join(DEFAULT_COLLECTIONS), help="documents (comma list)")
    parser.add_argument("--queries", default=",".join(DEFAULT_QUERY_SETS), help="training-split query sets")
    parser.add_argument("--no-pseudo-queries", action="store_true", help="no Inverse-Cloze pseudo-queries")
    parser.add_argument("--max-docs", type=int, default=None, help="documents per collection (seeded sample)")
    parser.add_argument("--max-queries", type=int, default=None, help="queries per query set (seeded sample)")
    parser.add_argument("--cosine-weight", type=float, default=1.0, help="weight of 1 - cos(student, teacher)")
    parser.add_argument("--kl-weight", type=float, default=1.0, help="weight of the in-batch similarity KL")
    parser.add_argument("--temperature", type=float, default=0.05, help="of the KL terms (MiniLM's training scale)")
    parser.add_argument(
        "--anchor-weight", type=float, default=DEFAULT_ANCHOR_WEIGHT,
        help="weight of the KL of the documents' scores against a bank of the teacher's query vectors (every query "
        "and pseudo-query of the texts); 0: off",
    )  # fmt: skip
    parser.add_argument(
        "--query-encoder", choices=["teacher", "tite"], default=DEFAULT_QUERY_ENCODER,
        help="what encodes the queries of the saved and evaluated model: the teacher (kept in the checkpoint's "
        "query_encoder/) or TITE itself (one model at TITE's speed on both sides)",
    )  # fmt: skip
    parser.add_argument(
        "--documents-only", action="store_true",
        help="train TITE's document vectors only, against the teacher's query vectors (cheaper steps; needs "
        "--query-encoder teacher)",
    )  # fmt: skip
    parser.add_argument("--teacher-batch-size", type=int, default=64, help="texts per call of the teacher")
    parser.add_argument(
        "--evaluate", default=DEFAULT_EVALUATION,
        help=f"collections of the final tables ('none': skip; default {DEFAULT_EVALUATION})",
    )  # fmt: skip
    add_training_arguments(parser, learning_rate=1e-4, max_steps=2000, warmup_steps=100, batch_size=32, recipe=True,
                           batch_size_help="text groups per step (a document with its pseudo-query, or a query)")
    return parser


def main(argv: list[str] | None = None) -> int:
    from pyterrier_tite.cpu_allocator import keep_large_blocks

    args = parse_with_config(build_parser(), argv)
    keep_large_blocks()  # the study owns its process: large tensors reuse the heap (see cpu_allocator)
    return run(args)


def build_teacher(args: argparse.Namespace, **kwargs):
    """The teacher bi-encoder (its folder's pooling, normalisation and lengths); markers are refused."""
    from pyterrier_tite.pt.bert_biencoder import BertBiEncoder

    teacher = BertBiEncoder.from_pretrained(resolve(args.teacher), **kwargs)
    if teacher.query_marker or teacher.doc_marker:
        raise SystemExit("a teacher with marker tokens is not supported: its TITE would need the same markers")
    return teacher


def build_student(args: argparse.Namespace, teacher, **kwargs):
    """A TITE from the teacher's BERT with the teacher's inputs (no markers, same lengths) and similarity; with
    ``--query-encoder teacher`` the teacher encodes its queries."""
    from pyterrier_tite.pt.tite import TITE

    max_length = max(teacher.query_max_length, teacher.doc_max_length)
    structure = student_structure(args, max_length, teacher.text_encoder.model.config.num_hidden_layers)
    return TITE.from_bert(
        resolve(args.teacher), structure, query_marker=None, doc_marker=None, normalize=teacher.normalize,
        query_max_length=teacher.query_max_length, doc_max_length=teacher.doc_max_length,
        query_model=teacher if getattr(args, "query_encoder", "tite") == "teacher" else None, **kwargs,
    )  # fmt: skip


def student_structure(args: argparse.Namespace, max_length: int, num_layers: int) -> dict:
    """``tite_from_bert``'s pooling options from the flags (``pooling_from_flags``: ``DEFAULT_STRUCTURE`` where no
    flag is given and the teacher is as deep, else the late arrangement)."""
    from pyterrier_tite.models.tite.from_bert import pooling_from_flags

    flags = {name: getattr(args, name, None) for name in ("structure", "pooling_layers", "kernel", "arrangement")}
    return {**pooling_from_flags(num_layers, DEFAULT_STRUCTURE, DEFAULT_POOLING_LAYERS, **flags),
            "max_length": max_length}  # fmt: skip


def check_resumed_structure(output_dir: str, config) -> None:
    """Refuse to resume a checkpoint whose pooling differs from the student's: pooling has no weights of its own, so
    the checkpoint would load without error into another structure and train a model nobody asked for."""
    import json

    path = os.path.join(output_dir, "checkpoint", "model", "config.json")
    if not os.path.exists(path):
        return
    with open(path) as f:
        saved = json.load(f)
    if (saved.get("kernel_sizes"), saved.get("strides")) != (list(config.kernel_sizes), list(config.strides)):
        from pyterrier_tite.models.tite.from_bert import format_structure

        raise SystemExit(
            f"cannot resume {path}: its pooling is {format_structure(saved['kernel_sizes'], saved['strides'])}, the "
            f"flags ask for {format_structure(config.kernel_sizes, config.strides)}; rerun with the checkpoint's "
            "structure, pass --no-resume to start over, or choose another output directory"
        )


def run(args: argparse.Namespace) -> int:
    import pandas as pd

    from experiments.common.dense_experiment import dense_experiment
    from experiments.distill_tite.texts import collect_distillation_texts
    from experiments.distill_tite.vector_distillation import DistillationWeights, distill_vectors, teacher_vectors
    from pyterrier_tite.pt.tite import TITE

    if args.documents_only and args.query_encoder != "teacher":
        raise SystemExit("--documents-only leaves TITE's query vectors untrained: it needs --query-encoder teacher")
    if args.structure and (args.pooling_layers, args.kernel, args.arrangement) != (None, None, None):
        raise SystemExit("--structure places every pooling layer: not with --pooling-layers, --kernel or --arrangement")
    targs = training_arguments(args)
    targs.precision = recipe_precision(args)
    teacher = build_teacher(args, batch_size=args.teacher_batch_size)
    try:
        student = build_student(args, teacher)
    except ValueError as error:  # a malformed structure, or one that does not fit the teacher's layers or lengths
        if not args.structure:
            raise
        raise SystemExit(f"--structure {args.structure}: {error}") from None
    if not args.no_resume:
        check_resumed_structure(args.output_dir, student.text_encoder.model.config)
    data = collect_distillation_texts(
        _names(args.collections), _names(args.queries), pseudo_queries=not args.no_pseudo_queries,
        max_docs=args.max_docs, max_queries=args.max_queries, seed=args.seed,
    )  # fmt: skip
    print(f"{len(data)} texts ({data.roles.count('doc')} documents) in {len(data.groups)} groups; "
          f"precision {targs.precision}")  # fmt: skip
    if args.anchor_weight and "query" not in data.roles:
        raise SystemExit("--anchor-weight needs queries or pseudo-queries in the texts; add some or pass "
                         "--anchor-weight 0")  # fmt: skip
    targets = teacher_vectors(
        teacher.text_encoder, data, os.path.join(args.output_dir, "teacher-vectors"),
        batch_size=args.teacher_batch_size, precision=targs.precision, verbose=not args.quiet,
    )  # fmt: skip
    weights = DistillationWeights(cosine=args.cosine_weight, kl=args.kl_weight, temperature=args.temperature,
                                  anchor=args.anchor_weight)  # fmt: skip
    log = distill_vectors(student.text_encoder, data, targets, targs, student.save_pretrained,
                          batch_size=args.batch_size, weights=weights, resume=not args.no_resume,
                          documents_only=args.documents_only)  # fmt: skip
    if log:
        print(f"distilled {len(log)} steps; last loss {log[-1]['loss']:.4f} -> {args.output_dir}")
    collections = _names(args.evaluate)
    if not collections:
        return 0
    dtype = model_dtype(targs.precision)
    teacher = build_teacher(args, batch_size=64, dtype=dtype)
    teacher_name = teacher_label(args.teacher)
    models = {
        teacher_name: teacher,
        "TITE, not distilled": build_student(args, teacher, batch_size=64, dtype=dtype),
        STUDENT_LABEL: TITE.from_pretrained(args.output_dir, batch_size=64, dtype=dtype),
    }
    table = dense_experiment(models, collections, os.path.join(args.output_dir, "eval"), baseline=teacher_name,
                             verbose=not args.quiet)  # fmt: skip
    table["train min"] = table["name"].map({STUDENT_LABEL: training_minutes([args.output_dir])})
    table.to_csv(os.path.join(args.output_dir, "results.csv"), index=False)
    with pd.option_context("display.width", 200, "display.max_columns", None):
        print(table.to_string(index=False))
    return 0
