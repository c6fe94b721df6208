"""Sparse cross-encoder checkpoints: the released reference layout (``webis/sparse-cross-encoder-*``) loaded exactly,
and plain BERT checkpoints converted with a say-so for the fresh score head.

Released configs carry fields of the training code (``ListformerModelForSequenceClassification`` architectures,
``depth``, ``input_type_embedding``, ``normalize_output``, ...) that the reference model ignores, so they are kept but
not used; they carry no ``sep_token_id``, which the reference takes from the tokenizer, so missing special ids come
from the tokenizer (never from a silent default). The reference's own input caps (query 32 tokens including [CLS] and
[SEP], doc = what the positions leave) are the defaults for such checkpoints."""

from __future__ import annotations

import os

import torch
from torch import nn

from pyterrier_tite.models.checkpoint import Checkpoint, CheckpointError, load_tokenizer, open_checkpoint
from pyterrier_tite.models.sparse_ce.configuration import SparseCrossEncoderConfig
from pyterrier_tite.models.sparse_ce.tokenization import (
    QUERY_MAX_LENGTH,
    REFERENCE_QUERY_WORD_PIECES,
    SPECIAL_IDS,
    special_ids,
)

#: the released pattern: window 4, the query attends only to itself (applied when a plain BERT becomes a SparseCE)
RELEASED_PATTERN = {"attention_window_size": 4, "query_cls_attention": False, "query_doc_attention": False}
#: ``w`` value meaning "as the checkpoint says"
KEEP = "config"
#: derived from the config, absent from some checkpoints: may start fresh without a report
DERIVED = ("bert.embeddings.position_ids",)


def is_sparse_config(config: dict) -> bool:
    """A config written by the reference (or by us) for a sparse cross-encoder, not a plain BERT one."""
    return "attention_window_size" in config


def stored_lengths(checkpoint: str | os.PathLike | Checkpoint) -> dict[str, int | None]:
    """The input caps (word pieces) a checkpoint (folder, hub id or opened) stands for: ``pt_meta.json``'s (our
    saves), the reference's for a released sparse checkpoint (query 32 tokens with [CLS] / [SEP], doc = the positions
    left), else ours (32, positions)."""
    checkpoint = open_checkpoint(checkpoint)
    meta = checkpoint.meta
    if "query_max_length" in meta:
        return {"query_max_length": meta["query_max_length"], "doc_max_length": meta.get("doc_max_length")}
    if not meta and is_sparse_config(checkpoint.config):
        return {"query_max_length": REFERENCE_QUERY_WORD_PIECES, "doc_max_length": None}
    return {"query_max_length": QUERY_MAX_LENGTH, "doc_max_length": None}


def _folder_special_ids(checkpoint: Checkpoint) -> dict[str, int]:
    """The special ids of the checkpoint's own tokenizer ({} when it has none)."""
    try:
        return special_ids(load_tokenizer(checkpoint))
    except (OSError, ValueError):
        return {}


def sparse_config(
    folder: str | os.PathLike | Checkpoint, ids: dict[str, int] | None = None, **overrides
) -> SparseCrossEncoderConfig:
    """The folder's config as a :class:`SparseCrossEncoderConfig`: special ids the config lacks from ``ids`` (else
    the folder's tokenizer), explicit ``overrides`` last. A missing id is an error, not the WordPiece default. A
    :class:`Checkpoint` gives its ``config.json`` as read when it was opened."""
    checkpoint = open_checkpoint(folder)
    folder, config = checkpoint.folder, checkpoint.config
    if not config:
        raise FileNotFoundError(f"{folder} has no config.json: not a model checkpoint folder")
    if config.get("model_type", "bert") != "bert":
        raise ValueError(f"not supported: model_type {config.get('model_type')!r} ({folder}) for SparseCE (BERT only)")
    lacking = [k for k in SPECIAL_IDS if config.get(k) is None and k not in overrides]
    known = dict(ids or {})
    if any(k not in known for k in lacking):
        known = {**_folder_special_ids(checkpoint), **known}
    unknown = [k for k in lacking if k not in known]
    if unknown:
        raise CheckpointError(f"{folder}: config.json has no {', '.join(unknown)} and no tokenizer gives it")
    fill = {k: known[k] for k in lacking}
    return SparseCrossEncoderConfig(**{**config, **fill, **overrides})


def bert_state(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A plain BERT state dict in this model's key names: a bare ``BertModel``'s keys get ``bert.``; the old
    TensorFlow-era LayerNorm names ``gamma`` / ``beta`` become ``weight`` / ``bias``."""
    prefix = "" if any(k.startswith("bert.") for k in state) else "bert."
    renamed = {}
    for key, value in state.items():
        key = key.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias")
        renamed[prefix + key if not key.startswith(("cls.", "classifier.")) else key] = value
    return renamed


def new_head_keys(model: nn.Module, state: dict[str, torch.Tensor]) -> tuple[list[str], list[str]]:
    """(score-head tensors the checkpoint lacks, checkpoint tensors outside the encoder) of a new-head start: a
    checkpoint without a classifier. One with a classifier is a cross-encoder already and must load exactly."""
    if "classifier.weight" in state:  # a cross-encoder already: loaded exactly, head and all
        return [], []
    ignored = sorted(k for k in state if not k.startswith("bert."))
    head = ("bert.pooler.", "classifier.")
    return sorted(k for k in model.state_dict() if k.startswith(head) and k not in state), ignored
