"""Cross-encoder rerankers as PyTerrier transformers: ``SparseCE`` (windowed, asymmetric), ``MonoCE`` (full
attention, monoBERT) and ``CELI`` (late-interaction head on either backbone)."""

from __future__ import annotations

import os

import pandas as pd
import pyterrier as pt
import pyterrier_alpha as pta
import torch

from pyterrier_tite.devices import default_device, resolve_precision
from pyterrier_tite.models.checkpoint import Checkpoint, open_checkpoint
from pyterrier_tite.models.cross_encoder.convert import KEEP, is_sparse_model, save_scorer
from pyterrier_tite.models.cross_encoder.load import Sparse, load
from pyterrier_tite.models.cross_encoder.load import from_module as module_scorer
from pyterrier_tite.models.cross_encoder.modeling import CrossEncoderScorer
from pyterrier_tite.models.cross_encoder.pair_scoring import score_by_query
from pyterrier_tite.models.cross_encoder.tokenization import QUERY_MAX_LENGTH, CrossEncoderInputs
from pyterrier_tite.models.sparse_ce.modeling import FLAGS, SparseCrossEncoder
from pyterrier_tite.pt.model_artifact import ModelArtifact, given_name, is_model_name, shown_name
from pyterrier_tite.pt.schematic import KeyedEquality, NamedSchematic
from pyterrier_tite.pt.validation import one_query_per_qid, refuse_non_finite, text_column

__all__ = ["CELI", "CrossEncoderReranker", "MonoCE", "SparseCE"]


