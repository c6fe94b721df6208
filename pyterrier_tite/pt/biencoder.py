"""Dense bi-encoders as ``pyterrier_dr.BiEncoder`` s: what ``BertBiEncoder``, ``TITE`` and ``Aggretriever`` share."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pyterrier as pt
import pyterrier_alpha as pta
import pyterrier_dr
import torch
from more_itertools import chunked, peekable

from pyterrier_tite.devices import autocast, default_device, resolve_precision
from pyterrier_tite.models.bert_biencoder.modeling import TextEncoder
from pyterrier_tite.models.checkpoint import Loaded, save_model_folder
from pyterrier_tite.pt.artifacts import IndexRecord
from pyterrier_tite.pt.model_artifact import ModelArtifact, given_name
from pyterrier_tite.pt.schematic import KeyedEquality, NamedSchematic
from pyterrier_tite.pt.validation import distinct_texts, one_query_per_qid, refuse_non_finite, text_column
from pyterrier_tite.store.flex import build_flex_index
from pyterrier_tite.store.values import checked_text

#: a setting's default in the constructors: the checkpoint's, else the family's (None is a setting of its own)
STORED = "stored"


def merged_settings(defaults: dict, stored: dict, given: dict) -> dict:
    """Settings ``given`` (a constructor's ``locals()``) over those the checkpoint stores over ``defaults``."""
    given = {k: v for k, v in given.items() if k in defaults and not (isinstance(v, str) and v == STORED)}
    return {**defaults, **{k: v for k, v in stored.items() if k in defaults}, **given}


class FlexIndexing(pt.Compose):
    """``encoder >> pyterrier_dr.FlexIndex(path)`` (or ``>> index.indexer(mode='overwrite')``) of a dense bi-encoder
    or its doc encoder: ``index(docs)`` builds all or nothing with the one FlexIndex builder, where pyterrier_dr's
    indexer writes straight into ``path``; the index records its model, so ``t.load(path)`` is the retriever."""

    def index(self, iter: pt.model.IterDict, batch_size: int | None = None):
        from pyterrier_dr.flex.core import FlexIndexer, IndexingMode

        encoder, target = self._transformers
        index = target._index if isinstance(target, FlexIndexer) else target
        overwrite = isinstance(target, FlexIndexer) and target.mode == IndexingMode.overwrite
        if index.index_path.exists() and not overwrite:
            raise FileExistsError(
                f"{index.index_path} already exists; index into a new path or use index.indexer(mode='overwrite')"
            )

        def encode(docs: list[dict]) -> list:
            return [record["doc_vec"] for record in encoder.transform_iter(docs)]

        progress = "indexing" if index.verbose else None
        docs = IndexRecord(iter, getattr(encoder, "bi_encoder_model", encoder), "dense")  # t.load(index) reads it
        build_flex_index(docs, index.index_path, encode, text_field=encoder.text_field, overwrite=overwrite,
                         progress=progress, finalize=docs.finalize)  # fmt: skip
        index._meta = index._docnos = index._dvecs = None  # an overwritten index must be read afresh
        index._cache = {}
        return index


class _IndexesAtomically:
    """``self >> pyterrier_dr.FlexIndex(...)`` gives a :class:`FlexIndexing` (all-or-nothing builds)."""

    def __rshift__(self, right):
        from pyterrier_dr.flex.core import FlexIndexer

        if isinstance(right, (pyterrier_dr.FlexIndex, FlexIndexer)):
            return FlexIndexing(self, right)
        return super().__rshift__(right)


class DenseBiEncoder(KeyedEquality, _IndexesAtomically, NamedSchematic, pyterrier_dr.BiEncoder, ModelArtifact):
    """A :class:`TextEncoder` (texts -> vectors, the part training uses) as a PyTerrier bi-encoder of float32 vectors
    scored by dot product: length-sorted encoding, query and doc encoders (``model >> pyterrier_dr.FlexIndex(path)``
    indexes without DataFrames, all or nothing) and a scorer. ``source``, the checkpoint it was loaded from (None: in
    memory), decides equality with the class and :meth:`settings`. ``dtype``: float32, bfloat16 or float16 inference
    (autocast; vectors stay float32); default bf16 on GPUs that support it, else fp32 (on a CPU with native bf16,
    ``dtype=torch.bfloat16`` is 2-3x faster)."""

    def __init__(
        self,
        text_encoder: TextEncoder,
        name: str | None,
        source: object,
        *,
        batch_size: int = 32,
        text_field: str = "text",
        device: str | torch.device | None = None,
        verbose: bool = False,
        dtype: torch.dtype | str | None = None,
    ):
        """``name`` as given (repr; None for a module), ``source`` resolved (equality; None: this very module)."""
        super().__init__(batch_size=batch_size, text_field=text_field, verbose=verbose)
        self.device = default_device(device)
        self.precision = resolve_precision(dtype, self.device)  # autocast of inference; vectors stay float32
        self.text_encoder = text_encoder.to(self.device).eval()
        self.model_name, self.source, self._dtype = name, source, dtype

    #: constructor parameters kept as given, as ``_<name>`` (pt.inspect's attributes); the first is the model
    GIVEN: tuple[str, ...] = ("model", "tokenizer")

    def _construct(self, given: dict, loaded: Loaded, text_encoder: TextEncoder) -> None:
        """The end of each family's constructor (``given``: its ``locals()``), keeping :attr:`GIVEN` for pt.inspect."""
        runtime = {k: given[k] for k in ("batch_size", "text_field", "device", "verbose", "dtype")}
        DenseBiEncoder.__init__(self, text_encoder, given_name(given[self.GIVEN[0]]), loaded.source, **runtime)
        vars(self).update({f"_{k}": given[k] for k in self.GIVEN})

    def _module_arguments(self) -> dict:
        return {self.GIVEN[0]: self.model, "tokenizer": self.tokenizer}

    # -- what the model is ------------------------------------------------------------------------------------
    model = property(lambda self: self.text_encoder.model)
    tokenizer = property(lambda self: self.text_encoder.inputs.tokenizer)
    query_max_length = property(lambda self: self.text_encoder.inputs.query_max_length)
    doc_max_length = property(lambda self: self.text_encoder.inputs.doc_max_length)
    query_marker = property(lambda self: self.text_encoder.inputs.query_marker)
    doc_marker = property(lambda self: self.text_encoder.inputs.doc_marker)
    dim = property(lambda self: self.text_encoder.dim)

    def settings(self) -> dict:
        """What decides the vectors besides the weights (lengths, markers; subclasses add theirs)."""
        return self.text_encoder.inputs.settings()

    def eq_key(self) -> tuple:
        origin = self.source if self.source is not None else ("in memory", id(self.model))
        settings = tuple(sorted(self.settings().items()))
        return type(self), origin, settings, self.text_field, str(self.device), self.precision

    # -- encoding ---------------------------------------------------------------------------------------------
    def encode_queries_torch(self, texts: Iterable[str], batch_size: int | None = None) -> torch.Tensor:
        """``[N, D]`` in input order, with gradients when they are enabled (training)."""
        model = self.encoding_model("query")
        if model is not self:
            return model.encode_queries_torch(texts, batch_size or self.batch_size)
        return self.text_encoder.encode_queries(list(texts), batch_size or self.batch_size)

    def encode_docs_torch(self, texts: Iterable[str], batch_size: int | None = None) -> torch.Tensor:
        return self.text_encoder.encode_docs(list(texts), batch_size or self.batch_size)

    def encode(self, texts: Iterable[str], role: str, batch_size: int | None = None, progress: str | None = None):
        """Inference: float32 ``[N, D]`` numpy in input order, encoded in batches of similar length by
        :meth:`encoding_model`; ``progress`` names a ``pt.tqdm`` bar over the texts."""
        model = self.encoding_model(role)
        if model is not self:
            return model.encode(texts, role, batch_size or self.batch_size, progress)
        texts = list(texts)
        bar = pt.tqdm(total=len(texts), desc=progress, unit=role, disable=not progress)
        with bar, torch.no_grad(), autocast(self.device, self.precision):
            vectors = self.text_encoder.encode(texts, role, batch_size or self.batch_size, bar.update)
        return vectors.float().cpu().numpy()

    def encoding_model(self, role: str) -> DenseBiEncoder:
        """The bi-encoder that encodes ``role``'s texts (this one; TITE hands queries to its query model)."""
        return self

    def refuse_non_finite(self, vectors, rows, role: str, index=None) -> None:
        """:func:`~pyterrier_tite.pt.validation.refuse_non_finite` with the encoding model's name and modules."""
        model = self.encoding_model(role)
        what, modules = f"{role} vectors", [model.model]
        refuse_non_finite(vectors, rows, what, repr(model), index=index, modules=modules, precision=model.precision)

    def encode_queries(self, texts, batch_size: int | None = None) -> np.ndarray:
        return self.encode(texts, "query", batch_size)

    def encode_docs(self, texts, batch_size: int | None = None) -> np.ndarray:
        return self.encode(texts, "doc", batch_size)

    # -- transformers -----------------------------------------------------------------------------------------
    def query_encoder(self, verbose=None, batch_size=None) -> pt.Transformer:
        return DenseQueryEncoder(self, verbose=verbose, batch_size=batch_size)

    def doc_encoder(self, verbose=None, batch_size=None) -> pt.Transformer:
        return DenseDocEncoder(self, verbose=verbose, batch_size=batch_size)

    def text_scorer(self, verbose=None, batch_size=None, sim_fn=None) -> pt.Transformer:
        return DenseScorer(self, verbose=verbose, batch_size=batch_size, sim_fn=sim_fn)

    def transform_iter(self, inp: pt.model.IterDict) -> pt.model.IterDict:
        """Documents (``model >> FlexIndex(path)``) stream through the doc encoder; the rest through ``transform``."""
        records = peekable(inp)
        first = records.peek(None)
        if first is not None and self.text_field in first and not {"query", "query_vec"} & first.keys():
            # called once per chunk of an indexing pipeline: transient bars, the index's own bar counts the corpus
            encoder = self.doc_encoder()
            encoder.leave_bars = False
            return encoder.transform_iter(records)
        return super().transform_iter(records)

    # -- persistence ------------------------------------------------------------------------------------------
    def _save_into(self, folder: str) -> None:
        """HF layout (model + tokenizer) + ``pt_meta.json`` with :meth:`settings`."""
        save_model_folder(folder, self.model, self.tokenizer, self.ARTIFACT_FORMAT, self.settings())


class DenseQueryEncoder(KeyedEquality, NamedSchematic, pyterrier_dr.BiQueryEncoder):
    """``qid, query`` -> ``+ query_vec``; each distinct query text is encoded once."""

    def transform(self, inp):
        with pta.validate.any(inp) as v:
            v.query_frame(extra_columns=["query"])
            v.columns(includes=["query"])
        texts = text_column(inp, "query", "qid")
        one_query_per_qid(inp)  # a retriever would rank both queries' results under the one qid
        rows, distinct = distinct_texts(texts)  # each distinct query once; rows: its position in ``distinct``
        progress = "Encoding Queries" if self.verbose else None
        vectors = self.bi_encoder_model.encode(distinct, "query", self.batch_size, progress)
        self.bi_encoder_model.refuse_non_finite(vectors, inp, "query", index=rows)
        return inp.assign(query_vec=[vectors[i] for i in rows])

    def eq_key(self) -> tuple:
        return (self.bi_encoder_model.eq_key(),)


class DenseDocEncoder(KeyedEquality, _IndexesAtomically, NamedSchematic, pyterrier_dr.BiDocEncoder):
    """``docno, text`` -> ``+ doc_vec``: a frame's distinct texts once each, a stream chunk by chunk."""

    leave_bars = True  # False: progress bars vanish when done (one call per chunk of a longer stream)

    def transform_iter(self, inp: pt.model.IterDict) -> pt.model.IterDict:
        records = pt.tqdm(inp, desc="Encoding Docs", unit="doc", leave=self.leave_bars) if self.verbose else inp
        for chunk in chunked(records, max(self.batch_size, 256)):
            for record in chunk:
                if self.text_field not in record:
                    raise KeyError(f"doc encoder needs a {self.text_field!r} field, got {sorted(record)}")
            texts = [checked_text(r[self.text_field], self.text_field, f"docno {r.get('docno')!r}") for r in chunk]
            vectors = self.bi_encoder_model.encode(texts, "doc", self.batch_size)
            self.bi_encoder_model.refuse_non_finite(vectors, chunk, "doc")
            for record, vector in zip(chunk, vectors, strict=True):
                yield {**record, "doc_vec": vector}

    def transform(self, inp):
        with pta.validate.any(inp) as v:
            v.document_frame(extra_columns=[self.text_field])
            v.columns(includes=[self.text_field])
        texts = text_column(inp, self.text_field, "docno")
        rows, distinct = distinct_texts(texts)  # a re-ranked run repeats documents across queries: each encoded once
        progress = "Encoding Docs" if self.verbose else None
        vectors = self.bi_encoder_model.encode(distinct, "doc", self.batch_size, progress)
        self.bi_encoder_model.refuse_non_finite(vectors, inp, "doc", index=rows)
        return inp.assign(doc_vec=[vectors[i] for i in rows])

    def eq_key(self) -> tuple:
        return self.bi_encoder_model.eq_key(), self.text_field


class DenseScorer(KeyedEquality, NamedSchematic, pyterrier_dr.BiScorer):
    """Re-scores ``qid, query, docno, text`` (or given vectors, refused when not finite) by the dot product."""

    def transform(self, inp):
        for column in ("query_vec", "doc_vec"):
            if column in inp.columns and len(inp):
                refuse_non_finite(inp[column], inp, column, repr(self))
        return super().transform(inp)

    def eq_key(self) -> tuple:
        return self.bi_encoder_model.eq_key(), self.text_field, self.sim_fn
