"""Packages (``.tar.lz4`` PyTerrier artifacts) in and out: an index or model folder given as a package URL is
downloaded once into PyTerrier's artifact cache (:func:`index_folder`), and a model is packaged from a fresh save in
a scratch folder (:func:`package_saved`)."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Callable

#: what a package URL starts with (a scheme of two or more letters: ``C:`` stays a path)
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]+:")


def is_package_url(location: str) -> bool:
    """``http(s)://...``, ``hf:org/name``, ``zenodo:ID``: a package to download rather than a folder."""
    return bool(_URL.match(location)) and not os.path.exists(location)


def index_folder(location: str | os.PathLike) -> str:
    """The index folder for a folder, a package URL or a local package file (``build_package``'s ``.tar.lz4``, as
    ``file://`` takes it): a package is fetched once into PyTerrier's artifact cache
    (:func:`~pyterrier_tite.store.downloads.fetch_package`: one process per URL, size-capped, only a verified complete
    package is cached, the folder follows the umask) and its folder returned; anything else is returned as is."""
    location = os.fspath(location)
    if os.path.isfile(location):
        location = os.path.abspath(location)
    elif not is_package_url(location):
        return location
    from pyterrier_tite.store.downloads import fetch_package

    try:
        path = fetch_package(location)
    except OSError as exc:  # unreachable host, 404, no network
        raise ValueError(f"cannot download the index {location}: {exc}") from exc
    if not os.path.isdir(path):
        raise ValueError(f"{location} is not an index folder")
    return str(path)


def package_saved(save: Callable[[str], None], package_path: str, card: str | None = None, **kwargs) -> str:
    """A ``.tar.lz4`` package (``pta.Artifact.build_package``: plus ``<package>.json`` with its size and sha256) of
    what ``save(folder)`` writes into a scratch folder; ``card``: a model card (README.md) to ship instead of the one
    ``save`` wrote. Keywords go to ``build_package``. Returns its path."""
    import pyterrier_alpha as pta

    with tempfile.TemporaryDirectory(prefix="pyterrier-tite-package-") as tmp:
        folder = os.path.join(tmp, "model")
        save(folder)
        if card is not None:
            shutil.copyfile(card, os.path.join(folder, os.path.basename(card)))
        return pta.Artifact(folder).build_package(package_path, **kwargs)
