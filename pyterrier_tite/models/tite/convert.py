"""Every released TITE layout, loaded exactly, told apart by the checkpoint, never by its name: the reference
pre-training module (``webis/tite-2-late``: encoder under ``tite.``, heads ignored; the learned position table may
survive only as its tied copy in a head, which the reference's own loader drops for a random one: we take the copy),
the Lightning IR bi-encoder (``model_type`` "lir-dpr", TITE and bi-encoder fields in one ``config.json``) and a
reference ``TiteModel`` or our saves (``model_type`` "tite")."""

from __future__ import annotations

import os

import torch
from torch import nn

from pyterrier_tite.models.bert_biencoder.tokenization import DOC_MARKER, QUERY_MARKER
from pyterrier_tite.models.checkpoint import (
    Checkpoint,
    CheckpointError,
    load_exactly,
    open_checkpoint,
    read_config,
    read_state_dict,
)
from pyterrier_tite.models.checkpoint import load_tokenizer as load_tite_tokenizer
from pyterrier_tite.models.tite.configuration import TiteConfig

__all__ = ["DOC_MARKER", "QUERY_MARKER", "load_tite_model", "load_tite_tokenizer", "tite_layout"]

LIGHTNING_IR_DPR = "lir-dpr"
#: Lightning IR bi-encoder fields (names of v0.0.4 and of later versions): settings of the bi-encoder, not of TITE
LIGHTNING_IR_FIELDS = frozenset(
    {
        "backbone_model_type", "query_length", "doc_length", "similarity_function", "normalize",
        "normalization_strategy", "sparsification", "sparsification_strategy", "add_marker_tokens",
        "pooling_strategy", "query_pooling_strategy", "doc_pooling_strategy", "embedding_dim", "projection",
        "save_step", "use_adapter", "adapter_config", "pretrained_adapter_name_or_path",
    }
)  # fmt: skip
#: checkpoint tensors of the reference pre-training module that the encoder does not use
PRETRAINING_ONLY = ("heads.", "lm_decoder.")


def not_supported(what: str, source: str) -> ValueError:
    """The one error for a stored setting we do not implement (rather than computing something else)."""
    return ValueError(f"not supported: {what} (in {source})")


def tite_layout(config: dict, source: str) -> str:
    """``"tite"`` (reference model or pre-training module, our folders) or ``"lightning-ir"``; else a clear error."""
    model_type = config.get("model_type")
    if model_type == "tite":
        return "tite"
    if str(model_type).startswith("lir-"):
        backbone = config.get("backbone_model_type")
        if backbone != "tite":
            raise CheckpointError(f"{source} is a Lightning IR model on a {backbone!r} backbone, not on TITE")
        if model_type != LIGHTNING_IR_DPR:
            raise not_supported(f"Lightning IR model_type {model_type!r} (only single-vector 'lir-dpr')", source)
        return "lightning-ir"
    raise CheckpointError(
        f"{source} is not a TITE checkpoint: model_type {model_type!r}; use TITE.from_bert to insert pooling into a "
        "BERT-like encoder (TITE checkpoints have model_type 'tite', or 'lir-dpr' with backbone_model_type 'tite')"
    )


def tite_config(config: dict, **overrides) -> TiteConfig:
    """The ``TiteConfig`` of either layout's ``config.json``, Lightning IR's fields left out."""
    foreign = LIGHTNING_IR_FIELDS | {"model_type"}
    if config.get("model_type") != "tite":
        foreign |= {"architectures"}  # "LirDprTiteModel": the class that held this encoder, not ours
    fields = {k: v for k, v in config.items() if k not in foreign}
    return TiteConfig(**{**fields, **overrides})


def _tied_copies(key: str, state: dict[str, torch.Tensor]) -> list[str]:
    """Keys of the reference pre-training module that hold encoder ``key``'s tensor: every head shares the encoder's
    ``embeddings`` (the MAE head keeps the position table as its own too); the LM decoders are the word embeddings."""
    if not key.startswith("embeddings."):
        return []
    rest = key.removeprefix("embeddings.")
    heads = sorted({k.split(".")[1] for k in state if k.startswith("heads.")})
    names = [f"heads.{h}.embeddings.{rest}" for h in heads]
    if rest == "position_embeddings.weight":
        names += [f"heads.{h}.position_embeddings.weight" for h in heads]
    if rest == "word_embeddings.weight":
        names += ["lm_decoder.weight", *(f"heads.{h}.lm_head.decoder.weight" for h in heads)]
    return [n for n in names if n in state]


