"""Cross-encoder rerankers as PyTerrier transformers: ``SparseCE`` (windowed, asymmetric), ``MonoCE`` (full
attention, monoBERT) and ``CELI`` (late-interaction head on either backbone).

All three take a result frame (qid, query, docno, text) and return it rescored and re-ranked. Docs are scored
grouped by query, so a sparse cross-encoder whose query attends only to itself encodes each query once per batch.
Texts are tokenised without special tokens (the models add them) and truncated to ``query_max_length`` /
``doc_max_length`` word pieces and to what the position embeddings hold (``doc_max_length=None``: the doc gets every
position the query and the three special tokens leave, as in the reference).

Folders and hub ids load exactly (:mod:`pyterrier_tite.convert`): a missing or unused tensor is an error; only a start
from a plain encoder (new score head) creates fresh weights, and says so in one warning. Lengths stored with a
checkpoint are its defaults, explicit keyword arguments override them: ``pt_meta.json`` of our saves, the
reference's caps for a released sparse checkpoint (query 30 word pieces = its 32 with [CLS] and [SEP]).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence

import numpy as np
import pandas as pd
import pyterrier as pt
import pyterrier_alpha as pta
import torch
from torch import nn

from pyterrier_tite.convert.checkpoint import CheckpointError, load_exactly, local_checkpoint
from pyterrier_tite.convert.cross_encoder import (
    fill_special_ids,
    folder_tokenizer,
    note_fresh,
    one_fresh_warning,
    sequence_classifier,
)
from pyterrier_tite.convert.sparse_ce import (
    REFERENCE_QUERY_WORD_PIECES,
    RELEASED_PATTERN,
    is_sparse_checkpoint,
    load_sparse_cross_encoder,
    special_ids,
)
from pyterrier_tite.devices import default_device
from pyterrier_tite.modeling.celi import CrossEncoderScorer
from pyterrier_tite.modeling.sparse_ce import FLAGS, SparseCrossEncoder

__all__ = ["CELI", "RELEASED_PATTERN", "CrossEncoderReranker", "MonoCE", "SparseCE"]

#: ``w`` / ``symmetric`` value meaning "as the checkpoint says"
KEEP = "config"
META_FILE = "pt_meta.json"
HEAD_FILE = "score_head.safetensors"
SPECIAL_TOKENS = 3  # [CLS] q [SEP] d [SEP]
#: query cap (word pieces) of our own models when the checkpoint stores none
QUERY_MAX_LENGTH = 32


class CrossEncoderReranker(pt.Transformer):
    """Scores (query, doc) pairs of a result frame with a :class:`CrossEncoderScorer`; see the module docstring."""

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
    ):
        self.device = default_device(device)
        self.scorer = scorer.to(self.device).eval()
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.query_max_length = query_max_length
        self.doc_max_length = doc_max_length
        self.text_field = text_field
        self.verbose = verbose

    def __repr__(self) -> str:
        c = self.scorer.config
        window = c.attention_window_size if self.scorer.is_sparse else None
        return f"{type(self).__name__}(w={'inf' if window is None else window}, head={self.scorer.head_name!r})"

    # -- tokens ------------------------------------------------------------------------------------------------------
    def tokenize(self, texts: Sequence[str], max_length: int) -> list[list[int]]:
        """Raw token ids (no special tokens), truncated to ``max_length``."""
        if len(texts) == 0:
            return []
        enc = self.tokenizer([str(t) for t in texts], add_special_tokens=False, truncation=True, max_length=max_length)
        return enc["input_ids"]

    def tokenize_queries(self, texts: Sequence[str]) -> list[list[int]]:
        return self.tokenize(texts, self.query_max_length)

    def tokenize_docs(self, texts: Sequence[str]) -> list[list[int]]:
        """Doc ids capped at ``doc_max_length``, or (None) at the positions left after the special tokens; the
        tokenizer's ``model_max_length`` (512 even for the 4096-position release) never applies."""
        cap = self.scorer.max_positions() - SPECIAL_TOKENS
        return self.tokenize(texts, cap if self.doc_max_length is None else self.doc_max_length)

    def lengths(self) -> dict[str, int | None]:
        """The input caps, as stored in ``pt_meta.json``."""
        return {"query_max_length": self.query_max_length, "doc_max_length": self.doc_max_length}

    def fit_doc(self, query: list[int], doc: list[int]) -> list[int]:
        """The doc cut to what the position embeddings leave after the query and the special tokens."""
        return doc[: max(0, self.scorer.max_positions() - SPECIAL_TOKENS - len(query))]

    def scores_torch(self, queries: list[list[int]], docs: list[list[list[int]]]) -> torch.Tensor:
        """Differentiable scores ``[N]`` of token-id inputs (one query with its docs per entry), for training."""
        docs = [[self.fit_doc(q, d) for d in ds] for q, ds in zip(queries, docs, strict=True)]
        return self.scorer(queries, docs)

    # -- transformer -------------------------------------------------------------------------------------------------
    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        pta.validate.result_frame(inp, extra_columns=["query", self.text_field])
        out = inp.copy()
        if len(out) == 0:
            out["score"] = pd.Series(dtype="float64")
            out["rank"] = pd.Series(dtype="int64")
            return out
        qids = out["qid"].astype(str).to_numpy()
        order = pd.unique(qids)
        first = pd.Series(range(len(out))).groupby(qids, sort=False).first()
        query_text = out["query"].astype(str).to_numpy()
        query_ids = dict(zip(order, self.tokenize_queries([query_text[first[q]] for q in order]), strict=True))
        doc_ids = self.tokenize_docs(out[self.text_field].astype(str).tolist())
        rank_of_query = {q: i for i, q in enumerate(order)}
        lengths = np.array([len(d) for d in doc_ids])
        # by query (sharing its encoding), longest docs first (less padding per batch)
        rows = np.lexsort((-lengths, np.array([rank_of_query[q] for q in qids])))
        scores = np.zeros(len(out), dtype="float64")
        starts = range(0, len(rows), self.batch_size)
        if self.verbose:
            starts = pt.tqdm(starts, desc=repr(self), unit="batch")
        with torch.no_grad():
            for start in starts:
                batch = rows[start : start + self.batch_size]
                groups = pd.Series(batch).groupby(qids[batch], sort=False).agg(list)
                queries = [query_ids[q] for q in groups.index]
                docs = [[doc_ids[i] for i in members] for members in groups]
                result = self.scores_torch(queries, docs).float().cpu().numpy()
                scores[np.concatenate(groups.to_list())] = result
        out["score"] = scores
        out = pt.model.add_ranks(out)
        key = out["qid"].astype(str).map(rank_of_query)
        return out.assign(_q=key).sort_values(["_q", "rank"], kind="stable").drop(columns="_q")

    # -- artifacts ---------------------------------------------------------------------------------------------------
    def save_pretrained(self, path: str | os.PathLike) -> None:
        """Hugging Face layout (backbone ``config.json`` + ``model.safetensors``, tokenizer files), the head's
        weights (``score_head.safetensors``, heads other than "cls") and ``pt_meta.json``."""
        save_scorer(self.scorer, self.tokenizer, path, reranker=type(self).__name__, lengths=self.lengths())

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike, **kwargs) -> CrossEncoderReranker:
        """A folder or hub id: saved by ``save_pretrained`` (any of the three classes, read from ``pt_meta.json``),
        a reference sparse cross-encoder checkpoint (a SparseCE, also from this base class) or a plain BERT /
        ELECTRA (cross-)encoder (as this class; MonoCE from the base class)."""
        folder = local_checkpoint(path)
        meta = read_meta(folder)
        target = {c.__name__: c for c in (SparseCE, MonoCE, CELI)}.get(meta.get("reranker"), cls)
        if target is CrossEncoderReranker:
            target = SparseCE if meta.get("backbone") == "sparse" or is_sparse_checkpoint(folder) else MonoCE
        return target(folder, **kwargs)

    def _setup(self, model, backbone_fn, head, token_dim, tokenizer, query_max_length, doc_max_length, **common):
        """Shared construction of the three classes: hub id -> folder, tokenizer, scorer (fresh parts reported in
        one warning), special ids, lengths (stored in the checkpoint unless given)."""
        model = _local(model)
        tokenizer = _tokenizer(model, tokenizer)
        with one_fresh_warning(str(model) if isinstance(model, str) else type(model).__name__):
            scorer = _build(model, backbone_fn(tokenizer), head, token_dim)
        if not scorer.is_sparse:
            fill_special_ids(scorer.config, tokenizer)
        lengths = stored_lengths(model)
        query_max_length = lengths["query_max_length"] if query_max_length is None else query_max_length
        doc_max_length = lengths["doc_max_length"] if doc_max_length is None else doc_max_length
        CrossEncoderReranker.__init__(
            self, scorer, tokenizer, query_max_length=query_max_length, doc_max_length=doc_max_length, **common
        )


