"""The model families of pyterrier-tite, listed once (``setup.py`` reads this module with ``runpy``: it imports
nothing). A family is a ``format`` of ``pt_meta.json`` (the artifact format ``model.<format>``) and the transformers
that load it."""

from __future__ import annotations

from typing import NamedTuple


class Family(NamedTuple):
    """One model family: the class whose ``from_pretrained`` loads every folder of the format (``loader``), how a
    loaded model is used (``kind``: ``dense``, ``splade`` or ``rerank``), its ``folders`` under ``models/``, what
    messages call it (``title``) and, per public class, its model card's hub tag and what it is (``cards``)."""

    format: str
    module: str
    loader: str
    public: tuple[str, ...]
    kind: str
    folders: tuple[str, ...]
    title: str
    cards: tuple[tuple[str, str], ...]


FAMILIES: tuple[Family, ...] = (
    Family("cross-encoder", "pyterrier_tite.pt.rerankers", "CrossEncoderReranker", ("SparseCE", "MonoCE", "CELI"),
           "rerank", ("sparse_ce", "cross_encoder"), "cross-encoder", (
               ("sparse-cross-encoder", "a sparse cross-encoder re-ranker, query and document in one transformer with "
                "windowed document attention"),
               ("cross-encoder", "a cross-encoder re-ranker with full attention over query and document (monoBERT)"),
               ("celi", "a re-ranker that adds late interaction over a cross-encoder's token vectors to its [CLS] "
                "score"))),
    Family("tite", "pyterrier_tite.pt.tite", "TITE", ("TITE",), "dense", ("tite",), "TITE", (
        ("tite", "a bi-encoder whose transformer pools tokens inside its layers, so each text becomes one vector early "
         "and cheaply; scored by dot product"),)),
    Family("bert-biencoder", "pyterrier_tite.pt.bert_biencoder", "BertBiEncoder", ("BertBiEncoder",), "dense",
           ("bert_biencoder",), "BERT bi-encoder", (
               ("bert-biencoder", "a dense bi-encoder over a BERT-like encoder ([CLS] or mean pooling), one vector per "
                "text, scored by dot product"),)),
    Family("splade", "pyterrier_tite.pt.splade", "Splade", ("Splade",), "splade", ("splade",), "SPLADE", (
        ("splade", "sparse term weights over the vocabulary (SPLADE), indexed with PISA and scored by their dot "
         "product"),)),
    Family("aggretriever", "pyterrier_tite.pt.aggretriever", "Aggretriever", ("Aggretriever",), "dense",
           ("aggretriever",), "Aggretriever", (
               ("aggretriever", "a bi-encoder whose one vector per text joins a projected [CLS] vector and aggregated "
                "MLM term weights, scored by dot product"),)),
)  # fmt: skip

#: the file a saved model folder keeps its format and settings in
PT_META = "pt_meta.json"
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


class Recognised(NamedTuple):
    """A checkpoint that is recognisably one family's: the ``family``, what in the folder says so (``evidence``),
    what messages call it (``title``: a cross-encoder's backbone is named) and the public class that loads it."""

    family: Family
    evidence: str
    title: str
    cls: str


def family_of(meta: dict, config: dict, files: list[str] | tuple[str, ...] = ()) -> Recognised | None:
    """The family a checkpoint recognisably belongs to, from its ``pt_meta.json`` (``meta``), ``config.json``
    (``config``) and file names: a folder we saved names its format, a released layout as our loaders recognise it.
    None for a plain encoder, which legitimately starts a model of any family, and for a folder not ours."""
    fmt = meta.get("format")
    if fmt in BY_FORMAT:
        family, evidence = BY_FORMAT[fmt], f"{PT_META} format {fmt!r}"
        if fmt != "cross-encoder":
            return Recognised(family, evidence, family.title, family.loader)
        sparse = meta.get("backbone") == "sparse" or "attention_window_size" in config
        cls = meta["reranker"] if meta.get("reranker") in family.public else "SparseCE" if sparse else "MonoCE"
        return Recognised(family, evidence, "sparse cross-encoder" if sparse else "cross-encoder", cls)
    if meta:
        return None
    model_type, backbone = config.get("model_type"), config.get("backbone_model_type")
    architectures = " ".join(str(a) for a in config.get("architectures") or [])
    if model_type == "tite" or backbone == "tite":
        shown = f"model_type {model_type!r}" + (f" on backbone_model_type {backbone!r}" if model_type != "tite" else "")
        return Recognised(BY_FORMAT["tite"], f"config.json {shown}", "TITE", "TITE")
    if "attention_window_size" in config:
        family = BY_FORMAT["cross-encoder"]
        return Recognised(family, "config.json attention_window_size", "sparse cross-encoder", "SparseCE")
    if "Aggretriever" in architectures or "TermWeightTrans.pt" in files:
        evidence = f"config.json architectures {architectures!r}" if architectures else "TermWeightTrans.pt"
        return Recognised(BY_FORMAT["aggretriever"], evidence, "Aggretriever", "Aggretriever")
    if "ForSequenceClassification" in architectures:
        return Recognised(BY_FORMAT["cross-encoder"], f"config.json architectures {architectures!r}",
                          "cross-encoder", "MonoCE")  # fmt: skip
    return None
