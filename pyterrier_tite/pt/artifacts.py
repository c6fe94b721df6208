"""``pyterrier_tite.load(name)`` and ``pt.Artifact.load(folder)`` (the ``pyterrier.artifact`` entry points): any model
name -> the right transformer. Released checkpoints are recognised by their ``config.json`` and weight names, never by
the repo name, except that a released SPLADE MLM named as one half of a pair (``...-query`` / ``...-doc``) is refused:
one half would encode both sides."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

import pyterrier as pt

from pyterrier_tite.families import BY_FORMAT
from pyterrier_tite.models.checkpoint import Checkpoint, CheckpointError, open_checkpoint
from pyterrier_tite.models.model_card import hub_id
from pyterrier_tite.start_points import resolve
from pyterrier_tite.store.index_info import BM25, INDEX_INFO, index_info, model_for_index, write_index_info

#: ``format`` of ``pt_meta.json`` -> (module, class) of the transformer that loads it (the family list, families.py)
FORMATS = {fmt: (family.module, family.loader) for fmt, family in BY_FORMAT.items()}


def model_format(folder: str | os.PathLike | Checkpoint) -> str:
    """The kind of model a checkpoint holds (a key of :data:`FORMATS`), with a clear error when unknown."""
    checkpoint = open_checkpoint(folder)
    folder, meta, config = checkpoint.folder, checkpoint.meta, checkpoint.config
    found = checkpoint.family()  # a folder we saved, or a released layout our loaders recognise (families.py)
    if found is not None:
        return found.family.format
    if meta:
        meta_file = os.path.join(folder, "pt_meta.json")
        what = f"a PyTerrier artifact of type {meta.get('type')!r}, format {meta.get('format')!r}"
        if str(meta.get("type", "")).endswith("_index"):  # an index pyterrier-tite did not build (no INDEX_INFO)
            raise ValueError(f"{meta_file}: {what}, an index that does not record the model that built it, not a "
                             f"model of pyterrier-tite: {how_to_open(folder)}")  # fmt: skip
        raise ValueError(
            f"{meta_file}: {what}, not a model of pyterrier-tite; open it with pt.Artifact.load(folder), or pass a "
            "model folder or hub id"
        )
    if not config:
        raise FileNotFoundError(
            f"{folder} has no config.json or pt_meta.json: neither a model folder nor an index; pass a model folder "
            "(saved by save_pretrained or a Hugging Face checkpoint), a hub id or an index built by pyterrier-tite"
        )
    model_type = config.get("model_type")
    architectures = " ".join(config.get("architectures") or [])
    if "ForMaskedLM" in architectures:  # a plain encoder: with its MLM head SPLADE, else a bi-encoder
        return "splade"
    if model_type in ("bert", "distilbert", "electra") or os.path.isfile(os.path.join(folder, "modules.json")):
        return "bert-biencoder"
    raise ValueError(
        f"{folder}: cannot tell which model this is (model_type {model_type!r}, architectures "
        f"{architectures or 'none'}); load it with the class that fits, e.g. t.TITE.from_pretrained"
    )


#: the name of one half of a released SPLADE pair (``naver/efficient-splade-V-large-query`` / ``-doc``)
_SPLADE_HALF = re.compile(r"(?P<stem>.+)-(?P<role>query|doc)")


def refuse_splade_half(checkpoint: Checkpoint) -> None:
    """A plain MLM named as one half of a SPLADE pair is refused, naming the call that loads the pair."""
    name = checkpoint.name.rstrip("/\\")
    half = _SPLADE_HALF.fullmatch(name)
    if half is None or checkpoint.meta:
        return
    role, stem = half["role"], half["stem"]
    sides = {role: name, ("doc" if role == "query" else "query"): f"{stem}-{'doc' if role == 'query' else 'query'}"}
    raise CheckpointError(
        f"{name} is one half of a SPLADE pair (its {role} encoder), not a model for both queries and documents: load "
        f"the pair with t.Splade.from_pretrained(query={sides['query']!r}, doc={sides['doc']!r})"
    )


#: what to do with an index that does not record its model, by its kind (:func:`how_to_open`)
OPEN_BY_KIND = {
    "dense": "compose it with its model: t.load(model).query_encoder() >> pyterrier_dr.FlexIndex({!r}).np_retriever()",
    "splade": "open it with the SPLADE model that built it: t.load(model).retriever({!r})",
    "bm25": "open it with pyterrier_pisa.PisaIndex({!r}).bm25()",
}


def how_to_open(folder: str) -> str:
    """The advice for an index that does not record its model, fitting its kind (FlexIndex, PISA SPLADE or BM25)."""
    try:
        return OPEN_BY_KIND[index_info(folder)["kind"]].format(folder)
    except (ValueError, KeyError):
        return "open it with pt.Artifact.load(folder)"


class IndexRecord:
    """The documents of an index build, counted as they stream in; :meth:`finalize` records in the complete index
    the model ``t.load(index)`` opens it with (its hub id, else a copy) and the weights' fingerprint."""

    def __init__(self, docs: Iterable[dict], model, kind: str, name: str | None = None, corpus: str | None = None,
                 package: bool = True):  # fmt: skip
        self.docs, self.model, self.kind, self.corpus, self.package, self.count = docs, model, kind, corpus, package, 0
        self.name = name or getattr(model, "model_name", None) or f"{type(model).__name__} (in memory)"

    def __iter__(self) -> Iterator[dict]:
        for doc in self.docs:
            self.count += 1
            yield doc

    def __len__(self) -> int:  # the corpus size where it is known (a progress bar's total), else a TypeError
        return len(self.docs)

    def finalize(self, staging: Path) -> None:
        from pyterrier_tite.datasets import collection_id

        model = None if self.kind == BM25 else self.model
        if model is not None and not hasattr(model, "save_pretrained"):
            return  # another library's encoder, neither named nor saved: t.load(index) advises composing by hand
        write_index_info(staging, self.kind, self.name, self.corpus, self.count, model if self.package else None,
                         hub_id=None if model is None else hub_id(self.name),
                         fingerprint=None if model is None else weights_fingerprint(model),
                         collection=collection_id(self.corpus))  # fmt: skip


