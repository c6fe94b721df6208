"""Aggretriever checkpoint layouts, one reader each: ``pyterrier-tite`` (ours: the MLM, ``aggretriever.json`` and the
heads' safetensors), ``pyserini`` (``castorini/aggretriever-*``: the MLM under ``encoder.``, heads ``tok_proj`` /
``cls_proj``), ``dhr`` (castorini/dhr: the MLM, ``TermWeightTrans.pt``, optional ``pooler.pt``; its ``--agg_dim`` is
not stored: 640 unless passed; untied query / passage models are two models, refused) and ``mlm`` (a plain masked
LM: heads start fresh only when asked).

Both castorini layouts use the raw term weight (no ReLU) and castorini's vocabulary offset (derived from 30,522);
dhr's ``[agg ; cls]`` and pyserini's (and our) ``[cls ; agg]`` give the same dot products."""

from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass, field

import torch
from torch import nn

from pyterrier_tite.models.checkpoint import CheckpointError, read_json

CONFIG_NAME = "aggretriever.json"
HEADS_NAME = "aggretriever_heads.safetensors"
#: text lengths (query, document) each layout's own encoder uses when the checkpoint does not store them
LAYOUT_LENGTHS: dict[str, tuple[int, int]] = {"pyserini": (32, 512), "dhr": (32, 128)}
HEADS = ("term_weight.", "cls_projection.")
#: the vocabulary size castorini's aggregation derives its slicing from, whatever the model's vocabulary
CASTORINI_VOCAB = 30522


def castorini_offset(width: int, vocab_size: int = CASTORINI_VOCAB) -> int:
    """castorini's vocabulary offset for slices of ``width`` ids (dhr ``cal_remove_dim``): ``k >= 0`` drops the first
    ``k`` ids, ``k < 0`` appends ``-k`` zeros; from 30,522 for every model (d = 640: 198 zeros appended)."""
    offset = vocab_size % width
    return offset - width if offset > 1000 else offset


@dataclass
class _Read:
    """A layout reader's result: tensors under the encoder's names and the settings the layout implies."""

    state: dict[str, torch.Tensor]
    fixed: dict = field(default_factory=dict)  # stored in the checkpoint: explicit arguments must agree
    defaults: dict = field(default_factory=dict)  # implied, not stored: explicit arguments override
    lengths: tuple[int | None, int | None] = (None, None)
    castorini: bool = False  # castorini's aggregation: raw term weight, offset derived from 30,522


def detect_layout(folder: str, state: dict[str, torch.Tensor]) -> str:
    """The layout of a checkpoint folder, from its files and tensor names (never from its name)."""
    if os.path.isfile(os.path.join(folder, CONFIG_NAME)):
        return "pyterrier-tite"
    if os.path.isdir(os.path.join(folder, "query_model")):
        raise CheckpointError(
            f"not supported: {folder} is a castorini/dhr checkpoint with untied query and passage encoders "
            "(query_model/, passage_model/): two models, not one Aggretriever"
        )
    if os.path.isfile(os.path.join(folder, "TermWeightTrans.pt")):
        return "dhr"
    if "tok_proj.weight" in state or "cls_proj.weight" in state:
        return "pyserini"
    return "mlm"


def _renamed(state: dict[str, torch.Tensor], renames: dict[str, str]) -> dict[str, torch.Tensor]:
    """Keys with a known prefix renamed (first match wins); others kept, so strict loading names them."""
    out = {}
    for key, value in state.items():
        prefix = next((p for p in renames if key.startswith(p)), None)
        out[key if prefix is None else renames[prefix] + key[len(prefix) :]] = value
    return out


def _read_pyterrier_tite(folder: str, state: dict[str, torch.Tensor]) -> _Read:
    """Ours: settings from ``aggretriever.json``; folders saved before it held the activation used ReLU."""
    from safetensors.torch import load_file

    config = read_json(os.path.join(folder, CONFIG_NAME))
    heads = load_file(os.path.join(folder, HEADS_NAME))
    fixed = {"term_weight_relu": True, "vocab_offset": None}
    fixed.update({k: config[k] for k in ("agg_dim", "cls_dim", "term_weight_relu", "vocab_offset") if k in config})
    lengths = (config.get("query_max_length"), config.get("doc_max_length"))
    return _Read({**_renamed(state, {"": "mlm."}), **heads}, fixed=fixed, lengths=lengths)


def _read_pyserini(folder: str, state: dict[str, torch.Tensor]) -> _Read:
    """pyserini's ``BERTAggretrieverEncoder`` state dict; its code hard-codes d = 640, the [CLS] dim is the shape."""
    renames = {"encoder.": "mlm.", "tok_proj.": "term_weight.", "cls_proj.": "cls_projection."}
    fixed = {"cls_dim": int(state["cls_proj.weight"].shape[0])} if "cls_proj.weight" in state else {}
    lengths = LAYOUT_LENGTHS["pyserini"]
    return _Read(_renamed(state, renames), fixed=fixed, defaults={"agg_dim": 640}, lengths=lengths, castorini=True)


