"""Cross-encoder checkpoints: the folders rerankers save (backbone, ``score_head.safetensors``, ``pt_meta.json``) and
BERT / ELECTRA sequence classifiers, loaded exactly. Only an encoder without a score head or a new head may start
fresh weights, and the load then says so in one warning."""

from __future__ import annotations

import os

from torch import nn

from pyterrier_tite.models.checkpoint import (
    Checkpoint,
    CheckpointError,
    load_exactly,
    note_fresh,
    open_checkpoint,
    raise_on_mismatch,
    transformers_from_pretrained,
    write_pt_meta,
)
from pyterrier_tite.models.cross_encoder.modeling import CrossEncoderScorer
from pyterrier_tite.models.sparse_ce.configuration import FLAGS
from pyterrier_tite.models.sparse_ce.convert import KEEP, RELEASED_PATTERN, is_sparse_config, stored_lengths  # noqa: F401
from pyterrier_tite.models.sparse_ce.modeling import SparseCrossEncoder, from_bert

#: model types whose ``*ForSequenceClassification`` takes ``[CLS] q [SEP] d [SEP]`` with token types 0 / 1
SEQUENCE_CLASSIFIER_TYPES = ("bert", "electra")


def sequence_classifier(path_or_model) -> nn.Module:
    """A one-logit BERT / ELECTRA ``*ForSequenceClassification`` from a module (kept as is), a folder or a hub id."""
    from transformers import PreTrainedModel

    name = type(path_or_model).__name__
    if isinstance(path_or_model, PreTrainedModel) and name.endswith("ForSequenceClassification"):
        check_type(path_or_model.config.model_type, name)
        return path_or_model
    if isinstance(path_or_model, nn.Module):
        raise TypeError(f"expected a BERT / ELECTRA *ForSequenceClassification or a folder, got {name}")
    return load_sequence_classifier(open_checkpoint(path_or_model))


def check_type(model_type: str | None, source: str) -> None:
    """Other encoders differ in token types and special tokens; refuse them instead of scoring garbage."""
    if model_type not in SEQUENCE_CLASSIFIER_TYPES:
        raise ValueError(
            f"not supported: model_type {model_type!r} ({source}) as a cross-encoder backbone; "
            f"expected one of {SEQUENCE_CLASSIFIER_TYPES}"
        )


def load_sequence_classifier(folder: str | os.PathLike | Checkpoint) -> nn.Module:
    """The folder's sequence classifier, loaded exactly; without any ``classifier.*`` tensor the classifier (and a
    missing BERT pooler) start fresh and pre-training heads are ignored, both reported."""
    from transformers import AutoModelForSequenceClassification

    checkpoint = open_checkpoint(folder)
    folder = checkpoint.folder
    check_type(checkpoint.config.get("model_type"), folder)
    model_class = AutoModelForSequenceClassification
    model, info, wrong_dtype = transformers_from_pretrained(model_class, checkpoint, num_labels=1)
    missing, unexpected = sorted(info.get("missing_keys", ())), sorted(info.get("unexpected_keys", ()))
    base = model.base_model_prefix + "."
    new_head = all(k in missing for k in model.state_dict() if k.startswith("classifier."))
    if new_head:
        fresh = [k for k in missing if k.startswith(("classifier.", base + "pooler."))]
        ignored = [k for k in unexpected if not k.startswith(base)]
        missing = [k for k in missing if k not in fresh]
        unexpected = [k for k in unexpected if k not in ignored]
        note_fresh(f"score head {', '.join(fresh)}" + (f" (ignored: {', '.join(ignored)})" if ignored else ""))
    raise_on_mismatch(folder, missing, unexpected, info.get("mismatched_keys", ()), wrong_dtype)
    return model


HEAD_FILE = "score_head.safetensors"


def save_scorer(
    scorer: CrossEncoderScorer,
    tokenizer,
    path: str | os.PathLike,
    reranker: str | None = None,
    lengths: dict[str, int | None] | None = None,
) -> None:
    """A reranker folder: the backbone and tokenizer in Hugging Face layout, a head other than "cls" in
    ``score_head.safetensors``, and ``pt_meta.json`` with the reranker class and ``lengths`` (the input caps)."""
    from safetensors.torch import save_file

    path = os.fspath(path)
    os.makedirs(path, exist_ok=True)
    scorer.backbone.save_pretrained(path)
    if tokenizer is not None:
        tokenizer.save_pretrained(path)
    if scorer.head is not None:
        save_file({k: v.contiguous() for k, v in scorer.head.state_dict().items()}, os.path.join(path, HEAD_FILE))
    settings = {
        "reranker": reranker or ("SparseCE" if scorer.is_sparse else "MonoCE"),
        "backbone": "sparse" if scorer.is_sparse else "bert",
        "head": scorer.head_name,
        "token_dim": scorer.token_dim,
        **(lengths or {}),
    }
    write_pt_meta(path, "cross-encoder", settings)


