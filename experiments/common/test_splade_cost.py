"""SPLADE's query cost (``experiments.common.splade_cost``): posting-list lengths as PISA stored them, FLOPS as
the formula gives it."""

from __future__ import annotations

import pandas as pd
import pytest
import torch
from transformers import BertForMaskedLM

from experiments.common.splade_cost import expected_flops, pisa_document_frequencies
from pyterrier_tite.models.splade.modeling import SpladeEncoder
from pyterrier_tite.pt.splade import PISA_SCALE, Splade
from pyterrier_tite.training.tokenizer import train_wordpiece
from tests._tiny import bert_config

TEXTS = ["a cat sat on the mat", "dogs chase cats", "the mat is red", "a red dog", "cats and dogs and mats",
         "nothing here"]  # fmt: skip


@pytest.fixture(scope="module")
def tiny() -> Splade:
    tokenizer = train_wordpiece(TEXTS, vocab_size=60, min_frequency=1)
    torch.manual_seed(0)
    encoder = SpladeEncoder(BertForMaskedLM(bert_config(len(tokenizer), hidden=32, max_position_embeddings=64)))
    return Splade(encoder, tokenizer, batch_size=3, doc_max_length=32)


def test_pisa_document_frequencies_and_expected_flops(tiny, tmp_path):
    docs = pd.DataFrame({"docno": [f"d{i}" for i in range(6)], "text": TEXTS[:6]})
    tiny.indexer(str(tmp_path / "idx")).index(docs.to_dict("records"))
    frequencies, num_docs = pisa_document_frequencies(str(tmp_path / "idx"))
    assert num_docs == 6
    expected: dict[str, int] = {}
    for toks in tiny.doc_encoder()(docs)["toks"]:
        for term, weight in toks.items():
            if int(weight * PISA_SCALE) > 0:  # PISA keeps a posting only for a positive quantised weight
                expected[term] = expected.get(term, 0) + 1
    assert {t: n for t, n in frequencies.items() if n} == expected
    queries = [{"a": 0.5, "zz-unknown": 2.0, "b": 0.001}, {}]
    frequencies = {"a": 3, "b": 6}
    assert expected_flops(queries, frequencies, 6) == pytest.approx((3 / 6 + 0) / 2)  # "b" quantises to 0
