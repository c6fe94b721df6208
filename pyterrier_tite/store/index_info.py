"""What an index records of itself and its model (:data:`INDEX_INFO`, beside the engine's ``pt_meta.json``): a hub id
or shipped name, else a ``save_pretrained`` of the model inside the index, so an index copied, packaged or fetched
retrieves with the very model that built it, and the weights' fingerprint. The record is data: a recorded model is a
folder inside the index or a hub id, else refused in one line (:class:`RecordedPathError`)."""

from __future__ import annotations

import json
import os
import re
import warnings
from datetime import datetime, timezone
from pathlib import Path

#: the keyword of the lexical baseline (PISA BM25, no Java)
BM25 = "bm25"
#: written into every index built here: the kind of index and the model that built it
INDEX_INFO = "pyterrier_tite_index.json"
#: the folder inside an index that holds the model of an index built from a model folder
MODEL_FOLDER = "model"
#: a Hugging Face hub id: ``org/name`` of letters, digits, ``.``, ``_``, ``-`` (no ``..``), at most 96 each
HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}")
#: a shipped start point's short name (no folder separator)
SHORT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}")


class RecordedPathError(ValueError):
    """An index records a model path that leads outside it (absolute, ``..``, a link) or a malformed hub id."""


class FingerprintMismatchError(ValueError):
    """An index is queried with a model other than the one that encoded it."""


def is_hub_id(name: object) -> bool:
    """``name`` has the syntax of a hub id (``org/name``, nothing a path could climb out with)."""
    return isinstance(name, str) and HUB_ID.fullmatch(name) is not None and ".." not in name


def index_info(path: str | os.PathLike) -> dict:
    """``{kind, model, ...}`` of an index folder: from :data:`INDEX_INFO` when we built it, else from the engine's
    ``pt_meta.json`` (a FlexIndex is ``dense``; a PISA index ``bm25``, or ``splade`` when built without a stemmer)."""
    folder = Path(path)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder} is not an index folder (it does not exist)")
    info_file = folder / INDEX_INFO
    if info_file.is_file():
        try:
            info = json.loads(info_file.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"{info_file} is not JSON ({exc}); rebuild the index") from None
        if not isinstance(info, dict) or not isinstance(info.get("kind"), str):
            raise ValueError(f"{info_file} is no index record (no \"kind\"); rebuild the index")
        return info
    meta_file = folder / "pt_meta.json"
    if not meta_file.is_file():
        raise FileNotFoundError(f"{folder} has no pt_meta.json: not an index (or an incomplete one); rebuild it")
    meta = json.loads(meta_file.read_text(encoding="utf-8"))
    if meta.get("type") == "dense_index" and meta.get("format") == "flex":
        return {"kind": "dense", "model": None}
    if meta.get("format") == "pisa":
        return {"kind": "splade" if meta.get("stemmer") == "none" else BM25, "model": None}
    raise ValueError(f"{meta_file}: type {meta.get('type')!r} / format {meta.get('format')!r} is no index we read")


def write_index_info(
    folder: str | os.PathLike,
    kind: str,
    model: str,
    corpus: str | None,
    count: int,
    transformer=None,
    hub_id: str | None = None,
    fingerprint: str | None = None,
    collection: str | None = None,
) -> None:
    """Write :data:`INDEX_INFO`: kind, ``model`` (the hub id, else ``model/`` when packaged, never the builder's
    absolute path), its display name, hub id and fingerprint, ``corpus``, ``collection`` (its ir_datasets ID), size,
    date. With ``transformer``, a model no name loads again (a folder, built in memory) is saved into the index."""
    if kind == BM25:
        info = {"kind": kind, "model": BM25}
    else:
        hub = hub_id if is_hub_id(hub_id) else None
        packaged = MODEL_FOLDER if transformer is not None and model.lower() != BM25 and (
            os.path.isdir(model) or not (is_hub_id(model) or SHORT_NAME.fullmatch(model))) else None  # fmt: skip
        if packaged:
            transformer.save_pretrained(str(Path(folder) / MODEL_FOLDER))
        shown = hub or os.path.basename(os.path.abspath(model).rstrip("/\\")) if os.path.isdir(model) else model
        info = {"kind": kind, "model": hub or packaged, "model_name": hub or shown, "hub_id": hub}
        if packaged:
            info["packaged_model"] = packaged
        if fingerprint:
            info["model_fingerprint"] = fingerprint
    built = datetime.now(timezone.utc).isoformat(timespec="seconds")
    info.update(corpus=corpus, collection=collection, documents=count, built=built)
    (Path(folder) / INDEX_INFO).write_text(json.dumps(info, indent=1) + "\n", encoding="utf-8")


