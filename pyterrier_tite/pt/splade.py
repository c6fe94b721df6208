"""SPLADE as PyTerrier transformers: ``toks`` / ``query_toks`` encoders, a PISA indexer and retriever, a scorer.

Weights leave the encoders as the model's floats (``sum_t query_toks[t] * toks[t]`` is the model's score); only the
PISA writer quantises them (:data:`PISA_SCALE`)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence

import pandas as pd
import pyterrier as pt
import pyterrier_alpha as pta
import torch
from more_itertools import chunked

from pyterrier_tite.devices import autocast, default_device, resolve_precision
from pyterrier_tite.models.checkpoint import Checkpoint, write_pt_meta
from pyterrier_tite.models.splade.load import load
from pyterrier_tite.models.splade.modeling import SpladeEncoder, SpladePair
from pyterrier_tite.models.splade.tokenization import Role, SpladeInputs
from pyterrier_tite.pt.artifacts import IndexRecord
from pyterrier_tite.pt.model_artifact import ModelArtifact, is_model_name, opened, shown_name
from pyterrier_tite.pt.schematic import KeyedEquality, NamedSchematic
from pyterrier_tite.pt.validation import distinct_texts, one_query_per_qid, refuse_non_finite, text_column
from pyterrier_tite.store.pisa_build import PISA_SCALE, build_toks_index
from pyterrier_tite.store.pisa_derived import open_pisa_retriever
from pyterrier_tite.store.values import checked_text

#: what ``pt_meta.json`` of a saved pair names: the sub-folder of each side
PAIR_FOLDERS = {"query": "query", "doc": "doc"}


def pisa_term(token: str) -> str:
    """A vocabulary token as a PISA term that survives PISA lowercasing query terms, so ``[SEP]`` can match.

    Injective: ``^`` becomes ``^^``, a character that lowercasing changes ``^`` + its lowercase form."""
    if token == token.lower() and "^" not in token:
        return token
    return "".join("^^" if c == "^" else ("^" + c.lower() if c.lower() != c else c) for c in token)


class Splade(KeyedEquality, pt.Transformer, ModelArtifact):
    """Factory of SPLADE transformers; used directly, it encodes queries, documents or scores results by columns.

    ``encoder``: a folder or hub id of an MLM checkpoint with its tokenizer, or ``query=`` and ``doc=`` names of a
    pair (``query='naver/efficient-splade-V-large-query', doc='naver/efficient-splade-V-large-doc'``, each with its
    own tokenizer), loaded exactly; ``new_head=True`` (training from an encoder-only checkpoint) lets a missing MLM
    head start fresh, with one warning. In memory (:meth:`from_module`): one :class:`SpladeEncoder` or a
    :class:`SpladePair`, whose ``query_tokenizer`` (default: ``tokenizer``) must share the documents' vocabulary.
    ``dtype``: float32, bfloat16 or float16 inference (autocast; term weights stay float32); default bf16 on GPUs
    that support it, else fp32.

    Example::

        splade = t.Splade('naver/splade-cocondenser-ensembledistil')
        splade.indexer('vaswani.splade').index(t.datasets.get_dataset('vaswani').get_corpus_iter())
        retriever = (splade.retriever('vaswani.splade') % 10).compile()  # compiled: the cut reaches PISA
    """

    ARTIFACT_FORMAT = "splade"  # families.py's format: pt_meta.json's, a pt.Artifact of type "model"
    RELOADS = ("query", "doc", "new_head")

    def __init__(
        self,
        encoder: SpladeEncoder | SpladePair | str | os.PathLike | Checkpoint | None = None,
        tokenizer=None,
        batch_size: int = 16,
        query_max_length: int = 64,
        doc_max_length: int = 256,
        text_field: str = "text",
        device: str | torch.device | None = None,
        verbose: bool = False,
        query_tokenizer=None,
        dtype: torch.dtype | str | None = None,
        *,
        query: str | os.PathLike | None = None,
        doc: str | os.PathLike | None = None,
        new_head: bool = False,
    ):
        self._encoder, self._tokenizer, self._query_tokenizer, self._dtype = encoder, tokenizer, query_tokenizer, dtype
        self._query, self._doc, self._new_head = query, doc, new_head  # as given: pt.inspect's attributes
        if encoder is None or is_model_name(encoder):  # the loader refuses a mix of a path and query= / doc=
            loaded = load(encoder, query=query, doc=doc, new_head=new_head)
            if loaded.settings["query_tokenizer"] is not None:  # a pair's own
                query_tokenizer = loaded.settings["query_tokenizer"]
            self.model_name = loaded.settings["name"]
        elif query is not None or doc is not None:
            raise TypeError("Splade takes an encoder (with tokenizer=), a name, or query= and doc= names")
        else:
            loaded = opened(encoder, tokenizer, load)
        self.device = default_device(device)
        self.precision = resolve_precision(dtype, self.device)  # autocast of inference; weights stay float32
        self.encoder = loaded.module.to(self.device).eval()
        tokenizer_used = loaded.tokenizer if tokenizer is None else tokenizer
        self.inputs = SpladeInputs(tokenizer_used, query_max_length, doc_max_length, query_tokenizer)
        self.batch_size = batch_size
        self.text_field = text_field
        self.verbose = verbose
        #: the vocabulary token of each id (``None`` for ids the tokenizer lacks); ``terms`` are their PISA forms
        self.tokens = self.inputs.vocabulary(self.encoder.vocab_size)
        self.terms = [pisa_term(t) if t is not None else f"^[{i}]" for i, t in enumerate(self.tokens)]

    def _module_arguments(self) -> dict:
        query_tokenizer = self.tokenizers["query"] if self.is_pair else None
        return {"encoder": self.encoder, "tokenizer": self.tokenizer, "query_tokenizer": query_tokenizer, "query": None,
                "doc": None}  # fmt: skip

    @property
    def tokenizer(self):
        """The documents' tokenizer (the queries' too unless this is a pair with its own)."""
        return self.inputs.tokenizers["doc"]

    @property
    def tokenizers(self) -> dict:
        """``{"query": tokenizer, "doc": tokenizer}``."""
        return self.inputs.tokenizers

    @property
    def query_max_length(self) -> int:
        """Query tokens kept (fixed at construction: it is part of ``==`` / ``hash``)."""
        return self.inputs.max_lengths["query"]

    @property
    def doc_max_length(self) -> int:
        """Document tokens kept (fixed at construction: it is part of ``==`` / ``hash``)."""
        return self.inputs.max_lengths["doc"]

    @property
    def is_pair(self) -> bool:
        """Whether queries and documents go through different MLMs."""
        return isinstance(self.encoder, SpladePair)

    def _save_into(self, folder: str) -> None:
        """Hugging Face layout; a pair saves each side (MLM + tokenizer) in the sub-folder ``pt_meta.json`` names."""
        self.encoder.save_pretrained(folder)
        if self.is_pair:
            for role, side in PAIR_FOLDERS.items():
                self.tokenizers[role].save_pretrained(os.path.join(folder, side))
        else:
            self.tokenizer.save_pretrained(folder)
        write_pt_meta(folder, self.ARTIFACT_FORMAT, {"pair": PAIR_FOLDERS} if self.is_pair else None)

    def __repr__(self) -> str:
        return f"Splade({shown_name(getattr(self, 'model_name', None)) or ''!r})"

    def eq_key(self) -> tuple:
        model = getattr(self, "model_name", None) or id(self.encoder)
        return (model, self.query_max_length, self.doc_max_length, self.text_field, self.precision)

    # -- tensors ---------------------------------------------------------------------------------------------------
    def _role(self, role: Role | None) -> Role:
        """The side to encode with; a pair must be told (documents through the query MLM would be silently wrong)."""
        if role is None and self.is_pair:
            raise ValueError("this SPLADE has separate query and doc encoders: pass role='query' or role='doc'")
        return role or "doc"

    def encode(
        self,
        texts: Sequence[str],
        max_length: int,
        batch_size: int | None = None,
        verbose=None,
        role: Role | None = None,
    ) -> torch.Tensor:
        """Texts -> ``[N, V]`` float weights on the CPU (no gradients)."""
        batches = list(chunked(list(texts), batch_size or self.batch_size))
        if verbose if verbose is not None else self.verbose:
            batches = pt.tqdm(batches, desc="SPLADE encoding", unit="batch")
        out = [self._encode_on_device(batch, max_length, role).cpu() for batch in batches]
        return torch.cat(out) if out else torch.zeros(0, self.encoder.vocab_size)

    def encode_torch(self, texts: list[str], max_length: int, role: Role | None = None) -> torch.Tensor:
        """One batch of texts -> ``[N, V]`` on the model's device, with gradients when enabled."""
        role = self._role(role)
        return self.encoder.side(role)(**self.inputs(texts, role, max_length, device=self.device))

    def _encode_on_device(self, texts: list[str], max_length: int, role: Role | None = None) -> torch.Tensor:
        """One batch -> float32 ``[N, V]`` left on the device: a GPU reduces the dense rows (122 KB a text) there."""
        with torch.no_grad(), autocast(self.device, self.precision):
            return self.encode_torch(texts, max_length, role).float()

    def refuse_non_finite(self, values, rows, what: str, index=None) -> None:
        """:func:`~pyterrier_tite.pt.validation.refuse_non_finite` with this model's name, modules and precision."""
        refuse_non_finite(values, rows, what, repr(self), index=index, modules=[self.encoder], precision=self.precision)

    def to_toks(self, reps: torch.Tensor) -> list[dict[str, float]]:
        """``[N, V]`` weights -> one ``{term: weight}`` dict of the non-zero weights per row (PISA terms)."""
        return self._to_dicts(reps, self.terms)

    def to_term_weights(self, reps: torch.Tensor) -> list[dict[str, float]]:
        """:meth:`to_toks` keyed by the tokens as the tokenizer spells them (``[CLS]``), not their PISA terms."""
        return self._to_dicts(reps, [t if t is not None else f"[{i}]" for i, t in enumerate(self.tokens)])

    @staticmethod
    def _to_dicts(reps: torch.Tensor, names: list[str]) -> list[dict[str, float]]:
        """One ``{name: weight}`` per row, ids ascending; the non-zeros found in one pass where ``reps`` lies."""
        rows, ids = reps.nonzero(as_tuple=True)
        weights = reps[rows, ids].cpu().tolist()
        ends = torch.bincount(rows, minlength=len(reps)).cumsum(0).cpu().tolist()
        ids = ids.cpu().tolist()
        result, start = [], 0
        for end in ends:
            result.append(dict(zip([names[i] for i in ids[start:end]], weights[start:end], strict=True)))
            start = end
        return result

    # -- transformers ----------------------------------------------------------------------------------------------
    def query_encoder(self, verbose: bool | None = None, batch_size: int | None = None) -> pt.Transformer:
        """``query`` -> ``query_toks`` (each distinct query encoded once)."""
        return SpladeQueryEncoder(self, verbose, batch_size)

    def doc_encoder(self, verbose: bool | None = None, batch_size: int | None = None) -> pt.Transformer:
        """``text`` -> ``toks``; streams in batches (``transform_iter``) when indexing."""
        return SpladeDocEncoder(self, verbose, batch_size)

    def scorer(self, verbose: bool | None = None, batch_size: int | None = None) -> pt.Transformer:
        """Re-ranks a result frame without an index; scores equal the dot product of ``query_toks`` and ``toks``."""
        return SpladeScorer(self, verbose, batch_size)

    def indexer(self, path: str, threads: int = 1, overwrite: bool = False, verbose: bool = True) -> pt.Indexer:
        """A PISA index of the documents' ``toks``, built all or nothing; ``overwrite=True`` replaces an existing
        index once the new one is complete."""
        return SpladeIndexer(self, path, threads=threads, overwrite=overwrite, verbose=verbose)

    def retriever(self, index, num_results: int = 1000, threads: int = 1, verbose: bool | None = None):
        """``query_encoder() >> SpladePisaRetriever`` over a ``PisaIndex`` or its folder (checked first: a damaged one
        raises ``CorruptIndexError`` naming the file); ``(retriever % k).compile()`` asks PISA for ``k``."""
        return self.query_encoder(verbose=verbose) >> SpladePisaRetriever(index, num_results, threads)

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        with pta.validate.any(inp) as v:
            v.result_frame(extra_columns=["query", self.text_field], mode="scorer")
            v.query_frame(extra_columns=["query"], mode="query_encoder")
            v.document_frame(extra_columns=[self.text_field], mode="doc_encoder")
        stages = {"scorer": self.scorer, "query_encoder": self.query_encoder, "doc_encoder": self.doc_encoder}
        return stages[v.mode]()(inp)


