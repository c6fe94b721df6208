"""Run as a script: re-rank PAIRS pairs (30 per query, documents of 10-400 words) with a small random BERT-based
re-ranker of KIND (monoce / sparsece), or index PAIRS documents with TITE made from it into a FlexIndex (KIND
tite-index), and print, as JSON, the resident size (MB) after 30% of the work and at the end. A fresh process, so
that what one test allocated does not hide another's growth.

    python tests/_rss_probe.py KIND PAIRS FOLDER
"""

from __future__ import annotations

import json
import os
import random
import sys
import warnings


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def main(kind: str, pairs: int, folder: str) -> None:
    import pandas as pd
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast

    import pyterrier_tite as t
    from pyterrier_tite.cpu_allocator import keep_large_blocks
    from pyterrier_tite.start_points import minilm_path

    if not os.path.exists(os.path.join(folder, "config.json")):
        torch.manual_seed(0)
        config = BertConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=512)
        BertModel(config).save_pretrained(folder)
        BertTokenizerFast.from_pretrained(minilm_path()).save_pretrained(folder)
    keep_large_blocks()  # as the CLI does
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")  # the fresh score head
    words = "the of retrieval neural index query document model attention sparse dense passage ranking".split()
    rng = random.Random(0)
    if kind == "tite-index":
        index_documents(t.TITE.from_bert(folder), pairs, words, rng, os.path.join(folder, "..", "index.flex"))
        return
    model = t.MonoCE(folder) if kind == "monoce" else t.SparseCE(folder, w=4)
    per_query, marks = 30, []
    for q in range(pairs // per_query):
        texts = [" ".join(rng.choices(words, k=rng.randint(10, 400))) for _ in range(per_query)]
        rows = [dict(qid=str(q), query="neural ranking", docno=f"d{i}", text=text) for i, text in enumerate(texts)]
        model(pd.DataFrame(rows))
        marks.append(rss_mb())
    print(json.dumps(dict(at30=marks[int(0.3 * len(marks))], end=marks[-1], peak=max(marks))))


def index_documents(tite, count: int, words: list[str], rng: random.Random, path: str) -> None:
    """``tite >> FlexIndex`` over ``count`` documents of 10-400 words, the resident size read as documents are
    drawn (the indexer pulls them in batches, so a mark is taken every 100 documents)."""
    import shutil

    import pyterrier_dr

    shutil.rmtree(path, ignore_errors=True)  # a rerun of the probe on one folder
    marks = []

    def corpus():
        for i in range(count):
            if i % 100 == 0:
                marks.append(rss_mb())
            yield {"docno": f"d{i}", "text": " ".join(rng.choices(words, k=rng.randint(10, 400)))}

    tite.verbose = False
    (tite >> pyterrier_dr.FlexIndex(path).indexer()).index(corpus())
    marks.append(rss_mb())
    print(json.dumps(dict(at30=marks[int(0.3 * len(marks))], end=marks[-1], peak=max(marks))))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
