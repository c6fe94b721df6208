"""What a SPLADE index costs at query time, for the SPLADE studies: posting-list lengths read from a built PISA index
and SPLADE's expected FLOPS of a query set (``mean_q sum_{t in q} df_t / N``)."""

from __future__ import annotations

import os
from collections.abc import Iterable

from pyterrier_tite.store.pisa_build import PISA_SCALE


def pisa_document_frequencies(path: str) -> tuple[dict[str, int], int]:
    """``({term: posting-list length}, number of documents)`` read from a built PISA index's ``inv.docs``.

    ``inv.docs`` is PISA's binary collection: a sequence ``[num_docs]``, then one ``[length, doc ids...]`` sequence
    per term, in the order of ``fwd.terms``.
    """
    import numpy as np

    data = np.fromfile(os.path.join(path, "inv.docs"), dtype=np.uint32)
    with open(os.path.join(path, "fwd.terms")) as f:
        terms = [line.rstrip("\n") for line in f]
    num_docs, position, lengths = int(data[1]), 2, {}
    for term in terms:
        length = int(data[position])
        lengths[term] = length
        position += 1 + length
    if position != len(data):
        raise ValueError(f"{path}/inv.docs does not match fwd.terms ({position} != {len(data)} words)")
    return lengths, num_docs


def expected_flops(query_toks: Iterable[dict[str, float]], frequencies: dict[str, int], num_docs: int) -> float:
    """The average posting-list cost of the queries, ``mean_q sum_{t in q} df_t / N`` = ``E_{q,d} sum_t p_t(q) p_t(d)``
    (SPLADE's FLOPS / R-FLOPS), counting the query terms that PISA keeps after quantisation (``int(w * scale) > 0``)."""
    costs = [
        sum(frequencies.get(t, 0) for t, w in toks.items() if int(w * PISA_SCALE) > 0) / num_docs for toks in query_toks
    ]
    return float(sum(costs) / len(costs)) if costs else 0.0
