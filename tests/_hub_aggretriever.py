"""Hub check for Aggretriever fixtures (outputs with ``query_vectors``): ``Aggretriever.from_pretrained('<hub id>')``
with default settings encodes the fixture's raw texts as the reference (pyserini) did. Everything (layout, heads,
lengths) is read from the checkpoint, so another released Aggretriever repo is checked by the same code."""

from __future__ import annotations

import numpy as np

from pyterrier_tite.pt.aggretriever import Aggretriever


def check(repo: str, inputs: dict, outputs: dict) -> None:
    model = Aggretriever.from_pretrained(repo, device="cpu")
    assert (model.query_max_length, model.doc_max_length) == (inputs["query_max_length"], inputs["doc_max_length"])
    for texts, key, length in [("queries", "query", model.query_max_length), ("docs", "doc", model.doc_max_length)]:
        ids = model.tokenizer(inputs[texts], truncation=True, max_length=length)["input_ids"]
        assert ids == inputs[f"{key}_input_ids"], f"{repo}: {texts} tokenised differently from the reference"
    queries = model.encode_queries(inputs["queries"])
    docs = model.encode_docs(inputs["docs"])
    np.testing.assert_allclose(queries, np.array(outputs["query_vectors"]), rtol=0, atol=1e-5)
    np.testing.assert_allclose(docs, np.array(outputs["doc_vectors"]), rtol=0, atol=1e-5)
    np.testing.assert_allclose(queries @ docs.T, np.array(outputs["scores"]), rtol=1e-5, atol=1e-4)
