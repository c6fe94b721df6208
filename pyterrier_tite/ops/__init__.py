"""Kernels behind one dispatcher each: Triton (GPU) | compiled csrc (CPU, CUDA) | pure-torch reference.

``backends()`` lists, per op, the backends available on this machine, most preferred first.
"""
from pyterrier_tite.ops._extension import backends, extension
from pyterrier_tite.ops.pooling import packed_mean_pool, packed_mean_pool_reference, pooled_cu_seqlens, pooled_lengths

__all__ = [
    "backends",
    "extension",
    "packed_mean_pool",
    "packed_mean_pool_reference",
    "pooled_cu_seqlens",
    "pooled_lengths",
]
