"""The model an index needs travels with the index: what ``pyterrier-tite index`` records of it, the copy of a model
from a folder kept inside the index, and opening an index from a folder or a package URL.

An index built from a hub id (or a shipped name) records that name and its ``hub_id``; one built from a model folder
records the folder it came from and keeps the model itself in ``<index>/model/`` (a ``save_pretrained`` of the
transformer that encoded the documents, named by ``packaged_model`` in the index info). So an index folder copied to
another machine, or packaged (``pt.Artifact.load(index).build_package()``), shared (``to_hf``) and downloaded again
(``pt.Artifact.from_url`` / ``from_hf``), retrieves with the very model that built it:

    pyterrier-tite index --model runs/my-tite --dataset vaswani --index vaswani.tite
    python -c "import pyterrier as pt; pt.Artifact.load('vaswani.tite').build_package('vaswani.tite.tar.lz4')"
    pyterrier-tite retrieve --index https://example.org/vaswani.tite.tar.lz4 --topics vaswani --out run.gz
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from pathlib import Path

#: the folder inside an index that holds the model of an index built from a model folder
MODEL_FOLDER = "model"
#: what a package URL starts with (a scheme of two or more letters: ``C:`` stays a path)
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]+:")


def model_fields(name: str) -> dict:
    """``{model, hub_id}`` of the index info: the name as recorded (a folder as an absolute path) and the hub id it
    stands for (the id itself, a hub-cache snapshot folder, a shipped start point), or None."""
    from pyterrier_tite.models.model_card import hub_id

    return {"model": name, "hub_id": hub_id(name)}


def should_package(name: str) -> bool:
    """Whether an index built with the model ``name`` keeps a copy of it: a model from a folder (not ``bm25``)."""
    return name.lower() != "bm25" and os.path.isdir(name)


def package_model(index_folder: str | os.PathLike, model) -> str:
    """Save ``model`` (the transformer that built the index) into ``<index>/model/``; the folder name, relative to
    the index, for the index info."""
    model.save_pretrained(str(Path(index_folder) / MODEL_FOLDER))
    return MODEL_FOLDER


def model_for_index(path: str | os.PathLike, info: dict) -> str | None:
    """The model to load for an index: its packaged copy when it has one, else the recorded name; a recorded folder
    that is gone falls back to the recorded hub id, else is an error telling to pass ``--model``."""
    packaged = info.get("packaged_model")
    if packaged and (Path(path) / packaged).is_dir():
        return str(Path(path) / packaged)
    name = info.get("model")
    if name and os.path.isabs(name) and not os.path.exists(name):
        if info.get("hub_id"):
            return info["hub_id"]
        raise FileNotFoundError(f"{path} was built with the model folder {name}, which is not there, and holds no "
                                "copy of it (built before models were packaged): pass --model")  # fmt: skip
    return name


def is_package_url(location: str) -> bool:
    """``http(s)://...``, ``hf:org/name``, ``zenodo:ID``: a package to download rather than a folder."""
    return bool(_URL.match(location)) and not os.path.exists(location)


def index_folder(location: str | os.PathLike) -> str:
    """The index folder for a folder or a package URL: a URL is downloaded once into PyTerrier's artifact cache
    (``pt.Artifact.from_url``, the path of ``from_hf``) and its folder returned; anything else is returned as is."""
    location = os.fspath(location)
    if not is_package_url(location):
        return location
    import pyterrier as pt

    with contextlib.redirect_stdout(sys.stderr):  # from_url prints the files it extracts
        try:
            artifact = pt.Artifact.from_url(location)
        except OSError as exc:  # unreachable host, 404, no network
            raise ValueError(f"cannot download the index {location}: {exc}") from exc
    path = getattr(artifact, "path", None)
    if path is None or not os.path.isdir(path):
        raise ValueError(f"{location} is a {type(artifact).__name__}, not an index folder")
    return str(path)