def indexed_collection(info: dict) -> str | None:
    """The ir_datasets ID of the documents an index holds (an older index: its ``corpus`` where that names one), or
    None where it does not know it."""
    from pyterrier_tite.datasets import collection_id

    return collection_id(info.get("collection") if "collection" in info else info.get("corpus"))


def model_for_index(path: str | os.PathLike, info: dict) -> str | None:
    """The model to load for an index: its packaged copy, else the recorded model (a folder inside the index, or a
    hub id), else the recorded hub id, else an error telling to pass ``--model``."""
    packaged = info.get("packaged_model")
    if packaged is not None:
        folder = inside_index(path, packaged, "packaged_model")
        if folder.is_dir():
            return str(folder)
    name = info.get("model")
    hub = info.get("hub_id")
    if hub is not None and not is_hub_id(hub):
        raise RecordedPathError(f"{Path(path) / INDEX_INFO}: hub_id {hub!r} is no hub id (org/name); the index "
                                "record is damaged or forged: pass --model")  # fmt: skip
    if name is None:
        return hub
    if not isinstance(name, str) or not name:
        raise RecordedPathError(f"{Path(path) / INDEX_INFO}: model {name!r} is no model name: pass --model")
    if os.path.isabs(name):
        if hub:
            return hub
        raise RecordedPathError(f"{path} records its model by the absolute path {name}; an index names its model "
                                "only inside itself or as a hub id: pass --model (that folder, if you trust it)")
    inside = Path(path) / name
    if os.path.lexists(inside):
        return str(inside_index(path, name, "model"))
    if is_hub_id(name):
        return name
    if hub:
        return hub
    if name.rstrip("/") in (MODEL_FOLDER, packaged):
        raise FileNotFoundError(f"{path} has lost the copy of its model ({name} inside it): pass --model")
    if SHORT_NAME.fullmatch(name) and not os.path.lexists(name):  # a shipped start point (not a folder here)
        return name
    raise RecordedPathError(f"{path} records the model {name!r}, which is neither a folder inside the index nor a hub "
                            "id: pass --model")  # fmt: skip


def inside_index(path: str | os.PathLike, recorded: object, key: str) -> Path:
    """The folder ``recorded`` inside the index ``path``, links resolved; one leading out is a RecordedPathError."""
    where = Path(path) / INDEX_INFO
    if not isinstance(recorded, str) or not recorded or os.path.isabs(recorded) or "\0" in recorded:
        raise RecordedPathError(f"{where}: {key} {recorded!r} is not a folder inside the index; the record is "
                                "damaged or forged: pass --model")  # fmt: skip
    root = os.path.realpath(path)
    folder = os.path.realpath(os.path.join(root, recorded))
    if os.path.commonpath([root, folder]) != root or folder == root:
        raise RecordedPathError(f"{where}: {key} {recorded!r} leads outside the index (to {folder}); a recorded "
                                "model must be inside it: pass --model")  # fmt: skip
    return Path(folder)


_warned: set[str] = set()


def check_fingerprint(path: str | os.PathLike, info: dict, model_name: object, fingerprint: str | None) -> None:
    """Refuse to query the index ``path`` with other weights than those it recorded, naming both models; an index
    without a fingerprint (an older one) warns, once."""
    recorded = info.get("model_fingerprint")
    if recorded is None or fingerprint is None:
        if recorded is None and str(path) not in _warned:
            _warned.add(str(path))
            warnings.warn(f"{path} records no model fingerprint (built by an older version): it cannot be checked that "
                          f"{model_name} is the model that encoded it", UserWarning, stacklevel=3)  # fmt: skip
        return
    if recorded != fingerprint:
        built = info.get("model_name") or info.get("model") or "another model"
        raise FingerprintMismatchError(
            f"{path} was encoded by {built} (weights {str(recorded)[:12]}) but is queried with {model_name} (weights "
            f"{fingerprint[:12]}); an index answers only with the model that encoded it: pass that model, or rebuild "
            "the index with this one"
        )
