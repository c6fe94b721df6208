"""Frozen lower layers computed once per text instead of once per step.

With ``--freeze-layers N`` the embeddings and the first N layers of the student keep the teacher's weights, so what
they output for a text never changes during training. Below TITE's first pooling layer they see every token, which
makes them the costliest part of a step, forward and backward. :func:`lower_states` runs them once over all texts of
the data (without dropout: fixed features), and :func:`encode_from_lower_states` runs only the trainable upper
layers on a batch's stored rows, giving the vectors ``encoder.encode`` gives for the same texts in eval mode of the
frozen layers (up to floating-point rounding).

The states live in memory, ``[tokens, hidden]`` in the dtype the frozen layers compute in (fp32, or bf16 under bf16
autocast): 384 numbers per word piece for MiniLM, 1.5 KB in fp32, so 2.3 GiB for the 1.6 million word pieces of the
reduced ``distill-tite`` recipe (``--max-docs 2000 --max-queries 2000``) and 5.8 GiB for its full texts (4.0 million).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from pyterrier_tite.devices import autocast
from pyterrier_tite.models.bert_biencoder.modeling import PooledEncoder
from pyterrier_tite.models.bert_biencoder.tokenization import Role
from pyterrier_tite.models.tite.modeling import pack_padded
from pyterrier_tite.models.tite.packing import PackedLayout


@dataclass
class LowerStates:
    """Every text's packed states after the frozen layers: text ``i`` owns rows ``offsets[i]:offsets[i + 1]``."""

    states: torch.Tensor
    offsets: torch.Tensor
    layers: int

    def __len__(self) -> int:
        return self.offsets.numel() - 1

    def gather(self, rows: Sequence[int], device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor]:
        """The packed states of texts ``rows`` (in that order) and their ``cu_seqlens`` (int32), on ``device``."""
        stored, layout = _stored_rows(self.offsets, rows)
        return self.states[stored].to(device), layout.cu_seqlens.to(device)


def _stored_rows(offsets: torch.Tensor, rows: Sequence[int]) -> tuple[torch.Tensor, PackedLayout]:
    """Where texts ``rows`` (in that order) keep their states, and their packed layout."""
    index = torch.as_tensor(list(rows), dtype=torch.long)
    layout = PackedLayout.from_lengths(offsets[index + 1] - offsets[index], "cpu")
    return offsets[index][layout.row_sequence] + layout.positions, layout


def _check_encoder(encoder: PooledEncoder) -> None:
    if not hasattr(encoder.model, "forward_from_layer"):
        raise TypeError(f"cached lower layers need a TITE model, got {type(encoder.model).__name__}")
    if not isinstance(encoder, PooledEncoder) or encoder.pooling not in ("single", "cls"):
        raise TypeError("cached lower layers need an encoder that takes the model's first output row as the vector")


@torch.no_grad()
def lower_states(
    encoder: PooledEncoder,
    texts: Sequence[str],
    roles: Sequence[Role],
    layers: int,
    *,
    batch_size: int = 64,
    precision: str = "fp32",
    verbose: bool = True,
) -> LowerStates:
    """Run the embeddings and the first ``layers`` layers of ``encoder.model`` (in eval mode) over every text, each
    tokenised for its role as ``encoder.encode`` tokenises it; texts are batched by role and length."""
    from tqdm.auto import tqdm

    _check_encoder(encoder)
    model = encoder.model
    if not 1 <= layers <= len(model.encoder.layers):
        raise ValueError(f"cannot cache {layers} of {len(model.encoder.layers)} layers")
    order = sorted(range(len(texts)), key=lambda i: (roles[i], len(texts[i])))
    chunks = []  # (text indices, packed ids, cu_seqlens, positions): tokenised first, to size the states once
    for start in range(0, len(order), batch_size):
        chunk = order[start : start + batch_size]
        for role in sorted({roles[i] for i in chunk}):
            ids = [i for i in chunk if roles[i] == role]
            batch = encoder.inputs([texts[i] for i in ids], role)
            chunks.append((ids, *pack_padded(batch["input_ids"], batch["attention_mask"])))
    lengths = torch.zeros(len(texts) + 1, dtype=torch.long)
    for ids, _, cu, _ in chunks:  # rows per text after the frozen layers (fewer where one of them pools)
        lengths[torch.tensor(ids) + 1] = model.plan_layouts(torch.diff(cu.long()), "cpu")[layers].lengths
    offsets = torch.cumsum(lengths, 0)
    states = None
    device = encoder.device
    was_training = model.training
    model.eval()
    try:
        bar = tqdm(total=len(texts), desc=f"layers 1-{layers} (frozen)", unit="text", disable=not verbose)
        for ids, packed, cu, positions in chunks:
            with autocast(device, precision):
                out, _ = model.lower_states(packed.to(device), cu.to(device), layers, positions.to(device))
            if states is None:
                states = out.new_empty(int(offsets[-1]), out.shape[-1], device="cpu")
            states.index_copy_(0, _stored_rows(offsets, ids)[0], out.detach().cpu())
            bar.update(len(ids))
        bar.close()
    finally:
        model.train(was_training)
    if states is None:
        states = torch.zeros(0, encoder.dim)
    return LowerStates(states, offsets, layers)


def encode_from_lower_states(encoder: PooledEncoder, lower: LowerStates, rows: Sequence[int]) -> torch.Tensor:
    """``[len(rows), dim]`` vectors of texts ``rows`` (indices into the texts ``lower`` was built from): the model's
    layers above ``lower.layers`` on the stored states, with gradients when they are enabled."""
    _check_encoder(encoder)
    states, cu = lower.gather(rows, encoder.device)
    out = encoder.model.forward_from_layer(states, cu, lower.layers)
    if not bool((torch.diff(out.cu_seqlens.cpu()) == 1).all()):
        raise ValueError("cached lower layers need a model that pools every text to one vector")
    vectors = out.last_hidden_state
    return F.normalize(vectors, dim=-1) if encoder.normalize else vectors
