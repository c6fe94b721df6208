"""Aggretriever (Lin et al., 2023): ``[cls ; agg*]``, a projected [CLS] and the max over the text's tokens (after
[CLS]) of ``softmax(logits_t) * w_t`` (``w_t = Linear(H, 1)(h_t)``), condensed from |V| into ``agg_dim`` dims.

The released checkpoints use the raw term weight; ours train with ``relu(w_t)``, which is what the reference training
computes in effect: padded positions contribute 0 to its max, and ``max(0, max_t p_t w_t) = max_t p_t relu(w_t)``."""

from __future__ import annotations

import json
import os
import warnings
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from pyterrier_tite.models.aggretriever.convert import (
    CONFIG_NAME,
    HEADS,
    HEADS_NAME,
    READERS,
    detect_layout,
    fill_tied,
    legacy_names,
    mlm_from_config,
    settings_of,
)
from pyterrier_tite.models.batch_tensors import takes_token_types
from pyterrier_tite.models.bert_biencoder.modeling import TextEncoder
from pyterrier_tite.models.bert_biencoder.tokenization import Role
from pyterrier_tite.models.checkpoint import (
    Checkpoint,
    CheckpointError,
    Loaded,
    load_exactly,
    open_checkpoint,
    read_state_dict,
)
from pyterrier_tite.models.packed_bert import PackedEncoder, PackedPairs, packed_mlm_encoder
from pyterrier_tite.models.packing import block_columns


def _slices(lexical: torch.Tensor, width: int, offset: int | None = None) -> torch.Tensor:
    """``[B, V]`` -> ``[B, rows, width]`` (column ``c`` holds the ids ``c, c + width, ...``). ``offset`` None pads
    zeros up to a multiple of ``width``; an int is castorini's fixed offset, which fits only some vocabularies."""
    if offset is None:
        offset = -((-lexical.shape[-1]) % width)
    lexical = lexical[:, offset:] if offset > 0 else F.pad(lexical, (0, -offset))
    if lexical.shape[-1] % width:
        raise ValueError(
            f"not supported: castorini's aggregation with offset {offset} needs a vocabulary of a multiple of "
            f"{width} plus {offset} ids, got {lexical.shape[-1] + offset}"
        )
    return lexical.view(lexical.shape[0], -1, width)


def agg_star(lexical: torch.Tensor, dim: int = 640, offset: int | None = None) -> torch.Tensor:
    """``agg*`` (Eq. 9): per slice of ids congruent to ``2n`` / ``2n + 1`` modulo ``2d``, ``pos if pos > neg else
    -neg`` of the two halves' maxima (padding zeros take part, as in the reference)."""
    pooled = _slices(lexical, 2 * dim, offset).amax(dim=1)
    pos, neg = pooled[:, 0::2], pooled[:, 1::2]
    return torch.where(pos > neg, pos, -neg)


def lexical_representation(
    probabilities: torch.Tensor, term_weights: torch.Tensor, attention_mask: torch.Tensor
) -> torch.Tensor:
    """``v[v] = max_t w_t * p_t[v]`` over the non-[CLS], non-padding positions: ``[B, L, V]`` -> ``[B, V]``.
    Padded positions never win (the reference lets them contribute 0: the same with ``relu`` term weights), so a
    vector does not depend on its batch; a text with nothing after [CLS] gives zeros."""
    probabilities, term_weights, mask = probabilities[:, 1:], term_weights[:, 1:], attention_mask[:, 1:].bool()
    if probabilities.shape[1] == 0:
        return probabilities.new_zeros(probabilities.shape[0], probabilities.shape[2])
    weighted = probabilities * term_weights
    weighted.masked_fill_(~mask.unsqueeze(-1), float("-inf"))
    return weighted.amax(dim=1).masked_fill(~mask.any(dim=1, keepdim=True), 0.0)


@dataclass
class AggretrieverOutput:
    """The two parts of an Aggretriever vector; ``vector`` is what is indexed and dot-multiplied."""

    cls: torch.Tensor  # [B, cls_dim]
    agg: torch.Tensor  # [B, agg_dim]

    @property
    def vector(self) -> torch.Tensor:
        return torch.cat([self.cls, self.agg], dim=-1)


#: token rows per pass of the MLM head in the packed forward: ``[rows, V]`` probabilities at a time
PACKED_HEAD_ROWS = 512


