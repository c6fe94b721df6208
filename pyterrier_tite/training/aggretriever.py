"""Aggretriever fine-tuning: NLL of the full score plus the two auxiliary NLLs of its parts (agg* alone, [CLS]
alone, each weighted 0.5 as in the paper), through the shared training loop."""

from __future__ import annotations

from collections.abc import Sequence

from pyterrier_tite.pt.aggretriever import Aggretriever
from pyterrier_tite.training.loop import Trainer, TrainingArguments
from pyterrier_tite.training.losses import aggretriever_loss
from pyterrier_tite.training.splade_data import ContrastiveBatches, Example

_MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


class AggretrieverTrainingLoss:
    """``loss_fn`` for the Trainer over an :class:`Aggretriever` (its encoder is the trained module)."""

    def __init__(self, model: Aggretriever, cls_weight: float = 0.5, agg_weight: float = 0.5, in_batch: bool = True):
        self.model = model
        self.cls_weight = cls_weight
        self.agg_weight = agg_weight
        self.in_batch = in_batch

    def _encode(self, texts: list[str], max_length: int):
        inputs = self.model.tokenizer(texts, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
        return self.model.encoder(**{k: v.to(self.model.device) for k, v in inputs.items() if k in _MODEL_INPUTS})

    def __call__(self, encoder, batch: dict, step: int):
        queries = self._encode(batch["queries"], self.model.query_max_length)
        docs = self._encode(batch["docs"], self.model.doc_max_length)
        terms = aggretriever_loss(
            queries.cls, queries.agg, docs.cls, docs.agg, self.cls_weight, self.agg_weight, self.in_batch
        )
        return terms["loss"], {k: v.item() for k, v in terms.items() if k != "loss"}


def fine_tune_aggretriever(
    model: Aggretriever,
    examples: Sequence[Example],
    args: TrainingArguments,
    batch_size: int = 16,
    num_negatives: int = 1,
    cls_weight: float = 0.5,
    agg_weight: float = 0.5,
    in_batch: bool = True,
    resume: bool = True,
) -> list[dict[str, float]]:
    """Fine-tune ``model`` in place; the final model (MLM, heads, tokenizer) is saved in ``args.output_dir``."""
    loss = AggretrieverTrainingLoss(model, cls_weight, agg_weight, in_batch)
    batches = ContrastiveBatches(examples, batch_size, num_negatives, seed=args.seed)
    trainer = Trainer(model.encoder, batches, loss, lambda _m, path: model.save_pretrained(path), args)
    return trainer.train(resume=resume)
