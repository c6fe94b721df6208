"""Sparse cross-encoder checkpoints load exactly or fail loudly: doctored copies of the released-layout hub fixture
(missing / unused / mis-shaped tensors, no tokenizer for the absent ``sep_token_id``), settings read from the
checkpoint (window, pattern, positions, lengths; hub id or folder) with explicit arguments overriding, both weight
files, and a plain BERT start that creates its score head with one warning."""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import pytest
import torch
from _hub import require_fixtures, snapshot
from _tiny import bert_config, word_tokenizer
from safetensors.torch import load_file, save_file

from pyterrier_tite.models import CheckpointError, SparseCrossEncoder
from pyterrier_tite.pt.rerankers import CrossEncoderReranker, MonoCE, SparseCE

REPO = "webis/sparse-cross-encoder-4-4096"
QUERY, DOCS = "search ranking", ["a document about search", "rank the document"]

pytestmark = pytest.mark.usefixtures("single_thread")


@pytest.fixture(scope="module")
def released() -> Path:
    require_fixtures()
    return snapshot(REPO)


def copy_of(released: Path, tmp_path: Path, keep_bin: bool = False) -> Path:
    """A writable copy of the fixture (safetensors only unless ``keep_bin``)."""
    folder = tmp_path / "copy"
    shutil.copytree(released, folder)
    if not keep_bin:
        (folder / "pytorch_model.bin").unlink()
    return folder


def edit_weights(folder: Path, edit) -> None:
    state = load_file(folder / "model.safetensors")
    edit(state)
    save_file(state, folder / "model.safetensors", metadata={"format": "pt"})


def edit_config(folder: Path, **changes) -> None:
    config = json.loads((folder / "config.json").read_text())
    config.update(changes)
    (folder / "config.json").write_text(json.dumps(config))


def scores(reranker) -> list[float]:
    import pandas as pd

    frame = pd.DataFrame([{"qid": "1", "query": QUERY, "docno": str(i), "text": t} for i, t in enumerate(DOCS)])
    return reranker(frame).set_index("docno")["score"].sort_index().tolist()


# ------------------------------------------------------------------------------------------- loud failures
def test_missing_tensor_is_an_error_naming_it(released, tmp_path):
    folder = copy_of(released, tmp_path)
    edit_weights(folder, lambda s: s.pop("bert.encoder.layer.1.attention.self.key.weight"))
    for load in (SparseCE, CrossEncoderReranker.from_pretrained, SparseCrossEncoder.from_bert):
        with pytest.raises(CheckpointError, match=r"missing from the checkpoint: bert\.encoder\.layer\.1\.attention"):
            load(str(folder))


def test_unused_and_misshaped_tensors_are_errors_naming_them(released, tmp_path):
    folder = copy_of(released, tmp_path)
    edit_weights(folder, lambda s: s.update({"bert.encoder.layer.2.output.dense.weight": torch.zeros(32, 64)}))
    with pytest.raises(CheckpointError, match=r"unused: bert\.encoder\.layer\.2\.output\.dense\.weight"):
        SparseCE(str(folder))
    edit_weights(folder, lambda s: s.pop("bert.encoder.layer.2.output.dense.weight"))
    two_labels = {"classifier.weight": torch.zeros(2, 32), "classifier.bias": torch.zeros(2)}
    edit_weights(folder, lambda s: s.update(two_labels))
    with pytest.raises(CheckpointError, match=r"wrong shape: classifier\.bias"):
        SparseCE(str(folder))


def test_a_cross_encoder_checkpoint_without_its_pooler_is_not_a_new_head_start(released, tmp_path):
    folder = copy_of(released, tmp_path)
    config = json.loads((folder / "config.json").read_text())
    del config["attention_window_size"]  # a plain BertForSequenceClassification config
    (folder / "config.json").write_text(json.dumps(config))
    edit_weights(folder, lambda s: [s.pop(k) for k in ("bert.pooler.dense.weight", "bert.pooler.dense.bias")])
    with pytest.raises(CheckpointError, match=r"bert\.pooler\.dense\.bias"):
        SparseCE(str(folder))


