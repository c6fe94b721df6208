"""Cross-validation over a collection's queries: the fold split and training on the other folds
(``--hold-out-fold``). Routing each query to its fold's model (``CrossValidated``) and the evaluation script's
``--fold-models`` row are a study's: experiments/common/test_common.py."""

from __future__ import annotations

import argparse

import pandas as pd
import pyterrier as pt
import pytest

from pyterrier_tite.query_folds import assign_folds, parse_fold, training_qids

QIDS = [str(q) for q in range(1, 94)]  # vaswani's 93 query ids


def test_folds_partition_the_queries_evenly_and_reproducibly():
    folds = assign_folds(QIDS + QIDS[:5], 5)  # duplicates count once
    assert set(folds) == set(QIDS) and set(folds.values()) == {1, 2, 3, 4, 5}
    sizes = pd.Series(folds).value_counts()
    assert sizes.max() - sizes.min() <= 1
    assert assign_folds(reversed(QIDS), 5) == folds  # the order of the input does not matter
    assert assign_folds(QIDS, 5, seed=1) != folds
    for fold in range(1, 6):
        train, test = training_qids(QIDS, f"{fold}/5"), [q for q, f in folds.items() if f == fold]
        assert not set(train) & set(test) and sorted(train + test, key=int) == QIDS


@pytest.mark.parametrize("spec", ["1", "0/2", "3/2", "1/1", "a/b", "1/2/3"])
def test_bad_fold_specs_are_refused(spec):
    with pytest.raises(ValueError, match="fold"):
        parse_fold(spec)


def test_too_few_queries_for_the_folds():
    with pytest.raises(ValueError, match="cannot fill"):
        assign_folds(["1", "2"], 3)


def test_cli_refuses_a_bad_fold_before_loading_anything(capsys):
    from pyterrier_tite.cli import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["train-splade", "--dataset", "vaswani", "--model", "x", "--hold-out-fold", "3/2"])
    assert "1 <= I <= N" in capsys.readouterr().err


@pytest.mark.slow
def test_training_examples_never_come_from_the_held_out_fold(irds_home, tite_cache):
    from pyterrier_tite.cli.sparse import _examples

    args = argparse.Namespace(
        dataset="cranfield", depth=10, max_queries=None, seed=0, hold_out_fold="2/3", fold_seed=0, pseudo_queries=False,
        allow_evaluation_data=True,
    )  # fmt: skip
    examples = _examples(args)
    qids = {e.qid for e in examples}
    folds = assign_folds(pt.get_dataset("irds:cranfield").get_topics()["qid"].astype(str), 3)
    held_out = {qid for qid, fold in folds.items() if fold == 2}
    assert qids and not qids & held_out
    assert len(qids) > 100  # two thirds of cranfield's 225 queries (those with a non-relevant BM25 hit)


def test_pseudo_queries_and_a_held_out_fold_exclude_each_other():
    from pyterrier_tite.cli.sparse import _examples

    args = argparse.Namespace(dataset="cranfield", pseudo_queries=True, hold_out_fold="1/2")
    with pytest.raises(SystemExit, match="no fold to hold out"):
        _examples(args)
