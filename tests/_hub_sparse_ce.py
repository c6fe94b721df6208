"""Hub check for sparse cross-encoder fixtures (outputs with ``logits_target``): the released checkpoint, loaded by its
hub id with default settings, scores the fixture's raw query / doc texts like the reference's intended
``[CLS] q [SEP] d [SEP]`` (query capped at 30 word pieces, doc at what the positions leave), through both
``SparseCE.from_pretrained`` and the base class ``CrossEncoderReranker.from_pretrained``."""

from __future__ import annotations

import numpy as np
import pandas as pd

ATOL = 1e-5  # fp32, the hub README's tolerance for logits_target


def _frame(inputs: dict) -> pd.DataFrame:
    """One row per (query, doc) of the fixture, docnos ``q-d``."""
    rows = [
        {"qid": str(q), "query": query, "docno": f"{q}-{d}", "text": doc}
        for q, (query, docs) in enumerate(zip(inputs["queries"], inputs["docs"], strict=True))
        for d, doc in enumerate(docs)
    ]
    return pd.DataFrame(rows)


def _max_error(reranker, inputs: dict, outputs: dict) -> float:
    scores = reranker(_frame(inputs)).set_index("docno")["score"]
    target = outputs["logits_target"]
    got = [[scores[f"{q}-{d}"] for d in range(len(row))] for q, row in enumerate(target)]
    return float(np.abs(np.array(got) - np.array(target)).max())


def check(repo: str, inputs: dict, outputs: dict) -> None:
    from pyterrier_tite.pt.rerankers import CrossEncoderReranker, SparseCE

    model = SparseCE.from_pretrained(repo, device="cpu")
    config = model.scorer.config
    assert model.query_max_length == inputs["max_query_length"] - 2  # [CLS] and [SEP] count in the reference's cap
    assert model.scorer.max_positions() == inputs["max_length"] == config.max_position_embeddings
    error = _max_error(model, inputs, outputs)
    assert error <= ATOL, f"{repo}: max abs error {error:.3g} > {ATOL} against logits_target"
    base = CrossEncoderReranker.from_pretrained(repo, device="cpu")
    assert type(base) is SparseCE, f"{repo}: the base class loaded a {type(base).__name__}"
    assert _max_error(base, inputs, outputs) <= ATOL
