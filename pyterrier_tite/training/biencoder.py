"""Fine-tuning of single-vector bi-encoders (TITE, CLS / mean BERT; TITE paper 3.4): ``L = L_M-MSE + L_KL +
L_InfoNCE`` over samples ``(q, D = (d_1..d_n), Y = (y_1..y_n))``, scores ``r = q . d``; without teacher scores (``Y``:
1 / 0 labels) InfoNCE alone. The paper takes ``d+ = argmax Y``; ``positive_first=True`` keeps the judged positive
(first doc) as ``d+`` even where the teacher disagrees. Only the ``TextEncoder``'s ``.model`` is trained."""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass

import pandas as pd
import torch
import torch.nn.functional as F

from pyterrier_tite.models.bert_biencoder.modeling import TextEncoder
from pyterrier_tite.training.loop import Trainer, TrainingArguments, epoch_rng


@dataclass
class Sample:
    """One query with its documents, the judged positive first; ``scores`` are teacher scores (or 1/0 labels)."""

    query: str
    docs: list[str]
    scores: list[float]


def build_samples(
    topics: pd.DataFrame,
    qrels: pd.DataFrame,
    run: pd.DataFrame,
    doc_text: Callable[[str], str | None],
    num_negatives: int = 7,
    teacher=None,
    min_label: int = 1,
    seed: int = 42,
) -> list[Sample]:
    """One sample per judged (query, positive) pair with the ``num_negatives`` best-ranked non-relevant docs of
    ``run``, scored by ``teacher`` (``qid, query, docno, text`` -> ``score``) or 1 / 0; pairs without texts skipped."""
    rng = random.Random(seed)
    topics = topics.assign(qid=topics["qid"].astype(str))
    qrels = qrels.assign(qid=qrels["qid"].astype(str), docno=qrels["docno"].astype(str))
    run = run.assign(qid=run["qid"].astype(str), docno=run["docno"].astype(str)).sort_values(["qid", "rank"])
    positives = qrels[qrels["label"] >= min_label].groupby("qid")["docno"].apply(list).to_dict()
    judged_relevant = {q: set(d) for q, d in positives.items()}
    candidates = run.groupby("qid")["docno"].apply(list).to_dict()
    rows = []
    for qid, query in zip(topics["qid"], topics["query"], strict=True):
        negatives = [d for d in candidates.get(qid, []) if d not in judged_relevant.get(qid, set())]
        negatives = [d for d in negatives if doc_text(d)][:num_negatives]
        if len(negatives) < num_negatives:
            continue
        for pos in positives.get(qid, []):
            if doc_text(pos):
                rows.append((qid, query, [pos, *negatives]))
    rng.shuffle(rows)
    if teacher is None:
        return [Sample(q, [doc_text(d) for d in docs], [1.0] + [0.0] * num_negatives) for _, q, docs in rows]
    frame = pd.DataFrame(
        [
            {"qid": f"{i}", "query": q, "docno": d, "text": doc_text(d), "slot": j}
            for i, (_, q, docs) in enumerate(rows)
            for j, d in enumerate(docs)
        ]
    )
    scored = teacher(frame).sort_values(["qid", "slot"])
    by_sample = scored.groupby("qid")["score"].apply(list).to_dict()
    return [
        Sample(q, [doc_text(d) for d in docs], [float(s) for s in by_sample[f"{i}"]])
        for i, (_, q, docs) in enumerate(rows)
    ]


