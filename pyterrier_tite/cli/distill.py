"""``pyterrier-tite distill-tite``: TITE as a drop-in accelerator of an existing bi-encoder.

The recipe: insert pooling into the teacher's own BERT (``TITE.from_bert``: same tokenizer, lengths and cosine, no
markers), then train it to reproduce the teacher's vectors on unlabelled text of the mirrored collections
(:mod:`pyterrier_tite.training.vector_distillation`), and end with one ``pt.Experiment`` per collection: BM25, the
teacher, the undistilled start and the distilled TITE, with a paired t-test against the teacher. A rerun resumes
the training and reuses the cached teacher vectors and indexes.

    pyterrier-tite distill-tite --output-dir runs/distill/minilm-tite
"""

from __future__ import annotations

import argparse
import os

from experiments.common.recipes import model_dtype, recipe_precision, training_minutes
from experiments.common.recipes import names as _names
from pyterrier_tite.cli.flags import add_training_arguments, training_arguments
from pyterrier_tite.start_points import resolve

DEFAULT_EVALUATION = "scifact,vaswani,cranfield-graded,dl19,dl20"
DEFAULT_STRUCTURE = "0/2/0/2/2/g"  # for a 6-layer teacher (MiniLM); docs/results.md, "Pooling placed per layer"
DEFAULT_POOLING_LAYERS = 4  # the late arrangement's layers: for --kernel/--arrangement and teachers of other depths
DEFAULT_QUERY_ENCODER = "teacher"  # docs/results.md, "The teacher as query encoder"
DEFAULT_ANCHOR_WEIGHT = 1.0  # docs/results.md, "A bank of the teacher's query vectors"
#: the distilled student's name in the final tables: its evaluation indexes are cached under it (diagnostics reads them)
STUDENT_LABEL = "TITE, distilled"


def teacher_label(teacher: str) -> str:
    """The teacher's name in the final tables (and of its cached evaluation indexes) for ``--teacher``."""
    return f"teacher ({os.path.basename(os.path.normpath(teacher))})"


