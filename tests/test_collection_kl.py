"""The collection term: each bank query's KL over every document, the batch's documents on the student's vectors."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from pyterrier_tite.training.collection_kl import collection_kl, collection_log_partition


def _unit(*shape: int, seed: int) -> torch.Tensor:
    return F.normalize(torch.randn(*shape, generator=torch.Generator().manual_seed(seed)), dim=-1)


def _brute_force(student, teacher_docs, batch, queries, temperature) -> float:
    """The definition: per query, KL between softmaxes over all documents, the batch's rows replaced by the
    student's vectors; summed over queries, divided by the batch's documents (fp64)."""
    mixed = teacher_docs.double().clone()
    mixed[batch] = student.double()
    t = queries.double() @ teacher_docs.double().T / temperature
    s = queries.double() @ mixed.T / temperature
    kl = (F.softmax(t, -1) * (F.log_softmax(t, -1) - F.log_softmax(s, -1))).sum()
    return float(kl) / len(batch)


@pytest.mark.parametrize("temperature", [0.05, 1.0])
def test_the_term_is_the_kl_over_the_whole_collection(temperature):
    docs, queries = _unit(50, 16, seed=0), _unit(30, 16, seed=1)
    # queries close to some documents, so a few of them put most of their mass on a batch document
    queries[:5] = F.normalize(docs[[3, 7, 7, 11, 40]] + 0.1 * queries[:5], dim=-1)
    batch = torch.tensor([3, 7, 11, 20])
    student = F.normalize(docs[batch] + 0.3 * _unit(4, 16, seed=2), dim=-1)
    partition = collection_log_partition(queries, docs, temperature, chunk=7)  # chunks of 7 queries
    got = float(collection_kl(student, docs[batch], queries, partition, temperature))
    assert got == pytest.approx(_brute_force(student, docs, batch, queries, temperature), rel=1e-4, abs=1e-6)
    assert got > 0


def test_the_term_vanishes_when_the_student_reproduces_the_teacher():
    docs, queries = _unit(40, 8, seed=3), _unit(25, 8, seed=4)
    queries[0] = docs[5]  # a query whose mass sits almost wholly on a batch document (the rest nearly empty)
    batch = torch.tensor([1, 5, 9])
    partition = collection_log_partition(queries, docs, 0.05)
    # fp32 logits up to 1 / 0.05 = 20 carry ~20 * 1.2e-7 rounding each; over 25 queries and 3 documents the sum can
    # reach a few 1e-5 on any CPU, so the bound is 1e-4 (a wrong partition is off by far more)
    assert float(collection_kl(docs[batch], docs[batch], queries, partition, 0.05)) == pytest.approx(0.0, abs=1e-4)


def test_only_the_batchs_student_vectors_get_gradients_and_the_term_pulls_them_to_the_teacher():
    docs, queries = _unit(60, 16, seed=5), _unit(40, 16, seed=6)
    batch = torch.tensor([0, 10, 20, 30])
    queries[:4] = F.normalize(docs[batch] + 0.2 * queries[:4], dim=-1)
    partition = collection_log_partition(queries, docs, 0.05)
    raw = (docs[batch] + 0.5 * _unit(4, 16, seed=7)).requires_grad_(True)
    before = float(collection_kl(F.normalize(raw, dim=-1), docs[batch], queries, partition, 0.05))
    optimiser = torch.optim.SGD([raw], lr=0.05)
    for _ in range(50):
        optimiser.zero_grad()
        collection_kl(F.normalize(raw, dim=-1), docs[batch], queries, partition, 0.05).backward()
        optimiser.step()
    after = float(collection_kl(F.normalize(raw, dim=-1), docs[batch], queries, partition, 0.05))
    assert after < 0.5 * before
    assert collection_kl(F.normalize(raw[:0], dim=-1), docs[:0], queries, partition, 0.05).item() == 0.0


def test_the_partition_needs_documents():
    with pytest.raises(ValueError, match="needs documents"):
        collection_log_partition(_unit(3, 4, seed=8), torch.zeros(0, 4), 0.05)
