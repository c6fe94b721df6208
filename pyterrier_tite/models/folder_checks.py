"""Checks of a model folder before anything in it is used: it is data, never code (a config naming code to import,
``auto_map``, is refused), and the sizes its config asks for must match its weights' header (so a config asking for
10^9 positions fails at once, naming the setting and both sizes, instead of allocating for minutes).
"""

from __future__ import annotations

import os
import re

import safetensors

from pyterrier_tite.models.meta_files import PT_META, CheckpointError, read_json

#: the files a folder keeps its weights in, in the order transformers prefers them (one file, or shards of an index)
WEIGHTS = ("model.safetensors", "pytorch_model.bin")

#: config setting -> (tensor name suffix, dimension of that tensor holding the size)
SIZED_BY = {
    "vocab_size": ("word_embeddings.weight", 0),
    "max_position_embeddings": ("position_embeddings.weight", 0),
    "type_vocab_size": ("token_type_embeddings.weight", 0),
    "intermediate_size": ("layer.0.intermediate.dense.weight", 0),
}
_LAYER = re.compile(r"\.(?:layer|layers)\.(\d+)\.")


def check_folder(folder: str, config: dict, tokenizer_config: dict, tensors: dict[str, dict]) -> None:
    """Refuse remote code, a folder of ours that lost its settings, and settings that contradict the weights, from the
    ``config.json``, ``tokenizer_config.json`` and safetensors header as already read."""
    for name, settings in (("config.json", config), ("tokenizer_config.json", tokenizer_config)):
        if "auto_map" in settings:
            raise CheckpointError(
                f"{os.path.join(folder, name)} names Python code of its own (auto_map); code in a model folder is "
                "never run: use a checkpoint of a standard architecture"
            )
    refuse_incomplete_save(folder)
    check_sizes(folder, config, {name: entry["shape"] for name, entry in tensors.items()})


def refuse_incomplete_save(folder: str) -> None:
    """A folder whose card says this package saved it has a ``pt_meta.json``: without it the settings it was saved
    with (lengths, markers, pooling) would silently fall back to defaults and the model score something else."""
    from pyterrier_tite.models.model_card import is_ours

    readme = os.path.join(folder, "README.md")
    if os.path.isfile(os.path.join(folder, PT_META)) or not os.path.isfile(readme) or os.path.islink(readme):
        return
    if is_ours(readme):
        raise CheckpointError(
            f"{folder} was saved by pyterrier-tite but has no {PT_META} (the settings it was saved with); save it "
            "again, or copy the folder whole"
        )


def check_sizes(folder: str, config: dict, shapes: dict[str, list[int]]) -> None:
    """Each size in :data:`SIZED_BY` and ``num_hidden_layers`` against the weights' shapes, where both exist."""
    if not shapes:
        return
    for setting, (suffix, dim) in SIZED_BY.items():
        wanted = config.get(setting)
        shape = next((s for name, s in shapes.items() if name.endswith(suffix) and len(s) > dim), None)
        if type(wanted) is int and shape is not None and wanted != shape[dim]:
            raise CheckpointError(
                f"{os.path.join(folder, 'config.json')}: {setting} is {wanted} but the weights hold {shape[dim]} "
                f"({suffix} of shape {list(shape)}); the settings do not belong to these weights"
            )
    layers = config.get("num_hidden_layers")
    present = {int(m.group(1)) for name in shapes if (m := _LAYER.search(name))}
    if type(layers) is int and present and layers > max(present) + 1:
        raise CheckpointError(
            f"{os.path.join(folder, 'config.json')}: num_hidden_layers is {layers} but the weights hold "
            f"{max(present) + 1} layers; the settings do not belong to these weights"
        )


def weight_files(folder: str | os.PathLike, required: bool = True) -> list[str]:
    """The files holding a checkpoint folder's tensors (an index's shards only as plain files in the folder, never a
    path out of it); without any ``FileNotFoundError``, or ``[]`` when not ``required``."""
    folder = os.fspath(folder)
    for name in WEIGHTS:
        single, index = os.path.join(folder, name), os.path.join(folder, name + ".index.json")
        if os.path.isfile(single):
            return [single]
        if os.path.isfile(index):
            weight_map = read_json(index).get("weight_map", {})
            names = sorted({v for v in weight_map.values() if isinstance(v, str) and os.path.basename(v) == v})
            return [os.path.join(folder, shard) for shard in names]
    if required:
        raise FileNotFoundError(f"{folder} has no model.safetensors or pytorch_model.bin")
    return []


def weight_header(folder: str) -> dict[str, dict]:
    """Tensor name -> ``{"dtype": "F32", "shape": [...]}`` of the folder's safetensors weights, from the headers alone
    ({} without them); a file whose header does not parse raises :class:`CheckpointError` naming it."""
    tensors: dict[str, dict] = {}
    for file in weight_files(folder, required=False):
        if file.endswith(".safetensors") and os.path.isfile(file):
            try:
                with safetensors.safe_open(file, framework="pt") as f:
                    slices = {name: f.get_slice(name) for name in f.keys()}
                    tensors.update({k: {"dtype": v.get_dtype(), "shape": v.get_shape()} for k, v in slices.items()})
            except safetensors.SafetensorError as exc:
                raise CheckpointError(f"{file}: not a safetensors file ({exc})") from None
    return tensors
