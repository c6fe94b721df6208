"""The padded batch as tensors: exactly what ``return_tensors="pt"`` gives, for both input builders that use it."""

from __future__ import annotations

import pytest
import torch
from _tiny import word_tokenizer

from pyterrier_tite.models.batch_tensors import padded_tensors

TEXTS = ["w1 w2 unknown", "w4 w5 w6 w7 w8 w9 w10 w11 w12 w13", "w0", ""]


@pytest.fixture(scope="module")
def tokenizer():
    return word_tokenizer()


def test_same_tensors_as_transformers(tokenizer):
    kwargs = {"padding": True, "truncation": True, "max_length": 8}
    theirs = tokenizer(TEXTS, return_tensors="pt", **kwargs)
    ours = padded_tensors(tokenizer(TEXTS, **kwargs), ("input_ids", "attention_mask", "token_type_ids", "absent"))
    assert list(ours) == ["input_ids", "attention_mask", "token_type_ids"]
    for name, tensor in ours.items():
        assert tensor.dtype == theirs[name].dtype == torch.int64
        assert torch.equal(tensor, theirs[name]), name


def test_empty_and_ragged_batches(tokenizer):
    assert padded_tensors({"input_ids": []}, ["input_ids"])["input_ids"].shape == (0, 0)
    with pytest.raises(ValueError, match="padding=True"):
        padded_tensors(tokenizer(TEXTS[:2]), ["input_ids"])


def test_input_builders_match_transformers(tokenizer):
    from pyterrier_tite.models.bert_biencoder.tokenization import BiEncoderInputs
    from pyterrier_tite.models.splade.tokenization import SpladeInputs

    kwargs = {"padding": True, "truncation": True, "max_length": 6}
    theirs = tokenizer(TEXTS, return_tensors="pt", **kwargs)
    splade = SpladeInputs(tokenizer, query_max_length=6, doc_max_length=6)(TEXTS, "doc")
    dense = BiEncoderInputs(tokenizer, query_max_length=6, doc_max_length=6, query_marker=None, doc_marker=None)
    for ours in (splade, dense(TEXTS, "doc")):
        assert torch.equal(ours["input_ids"], theirs["input_ids"])
        assert torch.equal(ours["attention_mask"], theirs["attention_mask"])
