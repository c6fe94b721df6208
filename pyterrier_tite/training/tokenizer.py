"""A WordPiece vocabulary learned from the target collection (32k, as for pretraining from scratch, ECIR 2023): a
BERT-style uncased tokenizer saved in the Hugging Face layout."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from itertools import islice

from pyterrier_tite.text import document_text, text_fields

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def train_wordpiece(
    texts: Iterable[str],
    vocab_size: int = 32_000,
    lowercase: bool = True,
    min_frequency: int = 2,
    special_tokens: Sequence[str] = tuple(SPECIAL_TOKENS),
    show_progress: bool = False,
):
    """Train a WordPiece vocabulary on texts; returns a ``transformers`` BertTokenizer over it."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers
    from transformers import BertTokenizer

    special_tokens = list(special_tokens)
    missing = [t for t in SPECIAL_TOKENS if t not in special_tokens]
    if missing:
        raise ValueError(f"special_tokens must include {missing}")
    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=lowercase, strip_accents=lowercase or None)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=special_tokens,
        continuing_subword_prefix="##",
        show_progress=show_progress,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    # a BertTokenizer (the same normaliser, pre-tokeniser and template) saves in a form any transformers accepts
    return BertTokenizer(
        vocab=tokenizer.get_vocab(), do_lower_case=lowercase, strip_accents=lowercase or None, model_max_length=512
    )


def collection_texts(dataset: str, fields: Sequence[str] | None = None, limit: int | None = None) -> Iterator[str]:
    """The text of each document of an ir_datasets collection (alias or ID), fields joined by a space."""
    from pyterrier_tite import datasets

    dataset_id = datasets.irds_id(dataset)
    fields = list(fields or text_fields(dataset_id))  # as BM25 indexes them
    for i, doc in enumerate(islice(datasets.get_dataset(dataset_id).get_corpus_iter(verbose=False), limit)):
        if i == 0:
            absent = [f for f in fields if f not in doc]
            if absent:
                raise KeyError(f"documents lack fields {absent}; available: {sorted(doc)}")
        yield document_text(doc, fields)  # the text BM25 and the encoders read: bytes decoded, NaN fields absent


def train_collection_tokenizer(
    dataset: str,
    path: str | None = None,
    vocab_size: int = 32_000,
    fields: Sequence[str] | None = None,
    limit: int | None = None,
    lowercase: bool = True,
    min_frequency: int = 2,
    verbose: bool = False,
):
    """Train a WordPiece vocabulary (smaller than ``vocab_size`` on a small collection) on a collection's documents
    and save it to ``path`` if given; only documents are read, so an evaluation collection is allowed (and said)."""
    from pyterrier_tite import datasets

    texts = collection_texts(datasets.check_training_data(dataset, uses="documents"), fields=fields, limit=limit)
    if verbose:
        from tqdm.auto import tqdm

        texts = tqdm(texts, desc=f"tokenizer {dataset}", unit="doc")
    tokenizer = train_wordpiece(texts, vocab_size=vocab_size, lowercase=lowercase, min_frequency=min_frequency)
    if path is not None:
        os.makedirs(path, exist_ok=True)
        tokenizer.save_pretrained(path)
    return tokenizer
