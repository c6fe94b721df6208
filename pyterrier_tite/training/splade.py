"""SPLADE fine-tuning: in-batch contrastive loss (+ MarginMSE with teacher scores) + FLOPS on queries and documents,
each with a quadratic warm-up of its weight, through the shared training loop."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from torch import nn

from pyterrier_tite.models.splade.modeling import SpladeEncoder, SpladePair
from pyterrier_tite.models.splade.tokenization import SpladeInputs
from pyterrier_tite.training.loop import Trainer, TrainingArguments
from pyterrier_tite.training.losses import SpladeLoss
from pyterrier_tite.training.splade_data import ContrastiveBatches, Example


class TrainableSplade(Protocol):
    """What fine-tuning needs of a SPLADE model (``pyterrier_tite.Splade`` is one)."""

    encoder: SpladeEncoder | SpladePair
    inputs: SpladeInputs

    def save_pretrained(self, path: str) -> None: ...


def fine_tune_splade(
    splade: TrainableSplade,
    examples: Sequence[Example],
    args: TrainingArguments,
    batch_size: int = 16,
    num_negatives: int = 1,
    lambda_q: float = 3e-4,
    lambda_d: float = 1e-4,
    flops_warmup_steps: int | None = None,
    in_batch: bool = True,
    resume: bool = True,
) -> list[dict[str, float]]:
    """Fine-tune ``splade.encoder`` in place, save it to ``args.output_dir`` and return the per-step log;
    ``flops_warmup_steps`` defaults to a third of the run."""
    warmup = args.max_steps // 3 if flops_warmup_steps is None else flops_warmup_steps
    loss, inputs = SpladeLoss(lambda_q, lambda_d, warmup, in_batch=in_batch), splade.inputs

    def loss_fn(model: nn.Module, batch: dict, step: int):  # over one MLM or a query / doc pair
        device = next(model.parameters()).device
        queries = model.side("query")(**inputs(batch["queries"], "query", device=device))
        docs = model.side("doc")(**inputs(batch["docs"], "doc", device=device))
        teacher = batch.get("teacher")
        terms = loss(queries, docs, step, None if teacher is None else teacher.to(device))
        parts = {k: v.item() for k, v in terms.items() if k != "loss"}
        parts["query_terms"] = (queries > 0).sum(dim=1).float().mean().item()
        parts["doc_terms"] = (docs > 0).sum(dim=1).float().mean().item()
        return terms["loss"], parts

    batches = ContrastiveBatches(examples, batch_size, num_negatives, seed=args.seed)
    trainer = Trainer(splade.encoder, batches, loss_fn, lambda _model, path: splade.save_pretrained(path), args)
    return trainer.train(resume=resume)
