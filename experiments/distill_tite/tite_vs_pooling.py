"""TITE vs CLS- and mean-pooling bi-encoders from the same start point with the same fine-tuning, evaluated by
nDCG@10 on full retrieval (vaswani, cranfield with graded qrels, scifact test) and on reranking the TREC DL 2019/2020
BM25 top-100.

Every knob is a flag; results are appended to ``<out>/results.jsonl`` as each (model, dataset) finishes, and a
finished pair is skipped when the script runs again, so it can be stopped and resumed. Phases:

1. train each model (``pyterrier_tite.training.biencoder.fine_tune``) on the same samples (a jsonl made by
   ``pyterrier-tite train-biencoder --samples-cache ...``: beir/scifact/train qrels, BM25 hard negatives, MiniLM
   teacher scores);
2. evaluate dataset by dataset (cheapest first) for every model, so the table fills row by row.

    python -m experiments.distill_tite.tite_vs_pooling --samples runs/tite/scifact_train_minilm_teacher_n7.jsonl \
        --out runs/tite/exp
    python -m experiments.distill_tite.tite_vs_pooling --out runs/tite/exp --table     # print the markdown table
"""

from __future__ import annotations

import argparse
import json
import os
import time

EVAL_ORDER = ["cranfield-graded", "dl19", "dl20", "vaswani", "scifact"]
RERANK = {"dl19": "2019", "dl20": "2020"}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m experiments.distill_tite.tite_vs_pooling", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="runs/tite/exp")
    p.add_argument("--samples", default="runs/tite/scifact_train_minilm_teacher_n7.jsonl")
    p.add_argument("--models", default="tite,cls,mean", help="comma list of tite, cls, mean (+ '-zeroshot' suffix)")
    p.add_argument("--datasets", default=",".join(EVAL_ORDER))
    p.add_argument("--start", default="minilm", help="'minilm', a BERT folder, or (tite only) a pretrained TITE folder")
    p.add_argument("--pooling-layers", type=int, default=None, help="TITE: pooling layers (default: 5 of 6)")
    p.add_argument("--kernel", type=int, default=2)
    p.add_argument("--arrangement", default="late", choices=["late", "staggered"])
    p.add_argument("--max-steps", type=int, default=100)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--docs-per-query", type=int, default=4)
    p.add_argument("--learning-rate", type=float, default=2e-5)
    p.add_argument("--warmup-steps", type=int, default=10)
    p.add_argument("--train-doc-max-length", type=int, default=128)
    p.add_argument("--doc-max-length", type=int, default=256, help="evaluation doc length")
    p.add_argument("--query-max-length", type=int, default=32)
    p.add_argument("--eval-batch-size", type=int, default=32)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--table", action="store_true", help="only print the results table")
    return p.parse_args(argv)


def build(kind: str, args: argparse.Namespace, doc_max_length: int):
    from pyterrier_tite.cli.tite import is_tite_folder
    from pyterrier_tite.pt.bert_biencoder import BertBiEncoder
    from pyterrier_tite.pt.tite import TITE
    from pyterrier_tite.start_points import resolve

    start = resolve(args.start)
    common = {
        "query_max_length": args.query_max_length,
        "doc_max_length": doc_max_length,
        "query_marker": "[QUE]",
        "doc_marker": "[DOC]",
        "batch_size": args.eval_batch_size,
        "device": "cpu",
    }
    if kind == "tite" and is_tite_folder(start):  # a pretrained TITE (pyterrier-tite pretrain)
        return TITE.from_pretrained(start, **common)
    if kind == "tite":
        tite = {"kernel": args.kernel, "arrangement": args.arrangement}
        if args.pooling_layers is not None:
            tite["num_pooling_layers"] = args.pooling_layers
        return TITE.from_bert(start, tite, **common)
    # dot product like TITE: the start folder's cosine (all-MiniLM-L6-v2 normalises) would make the comparison unequal
    # and, at InfoNCE temperature 1, keep the in-batch loss near chance
    return BertBiEncoder.from_pretrained(start, pooling=kind, normalize=False, **common)


def load(kind: str, folder: str, doc_max_length: int, args):
    from pyterrier_tite.pt.bert_biencoder import BertBiEncoder
    from pyterrier_tite.pt.tite import TITE

    cls = TITE if kind == "tite" else BertBiEncoder
    return cls.from_pretrained(folder, doc_max_length=doc_max_length, batch_size=args.eval_batch_size, device="cpu")


