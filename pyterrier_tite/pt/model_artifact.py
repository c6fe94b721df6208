"""Every model of this package is a PyTerrier artifact (``to_hf``, ``build_package``, ``pt.Artifact.from_url`` work
on the transformers themselves), and the construction they share.

The weights live in memory, so a package is always a fresh ``save_pretrained`` of the model as it is: the model
loaded back computes exactly what the one packaged computes.

Example::

    model = t.Splade.from_pretrained('naver/splade-cocondenser-ensembledistil')
    model.to_hf('me/my-splade')                        # a PyTerrier artifact package + model card on the hub
    same = t.Splade.from_hf('me/my-splade')            # -> Splade, scoring exactly as `model` (safe in parallel)
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyterrier as pt
import pyterrier_alpha as pta
import torch

from pyterrier_tite.families import BY_FORMAT, Family
from pyterrier_tite.models.checkpoint import Checkpoint, Loaded
from pyterrier_tite.models.model_card import CARD_FILE, hub_id, is_ours, origin_info, render_card, update_card
from pyterrier_tite.pt.schematic import filename_safe
from pyterrier_tite.store.downloads import package_saved


def shown_name(name: Any) -> str | None:
    """How a model's name shows in its repr: a hub id as it is (also a hub cache folder or a start point), any other
    folder by its last component, never an absolute path; each side of a SPLADE pair or ``tite_from_bert`` so."""
    if name is None:
        return None
    name = getattr(name, "name", name)  # an opened Checkpoint: the name it was opened by
    name = os.fspath(name) if isinstance(name, os.PathLike) else str(name)
    pair = re.fullmatch(r"query=(.+), doc=(.+)", name)
    if pair:
        return f"query={shown_name(pair.group(1))}, doc={shown_name(pair.group(2))}"
    from_bert = re.fullmatch(r"tite_from_bert\('(.+)'\)", name)
    if from_bert:
        return f"tite_from_bert({shown_name(from_bert.group(1))!r})"
    repo = hub_id(name)
    if repo is not None:
        return repo
    return os.path.basename(name.rstrip("/\\")) or name


def is_model_name(model: Any) -> bool:
    """A model given by name: a folder, a hub id or an opened :class:`Checkpoint` (not a module)."""
    return isinstance(model, (str, os.PathLike, Checkpoint))


def opened(model: Any, tokenizer: Any, loader: Callable[..., Loaded], *settings: Any) -> Loaded:
    """What a constructor builds from: a name through its family's loader (with ``settings``; a ``tokenizer`` given
    replaces the checkpoint's), a module with its ``tokenizer`` as it is."""
    if is_model_name(model):
        loaded = loader(model, *settings)
        return loaded if tokenizer is None else dataclasses.replace(loaded, tokenizer=tokenizer)
    if tokenizer is None:
        raise ValueError("pass tokenizer= when the model is given as a module")
    return Loaded(model, tokenizer, {}, None)


def given_name(model: Any) -> str | None:
    """The name a model was given by (a :class:`Checkpoint`: the name it was opened by); None for a module."""
    if not is_model_name(model):
        return None
    name = getattr(model, "name", model)
    return os.fspath(name) if isinstance(name, os.PathLike) else name


#: what a model loaded by name knows of its origin (repr, equality, card), kept by ``apply_attributes``
IDENTITY = ("model_name", "source", "path", "card", "fresh_weights")


