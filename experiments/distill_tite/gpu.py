"""The TITE distillation recipe (:mod:`experiments.distill_tite.recipe`) split for a GPU machine that has torch but
neither the collections nor PyTerrier, as :mod:`experiments.distill_rerankers.gpu` does for the cross-encoders:

1. ``bundle`` (here, with the data): the recipe's unlabelled texts (documents, training queries, Inverse-Cloze
   pseudo-queries, their roles and batch groups), the evaluation candidates (BM25 top-``depth`` of each collection,
   TREC DL's provided run) and the teacher's folder (all-MiniLM-L6-v2 by default) with fp16 weights.
2. ``train`` (on the GPU, torch only): the teacher and its TITE built as the recipe builds them (pooling inserted
   into the teacher's own BERT, the teacher's lengths and cosine), the teacher's vectors of every text, then
   ``distill_vectors`` once per seed; the teacher, the undistilled TITE and each distilled one score every evaluation
   candidate (cosine of their vectors), and the teacher's and TITE's encoding speed is measured on the evaluation
   documents (docs/s, same batches). Scores are written after each model; ``--keep SEED`` brings a distilled model
   back in parts (``python -m experiments.distill_rerankers.gpu unpack`` restores it).
3. ``evaluate`` with ``python -m experiments.distill_rerankers.gpu evaluate --baseline teacher``: nDCG@10 of
   re-ranking, each model paired with the teacher.

From the repository root:

    python -m experiments.distill_tite.gpu bundle --out gpu_carry/tite
    python -m experiments.distill_tite.gpu train --bundle gpu_carry/tite --out $OUT --seeds 43,44 --max-steps 3000
    python -m experiments.distill_rerankers.gpu evaluate --bundle gpu_carry/tite --scores scores.npz --baseline teacher
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from functools import partial

import numpy as np

from experiments.common.recipes import names  # a comma list ('none': empty)
from experiments.distill_rerankers import carry  # the bundle format and model transfer are shared
from experiments.distill_rerankers import gpu as split  # and the budgeted runs, results and evaluation
from experiments.distill_tite.recipe import (  # the recipe module imports no PyTerrier: its defaults are the device's
    DEFAULT_ANCHOR_WEIGHT,
    DEFAULT_POOLING_LAYERS,
    DEFAULT_QUERY_ENCODER,
    DEFAULT_STRUCTURE,
)

EVALUATION = "dl19,dl20,vaswani,cranfield,scifact"


# ------------------------------------------------------------------------------------------------------------ bundle
def bundle(args: argparse.Namespace) -> None:
    """Distillation texts + evaluation candidates -> ``<out>/data.json.gz``; the teacher -> ``<out>/start``."""
    from experiments.distill_tite.texts import collect_distillation_texts
    from pyterrier_tite.start_points import resolve

    data = collect_distillation_texts(
        names(args.collections), names(args.queries), pseudo_queries=not args.no_pseudo_queries,
        max_docs=args.max_docs, max_queries=args.max_queries, seed=args.seed,
    )  # fmt: skip
    texts: dict[str, int] = {}
    train = {"text": carry.index_texts(texts, data.texts), "role": data.roles, "groups": data.groups}
    evaluation = carry.evaluation_candidates(texts, names(args.evaluate), args.eval_depth)
    recipe = {k: getattr(args, k) for k in ("collections", "queries", "max_docs", "max_queries", "eval_depth", "seed")}
    recipe["pseudo_queries"] = not args.no_pseudo_queries
    teacher = resolve(args.teacher)
    carry.save_bundle(args.out, recipe, list(texts), train, evaluation, teacher)
    print(f"{len(data)} texts ({data.roles.count('doc')} documents) in {len(data.groups)} groups -> {args.out}")


# ------------------------------------------------------------------------------------------------------------ models
def build_teacher(folder: str):
    """The teacher's text encoder as ``BertBiEncoder.from_pretrained`` builds it (pooling, normalisation and lengths
    from the folder), without PyTerrier."""
    from pyterrier_tite.models.backbone import encoder_from_pretrained, sentence_transformers_settings
    from pyterrier_tite.models.bert_biencoder.modeling import PooledEncoder
    from pyterrier_tite.models.bert_biencoder.tokenization import BiEncoderInputs
    from pyterrier_tite.models.checkpoint import load_tokenizer, read_meta

    meta = {**sentence_transformers_settings(folder), **read_meta(folder)}
    lengths = {k: meta.get(k, default) for k, default in (("query_max_length", 32), ("doc_max_length", 256))}
    inputs = BiEncoderInputs(load_tokenizer(folder), lengths["query_max_length"], lengths["doc_max_length"], None, None)
    return PooledEncoder(
        encoder_from_pretrained(folder), inputs, meta.get("pooling", "cls"), meta.get("normalize", False)
    )


def build_student(folder: str, teacher, kernel: int | None = None, arrangement: str | None = None,
                  pooling_layers: int | None = None, structure: str | None = None):  # fmt: skip
    """The TITE of the recipe's ``build_student``: pooling inserted into the teacher's BERT, the teacher's tokenizer,
    lengths and normalisation, no markers; ``structure`` (e.g. ``0/2/0/2/2/g``) places the pooling per layer, the
    other three the last ``pooling_layers``; none of them: the recipe's ``DEFAULT_STRUCTURE`` for a teacher of its
    depth, else the late arrangement's defaults."""
    from pyterrier_tite.models.bert_biencoder.modeling import PooledEncoder
    from pyterrier_tite.models.bert_biencoder.tokenization import BiEncoderInputs
    from pyterrier_tite.models.tite.from_bert import pooling_from_flags, tite_from_bert

    q, d = teacher.inputs.query_max_length, teacher.inputs.doc_max_length
    pooling = pooling_from_flags(teacher.model.config.num_hidden_layers, DEFAULT_STRUCTURE, DEFAULT_POOLING_LAYERS,
                                 structure, pooling_layers, kernel, arrangement)  # fmt: skip
    model = tite_from_bert(folder, max_length=max(q, d), **pooling)
    inputs = BiEncoderInputs(teacher.inputs.tokenizer, q, d, None, None)
    return PooledEncoder(model, inputs, "single", teacher.normalize)