def _dhr_head(folder: str, name: str) -> tuple[dict[str, torch.Tensor], int] | None:
    """A dhr ``LinearPooler`` (``{name}.pt`` + ``{name}_config.json``) as ``nn.Linear`` tensors and its output
    dim; None when absent. Untied heads (``linear_q`` != ``linear_p``) raise: not supported."""
    weights, config_file = os.path.join(folder, f"{name}.pt"), os.path.join(folder, f"{name}_config.json")
    if not os.path.isfile(weights):
        return None
    config = read_json(config_file) if os.path.isfile(config_file) else {}
    state = torch.load(weights, map_location="cpu", weights_only=True)
    query = {k[len("linear_q.") :]: v for k, v in state.items() if k.startswith("linear_q.")}
    passage = {k[len("linear_p.") :]: v for k, v in state.items() if k.startswith("linear_p.")}
    untied = config.get("tied") is False or any(not torch.equal(v, passage.get(k, v)) for k, v in query.items())
    if untied:
        raise CheckpointError(f"not supported: {weights} holds separate query and passage heads (untied)")
    unknown = sorted(k for k in state if not k.startswith(("linear_q.", "linear_p.")))
    if unknown or "weight" not in query:
        raise CheckpointError(f"{weights} is not a dhr LinearPooler (linear_q.weight/bias); found {sorted(state)}")
    return query, int(query["weight"].shape[0])


def _read_dhr(folder: str, state: dict[str, torch.Tensor]) -> _Read:
    """castorini/dhr ``DenseModel.save`` (no ``pooler.pt``: cls_dim 0)."""
    term = _dhr_head(folder, "TermWeightTrans")
    pooler = _dhr_head(folder, "pooler")
    out = _renamed(state, {"": "mlm."})
    out.update({f"term_weight.{k}": v for k, v in term[0].items()})
    if pooler is not None:
        out.update({f"cls_projection.{k}": v for k, v in pooler[0].items()})
    fixed = {"cls_dim": pooler[1] if pooler is not None else 0}
    return _Read(out, fixed=fixed, defaults={"agg_dim": 640}, lengths=LAYOUT_LENGTHS["dhr"], castorini=True)


def _read_mlm(folder: str, state: dict[str, torch.Tensor]) -> _Read:
    """A plain MLM: no heads, our training settings (ReLU term weight, padding to a multiple of 2d)."""
    return _Read(_renamed(state, {"": "mlm."}), defaults={"agg_dim": 640, "cls_dim": 128})


READERS = {"pyterrier-tite": _read_pyterrier_tite, "pyserini": _read_pyserini, "dhr": _read_dhr, "mlm": _read_mlm}


def settings_of(read: _Read, source: str, explicit: dict) -> dict:
    """Encoder settings: stored ones (an explicit value that disagrees raises), else explicit, else the layout's."""
    given = {k: v for k, v in explicit.items() if v is not None}
    for key, value in given.items():
        if key in read.fixed and read.fixed[key] != value:
            raise ValueError(f"{source} was trained with {key}={read.fixed[key]}, not {value}")
    settings = {**read.defaults, **given, **read.fixed}
    if read.castorini and settings["agg_dim"]:  # agg_dim 0 ([CLS] only) aggregates nothing
        settings.update(term_weight_relu=False, vocab_offset=castorini_offset(2 * settings["agg_dim"]))
    return settings


def mlm_from_config(folder: str) -> nn.Module:
    """The checkpoint's masked-LM class, built from its ``config.json`` (no weights)."""
    from transformers import AutoConfig, AutoModelForMaskedLM

    from pyterrier_tite.models.checkpoint import quiet_transformers

    with quiet_transformers():
        return AutoModelForMaskedLM.from_config(AutoConfig.from_pretrained(folder, trust_remote_code=False))


def legacy_names(encoder: nn.Module, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The renames Hugging Face itself makes on load (``.gamma`` / ``.beta``, a base model saved without its
    prefix), for tensors the model lacks, so an error names what is really missing instead of every tensor."""
    own, prefix = encoder.state_dict(), getattr(encoder.mlm, "base_model_prefix", "")
    out = {}
    for key, value in state.items():
        for new in _candidates(key, prefix):
            if key not in own and new in own:
                key = new
                break
        out[key] = value
    return out


def _candidates(key: str, prefix: str) -> list[str]:
    """The names ``key`` may have in the model: suffix renamed, under the base-model prefix, or both."""
    renamed = key[: -len(".gamma")] + ".weight" if key.endswith(".gamma") else key
    renamed = key[: -len(".beta")] + ".bias" if key.endswith(".beta") else renamed
    names = [renamed] if renamed != key else []
    if prefix and key.startswith("mlm."):
        names += [f"mlm.{prefix}.{name[4:]}" for name in (renamed, key)]
    return names


def fill_tied(module: nn.Module, state: dict[str, torch.Tensor], source: str) -> dict[str, torch.Tensor]:
    """Tensors the model ties (word embeddings, MLM decoder) filled from whichever name the checkpoint holds; copies
    that differ cannot load into one tensor: raises."""
    groups: dict[int, list[str]] = defaultdict(list)
    for name, tensor in module.state_dict(keep_vars=True).items():
        groups[id(tensor)].append(name)
    state = dict(state)
    for names in (g for g in groups.values() if len(g) > 1):
        present = [n for n in names if n in state]
        for other in present[1:]:
            if not torch.equal(state[other], state[present[0]]):
                raise CheckpointError(f"{source}: {present[0]} and {other} are tied in the model but differ")
        for name in names if present else ():
            state.setdefault(name, state[present[0]])
    return state
