"""A tiny random sparse cross-encoder (torch and the model only, so the GPU tests can use it on a bare machine)."""

from __future__ import annotations

from pyterrier_tite.models import SparseCrossEncoderConfig, SparseCrossEncoderModelForSequenceClassification


def tiny_sparse_ce(window, symmetric: bool, hidden: int = 64, max_positions: int = 600):
    """Seeded weights; ids 1-199 are valid, [CLS] 101, [SEP] 102, padding 0."""
    import torch

    torch.manual_seed(0)
    config = SparseCrossEncoderConfig(
        vocab_size=200, hidden_size=hidden, num_hidden_layers=2, num_attention_heads=2, intermediate_size=2 * hidden,
        max_position_embeddings=max_positions, attention_window_size=window, query_cls_attention=symmetric,
        query_doc_attention=symmetric, cls_token_id=101, sep_token_id=102, pad_token_id=0,
    )  # fmt: skip
    return SparseCrossEncoderModelForSequenceClassification(config).eval()