class ModelArtifact(pta.Artifact):
    """A PyTerrier artifact whose folder is a model saved by ``save_pretrained``: the last base of every model
    transformer. Subclasses set ``ARTIFACT_FORMAT`` (``families.py``) and write their folder in ``_save_into``; their
    constructor keeps what ``pt.inspect`` cannot read back from a same-named attribute as ``_<parameter>``, as given,
    so ``pt.inspect.transformer_attributes`` are the constructor's parameters."""

    ARTIFACT_TYPE = "model"
    ARTIFACT_PACKAGE_HINT = "pyterrier-tite"
    #: inside a pipeline's schematic the model shows as the transformer it is, not as an opaque artifact
    ARTIFACT_SCHEMATIC_SHOW_AS_TRANSFORMER = True
    #: the folder the model was loaded from as an artifact (set by the loaders), else NO_PATH
    path: Path | Any = pta.Artifact.NO_PATH
    #: what the card of the folder it was loaded from as an artifact said (training, evaluation, base, license)
    card: dict | None = None
    #: which weights started fresh when it was loaded (e.g. "score head"): a save's card warns until trained
    fresh_weights: str | None = None
    #: constructor parameters only the loader reads: changing one loads the checkpoint again
    RELOADS: tuple[str, ...] = ()

    def __init__(self, *args, **kwargs):
        """The transformers construct themselves; an artifact path is set by the loaders, never by a constructor."""

    #: the settings ``from_pretrained`` has taken by position after the name (None among them: the checkpoint's)
    PRETRAINED_POSITIONAL: tuple[str, ...] = ()

    @classmethod
    def from_pretrained(cls, path: Any = None, *settings: Any, **kwargs) -> ModelArtifact:
        """``Cls(path, **settings)`` under the name hub ids, scripts and the Hugging Face habit know; it keeps its
        signature (``path=``, the settings of :data:`PRETRAINED_POSITIONAL` by position) so code written for it runs."""
        names = cls.PRETRAINED_POSITIONAL
        if len(settings) > len(names):
            raise TypeError(f"{cls.__name__}.from_pretrained takes the name and at most {len(names)} settings by "
                            f"position ({', '.join(names)}), the rest by keyword")  # fmt: skip
        kwargs.update((name, value) for name, value in zip(names, settings, strict=False) if value is not None)
        return cls(**kwargs) if path is None else cls(path, **kwargs)

    @classmethod
    def from_module(cls, module: torch.nn.Module, tokenizer: Any, **settings) -> ModelArtifact:
        """The transformer around a module in memory and its tokenizer: nothing read, equal only over that module."""
        return cls(module, tokenizer=tokenizer, **settings)

    @property
    def family(self) -> Family:
        """This model's entry of ``families.py`` (its format, kind, title)."""
        return BY_FORMAT[self.ARTIFACT_FORMAT]

    # -- pt.inspect ---------------------------------------------------------------------------------------------
    def _module_arguments(self) -> dict[str, Any] | None:
        """Constructor arguments that rebuild this transformer around its very module; None: from its arguments."""
        return None

    def apply_attributes(self, **changes: Any) -> pt.Transformer:
        """``pt.inspect.transformer_apply_attributes``: the constructor again with ``changes``, around the very module
        (weights changed in memory stay) unless a change is the model, its tokenizer or one of :attr:`RELOADS`."""
        attributes = pt.inspect.transformer_attributes(self)
        unknown = sorted(set(changes) - {a.name for a in attributes})
        if unknown:
            known = sorted(a.name for a in attributes)
            raise pt.inspect.InspectError(f"{type(self).__name__} has no attribute(s) {unknown}; it has {known}")
        arguments: dict[str, Any] = {}
        for a in attributes:
            value = changes.get(a.name, a.value)
            if a.init_parameter_kind is inspect.Parameter.VAR_KEYWORD:
                arguments.update(value)
            else:
                arguments[a.name] = value
        around = self._module_arguments()
        if around is None or set(changes) & {*around, *self.RELOADS}:
            return type(self)(**arguments)
        model = type(self)(**{**arguments, **around, **changes})
        for name in (*IDENTITY, *(f"_{k}" for k in around)):
            if name in self.__dict__:
                model.__dict__[name] = self.__dict__[name]
        return model

    def subtransformers(self) -> dict:
        """None: a wrapped query model is part of the model, not a stage."""
        return {}

    # -- saving -------------------------------------------------------------------------------------------------
    def save_pretrained(self, path: str | os.PathLike) -> None:
        """The model folder (weights, tokenizer, ``pt_meta.json``) and its card, all or nothing, in the umask's modes;
        a README.md of the user's and whatever else an older folder held (a training run's log, its resume state) are
        kept. ``from_pretrained(path)`` / ``t.load(path)`` reload it."""
        from pyterrier_tite.store.atomic import atomic_build, follow_umask, keep_other_entries, keep_user_readme

        with atomic_build(path, overwrite=True) as staging:
            keep_user_readme(path, staging)
            self._save_into(str(staging))
            update_card(staging, self.card_info())
            follow_umask(staging)
            keep_other_entries(path, staging)

    def _save_into(self, folder: str) -> None:
        raise NotImplementedError

    # -- loading ------------------------------------------------------------------------------------------------
    @classmethod
    def load(cls, path: str | os.PathLike, **kwargs) -> ModelArtifact:
        """The transformer of a model folder (what ``from_url`` / ``from_hf`` call after extracting a package);
        keyword arguments go to ``from_pretrained``. ``TypeError`` when the folder holds another class."""
        from pyterrier_tite.pt.artifacts import load

        model = load(path, **kwargs)
        if not isinstance(model, cls):
            raise TypeError(f"{os.fspath(path)} holds a {type(model).__name__}, not a {cls.__name__}")
        return model

    @classmethod
    def from_url(cls, url: str, *, expected_sha256: str | None = None, **kwargs) -> ModelArtifact:
        """The transformer of the package at ``url``, fetched safely into the artifact cache
        (:func:`~pyterrier_tite.store.downloads.fetch_package`); ``from_hf`` / ``from_zenodo`` come here too."""
        from pyterrier_tite.store.downloads import fetch_package

        return cls.load(fetch_package(url, expected_sha256), **kwargs)

    # -- sharing ------------------------------------------------------------------------------------------------
    def build_package(self, package_path: str | None = None, **kwargs) -> str:
        """A ``.tar.lz4`` package of the model as it is now (a fresh ``save_pretrained``; a user's README.md of its
        folder travels instead of our card), plus ``<package>.json`` with its size and sha256. ``package_path``:
        default beside :attr:`path`. Other keywords: as ``pt.Artifact.build_package``."""
        if package_path is None:
            if self.path is self.NO_PATH:
                raise ValueError(f"{self!r} was not loaded from a folder: pass build_package(package_path=...)")
            package_path = str(self.path).rstrip("/\\") + ".tar.lz4"
        return package_saved(self.save_pretrained, package_path, self._their_card(), **kwargs)

    def _their_card(self) -> str | None:
        """The README.md of the folder it was loaded from when a user wrote it (not our card): it travels instead."""
        theirs = "" if self.path is self.NO_PATH else os.path.join(str(self.path), CARD_FILE)
        return theirs if theirs and os.path.isfile(theirs) and not is_ours(theirs) else None

    def push_to_hub(self, repo_id: str, *, private: bool | None = None, branch: str | None = None,
                    commit_message: str | None = None, token: str | None = None) -> str:  # fmt: skip
        """Uploads a fresh ``save_pretrained`` as a Hugging Face **model** repo (created if needed), whose card says
        ``t.load(repo_id)``; returns the commit URL. (``to_hf`` uploads an artifact *package* into a *dataset* repo,
        read by ``pt.Artifact.from_hf``.)"""
        from huggingface_hub import HfApi

        from pyterrier_tite.models.model_card import write_card

        api = HfApi(token=token)
        with tempfile.TemporaryDirectory() as folder:
            self.save_pretrained(folder)
            if self._their_card() is None:
                write_card(folder, repo=repo_id)  # the usage line names the repo it lands in
            api.create_repo(repo_id, repo_type="model", private=private, exist_ok=True)
            if branch not in (None, "main"):
                api.create_branch(repo_id, repo_type="model", branch=branch, exist_ok=True)
            return str(api.upload_folder(repo_id=repo_id, folder_path=folder, repo_type="model", revision=branch,
                                         commit_message=commit_message or f"Upload {type(self).__name__}"))  # fmt: skip

    def _hf_readme(self, *, repo: str, branch: str | None = "main", pretty_name: str | None = None,
                   metadata: dict | None = None) -> str:  # fmt: skip
        """The README of ``to_hf``'s dataset repo: the model card, with ``pt.Artifact.from_hf(repo)`` as its usage."""
        where = repo if branch in (None, "main") else f"{repo}@{branch}"
        return render_card(metadata or {}, repo=where, dataset=True, pretty_name=pretty_name)

    # -- the card -----------------------------------------------------------------------------------------------
    def card_info(self) -> dict:
        """What a save's card says: base model and license of what it was loaded from, overridden by the card it was
        loaded with; :meth:`card_settings` and fresh weights, when there are some."""
        info = {**origin_info(origin_names(self)), **(self.card if isinstance(self.card, dict) else {})}
        settings = self.card_settings()
        if settings:
            info["settings"] = settings
        if self.fresh_weights:
            info["fresh_weights"] = self.fresh_weights
        return info

    def card_settings(self) -> dict:
        """Settings the card shows that ``pt_meta.json`` does not hold (they live in ``config.json``)."""
        return {}

    def __str__(self) -> str:
        """The repr, safe as a file name (``pt.Experiment(..., save_dir=)``), also where there is no NamedSchematic."""
        return filename_safe(repr(self))


def origin_names(model) -> list[str]:
    """The names and folders a transformer was loaded from, for its card: ``model_name`` as given (each side), the
    resolved folder (``source``), last its tokenizer's (a re-ranker with new heads keeps no source)."""
    names: list[str] = []
    given = getattr(model, "model_name", None)
    if isinstance(given, str):
        sides = re.fullmatch(r"query=(.+), doc=(.+)", given) or re.fullmatch(r"tite_from_bert\('(.+)'\)", given)
        names += list(sides.groups()) if sides else [given]
    for source in (getattr(model, "source", None), getattr(getattr(model, "scorer", None), "source", None)):
        if isinstance(source, tuple) and len(source) > 1:  # ("from_bert", folder, settings)
            source = source[1]
        if isinstance(source, str):
            names.append(source)
    tokenizer = getattr(getattr(model, "inputs", None), "tokenizer", None) or getattr(model, "tokenizer", None)
    if isinstance(getattr(tokenizer, "name_or_path", None), str) and tokenizer.name_or_path:
        names.append(tokenizer.name_or_path)
    return names
