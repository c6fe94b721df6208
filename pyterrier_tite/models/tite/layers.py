"""TITE's layers on packed rows, with the reference's (webis-de/tite) module and parameter names."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from transformers.activations import ACT2FN

from pyterrier_tite.models.fused_linear import ConcatenatedLinears, linear_gelu
from pyterrier_tite.models.packing import PackedLayout
from pyterrier_tite.models.tite.configuration import TiteConfig
from pyterrier_tite.ops import packed_mean_pool

try:  # optional: varlen attention on GPU
    from flash_attn import flash_attn_varlen_func
except ImportError:  # pragma: no cover - depends on the machine
    flash_attn_varlen_func = None
try:  # torch's own FlashAttention varlen (torch >= 2.9), used on GPU when the flash_attn package is absent
    from torch.nn.attention.varlen import varlen_attn as torch_varlen_attn
except ImportError:  # pragma: no cover - older torch
    torch_varlen_attn = None


def rope_rotation(positions: torch.Tensor, head_dim: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """RoPE's unit complex numbers ``exp(i * pos * 10000^(-2i/d))`` ``[T, 1, d/2]`` at float positions (pooled rows
    sit at window centres); angles in float32 as in the reference, cos/sin in float64 for float64 models."""
    exponent = torch.arange(0, head_dim, 2, device=positions.device, dtype=torch.float32) / head_dim
    angles = positions.to(torch.float32)[:, None] * (1.0 / (10_000.0**exponent))[None, :]
    if dtype == torch.float64:
        angles = angles.double()
    return torch.polar(torch.ones_like(angles), angles)[:, None, :]


def apply_rope(x: torch.Tensor, rotation: torch.Tensor) -> torch.Tensor:
    """Rotate the interleaved pairs ``(x[2i], x[2i+1])`` of ``x [T, heads, d]``: one complex multiply (on CPU ~30x
    faster than slicing even/odd columns)."""
    pairs = x.unflatten(-1, (-1, 2))
    if x.dtype in (torch.float32, torch.float64):
        z = torch.view_as_complex(pairs.contiguous()) * rotation
        return torch.view_as_real(z).flatten(-2)
    cos, sin = rotation.real.to(x.dtype), rotation.imag.to(x.dtype)  # half precision: no complex kernels
    x0, x1 = pairs[..., 0], pairs[..., 1]
    return torch.stack((x0 * cos - x1 * sin, x1 * cos + x0 * sin), dim=-1).flatten(-2)


def interleave_heads(weight: torch.Tensor, heads: int) -> torch.Tensor:
    """A projection's output rows (weight or bias) per head from half-split pairs ``(x[i], x[i + d/2])`` to
    interleaved ones, so :func:`apply_rope` serves half-split models (q.k is unchanged by one permutation of both)."""
    rest = weight.shape[1:]
    return weight.reshape(heads, 2, -1, *rest).transpose(1, 2).reshape(weight.shape)


class RMSNorm(nn.Module):
    """RMS norm with a weight and no bias, computed in float32 (or float64 for float64 inputs)."""

    def __init__(self, size: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return apply_norm(self, x, self.weight, None)


def apply_norm(norm: nn.Module, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``norm(x)`` with other (e.g. reordered) weight and bias: the same statistics and eps as the module."""
    if isinstance(norm, RMSNorm):
        xf = x if x.dtype == torch.float64 else x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + norm.eps) * weight).to(x.dtype)
    return F.layer_norm(x, norm.normalized_shape, weight, bias, norm.eps)


def make_norm(config: TiteConfig, size: int) -> nn.Module:
    if config.norm_type == "rms":
        return RMSNorm(size, eps=config.layer_norm_eps)
    return nn.LayerNorm(size, eps=config.layer_norm_eps)


class SwiGLU(nn.Module):
    """``silu(a) * b`` over the two halves of the intermediate projection (reference option ``hidden_act='swiglu'``)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = x.chunk(2, dim=-1)
        return F.silu(a) * b


class RopeCache:
    """RoPE rotations per (layout, position kind, head dim), built once per forward and shared by a stage's layers."""

    def __init__(self):
        self._cache: dict[tuple, torch.Tensor] = {}

    def get(self, layout: PackedLayout, positions, key: str, head_dim: int, dtype: torch.dtype) -> torch.Tensor:
        cache_key = (id(layout), key, head_dim, dtype)
        if cache_key not in self._cache:
            self._cache[cache_key] = rope_rotation(positions(), head_dim, dtype)
        return self._cache[cache_key]


def attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_layout: PackedLayout, kv_layout: PackedLayout
) -> torch.Tensor:
    """Per-sequence attention of packed ``q [Tq, h, d]`` over ``k, v [Tk, h, d]`` (of other lengths when pooling):
    FlashAttention varlen on GPU in half precision, else SDPA on rows padded to ``[B, h, L, d]``."""
    flash_dim = q.shape[-1] % 8 == 0 and q.shape[-1] <= 256  # the head dims FlashAttention kernels take
    if q.is_cuda and q.dtype in (torch.float16, torch.bfloat16) and flash_dim:
        varlen = flash_attn_varlen_func or torch_varlen_attn
        if varlen is not None:
            cu_q, cu_k = q_layout.cu_seqlens.to(torch.int32), kv_layout.cu_seqlens.to(torch.int32)
            return varlen(q, k, v, cu_q, cu_k, q_layout.max_len, kv_layout.max_len)
    qp = q_layout.pad(q).transpose(1, 2)
    kp = kv_layout.pad(k).transpose(1, 2)
    vp = kv_layout.pad(v).transpose(1, 2)
    out = F.scaled_dot_product_attention(qp, kp, vp, attn_mask=kv_layout.key_mask)
    return q_layout.unpad(out.transpose(1, 2))


class TiteEmbeddings(nn.Module):
    """Word (+ learned absolute position) embeddings at the last layer's width, downscaled to the first, then norm."""

    def __init__(self, config: TiteConfig):
        super().__init__()
        h_first, h_last = config.hidden_sizes[0], config.hidden_sizes[-1]
        self.word_embeddings = nn.Embedding(config.vocab_size, h_last, padding_idx=config.pad_token_id)
        self.downscale = nn.Linear(h_last, h_first, bias=False) if h_first != h_last else nn.Identity()
        self.position_embeddings = None
        if config.absolute_positional_embedding_type == "learned":
            self.position_embeddings = nn.Embedding(config.max_position_embeddings, h_last)
        self.norm = make_norm(config, h_first)
        self.dropout = nn.Dropout(config.dropout_prob)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        x = self.word_embeddings(input_ids)
        if self.position_embeddings is not None:
            x = x + self.position_embeddings(positions)
        return self.dropout(self.norm(self.downscale(x)))