class CrossEncoderReranker(KeyedEquality, NamedSchematic, pt.Transformer, ModelArtifact):
    """Scores the (query, doc) pairs of a result frame with a :class:`CrossEncoderScorer`: every row rescored and
    re-ranked, pointwise (``pyterrier_caching.ScorerCache`` may call it on any subset), grouped by query so a sparse
    cross-encoder whose query attends only to itself encodes each query once per batch. Only a plain encoder's new
    score head starts fresh (one warning); lengths stored with a checkpoint (``pt_meta.json``, or the reference's
    caps for a released sparse one: query 30 word pieces, its 32 with [CLS] and [SEP]) are the defaults."""

    def __init__(
        self,
        scorer: CrossEncoderScorer,
        tokenizer,
        batch_size: int = 32,
        query_max_length: int = QUERY_MAX_LENGTH,
        doc_max_length: int | None = None,
        text_field: str = "text",
        device: str | torch.device | None = None,
        verbose: bool = False,
        dtype: torch.dtype | str | None = None,
        cuda_graphs: bool = True,
    ):
        self.device = default_device(device)
        self.precision = resolve_precision(dtype, self.device, int8=True)
        scorer = scorer.to(self.device).eval()
        if self.precision == "int8":  # a quantized copy: the caller's module (and its training) stays float
            scorer = scorer.quantized_int8()
        self.scorer = scorer.use_cuda_graphs(cuda_graphs and self.device.type == "cuda")
        self.inputs = CrossEncoderInputs(tokenizer, scorer.max_positions(), query_max_length, doc_max_length)
        self.batch_size = batch_size
        self.text_field = text_field
        self.verbose = verbose
        self._tokenizer_key = None  # the folder's tokenizer (part of the scorer's source) unless one is passed
        self._dtype, self._cuda_graphs = dtype, cuda_graphs  # as given: pt.inspect's attributes

    tokenizer = property(lambda self: self.inputs.tokenizer)
    query_max_length = property(lambda self: self.inputs.query_max_length)
    doc_max_length = property(lambda self: self.inputs.doc_max_length)

    def _settings(self) -> dict:
        """The doc window (None: full attention), head and input caps."""
        window = self.scorer.config.attention_window_size if self.scorer.is_sparse else None
        return {"w": window, "head": self.scorer.head_name, **self.inputs.lengths()}

    def __repr__(self) -> str:
        """Class, model, window, attention pattern and head, so two checkpoints of one family print apart."""
        window = self._settings()["w"]
        name = shown_name(getattr(self, "model_name", None))
        pattern = {}
        if self.scorer.is_sparse:  # the flags that differ from the released pattern (the query attends to itself)
            config = self.scorer.config
            query = ("query_cls_attention", "query_doc_attention")
            if all(getattr(config, f) for f in query):
                pattern = {"symmetric": True}
            else:
                pattern = {f: True for f in query if getattr(config, f)}
            pattern |= {f: False for f in FLAGS if f not in query and not getattr(config, f)}
        shown = "".join(f", {k}={v}" for k, v in pattern.items())
        return (
            f"{type(self).__name__}({'' if name is None else repr(name) + ', '}w={'inf' if window is None else window}"
            f"{shown}, head={self.scorer.head_name!r})"
        )

    def card_settings(self) -> dict:
        """The window, attention pattern and head: they live in ``config.json``, not in ``pt_meta.json``."""
        settings = {"head": self.scorer.head_name}
        if self.scorer.is_sparse:
            config = self.scorer.config
            settings = {"w": config.attention_window_size, **{f: bool(getattr(config, f)) for f in FLAGS}, **settings}
        return settings

    # -- PyTerrier citizenship -----------------------------------------------------------------------------------------
    def eq_key(self) -> tuple:
        s = self.scorer
        weights = s.source if s.source is not None else id(s)
        pattern = tuple(getattr(s.config, f) for f in ("attention_window_size", *FLAGS)) if s.is_sparse else None
        lengths = (self.query_max_length, self.doc_max_length)
        head = (s.head_name, s.token_dim)
        return (type(self), weights, pattern, head, lengths, self._tokenizer_key, self.text_field, self.precision)

    def transform_inputs(self) -> list[list[str]]:
        return [["qid", "query", "docno", self.text_field]]

    def transform_outputs(self, input_columns: list[str]) -> list[str]:
        pta.validate.result_frame(input_columns, extra_columns=["query", self.text_field])
        return [c for c in input_columns if c not in ("score", "rank")] + ["score", "rank"]

    def schematic(self, *, input_columns=None) -> dict:
        return {**super().schematic(input_columns=input_columns), "settings": self._settings()}

    # -- transformer -------------------------------------------------------------------------------------------------
    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        pta.validate.result_frame(inp, extra_columns=["query", self.text_field])
        out = inp.copy()
        if len(out) == 0:
            return out.assign(score=pd.Series(dtype="float64"), rank=pd.Series(dtype="int64"))
        query_text = text_column(out, "query", "qid")
        doc_text = text_column(out, self.text_field, "docno")
        one_query_per_qid(out)
        doc_ids = self.inputs.docs(doc_text)
        qids = out["qid"].astype(str).to_numpy()
        order = pd.unique(qids)
        rank_of_query = {q: i for i, q in enumerate(order)}
        first = pd.Series(range(len(out))).groupby(qids, sort=False).first()
        query_ids = dict(zip(order, self.inputs.queries([query_text[first[q]] for q in order]), strict=True))
        progress = (lambda starts: pt.tqdm(starts, desc=repr(self), unit="batch")) if self.verbose else None
        scores = score_by_query(
            self.scorer, self.inputs, qids, query_ids, doc_ids, self.batch_size, self.device, self.precision, progress
        )
        refuse_non_finite(scores, out, "scores", repr(self), modules=[self.scorer], precision=self.precision)
        out["score"] = scores
        out = pt.model.add_ranks(out)
        key = out["qid"].astype(str).map(rank_of_query)
        return out.assign(_q=key).sort_values(["_q", "rank"], kind="stable").drop(columns="_q")

    # -- artifacts ---------------------------------------------------------------------------------------------------
    ARTIFACT_FORMAT = "cross-encoder"  # families.py's format: pt_meta.json's, a pt.Artifact of type "model"

    def _save_into(self, folder: str) -> None:
        """Hugging Face layout, the head's weights (``score_head.safetensors``) and ``pt_meta.json``."""
        save_scorer(self.scorer, self.tokenizer, folder, reranker=type(self).__name__, lengths=self.inputs.lengths())

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike | Checkpoint, **kwargs) -> CrossEncoderReranker:
        """A folder or hub id as the class its ``pt_meta.json`` names, else as this class (from the base class: a
        SparseCE for a reference sparse checkpoint, a MonoCE for a plain BERT / ELECTRA (cross-)encoder)."""
        checkpoint = open_checkpoint(path)
        target = {c.__name__: c for c in (SparseCE, MonoCE, CELI)}.get(checkpoint.meta.get("reranker"), cls)
        if target is CrossEncoderReranker:
            target = SparseCE if is_sparse_model(checkpoint) else MonoCE
        return target(checkpoint, **kwargs)

    #: constructor parameters kept as given, as ``_<name>``: pt.inspect's attributes (the rest are same-named ones)
    GIVEN = ("model", "sparse", "w", "symmetric", "head", "token_dim", "tokenizer", "flags")
    #: constructor parameters passed on to :class:`CrossEncoderReranker`'s own ``__init__`` as they are
    RUNTIME = ("batch_size", "text_field", "device", "verbose", "dtype", "cuda_graphs")

    def _setup(self, given: dict, model, sparse: Sparse | None, head: str | None) -> None:
        """The three constructors' shared work (``given``: their ``locals()`` on entry): a name through the family
        loader, a module through its ``from_module``; lengths are the checkpoint's unless given."""
        tokenizer, token_dim = given["tokenizer"], given["token_dim"]
        if is_model_name(model):
            loaded = load(model, sparse, head, token_dim, tokenizer)
        elif tokenizer is None:
            raise ValueError("pass tokenizer= when the model is given as a module")
        else:
            loaded = module_scorer(model, tokenizer, sparse, head, token_dim)
        stored = loaded.settings
        lengths = {k: stored[k] if given[k] is None else given[k] for k in ("query_max_length", "doc_max_length")}
        runtime = {k: given[k] for k in self.RUNTIME if k in given}
        CrossEncoderReranker.__init__(self, loaded.module, loaded.tokenizer, **lengths, **runtime)
        self._tokenizer_key = None if tokenizer is None else id(tokenizer)
        self.model_name = given_name(model)
        if self.model_name is not None and loaded.source is None:  # a plain encoder's new score head
            self.fresh_weights = "score head"
        vars(self).update({f"_{k}": given[k] for k in self.GIVEN if k in given})


