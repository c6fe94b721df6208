"""Numbers behind the README's explanations of the training runs, each from saved artefacts:

    python examples/diagnostics.py log runs/tite/exp-dot/cls/log.jsonl --first 5 --last 5
        mean of every logged loss term over the first and last N steps of a training log
    python examples/diagnostics.py teacher-margins runs/tite/scifact_train_minilmdot_teacher_n7.jsonl
        mean teacher margin (positive minus each negative) of a bi-encoder samples file
    python examples/diagnostics.py aggretriever-parts runs/scifact/agg-scratch-long --texts 3
        norms of the projected-[CLS] and agg* parts of an Aggretriever on the first scifact test queries
    python examples/diagnostics.py splade-similarity runs/s12/mlm-flops-cranfield --dataset cranfield --docs 20
        how document-specific a SPLADE / MLM model's vectors are: mean cosine between the first N documents' vectors
        (near 1 = a unigram model that weights the same frequent terms in every text), non-zeros, top terms
"""

from __future__ import annotations

import argparse
import json


def log_summary(path: str, first: int, last: int) -> dict:
    rows = [json.loads(line) for line in open(path) if line.strip()]
    keys = [k for k in rows[0] if k not in ("step", "lr")]

    def mean(part):
        return {k: round(sum(r.get(k, 0.0) for r in part) / len(part), 3) for k in keys}

    return {"steps": len(rows), f"first_{first}": mean(rows[:first]), f"last_{last}": mean(rows[-last:])}


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
    from pyterrier_tite.modeling.aggretriever import AggretrieverEncoder

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
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    log = commands.add_parser("log")
    log.add_argument("path")
    log.add_argument("--first", type=int, default=10)
    log.add_argument("--last", type=int, default=10)
    commands.add_parser("teacher-margins").add_argument("path")
    agg = commands.add_parser("aggretriever-parts")
    agg.add_argument("folder")
    agg.add_argument("--texts", type=int, default=3)
    similarity = commands.add_parser("splade-similarity")
    similarity.add_argument("folder")
    similarity.add_argument("--dataset", default="scifact")
    similarity.add_argument("--docs", type=int, default=20)
    args = parser.parse_args(argv)
    if args.command == "log":
        result = log_summary(args.path, args.first, args.last)
    elif args.command == "teacher-margins":
        result = teacher_margins(args.path)
    elif args.command == "splade-similarity":
        result = splade_similarity(args.folder, args.dataset, args.docs)
    else:
        result = aggretriever_parts(args.folder, args.texts)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