def register(commands: argparse._SubParsersAction) -> None:
    from pyterrier_tite.training.distillation_texts import DEFAULT_COLLECTIONS, DEFAULT_QUERY_SETS

    parser = commands.add_parser(
        "distill-tite",
        help="distil a bi-encoder (default all-MiniLM-L6-v2) into a TITE made from its own weights",
        description="Distil a bi-encoder into a faster TITE made from its own BERT, on unlabelled text, then "
        "compare both with BM25 in pt.Experiment tables. Example: pyterrier-tite distill-tite --output-dir "
        "runs/distill/minilm-tite",
    )
    parser.add_argument("--teacher", default="minilm", help="'minilm' or a sentence-transformers / BERT folder")
    parser.add_argument(
        "--pooling-layers", type=int, default=None,
        help=f"the last N layers pool (kernel 2) instead of the default structure; unset with --kernel/--arrangement "
        f"or a teacher not 6 layers deep: {DEFAULT_POOLING_LAYERS} (MiniLM: 2.1-2.2x its document speed; 5: 3.1x, "
        "0.010-0.030 nDCG@10 lower at 3,000 steps; docs/results.md)",
    )  # fmt: skip
    parser.add_argument("--kernel", type=int, default=None, help="kernel = stride of the pooling layers (default 2)")
    parser.add_argument("--arrangement", choices=["late", "staggered"], default=None, help="default: late")
    parser.add_argument(
        "--structure", default=None,
        help="pooling placed per layer, one entry per layer: 0 none, a kernel (= stride), 'g' global; default for a "
        f"{DEFAULT_STRUCTURE.count('/') + 1}-layer teacher {DEFAULT_STRUCTURE} (MiniLM's layers 2, 4 and 5 halve the "
        "rows, layer 6 pools what is left): 2.57x MiniLM's document speed where the last four layers pooling "
        "(0/0/2/2/2/g) give 2.09x, within 0.004 nDCG@10 of them after 3,000 steps (two seeds each; docs/results.md)",
    )  # fmt: skip
    parser.add_argument("--collections", default=",".join(DEFAULT_COLLECTIONS), help="documents (comma list)")
    parser.add_argument("--queries", default=",".join(DEFAULT_QUERY_SETS), help="training-split query sets")
    parser.add_argument("--no-pseudo-queries", action="store_true", help="no Inverse-Cloze pseudo-queries")
    parser.add_argument("--max-docs", type=int, default=None, help="documents per collection (seeded sample)")
    parser.add_argument("--max-queries", type=int, default=None, help="queries per query set (seeded sample)")
    parser.add_argument("--cosine-weight", type=float, default=1.0)
    parser.add_argument("--kl-weight", type=float, default=1.0)
    parser.add_argument(
        "--temperature", type=float, default=0.05,
        help="of the KL terms: in-batch, anchor, collection (MiniLM's training scale; 0.1: level, 0.025: 0.009-0.017 "
        "nDCG@10 lower, at 500 steps, one seed; docs/results.md)",
    )  # fmt: skip
    parser.add_argument(
        "--anchor-weight", type=float, default=DEFAULT_ANCHOR_WEIGHT,
        help="KL of the documents' scores against a bank of the teacher's query vectors (every query and "
        "pseudo-query of the texts; free: they are cached): +0.005 to +0.022 nDCG@10 on scifact / TREC DL, two seeds; "
        "0: off",
    )  # fmt: skip
    parser.add_argument(
        "--collection-weight", type=float, default=0.0,
        help="KL of how each bank query ranks every document of the texts (the batch's documents on the student's "
        "vectors, the rest on the teacher's cached ones): fits the teacher better, nDCG@10 +0.001 to +0.004 at 500 "
        "steps, one seed (docs/results.md); 0: off",
    )  # fmt: skip
    parser.add_argument(
        "--score-weight", type=float, default=0.0,
        help="squared error of every bank query's scores of the batch's documents, centred per query (the KL terms "
        "see mostly each query's top documents, this term all its score differences): a better fit, no better "
        "ranking (nDCG@10 +0.003 to +0.006 at 500 steps, -0.013 to +0.004 at 5,000; one seed; docs/results.md); 0: off",
    )  # fmt: skip
    parser.add_argument(
        "--hidden-weight",
        type=float,
        default=0.0,
        help="layer-wise loss against the teacher's pooled states (0: off; runs the teacher per step)",
    )
    parser.add_argument(
        "--dropout", type=float, default=None,
        help="the student's dropout probability while it trains (default: the teacher's, 0.1 for MiniLM; 0 changed "
        "nothing consistently in docs/results.md)",
    )  # fmt: skip
    parser.add_argument(
        "--freeze-layers", type=int, default=0,
        help="keep the embeddings and the first N layers at the teacher's weights (faster steps; 0: train all)",
    )  # fmt: skip
    parser.add_argument(
        "--cache-frozen", action="store_true",
        help="run the --freeze-layers frozen layers once per text before training (no dropout in them; their states "
        "are held in memory: 1.5 KB per word piece in fp32, 5.8 GiB for the default texts) and each step only the "
        "layers above: with --freeze-layers 2, 2.8x cheaper steps in fp32, but at 3,000 steps of the default texts "
        "0.02 lower on scifact and vaswani than training every layer (one seed; docs/results.md)",
    )  # fmt: skip
    parser.add_argument(
        "--query-encoder", choices=["teacher", "tite"], default=DEFAULT_QUERY_ENCODER,
        help="what encodes the queries of the saved and evaluated model: the teacher (kept in the checkpoint's "
        "query_encoder/; +0.06 to +0.10 nDCG@10 over TITE's own query vectors, two seeds) or TITE itself (one model "
        "at TITE's speed on both sides); docs/results.md, 'The teacher as query encoder'",
    )  # fmt: skip
    parser.add_argument(
        "--documents-only", action="store_true",
        help="train TITE's document vectors only, against the teacher's query vectors (cheaper steps, the same "
        "quality with the teacher as query encoder; needs --query-encoder teacher)",
    )  # fmt: skip
    parser.add_argument(
        "--topic-clusters", type=int, default=0,
        help="draw each batch from one of N k-means clusters of the teacher's vectors (TAS-Balanced's sampling: the "
        "in-batch KL compares texts the teacher finds close; 256: TREC DL 2019 +0.02 nDCG@10 at 1,500 steps, two "
        "seeds, the other collections level; docs/results.md); 0: random batches",
    )  # fmt: skip
    parser.add_argument("--teacher-batch-size", type=int, default=64)
    parser.add_argument(
        "--evaluate", default=DEFAULT_EVALUATION, help=f"collections of the final tables ('none': skip; default "
        f"{DEFAULT_EVALUATION})",
    )  # fmt: skip
    add_training_arguments(parser, learning_rate=1e-4, max_steps=2000, warmup_steps=100, batch_size=32, recipe=True)
    parser.set_defaults(func=run_distill_tite)


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
    student = TITE.from_bert(
        resolve(args.teacher), structure, query_marker=None, doc_marker=None, normalize=teacher.normalize,
        query_max_length=teacher.query_max_length, doc_max_length=teacher.doc_max_length,
        query_model=teacher if getattr(args, "query_encoder", "tite") == "teacher" else None, **kwargs,
    )  # fmt: skip
    if args.dropout is not None:
        from pyterrier_tite.ops.dropout import set_dropout

        set_dropout(student.text_encoder.model, args.dropout)
    return student


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


