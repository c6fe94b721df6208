"""Cross-validation over a collection's queries: the fold split, routing each query to its fold's model, training
on the other folds (``--hold-out-fold``), and the evaluation script's ``--fold-models`` row."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import pandas as pd
import pyterrier as pt
import pytest

from experiments.common.cross_validation import CrossValidated
from pyterrier_tite.query_folds import assign_folds, held_out_qids, parse_fold, training_qids

QIDS = [str(q) for q in range(1, 94)]  # vaswani's 93 query ids


def test_folds_partition_the_queries_evenly_and_reproducibly():
    folds = assign_folds(QIDS + QIDS[:5], 5)  # duplicates count once
    assert set(folds) == set(QIDS) and set(folds.values()) == {1, 2, 3, 4, 5}
    sizes = pd.Series(folds).value_counts()
    assert sizes.max() - sizes.min() <= 1
    assert assign_folds(reversed(QIDS), 5) == folds  # the order of the input does not matter
    assert assign_folds(QIDS, 5, seed=1) != folds
    for fold in range(1, 6):
        train, test = training_qids(QIDS, f"{fold}/5"), held_out_qids(QIDS, f"{fold}/5")
        assert not set(train) & set(test) and sorted(train + test, key=int) == QIDS
    assert sorted((q for f in range(1, 6) for q in held_out_qids(QIDS, f"{f}/5")), key=int) == QIDS


@pytest.mark.parametrize("spec", ["1", "0/2", "3/2", "1/1", "a/b", "1/2/3"])
def test_bad_fold_specs_are_refused(spec):
    with pytest.raises(ValueError, match="fold"):
        parse_fold(spec)


def test_too_few_queries_for_the_folds():
    with pytest.raises(ValueError, match="cannot fill"):
        assign_folds(["1", "2"], 3)


def tagging(fold: int) -> pt.Transformer:
    """A stand-in retriever that says which fold's model answered."""
    return pt.apply.generic(lambda df: df.assign(docno="d1", score=1.0, rank=0, answered_by=fold))


def test_each_query_is_answered_by_its_own_folds_model():
    fold_of = assign_folds(QIDS, 3)
    router = CrossValidated({f: tagging(f) for f in (1, 2, 3)}, fold_of)
    topics = pd.DataFrame({"qid": QIDS, "query": [f"q {q}" for q in QIDS]})
    out = router(topics)
    assert sorted(out["qid"], key=int) == QIDS
    assert all(out["answered_by"] == out["qid"].map(fold_of))
    assert router(topics.iloc[:0]).empty


def test_router_refuses_queries_outside_the_split_and_missing_folds():
    fold_of = assign_folds(QIDS, 2)
    with pytest.raises(ValueError, match="no pipeline for fold"):
        CrossValidated({1: tagging(1)}, fold_of)
    router = CrossValidated({1: tagging(1), 2: tagging(2)}, fold_of)
    with pytest.raises(KeyError, match="no fold"):
        router(pd.DataFrame({"qid": ["999"], "query": ["unknown"]}))


def test_cli_refuses_a_bad_fold_before_loading_anything(capsys):
    from pyterrier_tite.cli import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["train-splade", "--dataset", "vaswani", "--init", "x", "--hold-out-fold", "3/2"])
    assert "1 <= I <= N" in capsys.readouterr().err


@pytest.mark.slow
def test_training_examples_never_come_from_the_held_out_fold(irds_home, tite_cache):
    from pyterrier_tite.cli.sparse import _examples

    args = argparse.Namespace(
        dataset="cranfield", depth=10, max_queries=None, seed=0, hold_out_fold="2/3", fold_seed=0, pseudo_queries=False
    )
    examples = _examples(args)
    qids = {e.qid for e in examples}
    held_out = set(held_out_qids(pt.get_dataset("irds:cranfield").get_topics()["qid"].astype(str), "2/3"))
    assert qids and not qids & held_out
    assert len(qids) > 100  # two thirds of cranfield's 225 queries (those with a non-relevant BM25 hit)


@pytest.mark.slow
def test_evaluation_with_the_same_model_in_every_fold_equals_the_single_model_row(tmp_path, irds_home, tite_cache):
    """Routing loses or duplicates no query: two copies of one model as the two folds give the single model's row."""
    import torch
    from transformers import BertConfig, BertForMaskedLM

    from pyterrier_tite.models.splade.modeling import SpladeEncoder
    from pyterrier_tite.pt.splade import Splade
    from pyterrier_tite.training.mlm import pretraining_texts
    from pyterrier_tite.training.tokenizer import train_wordpiece

    tokenizer = train_wordpiece(pretraining_texts("cranfield", limit=200), vocab_size=400, min_frequency=2)
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64
    )
    model_dir = str(tmp_path / "splade")
    Splade(SpladeEncoder(BertForMaskedLM(config)), tokenizer).save_pretrained(model_dir)

    results = tmp_path / "results.jsonl"
    common = [
        sys.executable, "examples/splade_evaluate.py", "--kind", "splade", "--dataset", "cranfield",
        "--results", str(results), "--index-dir", str(tmp_path / "indexes"), "--doc-max-length", "48",
        "--query-max-length", "24", "--latency-queries", "2",
    ]  # fmt: skip
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for extra in (["--model", model_dir, "--name", "single"], ["--fold-models", f"{model_dir},{model_dir}"]):
        name = [] if "--name" in extra else ["--name", "folds"]
        subprocess.run(common + extra + name, check=True, cwd=root, capture_output=True)
    single, folds = (json.loads(line) for line in results.read_text().splitlines())
    assert folds["folds"] == 2 and folds["queries"] == single["queries"] == 225
    for key in ("ndcg@10", "R@100", "flops", "avg_query_terms", "avg_doc_terms"):
        assert folds[key] == pytest.approx(single[key], rel=1e-9), key
    assert single["ndcg@10"] > 0  # a random model still retrieves something


def test_pseudo_queries_and_a_held_out_fold_exclude_each_other():
    from pyterrier_tite.cli.sparse import _examples

    args = argparse.Namespace(dataset="cranfield", pseudo_queries=True, hold_out_fold="1/2")
    with pytest.raises(SystemExit, match="no fold to hold out"):
        _examples(args)


def test_router_names_a_missing_qid_column():
    router = CrossValidated({1: tagging(1), 2: tagging(2)}, assign_folds(QIDS, 2))
    with pytest.raises(KeyError, match="qid"):
        router(pd.DataFrame({"query": ["no qid here"]}))
