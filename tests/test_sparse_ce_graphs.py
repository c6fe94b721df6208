"""The CPU-checkable half of the sparse cross-encoder's CUDA graphs: buckets, and that padding a batch to its bucket
leaves the real rows' scores unchanged (the graphs replay padded batches). Capture and replay: tests/test_gpu.py."""

from __future__ import annotations

import pytest
import torch
from _tiny import tiny_sparse_ce
from _tolerance import assert_float_close

from pyterrier_tite.models.cross_encoder.modeling import CrossEncoderScorer
from pyterrier_tite.models.cross_encoder.tokenization import SparseCrossEncoderBatch
from pyterrier_tite.models.sparse_ce.graphs import Bucket, SparseCEGraphs, bucket_of, pad_batch

pytestmark = pytest.mark.usefixtures("single_thread")


def _tiny(window, symmetric: bool):
    return tiny_sparse_ce(window, symmetric, hidden=32, max_positions=128)


def _inputs(seed: int = 1):
    gen = torch.Generator().manual_seed(seed)
    queries = [torch.randint(1, 100, (n,), generator=gen).tolist() for n in (5, 9, 3)]
    doc_lengths = ((40, 3, 70), (17,), (1, 33))
    docs = [[torch.randint(1, 100, (n,), generator=gen).tolist() for n in ns] for ns in doc_lengths]
    return queries, docs


@pytest.mark.parametrize("n", [1, 2, 3, 7, 8, 9, 31, 64, 100, 164, 165, 500, 1025])
def test_a_bucket_holds_the_batch_with_at_most_an_eighth_or_seven_more_tokens(n):
    batch = SparseCrossEncoderBatch(
        torch.zeros(3, n, dtype=torch.long), torch.full((3,), n), torch.zeros(n, n, dtype=torch.long),
        torch.full((n,), n), torch.zeros(n, dtype=torch.long),
    )  # fmt: skip
    bucket = bucket_of(batch)
    assert bucket.queries == 4 and bucket.docs >= n and bucket.docs < 2 * n + 1
    for length in (bucket.query_length, bucket.doc_length):
        assert length >= n and length % 8 == 0
        assert length <= max(n + 7, n * 1.125)
    assert bucket_of(pad_batch(batch, bucket)) == bucket  # a padded batch is its own bucket: one graph


@pytest.mark.parametrize("window,symmetric", [(4, False), (1, True), (None, False), (None, True)])
def test_padding_to_the_bucket_leaves_the_real_rows_scores_unchanged(window, symmetric):
    model = _tiny(window, symmetric)
    queries, docs = _inputs()
    batch = SparseCrossEncoderBatch.from_lists(queries, docs, pad_token_id=0)
    bucket = Bucket(queries=4, docs=8, query_length=16, doc_length=96)
    with torch.no_grad():
        expected = model(batch).logits
        padded = model(pad_batch(batch, bucket)).logits
    assert padded.shape == (8,)
    assert_float_close(padded[: len(expected)], expected)


def test_padding_leaves_the_celi_parts_unchanged():
    scorer = CrossEncoderScorer(_tiny(4, False), head="celi", token_dim=8).eval()
    queries, docs = _inputs(2)
    batch = SparseCrossEncoderBatch.from_lists(queries, docs, pad_token_id=0)
    with torch.no_grad():
        expected = scorer._sparse_parts(batch)
        padded = scorer._sparse_parts(pad_batch(batch, bucket_of(batch)))
    assert set(padded) == {"cls", "late"}
    for name in expected:
        assert_float_close(padded[name][: len(expected[name])], expected[name])


def test_a_batch_too_large_for_the_bucket_is_refused():
    queries, docs = _inputs()
    batch = SparseCrossEncoderBatch.from_lists(queries, docs)
    with pytest.raises(ValueError, match="do not fit"):
        pad_batch(batch, Bucket(queries=4, docs=8, query_length=16, doc_length=64))
    with pytest.raises(ValueError, match="does not fit"):
        pad_batch(batch, Bucket(queries=2, docs=8, query_length=16, doc_length=96))


def test_without_a_gpu_the_graphs_run_the_forward_itself():
    scorer = CrossEncoderScorer(_tiny(4, False)).eval().use_cuda_graphs()
    assert scorer._graphs is not None
    queries, docs = _inputs()
    with torch.no_grad():
        got = scorer(queries, docs)
        scorer.use_cuda_graphs(False)
        expected = scorer(queries, docs)
    torch.testing.assert_close(got, expected, atol=0, rtol=0)
    assert len(scorer.use_cuda_graphs()._graphs or []) == 0


def test_the_position_check_runs_on_the_host_copy_before_any_graph():
    model = _tiny(4, False)
    scorer = CrossEncoderScorer(model).eval().use_cuda_graphs()
    graphs: SparseCEGraphs = scorer._graphs
    long_doc = [[list(range(1, 130))]]
    with pytest.raises(ValueError, match="positions"):
        graphs.check(SparseCrossEncoderBatch.from_lists([[5, 6]], long_doc))


def test_a_copied_scorer_keeps_its_graph_setting_but_not_the_graphs():
    import copy

    scorer = CrossEncoderScorer(_tiny(4, False)).eval().use_cuda_graphs()
    scorer._graphs._graphs["sentinel"] = object()  # stands in for a captured graph (no GPU here)
    twin = copy.deepcopy(scorer)
    assert twin._graphs is not None and len(twin._graphs) == 0 and twin._graphs.module is twin
    # the copy replays under a lock of its own (a lock cannot be copied; sharing one would serialise the twins)
    assert twin._graphs._lock is not scorer._graphs._lock and twin._graphs._lock.acquire(blocking=False)
