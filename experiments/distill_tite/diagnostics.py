"""Numbers behind the studies' explanations of their training runs, each from saved artefacts (from the repository
root); the probes of a fresh TITE are in :mod:`~experiments.distill_tite.start_probes`, those of a student's ranking in
:mod:`~experiments.distill_tite.ranking_probes`:

    python -m experiments.distill_tite.diagnostics log runs/tite/exp-dot/cls/log.jsonl --first 5 --last 5
        mean of every logged loss term (and step seconds) over the first and last N steps, and the training minutes;
        --windows 50 adds the mean loss of every 50-step window (a step logged twice by a resumed run counts once)
    python -m experiments.distill_tite.diagnostics teacher-margins runs/tite/scifact_train_minilmdot_teacher_n7.jsonl
        mean teacher margin (positive minus each negative) of a bi-encoder samples file
    python -m experiments.distill_tite.diagnostics aggretriever-parts runs/scifact/agg-scratch-long --texts 3
        norms of the projected-[CLS] and agg* parts of an Aggretriever on the first scifact test queries
    python -m experiments.distill_tite.diagnostics splade-similarity runs/s12/mlm-flops-cranfield \
        --dataset cranfield --docs 20
        how document-specific a SPLADE / MLM model's vectors are: mean cosine between the first N documents' vectors
        (near 1 = a unigram model that weights the same frequent terms in every text), non-zeros, top terms
    python -m experiments.distill_tite.diagnostics tite-start --teacher minilm \
        --structures 5:2:intra,5:2:post,4:4:intra --docs 256
        how close a TITE made from a bi-encoder's BERT (before any training) is to it, per pooling structure
        (layers:kernel:location): cosine of its document / query vectors to the teacher's, overlap of each query's
        top 10 documents, and per layer the cosine of its rows to the teacher's states pooled the same way.
        Instead of a number of (late) pooling layers, "-/2/2/2/2/-:2:intra:mean" gives each layer's kernel (= stride;
        "-": none; the kernel field is then unused), and a fourth field "mean" skips the global pooling step and
        averages the last layer's rows
    python -m experiments.distill_tite.diagnostics dense-paired runs/distill/lr1e-4,runs/distill/pool4 \
        --datasets scifact,dl19
        paired comparison of the recipe's runs against the first (95% interval of the difference, p) from the
        indexes their own evaluation cached under <folder>/eval (so only queries, or DL's re-ranking, are encoded).
        FOLDER@minilm (or @<bi-encoder folder>) encodes that run's queries with that bi-encoder instead, FOLDER@tite
        with the TITE itself (a run saved with a query_encoder/ otherwise uses it): e.g.
        "runs/distill/k2-seed43,runs/distill/k2-seed43@minilm" asks what the teacher's query vectors add;
        --against-all pairs each run with every run before it, not only the first
    python -m experiments.distill_tite.diagnostics dense-sensitivity runs/distill/f5000-score-seed42 \
        --datasets scifact,vaswani,dl19
        how sensitive each collection's ranking is to a distilled student's error, with the teacher's query
        vectors: the documents' cosine to the teacher's, and per test query over the teacher's top --depth documents
        (TREC DL: BM25's candidates, encoded by both) the teacher's score spread over its top 10, the std of the
        student's score error, their ratio and how much of the teacher's top 10 the student keeps (full retrieval
        reads both models' vectors from the indexes the run's evaluation cached under <folder>/eval)
    python -m experiments.distill_tite.diagnostics seen-unseen runs/distill/struct500 --max-docs 2000 \
        --max-queries 2000 --seed 42
        whether a distilled student fits the documents it trained on better than others of the same collections
        (the recipe's texts include the evaluation collections' documents): the texts are rebuilt from the run's
        --max-docs / --max-queries / --seed (checked against its teacher-vector cache), and per collection up to --docs
        documents it saw and as many it did not are encoded by teacher and student: mean cosine of the student's
        vectors to the teacher's, and how many of the teacher's top 10 (under the teacher's vectors of the
        collection's test queries) the student keeps within each group (paired over queries)
"""

from __future__ import annotations

import argparse
import json

from experiments.distill_tite.ranking_probes import dense_paired, dense_sensitivity, seen_unseen
from experiments.distill_tite.start_probes import tite_start


def log_summary(path: str, first: int, last: int, windows: int = 0) -> dict:
    """Means of the first / last steps (and of every ``windows``-step window); a step logged twice (a run resumed
    from a checkpoint older than its last logged step) counts once, with its later record."""
    records = [json.loads(line) for line in open(path) if line.strip()]
    rows = list({r.get("step", i): r for i, r in enumerate(records)}.values())
    rows.sort(key=lambda r: r.get("step", 0))
    keys = [k for k in rows[0] if k not in ("step", "lr")]

    def mean(part):
        return {k: round(sum(r.get(k, 0.0) for r in part) / len(part), 3) for k in keys}

    summary: dict = {"steps": len(rows)}
    if first > 0:
        summary[f"first_{first}"] = mean(rows[:first])
    if last > 0:  # rows[-0:] would be every row
        summary[f"last_{last}"] = mean(rows[-last:])
    if windows:
        summary[f"loss_per_{windows}"] = [mean(rows[i : i + windows])["loss"] for i in range(0, len(rows), windows)]
    if all("seconds" in r for r in rows):  # step times (logs since they were recorded): the run's training time
        summary["minutes"] = round(sum(r["seconds"] for r in rows) / 60, 2)
    return summary


