"""The cross-encoder distillation recipe: the offline teacher (norm-sum of a dense and a SPLADE model, documents
encoded once and cached), the training data drawn from it, the seed-aggregated comparison table and the command."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from scipy import stats

from experiments.common.fusion import min_max_per_query, normalised_sum
from experiments.common.recipes import finished_steps, training_minutes
from experiments.common.rerank_experiment import summarise
from pyterrier_tite.cli.distill_rerankers import comparisons, parse_variant
from pyterrier_tite.training.reranker_distillation import teacher_labels

pytestmark = pytest.mark.usefixtures("single_thread")

TEXTS = [
    "The Manhattan Project produced the first nuclear weapons during World War II.",
    "Photosynthesis converts light energy into chemical energy in plants.",
    "Nuclear fission releases energy by splitting heavy atomic nuclei.",
    "The French Revolution began in 1789 with the storming of the Bastille.",
]


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


def test_teacher_labels_mark_the_top_k_whatever_the_row_order():
    scored = pd.DataFrame({"qid": ["q"] * 5 + ["r"] * 2, "docno": list("abcde") + ["x", "y"],
                           "score": [0.1, 0.9, 0.5, 0.9, 0.0, 1.0, 2.0]})  # fmt: skip
    labels = teacher_labels(scored, positives=2)
    shuffled = teacher_labels(scored.sample(frac=1.0, random_state=3), positives=2)
    top = set(labels[labels["label"] == 1][["qid", "docno"]].itertuples(index=False, name=None))
    assert top == {("q", "b"), ("q", "d"), ("r", "x"), ("r", "y")}
    assert top == set(shuffled[shuffled["label"] == 1][["qid", "docno"]].itertuples(index=False, name=None))
    with pytest.raises(ValueError, match="positives"):
        teacher_labels(scored, positives=0)


# ------------------------------------------------------------------------------------------------------------ teacher
@pytest.fixture(scope="module")
def teacher_models():
    from pyterrier_tite.pt.bert_biencoder import BertBiEncoder
    from pyterrier_tite.pt.splade import Splade
    from pyterrier_tite.start_points import resolve

    return BertBiEncoder.from_pretrained(resolve("minilm"), batch_size=8), Splade.from_pretrained(resolve("splade-2l"))


def _frame() -> pd.DataFrame:
    rows = [("q1", "atomic bomb history", i) for i in range(4)]
    rows += [("q2", "how do plants make energy", i) for i in (1, 3)]
    return pd.DataFrame(
        {"qid": [r[0] for r in rows], "query": [r[1] for r in rows], "docno": [f"d{r[2]}" for r in rows],
         "text": [TEXTS[r[2]] for r in rows]}
    )  # fmt: skip


def test_teacher_components_are_the_models_own_scores(teacher_models):
    from experiments.common.offline_teacher import OfflineTeacher

    dense, splade = teacher_models
    frame = _frame()
    dense_scores, sparse_scores = OfflineTeacher(dense, splade, verbose=False).components(frame)
    expected_dense = dense.scorer()(frame).set_index(["qid", "docno"])["score"]
    expected_sparse = splade.scorer()(frame).set_index(["qid", "docno"])["score"]
    keys = list(zip(frame["qid"], frame["docno"], strict=True))
    np.testing.assert_allclose(dense_scores, expected_dense.loc[keys].to_numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(sparse_scores, expected_sparse.loc[keys].to_numpy(), rtol=1e-4, atol=1e-4)


def test_teacher_is_the_normalised_sum_and_ranks_the_relevant_text_first(teacher_models):
    from experiments.common.offline_teacher import OfflineTeacher

    dense, splade = teacher_models
    frame = _frame()
    teacher = OfflineTeacher(dense, splade, verbose=False)
    scored = teacher(frame)
    dense_scores, sparse_scores = teacher.components(frame)
    expected = normalised_sum(frame.assign(score=dense_scores), frame.assign(score=sparse_scores))
    merged = scored.merge(expected, on=["qid", "docno"], suffixes=("", "_expected"))
    np.testing.assert_allclose(merged["score"], merged["score_expected"], atol=1e-12)
    best = scored.sort_values("score", ascending=False).groupby("qid").head(1).set_index("qid")["docno"]
    assert best["q1"] in ("d0", "d2") and best["q2"] == "d1"


def test_teacher_keeps_an_empty_frame_empty_and_names_a_missing_column(teacher_models):
    from experiments.common.offline_teacher import OfflineTeacher

    teacher = OfflineTeacher(*teacher_models, verbose=False)
    empty = teacher(_frame().iloc[:0])
    assert len(empty) == 0 and {"score", "rank"} <= set(empty.columns)
    with pytest.raises(Exception, match="text"):
        teacher(_frame().drop(columns=["text"]))


def test_teacher_encodes_each_document_once_and_reuses_its_cache(teacher_models, tmp_path, monkeypatch):
    from experiments.common.offline_teacher import OfflineTeacher

    dense, splade = teacher_models
    frame = _frame()
    encoded = []
    original = dense.encode

    def counting(texts, role, *args, **kwargs):
        if role == "doc":
            encoded.extend(texts)
        return original(texts, role, *args, **kwargs)

    monkeypatch.setattr(dense, "encode", counting)
    first = OfflineTeacher(dense, splade, cache_dir=str(tmp_path), verbose=False)(frame)
    assert sorted(encoded) == sorted(TEXTS)  # 6 rows, 4 distinct documents
    encoded.clear()
    second = OfflineTeacher(dense, splade, cache_dir=str(tmp_path), verbose=False)(frame)
    assert encoded == []
    pd.testing.assert_frame_equal(first, second)
    meta = tmp_path / "models.json"
    saved = json.loads(meta.read_text())
    meta.write_text(json.dumps({**saved, "dense": "another model"}))
    with pytest.raises(ValueError, match="other models"):
        OfflineTeacher(dense, splade, cache_dir=str(tmp_path), verbose=False)


@pytest.mark.parametrize("short", ["dense.npy", "sparse.npz"])
def test_teacher_cache_cut_short_by_a_killed_save_keeps_its_consistent_prefix(teacher_models, tmp_path, short):
    """A run killed between the replacements of the cache's files leaves them of different lengths; the teacher must
    neither pair a document with another's vector nor crash, but re-encode what the shorter files lack."""
    from experiments.common.offline_teacher import OfflineTeacher

    dense, splade = teacher_models
    frame = _frame()
    expected = OfflineTeacher(dense, splade, cache_dir=str(tmp_path), verbose=False)(frame)
    if short == "dense.npy":
        np.save(tmp_path / short, np.load(tmp_path / short)[:2])
    else:
        sp.save_npz(tmp_path / short, sp.load_npz(tmp_path / short).tocsr()[:2])
    with pytest.warns(UserWarning, match="keeping the first 2 documents"):
        teacher = OfflineTeacher(dense, splade, cache_dir=str(tmp_path), verbose=False)
    assert len(teacher._keys) == 2
    pd.testing.assert_frame_equal(teacher(frame), expected, check_exact=False, atol=1e-5)
    assert len(np.load(tmp_path / "keys.npy")) == np.load(tmp_path / "dense.npy").shape[0] == 4


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