def run_distill_tite(args: argparse.Namespace) -> int:
    import pandas as pd

    from experiments.common.dense_experiment import dense_experiment
    from pyterrier_tite.pt.tite import TITE
    from pyterrier_tite.training.distillation_texts import collect_distillation_texts
    from pyterrier_tite.training.vector_distillation import (
        DistillationWeights,
        distill_vectors,
        teacher_vectors,
    )

    if args.documents_only and args.query_encoder != "teacher":
        raise SystemExit("--documents-only leaves TITE's query vectors untrained: it needs --query-encoder teacher")
    if args.hidden_weight and args.documents_only:
        raise SystemExit("--hidden-weight needs the student's query vectors: not with --documents-only")
    if args.cache_frozen and (not args.freeze_layers or args.hidden_weight):
        raise SystemExit("--cache-frozen needs --freeze-layers N (N > 0) and no --hidden-weight")
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
    for flag in ("anchor_weight", "collection_weight", "score_weight"):
        if getattr(args, flag) and "query" not in data.roles:
            name = "--" + flag.replace("_", "-")
            raise SystemExit(f"{name} needs queries or pseudo-queries in the texts; add some or pass {name} 0")
    targets = teacher_vectors(
        teacher.text_encoder, data, os.path.join(args.output_dir, "teacher-vectors"),
        batch_size=args.teacher_batch_size, precision=targs.precision, verbose=not args.quiet,
    )  # fmt: skip
    weights = DistillationWeights(args.cosine_weight, args.kl_weight, args.temperature, args.hidden_weight,
                                  args.anchor_weight, args.collection_weight, args.score_weight)  # fmt: skip
    log = distill_vectors(student.text_encoder, data, targets, targs, student.save_pretrained,
                          batch_size=args.batch_size, weights=weights, resume=not args.no_resume,
                          teacher=teacher.text_encoder if args.hidden_weight else None,
                          freeze_layers=args.freeze_layers, documents_only=args.documents_only,
                          cache_frozen=args.cache_frozen,
                          topic_clusters=args.topic_clusters)  # fmt: skip
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
