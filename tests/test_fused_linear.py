"""ConcatenatedLinears: several projections as one GEMM, cached in inference and rebuilt when a weight changes."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from pyterrier_tite.models.fused_linear import ConcatenatedLinears


def _linears() -> list[nn.Linear]:
    torch.manual_seed(0)
    return [nn.Linear(4, 3), nn.Linear(4, 2)]


def test_concatenation_equals_the_separate_projections():
    linears, x = _linears(), torch.randn(5, 4)
    weight, bias = ConcatenatedLinears().get("ab", linears)
    torch.testing.assert_close(F.linear(x, weight, bias), torch.cat([lin(x) for lin in linears], -1))


def test_cached_in_inference_and_rebuilt_after_a_change():
    linears, fused = _linears(), ConcatenatedLinears()
    with torch.no_grad():
        first = fused.get("ab", linears)[0]
        assert fused.get("ab", linears)[0] is first
        linears[1].weight.mul_(2)  # in place: the version counter moves
        second = fused.get("ab", linears)[0]
        assert second is not first and torch.equal(second[3:], linears[1].weight)
        linears[0].weight = nn.Parameter(torch.zeros(3, 4))  # reassigned: the storage moves
        assert torch.equal(fused.get("ab", linears)[0][:3], torch.zeros(3, 4))


def test_not_cached_with_autograd_and_gradients_reach_the_parameters():
    linears, fused = _linears(), ConcatenatedLinears()
    weight, bias = fused.get("ab", linears)
    assert fused.get("ab", linears)[0] is not weight
    F.linear(torch.randn(2, 4), weight, bias).sum().backward()
    assert all(lin.weight.grad is not None and lin.bias.grad is not None for lin in linears)


def test_prepare_transforms_each_projection():
    linears = _linears()
    weight, bias = ConcatenatedLinears().get("ab", linears, prepare=lambda i, t: -t if i == 0 else t)
    assert torch.equal(weight[:3], -linears[0].weight) and torch.equal(bias[3:], linears[1].bias)


def test_fused_linear_gelu_equals_gelu_of_linear_for_any_row_count():
    """Chunked and padded, the fused kernel still gives ``gelu(dense(x))`` for every row (leading dims kept)."""
    from _tolerance import assert_float_close

    from pyterrier_tite.models.fused_linear import FUSED_CHUNK_ROWS, linear_gelu

    torch.manual_seed(0)
    dense = nn.Linear(8, 32)
    with torch.no_grad():
        for rows in (1, 7, 100, FUSED_CHUNK_ROWS, FUSED_CHUNK_ROWS + 1, 2 * FUSED_CHUNK_ROWS + 333):
            x = torch.randn(rows, 8)
            assert_float_close(linear_gelu(dense, F.gelu, x), F.gelu(dense(x)))
        x = torch.randn(3, 5, 8)
        assert_float_close(linear_gelu(dense, F.gelu, x), F.gelu(dense(x)))


def test_fused_kernel_sees_a_bounded_set_of_shapes(monkeypatch):
    """oneDNN keeps a primitive (with its buffers) per input shape: however many different token counts a long run
    brings, the fused kernel is called with a few dozen row counts, so memory does not grow with the run."""
    from pyterrier_tite.models import fused_linear

    if not fused_linear._fused_linear_gelu_works():
        import pytest

        pytest.skip("this torch build has no oneDNN linear + GELU")
    seen = set()
    real = fused_linear._onednn_linear_gelu

    def record(x, weight, bias):
        seen.add(x.shape[0])
        return real(x, weight, bias)

    monkeypatch.setattr(fused_linear, "_onednn_linear_gelu", record)
    dense = nn.Linear(4, 8)
    with torch.no_grad():
        for rows in range(1, 5000, 7):
            assert fused_linear.linear_gelu(dense, F.gelu, torch.randn(rows, 4)).shape == (rows, 8)
    assert len(seen) <= 60, sorted(seen)
    assert max(seen) <= fused_linear.FUSED_CHUNK_ROWS
    assert all(fused_linear.fused_row_bucket(r) <= r * 1.125 + 16 for r in range(1, fused_linear.FUSED_CHUNK_ROWS))