class _Stage(KeyedEquality, NamedSchematic, pt.Transformer):
    """A transformer over a :class:`Splade`, equal to another of its kind over an equal model."""

    def __init__(self, model: Splade, verbose: bool | None, batch_size: int | None):
        self.model = model
        self.verbose = model.verbose if verbose is None else verbose
        self.batch_size = batch_size or model.batch_size

    def subtransformers(self) -> dict:
        return {}

    def eq_key(self) -> tuple:
        return (self.model,)


class SpladeQueryEncoder(_Stage):
    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        with pta.validate.any(inp) as v:
            v.query_frame(extra_columns=["query"])
            v.columns(includes=["query"])  # result frames too (one encoding per distinct query)
        queries = text_column(inp, "query", "qid")
        one_query_per_qid(inp)  # a retriever would rank both queries' results under the one qid
        rows, distinct = distinct_texts(queries)  # each distinct query once; rows: its position in ``distinct``
        reps = self.model.encode(distinct, self.model.query_max_length, self.batch_size, self.verbose,
                                 role="query")  # fmt: skip
        self.model.refuse_non_finite(reps, inp, "query term weights", index=rows)
        toks = self.model.to_toks(reps)
        return inp.assign(query_toks=[toks[i] for i in rows])

    def __repr__(self) -> str:
        return f"{self.model!r}.query_encoder()"


