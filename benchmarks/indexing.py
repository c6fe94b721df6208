"""Indexing passages into a FlexIndex on the CPU: our bi-encoders against pyterrier_dr's SBertBiEncoder at the same
precision (issue 83.4).

Every system starts from the same MiniLM-L6 weights (the shipped start point) and indexes the same ``--docs`` scifact
documents (title and abstract) with ``(model >> pyterrier_dr.FlexIndex(path).indexer()).index(docs)``:
``pyterrier_dr.SBertBiEncoder`` (the user's default; bf16: its weights cast, as a user would), ``t.BertBiEncoder``
(the same model: mean pooling, normalised) and ``t.TITE.from_bert`` (pooling inserted into the same weights, so a
different model: speed only), each in fp32 and bf16 (bf16 only where the CPU computes it natively). Systems are
interleaved over ``--rounds`` and each keeps its best round. Printed: documents per second, the speed ratio against
the SBertBiEncoder at the same precision, and for BertBiEncoder the smallest cosine between its vectors and the
SBertBiEncoder's (same weights: 1 up to rounding). The CPU's features come first.

Run: ``python benchmarks/indexing.py`` (``--help``); ``--threads`` defaults to 2.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import warnings

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from passages import cpu_features  # noqa: E402


def documents(count: int) -> list[dict]:
    """The first ``count`` scifact documents as ``{docno, text}`` (title and abstract)."""
    from itertools import islice

    import pyterrier_tite as t

    corpus = t.datasets.get_dataset("beir/scifact").get_corpus_iter(verbose=False)
    return [{"docno": d["docno"], "text": f"{d['title']} {d['text']}".strip()} for d in islice(corpus, count)]


def systems(start: str, bf16: bool, batch_size: int) -> dict:
    """name -> a transformer that encodes documents ('text' -> 'doc_vec')."""
    import pyterrier_dr

    import pyterrier_tite as t

    precision = "bf16" if bf16 else "fp32"
    theirs = pyterrier_dr.SBertBiEncoder(start, device="cpu", batch_size=batch_size)
    if bf16:
        theirs.model.to(torch.bfloat16)
    dtype = torch.bfloat16 if bf16 else torch.float32
    return {
        f"pyterrier_dr SBertBiEncoder {precision}": theirs,
        f"BertBiEncoder {precision}": t.BertBiEncoder(start, device="cpu", dtype=dtype, batch_size=batch_size),
        f"TITE.from_bert {precision}": t.TITE.from_bert(start, device="cpu", dtype=dtype, batch_size=batch_size),
    }


def index_seconds(model, docs: list[dict], folder: str) -> float:
    """Seconds to index ``docs`` into a new FlexIndex at ``folder``."""
    import pyterrier_dr

    start = time.perf_counter()
    (model >> pyterrier_dr.FlexIndex(folder).indexer(mode="overwrite")).index(iter(docs))
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    import pandas as pd

    from pyterrier_tite.devices import cpu_has_native_bf16
    from pyterrier_tite.start_points import resolve

    print(cpu_features())
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.docs} scifact documents")
    docs, start = documents(args.docs), resolve("minilm")
    models = systems(start, False, args.batch_size)
    if cpu_has_native_bf16():
        models |= systems(start, True, args.batch_size)
    best = dict.fromkeys(models, float("inf"))
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.rounds):
            for i, (name, model) in enumerate(models.items()):
                best[name] = min(best[name], index_seconds(model, docs, os.path.join(tmp, f"{i}.flex")))
    frame = pd.DataFrame(docs)
    vectors = {name: np.stack(model(frame)["doc_vec"]).astype(np.float32) for name, model in models.items()}
    print(f"{'system':<36} {'docs/s':>8} {'speed':>7} {'min cosine':>11}")
    for name in models:
        reference = f"pyterrier_dr SBertBiEncoder {name.split()[-1]}"
        cosine = ""
        if name.startswith("BertBiEncoder"):
            a, b = vectors[name], vectors[reference]
            cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
            cosine = f"{cos.min():11.5f}"
        print(f"{name:<36} {args.docs / best[name]:8.1f} {best[reference] / best[name]:6.2f}x {cosine}")


if __name__ == "__main__":
    main()
