"""Packed <-> padded layouts of TITE's stages: every row lands in its own slot, padding is zero, gradients flow."""

from __future__ import annotations

import pytest
import torch

from pyterrier_tite.models.packing import PackedLayout


def _reference_pad(x: torch.Tensor, lengths: list[int]) -> torch.Tensor:
    out = torch.zeros(len(lengths), max(lengths), *x.shape[1:], dtype=x.dtype)
    start = 0
    for sequence, length in enumerate(lengths):
        out[sequence, :length] = x[start : start + length]
        start += length
    return out


@pytest.mark.parametrize("lengths", [[3, 1, 0, 5], [4, 4, 4], [0, 2], [7]])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_pad_places_rows_and_zeros_padding(lengths: list[int], dtype: torch.dtype) -> None:
    layout = PackedLayout.from_lengths(torch.tensor(lengths), "cpu")
    x = torch.randn(sum(lengths), 2, 3).to(dtype)
    padded = layout.pad(x)
    assert torch.equal(padded, _reference_pad(x, lengths))
    assert torch.equal(layout.unpad(padded), x)


def test_pad_overwrites_uninitialised_memory() -> None:
    """Every padding slot is zero even when the allocator hands out dirty memory (an implementation that starts from
    an empty tensor must write the padding)."""
    layout = PackedLayout.from_lengths(torch.tensor([1, 6, 2]), "cpu")
    for _ in range(20):
        torch.full((64, 8), float("nan"))  # leave NaN-filled blocks in the allocator's cache
        padded = layout.pad(torch.ones(9, 8))
        assert torch.isfinite(padded).all() and padded.sum() == 72


def test_pad_passes_gradients_to_the_packed_rows() -> None:
    lengths = [2, 0, 3]
    layout = PackedLayout.from_lengths(torch.tensor(lengths), "cpu")
    x = torch.randn(5, 4, requires_grad=True)
    weights = torch.randn(3, 3, 4)
    (layout.pad(x) * weights).sum().backward()
    expected = torch.cat([weights[0, :2], weights[2, :3]])
    assert torch.equal(x.grad, expected)
