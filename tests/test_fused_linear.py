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