def load_head(scorer: CrossEncoderScorer, checkpoint: Checkpoint) -> bool:
    """Loads ``score_head.safetensors`` exactly where ``pt_meta.json`` names this head; False: the head is fresh."""
    from safetensors.torch import load_file

    path = checkpoint.folder
    if scorer.head is None or checkpoint.meta.get("head") != scorer.head_name:
        return False
    file = os.path.join(path, HEAD_FILE)
    if not os.path.isfile(file):
        raise CheckpointError(f"{path}: pt_meta.json names the {scorer.head_name!r} head but {HEAD_FILE} is missing")
    load_exactly(scorer.head, load_file(file), file)
    return True


def load_scorer(model, backbone_fn, head: str | None = None, token_dim: int | None = None) -> CrossEncoderScorer:
    """A scorer from a folder (with its saved head) or a module / scorer; ``backbone_fn`` turns either into the
    backbone. A head not loaded from a checkpoint is reported as fresh."""
    if isinstance(model, CrossEncoderScorer):
        if head is not None and head != model.head_name:
            return _fresh_head(CrossEncoderScorer(backbone_fn(model.backbone), head, token_dim or model.token_dim))
        backbone = backbone_fn(model.backbone)
        if backbone is model.backbone:
            return model
        scorer = CrossEncoderScorer(backbone, model.head_name, model.token_dim, source=model.source)
        if model.head is not None:
            scorer.head.load_state_dict(model.head.state_dict())
        return scorer
    if isinstance(model, nn.Module):
        return _fresh_head(CrossEncoderScorer(backbone_fn(model), head or "cls", token_dim or 32))
    checkpoint = open_checkpoint(model)
    return checkpoint_scorer(checkpoint, backbone_fn(checkpoint), head, token_dim)


def checkpoint_scorer(
    checkpoint: Checkpoint, backbone: nn.Module, head: str | None = None, token_dim: int | None = None
) -> CrossEncoderScorer:
    """The scorer of a checkpoint's backbone with its saved head and token dim unless given (weights loaded where the
    folder has them, else reported fresh)."""
    meta = checkpoint.meta
    head, token_dim = head or meta.get("head", "cls"), token_dim or meta.get("token_dim", 32)
    scorer = CrossEncoderScorer(backbone, head, token_dim, source=os.path.realpath(checkpoint.folder))
    return scorer if load_head(scorer, checkpoint) else _fresh_head(scorer)


def _fresh_head(scorer: CrossEncoderScorer) -> CrossEncoderScorer:
    if scorer.head is not None:
        note_fresh(f"{scorer.head_name!r} score head")
    return scorer


def sparse_overrides(path_or_model, w, symmetric: bool | None, flags: dict[str, bool]) -> dict:
    """Config overrides for a sparse backbone: a plain BERT gets the released pattern, then ``w`` (``KEEP``: the
    checkpoint's, None: full attention), ``symmetric`` (the query attends to [CLS] and the doc) and single flags."""
    overrides: dict = {}
    if not is_sparse_model(path_or_model):
        overrides.update(RELEASED_PATTERN)
    if w != KEEP:
        overrides["attention_window_size"] = w  # checked by SparseCrossEncoderConfig, the one place
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
    """A :class:`SparseCrossEncoder` from a released checkpoint, a plain BERT (new score head) or a model, with
    :func:`sparse_overrides`' settings. ``ids``: special ids for a config that lacks them (the tokenizer's)."""
    if not isinstance(path_or_model, nn.Module):
        path_or_model = open_checkpoint(path_or_model)
    overrides = sparse_overrides(path_or_model, w, symmetric, flags)
    if isinstance(path_or_model, SparseCrossEncoder) and not overrides:
        return path_or_model
    return from_bert(path_or_model, ids, **overrides)


def is_sparse_model(model) -> bool:
    """A scorer or model of a sparse cross-encoder, or a folder of one."""
    if isinstance(model, CrossEncoderScorer):
        return model.is_sparse
    if isinstance(model, nn.Module):
        return isinstance(model, SparseCrossEncoder)
    checkpoint = open_checkpoint(model)
    return checkpoint.meta.get("backbone") == "sparse" or is_sparse_config(checkpoint.config)
