"""The model families of pyterrier-tite, listed once. ``setup.py`` (the ``pyterrier.artifact`` entry points, read with
``runpy``: this module imports nothing), ``pt/artifacts.py`` (``t.load``), ``models/model_card.py``, the package's
public names (``__init__.py``) and the CLI all read this list.

A family here is a ``format`` of ``pt_meta.json`` (the artifact format ``model.<format>``) and the transformers that
load it; its code lives in ``models/<folder>`` for each of ``folders`` and in ``module``."""

from __future__ import annotations

from typing import NamedTuple


class Family(NamedTuple):
    """One model family: ``format`` (``pt_meta.json``), the transformer ``module``, the class whose
    ``from_pretrained`` loads every folder of the format (``loader``), the public transformer classes (``public``),
    how a loaded model is used (``kind``: ``dense`` FlexIndex, ``splade`` PISA or ``rerank``) and its ``folders``
    under ``models/``."""

    format: str
    module: str
    loader: str
    public: tuple[str, ...]
    kind: str
    folders: tuple[str, ...]


FAMILIES: tuple[Family, ...] = (
    Family("cross-encoder", "pyterrier_tite.pt.rerankers", "CrossEncoderReranker", ("SparseCE", "MonoCE", "CELI"),
           "rerank", ("sparse_ce", "cross_encoder")),
    Family("tite", "pyterrier_tite.pt.tite", "TITE", ("TITE",), "dense", ("tite",)),
    Family("bert-biencoder", "pyterrier_tite.pt.bert_biencoder", "BertBiEncoder", ("BertBiEncoder",), "dense",
           ("bert_biencoder",)),
    Family("splade", "pyterrier_tite.pt.splade", "Splade", ("Splade",), "splade", ("splade",)),
    Family("aggretriever", "pyterrier_tite.pt.aggretriever", "Aggretriever", ("Aggretriever",), "dense",
           ("aggretriever",)),
)  # fmt: skip

#: ``format`` -> family
BY_FORMAT: dict[str, Family] = {f.format: f for f in FAMILIES}
#: the formats of ``pt_meta.json`` that are models of this package
FORMATS: tuple[str, ...] = tuple(BY_FORMAT)
#: the reranker classes of the cross-encoder family (``pt_meta.json``'s ``reranker``)
RERANKERS: tuple[str, ...] = BY_FORMAT["cross-encoder"].public
#: public transformer class -> its module (``pyterrier_tite.<name>``)
PUBLIC: dict[str, str] = {name: f.module for f in FAMILIES for name in f.public}
#: the ``pyterrier.artifact`` entry points of ``setup.py``: ``pt.Artifact.load(folder)`` of a saved model
ARTIFACT_ENTRY_POINTS: list[str] = [f"model.{f.format} = pyterrier_tite.pt.artifacts:load" for f in FAMILIES]


def kind_of(fmt: str) -> str:
    """``dense``, ``splade`` or ``rerank`` for a ``pt_meta.json`` format; ``ValueError`` for one not ours."""
    if fmt not in BY_FORMAT:
        raise ValueError(f"format {fmt!r} is not a model of pyterrier-tite (one of {', '.join(FORMATS)})")
    return BY_FORMAT[fmt].kind