# ------------------------------------------------------------------------------------------------------------ train
def first_groups(train: dict, texts: list[str], limit: int | None):
    """``DistillationTexts`` of the bundle's first ``limit`` groups (a smoke test's subset; None: all)."""
    from experiments.distill_tite.vector_distillation import DistillationTexts

    groups = train["groups"][:limit] if limit else train["groups"]
    rows = [i for group in groups for i in group]
    where = {i: n for n, i in enumerate(rows)}
    return DistillationTexts(
        [texts[train["text"][i]] for i in rows],
        [train["role"][i] for i in rows],
        [[where[i] for i in group] for group in groups],
    )


def cosine_scores(encoder, rows: dict, texts: list[str], batch_size: int, precision: str,
                  query_encoder=None) -> np.ndarray:  # fmt: skip
    """The dot product of each candidate's query and document vectors (cosine for a normalising encoder); the
    queries by ``query_encoder`` when given (a TITE distilled for its teacher's queries)."""
    import torch

    from pyterrier_tite.devices import autocast

    queries = list(dict.fromkeys(rows["query"]))
    docs = list(dict.fromkeys(rows["text"]))
    with torch.inference_mode(), autocast(encoder.device, precision):
        q = (query_encoder or encoder).encode_queries([texts[i] for i in queries], batch_size).float()
        d = encoder.encode_docs([texts[i] for i in docs], batch_size).float()
    qi = torch.tensor(_positions(queries, rows["query"]), device=q.device)
    di = torch.tensor(_positions(docs, rows["text"]), device=d.device)
    return (q[qi] * d[di]).sum(-1).cpu().numpy().astype(np.float32)


def _positions(unique: list[int], values: list[int]) -> list[int]:
    where = {v: i for i, v in enumerate(unique)}
    return [where[v] for v in values]


def encoding_speed(encoder, docs: list[str], batch_size: int, precision: str, repeats: int = 3) -> float:
    """Documents per second of ``encode_docs`` (best of ``repeats`` after a warm-up pass)."""
    import torch

    from pyterrier_tite.devices import autocast

    best = float("inf")
    for i in range(repeats + 1):
        if encoder.device.type == "cuda":
            torch.cuda.synchronize()
        began = time.perf_counter()
        with torch.inference_mode(), autocast(encoder.device, precision):
            encoder.encode_docs(docs, batch_size)
        if encoder.device.type == "cuda":
            torch.cuda.synchronize()
        if i:  # the first pass warms up
            best = min(best, time.perf_counter() - began)
    return len(docs) / best


