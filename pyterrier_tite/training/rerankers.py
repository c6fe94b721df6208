"""Fine-tuning cross-encoder rerankers (SparseCE / MonoCE / CELI) on groups of one query's ``1 + n`` candidates,
the judged positive first and ``n`` negatives sampled from the first stage's top k (localized contrastive
estimation). Losses over the scores ``[B, 1 + n]``: ``lce`` (Gao et al., 2021), ``margin_mse`` (against a teacher's
margins), ``ranknet`` (pairs whose graded labels differ). A CELI head's two terms each get the loss, as in its paper."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from pyterrier_tite.models.cross_encoder.convert import save_scorer
from pyterrier_tite.models.cross_encoder.tokenization import CrossEncoderInputs
from pyterrier_tite.models.model_card import update_card
from pyterrier_tite.store.values import checked_texts, one_query_per_qid
from pyterrier_tite.training.loop import Trainer, TrainingArguments
from pyterrier_tite.training.losses import margin_mse_loss


def lce_loss(scores: torch.Tensor) -> torch.Tensor:
    """Localized contrastive estimation: ``-log softmax(scores)[:, 0]`` averaged over groups ``[B, 1 + n]``."""
    return F.cross_entropy(scores, torch.zeros(len(scores), dtype=torch.long, device=scores.device))


def ranknet_loss(scores: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean of ``log(1 + exp(s_j - s_i))`` over pairs (i, j) of a group with ``label_i > label_j``."""
    better = labels[:, :, None] > labels[:, None, :]
    if not better.any():
        return scores.sum() * 0.0
    diff = scores[:, None, :] - scores[:, :, None]  # [b, i, j] = s_j - s_i
    return F.softplus(diff[better]).mean()


#: each loss of a group's scores ``[B, 1 + n]``, its graded labels and the teacher's scores
GROUP_LOSSES = {
    "lce": lambda scores, labels, teacher: lce_loss(scores),
    "margin_mse": lambda scores, labels, teacher: margin_mse_loss(scores, teacher),
    "ranknet": lambda scores, labels, teacher: ranknet_loss(scores, labels),
}
#: ``qid`` and ``docno`` as strings: candidates, qrels and teacher scores join whatever types they were read as
IDS_AS_STR = {"qid": str, "docno": str}


@dataclass
class QueryCandidates:
    """One training query: token ids, its candidates' token ids, graded labels and (optional) teacher scores."""

    query: list[int]
    docs: list[list[int]]
    labels: np.ndarray
    teacher: np.ndarray | None
    positives: np.ndarray
    negatives: np.ndarray


class RerankerTrainingData:
    """Groups of ``1 + negatives`` per query, resampled per epoch from a seed; positives are the candidates (only
    they have texts) with ``label >= min_label``. ``doc_max_length`` caps the documents in training only: a batch
    pads to its longest document, so long ones set the step time."""

    def __init__(
        self,
        inputs: CrossEncoderInputs,
        candidates: pd.DataFrame,
        qrels: pd.DataFrame,
        negatives: int = 7,
        queries_per_batch: int = 4,
        depth: int | None = None,
        min_label: int = 1,
        teacher: pd.DataFrame | None = None,
        seed: int = 42,
        doc_max_length: int | None = None,
    ):
        if negatives < 1 or queries_per_batch < 1:
            raise ValueError("negatives and queries_per_batch must be >= 1")
        if doc_max_length is not None:  # the tokenizer's own truncation, on a copy: the model's inputs stay uncapped
            if doc_max_length < 1:
                raise ValueError(f"doc_max_length must be >= 1 (or None for no cap), got {doc_max_length}")
            inputs = dataclasses.replace(inputs, doc_max_length=doc_max_length)
        self.negatives = negatives
        self.queries_per_batch = queries_per_batch
        self.seed = seed
        frame = candidates.astype(IDS_AS_STR)
        frame = frame.assign(  # the rules every transformer checks its input with (store/values.py)
            query=checked_texts(frame["query"], frame["qid"], "query", "qid"),
            text=checked_texts(frame["text"], frame["docno"], "text", "docno"),
        )
        one_query_per_qid(frame["qid"], frame["query"])
        if depth is not None:
            ranks = frame["rank"] if "rank" in frame else frame.groupby("qid").cumcount()
            frame = frame[ranks < depth]
        frame = frame.merge(qrels[["qid", "docno", "label"]].astype(IDS_AS_STR), on=["qid", "docno"], how="left")
        frame["label"] = frame["label"].fillna(0).astype(int).clip(lower=0)
        if teacher is not None:
            scores = teacher[["qid", "docno", "score"]].astype(IDS_AS_STR).rename(columns={"score": "teacher_score"})
            frame = frame.merge(scores, on=["qid", "docno"], how="left")
            if frame["teacher_score"].isna().any():
                raise ValueError("the teacher has no score for some candidates")
        self.queries: list[QueryCandidates] = []
        for _, group in frame.groupby("qid", sort=True):
            labels = group["label"].to_numpy()
            positives, negatives_ = np.flatnonzero(labels >= min_label), np.flatnonzero(labels < min_label)
            if len(positives) == 0 or len(negatives_) == 0:
                continue
            query = inputs.queries([str(group["query"].iloc[0])])[0]
            docs = [inputs.fit_doc(query, d) for d in inputs.docs(group["text"].astype(str).tolist())]
            scores = group["teacher_score"].to_numpy(float) if "teacher_score" in group else None
            self.queries.append(QueryCandidates(query, docs, labels, scores, positives, negatives_))
        if not self.queries:
            raise ValueError(f"no query has both a candidate with label >= {min_label} and a negative")

    def __len__(self) -> int:
        return len(self.queries)

    def __call__(self, epoch: int, rank: int = 0, world_size: int = 1):
        """The micro-batches of one epoch (every usable query once) for one process."""
        rng = np.random.default_rng([self.seed, epoch])
        order = rng.permutation(len(self.queries))[rank::world_size]
        for start in range(0, len(order), self.queries_per_batch):
            yield self._batch([self.queries[i] for i in order[start : start + self.queries_per_batch]], rng)

    def _batch(self, queries: list[QueryCandidates], rng: np.random.Generator) -> dict:
        picks = []
        for q in queries:
            negs = rng.choice(q.negatives, self.negatives, replace=len(q.negatives) < self.negatives)
            picks.append(np.concatenate([[rng.choice(q.positives)], negs]))
        teacher = None
        if all(q.teacher is not None for q in queries):
            teacher = torch.tensor(np.stack([q.teacher[p] for q, p in zip(queries, picks, strict=True)]))
        return {
            "queries": [q.query for q in queries],
            "docs": [[q.docs[i] for i in p] for q, p in zip(queries, picks, strict=True)],
            "labels": torch.tensor(np.stack([q.labels[p] for q, p in zip(queries, picks, strict=True)])),
            "teacher": teacher,
        }