class TiteAttention(nn.Module):
    """Self-attention with optional pooling (intra: Q and the residual pooled, K/V not; pre: everything pooled first;
    post: ``attention + residual`` pooled before the post-norm), upscaling (a zero-padded residual) and RoPE."""

    def __init__(self, config: TiteConfig, layer_idx: int):
        super().__init__()
        h_in = config.hidden_sizes[max(0, layer_idx - 1)]
        h_out = config.hidden_sizes[layer_idx]
        self.heads = config.num_attention_heads[layer_idx]
        self.head_dim = h_out // self.heads
        self.widen = h_out - h_in
        self.pre_norm = config.norm_location == "pre"
        self.qkv_norm = config.norm_location == "qkv"
        self.post_norm = config.norm_location == "post"
        self.location = config.pooling_location
        self.kernel = config.kernel_sizes[layer_idx]
        self.stride = config.strides[layer_idx]
        self.rotary = config.relative_positional_embedding_type == "rotary"
        self.half_split = self.rotary and not config.rotary_interleaved
        if self.pre_norm and layer_idx == 0:
            self.norm = nn.Identity()  # the embedding norm already normalised the input
        else:
            self.norm = make_norm(config, h_in if self.pre_norm else h_out)
        self.query = nn.Linear(h_in, h_out)
        self.key = nn.Linear(h_in, h_out)
        self.value = nn.Linear(h_in, h_out)
        self.dense = nn.Linear(h_out, h_out)
        self.dropout = nn.Dropout(config.dropout_prob)
        self._fused = ConcatenatedLinears()  # Q|K|V (or K|V) as one GEMM

    @property
    def pools(self) -> bool:
        return self.kernel is not None

    def _pool(self, x: torch.Tensor, layout: PackedLayout, pooled: PackedLayout) -> torch.Tensor:
        """Pool into the planned ``pooled`` layout (its offsets and size are known: no GPU sync)."""
        return packed_mean_pool(
            x, layout.cu_seqlens, self.kernel, self.stride, out_cu_seqlens=pooled.cu_seqlens, out_total=pooled.total
        )[0]

    def forward(
        self, x: torch.Tensor, layout_in: PackedLayout, layout_out: PackedLayout, rope: RopeCache
    ) -> torch.Tensor:
        pooled = self.pools and layout_out is not layout_in
        if pooled and self.location in ("pre", "intra"):
            residual = self._pool(x, layout_in, layout_out)
            q_in = self.norm(residual) if self.pre_norm else residual
            if self.location == "pre":
                kv_in, kv_layout = q_in, layout_out
            else:
                kv_in, kv_layout = (self.norm(x) if self.pre_norm else x), layout_in
            q_layout = layout_out
        else:
            residual = x
            q_in = kv_in = self.norm(x) if self.pre_norm else x
            q_layout = kv_layout = layout_in

        if kv_layout.max_len <= 1:  # one key per sequence: softmax is 1, the output is V
            out = self.norm(self.value(kv_in)) if self.qkv_norm else self.value(kv_in)
        else:
            q, k, v = self._project_qkv(q_in, kv_in, same_rows=q_in is kv_in)
            if self.rotary:
                q = apply_rope(q, self._query_rope(q_layout, layout_in, rope, q.dtype))
                k = apply_rope(k, rope.get(kv_layout, lambda: kv_layout.positions, "tokens", self.head_dim, k.dtype))
            out = attention(q, k, v, q_layout, kv_layout).flatten(-2)
        out = self.dropout(self.dense(out))
        if self.widen:
            residual = F.pad(residual, (0, self.widen))
        out = out + residual
        if pooled and self.location == "post":
            out = self._pool(out, layout_in, layout_out)
        return self.norm(out) if self.post_norm else out

    def _project_qkv(self, q_in: torch.Tensor, kv_in: torch.Tensor, same_rows: bool):
        """Q, K, V as ``[T, heads, d]``: one GEMM when they read the same rows, else Q alone and K|V together."""
        if same_rows:
            q, k, v = F.linear(kv_in, *self._weights(("query", "key", "value"))).chunk(3, dim=-1)
        else:
            q = F.linear(q_in, *self._weights(("query",)))
            k, v = F.linear(kv_in, *self._weights(("key", "value"))).chunk(2, dim=-1)
        if self.qkv_norm:  # the norm sees each head's rows in the checkpoint's order (RoPE reorders Q/K per head)
            q, k, v = self._norm_projections(q, k, v)
        return tuple(t.unflatten(-1, (self.heads, self.head_dim)) for t in (q, k, v))

    def _norm_projections(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Norm location qkv: one norm over each projection, its weights reordered as half-split RoPE models' Q/K
        rows are (its statistics are order-free)."""
        if not self.half_split:
            return self.norm(q), self.norm(k), self.norm(v)
        weight = interleave_heads(self.norm.weight, self.heads)
        bias = getattr(self.norm, "bias", None)
        bias = None if bias is None else interleave_heads(bias, self.heads)
        return apply_norm(self.norm, q, weight, bias), apply_norm(self.norm, k, weight, bias), self.norm(v)

    def _weights(self, names: tuple[str, ...]) -> tuple[torch.Tensor, torch.Tensor]:
        """Concatenated weight and bias of the named projections (cached in inference); half-split RoPE
        models' Q/K rows interleaved."""

        def prepare(i: int, t: torch.Tensor) -> torch.Tensor:
            return interleave_heads(t, self.heads) if self.half_split and names[i] != "value" else t

        return self._fused.get(names, [getattr(self, name) for name in names], prepare)

    def _query_rope(
        self, q_layout: PackedLayout, layout_in: PackedLayout, rope: RopeCache, dtype: torch.dtype
    ) -> torch.Tensor:
        """Query positions: window centres ``j*s + (k-1)/2`` for intra pooling, else the rows' own positions."""
        if q_layout is not layout_in and self.location == "intra":
            kernel, stride = self.kernel, self.stride

            def centres() -> torch.Tensor:
                return q_layout.positions.to(torch.float32) * stride + (kernel - 1) / 2

            return rope.get(q_layout, centres, f"centres-{kernel}-{stride}", self.head_dim, dtype)
        return rope.get(q_layout, lambda: q_layout.positions, "tokens", self.head_dim, dtype)


class TiteMLP(nn.Module):
    """Feed-forward block ``x + W2 act(W1 x)`` with pre- or post-norm."""

    def __init__(self, config: TiteConfig, layer_idx: int):
        super().__init__()
        hidden, inter = config.hidden_sizes[layer_idx], config.intermediate_sizes[layer_idx]
        self.pre_norm = config.norm_location in ("pre", "qkv")  # the reference's MLP treats qkv as pre
        self.norm = make_norm(config, hidden)
        self.intermediate_dense = nn.Linear(hidden, 2 * inter if config.hidden_act == "swiglu" else inter)
        self.intermediate_act_fn = SwiGLU() if config.hidden_act == "swiglu" else ACT2FN[config.hidden_act]
        self.out_dense = nn.Linear(inter, hidden)
        self.dropout = nn.Dropout(config.dropout_prob)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(x) if self.pre_norm else x
        if torch.is_grad_enabled():
            inner = self.intermediate_act_fn(self.intermediate_dense(h))
        else:  # inference: linear + exact GELU as one oneDNN kernel on a bounded set of row counts (a GELU called on
            # every batch's token count makes oneDNN cache one primitive per count: memory grows with the corpus)
            inner = linear_gelu(self.intermediate_dense, self.intermediate_act_fn, h)
        h = self.dropout(self.out_dense(inner))
        return x + h if self.pre_norm else self.norm(x + h)


class TiteLayer(nn.Module):
    def __init__(self, config: TiteConfig, layer_idx: int):
        super().__init__()
        self.attention = TiteAttention(config, layer_idx)
        self.mlp = TiteMLP(config, layer_idx)

    def forward(self, x, layout_in: PackedLayout, layout_out: PackedLayout, rope: RopeCache) -> torch.Tensor:
        return self.mlp(self.attention(x, layout_in, layout_out, rope))


class TiteEncoder(nn.Module):
    """The layer stack; pre- and qkv-norm models end with a norm over the last width (post-norm: Identity)."""

    def __init__(self, config: TiteConfig):
        super().__init__()
        self.layers = nn.ModuleList(TiteLayer(config, i) for i in range(config.num_hidden_layers))
        final = config.norm_location in ("pre", "qkv")
        self.norm = make_norm(config, config.hidden_sizes[-1]) if final else nn.Identity()
