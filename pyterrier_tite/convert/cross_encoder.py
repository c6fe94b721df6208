"""Full-attention cross-encoder backbones (MonoCE, CELI): any ``AutoModelForSequenceClassification`` of BERT or ELECTRA
type (the CELI paper uses ELECTRA), loaded exactly. Only an explicit start from an encoder without a score head (a
plain BERT / MiniLM / ELECTRA discriminator) may create fresh weights, and the load then says so in one warning."""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from torch import nn

from pyterrier_tite.convert.checkpoint import CheckpointError, quiet_transformers, raise_on_mismatch, read_config

#: model types whose ``*ForSequenceClassification`` takes ``[CLS] q [SEP] d [SEP]`` with token types 0 / 1
SEQUENCE_CLASSIFIER_TYPES = ("bert", "electra")
#: files that hold a vocabulary: without one, transformers 5 builds an empty tokenizer instead of failing
VOCAB_FILES = ("tokenizer.json", "vocab.txt", "vocab.json", "spiece.model", "sentencepiece.bpe.model")
_NOTES: ContextVar[list[str] | None] = ContextVar("fresh_weight_notes", default=None)


@contextmanager
def one_fresh_warning(source: str) -> Iterator[None]:
    """Collects what the loaders inside create fresh (backbone head, score head) into ONE warning for ``source``, so
    a user starting from a plain encoder is told once, not once per part."""
    token = _NOTES.set([])
    try:
        yield
        notes = _NOTES.get()
    finally:
        _NOTES.reset(token)
    if notes:
        warnings.warn(f"{source}: new weights (random init, train before use): {'; '.join(notes)}", stacklevel=3)


def note_fresh(note: str) -> None:
    """Reports fresh weights: into the enclosing :func:`one_fresh_warning`, or as its own warning outside one."""
    notes = _NOTES.get()
    if notes is None:
        warnings.warn(f"new weights (random init, train before use): {note}", stacklevel=3)
    else:
        notes.append(note)


def sequence_classifier(path_or_model) -> nn.Module:
    """A one-logit BERT / ELECTRA ``*ForSequenceClassification`` from a module (kept as is) or a local folder."""
    from transformers import PreTrainedModel

    name = type(path_or_model).__name__
    if isinstance(path_or_model, PreTrainedModel) and name.endswith("ForSequenceClassification"):
        check_type(path_or_model.config.model_type, name)
        return path_or_model
    if isinstance(path_or_model, nn.Module):
        raise TypeError(f"expected a BERT / ELECTRA *ForSequenceClassification or a folder, got {name}")
    return load_sequence_classifier(os.fspath(path_or_model))


def check_type(model_type: str | None, source: str) -> None:
    """Other encoders differ in token types and special tokens; refuse them instead of scoring garbage."""
    if model_type not in SEQUENCE_CLASSIFIER_TYPES:
        raise ValueError(
            f"not supported: model_type {model_type!r} ({source}) as a cross-encoder backbone; "
            f"expected one of {SEQUENCE_CLASSIFIER_TYPES}"
        )


def load_sequence_classifier(folder: str) -> nn.Module:
    """The folder's sequence classifier with every tensor from the checkpoint. Without any ``classifier.*`` tensor
    it is a new-head start: classifier (and a missing BERT pooler) start fresh, pre-training heads outside the
    encoder (MLM, ELECTRA discriminator) are ignored, both reported via :func:`note_fresh`."""
    from transformers import AutoModelForSequenceClassification

    check_type(read_config(folder).get("model_type"), folder)
    with quiet_transformers():
        model, info = AutoModelForSequenceClassification.from_pretrained(folder, num_labels=1, output_loading_info=True)
    missing, unexpected = sorted(info.get("missing_keys", ())), sorted(info.get("unexpected_keys", ()))
    base = model.base_model_prefix + "."
    new_head = all(k in missing for k in model.state_dict() if k.startswith("classifier."))
    if new_head:
        fresh = [k for k in missing if k.startswith(("classifier.", base + "pooler."))]
        ignored = [k for k in unexpected if not k.startswith(base)]
        missing = [k for k in missing if k not in fresh]
        unexpected = [k for k in unexpected if k not in ignored]
        note_fresh(f"score head {', '.join(fresh)}" + (f" (ignored: {', '.join(ignored)})" if ignored else ""))
    raise_on_mismatch(folder, missing, unexpected, info.get("mismatched_keys", ()))
    return model


def fill_special_ids(config, tokenizer) -> None:
    """BERT / ELECTRA configs carry no [CLS] / [SEP] ids: take the tokenizer's, so the pair layout uses the ids the
    texts were tokenised with (saved with the config, so a reloaded folder scores the same)."""
    for name in ("cls_token_id", "sep_token_id"):
        if getattr(config, name, None) is None:
            value = getattr(tokenizer, name, None) if tokenizer is not None else None
            if value is None:
                raise CheckpointError(f"neither the config nor the tokenizer gives {name}")
            setattr(config, name, int(value))


def folder_tokenizer(folder: str):
    """The folder's tokenizer; a folder without vocabulary files raises (transformers 5 would silently build an
    empty one whose [SEP] id is wrong) instead of scoring with made-up ids."""
    from transformers import AutoTokenizer

    if not any(os.path.isfile(os.path.join(folder, name)) for name in VOCAB_FILES):
        raise FileNotFoundError(f"{folder} has no tokenizer files ({', '.join(VOCAB_FILES)}); pass tokenizer=")
    return AutoTokenizer.from_pretrained(folder)