# ------------------------------------------------------------------------------------------------------------ command
def test_variants_and_their_comparisons():
    assert parse_variant("mono") == {"kind": "MonoCE"}
    assert parse_variant("sparse-w4") == {"kind": "SparseCE", "w": 4}
    assert parse_variant("sparse-winf") == {"kind": "SparseCE", "w": None}
    assert parse_variant("celi-w0") == {"kind": "CELI", "sparse": True, "w": 0}
    assert parse_variant("celi-mono") == {"kind": "CELI", "sparse": False}
    assert parse_variant("sparse-w4-sym") == {"kind": "SparseCE", "w": 4, "symmetric": True}
    assert parse_variant("celi-winf-sym") == {"kind": "CELI", "sparse": True, "w": None, "symmetric": True}
    for bad in ("sparse", "sparse-w", "celi", "mono4", "Sparse-w4", "mono-sym", "celi-mono-sym", "sparse-w4sym"):
        with pytest.raises(ValueError, match="unknown model"):
            parse_variant(bad)
    against = comparisons(["mono", "sparse-w4", "sparse-winf", "celi-mono", "celi-w4", "celi-w16"])
    assert against["sparse-w4"] == ["BM25", "sparse-winf", "mono"] and against["sparse-winf"] == ["BM25", "mono"]
    assert against["celi-mono"] == ["BM25", "mono"] and against["celi-w4"] == ["BM25", "sparse-w4"]
    assert against["celi-w16"] == ["BM25"]  # no sparse-w16 trained: nothing to pair it with
    sweep = comparisons(["sparse-w0", "sparse-w16", "sparse-w4", "mono"])  # no full attention: the widest window
    assert sweep["sparse-w0"] == sweep["sparse-w4"] == ["BM25", "sparse-w16", "mono"]
    assert sweep["sparse-w16"] == ["BM25", "mono"] and sweep["mono"] == ["BM25"]
    assert comparisons(["sparse-w4"]) == {"sparse-w4": ["BM25"]}
    # windows of the symmetric pattern pair with its own widest; each with its asymmetric twin when trained
    against = comparisons(["sparse-w4", "sparse-winf", "sparse-w4-sym", "sparse-w16-sym", "celi-w4-sym"])
    assert against["sparse-w4"] == ["BM25", "sparse-winf"]
    assert against["sparse-w4-sym"] == ["BM25", "sparse-w16-sym", "sparse-w4"]
    assert against["sparse-w16-sym"] == ["BM25"] and against["celi-w4-sym"] == ["BM25", "sparse-w4-sym"]
    # with MonoCE trained, every SparseCE (not CELI) is also paired with it
    against = comparisons(["sparse-w4", "sparse-w4-sym", "mono", "celi-w4"])
    assert against["sparse-w4-sym"] == ["BM25", "sparse-w4", "mono"] and against["sparse-w4"] == ["BM25", "mono"]
    assert against["celi-w4"] == ["BM25", "sparse-w4"]


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


