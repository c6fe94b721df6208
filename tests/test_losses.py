"""Losses against hand-written versions of their formulas; warm-up schedule; gradients point the right way."""

from __future__ import annotations

import math

import pytest
import torch

from pyterrier_tite.training.losses import (
    QuadraticWarmup,
    SpladeLoss,
    aggretriever_loss,
    contrastive_loss,
    flops,
    group_scores,
    margin_mse,
)


def nll(scores: list[float], target: int) -> float:
    return -scores[target] + math.log(sum(math.exp(s) for s in scores))


def test_flops_is_sum_of_squared_mean_activations():
    w = torch.tensor([[1.0, 0.0, 2.0], [3.0, 0.0, 0.0]])
    assert flops(w).item() == pytest.approx(2.0**2 + 0.0 + 1.0**2)
    assert flops(torch.zeros(0, 3)).item() == 0.0


def test_flops_penalises_shared_terms_more_than_l1():
    """Same total mass; spreading it over distinct terms costs less FLOPS (that is the point of FLOPS)."""
    shared = torch.tensor([[1.0, 0.0], [1.0, 0.0]])
    spread = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    assert shared.sum() == spread.sum()
    assert flops(shared) > flops(spread)


def test_quadratic_warmup():
    warm = QuadraticWarmup(weight=0.8, warmup_steps=100)
    assert [warm(0), warm(50), warm(100), warm(1000)] == pytest.approx([0.0, 0.2, 0.8, 0.8])
    assert QuadraticWarmup(0.5, 0)(0) == 0.5


def test_contrastive_loss_in_batch_and_in_group():
    torch.manual_seed(0)
    q, d = torch.randn(2, 4), torch.randn(6, 4)  # 2 queries, 3 docs each (positive first)
    scores = (q @ d.T).tolist()
    in_batch = (nll(scores[0], 0) + nll(scores[1], 3)) / 2
    in_group = (nll(scores[0][0:3], 0) + nll(scores[1][3:6], 0)) / 2
    assert contrastive_loss(q, d).item() == pytest.approx(in_batch, rel=1e-5)
    assert contrastive_loss(q, d, in_batch=False).item() == pytest.approx(in_group, rel=1e-5)
    assert group_scores(q, d).shape == (2, 3)
    with pytest.raises(ValueError, match="multiple"):
        contrastive_loss(q, d[:5])
    assert contrastive_loss(torch.zeros(0, 4), torch.zeros(0, 4)).item() == 0.0


def test_contrastive_gradient_raises_positive_score():
    torch.manual_seed(1)
    q = torch.randn(3, 8, requires_grad=True)
    d = torch.randn(6, 8)
    before = group_scores(q, d)[:, 0].sum().item()
    contrastive_loss(q, d).backward()
    with torch.no_grad():
        q -= 0.1 * q.grad
    assert group_scores(q, d)[:, 0].sum().item() > before


def test_margin_mse():
    pos, neg = torch.tensor([3.0, 1.0]), torch.tensor([1.0, 2.0])
    tpos, tneg = torch.tensor([5.0, 0.0]), torch.tensor([1.0, 0.0])
    assert margin_mse(pos, neg, tpos, tneg).item() == pytest.approx(((2 - 4) ** 2 + (-1 - 0) ** 2) / 2)
    many = margin_mse(pos, torch.stack([neg, neg], 1), tpos, torch.stack([tneg, tneg], 1))
    assert many.item() == pytest.approx(margin_mse(pos, neg, tpos, tneg).item())
    assert margin_mse(pos, neg, pos + 7, neg + 7).item() == 0.0  # only margins matter


def test_splade_loss_terms_and_warmup():
    torch.manual_seed(2)
    q, d = torch.rand(2, 10), torch.rand(4, 10)
    loss = SpladeLoss(lambda_q=0.1, lambda_d=0.2, warmup_steps=10)
    start = loss(q, d, step=0)
    assert start["flops_q"].item() == 0.0 and start["flops_d"].item() == 0.0
    assert start["loss"].item() == pytest.approx(contrastive_loss(q, d).item())
    later = loss(q, d, step=20, teacher_scores=torch.tensor([[2.0, 1.0], [0.0, 3.0]]))
    assert later["flops_q"].item() == pytest.approx(0.1 * flops(q).item())
    assert later["flops_d"].item() == pytest.approx(0.2 * flops(d).item())
    assert "margin_mse" in later
    parts = sum(v for k, v in later.items() if k != "loss")
    assert later["loss"].item() == pytest.approx(parts.item())


def test_aggretriever_loss_is_nll_plus_half_of_each_part():
    torch.manual_seed(3)
    qc, qa, dc, da = torch.randn(2, 3), torch.randn(2, 5), torch.randn(4, 3), torch.randn(4, 5)
    full = (qc @ dc.T + qa @ da.T).tolist()
    agg, cls = (qa @ da.T).tolist(), (qc @ dc.T).tolist()

    def mean_nll(scores):
        return (nll(scores[0], 0) + nll(scores[1], 2)) / 2

    expected = mean_nll(full) + 0.5 * mean_nll(agg) + 0.5 * mean_nll(cls)
    assert aggretriever_loss(qc, qa, dc, da)["loss"].item() == pytest.approx(expected, rel=1e-5)


def test_losses_compute_in_float32_inside_autocast():
    """Under bf16 autocast (how --precision bf16 runs the forward pass) every loss is a float32 computation: the
    same value as outside autocast on the same (bf16-representable) inputs."""
    from pyterrier_tite.training.losses import SpladeLoss

    gen = torch.Generator().manual_seed(0)
    q = torch.rand(4, 300, generator=gen).bfloat16().float()
    d = torch.rand(8, 300, generator=gen).bfloat16().float()
    teacher = torch.randn(4, 2, generator=gen)
    loss = SpladeLoss(lambda_q=1e-2, lambda_d=1e-2, warmup_steps=0)
    plain = loss(q, d, step=5, teacher_scores=teacher)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mixed = loss(q.bfloat16(), d.bfloat16(), step=5, teacher_scores=teacher)
    for name, value in plain.items():
        assert mixed[name].dtype == torch.float32, name
        torch.testing.assert_close(mixed[name], value, rtol=1e-6, atol=1e-6, msg=name)


def test_aggretriever_loss_without_agg_part_is_the_plain_cls_nll():
    """The CLS baseline (``agg_dim`` 0) is trained with the NLL of its score once, not 1.5 times."""
    torch.manual_seed(4)
    qc, dc = torch.randn(2, 3), torch.randn(4, 3)
    terms = aggretriever_loss(qc, qc[:, :0], dc, dc[:, :0])
    assert set(terms) == {"nll", "loss"}
    torch.testing.assert_close(terms["loss"], contrastive_loss(qc, dc))
