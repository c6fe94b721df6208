"""``pyterrier-tite splade-from-scratch``: a SPLADE model that has seen nothing but the target collection, in one
command, compared with BM25.

Stages, each resumable and skipped when finished: (1) a WordPiece vocabulary trained on the collection's documents and
a small BERT pretrained from random weights with MLM + FLOPS on its documents and training queries
(``<output-dir>/mlm``); (2) SPLADE fine-tuning on the training qrels with BM25 hard negatives, in-batch negatives and
FLOPS on queries and documents (``<output-dir>/splade``); (3) a PISA index of the collection and one
``pt.Experiment`` per evaluation collection: BM25 and the model, nDCG@10 and R@100 with a paired t-test against BM25,
plus the index size and the queries' FLOPS (``results.csv``).

    pyterrier-tite splade-from-scratch --output-dir runs/splade-scratch
"""

from __future__ import annotations

import argparse
import dataclasses
import os

from pyterrier_tite.cli.flags import add_training_arguments, training_arguments
from pyterrier_tite.cli.recipes import finished_steps, recipe_precision
from pyterrier_tite.cli.recipes import names as _names


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "splade-from-scratch",
        help="vocabulary + MLM+FLOPS pretraining + SPLADE fine-tuning on one collection, then BM25 vs SPLADE",
        description="SPLADE from scratch on one collection (its vocabulary, MLM+FLOPS pretraining on its text, "
        "fine-tuning on its training qrels), evaluated against BM25. Example: pyterrier-tite splade-from-scratch "
        "--output-dir runs/splade-scratch",
    )
    parser.add_argument("--dataset", default="scifact", help="collection whose documents are pretrained on")
    parser.add_argument("--train-dataset", default="scifact-train", help="queries and qrels of the fine-tuning")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--hidden-size", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--intermediate-size", type=int, default=512)
    parser.add_argument("--max-length", type=int, default=256, help="tokens per pretraining text and document")
    parser.add_argument("--pretrain-steps", type=int, default=4000)
    parser.add_argument("--pretrain-batch-size", type=int, default=16)
    parser.add_argument("--pretrain-lr", type=float, default=1e-3)
    parser.add_argument("--pretrain-warmup-steps", type=int, default=200)
    parser.add_argument("--flops-weight", type=float, default=1e-3, help="FLOPS weight of the pretraining")
    parser.add_argument("--pretrain-flops-warmup-steps", type=int, default=1000)
    parser.add_argument("--depth", type=int, default=100, help="BM25 depth the hard negatives come from")
    parser.add_argument("--num-negatives", type=int, default=1)
    parser.add_argument("--query-max-length", type=int, default=32)
    parser.add_argument("--lambda-q", type=float, default=1e-2, help="FLOPS weight on queries (fine-tuning)")
    parser.add_argument("--lambda-d", type=float, default=1e-2, help="FLOPS weight on documents (fine-tuning)")
    parser.add_argument("--flops-warmup-steps", type=int, default=300, help="quadratic warm-up of the lambdas")
    parser.add_argument(
        "--evaluate", default=None, help="collections of the final table (default: --dataset; 'none': skip)"
    )
    add_training_arguments(parser, learning_rate=2e-4, max_steps=1000, warmup_steps=100, batch_size=16)
    parser.set_defaults(func=run_splade_from_scratch)


def pretrain(args: argparse.Namespace, targs, folder: str) -> None:
    """Stage 1: the collection's vocabulary (``<folder>/tokenizer``) and MLM+FLOPS pretraining from random weights."""
    from pyterrier_tite.convert.checkpoint import load_tokenizer
    from pyterrier_tite.training.mlm import BertSize, pretrain_mlm, pretraining_texts
    from pyterrier_tite.training.tokenizer import train_collection_tokenizer

    vocabulary = os.path.join(folder, "tokenizer")
    if os.path.exists(os.path.join(vocabulary, "tokenizer_config.json")):  # a resumed run keeps its vocabulary
        tokenizer = load_tokenizer(vocabulary)
    else:
        tokenizer = train_collection_tokenizer(args.dataset, vocabulary, vocab_size=args.vocab_size)
    queries = args.train_dataset if args.train_dataset.lower() != "none" else None
    texts = pretraining_texts(args.dataset, queries_dataset=queries)
    size = BertSize(args.hidden_size, args.layers, args.heads, args.intermediate_size, max(512, args.max_length))
    print(f"pretraining on {len(texts)} texts, vocabulary {len(tokenizer)} -> {folder}")
    pretrain_mlm(
        texts, tokenizer, targs, size=size, objective="mlm+flops", batch_size=args.pretrain_batch_size,
        max_length=args.max_length, flops_weight=args.flops_weight,
        flops_warmup_steps=args.pretrain_flops_warmup_steps, resume=not args.no_resume,
    )  # fmt: skip