def test_missing_sep_token_id_comes_from_the_tokenizer_never_from_a_default(released, tmp_path):
    assert "sep_token_id" not in json.loads((released / "config.json").read_text())
    assert SparseCE(str(released)).scorer.config.sep_token_id == 102
    folder = copy_of(released, tmp_path)
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        (folder / name).unlink()
    with pytest.raises(CheckpointError, match="sep_token_id"):
        SparseCrossEncoder.from_bert(str(folder))
    with pytest.raises(FileNotFoundError, match="tokenizer="):
        SparseCE(str(folder))
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(released)
    assert scores(SparseCE(str(folder), tokenizer=tokenizer)) == pytest.approx(scores(SparseCE(str(released))), abs=0)


# ------------------------------------------------------------------------------------------- exact loads, settings
def test_bin_and_safetensors_load_the_same_and_without_a_report(released, tmp_path):
    folder = copy_of(released, tmp_path, keep_bin=True)
    (folder / "model.safetensors").unlink()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an exact load reports nothing
        from_bin = SparseCE(str(folder))
    assert scores(from_bin) == pytest.approx(scores(SparseCE(str(released))), abs=0)


def test_defaults_follow_the_checkpoint_and_explicit_arguments_override(released):
    model = SparseCE(str(released))
    assert (model.query_max_length, model.doc_max_length) == (30, None)
    assert model.scorer.max_positions() == 4096
    long_doc = " ".join(["search"] * 3000)
    assert len(model.inputs.docs([long_doc])[0]) == 3000  # the tokenizer's model_max_length 512 does not apply
    assert len(model.inputs.fit_doc([5] * 30, [7] * 5000)) == 4096 - 30 - 3  # the reference's max_length - len(q) - 3
    explicit = SparseCE(str(released), query_max_length=8, doc_max_length=100, w=1)
    assert (explicit.query_max_length, explicit.doc_max_length) == (8, 100)
    assert explicit.scorer.config.attention_window_size == 1
    assert len(explicit.inputs.docs([long_doc])[0]) == 100


def test_window_and_pattern_are_read_from_a_hub_checkpoint(released, tmp_path, monkeypatch):
    """A hub id whose config stores another pattern is run with it (not the released one forced)."""
    import huggingface_hub.constants as hf

    repo = tmp_path / "hub" / "models--test--sparse-ce-2-sym"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("0" * 40)
    shutil.copytree(released, repo / "snapshots" / ("0" * 40))
    edit_config(repo / "snapshots" / ("0" * 40), attention_window_size=2, query_doc_attention=True)
    monkeypatch.setattr(hf, "HF_HUB_CACHE", str(tmp_path / "hub"))
    model = CrossEncoderReranker.from_pretrained("test/sparse-ce-2-sym")
    config = model.scorer.config
    assert isinstance(model, SparseCE) and config.attention_window_size == 2 and config.query_doc_attention
    assert not config.query_cls_attention and (model.query_max_length, model.doc_max_length) == (30, None)


def test_saved_folder_keeps_its_lengths_and_loads_exactly(released, tmp_path):
    model = SparseCE(str(released), query_max_length=12)
    model.save_pretrained(tmp_path / "saved")
    meta = json.loads((tmp_path / "saved" / "pt_meta.json").read_text())
    assert (meta["query_max_length"], meta["doc_max_length"]) == (12, None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loaded = CrossEncoderReranker.from_pretrained(tmp_path / "saved")
    assert isinstance(loaded, SparseCE) and (loaded.query_max_length, loaded.doc_max_length) == (12, None)
    assert scores(loaded) == pytest.approx(scores(model), abs=1e-6)
    assert SparseCE(tmp_path / "saved", query_max_length=30).query_max_length == 30


def test_plain_bert_start_makes_a_new_head_and_says_so_once(tmp_path):
    from transformers import BertForMaskedLM

    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "search", "rank"]
    word_tokenizer(words).save_pretrained(tmp_path)
    config = bert_config(7)
    BertForMaskedLM(config).save_pretrained(tmp_path)
    with pytest.warns(UserWarning) as record:
        model = SparseCE(str(tmp_path))
    reports = [str(r.message) for r in record if "new weights" in str(r.message)]
    assert len(reports) == 1 and "classifier.weight" in reports[0] and "bert.pooler.dense.weight" in reports[0]
    assert "ignored: cls.predictions" in reports[0]
    assert model.scorer.config.attention_window_size == 4 and model.scorer.config.shares_query
    assert (model.scorer.config.cls_token_id, model.scorer.config.sep_token_id) == (2, 3)
    with pytest.warns(UserWarning, match=r"classifier\.weight.*'celi' score head"):
        MonoCE(str(tmp_path), head="celi")
