"""Kernels behind one dispatcher each: Triton (GPU) | compiled csrc (CPU) | pure-torch reference; ``backends()`` lists
each op's backends available here, most preferred first."""

from pyterrier_tite.ops._extension import backends, extension
from pyterrier_tite.ops.dropout import Dropout, dropout, use_fast_dropout
from pyterrier_tite.ops.layer_norm import add_layer_norm
from pyterrier_tite.ops.pooling import packed_mean_pool, packed_mean_pool_reference, pooled_cu_seqlens, pooled_lengths
from pyterrier_tite.ops.window_attention import (
    KeyGroup,
    dense_attention_inputs,
    window_attention,
    window_attention_reference,
)

__all__ = [
    "Dropout",
    "KeyGroup",
    "add_layer_norm",
    "backends",
    "dense_attention_inputs",
    "dropout",
    "extension",
    "packed_mean_pool",
    "packed_mean_pool_reference",
    "pooled_cu_seqlens",
    "pooled_lengths",
    "use_fast_dropout",
    "window_attention",
    "window_attention_reference",
]