def test_command_refuses_an_unknown_model_before_any_work(tmp_path):
    from pyterrier_tite.cli import main

    with pytest.raises(ValueError, match="unknown model 'sparse-x4'"):
        main(["distill-rerankers", "--models", "mono,sparse-x4", "--output-dir", str(tmp_path)])
    for flags in (["--seeds", "1,x"], ["--seeds", ""], ["--models", "none"]):
        with pytest.raises(SystemExit):
            main(["distill-rerankers", *flags, "--output-dir", str(tmp_path)])
    assert not any(tmp_path.iterdir())


def test_reference_dir_needs_the_same_models_trained_to_the_same_steps(tmp_path):
    """--reference-dir compares a recipe change (e.g. other --sources) model by model, so every counterpart must exist
    at exactly --max-steps; the check runs before any training, and a reference row is named after its folder."""
    from pyterrier_tite.cli import main
    from pyterrier_tite.cli.distill_rerankers import reference_folders, reference_names

    ours, theirs = tmp_path / "ict", tmp_path / "msmarco"
    for seed, steps in ((1, 4), (2, 3)):
        folder = theirs / "sparse-w4" / f"seed-{seed}"
        folder.mkdir(parents=True)
        (folder / "model.safetensors").write_bytes(b"")
        (folder / "log.jsonl").write_text('{"step": 1}\n' * steps)
    with pytest.raises(SystemExit, match=r"seed-2 \(3 steps\)"):
        reference_folders(str(theirs), str(ours), ["sparse-w4"], [1, 2], max_steps=4)
    with pytest.raises(SystemExit, match=r"seed-1 \(0 steps\)"):  # a variant the reference never trained
        reference_folders(str(theirs), str(ours), ["sparse-w4", "mono"], [1], max_steps=4)
    with pytest.raises(SystemExit, match="another folder"):
        reference_folders(str(theirs) + "/", str(theirs), ["sparse-w4"], [1], max_steps=4)
    assert reference_folders(str(theirs), str(ours), ["sparse-w4"], [1], max_steps=4) == {
        ("sparse-w4", 1): str(theirs / "sparse-w4" / "seed-1")
    }
    assert reference_names(["sparse-w4", "mono"], str(theirs) + "/") == {
        "sparse-w4": "sparse-w4 @ msmarco",
        "mono": "mono @ msmarco",
    }
    with pytest.raises(SystemExit, match="--max-steps 4"):
        main(["distill-rerankers", "--models", "sparse-w4", "--seeds", "1,2", "--max-steps", "4",
              "--output-dir", str(ours), "--reference-dir", str(theirs)])  # fmt: skip
    assert not ours.exists()