# ------------------------------------------------------------------------------------------------ the three classes
class SparseCE(CrossEncoderReranker):
    """Sparse cross-encoder reranker (ECIR'24).

    ``model``: a folder or hub id (reference checkpoint such as ``webis/sparse-cross-encoder-4-4096``, a folder
    saved by ``save_pretrained``, or any plain BERT such as MiniLM), a :class:`SparseCrossEncoder`, a BERT module or a
    :class:`CrossEncoderScorer`. ``w``: doc-to-doc window (``None`` = full attention; default: the checkpoint's, and
    for a plain BERT the released 4). ``symmetric``: True lets the query attend to [CLS] and the doc (encoded per
    pair), False keeps it to itself (encoded once per query; the released pattern); single flags as keywords
    (``doc_query_attention=False``). ``head``: "cls" (pooler + linear, reference), "mean" or "celi".
    ``query_max_length`` / ``doc_max_length`` (word pieces): default the checkpoint's.
    ``dtype``: float32, bfloat16 or float16 (autocast; scores stay float32); default bf16 on GPUs that support it,
    else fp32 (on a CPU with native bf16, ``dtype=torch.bfloat16`` is about 2x faster; without, it warns once);
    ``"int8"``: int8 linear layers on the CPU (per-token scales, heads float32): on a trained MonoCE 1.5-1.9x fp32's
    speed, Spearman per query against fp32 >= 0.97, DL19 nDCG@10 0.003-0.008 below fp32; the CPU choice where bf16
    is not native. ``cuda_graphs``: on a CUDA device, replay one captured graph per batch shape bucket (passages are
    launch-bound there); ignored on CPU; it lives on the scorer, so rerankers over one in-memory scorer share it
    (the last one built decides).

    Example::

        bm25 = t.bm25('vaswani'); ds = t.datasets.get_dataset('vaswani')
        pipeline = bm25 % 100 >> ds.text_loader() >> t.SparseCE('webis/sparse-cross-encoder-4-4096')
    """

    def __init__(
        self,
        model,
        w: int | None | str = KEEP,
        symmetric: bool | None = None,
        head: str | None = None,
        token_dim: int | None = None,
        tokenizer=None,
        batch_size: int = 32,
        query_max_length: int | None = None,
        doc_max_length: int | None = None,
        text_field: str = "text",
        device: str | torch.device | None = None,
        verbose: bool = False,
        dtype: torch.dtype | str | None = None,
        cuda_graphs: bool = True,
        **flags: bool,
    ):
        self._setup(locals(), model, Sparse(w, symmetric, flags), head)


