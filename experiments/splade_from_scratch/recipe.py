"""The ``splade-from-scratch`` study: a SPLADE model that has seen nothing but the target collection, in one command,
compared with BM25.

Stages, each resumable and skipped when finished: (1) a WordPiece vocabulary trained on the collection's documents and
a small BERT pretrained from random weights with MLM + FLOPS on its documents and training queries
(``<output-dir>/mlm``); (2) SPLADE fine-tuning on the training qrels with BM25 hard negatives, in-batch negatives and
FLOPS on queries and documents (``<output-dir>/splade``); (3) a PISA index of the collection and one
``pt.Experiment`` per evaluation collection: BM25 and the model, nDCG@10 and R@100 with a paired t-test against BM25,
plus the index size and the queries' FLOPS (``results.csv``).

``--seeds 42,43,44`` fine-tunes the one pretrained model once per seed (``<output-dir>/splade-seed-<seed>``) and the
table gives mean ± std over the seeds, with the paired t-test and 95% interval of the seed-averaged per-query values
against BM25 (the seed table of the other studies), so a seed study is one command.

    python -m experiments.splade_from_scratch --config experiments/splade_from_scratch/config.toml
    python -m experiments.splade_from_scratch --output-dir runs/splade-scratch --seeds 42,43,44
"""

from __future__ import annotations

import argparse
import dataclasses
import os

from experiments.common.config import parse_with_config
from experiments.common.recipes import finished_steps, recipe_precision, training_minutes
from experiments.common.recipes import names as _names
from pyterrier_tite.cli.flags import add_evaluation_data_argument, add_training_arguments, training_arguments


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m experiments.splade_from_scratch",
        description="SPLADE from scratch on one collection (its vocabulary, MLM+FLOPS pretraining on its text, "
        "fine-tuning on its training qrels), evaluated against BM25.",
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
        "--seeds",
        default=None,
        help="comma list of fine-tuning seeds on the one pretraining (each into "
        "<output-dir>/splade-seed-<seed>; the table gives mean ± std over them); default: one model, --seed",
    )
    parser.add_argument(
        "--evaluate", default=None, help="collections of the final table (default: --dataset; 'none': skip)"
    )
    add_evaluation_data_argument(parser)
    add_training_arguments(parser, learning_rate=2e-4, max_steps=1000, warmup_steps=100, batch_size=16, recipe=True)
    return parser


def main(argv: list[str] | None = None) -> int:
    from pyterrier_tite.cpu_allocator import keep_large_blocks

    args = parse_with_config(build_parser(), argv)
    keep_large_blocks()  # the study owns its process: large tensors reuse the heap (see cpu_allocator)
    return run(args)


def pretrain(args: argparse.Namespace, targs, folder: str) -> None:
    """Stage 1: the collection's vocabulary (``<folder>/tokenizer``) and MLM+FLOPS pretraining from random weights."""
    from pyterrier_tite.models.checkpoint import load_tokenizer
    from pyterrier_tite.training.mlm import BertSize, pretrain_mlm, pretraining_texts
    from pyterrier_tite.training.tokenizer import train_collection_tokenizer

    vocabulary = os.path.join(folder, "tokenizer")
    if os.path.exists(os.path.join(vocabulary, "tokenizer_config.json")):  # a resumed run keeps its vocabulary
        tokenizer = load_tokenizer(vocabulary)
    else:
        tokenizer = train_collection_tokenizer(args.dataset, vocabulary, vocab_size=args.vocab_size)
    queries = args.train_dataset if args.train_dataset.lower() != "none" else None
    texts = pretraining_texts(args.dataset, queries_dataset=queries, allow_evaluation_data=args.allow_evaluation_data)
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
                                      depth=args.depth, seed=42,
                                      allow_evaluation_data=args.allow_evaluation_data)  # fmt: skip
    if not examples:
        raise SystemExit(f"{args.train_dataset} gives no training example (no judged relevant document)")
    print(f"fine-tuning on {len(examples)} pairs from {len({e.qid for e in examples})} queries -> {targs.output_dir}")
    fine_tune_splade(
        splade, examples, targs, batch_size=args.batch_size, num_negatives=args.num_negatives,
        lambda_q=args.lambda_q, lambda_d=args.lambda_d, flops_warmup_steps=args.flops_warmup_steps,
        resume=not args.no_resume,
    )  # fmt: skip


MODEL_NAME = "SPLADE from scratch"


def sparse_costs(model, index: str, topics) -> dict[str, float]:
    """What a learned-sparse model costs on a collection: its PISA index's size, the expected FLOPS of ``topics``'
    queries against it and the mean number of postings per document."""
    from experiments.common.splade_cost import expected_flops, pisa_document_frequencies

    frequencies, num_docs = pisa_document_frequencies(index)
    query_toks = model.query_encoder()(topics)["query_toks"]
    size = sum(os.path.getsize(os.path.join(r, f)) for r, _, files in os.walk(index) for f in files)
    return {
        "index MB": round(size / 2**20, 1),
        "FLOPS": round(expected_flops(query_toks, frequencies, num_docs), 2),
        "postings/doc": round(sum(frequencies.values()) / num_docs, 1),
    }


def _indexed_model(folder: str, dataset: str, index_root: str, verbose: bool):
    """The model saved in ``folder`` and its cached PISA index over ``dataset``."""
    from pyterrier_tite.cli.demo import splade_index
    from pyterrier_tite.pt.splade import Splade
    from pyterrier_tite.store.cache import model_key

    model = Splade.from_pretrained(folder)
    return model, splade_index(model, model_key("splade", os.path.realpath(folder)), dataset, verbose, root=index_root)