def reranker_loss(loss: str):
    """``loss_fn(scorer, batch, step)`` for the Trainer: the loss of each score part (CELI: s_cls and s_late)."""
    if loss not in GROUP_LOSSES:
        raise ValueError(f"unknown loss {loss!r}; expected one of {tuple(GROUP_LOSSES)}")
    group_loss = GROUP_LOSSES[loss]

    def loss_fn(scorer, batch: dict, step: int):
        parts = scorer.score_parts(batch["queries"], batch["docs"])
        groups = len(batch["queries"])
        labels = batch["labels"].to(scorer.device)
        if batch["teacher"] is None and loss == "margin_mse":
            raise ValueError("margin_mse needs teacher scores")
        teacher = batch["teacher"].to(scorer.device) if batch["teacher"] is not None else None
        terms = {name: group_loss(scores.view(groups, -1).float(), labels, teacher) for name, scores in parts.items()}
        total = sum(terms.values())
        return total, {f"loss_{k}": v.item() for k, v in terms.items()} if len(terms) > 1 else {}

    return loss_fn


#: what the card of a trained model keeps of its start's card (not its training or evaluation)
CARRIED_TO_TRAINED = ("base_model", "license", "license_from", "settings")


def train_reranker(
    reranker,
    candidates: pd.DataFrame,
    qrels: pd.DataFrame,
    args: TrainingArguments,
    loss: str = "lce",
    negatives: int = 7,
    queries_per_batch: int = 4,
    depth: int | None = None,
    min_label: int = 1,
    teacher: pd.DataFrame | None = None,
    resume: bool = True,
    doc_max_length: int | None = None,
) -> list[dict[str, float]]:
    """Fine-tunes ``reranker.scorer`` in place, saves it to ``args.output_dir`` (loadable with ``from_pretrained``)
    and returns the per-step log; ``doc_max_length`` caps the training documents only."""
    inputs = reranker.inputs
    data = RerankerTrainingData(
        inputs, candidates, qrels, negatives, queries_per_batch, depth, min_label, teacher, args.seed, doc_max_length
    )
    kind = type(reranker).__name__
    # every save's card names the start (base model, license, settings), not its random head: it is being trained
    card_info = getattr(reranker, "card_info", None)
    origin = {k: v for k, v in (card_info() if card_info else {}).items() if k in CARRIED_TO_TRAINED}
    reranker.scorer.source = None  # its weights no longer are those of the folder it was loaded from
    reranker.fresh_weights = None

    def save_fn(scorer, path: str) -> None:
        save_scorer(scorer, inputs.tokenizer, path, reranker=kind, lengths=inputs.lengths())
        update_card(path, {**origin, "fresh_weights": False})

    return Trainer(reranker.scorer, data, reranker_loss(loss), save_fn, args).train(resume=resume)
