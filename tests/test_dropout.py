"""The counter-based CPU dropout (``ops.dropout``): the same distribution as ``F.dropout`` (drop rate, independence,
unbiased scale), a backward pass that masks the gradient exactly like the forward pass, reproducible from torch's
seed and independent of the thread count, and swapped into models for training."""

from __future__ import annotations

import math

import pytest
import torch
from _tiny import bert_config
from torch import nn
from transformers import BertModel

from pyterrier_tite.ops import Dropout, dropout, use_fast_dropout
from pyterrier_tite.ops._extension import has_csrc
from pyterrier_tite.ops.dropout import _CounterDropout

pytestmark = pytest.mark.skipif(not has_csrc(), reason="the compiled CPU kernels are not available")

DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float64]


def keep_probability(p: float) -> float:
    """The kernel's p is quantised to 1/65536."""
    return 1 - round(p * 65536) / 65536


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_drop_rate_and_scale(dtype, p):
    x = torch.rand(1000, 1001, dtype=torch.float32).add_(0.5).to(dtype)  # odd size: a last block of fewer than 4
    torch.manual_seed(0)
    y = dropout(x, p)
    kept = y != 0
    q, n = keep_probability(p), x.numel()
    assert abs(kept.double().mean().item() - q) < 6 * math.sqrt(q * (1 - q) / n)  # binomial, 6 sigma
    scale = 65536 / (65536 - round(p * 65536))  # 1 / q, as the kernel computes it (then in float for half types)
    scaled = x * scale if dtype == torch.float64 else (x.float() * scale).to(dtype)
    torch.testing.assert_close(y[kept], scaled[kept], rtol=0, atol=0)


def test_masks_are_independent_across_neighbouring_elements_and_calls():
    x = torch.ones(2**20)
    torch.manual_seed(1)
    a, b = (dropout(x, 0.5) != 0).double(), (dropout(x, 0.5) != 0).double()
    for lag in (1, 2, 3, 4, 5, 8):  # within one 64-bit hash (lags 1-3) and across hashes
        assert abs(torch.corrcoef(torch.stack([a[:-lag], a[lag:]]))[0, 1].item()) < 0.01
    assert abs(torch.corrcoef(torch.stack([a, b]))[0, 1].item()) < 0.01  # a new seed per call


def test_backward_masks_the_gradient_like_the_forward_pass():
    x = torch.randn(64, 33, requires_grad=True)
    y = dropout(x, 0.3)
    weights = torch.randn_like(y)
    (y * weights).sum().backward()
    mask = (y != 0).float() / keep_probability(0.3)
    torch.testing.assert_close(x.grad, weights * mask, rtol=1e-6, atol=0)
    x64 = torch.randn(7, 5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: _CounterDropout.apply(t, 0.3, 1234), (x64,))


def test_reproducible_from_torch_seed_and_independent_of_threads():
    x = torch.randn(300, 301)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        torch.manual_seed(5)
        one = dropout(x, 0.1)
        torch.set_num_threads(2)
        torch.manual_seed(5)
        two = dropout(x, 0.1)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(one, two)
    assert not torch.equal(one, dropout(x, 0.1))


def test_edge_cases():
    x = torch.randn(10, 10)
    assert dropout(x, 0.0) is x and dropout(x, 0.5, training=False) is x
    assert torch.equal(dropout(x, 1.0), torch.zeros_like(x))
    assert dropout(torch.empty(0, 3), 0.5).shape == (0, 3)
    t = torch.randn(50, 40).t()  # not contiguous
    assert dropout(t, 0.5).shape == t.shape
    with pytest.raises(ValueError, match="between 0 and 1"):
        dropout(x, 1.5)
    torch.manual_seed(3)
    native = torch.nn.functional.dropout(x, 0.5)
    torch.manual_seed(3)
    assert torch.equal(dropout(x, 0.5, backend="torch"), native)  # the reference backend is F.dropout
    assert dropout(torch.empty(4, 4, device="meta"), 0.5).device.type == "meta"  # other devices: F.dropout


def test_models_get_the_kernel_for_training_and_compute_the_same_in_eval():
    config = bert_config(50, layers=2)
    model = BertModel(config).eval()
    ids = torch.randint(0, 50, (2, 9))
    before, keys = model(ids).last_hidden_state, list(model.state_dict())
    plain = sum(type(m) is nn.Dropout for m in model.modules())
    assert use_fast_dropout(model) == plain > 0
    assert not any(type(m) is nn.Dropout for m in model.modules()) and list(model.state_dict()) == keys
    assert all(not m.training for m in model.modules() if isinstance(m, Dropout))
    torch.testing.assert_close(model(ids).last_hidden_state, before, rtol=0, atol=0)
    model.train()
    torch.manual_seed(0)
    a = model(ids).last_hidden_state
    torch.manual_seed(0)
    torch.testing.assert_close(model(ids).last_hidden_state, a, rtol=0, atol=0)  # reproducible from the seed
    assert use_fast_dropout(model) == 0  # nothing left to swap


def test_one_op_can_be_sent_to_the_reference_by_environment(monkeypatch):
    x = torch.randn(20, 20)
    monkeypatch.setenv("PYTERRIER_TITE_BACKEND_DROPOUT", "torch")
    torch.manual_seed(4)
    native = torch.nn.functional.dropout(x, 0.2)
    torch.manual_seed(4)
    assert torch.equal(dropout(x, 0.2), native)
