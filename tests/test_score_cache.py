"""Re-ranker scores kept between evaluations (``experiments.common.score_cache``): read back equal and never rescored,
one cache per collection, a fresh cache for a rewritten checkpoint or any setting that moves the scores, and no cache for weights
without a folder."""

from __future__ import annotations

import os

import numpy as np
import pytest
from test_rerankers_pt import frame, tiny_sparse
from test_rerankers_pyterrier import TOKENIZER, count_scored_docs, scores

from experiments.common.score_cache import cached_scores, scores_key
from pyterrier_tite.pt.rerankers import SparseCE

pytestmark = pytest.mark.usefixtures("single_thread")


@pytest.fixture()
def folder(tmp_path) -> str:
    path = tmp_path / "model"
    SparseCE(tiny_sparse(), tokenizer=TOKENIZER).save_pretrained(path)
    return str(path)


def test_scores_are_read_back_equal_and_nothing_is_rescored(folder, tmp_path):
    inp = frame()
    expected = scores(SparseCE(folder, batch_size=4)(inp))
    model = SparseCE(folder, batch_size=4)
    calls = count_scored_docs(model)
    root = str(tmp_path / "cache")
    with cached_scores(model, root, "toy") as scorer:
        first = scorer(inp)
    assert sum(calls) == len(inp)
    with cached_scores(model, root, "toy") as scorer:  # a later evaluation, cache opened again
        again = scorer(inp)
    assert sum(calls) == len(inp)
    for got in (first, again):
        assert len(got) == len(inp) and set(got.columns) >= {"qid", "docno", "score", "rank"}
        np.testing.assert_allclose(scores(got).to_numpy(), expected.loc[scores(got).index].to_numpy(), atol=1e-6)
        assert (got.groupby("qid")["rank"].min() == 0).all()
    with cached_scores(model, root, "other") as scorer:  # docnos repeat across collections: scored for this one
        scorer(inp)
    assert sum(calls) == 2 * len(inp)


def test_key_is_stable_for_the_same_checkpoint_and_settings(folder):
    assert scores_key(SparseCE(folder)) == scores_key(SparseCE(folder)) is not None
    assert scores_key(SparseCE(folder)) == scores_key(SparseCE(os.path.join(folder, ".")))  # one resolved path


@pytest.mark.parametrize(
    "settings",
    [{"w": 2}, {"query_max_length": 5}, {"dtype": "bfloat16"}, {"batch_size": 3}, {"text_field": "body"}],
    ids=lambda s: next(iter(s)),
)
def test_any_setting_that_moves_the_scores_gets_its_own_key(folder, settings):
    assert scores_key(SparseCE(folder, **settings)) != scores_key(SparseCE(folder))


def test_a_release_that_changes_the_scoring_code_gets_a_fresh_cache(folder, monkeypatch):
    from experiments.common import score_cache

    before = scores_key(SparseCE(folder))
    monkeypatch.setattr(score_cache, "SCORING_REVISION", score_cache.SCORING_REVISION + 1)
    assert scores_key(SparseCE(folder)) != before


def test_a_rewritten_checkpoint_gets_a_fresh_cache(folder, tmp_path):
    inp = frame()
    root = str(tmp_path / "cache")
    with cached_scores(SparseCE(folder), root, "toy") as scorer:
        scorer(inp)
    before = scores_key(SparseCE(folder))
    SparseCE(tiny_sparse(), tokenizer=TOKENIZER).save_pretrained(folder)  # retrained: other weights, same folder
    weights = os.path.join(folder, "model.safetensors")
    os.utime(weights, ns=(os.stat(weights).st_atime_ns, os.stat(weights).st_mtime_ns + 10**9))
    model = SparseCE(folder)
    assert scores_key(model) != before
    calls = count_scored_docs(model)
    with cached_scores(model, root, "toy") as scorer:
        got = scorer(inp)
    assert sum(calls) == len(inp)  # nothing of the old checkpoint is read
    np.testing.assert_allclose(scores(got).to_numpy(), scores(SparseCE(folder)(inp)).loc[scores(got).index], atol=1e-6)


def test_weights_without_a_folder_are_scored_afresh(folder, tmp_path):
    in_memory = SparseCE(tiny_sparse(), tokenizer=TOKENIZER)
    own_tokenizer = SparseCE(folder, tokenizer=TOKENIZER)  # not the folder's tokenizer: no stable key either
    for model in (in_memory, own_tokenizer):
        assert scores_key(model) is None
        with cached_scores(model, str(tmp_path / "cache"), "toy") as scorer:
            assert scorer is model
    with cached_scores(SparseCE(folder), None, "toy") as scorer:  # no cache folder given
        assert isinstance(scorer, SparseCE)
    assert not (tmp_path / "cache").exists()


def test_the_model_sees_the_rows_in_input_order_so_bf16_batches_are_the_same(folder, tmp_path, monkeypatch):
    """The cache groups its misses by query text; handed back in input order, every batch is what direct scoring
    would build, so a bf16 model's scores (which move by an ulp with the batch composition) are the same too."""
    inp = frame().sort_values("query", ascending=False, kind="stable").reset_index(drop=True)
    assert inp["query"].nunique() > 1  # in descending query order: the cache's grouping would reverse the queries
    model = SparseCE(folder, batch_size=4, dtype="bfloat16")
    seen = []
    transform = SparseCE.transform
    monkeypatch.setattr(SparseCE, "transform", lambda self, f: seen.append(f["docno"].tolist()) or transform(self, f))
    direct = model(inp)
    with cached_scores(model, str(tmp_path / "cache"), "toy") as scorer:
        cached = scorer(inp)
    assert seen[1] == seen[0] == inp["docno"].tolist()
    assert scores(cached).loc[scores(direct).index].tolist() == scores(direct).tolist()
