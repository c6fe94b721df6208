"""WordPiece vocabulary from a collection: BERT conventions, HF round trip, collection words kept whole."""

from __future__ import annotations

import inspect
import os

import pytest
from transformers import AutoTokenizer

from pyterrier_tite.training.tokenizer import SPECIAL_TOKENS, train_collection_tokenizer, train_wordpiece

TEXTS = ["Magnetohydrodynamic flow over plates", "plasma flow in magnetic fields", "flow flow plasma"] * 20


def test_default_vocabulary_is_32k():
    assert inspect.signature(train_collection_tokenizer).parameters["vocab_size"].default == 32_000
    assert inspect.signature(train_wordpiece).parameters["vocab_size"].default == 32_000


def test_wordpiece_bert_conventions(tmp_path):
    tokenizer = train_wordpiece(TEXTS, vocab_size=150, min_frequency=1)
    assert len(tokenizer) <= 150
    assert tokenizer.convert_ids_to_tokens(list(range(5))) == SPECIAL_TOKENS  # [PAD] = 0, as BERT configs expect
    encoded = tokenizer("Plasma FLOW")
    tokens = tokenizer.convert_ids_to_tokens(encoded["input_ids"])
    assert tokens == ["[CLS]", "plasma", "flow", "[SEP]"]  # lower-cased, special tokens added
    tokenizer.save_pretrained(str(tmp_path))
    loaded = AutoTokenizer.from_pretrained(str(tmp_path))
    assert loaded("Plasma FLOW")["input_ids"] == encoded["input_ids"]
    assert loaded.mask_token_id == 4 and loaded.pad_token_id == 0


def test_special_tokens_are_required():
    with pytest.raises(ValueError, match="MASK"):
        train_wordpiece(TEXTS, vocab_size=100, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]"])


def test_collection_tokenizer(irds_home, tmp_path):
    path = str(tmp_path / "cisi-wordpiece")
    tokenizer = train_collection_tokenizer("cisi", path, vocab_size=2000, limit=400)
    assert {"tokenizer.json", "tokenizer_config.json"} <= set(os.listdir(path))
    assert 500 < len(tokenizer) <= 2000
    loaded = AutoTokenizer.from_pretrained(path)
    ids = loaded("Information retrieval and libraries")["input_ids"]
    assert loaded.convert_ids_to_tokens(ids)[1:-1] == ["information", "retrieval", "and", "libraries"]


def test_collection_tokenizer_unknown_field(irds_home):
    with pytest.raises(KeyError, match="available"):
        train_collection_tokenizer("cisi", vocab_size=100, fields=["abstract"], limit=10)
