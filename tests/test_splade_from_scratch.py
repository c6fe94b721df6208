"""The SPLADE-from-scratch recipe end to end on tiny settings: vocabulary + MLM+FLOPS pretraining + fine-tuning +
PISA index, the BM25-vs-SPLADE table, and a rerun that skips finished stages."""

from __future__ import annotations

import os
import subprocess
import sys

import pandas as pd
import pytest

from pyterrier_tite.cli.recipes import finished_steps


@pytest.mark.slow
def test_splade_from_scratch_end_to_end(irds_home, tite_cache, tmp_path):
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "pyterrier_tite", "splade-from-scratch", "--output-dir", str(out),
           "--dataset", "cranfield", "--train-dataset", "cranfield", "--vocab-size", "400", "--hidden-size", "16",
           "--layers", "1", "--heads", "2", "--intermediate-size", "32", "--max-length", "32",
           "--pretrain-steps", "3", "--pretrain-batch-size", "4", "--pretrain-warmup-steps", "1",
           "--pretrain-flops-warmup-steps", "1", "--max-steps", "3", "--batch-size", "4", "--warmup-steps", "1",
           "--flops-warmup-steps", "1", "--depth", "10", "--threads", "1", "--quiet",
           "--precision", "fp32"]  # fmt: skip
    env = {**os.environ, "PYTERRIER_TITE_HOME": tite_cache}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert finished_steps(str(out / "mlm")) == 3 and finished_steps(str(out / "splade")) == 3
    assert os.path.exists(out / "mlm" / "tokenizer" / "tokenizer_config.json")

    table = pd.read_csv(out / "results.csv")
    assert table["name"].tolist() == ["BM25", "SPLADE from scratch"] and (table["dataset"] == "cranfield").all()
    splade = table.iloc[1]
    assert 0 <= splade["nDCG@10"] <= 1 and 0 <= splade["nDCG@10 p-value"] <= 1
    assert splade["index MB"] > 0 and splade["FLOPS"] >= 0 and splade["postings/doc"] > 0
    assert table.iloc[0]["nDCG@10"] == pytest.approx(0.3276, abs=1e-4)  # BM25 on cranfield (docs/results.md)

    again = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "pretraining on" not in again.stdout and "fine-tuning on" not in again.stdout
    pd.testing.assert_frame_equal(pd.read_csv(out / "results.csv"), table)
