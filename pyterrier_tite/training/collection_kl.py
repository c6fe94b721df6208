"""Distil how the teacher's queries rank the whole collection, not only the batch.

nDCG@10 depends on where a document lands among *all* documents of the collection for a query. The in-batch KL and
the anchor bank (:mod:`.vector_distillation`) compare a batch's ~30 documents with each other, mostly texts no query
confuses. This term takes each bank query's distribution over every document of the data, with the teacher's vectors
for all documents but the batch's, which hold the student's:

``KL_q = KL(softmax_D(q . t_d / tau) || softmax_D(q . v_d / tau))``, ``v_d = s_d`` for the batch's documents and
``t_d`` otherwise.

Outside the batch the two distributions share their logits, so the KL needs only the batch's logits and each query's
log-partition over the teacher's documents, computed once (:func:`collection_log_partition`); a step costs one
``[n, M]`` product, like the anchor term. A query contributes only where the batch holds documents it ranks near the
top (the student's error elsewhere moves neither distribution), so the term weighs exactly the errors that reorder a
query's top documents, on the teacher's scale of scores for the rest of the collection.

Measured (docs/results.md, "The whole collection in the loss"): at 500 steps the student fits the teacher's vectors
better with it (cosine and anchor terms 5% lower) but ranks no better (+0.001 to +0.004 nDCG@10, one seed), so
``distill-tite`` leaves it off (``--collection-weight``).
"""

from __future__ import annotations

import torch


def collection_log_partition(
    queries: torch.Tensor, documents: torch.Tensor, temperature: float, chunk: int = 4096
) -> torch.Tensor:
    """``[M]``: ``logsumexp_d(q . t_d / tau)`` of each query over all documents; ``queries`` ``[M, D]`` and
    ``documents`` ``[N, D]``, L2-normalised, fp32. Chunked over queries so the ``[M, N]`` scores never exist
    whole."""
    if documents.shape[0] == 0:
        raise ValueError("the collection term needs documents in the data")
    documents = documents.float()
    out = queries.new_empty(queries.shape[0], dtype=torch.float32)
    with torch.no_grad():
        for start in range(0, queries.shape[0], chunk):
            scores = queries[start : start + chunk].float() @ documents.T / temperature
            out[start : start + chunk] = torch.logsumexp(scores, dim=-1)
    return out


def collection_kl(
    student: torch.Tensor,
    teacher: torch.Tensor,
    queries: torch.Tensor,
    log_partition: torch.Tensor,
    temperature: float,
) -> torch.Tensor:
    """Sum over the bank's queries of ``KL_q`` (module docstring), divided by the batch's documents.

    ``student`` / ``teacher``: ``[n, D]`` L2-normalised vectors of the batch's documents (the teacher's among those
    behind ``log_partition``); ``queries``: ``[M, D]``; ``log_partition``: :func:`collection_log_partition` of the
    same queries over all documents."""
    if student.shape[0] == 0:
        return student.new_zeros(())
    s = (student.float() @ queries.T / temperature).T  # [M, n]
    t = (teacher.float() @ queries.T / temperature).T
    total = log_partition[:, None]
    # the rest of the collection: total minus the batch's teacher mass, log(1 - exp(batch - total)) done stably;
    # a batch holding all of a query's mass (to rounding) leaves an empty rest
    batch_share = (torch.logsumexp(t, dim=-1, keepdim=True) - total).clamp(max=-1e-6)
    rest = total + torch.log(-torch.expm1(batch_share))
    student_total = torch.logsumexp(torch.cat([rest, s], dim=-1), dim=-1, keepdim=True)
    teacher_p = torch.exp(t - total)
    kl = (teacher_p * (t - s)).sum(-1) + (student_total - total).squeeze(-1)
    return kl.sum() / student.shape[0]