class AggretrieverEncoder(nn.Module):
    """Any ``AutoModelForMaskedLM`` plus Aggretriever's two heads (term weight, [CLS] projection).

    ``cls_dim=0`` keeps only ``agg*`` (dhr without pooler); ``agg_dim=0`` only the projected [CLS] (the paper's CLS
    baseline: the MLM head never runs). ``term_weight_relu`` and ``vocab_offset`` say how a checkpoint was trained
    (:func:`_slices`) and are saved with the heads.
    """

    def __init__(
        self,
        mlm: nn.Module,
        agg_dim: int = 640,
        cls_dim: int = 128,
        term_weight_relu: bool = True,
        vocab_offset: int | None = None,
    ):
        super().__init__()
        if agg_dim < 0 or cls_dim < 0 or agg_dim + cls_dim == 0:
            raise ValueError(f"agg_dim and cls_dim must be >= 0, one of them > 0; got {agg_dim} and {cls_dim}")
        self.mlm = mlm
        self.agg_dim = agg_dim
        self.cls_dim = cls_dim
        self.term_weight_relu = term_weight_relu
        self.vocab_offset = vocab_offset
        hidden = int(mlm.config.hidden_size)  # DistilBERT maps it to ``dim``
        self.term_weight = nn.Linear(hidden, 1)
        with warnings.catch_warnings():  # cls_dim 0 (dhr without pooler): torch warns that it initialises nothing
            warnings.simplefilter("ignore", UserWarning)
            self.cls_projection = nn.Linear(hidden, cls_dim)
        self._takes_token_types = takes_token_types(mlm)
        self.packed = True  # CPU inference of a BERT MLM: the packed forward (no compute on padding)
        self._packed_encoder: PackedEncoder | None = None

    @property
    def dim(self) -> int:
        return self.cls_dim + self.agg_dim

    def settings(self) -> dict:
        """What :meth:`save_pretrained` stores beside the heads (everything needed to recompute the vectors)."""
        return {name: getattr(self, name) for name in ("agg_dim", "cls_dim", "term_weight_relu", "vocab_offset")}

    def _run(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor | None,
             head: bool = True):  # fmt: skip
        """MLM logits, last hidden states and term weights (``head=False``: the encoder's hidden states alone)."""
        kwargs = {"token_type_ids": token_type_ids} if token_type_ids is not None and self._takes_token_types else {}
        if not head:
            return self.mlm.base_model(input_ids=input_ids, attention_mask=attention_mask, **kwargs).last_hidden_state
        out = self.mlm(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True, **kwargs)
        weights = self.term_weight(out.hidden_states[-1])  # [B, L, 1]
        return out.logits, out.hidden_states[-1], torch.relu(weights) if self.term_weight_relu else weights

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor | None = None
    ) -> AggretrieverOutput:
        """Token ids ``[B, L]`` (with [CLS] first) -> projected [CLS] and ``agg*``."""
        if self.agg_dim == 0:
            hidden = self._run(input_ids, attention_mask, token_type_ids, head=False)
            return AggretrieverOutput(cls=self.cls_projection(hidden[:, 0]), agg=hidden.new_zeros(len(hidden), 0))
        packed = self._packed_parts(input_ids, attention_mask, token_type_ids)
        if packed is not None:
            return packed
        logits, hidden, weights = self._run(input_ids, attention_mask, token_type_ids)
        if torch.is_grad_enabled():
            probabilities = torch.softmax(logits, dim=-1)
        else:  # [B, L, V] is the largest tensor: reuse its memory
            probabilities = logits.sub_(logits.amax(dim=-1, keepdim=True)).exp_()
            probabilities.div_(probabilities.sum(dim=-1, keepdim=True))
        lexical = lexical_representation(probabilities, weights, attention_mask)
        agg = agg_star(lexical, self.agg_dim, self.vocab_offset)
        return AggretrieverOutput(cls=self.cls_projection(hidden[:, 0]), agg=agg)

    def _packed_parts(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor | None
    ) -> AggretrieverOutput | None:
        """``forward`` on packed rows (CPU inference of a BERT MLM, a right-padded batch), the MLM head a block of
        rows at a time (never ``[B, L, V]``); None where it does not apply."""
        if torch.is_grad_enabled() or input_ids.device.type != "cpu" or not self.packed:
            return None
        encoder = self._packed_encoder = packed_mlm_encoder(self.mlm, self._packed_encoder)
        types = token_type_ids if self._takes_token_types else None
        batch = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": types}
        pairs = None if encoder is None else PackedPairs.from_padded(batch)
        if pairs is None:
            return None
        hidden = encoder.tokens(pairs)  # [T, H]
        starts = pairs.layout.cu_seqlens[:-1].long()
        cls = self.cls_projection(hidden[starts])
        not_cls = torch.ones(hidden.shape[0], dtype=torch.bool, device=hidden.device)
        not_cls[starts] = False
        lengths = (attention_mask.sum(dim=1) - 1).tolist()  # tokens after [CLS]
        tokens = hidden[not_cls]
        lexical = hidden.new_full((len(lengths), self.mlm.config.vocab_size), float("-inf"))
        for begin, end, columns in block_columns(lengths, PACKED_HEAD_ROWS):
            block = tokens[begin:end]
            logits = self.mlm.cls(block)  # [rows, V]
            probabilities = logits.sub_(logits.amax(dim=-1, keepdim=True)).exp_()
            probabilities.div_(probabilities.sum(dim=-1, keepdim=True))
            weights = self.term_weight(block)
            weighted = probabilities.mul_(torch.relu(weights) if self.term_weight_relu else weights)
            for text, low, high in columns:
                torch.maximum(lexical[text], weighted[low:high].amax(dim=0), out=lexical[text])
        lexical[lexical == float("-inf")] = 0.0  # a text with nothing after [CLS]: zeros, as the padded forward
        return AggretrieverOutput(cls=cls, agg=agg_star(lexical, self.agg_dim, self.vocab_offset))

    def lexical(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The |V|-dim lexical vector ``v`` before aggregation (for analysis and tests)."""
        logits, _, weights = self._run(input_ids, attention_mask, token_type_ids)
        return lexical_representation(torch.softmax(logits, dim=-1), weights, attention_mask)

    @classmethod
    def from_pretrained(
        cls, path: str, agg_dim: int | None = None, cls_dim: int | None = None, new_heads: bool = False
    ) -> AggretrieverEncoder:
        """An Aggretriever checkpoint in any known layout (folder or hub id), loaded exactly; a plain MLM needs
        ``new_heads=True`` (fresh heads of the given dims, with a warning)."""
        return load_aggretriever(path, agg_dim=agg_dim, cls_dim=cls_dim, new_heads=new_heads).module

    def save_pretrained(self, path: str, extra: dict | None = None) -> None:
        """The MLM in Hugging Face layout, the heads (safetensors) and the settings plus ``extra`` (json) beside it."""
        from safetensors.torch import save_file

        os.makedirs(path, exist_ok=True)
        self.mlm.save_pretrained(path)
        heads = {f"term_weight.{k}": v for k, v in self.term_weight.state_dict().items()}
        heads.update({f"cls_projection.{k}": v for k, v in self.cls_projection.state_dict().items()})
        save_file({k: v.contiguous() for k, v in heads.items()}, os.path.join(path, HEADS_NAME))
        with open(os.path.join(path, CONFIG_NAME), "w") as f:
            json.dump({**self.settings(), **(extra or {})}, f, indent=2)


class AggretrieverTextEncoder(TextEncoder):
    """Texts -> ``[cls ; agg*]`` (``encode``), or both parts of one batch (``parts``, for the training loss)."""

    @property
    def dim(self) -> int:
        return self.model.dim

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.model(**batch).vector

    def parts(self, texts: list[str], role: Role) -> AggretrieverOutput:
        """Projected [CLS] and ``agg*`` of ``texts`` as one batch."""
        return self.model(**{k: v.to(self.device) for k, v in self.inputs(texts, role).items()})


# ------------------------------------------------------------------------------------------------ loading
def load_aggretriever(
    path_or_id: str | os.PathLike | Checkpoint,
    *,
    agg_dim: int | None = None,
    cls_dim: int | None = None,
    new_heads: bool = False,
) -> Loaded:
    """Any Aggretriever checkpoint loaded exactly (a ``position_ids`` buffer aside), else :class:`CheckpointError`
    naming the tensors. A plain MLM raises unless ``new_heads=True`` (fresh heads, one warning, ``source`` None).
    ``settings``: the text lengths stored or implied by the layout; no tokenizer."""
    checkpoint = open_checkpoint(path_or_id)
    source, folder = checkpoint.name, checkpoint.folder
    state = read_state_dict(folder)
    layout = detect_layout(folder, state)
    if layout == "mlm" and not new_heads:
        raise CheckpointError(
            f"{source} has no Aggretriever heads (pyserini tok_proj/cls_proj, dhr TermWeightTrans.pt, or our "
            f"{HEADS_NAME}); to start new heads on this MLM (training), pass new_heads=True"
        )
    read = READERS[layout](folder, state)
    encoder = AggretrieverEncoder(
        mlm_from_config(folder), **settings_of(read, source, {"agg_dim": agg_dim, "cls_dim": cls_dim})
    )
    vocab, width = int(encoder.mlm.config.vocab_size), 2 * encoder.agg_dim
    if encoder.vocab_offset is not None and width and (vocab - encoder.vocab_offset) % width:
        raise CheckpointError(  # castorini's fixed offset fits only some vocabularies (the reference fails on others)
            f"not supported: {source} has {vocab} vocabulary ids; castorini's aggregation for agg_dim "
            f"{encoder.agg_dim} (offset {encoder.vocab_offset}, derived from 30522) needs a multiple of {width} "
            f"plus {encoder.vocab_offset}"
        )
    loaded = fill_tied(encoder, legacy_names(encoder, read.state), source)
    own = encoder.state_dict()
    unused = [k for k in loaded if k.endswith("position_ids") and k not in own]
    fresh = HEADS if layout == "mlm" else ("cls_projection.",) if encoder.cls_dim == 0 else ()
    load_exactly(encoder, loaded, source, fresh=fresh, unused=unused)
    if layout == "mlm":
        warnings.warn(
            f"{source} is a plain MLM: the Aggretriever heads (term weight, [CLS] projection to {encoder.cls_dim}) "
            "start fresh; train them before use",
            stacklevel=3,
        )
    lengths = {k: v for k, v in zip(("query_max_length", "doc_max_length"), read.lengths, strict=True) if v is not None}
    return Loaded(encoder, None, lengths, None if layout == "mlm" else os.path.realpath(folder))
