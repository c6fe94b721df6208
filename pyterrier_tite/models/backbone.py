"""Hugging Face encoders of any family loaded exactly as the backbone of a model with its own pooling or head: what
such a model legitimately leaves unused (a BERT pooler, an MLM head) is named here once; anything else missing or unused
raises :class:`~pyterrier_tite.models.checkpoint.CheckpointError`."""

from __future__ import annotations

import inspect
import json
import os

import torch
from torch import nn

from pyterrier_tite.models.checkpoint import Checkpoint, open_checkpoint, read_json, strict_from_pretrained


def _on_meta(auto_class, config) -> nn.Module | None:
    """The model ``auto_class`` builds for ``config`` on the meta device; None when the family has no such class."""
    try:
        with torch.device("meta"):
            return auto_class.from_config(config)
    except ValueError:
        return None


def mlm_head_prefixes(config) -> tuple[str, ...]:
    """Top-level modules of the config's MLM class other than its encoder (``cls.`` for BERT, ``vocab_*`` for
    DistilBERT): what an encoder-only model leaves unused and what a new MLM head creates."""
    from transformers import AutoModelForMaskedLM

    mlm = _on_meta(AutoModelForMaskedLM, config)
    if mlm is None:
        return ()
    return tuple(f"{name}." for name, _ in mlm.named_children() if name != mlm.base_model_prefix)


def pretraining_only_keys(config) -> tuple[str, ...]:
    """Tensors of the config's pre-training class that its MLM class lacks (BERT's pooler and next-sentence head, as
    in ``bert-base-uncased``), with and without the encoder prefix: an MLM legitimately leaves them unused."""
    from transformers import AutoModelForMaskedLM, AutoModelForPreTraining

    pretraining, mlm = _on_meta(AutoModelForPreTraining, config), _on_meta(AutoModelForMaskedLM, config)
    if pretraining is None or mlm is None:
        return ()
    extra = sorted(set(pretraining.state_dict()) - set(mlm.state_dict()))
    prefix = f"{mlm.base_model_prefix}."
    return tuple(extra) + tuple(k.removeprefix(prefix) for k in extra if k.startswith(prefix))


def encoder_from_pretrained(path: str | Checkpoint, **kwargs) -> nn.Module:
    """``AutoModel`` from a folder or hub id without its pooler, loaded exactly (a checkpoint's pooler and pre-training
    heads are legitimately unused: the caller pools itself)."""
    return _exactly(path, mlm=False, new_head=False, **kwargs)


def mlm_from_pretrained(path: str | Checkpoint, new_head: bool = False, **kwargs) -> nn.Module:
    """``AutoModelForMaskedLM`` from a folder or hub id, exactly (a pre-training-only pooler / next-sentence head is no
    problem). ``new_head=True`` (pretraining from an encoder-only checkpoint) lets the MLM head start fresh, with one
    warning."""
    return _exactly(path, mlm=True, new_head=new_head, **kwargs)


def _exactly(path: str | Checkpoint, mlm: bool, new_head: bool, **kwargs) -> nn.Module:
    from transformers import AutoConfig, AutoModel, AutoModelForMaskedLM
    from transformers.models.auto.modeling_auto import MODEL_MAPPING

    checkpoint = open_checkpoint(path)  # a Checkpoint: nothing read again
    config = AutoConfig.from_pretrained(checkpoint.folder, trust_remote_code=False)
    unused = ("pooler.", *pretraining_only_keys(config))
    if mlm:
        fresh = mlm_head_prefixes(config) if new_head else ()
        return strict_from_pretrained(AutoModelForMaskedLM, checkpoint, fresh=fresh, unused=unused, **kwargs)
    unused += mlm_head_prefixes(config)
    if "add_pooling_layer" in inspect.signature(MODEL_MAPPING[type(config)]).parameters:  # DistilBERT: TypeError
        kwargs = {"add_pooling_layer": False, **kwargs}
    return strict_from_pretrained(AutoModel, checkpoint, unused=unused, **kwargs)


@torch.no_grad()
def reference_init(module: nn.Module, std: float, norms: tuple[type, ...] = (nn.LayerNorm,)) -> None:
    """The reference (BERT) init our own ``PreTrainedModel``s share: normal(0, ``std``) weights, zero biases, zero
    padding row, unit ``norms``; other modules are left as they are."""
    if isinstance(module, nn.Linear):
        module.weight.normal_(0.0, std)
        if module.bias is not None:
            module.bias.zero_()
    elif isinstance(module, nn.Embedding):
        module.weight.normal_(0.0, std)
        if module.padding_idx is not None:
            module.weight[module.padding_idx].zero_()
    elif isinstance(module, norms):
        module.weight.fill_(1.0)
        if getattr(module, "bias", None) is not None:
            module.bias.zero_()


def sentence_transformers_settings(folder: str) -> dict:
    """Pooling (``cls`` / ``mean``) and normalisation declared by a sentence-transformers folder (``modules.json``
    and its pooling module's ``config.json``, e.g. all-MiniLM-L6-v2: mean + Normalize); {} for other folders."""
    modules_file = os.path.join(folder, "modules.json")
    if not os.path.isfile(modules_file):
        return {}
    with open(modules_file, encoding="utf-8") as f:
        modules = json.load(f)  # a list: read_json takes objects only
    settings: dict = {"normalize": any(m.get("type", "").endswith(".Normalize") for m in modules)}
    for module in modules:
        if module.get("type", "").endswith(".Pooling"):
            pooling = read_json(os.path.join(folder, module.get("path", ""), "config.json"))
            if pooling.get("pooling_mode_mean_tokens"):
                settings["pooling"] = "mean"
            elif pooling.get("pooling_mode_cls_token"):
                settings["pooling"] = "cls"
    return settings