def read_meta(path: str | os.PathLike) -> dict:
    """``pt_meta.json`` of a local folder ({} for other checkpoints)."""
    file = os.path.join(str(path), META_FILE)
    if not os.path.isfile(file):
        return {}
    with open(file) as f:
        return json.load(f)


def stored_lengths(model) -> dict[str, int | None]:
    """The input caps a checkpoint folder stores: ``pt_meta.json``'s (our saves), the reference's for a released
    sparse checkpoint (query 32 tokens with [CLS] / [SEP], doc = the positions left), else ours (32, positions)."""
    if isinstance(model, (str, os.PathLike)):
        meta = read_meta(model)
        if "query_max_length" in meta:
            return {"query_max_length": meta["query_max_length"], "doc_max_length": meta.get("doc_max_length")}
        if not meta and is_sparse_checkpoint(model):
            return {"query_max_length": REFERENCE_QUERY_WORD_PIECES, "doc_max_length": None}
    return {"query_max_length": QUERY_MAX_LENGTH, "doc_max_length": None}


def save_scorer(
    scorer: CrossEncoderScorer,
    tokenizer,
    path: str | os.PathLike,
    reranker: str | None = None,
    lengths: dict[str, int | None] | None = None,
) -> None:
    """Writes a reranker folder; also the ``save_fn`` of training (the scorer is what the trainer optimises).
    ``lengths``: the input caps (word pieces; doc None = the positions left), the folder's defaults when loaded."""
    from safetensors.torch import save_file

    path = str(path)
    os.makedirs(path, exist_ok=True)
    scorer.backbone.save_pretrained(path)
    if tokenizer is not None:
        tokenizer.save_pretrained(path)
    if scorer.head is not None:
        save_file({k: v.contiguous() for k, v in scorer.head.state_dict().items()}, os.path.join(path, HEAD_FILE))
    meta = {
        "type": "model",
        "format": "cross-encoder",
        "package_hint": "pyterrier-tite",
        "reranker": reranker or ("SparseCE" if scorer.is_sparse else "MonoCE"),
        "backbone": "sparse" if scorer.is_sparse else "bert",
        "head": scorer.head_name,
        "token_dim": scorer.token_dim,
        **(lengths or {}),
    }
    with open(os.path.join(path, META_FILE), "w") as f:
        json.dump(meta, f, indent=1)


