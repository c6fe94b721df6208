"""Losses and regularisers of the retrievers. A batch holds ``B`` queries with ``1 + k`` documents each, the positive
first, flattened query-major into ``[B * (1 + k), ...]``; scores are raw dot products. Everything computes in float32
whatever the forward pass ran in: bf16 sums of many small terms lose what FLOPS and the softmax depend on."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from pyterrier_tite.devices import in_float32


def full_precision(fn):
    """Run ``fn`` with autocast off and its floating-point tensor arguments in float32."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return in_float32(fn, *args, **kwargs)

    return wrapper


@full_precision
def flops(reps: torch.Tensor) -> torch.Tensor:
    """FLOPS regulariser ``sum_j (mean_i |w_ij|)^2`` (Paria et al., 2020): penalises terms active in many texts."""
    if reps.shape[0] == 0:
        return reps.new_zeros((), dtype=torch.float32)
    return reps.abs().mean(dim=0).pow(2).sum()


@dataclass
class QuadraticWarmup:
    """``lambda_t = lambda * min(1, (t / T)^2)``: regularisation that grows slowly while the ranking loss settles."""

    weight: float
    warmup_steps: int

    def __call__(self, step: int) -> float:
        if self.warmup_steps <= 0:
            return self.weight
        return self.weight * min(1.0, (step / self.warmup_steps) ** 2)


@full_precision
def group_scores(query_reps: torch.Tensor, doc_reps: torch.Tensor) -> torch.Tensor:
    """Each query against its own ``1 + k`` documents: ``[B, D]``, ``[B * (1 + k), D]`` -> ``[B, 1 + k]``."""
    batch = query_reps.shape[0]
    docs = doc_reps.view(batch, -1, doc_reps.shape[-1])
    return torch.einsum("bd,bnd->bn", query_reps, docs)


@full_precision
def contrastive_loss(
    query_reps: torch.Tensor, doc_reps: torch.Tensor, in_batch: bool = True, temperature: float = 1.0
) -> torch.Tensor:
    """InfoNCE of the positive among the query's documents and (``in_batch``) all other queries' documents."""
    batch = query_reps.shape[0]
    if batch == 0:
        return query_reps.new_zeros((), dtype=torch.float32)
    group = doc_reps.shape[0] // batch
    if group * batch != doc_reps.shape[0] or group < 1:
        raise ValueError(f"{doc_reps.shape[0]} documents for {batch} queries: expected a multiple")
    if in_batch:
        scores = query_reps @ doc_reps.T  # [B, B * (1 + k)]
        targets = torch.arange(batch, device=scores.device) * group
    else:
        scores = group_scores(query_reps, doc_reps)
        targets = torch.zeros(batch, dtype=torch.long, device=scores.device)
    return F.cross_entropy(scores / temperature, targets)


@full_precision
def margin_mse(
    pos_scores: torch.Tensor, neg_scores: torch.Tensor, teacher_pos: torch.Tensor, teacher_neg: torch.Tensor
) -> torch.Tensor:
    """MarginMSE (Hofstätter et al.) of the ``pos - neg`` margins; ``neg_scores`` ``[B]`` or ``[B, k]``."""
    if pos_scores.numel() == 0:
        return pos_scores.new_zeros((), dtype=torch.float32)
    if neg_scores.dim() == 2:
        pos_scores, teacher_pos = pos_scores.unsqueeze(1), teacher_pos.unsqueeze(1)
    return F.mse_loss(pos_scores - neg_scores, (teacher_pos - teacher_neg).to(pos_scores.dtype))


def margin_mse_loss(scores: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    """:func:`margin_mse` of every negative of a group ``[B, 1 + k]`` (positive first) against its positive."""
    return margin_mse(scores[:, 0], scores[:, 1:], teacher[:, 0], teacher[:, 1:])


class SpladeLoss(torch.nn.Module):
    """Contrastive loss (+ MarginMSE with teacher scores) + FLOPS on queries and documents, each weight warmed up
    quadratically; the defaults are a common MS MARCO start, to tune per collection and sparsity."""

    def __init__(
        self,
        lambda_q: float = 3e-4,
        lambda_d: float = 1e-4,
        warmup_steps: int = 50_000,
        in_batch: bool = True,
        margin_mse_weight: float = 1.0,
    ):
        super().__init__()
        self.lambda_q = QuadraticWarmup(lambda_q, warmup_steps)
        self.lambda_d = QuadraticWarmup(lambda_d, warmup_steps)
        self.in_batch = in_batch
        self.margin_mse_weight = margin_mse_weight

    @full_precision
    def forward(
        self, query_reps: torch.Tensor, doc_reps: torch.Tensor, step: int, teacher_scores: torch.Tensor | None = None
    ) -> dict[str, torch.Tensor]:
        """The total (``loss``) and each term, for logging."""
        terms = {"contrastive": contrastive_loss(query_reps, doc_reps, in_batch=self.in_batch)}
        if teacher_scores is not None:
            scores = group_scores(query_reps, doc_reps)
            terms["margin_mse"] = self.margin_mse_weight * margin_mse_loss(scores, teacher_scores)
        terms["flops_q"] = self.lambda_q(step) * flops(query_reps)
        terms["flops_d"] = self.lambda_d(step) * flops(doc_reps)
        terms["loss"] = sum(terms.values())
        return terms


@full_precision
def aggretriever_loss(
    query_cls: torch.Tensor,
    query_agg: torch.Tensor,
    doc_cls: torch.Tensor,
    doc_agg: torch.Tensor,
    cls_weight: float = 0.5,
    agg_weight: float = 0.5,
    in_batch: bool = True,
) -> dict[str, torch.Tensor]:
    """Aggretriever's ``L + 0.5 L_agg + 0.5 L_[CLS]``: NLL of the full score and of each part's alone. Without an
    ``agg`` part (the CLS baseline) the plain NLL, not the [CLS] term counted 1.5 times."""
    if query_agg.shape[-1] == 0:
        nll = contrastive_loss(query_cls, doc_cls, in_batch)
        return {"nll": nll, "loss": nll}
    terms = {
        "nll": contrastive_loss(torch.cat([query_cls, query_agg], -1), torch.cat([doc_cls, doc_agg], -1), in_batch),
        "nll_agg": agg_weight * contrastive_loss(query_agg, doc_agg, in_batch),
        "nll_cls": cls_weight * contrastive_loss(query_cls, doc_cls, in_batch),
    }
    terms["loss"] = sum(terms.values())
    return terms