def fine_tune(args: argparse.Namespace, targs, start: str) -> None:
    """Stage 2: SPLADE fine-tuning on the training qrels, BM25 hard negatives, in-batch negatives, FLOPS."""
    from pyterrier_tite.pt.first_stage import bm25
    from pyterrier_tite.pt.splade import Splade
    from pyterrier_tite.training.splade import fine_tune_splade
    from pyterrier_tite.training.splade_data import hard_negative_examples

    splade = Splade.from_pretrained(start, query_max_length=args.query_max_length, doc_max_length=args.max_length)
    examples = hard_negative_examples(args.train_dataset, bm25(args.train_dataset, num_results=args.depth),
                                      depth=args.depth, seed=42)  # fmt: skip
    if not examples:
        raise SystemExit(f"{args.train_dataset} gives no training example (no judged relevant document)")
    print(f"fine-tuning on {len(examples)} pairs from {len({e.qid for e in examples})} queries -> {targs.output_dir}")
    fine_tune_splade(
        splade, examples, targs, batch_size=args.batch_size, num_negatives=args.num_negatives,
        lambda_q=args.lambda_q, lambda_d=args.lambda_d, flops_warmup_steps=args.flops_warmup_steps,
        resume=not args.no_resume,
    )  # fmt: skip


def evaluate(folder: str, collections: list[str], index_root: str, verbose: bool = True):
    """Stage 3: one ``pt.Experiment`` per collection (BM25 vs the model, paired t-test), with index size and FLOPS."""
    import pandas as pd
    import pyterrier as pt
    from pyterrier.measures import R, nDCG

    from pyterrier_tite import datasets
    from pyterrier_tite.demo import splade_index
    from pyterrier_tite.pt.dense_experiment import model_key
    from pyterrier_tite.pt.first_stage import bm25
    from pyterrier_tite.pt.splade import Splade, expected_flops, pisa_document_frequencies

    model = Splade.from_pretrained(folder)
    tables = []
    for dataset in collections:
        ds = datasets.get_dataset(datasets.irds_id(dataset))
        topics = ds.get_topics()
        index = splade_index(model, model_key("splade", os.path.realpath(folder)), dataset, verbose, root=index_root)
        table = pt.Experiment(
            [bm25(dataset), model.retriever(index, num_results=1000)], topics, ds.get_qrels(), [nDCG @ 10, R @ 100],
            names=["BM25", "SPLADE from scratch"], baseline=0, round=4,
        )  # fmt: skip
        frequencies, num_docs = pisa_document_frequencies(index)
        query_toks = model.query_encoder()(topics)["query_toks"]
        size = sum(os.path.getsize(os.path.join(r, f)) for r, _, files in os.walk(index) for f in files)
        table.insert(0, "dataset", dataset)
        table["index MB"] = [None, round(size / 2**20, 1)]
        table["FLOPS"] = [None, round(expected_flops(query_toks, frequencies, num_docs), 2)]
        table["postings/doc"] = [None, round(sum(frequencies.values()) / num_docs, 1)]
        tables.append(table)
    return pd.concat(tables, ignore_index=True)


def run_splade_from_scratch(args: argparse.Namespace) -> int:
    import pandas as pd

    base = training_arguments(args)
    base.precision = recipe_precision(args)
    mlm, splade = os.path.join(args.output_dir, "mlm"), os.path.join(args.output_dir, "splade")
    pretraining = dataclasses.replace(
        base, output_dir=mlm, max_steps=args.pretrain_steps, learning_rate=args.pretrain_lr,
        warmup_steps=args.pretrain_warmup_steps,
    )  # fmt: skip
    if finished_steps(mlm) < args.pretrain_steps:
        pretrain(args, pretraining, mlm)
    if finished_steps(splade) < args.max_steps:
        fine_tune(args, dataclasses.replace(base, output_dir=splade), mlm)
    collections = _names(args.evaluate if args.evaluate is not None else args.dataset)
    if not collections:
        return 0
    table = evaluate(splade, collections, os.path.join(args.output_dir, "indexes"), verbose=not args.quiet)
    table.to_csv(os.path.join(args.output_dir, "results.csv"), index=False)
    with pd.option_context("display.width", 200, "display.max_columns", None):
        print(table.to_string(index=False))
    return 0
