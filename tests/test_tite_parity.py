"""Parity with the reference TITE (webis-de/tite): every ``../shared/parity/tite*`` fixture loads unchanged and
reproduces the reference's ``last_hidden_state`` and ``empty_case_last_hidden_state`` (float32, atol 1e-5).

Fixtures are read in place (never copied); under ``CI=true`` a missing fixture folder fails instead of skipping.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from pyterrier_tite.models import TiteModel

PARITY_ROOT = Path(__file__).resolve().parents[1].parent / "shared" / "parity"
FIXTURES = sorted(PARITY_ROOT.glob("tite*")) if PARITY_ROOT.is_dir() else []
ATOL = 1e-5


pytestmark = pytest.mark.usefixtures("single_thread")


def _missing(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI run without TITE parity fixtures: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module", params=FIXTURES or [None], ids=[p.name for p in FIXTURES] or ["no-fixtures"])
def fixture_dir(request) -> Path:
    if request.param is None:
        _missing(f"no tite* folder under {PARITY_ROOT}")
    return request.param


def _load(folder: Path):
    model = TiteModel.from_pretrained(folder / "model").eval()
    inputs = json.loads((folder / "inputs.json").read_text())
    outputs = json.loads((folder / "outputs.json").read_text())
    return model, inputs, outputs


def _encode(model: TiteModel, batch: dict, **kwargs):
    with torch.no_grad():
        return model(torch.tensor(batch["input_ids"]), torch.tensor(batch["attention_mask"]), **kwargs)


def test_tite_parity_last_hidden_state(fixture_dir: Path):
    model, inputs, outputs = _load(fixture_dir)
    got = _encode(model, inputs).last_hidden_state
    expected = torch.tensor(outputs["last_hidden_state"])
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected, atol=ATOL, rtol=0)


def test_tite_parity_empty_case(fixture_dir: Path):
    model, inputs, outputs = _load(fixture_dir)
    batch = inputs["empty_case"]
    got = _encode(model, batch).last_hidden_state
    expected = torch.tensor(outputs["empty_case_last_hidden_state"])
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected, atol=ATOL, rtol=0)
    empty = torch.tensor(batch["attention_mask"]).sum(1) == 0
    assert empty.any() and (got[empty] == 0).all()


def test_tite_parity_hidden_states_per_layer(fixture_dir: Path):
    """Every stage (embeddings, then each layer) matches hidden_states.json sequence by sequence."""
    model, inputs, _ = _load(fixture_dir)
    reference = json.loads((fixture_dir / "hidden_states.json").read_text())
    stages = _encode(model, inputs, output_hidden_states=True).split_hidden_states()
    expected_stages = [reference["embedding_output"], *reference["layer_outputs"]]
    assert len(stages) == len(expected_stages)
    for i, (ours, theirs) in enumerate(zip(stages, expected_stages, strict=True)):
        assert [len(t) for t in ours] == [len(t) for t in theirs], f"stage {i} lengths"
        for got, expected in zip(ours, theirs, strict=True):
            torch.testing.assert_close(got, torch.tensor(expected).reshape(got.shape), atol=ATOL, rtol=0)


def test_tite_parity_save_pretrained_round_trip(fixture_dir: Path, tmp_path: Path):
    """Saving writes the reference format: same config fields and values, same state-dict keys and shapes."""
    from safetensors import safe_open

    model, inputs, outputs = _load(fixture_dir)
    model.save_pretrained(tmp_path)
    ours = json.loads((tmp_path / "config.json").read_text())
    theirs = json.loads((fixture_dir / "model" / "config.json").read_text())
    ignored = {"transformers_version", "torch_dtype", "dtype"}  # written by transformers itself
    assert {k: v for k, v in ours.items() if k not in ignored} == {k: v for k, v in theirs.items() if k not in ignored}
    with safe_open(tmp_path / "model.safetensors", "pt") as f:
        saved = {key: list(f.get_slice(key).get_shape()) for key in f.keys()}
    listed = {}
    for line in (fixture_dir / "keys.txt").read_text().splitlines():
        key, shape, _ = line.split("\t")
        listed[key] = json.loads(shape)
    assert saved == listed
    reloaded = TiteModel.from_pretrained(tmp_path).eval()
    torch.testing.assert_close(
        _encode(reloaded, inputs).last_hidden_state, torch.tensor(outputs["last_hidden_state"]), atol=ATOL, rtol=0
    )
