"""TITE pretraining (paper 3.3): ``L = L_MAE + L_BOW`` on the one output vector. BOW: a feed-forward decoder predicts
which tokens occur in the text (BCE per vocabulary entry). Enhanced MAE (RetroMAE's enhanced decoding): one layer whose
queries are the vector + positions and whose keys/values are ``[vector ; token embeddings + positions]``; position i
sees the vector and a random ``1 - mask_rate`` share of the others, never itself. Input masking is off by default."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from pyterrier_tite.models.bert_biencoder.tokenization import BiEncoderInputs
from pyterrier_tite.training.loop import Trainer, TrainingArguments, epoch_rng
from pyterrier_tite.training.mlm import save_mlm


def bow_targets(input_ids: torch.Tensor, attention_mask: torch.Tensor, vocab_size: int, ignore: Sequence[int]):
    """``[B, V]`` multi-hot of the tokens present in each text (``ignore`` ids, e.g. [CLS]/[SEP]/[PAD], are 0)."""
    targets = torch.zeros(input_ids.shape[0], vocab_size, device=input_ids.device)
    targets.scatter_(1, input_ids * attention_mask.long(), attention_mask.float())
    if ignore:
        targets[:, list(ignore)] = 0.0
    return targets


def enhanced_decoding_mask(lengths: torch.Tensor, max_len: int, mask_rate: float, generator=None) -> torch.Tensor:
    """``[B, L, 1 + L]``, True = may attend: column 0 (the vector) always, others with probability ``1 - mask_rate``
    within the length, never the diagonal (a position must not see its own token)."""
    batch = lengths.numel()
    keep = torch.rand(batch, max_len, max_len, generator=generator) >= mask_rate
    valid = torch.arange(max_len)[None, :] < lengths[:, None]  # [B, L]
    keep &= valid[:, None, :]
    keep &= ~torch.eye(max_len, dtype=torch.bool)[None]
    return torch.cat([torch.ones(batch, max_len, 1, dtype=torch.bool), keep], dim=2)


class EnhancedMaeDecoder(nn.Module):
    """RetroMAE's enhanced decoding layer (queries from the vector, keys/values from the tokens)."""

    def __init__(self, hidden: int, heads: int, max_len: int, vocab_size: int):
        super().__init__()
        self.positions = nn.Embedding(max_len + 1, hidden)
        self.attention = nn.MultiheadAttention(hidden, heads, batch_first=True)
        self.norm1 = nn.LayerNorm(hidden)
        self.mlp = nn.Sequential(nn.Linear(hidden, 4 * hidden), nn.GELU(), nn.Linear(4 * hidden, hidden))
        self.norm2 = nn.LayerNorm(hidden)
        self.head = nn.Linear(hidden, vocab_size)
        self.heads = heads

    def forward(self, vector: torch.Tensor, token_embeddings: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
        """``vector [B, H]``, ``token_embeddings [B, L, H]``, ``allowed [B, L, 1 + L]`` -> logits ``[B, L, V]``."""
        length = token_embeddings.shape[1]
        pos = self.positions(torch.arange(length + 1, device=vector.device))
        queries = vector[:, None, :] + pos[None, 1:]
        keys = torch.cat([vector[:, None, :] + pos[None, :1], token_embeddings + pos[None, 1:]], dim=1)
        mask = ~allowed.to(vector.device).repeat_interleave(self.heads, dim=0)  # True = blocked
        attended, _ = self.attention(queries, keys, keys, attn_mask=mask, need_weights=False)
        x = self.norm1(queries + attended)
        x = self.norm2(x + self.mlp(x))
        return self.head(x)


class TitePretrainingModel(nn.Module):
    """An encoder whose ``last_hidden_state[:, 0]`` is the text vector, with the MAE decoder and BOW head."""

    def __init__(self, encoder: nn.Module, max_len: int, ignore_ids: Sequence[int] = (), mask_rate: float = 0.5):
        super().__init__()
        config = encoder.config
        hidden = int(config.hidden_size)
        vocab = int(config.vocab_size)
        heads = max(1, hidden // 64)
        self.encoder = encoder
        self.bow = nn.Sequential(nn.Linear(hidden, hidden), nn.GELU(), nn.LayerNorm(hidden), nn.Linear(hidden, vocab))
        self.mae = EnhancedMaeDecoder(hidden, heads, max_len, vocab)
        self.ignore_ids = list(ignore_ids)
        self.mask_rate = mask_rate

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, encoder_input_ids=None) -> dict:
        """Losses on the clean ids; ``encoder_input_ids`` (optionally masked) is what the encoder sees."""
        enc_ids = input_ids if encoder_input_ids is None else encoder_input_ids
        vector = self.encoder(input_ids=enc_ids, attention_mask=attention_mask).last_hidden_state[:, 0]
        targets = bow_targets(input_ids, attention_mask, self.bow[-1].out_features, self.ignore_ids)
        bow = F.binary_cross_entropy_with_logits(self.bow(vector), targets)
        lengths = attention_mask.sum(1).cpu()
        allowed = enhanced_decoding_mask(lengths, input_ids.shape[1], self.mask_rate)
        tokens = self.encoder.get_input_embeddings()(input_ids)
        if tokens.shape[-1] != vector.shape[-1]:
            raise ValueError("the MAE decoder needs token embeddings as wide as the output vector")
        logits = self.mae(vector, tokens, allowed)
        labels = input_ids.masked_fill(~attention_mask.bool(), -100)
        mae = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100)
        return {"loss": mae + bow, "mae": mae, "bow": bow}


