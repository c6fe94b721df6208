"""Re-ranker scores kept between evaluations (``experiments.common.score_cache``): read back equal, keyed by
everything that moves them, never rescored."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest
import torch

from experiments.common.score_cache import cached_scores, scores_key
from pyterrier_tite.models import SparseCrossEncoder
from pyterrier_tite.pt.rerankers import SparseCE
from tests._tiny import sparse_ce, word_tokenizer

pytestmark = pytest.mark.usefixtures("single_thread")


# ------------------------------------------------------------------------------------------------------------ scores
TOKENIZER = word_tokenizer()


def tiny_sparse() -> SparseCrossEncoder:
    return sparse_ce(4)


def frame(n_queries=3, n_docs=5, seed=0) -> pd.DataFrame:
    gen = torch.Generator().manual_seed(seed)
    rows = []
    for q in range(n_queries):
        query = " ".join(f"w{int(i)}" for i in torch.randint(0, 59, (2 + q,), generator=gen))
        for d in range(n_docs):
            length = int(torch.randint(1, 20, (1,), generator=gen))
            text = " ".join(f"w{int(i)}" for i in torch.randint(0, 59, (length,), generator=gen))
            rows.append({"qid": f"q{q}", "query": query, "docno": f"d{q}-{d}", "text": text, "score": 0.0})
    return pd.DataFrame(rows)


def scores(out: pd.DataFrame) -> pd.Series:
    return out.assign(qid=out["qid"].astype(str), docno=out["docno"].astype(str)).set_index(["qid", "docno"])["score"]


def count_scored_docs(reranker) -> list[int]:
    """Docs scored by the model, one entry per forward call."""
    calls: list[int] = []
    reranker.scorer.register_forward_hook(lambda module, args, out: calls.append(len(out)))
    return calls


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