def train(args: argparse.Namespace) -> None:
    import torch

    from experiments.distill_tite.vector_distillation import DistillationWeights, distill_vectors, teacher_vectors
    from pyterrier_tite.training.loop import TrainingArguments, seed_everything

    began = time.perf_counter()
    device = torch.device(args.device)
    data = carry.load_bundle(args.bundle)
    texts = data["texts"]
    train_data = first_groups(data["train"], texts, args.max_groups)
    start = carry.widen_start(os.path.join(args.bundle, "start"), os.path.join(args.workdir, "start"))
    evaluation = {k: split.first_queries(v, args.max_eval_queries) for k, v in data["eval"].items()}
    results = split.Results(args.out, {**data["recipe"], **recipe_of(args)})

    def score_all(name: str, seed: int, encoder, query_encoder=None) -> None:
        t = time.perf_counter()
        for dataset, rows in evaluation.items():
            key = f"{name}|{seed}|{dataset}"
            results.scores[key] = cosine_scores(encoder, rows, texts, args.eval_batch_size, args.precision,
                                                query_encoder)  # fmt: skip
        results.save()
        print(f"{name} seed {seed}: scored in {time.perf_counter() - t:.1f} s", flush=True)

    teacher = build_teacher(start).to(device).eval()
    t = time.perf_counter()
    targets = teacher_vectors(teacher, train_data, os.path.join(args.workdir, "teacher-vectors"),
                              batch_size=args.teacher_batch_size, precision=args.precision, verbose=False)  # fmt: skip
    print(f"{len(train_data)} teacher vectors in {time.perf_counter() - t:.1f} s", flush=True)
    score_all("teacher", 0, teacher)
    structure = {"kernel": args.kernel, "arrangement": args.arrangement, "pooling_layers": args.pooling_layers,
                 "structure": args.structure}  # fmt: skip
    untrained = build_student(start, teacher, **structure).to(device).eval()
    queries_by = teacher if args.query_encoder == "teacher" else None
    score_all("tite-start", 0, untrained, queries_by)
    docs = [texts[i] for i in dict.fromkeys(i for rows in evaluation.values() for i in rows["text"])][: args.speed_docs]
    speed = {name: encoding_speed(enc, docs, args.eval_batch_size, args.precision)
             for name, enc in (("teacher", teacher), ("tite", untrained))}  # fmt: skip
    results.summary["speed"] = {"docs": len(docs), "docs_per_s": speed, "ratio": speed["tite"] / speed["teacher"]}
    print(json.dumps(results.summary["speed"]), flush=True)
    results.save()
    del untrained

    def distil(seed: int) -> dict:
        began_seed = time.perf_counter()
        seed_everything(seed)
        student = build_student(start, teacher, **structure).to(device)
        targs = TrainingArguments(
            output_dir=os.path.join(args.workdir, f"tite-seed-{seed}"), max_steps=args.max_steps,
            learning_rate=args.learning_rate, warmup_steps=args.warmup_steps, seed=seed, precision=args.precision,
            verbose=False, log_every=0,
        )  # fmt: skip
        weights = DistillationWeights(cosine=args.cosine_weight, kl=args.kl_weight, temperature=args.temperature,
                                      anchor=args.anchor_weight)  # fmt: skip
        log = distill_vectors(student, train_data, targets, targs, lambda path: None, batch_size=args.batch_size,
                              weights=weights, resume=False, documents_only=args.documents_only)  # fmt: skip
        train_seconds = time.perf_counter() - began_seed
        student.eval()
        score_all("tite", seed, student, queries_by)
        if str(seed) in names(args.keep):
            folder = os.path.join(args.workdir, "keep", f"tite-seed-{seed}")
            save_tite(student, folder, queries_by)
            carry.pack_model(folder, args.out, f"tite-seed-{seed}", args.keep_dtype)
        losses = [h["loss"] for h in log]
        return {"seed": seed, "steps": len(log), "train_s": round(train_seconds, 1),
                "loss_first50": float(np.mean(losses[:50])), "loss_last50": float(np.mean(losses[-50:])),
                "terms_last50": loss_terms(log[-50:]),
                "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"}  # fmt: skip

    jobs = [(f"seed {seed}", partial(distil, seed)) for seed in map(int, names(args.seeds))]
    split.run_budgeted(jobs, args.budget, began, results)


def loss_terms(log: list[dict[str, float]]) -> dict[str, float]:
    """Each weighted loss term's mean over ``log`` (what the CPU tables report beside nDCG@10: which term a recipe
    lowers)."""
    names = [k for k in (log[0] if log else {}) if k not in ("loss", "lr", "step", "seconds")]
    return {name: float(np.mean([entry.get(name, 0.0) for entry in log])) for name in names}


