"""The cross-encoder distillation recipe (``python -m experiments.distill_rerankers``) split for a GPU machine that has
torch but neither the collections nor PyTerrier (it needs the repository's ``experiments/`` and the library):

1. ``bundle`` (here, with the data; the format is :mod:`~experiments.distill_rerankers.carry`'s): the training pool
   (BM25 candidates of the training queries, the offline teacher's scores and labels) and the evaluation candidates
   (BM25 top-``depth`` of each test collection) as one gzipped JSON, and the start model with its weights in fp16 (a
   file of half the size; the GPU side widens it back to fp32 before training, so every model there starts from the
   same rounded weights).
2. ``train`` (on the GPU, torch only): every variant x seed in turn (the same data, steps and recipe as the CLI:
   MarginMSE against the teacher, ``RerankerTrainingData``, the shared ``Trainer``), each model scoring every
   evaluation candidate as the re-ranker's ``transform`` does (:func:`~pyterrier_tite.models.cross_encoder.pair_scoring.
   score_by_query`); scores are written after each model, so a run cut short keeps what it finished. A time budget
   skips models that would not finish.
3. ``evaluate`` (here): nDCG@10 of the scores with the recipe's statistics (mean ± std over seeds, paired t-tests and
   95% intervals against BM25 / the widest window / the [CLS] model: :mod:`experiments.common.rerank_experiment`).

    python -m experiments.distill_rerankers.gpu bundle --out gpu_carry/rerankers
    python -m experiments.distill_rerankers.gpu train --bundle gpu_carry/rerankers --out $OUT --models mono,sparse-w4 \
        --seeds 1,2
    python -m experiments.distill_rerankers.gpu evaluate --bundle gpu_carry/rerankers --scores scores.npz
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from functools import partial

import numpy as np

from experiments.distill_rerankers.carry import (
    EVALUATION,
    bundle,
    load_bundle,
    names,
    pack_model,
    unpack_model,
    widen_start,
)


# ------------------------------------------------------------------------------------------------------------ train
def build(variant: str, start: str, tokenizer):
    """``(scorer, inputs)`` of a variant as the recipe builds it (``build_variant``), without PyTerrier."""
    import warnings

    from experiments.distill_rerankers.recipe import parse_variant
    from pyterrier_tite.models.cross_encoder.convert import (
        load_scorer,
        sequence_classifier,
        sparse_backbone,
        stored_lengths,
    )
    from pyterrier_tite.models.cross_encoder.tokenization import CrossEncoderInputs, fill_special_ids, special_ids

    spec = parse_variant(variant)
    sparse = spec["kind"] == "SparseCE" or spec.get("sparse", False)

    def sparse_from(model):
        return sparse_backbone(model, spec["w"], spec.get("symmetric"), special_ids(tokenizer))

    backbone = sparse_from if sparse else sequence_classifier
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*new weights.*train before use")
        scorer = load_scorer(start, backbone, "celi" if spec["kind"] == "CELI" else "cls", None)
    if not scorer.is_sparse:
        fill_special_ids(scorer.config, tokenizer)
    lengths = stored_lengths(start)
    return scorer, CrossEncoderInputs(tokenizer, scorer.max_positions(), **lengths)


def train(args: argparse.Namespace) -> None:
    import pandas as pd
    import torch
    from transformers import AutoTokenizer

    began = time.perf_counter()
    device = torch.device(args.device)
    data = load_bundle(args.bundle)
    texts = data["texts"]
    pool = pd.DataFrame(data["train"])
    pool["query"] = pool["query"].map(texts.__getitem__)
    pool["text"] = pool["text"].map(texts.__getitem__)
    if args.max_train_queries:
        keep = sorted(pool["qid"].unique())[: args.max_train_queries]
        pool = pool[pool["qid"].isin(keep)]
    start = widen_start(os.path.join(args.bundle, "start"), os.path.join(args.workdir, "start"))
    tokenizer = AutoTokenizer.from_pretrained(start)
    results = Results(args.out, {**data["recipe"], **recipe_of(args)})
    shared: dict = {}  # tokenised training data and evaluation candidates, built once (every variant reads the same)
    todo = [(v, s) for s in map(int, names(args.seeds)) for v in names(args.models)]
    if args.order == "variant":
        todo = sorted(todo, key=lambda vs: names(args.models).index(vs[0]))
    todo += [(v, int(names(args.seeds)[0])) for v in names(args.then_models)]
    jobs = [
        (
            f"{v} seed {s}",
            partial(train_and_score, args, v, s, start, tokenizer, pool, data, shared, results.scores, device),
        )
        for v, s in todo
    ]
    run_budgeted(jobs, args.budget, began, results)


class Results:
    """``scores.npz`` (key ``variant|seed|dataset``) and ``models.json`` (recipe, one row per model) in ``out``,
    rewritten after each model, so a run cut short keeps what it finished."""

    def __init__(self, out: str, recipe: dict):
        os.makedirs(out, exist_ok=True)
        self.out = out
        self.scores: dict[str, np.ndarray] = {}
        self.summary: dict = {"recipe": recipe, "models": []}

    def save(self) -> None:
        path = os.path.join(self.out, "scores.npz")
        np.savez(path + ".tmp.npz", **self.scores)
        os.replace(path + ".tmp.npz", path)
        with open(os.path.join(self.out, "models.json"), "w") as f:
            json.dump(self.summary, f, indent=1)


def run_budgeted(jobs: list[tuple[str, Callable[[], dict]]], budget: float, began: float, results: Results) -> None:
    """Run each ``(name, job)`` whose expected time (the last job's) still fits ``budget`` seconds since ``began``;
    a job that raises is reported and skipped, the others go on; each finished job's row is saved at once."""
    last = None
    for name, job in jobs:
        elapsed = time.perf_counter() - began
        if last is not None and elapsed + last > budget:
            print(f"skipped {name}: {elapsed:.0f} s spent, a model takes {last:.0f} s", flush=True)
            continue
        job_began = time.perf_counter()
        try:
            row = job()
        except Exception as error:  # a failing model leaves the others' results
            print(f"FAILED {name}: {type(error).__name__}: {error}", flush=True)
            traceback.print_exc()
            continue
        results.summary["models"].append(row)
        results.save()
        last = time.perf_counter() - job_began
        print(json.dumps(row), flush=True)
    print(f"done in {time.perf_counter() - began:.0f} s: {len(results.summary['models'])} models", flush=True)


def train_and_score(args, variant, seed, start, tokenizer, pool, data, shared, scores, device) -> dict:
    """Train one variant x seed and score every evaluation candidate into ``scores``; its summary row."""
    import torch

    from pyterrier_tite.models.cross_encoder.pair_scoring import score_by_query
    from pyterrier_tite.training.loop import Trainer, TrainingArguments, seed_everything
    from pyterrier_tite.training.rerankers import RerankerTrainingData, reranker_loss

    texts = data["texts"]
    seed_everything(seed)  # the fresh head starts from the seed
    scorer, inputs = build(variant, start, tokenizer)
    scorer.to(device)
    if "data" not in shared:
        t = time.perf_counter()
        shared["data"] = RerankerTrainingData(
            inputs, pool[["qid", "query", "docno", "text", "rank"]], pool[["qid", "docno", "label"]],
            args.negatives, args.queries_per_batch,
            teacher=pool[["qid", "docno", "teacher"]].rename(columns={"teacher": "score"}),
            doc_max_length=args.train_doc_max_length,
        )  # fmt: skip
        shared["eval"] = {
            dataset: tokenised_candidates(inputs, first_queries(rows, args.max_eval_queries), texts)
            for dataset, rows in data["eval"].items()
        }
        print(f"tokenised in {time.perf_counter() - t:.1f} s: {len(shared['data'])} training queries", flush=True)
    shared["data"].seed = seed
    targs = TrainingArguments(
        output_dir=os.path.join(args.workdir, variant, f"seed-{seed}"), max_steps=args.max_steps,
        learning_rate=args.learning_rate, warmup_steps=args.warmup_steps, seed=seed, precision=args.precision,
        verbose=False, log_every=0,
    )  # fmt: skip
    t = time.perf_counter()
    history = Trainer(scorer, shared["data"], reranker_loss("margin_mse"), lambda m, p: None, targs).train(False)
    train_seconds = time.perf_counter() - t
    t = time.perf_counter()
    for dataset, (qids, query_ids, doc_ids) in shared["eval"].items():
        key = f"{variant}|{seed}|{dataset}"
        scores[key] = score_by_query(
            scorer, inputs, qids, query_ids, doc_ids, args.score_batch_size, device, args.precision
        ).astype(np.float32)
    score_seconds = time.perf_counter() - t
    if f"{variant}:{seed}" in names(args.keep):
        from pyterrier_tite.models.cross_encoder.convert import save_scorer

        folder = os.path.join(args.workdir, "keep", f"{variant}-seed-{seed}")
        save_scorer(scorer, tokenizer, folder, reranker=parse_kind(variant), lengths=inputs.lengths())
        pack_model(folder, args.out, f"{variant}-seed-{seed}", args.keep_dtype)
    losses = [h["loss"] for h in history]
    row = {
        "variant": variant, "seed": seed, "steps": len(history), "train_s": round(train_seconds, 1),
        "score_s": round(score_seconds, 1), "loss_first50": float(np.mean(losses[:50])),
        "loss_last50": float(np.mean(losses[-50:])), "device": torch.cuda.get_device_name(device)
        if device.type == "cuda" else "cpu", "precision": args.precision,
    }  # fmt: skip
    return row


def tokenised_candidates(inputs, rows: dict[str, list], texts: list[str]) -> tuple:
    """``(qids, query ids per qid, doc ids per row)`` of a dataset's candidates, each query tokenised once."""
    query_of = dict(zip(rows["qid"], rows["query"], strict=True))
    query_ids = dict(zip(query_of, inputs.queries([texts[i] for i in query_of.values()]), strict=True))
    return np.array(rows["qid"]), query_ids, inputs.docs([texts[i] for i in rows["text"]])


def parse_kind(variant: str) -> str:
    from experiments.distill_rerankers.recipe import parse_variant

    return parse_variant(variant)["kind"]


def first_queries(rows: dict[str, list], limit: int | None) -> dict[str, list]:
    """The candidates of the first ``limit`` queries (a smoke test's subset; None: all)."""
    if not limit:
        return rows
    keep = set(list(dict.fromkeys(rows["qid"]))[:limit])
    mask = [q in keep for q in rows["qid"]]
    return {k: [x for x, m in zip(v, mask, strict=True) if m] for k, v in rows.items()}


def recipe_of(args: argparse.Namespace) -> dict:
    keys = ("max_steps", "learning_rate", "warmup_steps", "queries_per_batch", "negatives", "train_doc_max_length")
    return {k: getattr(args, k) for k in (*keys, "precision")}


# ------------------------------------------------------------------------------------------------------------ evaluate
def evaluate(args: argparse.Namespace) -> None:
    import pandas as pd
    import pyterrier as pt
    from pyterrier.measures import nDCG

    from experiments.common.rerank_experiment import BM25, per_query, summarise, table_columns
    from experiments.distill_rerankers.recipe import comparisons
    from pyterrier_tite.pt.first_stage import topics_and_qrels

    data = load_bundle(args.bundle)
    stored = {key: values for path in args.scores for key, values in np.load(path).items()}
    variants = list(dict.fromkeys(key.split("|")[0] for key in stored))
    against = comparisons(variants)
    if args.baseline:
        for variant in variants:
            if variant != args.baseline:
                against[variant].append(args.baseline)
    for label, path in (r.split("=", 1) for r in args.reference):  # the same variants trained on other data
        for key, values in np.load(path).items():
            variant, rest = key.split("|", 1)
            stored[f"{variant} @ {label}|{rest}"] = values
            if variant in against and f"{variant} @ {label}" not in against[variant]:
                against[variant].append(f"{variant} @ {label}")
            against[f"{variant} @ {label}"] = ["BM25"]
    keys = [k.split("|") for k in stored]
    variants = list(dict.fromkeys(v for v, _, _ in keys))
    tables = []
    for dataset, rows in data["eval"].items():
        topics, qrels = topics_and_qrels(dataset)
        base = pd.DataFrame({"qid": rows["qid"], "docno": rows["docno"], "score": rows["score"]})
        frames = {BM25: pt.model.add_ranks(base)}
        runs: dict[str, list[str]] = {BM25: [BM25]}
        for variant in variants:
            seeds = [s for v, s, d in keys if v == variant and d == dataset]
            if args.min_seeds and len(seeds) < args.min_seeds:
                continue
            runs[variant] = []
            for seed in seeds:
                name, scores = f"{variant} #{seed}", stored[f"{variant}|{seed}|{dataset}"]
                if len(scores) != len(base):
                    raise SystemExit(
                        f"{len(scores)} scores of {variant} seed {seed} on {dataset} for {len(base)} candidates of "
                        "the bundle: scores of another bundle's candidates?"
                    )
                frames[name] = pt.model.add_ranks(base.assign(score=scores))
                runs[variant].append(name)
        values = per_query(frames, topics, qrels, nDCG @ 10)
        present = {k: [o for o in v if o in runs] for k, v in against.items() if k in runs}
        tables.append(pd.DataFrame(summarise(values, runs, present)).assign(dataset=dataset))
    table = pd.concat(tables, ignore_index=True).rename(columns={"mean": "nDCG@10"})
    table = table[table_columns("nDCG@10")]
    if args.csv:
        table.to_csv(args.csv, index=False)
    with pd.option_context("display.width", 200, "display.max_columns", None, "display.float_format", "{:.4f}".format):
        print(table.to_string(index=False))


# ------------------------------------------------------------------------------------------------------------ CLI
def add_run_arguments(p: argparse.ArgumentParser, workdir: str) -> None:
    """The arguments every GPU-side ``train`` takes: bundle, outputs, device, precision, seeds, kept models, budget."""
    p.add_argument("--bundle", required=True)
    p.add_argument("--out", required=True, help="what comes back: scores.npz, models.json, kept models' parts")
    p.add_argument("--workdir", default=workdir, help="checkpoints and the widened start model (stay there)")
    p.add_argument("--seeds", default="43")
    p.add_argument("--device", default="cuda")
    p.add_argument("--precision", default="bf16")
    p.add_argument(
        "--keep",
        default="",
        help="models whose weights come back in <out>/<name>.tar.<i> parts (variant:seed / TITE seed)",
    )
    p.add_argument("--keep-dtype", default="bfloat16", help="weights of a kept model (bfloat16: half the parts)")
    p.add_argument("--max-eval-queries", type=int, default=None, help="a smoke test's subset")
    p.add_argument("--budget", type=float, default=float("inf"), help="seconds: skip models that would not finish")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m experiments.distill_rerankers.gpu", description=__doc__.split("\n\n")[0]
    )
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("bundle", help="training pool + evaluation candidates + start model (needs the data)")
    p.add_argument("--out", required=True)
    p.add_argument("--start", default="minilm")
    p.add_argument("--sources", default="msmarco-passage/dev/small")
    p.add_argument("--depth", type=int, default=30)
    p.add_argument("--max-queries", type=int, default=None)
    p.add_argument("--positives", type=int, default=3)
    p.add_argument("--teacher-cache", default="runs/rerankers/msmarco/teacher-cache")
    p.add_argument("--evaluate", default=EVALUATION)
    p.add_argument("--eval-depth", type=int, default=100)
    p.set_defaults(func=bundle)
    p = commands.add_parser("train", help="train and score every variant x seed (torch only)")
    add_run_arguments(p, "/tmp/gpu-rerankers")
    p.add_argument("--models", default="mono,sparse-w4")
    p.add_argument("--then-models", default="", help="trained after the others, with the first seed only")
    p.add_argument("--order", choices=("seed", "variant"), default="seed", help="seed: every variant of a seed first")
    p.add_argument("--max-steps", type=int, default=500)
    p.add_argument("--learning-rate", type=float, default=2e-4)
    p.add_argument("--warmup-steps", type=int, default=50)
    p.add_argument("--queries-per-batch", type=int, default=16)
    p.add_argument("--negatives", type=int, default=7)
    p.add_argument("--train-doc-max-length", type=int, default=256)
    p.add_argument("--score-batch-size", type=int, default=256)
    p.add_argument("--max-train-queries", type=int, default=None, help="a smoke test's subset")
    p.set_defaults(func=train)
    p = commands.add_parser("unpack", help="a model kept by train --keep -> a folder from_pretrained loads")
    p.add_argument("--parts", required=True, help="path prefix of the parts: <dir>/<variant>-seed-<seed>")
    p.add_argument("--out", required=True)
    p.set_defaults(func=unpack_model)
    p = commands.add_parser("evaluate", help="nDCG@10 table of the scores (needs the data)")
    p.add_argument("--bundle", required=True)
    p.add_argument("--scores", required=True, nargs="+", help="scores.npz of one recipe (several runs of it)")
    p.add_argument(
        "--reference",
        default=[],
        nargs="*",
        help="LABEL=scores.npz: the same variants trained on other data, rows '<variant> @ LABEL' paired with theirs",
    )
    p.add_argument("--min-seeds", type=int, default=0)
    p.add_argument("--baseline", default=None, help="a model every other is also paired with (e.g. teacher)")
    p.add_argument("--csv", default=None)
    p.set_defaults(func=evaluate)
    args = parser.parse_args(argv)
    args.func(args)


if __name__ == "__main__":
    sys.exit(main())