class MonoCE(CrossEncoderReranker):
    """Standard (full attention) cross-encoder over ``[CLS] q [SEP] d [SEP]`` on a BERT or ELECTRA backbone: monoBERT
    / monoELECTRA with the "cls" head (the backbone's ``*ForSequenceClassification`` head;
    ``cross-encoder/ms-marco-MiniLM-L-6-v2`` loads unchanged), or "mean" / "celi" heads. Settings as
    :class:`SparseCE`'s; on the CPU a call's pairs are packed by length (no compute on padding).

    Example::

        mono = t.MonoCE('cross-encoder/ms-marco-MiniLM-L-6-v2')
        t.trec_dl_bm25('2019') >> mono
    """

    def __init__(
        self,
        model,
        head: str | None = None,
        token_dim: int | None = None,
        tokenizer=None,
        batch_size: int = 32,
        query_max_length: int | None = None,
        doc_max_length: int | None = None,
        text_field: str = "text",
        device: str | torch.device | None = None,
        verbose: bool = False,
        dtype: torch.dtype | str | None = None,
    ):
        if isinstance(model, SparseCrossEncoder) or (isinstance(model, CrossEncoderScorer) and model.is_sparse):
            raise ValueError("MonoCE needs a standard BERT / ELECTRA backbone; use SparseCE for a sparse cross-encoder")
        self._setup(locals(), model, None, head)


class CELI(CrossEncoderReranker):
    """CELI: [CLS] score + late interaction over projected token vectors (``token_dim`` = D_tok), on a standard
    BERT / ELECTRA cross-encoder (``sparse=False``) or a sparse one (``sparse=True`` with ``w`` / ``symmetric`` /
    flags as in :class:`SparseCE`).

    Example::

        celi = t.CELI('minilm', sparse=True, w=4, token_dim=32)   # new heads: train it first
        t.trec_dl_bm25('2019') >> celi
    """

    def __init__(
        self,
        model,
        sparse: bool | None = None,
        w: int | None | str = KEEP,
        symmetric: bool | None = None,
        token_dim: int | None = None,
        tokenizer=None,
        batch_size: int = 32,
        query_max_length: int | None = None,
        doc_max_length: int | None = None,
        text_field: str = "text",
        device: str | torch.device | None = None,
        verbose: bool = False,
        dtype: torch.dtype | str | None = None,
        cuda_graphs: bool = True,
        **flags: bool,
    ):
        given = dict(locals())  # before the name is opened: pt.inspect's attributes are the arguments as given
        if isinstance(model, (str, os.PathLike)):
            model = open_checkpoint(model)
        if sparse is None:
            sparse = is_sparse_model(model) or w != KEEP or symmetric is not None or bool(flags)
        self._setup(given, model, Sparse(w, symmetric, flags) if sparse else None, "celi")
