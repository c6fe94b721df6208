"""Layer-wise targets for a TITE distilled from the BERT it was made from (``TITE.from_bert``).

The vector loss of :mod:`~pyterrier_tite.training.vector_distillation` gives the student one target per text: the
teacher's final vector. But student and teacher share every weight and every layer, and differ only in the pooling
the student's layers insert, so the teacher also says what each of the student's *intermediate* rows should be: the
teacher's states of the same layer, pooled through the same windows. For student layer ``j`` the target is the
teacher's layer-``j`` token states passed through the student's pooling of layers ``1..j`` (the very op and windows
the student uses, so partial windows at the end of a sequence are averaged the same way); the loss is the mean
squared error per layer, averaged over layers. This gives each text hundreds of targets instead of one (TinyBERT-style
hidden-state distillation), at the cost of the teacher's forward pass in every step.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from pyterrier_tite.models.bert_biencoder.modeling import PooledEncoder
from pyterrier_tite.models.bert_biencoder.tokenization import Role
from pyterrier_tite.ops import packed_mean_pool


def pooled_teacher_targets(
    teacher_states: Sequence[torch.Tensor],
    mask: torch.Tensor,
    cu_seqlens: Sequence[torch.Tensor],
    kernels: Sequence[int | None],
    strides: Sequence[int | None],
) -> list[torch.Tensor]:
    """Per student layer ``j = 1..n``: the teacher's layer-``j`` states (``[B, L, H]``, embeddings first, tokens
    selected by ``mask``) pooled by the student's layers ``1..j``. ``cu_seqlens``: the student's packed offsets
    before layer 1 and after each layer (``TitePackedOutput.hidden_cu_seqlens``); ``kernels`` / ``strides``: its
    layers' pooling (None = no pooling)."""
    layers = len(kernels)
    if len(teacher_states) != layers + 1 or len(cu_seqlens) != layers + 1:
        raise ValueError(
            f"the teacher has {len(teacher_states) - 1} layers, the student {layers} ({len(cu_seqlens) - 1} offsets):"
            " layer-wise distillation needs a student made from the teacher's own layers"
        )
    targets = []
    for j in range(1, layers + 1):
        rows = teacher_states[j][mask]
        for i in range(1, j + 1):
            before, after = cu_seqlens[i - 1], cu_seqlens[i]
            if kernels[i - 1] is None or torch.equal(before, after):
                continue  # the student's layer i kept its rows (no pooling, or every sequence already one row)
            rows = packed_mean_pool(
                rows, before, kernels[i - 1], strides[i - 1], out_cu_seqlens=after.to(rows.device),
                out_total=int(after[-1]),
            )[0]  # fmt: skip
        targets.append(rows)
    return targets


def hidden_state_loss(student_states: Sequence[torch.Tensor], targets: Sequence[torch.Tensor]) -> torch.Tensor:
    """Mean over layers of the per-layer mean squared error, in fp32; ``student_states`` without the embeddings."""
    if len(student_states) != len(targets):
        raise ValueError(f"{len(student_states)} student layers but {len(targets)} targets")
    errors = []
    for state, target in zip(student_states, targets, strict=True):
        if state.shape != target.shape:
            raise ValueError(f"student rows {tuple(state.shape)} but teacher target {tuple(target.shape)}")
        errors.append(F.mse_loss(state.float(), target.float()))
    return torch.stack(errors).mean()


def layer_targets(student: PooledEncoder, teacher: PooledEncoder, texts: Sequence[str], role: Role):
    """``(student batch, student output with hidden states, per-layer targets)`` for ``texts`` in ``role``; the
    student runs with gradients (if enabled), the teacher without."""
    batch = {k: v.to(student.device) for k, v in student.inputs(texts, role).items()}
    states = student.model(**batch, output_hidden_states=True)
    with torch.no_grad():
        teacher_batch = {k: v.to(teacher.device) for k, v in teacher.inputs(texts, role).items()}
        mask = teacher_batch["attention_mask"].bool()
        if not torch.equal(teacher_batch["input_ids"][mask], batch["input_ids"][batch["attention_mask"].bool()]):
            raise ValueError("student and teacher tokenise these texts differently: no layer-wise targets")
        teacher_states = teacher.model(**teacher_batch, output_hidden_states=True).hidden_states
        config = student.model.config
        targets = pooled_teacher_targets(
            teacher_states, mask, states.hidden_cu_seqlens, config.kernel_sizes, config.strides
        )
    return batch, states, targets


def encode_with_hidden_loss(
    student: PooledEncoder, teacher: PooledEncoder, texts: Sequence[str], roles: Sequence[Role]
) -> tuple[torch.Tensor, torch.Tensor]:
    """The student's vectors of ``texts`` (input order, gradients on) and its layer-wise loss against the teacher
    (mean over texts). Both must tokenise identically: the student was made from the teacher with its tokenizer and
    lengths (``pyterrier-tite distill-tite`` builds it so)."""
    out: torch.Tensor | None = None
    total = None
    for role in ("query", "doc"):
        rows = [i for i, r in enumerate(roles) if r == role]
        if not rows:
            continue
        chunk = [texts[i] for i in rows]
        batch, states, targets = layer_targets(student, teacher, chunk, role)
        vectors = student.pool(states.last_hidden_state, batch)
        loss = hidden_state_loss(states.hidden_states[1:], targets) * len(rows)
        total = loss if total is None else total + loss
        if out is None:
            out = vectors.new_empty(len(texts), vectors.shape[1])
        out[torch.tensor(rows, device=vectors.device)] = vectors
    if out is None or total is None:
        raise ValueError("no texts to encode")
    return out, total / len(texts)