def train(name: str, args: argparse.Namespace) -> str:
    from pyterrier_tite.training.biencoder import fine_tune, load_samples
    from pyterrier_tite.training.loop import TrainingArguments

    folder = os.path.join(args.out, name)
    if os.path.exists(os.path.join(folder, "pt_meta.json")) and os.path.exists(os.path.join(folder, "log.jsonl")):
        return folder
    model = build(name, args, args.train_doc_max_length)
    samples = load_samples(args.samples)
    targs = TrainingArguments(
        folder,
        max_steps=args.max_steps,
        learning_rate=args.learning_rate,
        warmup_steps=args.warmup_steps,
        seed=args.seed,
        save_every=50,
    )
    began = time.time()
    fine_tune(model, samples, targs, batch_size=args.batch_size, docs_per_query=args.docs_per_query)
    record(args, {"model": name, "phase": "train", "seconds": round(time.time() - began, 1), "samples": len(samples)})
    return folder


def evaluate(name: str, model, dataset: str, args) -> dict:
    import pyterrier as pt
    import pyterrier_dr
    from pyterrier.measures import nDCG

    import pyterrier_tite as t

    ds = t.datasets.get_dataset(dataset)
    began = time.time()
    if dataset in RERANK:
        pipeline = t.trec_dl_bm25(RERANK[dataset]) >> model.scorer()
    else:
        path = os.path.join(args.out, "indexes", f"{name}-{dataset}")
        index = pyterrier_dr.FlexIndex(path)
        if not index.built():
            fields = ["title", "text"] if dataset == "scifact" else ["text"]
            docs = ({"docno": d["docno"], "text": " ".join(str(d[f]) for f in fields if d.get(f))}
                    for d in ds.get_corpus_iter(verbose=False))  # fmt: skip
            (model >> index).index(docs)
        pipeline = model.query_encoder() >> index.np_retriever(num_results=1000)
    table = pt.Experiment([pipeline], ds.get_topics(), ds.get_qrels(), [nDCG @ 10], names=[name])
    return {"ndcg@10": float(table["nDCG@10"].iloc[0]), "seconds": round(time.time() - began, 1)}


def record(args, entry: dict) -> None:
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "results.jsonl"), "a") as f:
        f.write(json.dumps(entry) + "\n")


def done(args) -> set[tuple[str, str]]:
    path = os.path.join(args.out, "results.jsonl")
    if not os.path.exists(path):
        return set()
    rows = [json.loads(line) for line in open(path) if line.strip()]
    return {(r["model"], r["dataset"]) for r in rows if "dataset" in r}


def print_table(args) -> None:
    path = os.path.join(args.out, "results.jsonl")
    rows = [json.loads(line) for line in open(path) if line.strip()]
    scores = {(r["model"], r["dataset"]): r["ndcg@10"] for r in rows if "dataset" in r}
    models = list(dict.fromkeys(m for m, _ in scores))
    datasets = [d for d in EVAL_ORDER if any((m, d) in scores for m in models)]
    print("| model | " + " | ".join(datasets) + " |")
    print("|---" * (len(datasets) + 1) + "|")
    for m in models:
        cells = [f"{scores[(m, d)]:.4f}" if (m, d) in scores else "–" for d in datasets]
        print(f"| {m} | " + " | ".join(cells) + " |")


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.table:
        print_table(args)
        return 0
    import torch

    torch.set_num_threads(args.threads)
    record(args, {"phase": "settings", **vars(args)})
    names = args.models.split(",")
    folders = {n: (None if n.endswith("-zeroshot") else train(n, args)) for n in names}
    finished = done(args)
    for dataset in args.datasets.split(","):
        for name in names:
            if (name, dataset) in finished:
                continue
            kind = name.removesuffix("-zeroshot")
            model = build(kind, args, args.doc_max_length) if folders[name] is None else None
            model = model or load(kind, folders[name], args.doc_max_length, args)
            result = evaluate(name, model, dataset, args)
            record(args, {"model": name, "dataset": dataset, **result})
            print(f"{name} {dataset} nDCG@10 = {result['ndcg@10']:.4f} ({result['seconds']} s)", flush=True)
    print_table(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
