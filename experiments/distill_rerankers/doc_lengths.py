"""Document lengths in a model's word pieces, per collection: what a training or scoring batch pads to. Prints the
mean, median, 90th percentile and the share of documents longer than each cap, e.g.::

    python -m experiments.distill_rerankers.doc_lengths \
        --collections msmarco-passage/trec-dl-2019/judged,cranfield,cisi,cacm,vaswani
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd
from transformers import AutoTokenizer

from pyterrier_tite.start_points import resolve
from pyterrier_tite.training.splade_data import doc_texts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--collections", default="msmarco-passage/trec-dl-2019/judged,cranfield,cisi,cacm,vaswani")
    parser.add_argument("--model", default="minilm", help="start point or folder whose tokenizer counts")
    parser.add_argument("--caps", default="128,256,512", help="comma list of lengths to report the share above")
    args = parser.parse_args()
    tokenizer = AutoTokenizer.from_pretrained(resolve(args.model))
    caps = [int(c) for c in args.caps.split(",")]
    rows = []
    for collection in args.collections.split(","):
        texts = list(doc_texts(collection).values())
        ids = tokenizer(texts, add_special_tokens=False, verbose=False)["input_ids"]
        lengths = np.array([len(i) for i in ids])
        row = {"collection": collection, "docs": len(lengths), "mean": lengths.mean(), "median": np.median(lengths),
               "p90": np.percentile(lengths, 90)}  # fmt: skip
        rows.append(row | {f"share > {c}": float(np.mean(lengths > c)) for c in caps})
    with pd.option_context("display.width", 200, "display.float_format", "{:.2f}".format):
        print(pd.DataFrame(rows).to_string(index=False))


if __name__ == "__main__":
    main()