def evaluate(folder: str, collections: list[str], index_root: str, verbose: bool = True):
    """Stage 3: one ``pt.Experiment`` per collection (BM25 vs the model, paired t-test), with index size and FLOPS."""
    import pandas as pd
    import pyterrier as pt
    from pyterrier.measures import R, nDCG

    from pyterrier_tite import datasets
    from pyterrier_tite.pt.first_stage import bm25

    tables = []
    for dataset in collections:
        ds = datasets.get_dataset(datasets.irds_id(dataset))
        topics = ds.get_topics()
        model, index = _indexed_model(folder, dataset, index_root, verbose)
        table = pt.Experiment(
            [bm25(dataset), model.retriever(index, num_results=1000)], topics, ds.get_qrels(), [nDCG @ 10, R @ 100],
            names=["BM25", MODEL_NAME], baseline=0, round=4,
        )  # fmt: skip
        table.insert(0, "dataset", dataset)
        for column, value in sparse_costs(model, index, topics).items():
            table[column] = [None, value]
        tables.append(table)
    return pd.concat(tables, ignore_index=True)


def evaluate_seeds(folders: list[str], collections: list[str], index_root: str, verbose: bool = True):
    """Stage 3 for several fine-tuning seeds: per collection, BM25 and the seeds' models as one system; nDCG@10 mean
    ± std over the seeds with the paired t-test and 95% interval against BM25 (``rerank_experiment.summarise``), and
    the seeds' mean R@100, index size, FLOPS and postings per document."""
    import numpy as np
    import pandas as pd
    from pyterrier.measures import R, nDCG

    from experiments.common.rerank_experiment import BM25, per_query, summarise, table_columns
    from pyterrier_tite import datasets
    from pyterrier_tite.pt.first_stage import bm25

    measure, tables = nDCG @ 10, []
    for dataset in collections:
        ds = datasets.get_dataset(datasets.irds_id(dataset))
        topics, qrels = ds.get_topics(), ds.get_qrels()
        frames, costs = {BM25: bm25(dataset)(topics)}, []
        for i, folder in enumerate(folders):
            model, index = _indexed_model(folder, dataset, index_root, verbose)
            frames[f"{MODEL_NAME} #{i}"] = model.retriever(index, num_results=1000)(topics)
            costs.append(sparse_costs(model, index, topics))
        runs = {BM25: [BM25], MODEL_NAME: [name for name in frames if name != BM25]}
        table = pd.DataFrame(summarise(per_query(frames, topics, qrels, measure), runs, {MODEL_NAME: [BM25]}))
        recall = per_query(frames, topics, qrels, R @ 100).mean(axis=1)
        table["R@100"] = [recall[BM25], recall[runs[MODEL_NAME]].mean()]
        for column in costs[0]:
            table[column] = [np.nan, float(np.mean([c[column] for c in costs]))]
        tables.append(table.assign(dataset=dataset))
    table = pd.concat(tables, ignore_index=True).rename(columns={"mean": str(measure)})
    return table[table_columns(measure) + ["R@100", *costs[0]]]


def fine_tuning_folders(args: argparse.Namespace) -> dict[int, str]:
    """seed -> fine-tuning folder: ``<output-dir>/splade`` for the one ``--seed`` model, ``splade-seed-<seed>`` for
    each of ``--seeds``."""
    if args.seeds is None:
        return {args.seed: os.path.join(args.output_dir, "splade")}
    try:
        seeds = [int(s) for s in _names(args.seeds)]
    except ValueError as exc:
        raise SystemExit(f"--seeds takes integers: {exc}") from exc
    if not seeds:
        raise SystemExit("--seeds needs at least one seed")
    return {s: os.path.join(args.output_dir, f"splade-seed-{s}") for s in dict.fromkeys(seeds)}


def run(args: argparse.Namespace) -> int:
    import pandas as pd

    folders = fine_tuning_folders(args)  # a malformed --seeds is refused before any work
    base = training_arguments(args)
    base.precision = recipe_precision(args)
    mlm = os.path.join(args.output_dir, "mlm")
    pretraining = dataclasses.replace(
        base, output_dir=mlm, max_steps=args.pretrain_steps, learning_rate=args.pretrain_lr,
        warmup_steps=args.pretrain_warmup_steps,
    )  # fmt: skip
    if finished_steps(mlm) < args.pretrain_steps:
        pretrain(args, pretraining, mlm)
    for seed, folder in folders.items():
        if finished_steps(folder) < args.max_steps:
            fine_tune(args, dataclasses.replace(base, output_dir=folder, seed=seed), mlm)
    collections = _names(args.evaluate if args.evaluate is not None else args.dataset)
    if not collections:
        return 0
    index_root = os.path.join(args.output_dir, "indexes")
    if args.seeds is None:
        table = evaluate(folders[args.seed], collections, index_root, verbose=not args.quiet)
    else:
        table = evaluate_seeds(list(folders.values()), collections, index_root, verbose=not args.quiet)
    # one model's cost: the shared pretraining plus a fine-tuning (mean over the seeds)
    table["train min"] = table["name"].map(
        {MODEL_NAME: training_minutes([mlm]) + training_minutes(list(folders.values()))}
    )
    table.to_csv(os.path.join(args.output_dir, "results.csv"), index=False)
    with pd.option_context("display.width", 200, "display.max_columns", None):
        print(table.to_string(index=False))
    return 0
