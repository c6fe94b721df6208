"""Rerankers as PyTerrier citizens: equality by what determines the scores (so ``plan='tree'`` shares a first
stage), no rank-cutoff fusion, inspection and schematic through ``pt.testing``, progress bars, pointwise scoring
behind ``pyterrier_caching.ScorerCache``, and bad input refused by id (missing text / query, one qid with two
query texts) while integer ids work."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pyterrier as pt
import pytest
from test_rerankers_pt import WORDS, frame, tiny_bert, tiny_sparse
from transformers import BertTokenizerFast

from pyterrier_tite.pt.rerankers import CELI, MonoCE, SparseCE
from pyterrier_tite.training.rerankers import RerankerTrainingData

pytestmark = pytest.mark.usefixtures("single_thread")

TOKENIZER = BertTokenizerFast(vocab={w: i for i, w in enumerate(WORDS)}, do_lower_case=True)


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> str:
    """A saved SparseCE (w=4, released pattern, cls head) with its tokenizer."""
    path = tmp_path_factory.mktemp("sparse_ce")
    SparseCE(tiny_sparse(), tokenizer=TOKENIZER).save_pretrained(path)
    return str(path)


def scores(out: pd.DataFrame) -> pd.Series:
    return out.assign(qid=out["qid"].astype(str), docno=out["docno"].astype(str)).set_index(["qid", "docno"])["score"]


def count_scored_docs(reranker) -> list[int]:
    """Docs scored by the model, one entry per forward call."""
    calls: list[int] = []
    reranker.scorer.register_forward_hook(lambda module, args, out: calls.append(len(out)))
    return calls


# ------------------------------------------------------------------------------------------- equality, tree plans
def test_equal_when_the_same_folder_and_settings_determine_the_scores(folder):
    a, b = SparseCE(folder), SparseCE(folder, w=4, batch_size=3)  # w=4 is the folder's own; batch size is no setting
    assert a == b and hash(a) == hash(b)
    assert a != SparseCE(folder, w=2) and a != SparseCE(folder, symmetric=True)
    assert a != SparseCE(folder, query_max_length=5) and a != SparseCE(folder, text_field="body")
    assert a != SparseCE(folder, tokenizer=TOKENIZER)  # a tokenizer of its own is not the folder's
    with pytest.warns(UserWarning, match="'celi' score head"):
        fresh = CELI(folder)  # a new random head: equal only to itself
    with pytest.warns(UserWarning, match="'celi' score head"):
        assert fresh == fresh and fresh != CELI(folder)
    in_memory = SparseCE(tiny_sparse(), tokenizer=TOKENIZER)
    assert in_memory == in_memory and in_memory != SparseCE(tiny_sparse(), tokenizer=TOKENIZER)
    assert in_memory == SparseCE(in_memory.scorer, tokenizer=in_memory.tokenizer)  # the same model object


def test_repr_tells_attention_patterns_apart(folder):
    """Two sparse models that score differently must not print alike in a log or an experiment table; the model's
    name shows first (a folder by its last component)."""
    name = repr(os.path.basename(str(folder).rstrip("/")))
    assert repr(SparseCE(folder)) == f"SparseCE({name}, w=4, head='cls')"
    assert repr(SparseCE(folder, symmetric=True)) == f"SparseCE({name}, w=4, symmetric=True, head='cls')"
    assert repr(SparseCE(folder, w=None, doc_cls_attention=False)) == (
        f"SparseCE({name}, w=inf, doc_cls_attention=False, head='cls')"
    )
    assert repr(SparseCE(folder, query_cls_attention=True)) == (
        f"SparseCE({name}, w=4, query_cls_attention=True, head='cls')"
    )
    assert repr(MonoCE(tiny_bert(), tokenizer=TOKENIZER)) == "MonoCE(w=inf, head='cls')"


class FirstStage(pt.Transformer):
    """A first-stage stub that counts its calls (on topics: ``pt.inspect`` probes with empty frames)."""

    def __init__(self, results: pd.DataFrame):
        self.results, self.calls = results, 0

    def transform(self, topics: pd.DataFrame) -> pd.DataFrame:
        self.calls += len(topics) > 0
        return self.results[self.results["qid"].isin(topics["qid"])]


@pytest.mark.parametrize(("plan", "first_stage_calls"), [("tree", 1), ("linear", 2)])
def test_experiment_tree_plan_shares_the_first_stage(plan, first_stage_calls, folder):
    results = frame()
    topics = results[["qid", "query"]].drop_duplicates()
    qrels = results[["qid", "docno"]].assign(label=[i % 2 for i in range(len(results))])
    stage = FirstStage(results)
    table = pt.Experiment(
        [stage >> SparseCE(folder), stage >> SparseCE(folder, w=1)], topics, qrels, eval_metrics=["map"], plan=plan
    )
    assert len(table) == 2 and stage.calls == first_stage_calls


def test_rank_cutoff_is_applied_after_scoring_not_fused_into_the_reranker(folder):
    reranker = SparseCE(folder)
    assert not isinstance(reranker, pt.transformer.SupportsFuseRankCutoff)
    inp = frame()
    top2 = (reranker % 2)(inp)
    full = reranker(inp)
    assert top2.groupby("qid").size().eq(2).all()
    assert set(zip(top2["qid"], top2["docno"], strict=True)) == set(
        zip(full.loc[full["rank"] < 2, "qid"], full.loc[full["rank"] < 2, "docno"], strict=True)
    )


# ------------------------------------------------------------------------------------------- inspection, schematic
TestSparseCEIsATransformer = pt.testing.transformer_test_class(lambda: SparseCE(tiny_sparse(), tokenizer=TOKENIZER))
TestMonoCEIsATransformer = pt.testing.transformer_test_class(lambda: MonoCE(tiny_bert(), tokenizer=TOKENIZER))
TestCELIIsATransformer = pt.testing.transformer_test_class(
    lambda: CELI(tiny_sparse(), token_dim=4, tokenizer=TOKENIZER)
)


def test_inspection_names_inputs_and_outputs(folder):
    reranker = SparseCE(folder)
    assert pt.inspect.transformer_inputs(reranker) == [["qid", "query", "docno", "text"]]
    columns = ["qid", "query", "docno", "text", "score", "rank"]
    assert pt.inspect.transformer_outputs(reranker, ["qid", "query", "docno", "text", "score", "rank"]) == columns
    with pytest.raises(pt.validate.InputValidationError, match="text"):
        pt.inspect.transformer_outputs(reranker, ["qid", "query", "docno"])
    assert pt.schematic.transformer_schematic(reranker)["label"] == "SparseCE"


def test_verbose_shows_a_progress_bar_over_scoring_batches(folder, capsys):
    SparseCE(folder, batch_size=4, verbose=True)(frame())
    err = capsys.readouterr().err
    assert "SparseCE(" in err and "w=4" in err and "batch" in err
    SparseCE(folder, batch_size=4)(frame())
    assert capsys.readouterr().err == ""


# ------------------------------------------------------------------------------------------- caching
def test_scorer_cache_gives_the_same_scores_and_rescores_nothing_on_a_second_run(folder, tmp_path):
    from pyterrier_caching import ScorerCache

    reranker = SparseCE(folder, batch_size=4)
    inp = frame()
    expected = scores(reranker(inp))
    calls = count_scored_docs(reranker)
    cache = ScorerCache(str(tmp_path / "cache"), reranker)
    first = cache(inp.iloc[:7])  # a subset first: only the misses of the full frame are scored next
    assert sum(calls) == 7
    full = cache(inp)
    assert sum(calls) == len(inp)
    again = cache(inp)
    assert sum(calls) == len(inp)  # nothing re-scored
    for got in (scores(first), scores(full), scores(again)):
        np.testing.assert_allclose(got.to_numpy(), expected.loc[got.index].to_numpy(), rtol=0, atol=1e-6)
    assert len(full) == len(again) == len(inp)


# ------------------------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("missing", [None, float("nan")], ids=["None", "NaN"])
@pytest.mark.parametrize(("column", "row", "named"), [("text", 3, "docno 'd0-3'"), ("query", 6, "qid 'q1'")])
def test_missing_text_or_query_is_an_error_naming_the_row(missing, column, row, named, folder):
    inp = frame()
    inp[column] = inp[column].astype(object)
    inp.loc[inp.index[row], column] = missing
    with pytest.raises(ValueError, match=rf"missing {column} \(None/NaN\) for {named}"):
        SparseCE(folder)(inp)


def test_a_qid_with_two_query_texts_is_refused(folder):
    inp = frame()
    inp.loc[inp.index[1], "query"] = "w1 w2 another query"
    with pytest.raises(ValueError, match="qid 'q0' has 2 different query texts"):
        SparseCE(folder)(inp)


def test_integer_ids_score_like_string_ids_and_empty_frames_keep_working(folder):
    reranker = SparseCE(folder)
    inp = frame()
    ints = inp.assign(qid=inp["qid"].str[1:].astype(int), docno=np.arange(len(inp)))
    out = reranker(ints)
    assert out["qid"].dtype.kind == "i" and out["docno"].dtype.kind == "i"
    expected = reranker(inp).set_index("docno")["score"]
    np.testing.assert_allclose(out.sort_values("docno")["score"], expected.loc[inp["docno"]], rtol=0, atol=1e-6)
    empty = reranker(pd.DataFrame({"qid": pd.Series(dtype="int64"), "query": [], "docno": [], "text": []}))
    assert len(empty) == 0 and {"score", "rank"} <= set(empty.columns)


def test_training_data_refuses_missing_text_and_two_queries_per_qid(folder):
    reranker = SparseCE(folder)
    inp = frame()
    qrels = inp[["qid", "docno"]].assign(label=1)
    bad = inp.assign(text=inp["text"].astype(object))
    bad.loc[bad.index[2], "text"] = None
    with pytest.raises(ValueError, match=r"missing text \(None/NaN\) for docno 'd0-2'"):  # inference's message
        RerankerTrainingData(reranker.inputs, bad, qrels)
    two = inp.copy()
    two.loc[two.index[1], "query"] = "w3 other"
    with pytest.raises(ValueError, match="qid 'q0' has 2 different query texts"):
        RerankerTrainingData(reranker.inputs, two, qrels)