def weights_fingerprint(model) -> str | None:
    """``sha256:`` of a transformer's modules (classes, state dicts), recorded by an index and compared when it is
    queried: the same from the original folder, a re-save or a package. None without modules."""
    import hashlib

    import torch

    modules = {k: v for k, v in sorted(vars(model).items()) if isinstance(v, torch.nn.Module)}
    if not modules and isinstance(getattr(model, "model", None), torch.nn.Module):
        modules = {"model": model.model}
    if not modules:
        return None
    digest = hashlib.sha256()
    for attribute, module in modules.items():
        digest.update(f"{attribute}:{type(module).__qualname__}\n".encode())
        for name, tensor in sorted(module.state_dict().items()):
            digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}\n".encode())
            tensor = tensor.detach().to("cpu").contiguous().reshape(-1)
            digest.update(tensor.view(torch.uint8).numpy().tobytes() if tensor.numel() else b"")
    return "sha256:" + digest.hexdigest()


def check_search(folder: str | os.PathLike, kind: str | None, search: str) -> None:
    """Approximate search is FlexIndex's: refused for a PISA index before any model is loaded for it."""
    if search != "exact" and kind != "dense":
        engine = "BM25" if kind == BM25 else "SPLADE"
        raise ValueError(f"search {search!r} is for dense indexes; {folder} is a {engine} (PISA) index")