# ------------------------------------------------------------------------------------------------ building scorers
def sparse_overrides(path_or_model, w, symmetric: bool | None, flags: dict[str, bool]) -> dict:
    """Config overrides for a sparse backbone: a plain BERT gets the released pattern unless told otherwise."""
    overrides: dict = {}
    if isinstance(path_or_model, (str, os.PathLike)) and not is_sparse_checkpoint(path_or_model):
        overrides.update(RELEASED_PATTERN)
    if isinstance(path_or_model, nn.Module) and not isinstance(path_or_model, SparseCrossEncoder):
        overrides.update(RELEASED_PATTERN)
    if w != KEEP:
        if w is not None and (not isinstance(w, int) or w < 0):
            raise ValueError(f"w must be None (full attention) or an int >= 0, got {w!r}")
        overrides["attention_window_size"] = w
    if symmetric is not None:
        overrides.update(query_cls_attention=symmetric, query_doc_attention=symmetric)
    unknown = set(flags) - set(FLAGS)
    if unknown:
        raise TypeError(f"unknown attention flags {sorted(unknown)}; expected some of {FLAGS}")
    overrides.update(flags)
    return overrides


def sparse_backbone(
    path_or_model, w=KEEP, symmetric: bool | None = None, ids: dict[str, int] | None = None, **flags: bool
) -> SparseCrossEncoder:
    """A :class:`SparseCrossEncoder` from a reference checkpoint (folder or hub id, loaded exactly), any plain BERT
    (folder or module; new score head) or a model. ``ids``: special token ids for a config that lacks them (the
    tokenizer's, as in the reference)."""
    if isinstance(path_or_model, (str, os.PathLike)):
        path_or_model = local_checkpoint(path_or_model)
    overrides = sparse_overrides(path_or_model, w, symmetric, flags)
    if isinstance(path_or_model, SparseCrossEncoder) and not overrides:
        return path_or_model
    if isinstance(path_or_model, str):
        return load_sparse_cross_encoder(path_or_model, ids, **overrides)
    return SparseCrossEncoder.from_bert(path_or_model, **overrides)


