"""The distill-rerankers study on its tiny config (smoke.toml): what it refuses before any work, its variants and
their comparisons, the teacher's labels and Inverse-Cloze training queries, then the command end to end (two steps
from six MS MARCO dev queries, the table on DL19) and a rerun that trains nothing and reads every score back."""

from __future__ import annotations

import math
import os
import sqlite3
import subprocess
import sys
from contextlib import closing

import pandas as pd
import pytest

from experiments.common.recipes import finished_steps, training_minutes
from experiments.distill_rerankers.data import teacher_labels, training_candidates
from experiments.distill_rerankers.recipe import comparisons, main, parse_variant, reference_folders, reference_names

SMOKE = os.path.join(os.path.dirname(__file__), "smoke.toml")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def check_variants_and_comparisons() -> None:
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


def check_teacher_labels() -> None:
    scored = pd.DataFrame({"qid": ["q"] * 5 + ["r"] * 2, "docno": list("abcde") + ["x", "y"],
                           "score": [0.1, 0.9, 0.5, 0.9, 0.0, 1.0, 2.0]})  # fmt: skip
    labels = teacher_labels(scored, positives=2)
    shuffled = teacher_labels(scored.sample(frac=1.0, random_state=3), positives=2)
    top = set(labels[labels["label"] == 1][["qid", "docno"]].itertuples(index=False, name=None))
    assert top == {("q", "b"), ("q", "d"), ("r", "x"), ("r", "y")}  # whatever the row order
    assert top == set(shuffled[shuffled["label"] == 1][["qid", "docno"]].itertuples(index=False, name=None))
    with pytest.raises(ValueError, match="positives"):
        teacher_labels(scored, positives=0)


def check_refusals(tmp_path) -> None:
    """Bad lists and an unusable --reference-dir are refused before any work (nothing written)."""
    ours, theirs = tmp_path / "ict", tmp_path / "msmarco"
    with pytest.raises(ValueError, match="unknown model 'sparse-x4'"):
        main(["--config", SMOKE, "--models", "mono,sparse-x4", "--output-dir", str(ours)])
    for flags in (["--seeds", "1,x"], ["--seeds", ""], ["--models", "none"]):
        with pytest.raises(SystemExit):
            main(["--config", SMOKE, *flags, "--output-dir", str(ours)])
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
        main(["--config", SMOKE, "--seeds", "1,2", "--max-steps", "4", "--output-dir", str(ours),
              "--reference-dir", str(theirs)])  # fmt: skip
    with pytest.raises(SystemExit):  # a key of [args] that names no flag
        bad = tmp_path / "bad.toml"
        bad.write_text('[args]\nmodel = "mono"\n')
        main(["--config", str(bad), "--output-dir", str(ours)])
    assert not ours.exists()


def check_pseudo_queries() -> None:
    from experiments.common.training_bm25 import training_bm25

    pool = training_candidates(["ict:cranfield"], training_bm25, depth=5, max_queries=6, seed=1)
    assert pool["qid"].str.startswith("ict:cranfield/ict-").all()
    assert pool.groupby("qid").size().max() <= 5 and pool["qid"].nunique() >= 5
    assert pool["text"].str.len().gt(0).all() and (pool["source"] == "ict:cranfield").all()
    # each pseudo-query is a sentence of its own document, which BM25 finds among the candidates
    own = pool.apply(lambda r: r["qid"].endswith("-" + r["docno"]), axis=1)
    assert own.groupby(pool["qid"]).any().mean() >= 0.8
    with pytest.raises(ValueError, match="unknown source"):
        training_candidates(["msmarco-passage/train"], training_bm25, depth=5, max_queries=2)


def cached_pairs(db) -> int:
    with closing(sqlite3.connect(db)) as connection:
        return connection.execute("SELECT COUNT(*) FROM cache").fetchone()[0]


@pytest.mark.slow
@pytest.mark.usefixtures("single_thread")
def test_distill_rerankers_smoke(irds_home, tite_cache, tmp_path):
    check_variants_and_comparisons()
    check_teacher_labels()
    check_refusals(tmp_path)
    check_pseudo_queries()

    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "experiments.distill_rerankers", "--config", SMOKE, "--output-dir", str(out)]
    env = {**os.environ, "PYTERRIER_TITE_HOME": tite_cache}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
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
    assert kept == 43 * 2  # DL19's 43 judged queries x eval_depth
    # a rerun finds the model finished: no training, its scores read back (nothing written), same table
    again = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert again.returncode == 0 and "training sparse-w4" not in again.stdout, again.stderr[-3000:]
    assert cached_pairs(db) == kept and db.stat().st_mtime_ns == stamp
    pd.testing.assert_frame_equal(pd.read_csv(out / "results.csv"), table)