def save_tite(encoder, folder: str, query_encoder=None) -> None:
    """A distilled TITE as ``TITE.save_pretrained`` writes it (``TITE.from_pretrained`` loads it), with the teacher
    in ``query_encoder/`` as ``BertBiEncoder.save_pretrained`` writes it when it encodes the queries."""
    from pyterrier_tite.models.checkpoint import save_model_folder

    settings = {**encoder.inputs.settings(), "normalize": encoder.normalize}
    if query_encoder is not None:
        queries = {**query_encoder.inputs.settings(), "pooling": query_encoder.pooling,
                   "normalize": query_encoder.normalize}  # fmt: skip
        save_model_folder(os.path.join(folder, "query_encoder"), query_encoder.model, query_encoder.inputs.tokenizer,
                          "bert-biencoder", queries)  # fmt: skip
        settings["query_encoder"] = "query_encoder"
    save_model_folder(folder, encoder.model, encoder.inputs.tokenizer, "tite", settings)


def recipe_of(args: argparse.Namespace) -> dict:
    keys = ("max_steps", "learning_rate", "warmup_steps", "batch_size", "cosine_weight", "kl_weight", "temperature",
            "anchor_weight", "kernel", "arrangement", "pooling_layers", "structure", "precision", "query_encoder",
            "documents_only")  # fmt: skip
    return {k: getattr(args, k) for k in keys}


# ------------------------------------------------------------------------------------------------------------ CLI
def main(argv: list[str] | None = None) -> None:
    from experiments.distill_tite.texts import DEFAULT_COLLECTIONS, DEFAULT_QUERY_SETS

    parser = argparse.ArgumentParser(prog="python -m experiments.distill_tite.gpu",
                                     description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("bundle", help="distillation texts + evaluation candidates + teacher (needs the data)")
    p.add_argument("--out", required=True)
    p.add_argument("--teacher", default="minilm")
    p.add_argument("--collections", default=",".join(DEFAULT_COLLECTIONS))
    p.add_argument("--queries", default=",".join(DEFAULT_QUERY_SETS))
    p.add_argument("--no-pseudo-queries", action="store_true")
    p.add_argument("--max-docs", type=int, default=None)
    p.add_argument("--max-queries", type=int, default=None)
    p.add_argument("--seed", type=int, default=42, help="of the document / query samples and pseudo-queries")
    p.add_argument("--evaluate", default=EVALUATION)
    p.add_argument("--eval-depth", type=int, default=100)
    p.set_defaults(func=bundle)
    p = commands.add_parser("train", help="teacher vectors, distillation per seed, scores (torch only)")
    split.add_run_arguments(p, "/tmp/gpu-tite")  # --keep names seeds here
    p.add_argument("--max-steps", type=int, default=3000)
    p.add_argument("--learning-rate", type=float, default=1e-4)
    p.add_argument("--warmup-steps", type=int, default=100)
    p.add_argument("--batch-size", type=int, default=128, help="text groups per step")
    p.add_argument("--cosine-weight", type=float, default=1.0)
    p.add_argument("--kl-weight", type=float, default=1.0)
    p.add_argument("--temperature", type=float, default=0.05)
    p.add_argument("--anchor-weight", type=float, default=DEFAULT_ANCHOR_WEIGHT,
                   help="KL against the bank of teacher query vectors (the recipe's default; 0: off)")
    p.add_argument("--kernel", type=int, default=None, help="the pooling layers' kernel (default 2)")
    p.add_argument("--arrangement", choices=["late", "staggered"], default=None, help="default: late")
    p.add_argument("--pooling-layers", type=int, default=None,
                   help=f"the last N layers pool instead of the default structure (default {DEFAULT_POOLING_LAYERS})")
    p.add_argument("--structure", default=None,
                   help=f"pooling per layer (default for 6 layers: {DEFAULT_STRUCTURE}; not with the three above)")
    p.add_argument("--query-encoder", choices=["teacher", "tite"], default=DEFAULT_QUERY_ENCODER,
                   help="what scores (and is kept for) the queries: the teacher (the recipe's default) or TITE")
    p.add_argument("--documents-only", action="store_true", help="train TITE's document vectors only")
    p.add_argument("--teacher-batch-size", type=int, default=256)
    p.add_argument("--eval-batch-size", type=int, default=256)
    p.add_argument("--speed-docs", type=int, default=8192, help="evaluation documents the speed is measured on")
    p.add_argument("--max-groups", type=int, default=None, help="a smoke test's subset of the training text groups")
    p.set_defaults(func=train)
    args = parser.parse_args(argv)
    if getattr(args, "documents_only", False) and args.query_encoder != "teacher":
        parser.error("--documents-only leaves TITE's query vectors untrained: it needs --query-encoder teacher")
    late = ("kernel", "arrangement", "pooling_layers")
    if getattr(args, "structure", None) and any(getattr(args, name) is not None for name in late):
        parser.error("--structure places every layer's pooling: not with --pooling-layers/--kernel/--arrangement")
    args.func(args)


if __name__ == "__main__":
    sys.exit(main())
