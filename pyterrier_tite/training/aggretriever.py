"""Aggretriever fine-tuning: NLL of the full score plus the two auxiliary NLLs of its parts (agg* alone, [CLS]
alone, each weighted 0.5 as in the paper), through the shared training loop."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pyterrier_tite.models.aggretriever.modeling import AggretrieverTextEncoder
from pyterrier_tite.training.biencoder import saver, text_encoder_of
from pyterrier_tite.training.loop import Trainer, TrainingArguments
from pyterrier_tite.training.losses import aggretriever_loss
from pyterrier_tite.training.splade_data import ContrastiveBatches, Example


class AggretrieverTrainingLoss:
    """``loss_fn`` for the Trainer over an :class:`AggretrieverTextEncoder`."""

    def __init__(self, model, cls_weight: float = 0.5, agg_weight: float = 0.5, in_batch: bool = True):
        self.encoder = text_encoder_of(model, AggretrieverTextEncoder)
        self.cls_weight = cls_weight
        self.agg_weight = agg_weight
        self.in_batch = in_batch

    def __call__(self, module, batch: dict, step: int):
        queries = self.encoder.parts(batch["queries"], "query")
        docs = self.encoder.parts(batch["docs"], "doc")
        terms = aggretriever_loss(
            queries.cls, queries.agg, docs.cls, docs.agg, self.cls_weight, self.agg_weight, self.in_batch
        )
        return terms["loss"], {k: v.item() for k, v in terms.items() if k != "loss"}


def fine_tune_aggretriever(
    model,
    examples: Sequence[Example],
    args: TrainingArguments,
    batch_size: int = 16,
    num_negatives: int = 1,
    cls_weight: float = 0.5,
    agg_weight: float = 0.5,
    in_batch: bool = True,
    resume: bool = True,
    save: Callable[[str], None] | None = None,
) -> list[dict[str, float]]:
    """Fine-tune ``model`` (an ``AggretrieverTextEncoder`` or a bi-encoder holding one) in place and save it to
    ``args.output_dir`` with ``save`` (default: ``save_pretrained``)."""
    encoder, save = text_encoder_of(model, AggretrieverTextEncoder), saver(model, save)
    if getattr(model, "fresh_weights", None):
        model.fresh_weights = None  # the new heads are being trained: the card of a save no longer warns
    loss = AggretrieverTrainingLoss(encoder, cls_weight, agg_weight, in_batch)
    batches = ContrastiveBatches(examples, batch_size, num_negatives, seed=args.seed)
    return Trainer(encoder.model, batches, loss, lambda _m, path: save(path), args).train(resume=resume)
