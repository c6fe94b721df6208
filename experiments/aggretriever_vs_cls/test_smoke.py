"""The Aggretriever-vs-CLS study on its tiny config (smoke.toml): its variants and comparisons, what it refuses before
any work, then the command end to end (two seeds of each model trained from the shipped 2-layer SPLADE's BERT, dense
retrieval with the seed-aggregated table) and a rerun that trains nothing."""

from __future__ import annotations

import os
import subprocess
import sys

import pandas as pd
import pytest

from experiments.aggretriever_vs_cls.recipe import VARIANTS, comparisons, main
from experiments.common.recipes import finished_steps

SMOKE = os.path.join(os.path.dirname(__file__), "smoke.toml")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.slow
@pytest.mark.usefixtures("single_thread")
def test_aggretriever_vs_cls_smoke(irds_home, tite_cache, tmp_path):
    from pyterrier.measures import nDCG

    from experiments.common.dense_experiment import dense_experiment
    from pyterrier_tite.pt.aggretriever import Aggretriever

    # the variants differ only in the lexical part; aggretriever is paired with cls when both are trained
    assert VARIANTS["cls"]["cls_dim"] == VARIANTS["aggretriever"]["cls_dim"]
    assert VARIANTS["cls"]["agg_dim"] == 0 < VARIANTS["aggretriever"]["agg_dim"]
    assert comparisons(["aggretriever", "cls"]) == {"aggretriever": ["BM25", "cls"], "cls": ["BM25"]}
    assert comparisons(["aggretriever"]) == {"aggretriever": ["BM25"]}
    out = tmp_path / "run"
    for flags, message in ((["--models", "aggretriever,splade"], "unknown model"), (["--seeds", "1,x"], "integers"),
                           (["--models", "none"], "at least one")):  # fmt: skip
        with pytest.raises(SystemExit, match=message):
            main(["--config", SMOKE, *flags, "--output-dir", str(out)])
    assert not out.exists()

    # two seeds x two models, three steps each on a few vaswani queries, then cranfield retrieval: every seed's model
    # is in the table's mean, the paired test compares them, and a rerun trains nothing and reuses the indexes
    cmd = [sys.executable, "-m", "experiments.aggretriever_vs_cls", "--config", SMOKE, "--output-dir", str(out)]
    env = {**os.environ, "PYTERRIER_TITE_HOME": tite_cache}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    for variant in VARIANTS:
        for seed in (1, 2):
            assert finished_steps(str(out / variant / f"seed-{seed}")) == 3
    cls_model = Aggretriever.from_pretrained(str(out / "cls" / "seed-1"))
    assert (cls_model.encoder.agg_dim, cls_model.encoder.cls_dim) == (0, 128)

    table = pd.read_csv(out / "results.csv")
    rows = {(r["name"], r["vs"] if isinstance(r["vs"], str) else None): r for r in table.to_dict("records")}
    assert set(rows) == {("BM25", None), ("aggretriever", "BM25"), ("aggretriever", "cls"), ("cls", "BM25")}
    assert (table["dataset"] == "cranfield").all() and rows["cls", "BM25"]["seeds"] == 2
    agg, cls = rows["aggretriever", "cls"], rows["cls", "BM25"]
    assert agg["train min"] >= 0 and cls["train min"] >= 0 and pd.isna(rows["BM25", None]["train min"])
    assert agg["delta"] == pytest.approx(agg["nDCG@10"] - cls["nDCG@10"], abs=1e-9) and 0 <= agg["p"] <= 1

    # the mean over seeds is the mean of each seed model's own pt.Experiment figure
    models = {f"cls{s}": Aggretriever.from_pretrained(str(out / "cls" / f"seed-{s}"), verbose=False) for s in (1, 2)}
    own = dense_experiment(models, ["cranfield"], str(tmp_path / "own-indexes"), measures=[nDCG @ 10], with_bm25=False)
    assert cls["nDCG@10"] == pytest.approx(own["nDCG@10"].mean(), abs=1e-4)

    again = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert again.returncode == 0 and "training" not in again.stdout, again.stderr[-3000:]
    pd.testing.assert_frame_equal(pd.read_csv(out / "results.csv"), table)