def mask_inputs(input_ids, attention_mask, rate: float, mask_id: int, generator=None, protect=()):
    """BERT-style input masking (only ``[MASK]`` replacement) for the optional masked-input ablation."""
    if rate <= 0:
        return input_ids
    chosen = (torch.rand(input_ids.shape, generator=generator) < rate) & attention_mask.bool()
    chosen &= ~torch.isin(input_ids, torch.tensor(list(protect), dtype=input_ids.dtype, device=input_ids.device))
    return input_ids.masked_fill(chosen, mask_id)


def text_batches(texts: Sequence[str], tokenizer, batch_size: int, max_length: int, seed: int):
    """Seeded shuffle per epoch, a shard per rank, tokenised as documents (no marker) cut to ``max_length``."""
    inputs = BiEncoderInputs(tokenizer, query_max_length=max_length, doc_max_length=max_length)

    def batches(epoch: int, rank: int, world_size: int) -> Iterator[dict]:
        order = list(range(len(texts)))
        epoch_rng(seed, epoch).shuffle(order)
        shard = order[rank::world_size]
        for start in range(0, len(shard) - batch_size + 1, batch_size):
            chunk = [texts[i] for i in shard[start : start + batch_size]]
            yield inputs(chunk, "doc")

    return batches


def pretrain(
    encoder: nn.Module,
    tokenizer,
    texts: Sequence[str],
    args: TrainingArguments,
    batch_size: int = 8,
    max_length: int = 128,
    mae_mask_rate: float = 0.5,
    input_mask_rate: float = 0.0,
    resume: bool = True,
) -> list[dict[str, float]]:
    """Pretrain ``encoder`` with MAE + BOW; saves it and the tokenizer (no heads) to ``args.output_dir``."""
    ignore = [i for i in (tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.pad_token_id) if i is not None]
    model = TitePretrainingModel(encoder, max_length, ignore, mae_mask_rate)

    def loss_fn(module: TitePretrainingModel, batch: dict, step: int):
        ids, mask = batch["input_ids"], batch["attention_mask"]
        enc_ids = mask_inputs(ids, mask, input_mask_rate, tokenizer.mask_token_id or 0, protect=ignore)
        out = module(ids, mask, enc_ids)
        return out["loss"], {"mae": out["mae"].item(), "bow": out["bow"].item()}

    save = save_mlm(tokenizer)
    batches = text_batches(texts, tokenizer, batch_size, max_length, args.seed)
    return Trainer(model, batches, loss_fn, lambda module, path: save(module.encoder, path), args).train(resume=resume)