def index_retriever(
    folder: str | os.PathLike, num_results: int = 1000, *, model: pt.Transformer | None = None, threads: int = 1,
    search: str = "exact", search_options: dict | None = None, **kwargs,
) -> pt.Transformer:  # fmt: skip
    """Queries -> the top ``num_results`` of an index folder, through the model it records or ``model``: ``query
    encoder >> FlexIndex`` for a dense index (``search``: exact, hnsw or ivf, with ``search_options``), SPLADE's PISA
    retriever, or BM25 (``threads``: PISA's). Keyword arguments go to :func:`load` of the recorded model."""
    folder = os.fspath(folder)
    info = index_info(folder)
    kind = info.get("kind")
    check_search(folder, kind, search)
    if model is not None and kwargs:
        raise TypeError(f"{', '.join(kwargs)}: settings for loading the recorded model, but model= is given")
    if kind == BM25:
        from pyterrier_tite.store.pisa_derived import open_pisa_retriever

        return open_pisa_retriever(folder, "bm25", num_results, threads, k1=0.9, b=0.4)
    name = model_for_index(folder, info) if model is None else repr(model)
    if not name:
        raise ValueError(f"{folder} is a {kind} index that does not record the model that built it: "
                         f"{how_to_open(folder)}")  # fmt: skip
    model = load(name, **kwargs) if model is None else model
    if kind == "splade":
        if not hasattr(model, "retriever"):
            raise ValueError(f"{folder} is a SPLADE index but its model {name!r} is a {type(model).__name__}")
        return model.retriever(folder, num_results=num_results, threads=threads)
    if not hasattr(model, "query_encoder") or hasattr(model, "retriever"):
        raise ValueError(f"{folder} is a dense index but its model {name!r} is a {type(model).__name__}")
    from pyterrier_tite.store.flex import open_flex_retriever

    retriever = open_flex_retriever(folder, num_results, str(model.device), search, **(search_options or {}))
    return model.query_encoder() >> retriever


def load(name: str | os.PathLike, **kwargs) -> pt.Transformer:
    """The transformer for a model name (shipped start point, folder or hub id): a reranker, a dense bi-encoder
    (index with ``>> pyterrier_dr.FlexIndex``) or SPLADE. Keyword arguments go to its constructor.

    An index folder (or an index artifact, e.g. from ``pt.Artifact.from_url``) gives its retriever instead: the query
    encoder of the model the index records ``>>`` the index (``num_results=`` sets its depth).

    Example::

        sce = t.load('webis/sparse-cross-encoder-4-4096')    # -> SparseCE
        minilm = t.load('minilm', batch_size=64)              # -> BertBiEncoder
        same = pt.Artifact.load('runs/my-model')              # a saved folder, through the entry points
        same.to_hf('me/my-model')                             # every model is a pt.Artifact (pt/model_artifact.py)
        retriever = t.load('vaswani.tite')                    # an index: its model's query encoder >> the index
    """
    import importlib

    if not isinstance(name, (str, os.PathLike)) and isinstance(getattr(name, "path", None), (str, os.PathLike)):
        name = name.path  # an artifact (a FlexIndex or PisaIndex from pt.Artifact.from_url): its folder
    name = resolve(os.fspath(name))
    if os.path.isdir(name):
        from pyterrier_tite.store.downloads import artifact_cache, checked_cache_folder

        if os.path.dirname(os.path.abspath(name)) == os.path.abspath(artifact_cache()):  # from pt.Artifact.from_url:
            checked_cache_folder(name, name)  # PyTerrier leaves it 0777
    if os.path.isfile(os.path.join(name, INDEX_INFO)):  # an index built by pyterrier-tite, naming its model
        return index_retriever(name, **kwargs)
    checkpoint = open_checkpoint(name)  # read once; the transformer gets it, not the name
    fmt = model_format(checkpoint)
    if fmt == "splade":
        refuse_splade_half(checkpoint)
    module, cls = FORMATS[fmt]
    model = getattr(importlib.import_module(module), cls).from_pretrained(checkpoint, **kwargs)
    if os.path.isdir(name):  # the artifact's folder (build_package writes beside it); hub ids keep NO_PATH
        model.path = Path(name)
    model.card = checkpoint.meta.get("card")  # what its card says travels with it (saves, packages)
    return model
