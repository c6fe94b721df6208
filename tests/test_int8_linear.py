"""The int8 linear layer behind ``dtype="int8"`` (issue 73.4): the compiled and the torch quantization give the same
int8 values, the layer stays within int8's error of the float layer, and migrating an outlier channel into the weights
(the LayerNorm-fed layers) cuts that error."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from pyterrier_tite.models.int8_linear import Int8Linear, migration_factors, weight_levels
from pyterrier_tite.ops import backends
from pyterrier_tite.ops.int8_rows import dequantize_rows, quantize_rows

pytestmark = pytest.mark.usefixtures("single_thread")
BACKENDS = backends()["int8_rows"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("factor", [False, True])
def test_rows_quantize_to_their_own_scale(backend, factor):
    torch.manual_seed(0)
    x = torch.randn(37, 50) * torch.logspace(-3, 2, 37)[:, None]  # rows of very different magnitude
    x[3] = 0.0  # an all-zero row stays zero
    f = torch.rand(50) + 0.5 if factor else None
    q, scale = quantize_rows(x, f, backend=backend)
    assert q.dtype == torch.int8 and scale.shape == (37, 1)
    scaled = x * f if factor else x
    assert torch.equal(q.abs().amax(1)[torch.arange(37) != 3], torch.full((36,), 127, dtype=torch.int8))
    assert (q[3] == 0).all()
    assert ((q.float() * scale - scaled).abs() <= scale / 2 * (1 + 1e-5) + 1e-30).all()  # within half a level


def test_the_compiled_and_torch_quantization_agree():
    if "csrc-cpu" not in BACKENDS:
        pytest.skip("the compiled extension is not built")
    torch.manual_seed(1)
    x, f = torch.randn(64, 384) * 3, torch.rand(384) + 0.5
    for factor in (None, f):
        a, b = quantize_rows(x, factor, backend="csrc-cpu"), quantize_rows(x, factor, backend="torch")
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    acc = torch.randint(-(10**6), 10**6, (64, 96), dtype=torch.int32)
    rows, cols, bias = torch.rand(64, 1), torch.rand(96), torch.randn(96)
    for b in (None, bias):
        compiled = dequantize_rows(acc, rows, cols, b, backend="csrc-cpu")
        assert torch.equal(compiled, dequantize_rows(acc, rows, cols, b, backend="torch"))


@pytest.mark.parametrize("backend", BACKENDS)
def test_int8_linear_within_int8_error_and_migration_helps_an_outlier_channel(backend, monkeypatch):
    monkeypatch.setenv("PYTERRIER_TITE_BACKEND_INT8_ROWS", backend)
    torch.manual_seed(2)
    linear, norm = nn.Linear(64, 48), nn.LayerNorm(64)
    with torch.no_grad():
        norm.weight[7] = 40.0  # BERT's outlier channels: one LayerNorm gain far above the rest
    x = norm(torch.randn(5, 11, 64))
    with torch.no_grad():
        reference = linear(x)
        plain = Int8Linear(linear.weight, linear.bias)(x)
        migrated = Int8Linear(linear.weight, linear.bias, migration_factors([linear], norm))(x)
    assert plain.shape == reference.shape == migrated.shape
    error = lambda y: ((y - reference).norm() / reference.norm()).item()  # noqa: E731
    assert error(plain) < 0.05
    if weight_levels() == 127:
        assert error(migrated) < error(plain) / 1.5  # 0.018 -> 0.0096 here
    else:  # weights on 63 levels (no VNNI): the outlier's new home, the weights, lose the gain here, not the ranking
        assert error(migrated) < error(plain) * 1.05


def test_migration_is_exact_before_rounding():
    """``(x / s) (W s)^T == x W^T``: the factors change which values int8 can hold, not the product."""
    torch.manual_seed(3)
    linear, norm = nn.Linear(32, 16).double(), nn.LayerNorm(32)
    s = migration_factors([linear], norm).double()
    x = torch.randn(4, 32, dtype=torch.float64)
    assert torch.allclose((x / s) @ (linear.weight * s).T, x @ linear.weight.T, rtol=1e-12, atol=1e-12)


def test_weights_stay_where_the_int8_gemm_is_exact():
    """On a CPU without VNNI (AVX2 kernels), oneDNN's int8 GEMM saturates int16 pair sums: weights then use 63 levels,
    and a worst-case row (every activation and weight at its largest level) still multiplies exactly."""
    levels = weight_levels()
    assert levels in (63, 127)
    linear = nn.Linear(64, 8)
    with torch.no_grad():
        linear.weight.fill_(1.0)
        linear.bias.zero_()
    layer = Int8Linear(linear.weight, linear.bias)
    assert int(layer.weight_t.abs().max()) == levels
    x = torch.ones(3, 64)
    assert torch.allclose(layer(x), linear(x), rtol=1e-5)


def test_the_amx_matmul_gives_the_int_mm_products():
    """On a CPU with AMX the layer multiplies with oneDNN's AMX matmul (torch._int_mm there is 3.5x slower than bf16),
    row counts rounded up to a few shapes: the same int32 products as ``torch._int_mm``, so the same outputs, and the
    layer survives a copy (its AMX weights are opaque: rebuilt, not copied)."""
    import copy

    from pyterrier_tite.models.int8_linear import amx_int8_matmul

    if not amx_int8_matmul():
        pytest.skip("no AMX int8 matmul on this CPU")
    torch.manual_seed(3)
    linear = nn.Linear(64, 48)
    layer = Int8Linear(linear.weight, linear.bias, torch.rand(64) + 0.5)
    plain = copy.deepcopy(layer)
    plain.amx_weight = None  # torch._int_mm
    for rows in (1, 37, 300):
        x = torch.randn(rows, 64)
        assert torch.allclose(layer(x), plain(x), rtol=1e-6, atol=1e-6)
