"""The SPLADE-from-scratch study on its tiny config (smoke.toml): vocabulary + MLM+FLOPS pretraining + fine-tuning +
PISA index, the BM25-vs-SPLADE table, a rerun that skips finished stages, and ``--seeds`` (fine-tuning seeds on the
one pretraining, evaluated as one system)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from safetensors.torch import load_file

from experiments.common.recipes import finished_steps, training_minutes
from experiments.splade_from_scratch.recipe import fine_tuning_folders

SMOKE = os.path.join(os.path.dirname(__file__), "smoke.toml")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def check_seed_folders(tmp_path) -> None:
    def folders(seeds):
        return fine_tuning_folders(argparse.Namespace(output_dir=str(tmp_path), seed=42, seeds=seeds))

    assert folders(None) == {42: str(tmp_path / "splade")}
    assert folders("1, 2,1") == {1: str(tmp_path / "splade-seed-1"), 2: str(tmp_path / "splade-seed-2")}
    for bad in ("1,x", "none"):
        with pytest.raises(SystemExit):
            folders(bad)


@pytest.mark.slow
def test_splade_from_scratch_smoke(irds_home, tite_cache, tmp_path):
    check_seed_folders(tmp_path)
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "experiments.splade_from_scratch", "--config", SMOKE, "--output-dir", str(out)]
    env = {**os.environ, "PYTERRIER_TITE_HOME": tite_cache}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert finished_steps(str(out / "mlm")) == 3 and finished_steps(str(out / "splade")) == 3
    assert os.path.exists(out / "mlm" / "tokenizer" / "tokenizer_config.json")

    table = pd.read_csv(out / "results.csv")
    assert table["name"].tolist() == ["BM25", "SPLADE from scratch"] and (table["dataset"] == "cranfield").all()
    splade = table.iloc[1]
    assert 0 <= splade["nDCG@10"] <= 1 and 0 <= splade["nDCG@10 p-value"] <= 1
    assert splade["index MB"] > 0 and splade["FLOPS"] >= 0 and splade["postings/doc"] > 0
    pretraining_and_fine_tuning = training_minutes([str(out / "mlm")]) + training_minutes([str(out / "splade")])
    assert splade["train min"] == pytest.approx(pretraining_and_fine_tuning, rel=1e-9) and splade["train min"] > 0
    assert np.isnan(table.iloc[0]["train min"])
    assert table.iloc[0]["nDCG@10"] == pytest.approx(0.3276, abs=1e-4)  # BM25 on cranfield (experiments/baselines)

    again = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "pretraining on" not in again.stdout and "fine-tuning on" not in again.stdout
    pd.testing.assert_frame_equal(pd.read_csv(out / "results.csv"), table)

    # --seeds: the finished pretraining is reused; one fine-tuning per seed; one seed table (mean ± std, paired test)
    seeds = subprocess.run([*cmd, "--seeds", "42,7"], capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert seeds.returncode == 0, seeds.stderr[-3000:]
    assert "pretraining on" not in seeds.stdout and seeds.stdout.count("fine-tuning on") == 2
    same_seed = load_file(out / "splade-seed-42" / "model.safetensors")
    for name, tensor in load_file(out / "splade" / "model.safetensors").items():  # --seeds 42 is the --seed 42 model
        np.testing.assert_allclose(same_seed[name].numpy(), tensor.numpy(), rtol=0, atol=1e-6, err_msg=name)
    other_seed = load_file(out / "splade-seed-7" / "model.safetensors")
    assert any(not np.allclose(other_seed[k].numpy(), same_seed[k].numpy()) for k in same_seed)

    table = pd.read_csv(out / "results.csv")
    assert table["name"].tolist() == ["BM25", "SPLADE from scratch"] and table["seeds"].tolist() == [1, 2]
    bm25, splade = table.iloc[0], table.iloc[1]
    assert bm25["nDCG@10"] == pytest.approx(0.3276, abs=1e-4) and np.isnan(bm25["FLOPS"])
    assert splade["vs"] == "BM25" and 0 <= splade["p"] <= 1 and splade["std"] >= 0
    assert splade["ci_low"] <= splade["delta"] <= splade["ci_high"]
    assert splade["delta"] == pytest.approx(splade["nDCG@10"] - bm25["nDCG@10"], abs=1e-9)
    assert 0 <= splade["R@100"] <= 1 and splade["index MB"] > 0 and splade["postings/doc"] > 0
