"""What an index says about itself (:data:`INDEX_INFO`, beside the engine's own ``pt_meta.json``), and the model it
needs travelling with it: what ``pyterrier-tite index`` records of the model and the copy of a model from a folder kept
inside the index.

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

import json
import os
from datetime import datetime, timezone
from pathlib import Path

#: the keyword of the lexical baseline (PISA BM25, no Java)
BM25 = "bm25"
#: written into every index built here: the kind of index and the model that built it
INDEX_INFO = "pyterrier_tite_index.json"
#: the folder inside an index that holds the model of an index built from a model folder
MODEL_FOLDER = "model"


def index_info(path: str | os.PathLike) -> dict:
    """``{kind, model, ...}`` of an index folder: from :data:`INDEX_INFO` when we built it, else from the engine's
    ``pt_meta.json`` (a FlexIndex is ``dense``; a PISA index ``bm25``, or ``splade`` when built without a stemmer)."""
    folder = Path(path)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder} is not an index folder (it does not exist)")
    info_file = folder / INDEX_INFO
    if info_file.is_file():
        return json.loads(info_file.read_text(encoding="utf-8"))
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
) -> None:
    """:data:`INDEX_INFO`: kind, model (the name as recorded: a folder as an absolute path), ``hub_id`` (the hub id it
    stands for, or None), corpus, size, date; with ``transformer`` (anything with ``save_pretrained``), a model from
    a folder is saved into the index (``packaged_model``: the folder inside it)."""
    info = {"kind": kind, "model": model, "hub_id": hub_id} if kind != BM25 else {"kind": kind, "model": model}
    if transformer is not None and should_package(model):
        info["packaged_model"] = package_model(folder, transformer)
    info.update(corpus=corpus, documents=count, built=datetime.now(timezone.utc).isoformat(timespec="seconds"))
    (Path(folder) / INDEX_INFO).write_text(json.dumps(info, indent=1) + "\n", encoding="utf-8")


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


