"""Sparse cross-encoder checkpoints: the released layout (``webis/sparse-cross-encoder-*``) loaded exactly, plain BERT
ones converted with a say-so for the fresh score head. Released configs keep fields of the training code, which the
model ignores, and lack ``sep_token_id``, which the reference takes from the tokenizer: so do we (no silent default)."""

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
    """The input caps (word pieces) a checkpoint stands for: ``pt_meta.json``'s, the reference's for a released
    sparse checkpoint (query 32 tokens with [CLS] / [SEP]), else ours; doc None: the positions left."""
    checkpoint = open_checkpoint(checkpoint)
    meta = checkpoint.meta
    if "query_max_length" in meta:
        return {"query_max_length": meta["query_max_length"], "doc_max_length": meta.get("doc_max_length")}
    if not meta and is_sparse_config(checkpoint.config):
        return {"query_max_length": REFERENCE_QUERY_WORD_PIECES, "doc_max_length": None}
    return {"query_max_length": QUERY_MAX_LENGTH, "doc_max_length": None}


def sparse_config(
    folder: str | os.PathLike | Checkpoint, ids: dict[str, int] | None = None, **overrides
) -> SparseCrossEncoderConfig:
    """The folder's config as a :class:`SparseCrossEncoderConfig`: special ids it lacks from ``ids`` (else the
    folder's tokenizer; none is an error, not the WordPiece default), ``overrides`` last."""
    checkpoint = open_checkpoint(folder)
    folder, config = checkpoint.folder, checkpoint.config
    if not config:
        raise FileNotFoundError(f"{folder} has no config.json: not a model checkpoint folder")
    if config.get("model_type", "bert") != "bert":
        raise ValueError(f"not supported: model_type {config.get('model_type')!r} ({folder}) for SparseCE (BERT only)")
    lacking = [k for k in SPECIAL_IDS if config.get(k) is None and k not in overrides]
    known = dict(ids or {})
    if any(k not in known for k in lacking):
        try:  # the checkpoint's own tokenizer, where it has one
            known = {**special_ids(load_tokenizer(checkpoint)), **known}
        except (OSError, ValueError):
            pass
    unknown = [k for k in lacking if k not in known]
    if unknown:
        raise CheckpointError(f"{folder}: config.json has no {', '.join(unknown)} and no tokenizer gives it")
    fill = {k: known[k] for k in lacking}
    return SparseCrossEncoderConfig(**{**config, **fill, **overrides})


def bert_state(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A plain BERT state dict under this model's keys (``bert.`` prefix; TF-era ``gamma`` / ``beta`` renamed)."""
    prefix = "" if any(k.startswith("bert.") for k in state) else "bert."
    renamed = {}
    for key, value in state.items():
        key = key.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias")
        renamed[prefix + key if not key.startswith(("cls.", "classifier.")) else key] = value
    return renamed


def new_head_keys(model: nn.Module, state: dict[str, torch.Tensor]) -> tuple[list[str], list[str]]:
    """(score-head tensors the checkpoint lacks, tensors outside the encoder) of a checkpoint without a classifier;
    one with a classifier is a cross-encoder already and must load exactly."""
    if "classifier.weight" in state:  # a cross-encoder already: loaded exactly, head and all
        return [], []
    ignored = sorted(k for k in state if not k.startswith("bert."))
    head = ("bert.pooler.", "classifier.")
    return sorted(k for k in model.state_dict() if k.startswith(head) and k not in state), ignored
