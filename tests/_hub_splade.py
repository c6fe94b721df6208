"""Hub check for SPLADE fixtures (naver's ``Splade`` class computed the targets): the model loads by hub id, a single
repo as ``Splade.from_pretrained(id)`` and a query/doc pair (``query_model != doc_model``) as
``Splade.from_pretrained(query=..., doc=...)``; the fixture's raw texts go through the PyTerrier encoders with default
settings. The term weights are compared by vocabulary token (the fixture's keys are word pieces) and through the
PISA-facing ``query_toks`` / ``toks`` columns, whose keys are :func:`pisa_term` of the same word pieces."""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from pyterrier_tite.pt.splade import Splade, pisa_term

ATOL = 1e-5


def load(inputs: dict) -> Splade:
    """The model exactly as a user names it: one hub id, or the pair of ids."""
    query, doc = inputs["query_model"], inputs["doc_model"]
    if query == doc:
        return Splade.from_pretrained(query, device="cpu")
    return Splade.from_pretrained(query=query, doc=doc, device="cpu")


def max_weight_error(got: list[dict[str, float]], want: list[dict[str, float]], what: str) -> float:
    """Largest weight difference over rows whose key sets must be equal (a missing or extra term fails)."""
    assert len(got) == len(want), f"{what}: {len(got)} rows, expected {len(want)}"
    error = 0.0
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        assert set(g) == set(w), f"{what}[{i}]: extra {sorted(set(g) - set(w))}, missing {sorted(set(w) - set(g))}"
        error = max([error, *(abs(g[t] - w[t]) for t in w)])
    return error


def check(repo: str, inputs: dict, outputs: dict) -> dict[str, float]:
    model = load(inputs)
    queries, docs = inputs["queries"], inputs["docs"]
    for role, texts in (("query", queries), ("doc", docs)):  # the tokenizer of each side gives the reference's ids
        ids = [model.tokenizers[role](t)["input_ids"] for t in texts]
        assert ids == inputs[f"{role}_input_ids"], f"{repo}: {role} token ids differ from the reference's"
    frame = pd.DataFrame({"qid": ["q0", "q1"][: len(queries)], "query": queries})
    query_toks = list(model.query_encoder()(frame)["query_toks"])
    doc_frame = pd.DataFrame({"docno": [f"d{i}" for i in range(len(docs))], "text": docs})
    toks = list(model.doc_encoder()(doc_frame)["toks"])
    query_reps = model.encode(queries, model.query_max_length, role="query")
    doc_reps = model.encode(docs, model.doc_max_length, role="doc")
    want_q, want_d = outputs["query_term_weights"], outputs["doc_term_weights"]
    errors = {
        "query_term_weights": max_weight_error(model.to_term_weights(query_reps), want_q, "query"),
        "doc_term_weights": max_weight_error(model.to_term_weights(doc_reps), want_d, "doc"),
        "query_toks": max_weight_error(query_toks, [{pisa_term(t): v for t, v in w.items()} for w in want_q], "q"),
        "toks": max_weight_error(toks, [{pisa_term(t): v for t, v in w.items()} for w in want_d], "d"),
    }
    results = frame.merge(doc_frame, how="cross")
    scored = model.scorer()(results)
    got_scores = scored["score"].to_numpy().reshape(len(queries), len(docs))
    errors["scores"] = float(np.abs(got_scores - np.asarray(outputs["scores"])).max())
    errors["scores_from_reps"] = float((query_reps @ doc_reps.T - torch.tensor(outputs["scores"])).abs().max())
    for name, error in errors.items():
        assert error <= ATOL, f"{repo}: {name} off by {error:.2e} (atol {ATOL})"
    print(f"{repo}: max abs error " + ", ".join(f"{k} {v:.1e}" for k, v in errors.items()))
    return errors