class SpladeDocEncoder(_Stage):
    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        with pta.validate.any(inp) as v:
            v.document_frame(extra_columns=[self.model.text_field])
            v.columns(includes=[self.model.text_field])
        texts = text_column(inp, self.model.text_field, "docno")
        reps = self.model.encode(texts, self.model.doc_max_length, self.batch_size, self.verbose, role="doc")
        self.model.refuse_non_finite(reps, inp, "doc term weights")
        return inp.assign(toks=self.model.to_toks(reps))

    def transform_iter(self, inp: Iterable[dict]) -> Iterator[dict]:
        field = self.model.text_field
        batches = chunked(inp, self.batch_size)
        if self.verbose:
            batches = pt.tqdm(batches, desc="SPLADE docs", unit="batch")
        for batch in batches:
            if field not in batch[0]:
                raise KeyError(f"documents lack the field {field!r}; available: {sorted(batch[0])}")
            texts = [checked_text(d.get(field), field, f"docno {d.get('docno')!r}") for d in batch]
            reps = self.model._encode_on_device(texts, self.model.doc_max_length, "doc")
            self.model.refuse_non_finite(reps, batch, "doc term weights")
            for doc, toks in zip(batch, self.model.to_toks(reps), strict=True):
                yield {**doc, "toks": toks}

    def __repr__(self) -> str:
        return f"{self.model!r}.doc_encoder()"