def bert_backbone(path_or_model) -> nn.Module:
    """A one-logit BERT / ELECTRA ``*ForSequenceClassification`` (folder, hub id or module); an encoder without a
    score head (plain BERT, MiniLM, ELECTRA discriminator) gets a new one, reported."""
    if isinstance(path_or_model, (str, os.PathLike)):
        path_or_model = local_checkpoint(path_or_model)
    return sequence_classifier(path_or_model)


def load_head(scorer: CrossEncoderScorer, path) -> bool:
    """Loads ``score_head.safetensors`` exactly when ``pt_meta.json`` says the folder has this head (a missing
    file is then an error); False when the head starts fresh."""
    from safetensors.torch import load_file

    if scorer.head is None or read_meta(path).get("head") != scorer.head_name:
        return False
    file = os.path.join(str(path), HEAD_FILE)
    if not os.path.isfile(file):
        raise CheckpointError(f"{path}: pt_meta.json names the {scorer.head_name!r} head but {HEAD_FILE} is missing")
    load_exactly(scorer.head, load_file(file), file)
    return True


def _local(model):
    """Folders and hub ids as a local folder path (str); modules unchanged."""
    return local_checkpoint(model) if isinstance(model, (str, os.PathLike)) else model


def _tokenizer(model, tokenizer):
    if tokenizer is not None:
        return tokenizer
    if not isinstance(model, (str, os.PathLike)):
        raise ValueError("pass tokenizer= when the model is given as a module")
    return folder_tokenizer(str(model))


def _build(model, backbone_fn, head: str | None, token_dim: int | None) -> CrossEncoderScorer:
    """A scorer from a folder (its saved head when it has one) or a module / scorer; a head not loaded from a
    checkpoint is reported as fresh."""
    if isinstance(model, CrossEncoderScorer):
        if head is not None and head != model.head_name:
            scorer = CrossEncoderScorer(backbone_fn(model.backbone), head, token_dim or model.token_dim)
            _note_head(scorer)
            return scorer
        return _rebackbone(model, backbone_fn)
    meta = read_meta(model) if isinstance(model, (str, os.PathLike)) else {}
    head = head or meta.get("head", "cls")
    token_dim = token_dim or meta.get("token_dim", 32)
    scorer = CrossEncoderScorer(backbone_fn(model), head, token_dim)
    if not (isinstance(model, (str, os.PathLike)) and load_head(scorer, model)):
        _note_head(scorer)
    return scorer


def _note_head(scorer: CrossEncoderScorer) -> None:
    if scorer.head is not None:
        note_fresh(f"{scorer.head_name!r} score head")