def pairwise_margin_mse(student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    """``1 / C(n, 2) * sum_{i<j} ((y_i - y_j) - (r_i - r_j))^2``, averaged over samples (``[B, n]`` inputs)."""
    n = student.shape[1]
    if student.shape[0] == 0 or n < 2:
        return student.new_zeros(())
    i, j = torch.triu_indices(n, n, offset=1, device=student.device)
    return F.mse_loss(student[:, i] - student[:, j], teacher[:, i] - teacher[:, j])


def kl_distillation(student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    """``sum_i softmax(y)_i log(softmax(y)_i / softmax(r)_i)``, averaged over samples."""
    if student.shape[0] == 0:
        return student.new_zeros(())
    return F.kl_div(F.log_softmax(student, -1), F.log_softmax(teacher, -1), log_target=True, reduction="batchmean")


def info_nce(
    query_reps: torch.Tensor,
    doc_reps: torch.Tensor,
    teacher: torch.Tensor,
    theta: float = 0.0,
    in_batch: bool = True,
    positive: torch.Tensor | None = None,
) -> torch.Tensor:
    """``-log exp(r+) / sum_{d in {d+} u N} exp(r_d)``, ``N``: the other samples' docs and own docs whose teacher
    score is more than ``theta`` below d+'s; ``positive`` ``[B]``: d+ (default: the teacher's argmax)."""
    batch, n = teacher.shape
    if batch == 0:
        return query_reps.new_zeros(())
    scores = query_reps @ doc_reps.T  # [B, B * n]
    positive = teacher.argmax(1) if positive is None else positive.to(scores.device)
    rows = torch.arange(batch, device=scores.device)
    own = torch.arange(batch * n, device=scores.device)[None, :] // n == rows[:, None]  # [B, B * n]: its own docs
    hard = (teacher.gather(1, positive[:, None]) - teacher) > theta  # [B, n]
    allowed = ~own if in_batch else torch.zeros_like(own)
    allowed[own] = hard.reshape(-1)
    target = rows * n + positive
    allowed[rows, target] = True
    return F.cross_entropy(scores.masked_fill(~allowed, float("-inf")), target)


@dataclass
class LossWeights:
    margin_mse: float = 1.0
    kl: float = 1.0
    info_nce: float = 1.0
    theta: float = 0.0


def biencoder_loss(
    query_reps: torch.Tensor,
    doc_reps: torch.Tensor,
    teacher: torch.Tensor,
    weights: LossWeights,
    distill: bool,
    positive: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The paper's sum (InfoNCE alone unless ``distill``) and each term for the log."""
    student = torch.einsum("bd,bnd->bn", query_reps, doc_reps.view(query_reps.shape[0], -1, doc_reps.shape[-1]))
    terms = {"info_nce": weights.info_nce * info_nce(query_reps, doc_reps, teacher, weights.theta, positive=positive)}
    if distill:
        terms["margin_mse"] = weights.margin_mse * pairwise_margin_mse(student, teacher)
        terms["kl"] = weights.kl * kl_distillation(student, teacher)
    total = sum(terms.values())
    return total, {k: float(v.detach()) for k, v in terms.items()}


def sample_batches(
    samples: Sequence[Sample], batch_size: int, docs_per_query: int, seed: int
) -> Callable[[int, int, int], Iterator[list[Sample]]]:
    """Seeded shuffle per epoch, a shard per rank; each sample keeps its best doc and ``docs_per_query - 1`` others."""

    def batches(epoch: int, rank: int, world_size: int) -> Iterator[list[Sample]]:
        rng = epoch_rng(seed, epoch)
        order = list(range(len(samples)))
        rng.shuffle(order)
        shard = order[rank::world_size]
        usable = len(shard) - len(shard) % batch_size if len(shard) >= batch_size else len(shard)
        for start in range(0, usable, batch_size):
            yield [_subsample(samples[i], docs_per_query, rng) for i in shard[start : start + batch_size]]

    return batches


def _subsample(sample: Sample, k: int, rng: random.Random) -> Sample:
    if len(sample.docs) <= k:
        return sample
    best = max(range(len(sample.docs)), key=sample.scores.__getitem__)
    others = rng.sample([i for i in range(len(sample.docs)) if i != best], k - 1)
    keep = [best, *others]
    return Sample(sample.query, [sample.docs[i] for i in keep], [sample.scores[i] for i in keep])


def text_encoder_of(model, kind: type[TextEncoder] = TextEncoder) -> TextEncoder:
    """The torch-side encoder to train: ``model`` itself, or the ``.text_encoder`` a bi-encoder holds."""
    encoder = model if isinstance(model, TextEncoder) else getattr(model, "text_encoder", None)
    if not isinstance(encoder, kind):
        raise TypeError(f"expected a {kind.__name__} or a bi-encoder holding one, got {type(model).__name__}")
    return encoder


def saver(model, save: Callable[[str], None] | None) -> Callable[[str], None]:
    """``save`` if given, else the bi-encoder's ``save_pretrained`` (a bare encoder cannot write a folder)."""
    if save is not None:
        return save
    if not hasattr(model, "save_pretrained"):
        raise TypeError(f"training a bare {type(model).__name__} needs save=: a callable that writes the model folder")
    return model.save_pretrained


def fine_tune(
    model,
    samples: Sequence[Sample],
    args: TrainingArguments,
    batch_size: int = 8,
    docs_per_query: int = 4,
    weights: LossWeights | None = None,
    distill: bool = True,
    resume: bool = True,
    positive_first: bool = True,
    save: Callable[[str], None] | None = None,
) -> list[dict[str, float]]:
    """Train ``model`` (a ``TextEncoder`` or a bi-encoder holding one) on ``samples``, save it with
    ``save(args.output_dir)`` (default: ``save_pretrained``) and return the per-step log."""
    encoder, save = text_encoder_of(model), saver(model, save)
    weights = weights or LossWeights()
    n = min(len(s.docs) for s in samples)
    docs_per_query = min(docs_per_query, n)

    def loss_fn(module, batch: list[Sample], step: int):
        queries = encoder.encode_queries([s.query for s in batch], batch_size=len(batch))
        docs = encoder.encode_docs([d for s in batch for d in s.docs], batch_size=len(batch) * docs_per_query)
        teacher = torch.tensor([s.scores for s in batch], dtype=queries.dtype, device=queries.device)
        positive = torch.zeros(len(batch), dtype=torch.long) if positive_first else None
        return biencoder_loss(queries, docs, teacher, weights, distill, positive)

    batches = sample_batches(samples, batch_size, docs_per_query, args.seed)
    return Trainer(encoder.model, batches, loss_fn, lambda module, path: save(path), args).train(resume=resume)


def save_samples(samples: Sequence[Sample], path: str) -> None:
    with open(path, "w") as f:
        for s in samples:
            f.write(json.dumps(asdict(s)) + "\n")


def load_samples(path: str) -> list[Sample]:
    with open(path) as f:
        return [Sample(**json.loads(line)) for line in f if line.strip()]
