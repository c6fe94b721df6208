"""Masked-language-model pretraining on the target collection (Lassance et al., ECIR 2023) of a ``BertForMaskedLM``
built from a config over any tokenizer, or of a checkpoint. ``mlm``: BERT's loss (transformers' collator);
``mlm+flops`` adds the same cross-entropy over the SPLADE-activated logits ``log(1 + relu(logits))`` and FLOPS on the
max-pooled SPLADE vector with a quadratic warm-up of lambda, so the head gives sparse non-negative term weights."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from pyterrier_tite.devices import default_device
from pyterrier_tite.models.splade.modeling import splade_pool
from pyterrier_tite.models.splade.tokenization import mlm_token_ids
from pyterrier_tite.training.loop import Trainer, TrainingArguments, epoch_rng
from pyterrier_tite.training.losses import QuadraticWarmup, flops

OBJECTIVES = ("mlm", "mlm+flops")


@dataclass
class BertSize:
    """The architecture of a from-scratch BERT (the paper's 6L/12L are 768 wide; small ones fit a CPU)."""

    hidden_size: int = 256
    num_layers: int = 2
    num_heads: int = 4
    intermediate_size: int = 1024
    max_position_embeddings: int = 512


def bert_mlm(tokenizer, size: BertSize) -> nn.Module:
    """A randomly initialised ``BertForMaskedLM`` over ``tokenizer``'s vocabulary (decoder tied to the embeddings)."""
    from transformers import BertConfig, BertForMaskedLM

    config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=size.hidden_size,
        num_hidden_layers=size.num_layers,
        num_attention_heads=size.num_heads,
        intermediate_size=size.intermediate_size,
        max_position_embeddings=size.max_position_embeddings,
        pad_token_id=tokenizer.pad_token_id,
    )
    return BertForMaskedLM(config)


def pretraining_texts(
    dataset: str,
    fields: Sequence[str] | None = None,
    limit: int | None = None,
    queries_dataset: str | None = None,
    allow_evaluation_data: bool = False,
) -> list[str]:
    """A collection's document texts plus the queries of ``queries_dataset`` (the paper adds the training queries);
    evaluation data: documents are allowed (and said), queries only with ``allow_evaluation_data``."""
    from pyterrier_tite import datasets
    from pyterrier_tite.training.tokenizer import collection_texts

    if queries_dataset:
        queries_dataset = datasets.check_training_data(queries_dataset, uses="labels", allow=allow_evaluation_data)
    dataset = datasets.check_training_data(dataset, uses="documents")
    texts = [t for t in collection_texts(dataset, fields=fields, limit=limit) if t.strip()]
    if queries_dataset:
        topics = datasets.get_dataset(queries_dataset).get_topics()
        texts.extend(q for q in topics["query"].astype(str) if q.strip())
    return texts


class MlmBatches:
    """Masked batches, tokenised once, shuffled per epoch; masks are seeded by ``(seed, epoch, rank, batch)``, so a
    resumed run sees exactly the masks of the uninterrupted one."""

    def __init__(
        self, texts: Sequence[str], tokenizer, batch_size: int, max_length: int, mlm_probability=0.15, seed=42
    ):
        from transformers import DataCollatorForLanguageModeling

        self.ids = mlm_token_ids(tokenizer, texts, max_length)
        if not self.ids:
            raise ValueError("no non-empty texts to pretrain on")
        self.batch_size = batch_size
        self.seed = seed
        self.collator = DataCollatorForLanguageModeling(tokenizer, mlm_probability=mlm_probability)

    def __len__(self) -> int:
        return len(self.ids)

    def __call__(self, epoch: int, rank: int, world_size: int) -> Iterator[dict[str, torch.Tensor]]:
        order = list(range(len(self.ids)))
        epoch_rng(self.seed, epoch).shuffle(order)
        order = order[rank::world_size]
        for index, start in enumerate(range(0, len(order), self.batch_size)):
            features = [{"input_ids": self.ids[i]} for i in order[start : start + self.batch_size]]
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(hash((self.seed, epoch, rank, index)) % 2**63)
                yield dict(self.collator(features))


class MlmLoss:
    """``loss_fn`` for the Trainer: MLM, or MLM + MLM over SPLADE-activated logits + warmed-up FLOPS."""

    def __init__(self, objective: str = "mlm", flops_weight: float = 1e-3, flops_warmup_steps: int = 0):
        if objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {OBJECTIVES}, got {objective!r}")
        self.objective = objective
        self.flops_weight = QuadraticWarmup(flops_weight, flops_warmup_steps)

    def __call__(self, model: nn.Module, batch: dict[str, torch.Tensor], step: int):
        device = next(model.parameters()).device
        batch = {k: v.to(device) for k, v in batch.items()}
        output = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"])
        mlm, logits = output.loss, output.logits
        if self.objective == "mlm":
            return mlm, {"mlm": mlm.item()}
        activated = torch.log1p(torch.relu(logits))
        mlm_splade = F.cross_entropy(activated.flatten(0, 1), batch["labels"].flatten(), ignore_index=-100)
        reps = splade_pool(logits, batch["attention_mask"])
        flops_term = self.flops_weight(step) * flops(reps)
        parts = {
            "mlm": mlm.item(),
            "mlm_splade": mlm_splade.item(),
            "flops": flops_term.item(),
            "doc_terms": (reps > 0).sum(dim=1).float().mean().item(),
        }
        return mlm + mlm_splade + flops_term, parts


def save_mlm(tokenizer):
    """``save_fn`` writing a model and its tokenizer in the Hugging Face layout (an MLM's is a SPLADE checkpoint)."""

    def save(model: nn.Module, path: str) -> None:
        os.makedirs(path, exist_ok=True)
        model.save_pretrained(path)
        tokenizer.save_pretrained(path)

    return save


def pretrain_mlm(
    texts: Sequence[str],
    tokenizer,
    args: TrainingArguments,
    model: nn.Module | None = None,
    size: BertSize | None = None,
    objective: str = "mlm",
    batch_size: int = 32,
    max_length: int = 128,
    mlm_probability: float = 0.15,
    flops_weight: float = 1e-3,
    flops_warmup_steps: int = 0,
    resume: bool = True,
    device: str | torch.device | None = None,
) -> tuple[nn.Module, list[dict[str, float]]]:
    """Pretrain ``model`` (default: a fresh :func:`bert_mlm` of ``size``) on ``texts``, save it to
    ``args.output_dir`` and return it with the per-step log."""
    if model is None:
        torch.manual_seed(args.seed)
        model = bert_mlm(tokenizer, size or BertSize())
    if max_length > model.config.max_position_embeddings:
        raise ValueError(f"max_length {max_length} exceeds the model's {model.config.max_position_embeddings}")
    model.to(default_device(device))
    batches = MlmBatches(texts, tokenizer, batch_size, max_length, mlm_probability, seed=args.seed)
    loss = MlmLoss(objective, flops_weight, flops_warmup_steps)
    return model, Trainer(model, batches, loss, save_mlm(tokenizer), args).train(resume=resume)
