"""A TITE from a BERT or DistilBERT checkpoint with pooling inserted into its layers (TITE at CPU scale without
pre-training): the weights map one to one (post-norm, learned positions, no RoPE); with no pooling the result computes
what ``BertModel`` (token type 0) or ``DistilBertModel`` computes."""

from __future__ import annotations

import math
import os
from typing import Literal

import torch

from pyterrier_tite.models.backbone import encoder_from_pretrained
from pyterrier_tite.models.checkpoint import open_checkpoint
from pyterrier_tite.models.tite.configuration import TiteConfig, output_shapes
from pyterrier_tite.models.tite.modeling import TiteModel


def pooling_needed(max_length: int, kernel: int) -> int:
    """Number of k = s pooling layers that take ``max_length`` tokens to one vector (9 for 512 / k=2, 6 for k=3)."""
    return max(0, math.ceil(math.log(max_length, kernel) - 1e-9)) if max_length > 1 else 0


def pooling_layers(num_layers: int, num_pooling: int, arrangement: Literal["late", "staggered"]) -> list[bool]:
    """Which layers pool: ``late`` = the last ``num_pooling`` layers; ``staggered`` = spread evenly, each group
    starting with a non-pooling layer (12 layers / 9 pooling -> layers 2-4, 6-8, 10-12 as in the paper)."""
    if not 0 <= num_pooling <= num_layers:
        raise ValueError(f"cannot pool in {num_pooling} of {num_layers} layers")
    if arrangement == "late":
        return [i >= num_layers - num_pooling for i in range(num_layers)]
    if arrangement == "staggered":
        return [(i + 1) * num_pooling // num_layers > i * num_pooling // num_layers for i in range(num_layers)]
    raise ValueError(f"arrangement must be 'late' or 'staggered', got {arrangement!r}")


#: one layer of an explicit structure: no pooling (None), a kernel (= stride), or pooling every row it can receive
LayerPooling = int | None | Literal["global"]


def parse_structure(spec: str) -> list[LayerPooling]:
    """``"0/2/0/2/2/g"`` -> ``[None, 2, None, 2, 2, "global"]``: per layer ``0`` (or ``-``, which a command line
    would read as an option) no pooling, an integer >= 2 the kernel (= stride), ``g`` global (the longest input)."""
    layers: list[LayerPooling] = []
    for item in spec.strip().split("/"):
        if item in ("0", "-"):
            layers.append(None)
        elif item == "g":
            layers.append("global")
        elif item.isdigit() and int(item) >= 2:
            layers.append(int(item))
        else:
            raise ValueError(f"structure {spec!r}: layer entry {item!r} is not 0, 'g' or a kernel >= 2")
    return layers


def pooling_from_flags(num_layers: int, default_structure: str, default_pooling_layers: int,
                       structure: str | None = None, pooling_layers: int | None = None, kernel: int | None = None,
                       arrangement: str | None = None) -> dict:  # fmt: skip
    """``tite_from_bert``'s pooling keywords from a recipe's flags: a ``structure``; else, with any of the other three,
    the last layers pool (unset: kernel 2, late, ``default_pooling_layers``); with none, ``default_structure`` where
    it has ``num_layers`` layers, else the late defaults (a teacher of another depth still trains)."""
    if structure is None and pooling_layers is None and kernel is None and arrangement is None:
        default = parse_structure(default_structure)
        if len(default) == num_layers:
            return {"kernels": default}
    if structure:
        return {"kernels": parse_structure(structure)}
    return {"kernel": 2 if kernel is None else kernel, "arrangement": arrangement or "late",
            "num_pooling_layers": default_pooling_layers if pooling_layers is None else pooling_layers}  # fmt: skip


def format_structure(kernels: list[int | None], strides: list[int | None] | None = None) -> str:
    """Per-layer kernels in ``parse_structure``'s notation (a global layer as its kernel; other strides ``k:s``)."""
    strides = kernels if strides is None else strides
    layers = zip(kernels, strides, strict=True)
    return "/".join("0" if k is None else (str(k) if k == s else f"{k}:{s}") for k, s in layers)


def tite_config_from_bert(
    bert_config,
    *,
    kernel: int = 2,
    stride: int | None = None,
    num_pooling_layers: int | None = None,
    arrangement: Literal["late", "staggered"] = "late",
    final_pooling: Literal["global", "none"] = "global",
    max_length: int | None = None,
    pooling_location: Literal["pre", "intra", "post"] = "intra",
    kernels: list[LayerPooling] | None = None,
) -> TiteConfig:
    """A TiteConfig with BERT's (or DistilBERT's) sizes and pooling in ``num_pooling_layers`` of its layers.

    ``num_pooling_layers`` defaults to what reaches one vector for ``max_length`` (default: BERT's positions), at most
    ``num_layers - 1`` so the first layer sees every token. ``final_pooling='global'`` widens the last layer's window
    to every row it can receive where those layers cannot reach one vector; ``'none'`` keeps them (with
    ``num_pooling_layers=0``: plain BERT). ``kernels`` (``parse_structure``'s) places the pooling per layer instead
    of ``kernel``, ``stride``, ``num_pooling_layers`` and ``arrangement``.
    """
    sizes = bert_sizes(bert_config)
    layers = sizes["num_hidden_layers"]
    max_length = max_length or bert_config.max_position_embeddings
    if max_length > bert_config.max_position_embeddings:
        raise ValueError(f"max_length {max_length} exceeds BERT's {bert_config.max_position_embeddings} positions")
    layers_given = kernels is not None
    if layers_given:
        if num_pooling_layers is not None or stride is not None:
            raise ValueError("explicit kernels replace num_pooling_layers and stride: pass one or the other")
        kernels, strides = explicit_kernels(kernels, layers, max_length)
    else:
        stride = kernel if stride is None else stride
        if num_pooling_layers is None:
            num_pooling_layers = min(pooling_needed(max_length, kernel), layers - 1)
        pools = pooling_layers(layers, num_pooling_layers, arrangement)
        kernels = [kernel if p else None for p in pools]
        strides = [stride if p else None for p in pools]
    shapes = output_shapes(max_length, kernels, strides)
    if layers_given and shapes[-1] > 1:
        raise ValueError(f"the structure {format_structure(kernels)} ends in {shapes[-1]} rows at length {max_length}, "
                         "not one vector: end it with 'g' (global pooling)")  # fmt: skip
    if final_pooling == "global" and shapes[-1] > 1:
        kernels[-1] = strides[-1] = shapes[-2]
    elif final_pooling not in ("global", "none"):
        raise ValueError(f"final_pooling must be 'global' or 'none', got {final_pooling!r}")
    return TiteConfig(
        **sizes,
        kernel_sizes=kernels,
        strides=strides,
        max_position_embeddings=max_length,
        initializer_range=bert_config.initializer_range,
        pad_token_id=bert_config.pad_token_id if bert_config.pad_token_id is not None else 0,
        absolute_positional_embedding_type="learned",
        relative_positional_embedding_type="none",
        pooling_location=pooling_location,
        norm_location="post",
        norm_type="layer",
    )


def explicit_kernels(layers: list[LayerPooling], count: int, max_length: int) -> tuple[list, list]:
    """Kernels and strides of an explicit structure, ``"global"`` the longest input its layer can receive."""
    if len(layers) != count:
        raise ValueError(f"the structure names {len(layers)} layers; the model has {count}")
    kernels: list[int | None] = []
    for layer in layers:
        if layer == "global":
            layer = output_shapes(max_length, kernels, kernels)[-1]
        elif layer is not None and (not isinstance(layer, int) or layer < 2):
            raise ValueError(f"a layer's kernel must be an integer >= 2, 'global' or None, got {layer!r}")
        kernels.append(layer)
    return kernels, list(kernels)


def bert_sizes(config) -> dict:
    """TiteConfig sizes of a BERT or DistilBERT config (DistilBERT fixes eps at 1e-12)."""
    check_supported(config.model_type)
    if config.model_type == "bert":
        return dict(
            vocab_size=config.vocab_size, num_hidden_layers=config.num_hidden_layers,
            hidden_sizes=config.hidden_size, num_attention_heads=config.num_attention_heads,
            intermediate_sizes=config.intermediate_size, dropout_prob=config.hidden_dropout_prob,
            layer_norm_eps=config.layer_norm_eps, hidden_act=config.hidden_act,
        )  # fmt: skip
    return dict(
        vocab_size=config.vocab_size, num_hidden_layers=config.n_layers, hidden_sizes=config.dim,
        num_attention_heads=config.n_heads, intermediate_sizes=config.hidden_dim, dropout_prob=config.dropout,
        layer_norm_eps=1e-12, hidden_act=config.activation,
    )  # fmt: skip


def check_supported(model_type: str | None) -> None:
    if model_type not in ("bert", "distilbert"):
        raise ValueError(f"not supported: TITE from a {model_type!r} checkpoint (BERT and DistilBERT are)")


#: DistilBERT module names -> BERT's, so both share one mapping onto TITE
DISTILBERT_TO_BERT = {
    "transformer.layer.": "encoder.layer.",
    ".attention.q_lin.": ".attention.self.query.",
    ".attention.k_lin.": ".attention.self.key.",
    ".attention.v_lin.": ".attention.self.value.",
    ".attention.out_lin.": ".attention.output.dense.",
    ".sa_layer_norm.": ".attention.output.LayerNorm.",
    ".ffn.lin1.": ".intermediate.dense.",
    ".ffn.lin2.": ".output.dense.",
    ".output_layer_norm.": ".output.LayerNorm.",
}


def bert_state_dict_to_tite(bert_state: dict[str, torch.Tensor], num_layers: int, max_length: int) -> dict:
    """``BertModel`` / ``DistilBertModel`` weights under TITE's keys; BERT's token-type row 0 is folded into the
    position table, the pooler is dropped."""
    state = {}
    for key, value in bert_state.items():
        key = key.removeprefix("bert.").removeprefix("distilbert.")
        for theirs, ours in DISTILBERT_TO_BERT.items():
            key = key.replace(theirs, ours)
        state[key] = value
    positions = state["embeddings.position_embeddings.weight"][:max_length]
    if "embeddings.token_type_embeddings.weight" in state:
        positions = positions + state["embeddings.token_type_embeddings.weight"][0]
    out = {
        "embeddings.word_embeddings.weight": state["embeddings.word_embeddings.weight"],
        "embeddings.position_embeddings.weight": positions,
        "embeddings.norm.weight": state["embeddings.LayerNorm.weight"],
        "embeddings.norm.bias": state["embeddings.LayerNorm.bias"],
    }
    names = {
        "attention.query": "attention.self.query",
        "attention.key": "attention.self.key",
        "attention.value": "attention.self.value",
        "attention.dense": "attention.output.dense",
        "attention.norm": "attention.output.LayerNorm",
        "mlp.intermediate_dense": "intermediate.dense",
        "mlp.out_dense": "output.dense",
        "mlp.norm": "output.LayerNorm",
    }
    for i in range(num_layers):
        for ours, theirs in names.items():
            for param in ("weight", "bias"):
                out[f"encoder.layers.{i}.{ours}.{param}"] = state[f"encoder.layer.{i}.{theirs}.{param}"]
    return out


def tite_from_bert(bert: torch.nn.Module | str | os.PathLike, **config_kwargs) -> TiteModel:
    """A ``BertModel`` / ``DistilBertModel`` (or its folder / hub id) as a TiteModel in eval mode; pooling options as
    in ``tite_config_from_bert``."""
    if isinstance(bert, (str, os.PathLike)):  # loaded exactly: only the heads an encoder drops are ignored
        checkpoint = open_checkpoint(bert)
        check_supported(checkpoint.config.get("model_type"))  # before any weights are read
        bert = encoder_from_pretrained(checkpoint)
    config = tite_config_from_bert(bert.config, **config_kwargs)
    model = TiteModel(config)
    state = bert_state_dict_to_tite(bert.state_dict(), config.num_hidden_layers, config.max_position_embeddings)
    model.load_state_dict(state, strict=True)
    return model.to(next(bert.parameters()).dtype).eval()