class SpladeScorer(_Stage):
    """``qid, query, docno, text`` -> ``+ score, rank``, each distinct text encoded once, dense rows kept on device."""

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        field = self.model.text_field
        pta.validate.result_frame(inp, extra_columns=["query", field])
        if len(inp) == 0:
            return inp.assign(score=pd.Series(dtype="float64"), rank=pd.Series(dtype="int64"))
        queries = text_column(inp, "query", "qid")
        texts = text_column(inp, field, "docno")
        one_query_per_qid(inp)  # ranks would mix the two queries' documents
        query_rows, unique = distinct_texts(queries)
        query_reps = self.model.encode(unique, self.model.query_max_length, self.batch_size, False, role="query")
        row_query = torch.from_numpy(query_rows)
        doc_rows, distinct = distinct_texts(texts)  # a re-ranked run repeats documents: each encoded once
        row_doc = torch.from_numpy(doc_rows)
        doc_order = torch.argsort(row_doc, stable=True)  # rows grouped by document, so a batch's rows are one slice
        grouped = row_doc[doc_order]
        scores = torch.empty(len(texts), dtype=torch.float32)
        starts = range(0, len(distinct), self.batch_size)
        for start in pt.tqdm(starts, desc="SPLADE scoring", unit="batch") if self.verbose else starts:
            docs = self.model._encode_on_device(distinct[start : start + self.batch_size], self.model.doc_max_length,
                                                "doc")  # fmt: skip
            bounds = torch.searchsorted(grouped, torch.tensor([start, start + len(docs)])).tolist()
            for lo in range(bounds[0], bounds[1], self.batch_size):  # at most a batch of [V] rows at a time
                rows = doc_order[lo : min(lo + self.batch_size, bounds[1])]
                # the queries' rows go to the device a batch at a time: its memory holds batches, never all queries
                pairs = query_reps[row_query[rows]].to(docs.device) * docs[(row_doc[rows] - start).to(docs.device)]
                scores[rows] = pairs.sum(dim=1).cpu()
        self.model.refuse_non_finite(scores, inp, "scores")
        return pt.model.add_ranks(inp.assign(score=scores.double().numpy()))

    def __repr__(self) -> str:
        return f"{self.model!r}.scorer()"