def test_training_candidates_of_pseudo_queries(irds_home, tite_cache):
    from pyterrier_tite.pt.first_stage import training_bm25
    from pyterrier_tite.training.reranker_distillation import training_candidates

    pool = training_candidates(["ict:cranfield"], training_bm25, depth=5, max_queries=6, seed=1)
    assert pool["qid"].str.startswith("ict:cranfield/ict-").all()
    assert pool.groupby("qid").size().max() <= 5 and pool["qid"].nunique() >= 5
    assert pool["text"].str.len().gt(0).all() and (pool["source"] == "ict:cranfield").all()
    # each pseudo-query is a sentence of its own document, which BM25 finds among the candidates
    own = pool.apply(lambda r: r["qid"].endswith("-" + r["docno"]), axis=1)
    assert own.groupby(pool["qid"]).any().mean() >= 0.8
    with pytest.raises(ValueError, match="unknown source"):
        training_candidates(["msmarco-passage/train"], training_bm25, depth=5, max_queries=2)


@pytest.mark.slow
def test_distill_rerankers_end_to_end(irds_home, tite_cache, tmp_path):
    """Two tiny steps from MS MARCO dev queries over the mirrored passages, then the table on a few DL19 queries."""
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "pyterrier_tite", "distill-rerankers", "--output-dir", str(out), "--models",
           "sparse-w4", "--max-queries", "6", "--depth", "8", "--max-steps", "2", "--warmup-steps", "1",
           "--evaluate", "dl19", "--eval-depth", "2", "--threads", "1", "--quiet", "--precision", "fp32",
           "--train-doc-max-length", "48"]  # fmt: skip
    env = {**os.environ, "PYTERRIER_TITE_HOME": tite_cache}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert finished_steps(str(out / "sparse-w4" / "seed-42")) == 2
    table = pd.read_csv(out / "results.csv")
    assert set(table["name"]) == {"BM25", "teacher", "sparse-w4"}
    assert (table["dataset"] == "dl19").all() and table["nDCG@10"].between(0, 1).all()
    minutes = dict(zip(table["name"], table["train min"], strict=True))  # the trained model's time, no one else's
    assert minutes["sparse-w4"] == training_minutes([str(out / "sparse-w4" / "seed-42")]) >= 0
    assert math.isnan(minutes["BM25"]) and math.isnan(minutes["teacher"])
    # the model's scores are kept, one per DL19 candidate pair
    (db,) = (out / "score-cache").glob("*/dl19/db.sqlite3")
    kept, stamp = cached_pairs(db), db.stat().st_mtime_ns
    assert kept == 43 * 2  # DL19's 43 judged queries x --eval-depth
    # a rerun finds the model finished: no training, its scores read back (nothing written), same table
    again = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    assert again.returncode == 0 and "training sparse-w4" not in again.stdout
    assert cached_pairs(db) == kept and db.stat().st_mtime_ns == stamp
    pd.testing.assert_frame_equal(pd.read_csv(out / "results.csv"), table)


def cached_pairs(db) -> int:
    import sqlite3
    from contextlib import closing

    with closing(sqlite3.connect(db)) as connection:
        return connection.execute("SELECT COUNT(*) FROM cache").fetchone()[0]
