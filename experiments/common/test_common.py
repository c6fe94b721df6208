"""What the studies share (``experiments.common``): ``--config`` files, score fusions, the seed-aggregated comparison
table, the recipes' model folders and training time, cross-validated systems, and Markdown tables (the offline
teacher: ``test_offline_teacher.py``; re-ranker scores kept between evaluations: ``test_score_cache.py``)."""

from __future__ import annotations

import argparse
import json
import math

import numpy as np
import pandas as pd
import pyterrier as pt
import pytest
import torch
from scipy import stats

from experiments.common.config import parse_with_config
from experiments.common.cross_validation import CrossValidated
from experiments.common.fusion import min_max_per_query, normalised_sum
from experiments.common.recipes import finished_steps, training_minutes
from experiments.common.rerank_experiment import summarise
from experiments.common.tables import markdown_table
from pyterrier_tite.query_folds import assign_folds
from tests._tiny import WORDS, bert_config, word_tokenizer

pytestmark = pytest.mark.usefixtures("single_thread")


# ------------------------------------------------------------------------------------------------------------ config
def study_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="study")
    parser.add_argument("--output-dir", required=True)
    parser.add_argument("--max-steps", type=int, default=100)
    parser.add_argument("--learning-rate", type=float, default=2e-5)
    parser.add_argument("--models", default="mono")
    parser.add_argument("--quiet", action="store_true")
    parser.add_argument("--precision", choices=["fp32", "bf16"], default=None)
    parser.add_argument("--collections", nargs="+", default=["vaswani"])
    return parser