def encoder_state_dict(
    state: dict[str, torch.Tensor], wanted: set[str]
) -> tuple[dict[str, torch.Tensor], tuple[str, ...]]:
    """The encoder's tensors under our names and the checkpoint prefixes to ignore (the pre-training layout's heads;
    an encoder tensor stored only as a tied copy is taken from it)."""
    if not any(k.startswith("tite.") for k in state):
        return dict(state), ()
    encoder = {k.removeprefix("tite."): v for k, v in state.items()}
    for key in sorted(wanted - encoder.keys()):
        copies = _tied_copies(key, state)
        if copies:
            encoder[key] = state[copies[0]]
    return encoder, PRETRAINING_ONLY


def load_tite_model(
    path_or_id: str | os.PathLike | Checkpoint,
    *,
    model_class: type[nn.Module],
    config: TiteConfig | None = None,
    **overrides,
) -> nn.Module:
    """A ``model_class`` (passed in: a reader never imports the model it fills) of any TITE layout, loaded exactly,
    in eval mode. ``overrides`` replace stored ``TiteConfig`` fields; ``config`` the whole stored config."""
    checkpoint = open_checkpoint(path_or_id)
    source, folder, raw = checkpoint.name, checkpoint.folder, read_config(checkpoint)
    tite_layout(raw, source)
    config = config if config is not None else tite_config(raw, **overrides)
    model = model_class(config)
    state, ignored = encoder_state_dict(read_state_dict(folder), set(model.state_dict()))
    load_exactly(model, state, source, unused=ignored)
    return model.eval()


def lightning_ir_settings(config: dict, source: str) -> dict:
    """``TITE`` keyword arguments from a Lightning IR DPR config (lengths count the marker); settings that would
    change the vectors and that we do not implement raise "not supported"."""
    _check_lightning_ir_options(config, source)
    normalize = bool(config.get("normalize")) or config.get("normalization_strategy") == "l2"
    markers = (QUERY_MARKER, DOC_MARKER) if config.get("add_marker_tokens") else (None, None)
    longest = config.get("max_position_embeddings", 512)
    return {
        "query_max_length": config.get("query_length") or longest,  # Lightning IR: None = no truncation
        "doc_max_length": config.get("doc_length") or longest,
        "query_marker": markers[0],
        "doc_marker": markers[1],
        # cosine similarity = dot product of L2-normalised vectors, which is what a FlexIndex retrieves with
        "normalize": normalize or config.get("similarity_function") == "cosine",
    }


def _check_lightning_ir_options(config: dict, source: str) -> None:
    """Raise for a stored Lightning IR option whose maths we do not implement."""
    similarity = config.get("similarity_function", "dot")
    if similarity not in ("dot", "cosine"):
        raise not_supported(f"similarity_function={similarity!r} (only 'dot' and 'cosine')", source)
    for field in ("pooling_strategy", "query_pooling_strategy", "doc_pooling_strategy"):
        if config.get(field, "first") not in (None, "first"):
            raise not_supported(f"{field}={config[field]!r} (TITE pools to one vector: only 'first')", source)
    if config.get("projection") is not None:
        raise not_supported(f"projection={config['projection']!r} (only null: the pooled vector as it is)", source)
    dim, hidden = config.get("embedding_dim"), (config.get("hidden_sizes") or [None])[-1]
    if dim is not None and dim != hidden:
        raise not_supported(f"embedding_dim={dim} without a projection from hidden size {hidden}", source)
    for field in ("sparsification", "sparsification_strategy", "use_adapter"):
        if config.get(field):
            raise not_supported(f"{field}={config[field]!r}", source)
    if config.get("normalization_strategy") not in (None, "l2"):
        raise not_supported(f"normalization_strategy={config['normalization_strategy']!r} (only 'l2')", source)
