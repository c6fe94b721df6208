"""Hub checks of the TITE family (called by ``test_hub.py``): everything goes through the hub id, from raw texts.

- pre-trained encoder (outputs ``last_hidden_state``): ``TiteModel.from_pretrained(repo)`` with the tokenizer loaded
  by hub id reproduces the ids the reference tokenizer made and the reference's states; ``TITE.from_pretrained(repo)``
  (the bi-encoder entry point, markers off) gives the same vectors.
- fine-tuned bi-encoder (outputs ``query_embeddings``): ``TITE.from_pretrained(repo)`` reads lengths and markers from
  the checkpoint, tokenises as the target layout did, and reproduces embeddings and scores (also through the
  PyTerrier scorer).

Tolerances are the fixture READMEs': embeddings atol 1e-5; scores (values about 10 to 30) atol 1e-4, rtol 1e-5.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from pyterrier_tite.models import TiteModel
from pyterrier_tite.models.tite.convert import load_tite_tokenizer
from pyterrier_tite.pt.tite import TITE

ATOL = 1e-5
SCORE_ATOL, SCORE_RTOL = 1e-4, 1e-5


def check_encoder(repo: str, inputs: dict, outputs: dict) -> None:
    model = TiteModel.from_pretrained(repo)
    tokenizer = load_tite_tokenizer(repo)
    batch = tokenizer(inputs["texts"], padding=True, truncation=True, return_tensors="pt")
    assert batch["input_ids"].tolist() == inputs["input_ids"], "token ids differ from the reference tokenizer's"
    assert batch["attention_mask"].tolist() == inputs["attention_mask"]
    with torch.no_grad():
        states = model(batch["input_ids"], batch["attention_mask"]).last_hidden_state
    expected = torch.tensor(outputs["last_hidden_state"])
    torch.testing.assert_close(states, expected, atol=ATOL, rtol=0)

    longest = model.config.max_position_embeddings
    encoder = TITE.from_pretrained(repo, query_marker=None, doc_marker=None, doc_max_length=longest, device="cpu")
    np.testing.assert_allclose(encoder.encode_docs(inputs["texts"]), expected[:, 0].numpy(), atol=ATOL, rtol=0)


def check_biencoder(repo: str, inputs: dict, outputs: dict) -> None:
    model = TITE.from_pretrained(repo, device="cpu")
    assert (model.query_max_length, model.doc_max_length) == (inputs["query_length"], inputs["doc_length"])
    layout = inputs[f"layout_{inputs['target_layout']}"]
    for texts, marker, max_length, key in [
        (inputs["queries"], model.query_marker, model.query_max_length, "query_input_ids"),
        (inputs["docs"], model.doc_marker, model.doc_max_length, "doc_input_ids"),
    ]:
        marked = [f"{marker} {t}" if marker else t for t in texts]
        ids = model.tokenizer(marked, truncation=True, max_length=max_length)["input_ids"]
        assert ids == layout[key], f"{key} differ from layout {inputs['target_layout']}"

    queries, docs = model.encode_queries(inputs["queries"]), model.encode_docs(inputs["docs"])
    np.testing.assert_allclose(queries, outputs["query_embeddings"], atol=ATOL, rtol=0)
    np.testing.assert_allclose(docs, outputs["doc_embeddings"], atol=ATOL, rtol=0)
    np.testing.assert_allclose(queries @ docs.T, outputs["scores"], atol=SCORE_ATOL, rtol=SCORE_RTOL)

    pairs = pd.DataFrame(
        [
            {"qid": f"q{i}", "query": q, "docno": f"d{j}", "text": d}
            for i, q in enumerate(inputs["queries"])
            for j, d in enumerate(inputs["docs"])
        ]
    )
    scored = model.scorer()(pairs)
    got = scored.set_index(["qid", "docno"]).score
    for i, row in enumerate(outputs["scores"]):
        for j, score in enumerate(row):
            np.testing.assert_allclose(got[f"q{i}", f"d{j}"], score, atol=SCORE_ATOL, rtol=SCORE_RTOL)