class SpladePisaRetriever(KeyedEquality, NamedSchematic, pt.Transformer):
    """``query_toks`` -> PISA's quantised top ``num_results`` over a SPLADE index, scores in model units.

    PISA's scores are ``PISA_SCALE ** 2`` times the model's (quantised postings and query terms), so they are divided
    here rather than by ``pipeline * factor``, whose stage would hide the retriever from a following ``% k``.
    """

    def __init__(self, index, num_results: int = 1000, threads: int = 1):
        from pyterrier_pisa import PisaIndex

        if not isinstance(index, PisaIndex):
            index = PisaIndex(str(index), stemmer="none")
        self.index = index
        self.num_results = num_results
        self.threads = threads
        # checked first (PISA aborts the process on a damaged index); the files PISA derives on first use are
        # written by a helper process, so a full disk is an error, not an abort
        self.pisa = open_pisa_retriever(index, "quantized", num_results, threads, toks_scale=PISA_SCALE)

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        result = self.pisa(inp)
        return result.assign(score=result["score"].astype("float64") / PISA_SCALE**2)

    def fuse_rank_cutoff(self, k: int) -> SpladePisaRetriever:
        return SpladePisaRetriever(self.index, k, self.threads) if k < self.num_results else self

    def subtransformers(self) -> dict:
        return {}

    def schematic(self, *, input_columns=None) -> dict:
        return {**super().schematic(input_columns=input_columns), "label": f"SPLADE PISA {self.num_results}"}

    def eq_key(self) -> tuple:
        return (str(self.index.path), self.num_results)

    def __repr__(self) -> str:
        return f"SpladePisaRetriever({str(self.index.path)!r}, num_results={self.num_results})"


class SpladeIndexer(pt.Indexer):
    """Encodes documents into ``toks`` and builds their PISA index, all or nothing."""

    def __init__(self, model: Splade, path: str, threads: int = 1, overwrite: bool = False, verbose: bool = True):
        self.model, self.path, self.overwrite, self.verbose = model, str(path), overwrite, verbose
        self.threads = threads

    def index_inputs(self) -> list[list[str]]:
        return [["docno", self.model.text_field]]

    def index(self, iter_dict: Iterable[dict]):
        progress = "SPLADE indexing" if self.verbose else None
        docs = IndexRecord(iter_dict, self.model, "splade")  # the model, recorded: t.load(index) opens it
        return build_toks_index(docs, self.path, doc_toks(self.model), text_field=self.model.text_field,
                                threads=self.threads, overwrite=self.overwrite, progress=progress,
                                chunk_size=8 * self.model.batch_size, finalize=docs.finalize)  # fmt: skip


def doc_toks(model: Splade, batch_size: int | None = None):
    """``docs -> [toks]`` with ``model``'s doc encoder: what the PISA writer calls for each chunk."""
    encoder = model.doc_encoder(verbose=False, batch_size=batch_size)

    def encode(docs: list[dict]) -> list[dict[str, float]]:
        return [record["toks"] for record in encoder.transform_iter(docs)]

    return encode