def _rebackbone(scorer: CrossEncoderScorer, backbone_fn) -> CrossEncoderScorer:
    """The same head on the backbone ``backbone_fn`` returns (a new one when window / flags change)."""
    backbone = backbone_fn(scorer.backbone)
    if backbone is scorer.backbone:
        return scorer
    new = CrossEncoderScorer(backbone, scorer.head_name, scorer.token_dim)
    if scorer.head is not None:
        new.head.load_state_dict(scorer.head.state_dict())
    return new


# ------------------------------------------------------------------------------------------------ the three classes
class SparseCE(CrossEncoderReranker):
    """Sparse cross-encoder reranker (ECIR'24).

    ``model``: a folder or hub id (reference checkpoint such as ``webis/sparse-cross-encoder-4-4096``, a folder
    saved by ``save_pretrained``, or any plain BERT such as MiniLM), a :class:`SparseCrossEncoder`, a BERT module or a
    :class:`CrossEncoderScorer`. ``w``: doc-to-doc window (``None`` = full attention; default: the checkpoint's, and
    for a plain BERT the released 4). ``symmetric``: True lets the query attend to [CLS] and the doc (encoded per
    pair), False keeps it to itself (encoded once per query; the released pattern); single flags as keywords
    (``doc_query_attention=False``). ``head``: "cls" (pooler + linear, reference), "mean" or "celi".
    ``query_max_length`` / ``doc_max_length`` (word pieces): default as stored in the checkpoint (module docstring).
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
        **flags: bool,
    ):
        def backbone(tok):
            return lambda m: sparse_backbone(m, w, symmetric, special_ids(tok), **flags)

        self._setup(
            model, backbone, head, token_dim, tokenizer, query_max_length, doc_max_length,
            batch_size=batch_size, text_field=text_field, device=device, verbose=verbose,
        )  # fmt: skip


class MonoCE(CrossEncoderReranker):
    """Standard (full attention) cross-encoder over ``[CLS] q [SEP] d [SEP]``: monoBERT / monoELECTRA with the "cls"
    head (the backbone's own ``*ForSequenceClassification`` head; ``cross-encoder/ms-marco-MiniLM-L-6-v2`` loads
    unchanged), or "mean" / "celi" heads on its last layer. Backbones of BERT or ELECTRA type."""

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
    ):
        if isinstance(model, SparseCrossEncoder) or (isinstance(model, CrossEncoderScorer) and model.is_sparse):
            raise ValueError("MonoCE needs a standard BERT / ELECTRA backbone; use SparseCE for a sparse cross-encoder")
        self._setup(
            model, lambda tok: bert_backbone, head, token_dim, tokenizer, query_max_length, doc_max_length,
            batch_size=batch_size, text_field=text_field, device=device, verbose=verbose,
        )  # fmt: skip


class CELI(CrossEncoderReranker):
    """CELI: [CLS] score + late interaction over projected token vectors (``token_dim`` = D_tok), on a standard
    BERT / ELECTRA cross-encoder (``sparse=False``) or a sparse one (``sparse=True`` with ``w`` / ``symmetric`` /
    flags as in :class:`SparseCE`)."""

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
        **flags: bool,
    ):
        model = _local(model)
        if sparse is None:
            sparse = _is_sparse(model) or w != KEEP or symmetric is not None or bool(flags)

        def backbone(tok):
            if not sparse:
                return bert_backbone
            return lambda m: sparse_backbone(m, w, symmetric, special_ids(tok), **flags)

        self._setup(
            model, backbone, "celi", token_dim, tokenizer, query_max_length, doc_max_length,
            batch_size=batch_size, text_field=text_field, device=device, verbose=verbose,
        )  # fmt: skip


def _is_sparse(model) -> bool:
    if isinstance(model, CrossEncoderScorer):
        return model.is_sparse
    if isinstance(model, SparseCrossEncoder):
        return True
    if isinstance(model, (str, os.PathLike)):
        return read_meta(model).get("backbone") == "sparse" or is_sparse_checkpoint(model)
    return False
