"""SPLADE fine-tuning: in-batch contrastive loss (+ MarginMSE with teacher scores) + FLOPS on queries and documents,
each with a quadratic warm-up of its weight, through the shared training loop."""

from __future__ import annotations

from collections.abc import Sequence

from pyterrier_tite.pt.splade import Splade
from pyterrier_tite.training.loop import Trainer, TrainingArguments
from pyterrier_tite.training.losses import SpladeLoss
from pyterrier_tite.training.splade_data import ContrastiveBatches, Example


class SpladeTrainingLoss:
    """``loss_fn`` for the Trainer over a :class:`Splade` (its encoder is the trained module)."""

    def __init__(self, splade: Splade, loss: SpladeLoss):
        self.splade = splade
        self.loss = loss

    def __call__(self, model, batch: dict, step: int):
        queries = self.splade.encode_torch(batch["queries"], self.splade.query_max_length, role="query")
        docs = self.splade.encode_torch(batch["docs"], self.splade.doc_max_length, role="doc")
        teacher = batch.get("teacher")
        terms = self.loss(queries, docs, step, None if teacher is None else teacher.to(queries.device))
        parts = {k: v.item() for k, v in terms.items() if k != "loss"}
        parts["query_terms"] = (queries > 0).sum(dim=1).float().mean().item()
        parts["doc_terms"] = (docs > 0).sum(dim=1).float().mean().item()
        return terms["loss"], parts


def fine_tune_splade(
    splade: Splade,
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
    """Fine-tune ``splade`` in place; the final model (MLM + tokenizer) is saved in ``args.output_dir``.

    ``flops_warmup_steps`` defaults to a third of the run. Returns the per-step log.
    """
    warmup = args.max_steps // 3 if flops_warmup_steps is None else flops_warmup_steps
    loss = SpladeTrainingLoss(splade, SpladeLoss(lambda_q, lambda_d, warmup, in_batch=in_batch))
    batches = ContrastiveBatches(examples, batch_size, num_negatives, seed=args.seed)
    trainer = Trainer(splade.encoder, batches, loss, lambda _model, path: splade.save_pretrained(path), args)
    return trainer.train(resume=resume)
