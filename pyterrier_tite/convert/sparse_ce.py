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

from pyterrier_tite.convert.checkpoint import (
    CheckpointError,
    load_exactly,
    local_checkpoint,
    read_config,
    read_meta,
    read_state_dict,
)
from pyterrier_tite.convert.cross_encoder import note_fresh
from pyterrier_tite.modeling.cross_encoder import CrossEncoderScorer
from pyterrier_tite.modeling.sparse_ce import FLAGS, SparseCrossEncoder, SparseCrossEncoderConfig
from pyterrier_tite.tokenization.cross_encoder import (
    QUERY_MAX_LENGTH,
    REFERENCE_QUERY_WORD_PIECES,
    SPECIAL_IDS,
    folder_tokenizer,
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


def is_sparse_checkpoint(folder: str | os.PathLike) -> bool:
    """A local folder whose ``config.json`` is a sparse cross-encoder's."""
    return os.path.isfile(os.path.join(os.fspath(folder), "config.json")) and is_sparse_config(read_config(folder))


def _folder_special_ids(folder: str) -> dict[str, int]:
    """The special ids of the folder's own tokenizer ({} when it has none)."""
    try:
        return special_ids(folder_tokenizer(folder))
    except (OSError, ValueError):
        return {}


def sparse_config(folder: str, ids: dict[str, int] | None = None, **overrides) -> SparseCrossEncoderConfig:
    """The folder's config as a :class:`SparseCrossEncoderConfig`: special ids the config lacks from ``ids`` (else
    the folder's tokenizer), explicit ``overrides`` last. A missing id is an error, not the WordPiece default."""
    config = read_config(folder)
    if config.get("model_type", "bert") != "bert":
        raise ValueError(f"not supported: model_type {config.get('model_type')!r} ({folder}) for SparseCE (BERT only)")
    lacking = [k for k in SPECIAL_IDS if config.get(k) is None and k not in overrides]
    known = dict(ids or {})
    if any(k not in known for k in lacking):
        known = {**_folder_special_ids(folder), **known}
    unknown = [k for k in lacking if k not in known]
    if unknown:
        raise CheckpointError(f"{folder}: config.json has no {', '.join(unknown)} and no tokenizer gives it")
    fill = {k: known[k] for k in lacking}
    return SparseCrossEncoderConfig(**{**config, **fill, **overrides})


def load_sparse_cross_encoder(folder: str, ids: dict[str, int] | None = None, **overrides) -> SparseCrossEncoder:
    """A sparse checkpoint loaded exactly (every tensor used, none missing), or a plain BERT checkpoint converted:
    encoder exact, pooler / classifier fresh when absent, pre-training heads ignored, all said once."""
    folder = os.fspath(folder)
    sparse = is_sparse_config(read_config(folder))
    model = SparseCrossEncoder(sparse_config(folder, ids, **overrides))
    state = read_state_dict(folder)
    if sparse:
        load_exactly(model, state, folder, fresh=DERIVED)
    else:
        state = bert_state(state)
        fresh, ignored = new_head_keys(model, state)
        load_exactly(model, state, folder, fresh=DERIVED + tuple(fresh), unused=tuple(ignored))
        if fresh:
            note_fresh(f"score head {', '.join(fresh)}" + (f" (ignored: {', '.join(ignored)})" if ignored else ""))
    return model.eval()


def bert_state(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A plain BERT state dict in this model's key names: a bare ``BertModel``'s keys get ``bert.``; the old
    TensorFlow-era LayerNorm names ``gamma`` / ``beta`` become ``weight`` / ``bias``."""
    prefix = "" if any(k.startswith("bert.") for k in state) else "bert."
    renamed = {}
    for key, value in state.items():
        key = key.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias")
        renamed[prefix + key if not key.startswith(("cls.", "classifier.")) else key] = value
    return renamed


def new_head_keys(model: SparseCrossEncoder, state: dict[str, torch.Tensor]) -> tuple[list[str], list[str]]:
    """(score-head tensors the checkpoint lacks, checkpoint tensors outside the encoder) of a new-head start: a
    checkpoint without a classifier. One with a classifier is a cross-encoder already and must load exactly."""
    if "classifier.weight" in state:  # a cross-encoder already: loaded exactly, head and all
        return [], []
    ignored = sorted(k for k in state if not k.startswith("bert."))
    head = ("bert.pooler.", "classifier.")
    return sorted(k for k in model.state_dict() if k.startswith(head) and k not in state), ignored


def from_bert(path_or_model, ids: dict[str, int] | None = None, **overrides) -> SparseCrossEncoder:
    """A sparse cross-encoder from a folder / hub id (:func:`load_sparse_cross_encoder`) or a loaded BERT module
    (``BertModel`` / ``BertFor*`` / a sparse model): its encoder weights must all be there, the heads it lacks
    (pooler, classifier) start fresh and are reported. ``ids``: special ids the module's config lacks."""
    if not isinstance(path_or_model, nn.Module):
        return load_sparse_cross_encoder(local_checkpoint(path_or_model), ids, **overrides)
    bert = path_or_model
    fields = {k: v for k, v in bert.config.to_dict().items() if k not in ("id2label", "label2id") and v is not None}
    model = SparseCrossEncoder(SparseCrossEncoderConfig(**{**(ids or {}), **fields, **overrides}))
    missing, _ = model.load_state_dict(bert_state(bert.state_dict()), strict=False)
    missing = [k for k in missing if k not in DERIVED]
    lost = [k for k in missing if "embeddings." in k or "encoder." in k]
    if lost:
        raise ValueError(f"not a BERT checkpoint, missing encoder weights: {lost[:4]}")
    if missing:
        note_fresh(f"score head {', '.join(missing)} (from a {type(bert).__name__})")
    return model.to(bert.dtype)


# ------------------------------------------------------------------------------------------------ reranker settings
def sparse_overrides(path_or_model, w, symmetric: bool | None, flags: dict[str, bool]) -> dict:
    """Config overrides for a sparse backbone: a plain BERT gets the released pattern unless told otherwise; ``w``
    (``KEEP``: the checkpoint's, None: full attention), ``symmetric`` (the query attends to [CLS] and the doc) and
    single attention flags override."""
    overrides: dict = {}
    if not is_sparse_model(path_or_model):
        overrides.update(RELEASED_PATTERN)
    if w != KEEP:
        if w is not None and (not isinstance(w, int) or w < 0):
            raise ValueError(f"w must be None (full attention) or an int >= 0, got {w!r}")
        overrides["attention_window_size"] = w
    if symmetric is not None:
        overrides.update(query_cls_attention=symmetric, query_doc_attention=symmetric)
    unknown = set(flags) - set(FLAGS)
    if unknown:
        raise TypeError(f"unknown attention flags {sorted(unknown)}; expected some of {FLAGS}")
    overrides.update(flags)
    return overrides


def sparse_backbone(
    path_or_model, w=KEEP, symmetric: bool | None = None, ids: dict[str, int] | None = None, **flags: bool
) -> SparseCrossEncoder:
    """A :class:`SparseCrossEncoder` from a reference checkpoint (folder or hub id, loaded exactly), any plain BERT
    (folder or module; new score head) or a model, with the settings of :func:`sparse_overrides`. ``ids``: special
    token ids for a config that lacks them (the tokenizer's, as in the reference)."""
    if not isinstance(path_or_model, nn.Module):
        path_or_model = local_checkpoint(path_or_model)
    overrides = sparse_overrides(path_or_model, w, symmetric, flags)
    if isinstance(path_or_model, SparseCrossEncoder) and not overrides:
        return path_or_model
    return from_bert(path_or_model, ids, **overrides)


def is_sparse_model(model) -> bool:
    """A sparse cross-encoder: a scorer or model of one, a folder saved with a sparse backbone or a sparse config."""
    if isinstance(model, CrossEncoderScorer):
        return model.is_sparse
    if isinstance(model, nn.Module):
        return isinstance(model, SparseCrossEncoder)
    return read_meta(model).get("backbone") == "sparse" or is_sparse_checkpoint(model)


def stored_lengths(model) -> dict[str, int | None]:
    """The input caps a checkpoint folder stores: ``pt_meta.json``'s (our saves), the reference's for a released
    sparse checkpoint (query 32 tokens with [CLS] / [SEP], doc = the positions left), else ours (32, positions)."""
    if isinstance(model, str):
        meta = read_meta(model)
        if "query_max_length" in meta:
            return {"query_max_length": meta["query_max_length"], "doc_max_length": meta.get("doc_max_length")}
        if not meta and is_sparse_checkpoint(model):
            return {"query_max_length": REFERENCE_QUERY_WORD_PIECES, "doc_max_length": None}
    return {"query_max_length": QUERY_MAX_LENGTH, "doc_max_length": None}