def test_config_sets_flags_from_its_args_table_and_the_command_line_overrides(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text(
        'command = "python -m experiments.study"\ndescription = "ignored"\n'
        '[args]\noutput_dir = "runs/x"\nmax_steps = 2000\nlearning_rate = "3e-4"\nmodels = ["mono", "sparse-w4"]\n'
        'quiet = true\nprecision = "bf16"\ncollections = ["cranfield", "cisi"]\n[other]\nmax_steps = 1\n'
    )
    args = parse_with_config(study_parser(), ["--config", str(config)])
    assert (args.output_dir, args.max_steps, args.learning_rate) == ("runs/x", 2000, 3e-4)
    assert args.models == "mono,sparse-w4"  # a list for a flag that takes one value: a comma list
    assert args.quiet is True and args.precision == "bf16" and args.collections == ["cranfield", "cisi"]
    assert args.config == str(config)
    args = parse_with_config(study_parser(), ["--config", str(config), "--max-steps", "5", "--output-dir", "y"])
    assert (args.max_steps, args.output_dir, args.learning_rate) == (5, "y", 3e-4)
    args = parse_with_config(study_parser(), ["--output-dir", "z"])  # no file: the parser's own defaults
    assert (args.max_steps, args.config) == (100, None)
    with pytest.raises(SystemExit):  # an abbreviation would skip the file: refused
        parse_with_config(study_parser(), ["--conf", str(config)])
    (tmp_path / "no_args.toml").write_text('command = "x"\n')
    with pytest.raises(SystemExit):  # nothing in the file, so --output-dir is still required
        parse_with_config(study_parser(), ["--config", str(tmp_path / "no_args.toml")])


@pytest.mark.parametrize(
    "table, message",
    [
        ("max_step = 3\nmodel = 'x'", "unknown key(s) in [args]: max_step, model"),
        ("quiet = 'yes'", "is a switch"),
        ("precision = 'fp16'", "invalid choice"),
        ("max_steps = 'many'", "invalid value"),
    ],
)
def test_config_refuses_what_no_flag_takes(tmp_path, capsys, table, message):
    config = tmp_path / "config.toml"
    config.write_text(f"[args]\n{table}\n")
    with pytest.raises(SystemExit) as raised:
        parse_with_config(study_parser(), ["--config", str(config), "--output-dir", "x"])
    assert message in str(raised.value) + capsys.readouterr().err
    config.write_text("args = 3\n")
    with pytest.raises(SystemExit, match="must be a table"):
        parse_with_config(study_parser(), ["--config", str(config), "--output-dir", "x"])
    with pytest.raises(SystemExit, match="no such file"):
        parse_with_config(study_parser(), ["--config", str(tmp_path / "missing.toml"), "--output-dir", "x"])


# ------------------------------------------------------------------------------------------------------------ tables
def test_markdown_table_formats_floats_only():
    text = markdown_table(pd.DataFrame({"name": ["bm25"], "n": [3], "nDCG@10": [0.46671]}))
    assert text.splitlines() == ["| name | n | nDCG@10 |", "|---|---|---|", "| bm25 | 3 | 0.4667 |"]


# ------------------------------------------------------------------------------------------------------------ fusion
def test_min_max_per_query_scales_each_query_alone():
    frame = pd.DataFrame({"qid": ["a", "a", "a", "b", "b"], "score": [1.0, 3.0, 2.0, 5.0, 5.0]})
    assert min_max_per_query(frame).tolist() == [0.0, 1.0, 0.5, 0.0, 0.0]  # a constant query gets 0


def test_normalised_sum_counts_a_missing_document_as_zero():
    a = pd.DataFrame({"qid": "q", "query": "x", "docno": ["d1", "d2", "d3"], "score": [10.0, 0.0, 5.0]})
    b = pd.DataFrame({"qid": "q", "query": "x", "docno": ["d1", "d2"], "score": [-1.0, 1.0]})
    fused = normalised_sum(a, b).set_index("docno")
    assert fused.loc["d1", "score"] == 1.0 and fused.loc["d2", "score"] == 1.0 and fused.loc["d3", "score"] == 0.5
    assert fused.loc["d3", "rank"] == 2


# ------------------------------------------------------------------------------------------------------------ table
def test_summarise_averages_seeds_and_tests_seed_averaged_queries():
    values = pd.DataFrame(
        [[0.5, 0.4, 0.3, 0.2], [0.6, 0.6, 0.4, 0.3], [0.4, 0.5, 0.2, 0.4], [0.5, 0.4, 0.3, 0.2]],
        index=["BM25", "m #0", "m #1", "copy #0"], columns=["1", "2", "3", "4"],
    )  # fmt: skip
    systems = {"BM25": ["BM25"], "m": ["m #0", "m #1"], "copy": ["copy #0"]}
    rows = {(r["name"], r["vs"]): r for r in summarise(values, systems, {"m": ["BM25"], "copy": ["BM25"]})}
    m = rows[("m", "BM25")]
    seed_means = [values.loc["m #0"].mean(), values.loc["m #1"].mean()]
    assert m["seeds"] == 2 and m["mean"] == pytest.approx(np.mean(seed_means))
    assert m["std"] == pytest.approx(np.std(seed_means, ddof=1))
    averaged = values.loc[["m #0", "m #1"]].mean(axis=0)
    assert m["p"] == pytest.approx(stats.ttest_rel(averaged, values.loc["BM25"]).pvalue)
    assert m["delta"] == pytest.approx(averaged.mean() - values.loc["BM25"].mean())
    differences = averaged - values.loc["BM25"]  # 95% t-interval of the mean difference, by hand
    half = stats.t.ppf(0.975, 3) * differences.std(ddof=1) / 2
    assert (m["ci_low"], m["ci_high"]) == pytest.approx((m["delta"] - half, m["delta"] + half))
    copy = rows[("copy", "BM25")]
    assert copy["p"] == 1.0 and copy["ci_low"] == copy["ci_high"] == 0.0 and np.isnan(rows[("BM25", None)]["std"])
    with pytest.raises(ValueError, match="not one of"):
        summarise(values, systems, {"m": ["teacher"]})


# ------------------------------------------------------------------------------------------------------------ recipes
def test_finished_steps_counts_only_a_saved_model(tmp_path):
    assert finished_steps(str(tmp_path)) == 0
    (tmp_path / "log.jsonl").write_text('{"step": 1}\n{"step": 2}\n')
    assert finished_steps(str(tmp_path)) == 0  # interrupted before the model was written
    (tmp_path / "model.safetensors").write_bytes(b"")
    assert finished_steps(str(tmp_path)) == 2


def test_training_minutes_average_the_seeds_and_refuse_a_partial_figure(tmp_path):
    for seed, seconds in ((1, 30.0), (2, 90.0)):
        (tmp_path / f"seed-{seed}").mkdir()
        rows = [{"step": i + 1, "seconds": seconds / 3} for i in range(3)]
        (tmp_path / f"seed-{seed}" / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert training_minutes([str(tmp_path / "seed-1"), str(tmp_path / "seed-2")]) == 1.0  # (0.5 + 1.5) / 2
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "log.jsonl").write_text('{"step": 1}\n')  # written before step times were logged
    assert math.isnan(training_minutes([str(tmp_path / "seed-1"), str(tmp_path / "old")]))
    assert math.isnan(training_minutes([]))


# ------------------------------------------------------------------------------------------------------------ folds
QIDS = [str(q) for q in range(1, 94)]  # vaswani's 93 query ids
TOKENIZER = word_tokenizer()


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


def test_router_names_a_missing_qid_column():
    router = CrossValidated({1: tagging(1), 2: tagging(2)}, assign_folds(QIDS, 2))
    with pytest.raises(KeyError, match="qid"):
        router(pd.DataFrame({"query": ["no qid here"]}))


def test_cross_validated_routers_are_equal_by_folds_and_pipelines(tmp_path):
    from transformers import BertModel

    from pyterrier_tite.pt.bert_biencoder import BertBiEncoder

    torch.manual_seed(0)
    config = bert_config(len(WORDS), max_position_embeddings=64)
    folder = str(tmp_path / "bert")
    BertBiEncoder(BertModel(config, add_pooling_layer=False).eval(), TOKENIZER, pooling="mean").save_pretrained(folder)

    def router(**settings):
        load = lambda: BertBiEncoder.from_pretrained(folder, device="cpu", **settings).scorer()  # noqa: E731
        return CrossValidated({1: load(), 2: load()}, {"q0": 1, "q1": 2})

    assert router() == router() and hash(router()) == hash(router())
    assert router() != router(doc_max_length=12)


@pytest.mark.slow
def test_evaluation_with_the_same_model_in_every_fold_equals_the_single_model_row(tmp_path, irds_home, tite_cache):
    """Routing loses or duplicates no query: two copies of one model as the two folds give the single model's row
    (``experiments.splade_from_scratch.evaluate --fold-models``)."""
    from transformers import BertForMaskedLM

    from experiments.splade_from_scratch import evaluate
    from pyterrier_tite.models.splade.modeling import SpladeEncoder
    from pyterrier_tite.pt.splade import Splade
    from pyterrier_tite.training.mlm import pretraining_texts
    from pyterrier_tite.training.tokenizer import train_wordpiece

    tokenizer = train_wordpiece(pretraining_texts("cranfield", limit=200), vocab_size=400, min_frequency=2)
    torch.manual_seed(0)
    config = bert_config(len(tokenizer), hidden=32)
    model_dir = str(tmp_path / "splade")
    Splade(SpladeEncoder(BertForMaskedLM(config)), tokenizer).save_pretrained(model_dir)

    results = tmp_path / "results.jsonl"
    common = ["--kind", "splade", "--dataset", "cranfield", "--results", str(results), "--index-dir",
              str(tmp_path / "indexes"), "--doc-max-length", "48", "--query-max-length", "24", "--latency-queries", "2",
              "--threads", str(torch.get_num_threads())]  # fmt: skip
    evaluate.main([*common, "--model", model_dir, "--name", "single"])
    evaluate.main([*common, "--fold-models", f"{model_dir},{model_dir}", "--name", "folds"])
    single, folds = (json.loads(line) for line in results.read_text().splitlines())
    assert folds["folds"] == 2 and folds["queries"] == single["queries"] == 225
    for key in ("ndcg@10", "R@100", "flops", "avg_query_terms", "avg_doc_terms"):
        assert folds[key] == pytest.approx(single[key], rel=1e-9), key
    assert single["ndcg@10"] > 0  # a random model still retrieves something


@pytest.mark.parametrize(
    ("study", "module"),
    [
        ("aggretriever_vs_cls", "recipe"),
        ("baselines", "bm25"),
        ("distill_rerankers", "recipe"),
        ("distill_tite", "recipe"),
        ("splade_from_scratch", "recipe"),
        ("teacher_selection", "selection"),
    ],
)
def test_every_studys_committed_config_is_read_by_its_parser(study, module):
    """``python -m experiments.<study> --config experiments/<study>/config.toml`` parses: every ``[args]`` key is a
    flag of the study (a renamed or deleted flag fails here, not months later when someone reruns the study)."""
    import importlib
    from pathlib import Path

    config = Path(__file__).resolve().parents[1] / study / "config.toml"
    parser = importlib.import_module(f"experiments.{study}.{module}").build_parser()
    parse_with_config(parser, ["--config", str(config)])