def teacher_margins(path: str) -> dict:
    from pyterrier_tite.training.biencoder import load_samples

    samples = load_samples(path)
    margins = [s.scores[0] - other for s in samples for other in s.scores[1:]]
    scores = [x for s in samples for x in s.scores]
    return {"samples": len(samples), "mean_margin": round(sum(margins) / len(margins), 4),
            "min_score": round(min(scores), 4), "max_score": round(max(scores), 4)}  # fmt: skip


def aggretriever_parts(folder: str, count: int) -> dict:
    import torch
    from transformers import AutoTokenizer

    from pyterrier_tite import datasets
    from pyterrier_tite.models.aggretriever.modeling import AggretrieverEncoder

    texts = datasets.get_dataset("beir/scifact/test").get_topics()["query"].head(count).tolist()
    encoder, tokenizer = AggretrieverEncoder.from_pretrained(folder).eval(), AutoTokenizer.from_pretrained(folder)
    batch = tokenizer(texts, padding=True, truncation=True, max_length=32, return_tensors="pt")
    with torch.no_grad():
        out = encoder(batch["input_ids"], batch["attention_mask"])
    return {"texts": texts, "cls_norms": [round(float(x), 3) for x in out.cls.norm(dim=-1)],
            "agg_norms": [round(float(x), 4) for x in out.agg.norm(dim=-1)]}  # fmt: skip


def mean_pairwise_cosine(reps) -> float:
    """Mean cosine similarity over all pairs of distinct rows of ``[N, V]``."""
    import torch

    unit = torch.nn.functional.normalize(reps.float(), dim=1)
    similarities = unit @ unit.T
    return float(similarities[~torch.eye(len(reps), dtype=torch.bool)].mean())


def splade_similarity(folder: str, dataset: str, count: int, max_length: int = 128) -> dict:
    import torch

    from pyterrier_tite.pt.splade import Splade
    from pyterrier_tite.training.splade_data import doc_texts

    torch.set_num_threads(1)
    model = Splade.from_pretrained(folder, device="cpu")
    texts = list(doc_texts(dataset).values())[:count]
    reps = model.encode(texts, max_length)
    top = [model.tokenizer.convert_ids_to_tokens(r.topk(6).indices.tolist()) for r in reps[:2]]
    return {"docs": len(texts), "mean_cosine": round(mean_pairwise_cosine(reps), 3),
            "mean_nonzeros": round(float((reps > 0).sum(1).float().mean()), 1), "top_terms": top}  # fmt: skip


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.distill_tite.diagnostics", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    log = commands.add_parser("log")
    log.add_argument("path")
    log.add_argument("--first", type=int, default=10)
    log.add_argument("--last", type=int, default=10)
    log.add_argument("--windows", type=int, default=0, help="also the mean loss of every N-step window")
    commands.add_parser("teacher-margins").add_argument("path")
    agg = commands.add_parser("aggretriever-parts")
    agg.add_argument("folder")
    agg.add_argument("--texts", type=int, default=3)
    similarity = commands.add_parser("splade-similarity")
    similarity.add_argument("folder")
    similarity.add_argument("--dataset", default="scifact")
    similarity.add_argument("--docs", type=int, default=20)
    start = commands.add_parser("tite-start")
    start.add_argument("--teacher", default="minilm")
    start.add_argument("--structures", default="5:2:intra", help="layers:kernel:location, comma-separated")
    start.add_argument("--docs", type=int, default=256)
    start.add_argument("--queries", type=int, default=300)
    paired = commands.add_parser("dense-paired")
    paired.add_argument("folders", help="the recipe's output folders (FOLDER@ENCODER: other query vectors), "
                        "comma-separated; the first is the baseline")
    paired.add_argument("--datasets", default="scifact")
    paired.add_argument("--against-all", action="store_true", help="pair each run with every run before it")
    sensitivity = commands.add_parser("dense-sensitivity")
    sensitivity.add_argument("folder", help="an output folder of the recipe")
    sensitivity.add_argument("--datasets", default="scifact,vaswani,cranfield-graded,dl19,dl20")
    sensitivity.add_argument("--teacher", default="minilm", help="the run's --teacher")
    sensitivity.add_argument("--depth", type=int, default=100, help="the teacher's top documents per query")
    memo = commands.add_parser("seen-unseen")
    memo.add_argument("folder")
    memo.add_argument("--docs", type=int, default=1000, help="documents per group and collection")
    memo.add_argument("--max-docs", type=int, required=True)
    memo.add_argument("--max-queries", type=int, default=None)
    memo.add_argument("--seed", type=int, default=42)
    args = parser.parse_args(argv)
    if args.command == "log":
        result = log_summary(args.path, args.first, args.last, args.windows)
    elif args.command == "teacher-margins":
        result = teacher_margins(args.path)
    elif args.command == "tite-start":
        result = tite_start(args.teacher, args.structures.split(","), args.docs, args.queries)
    elif args.command == "dense-paired":
        result = dense_paired(args.folders.split(","), args.datasets.split(","), args.against_all)
    elif args.command == "dense-sensitivity":
        result = dense_sensitivity(args.folder, args.datasets.split(","), args.teacher, args.depth)
    elif args.command == "seen-unseen":
        result = seen_unseen(args.folder, args.docs, args.max_docs, args.max_queries, args.seed)
    elif args.command == "splade-similarity":
        result = splade_similarity(args.folder, args.dataset, args.docs)
    else:
        result = aggretriever_parts(args.folder, args.texts)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
