"""TITE checkpoints of every layout load exactly or fail loudly (``models.tite.convert``): doctored copies of
the hub fixtures (a dropped, extra or mis-shaped tensor; other stored settings), stored Lightning IR settings and
their overrides, and every reference ``TiteConfig`` option either working or raising "not supported"."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from _hub import require_fixtures, snapshot
from safetensors.torch import load_file, save_file

from pyterrier_tite.models import CheckpointError, TiteConfig, TiteModel
from pyterrier_tite.models.tite.convert import load_tite_model, load_tite_tokenizer
from pyterrier_tite.pt.tite import TITE

PRETRAINED, LIGHTNING_IR = "webis/tite-2-late", "webis/tite-2-late-msmarco"
POSITIONS_IN_HEAD = "heads.enhanced_masked_auto_encoding.position_embeddings.weight"

pytestmark = pytest.mark.usefixtures("single_thread")


def doctored(repo: str, folder: Path, config: dict | None = None, tensors=None) -> Path:
    """A copy of a fixture snapshot with config fields replaced and ``tensors(state) -> state`` applied."""
    require_fixtures()
    shutil.copytree(snapshot(repo), folder)
    if config:
        stored = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**stored, **config}))
    if tensors:
        save_file(tensors(load_file(folder / "model.safetensors")), folder / "model.safetensors")
    return folder


def without(*keys: str):
    return lambda state: {k: v for k, v in state.items() if k not in keys}


# --- strict loading ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "repo, change, named",
    [
        (PRETRAINED, without(POSITIONS_IN_HEAD), "embeddings.position_embeddings.weight"),
        (PRETRAINED, without("tite.encoder.layers.5.attention.key.bias"), "encoder.layers.5.attention.key.bias"),
        (LIGHTNING_IR, without("encoder.layers.0.mlp.norm.weight"), "encoder.layers.0.mlp.norm.weight"),
        (LIGHTNING_IR, lambda s: {**s, "projection.weight": torch.zeros(32, 32)}, "projection.weight"),
        (PRETRAINED, lambda s: {**s, "tite.pooler.weight": torch.zeros(32)}, "pooler.weight"),
        (LIGHTNING_IR, lambda s: {**s, "embeddings.norm.bias": torch.zeros(16)}, "embeddings.norm.bias"),
    ],
    ids=["pretraining-no-position-table", "pretraining-missing", "lir-missing", "lir-unused", "pretraining-unused",
         "lir-shape"],
)  # fmt: skip
def test_a_doctored_checkpoint_fails_naming_the_tensor(tmp_path, repo, change, named):
    folder = doctored(repo, tmp_path / "m", tensors=change)
    with pytest.raises(CheckpointError, match=named.replace(".", r"\.")):
        TiteModel.from_pretrained(folder)
    with pytest.raises(CheckpointError, match=named.replace(".", r"\.")):
        TITE.from_pretrained(str(folder), device="cpu")


def test_the_position_table_comes_from_its_tied_copy_in_the_pretraining_head():
    require_fixtures()
    model = load_tite_model(PRETRAINED, model_class=TiteModel)
    state = load_file(snapshot(PRETRAINED) / "model.safetensors")
    assert "tite.embeddings.position_embeddings.weight" not in state
    assert torch.equal(model.embeddings.position_embeddings.weight, state[POSITIONS_IN_HEAD])


def test_without_learned_positions_the_heads_table_is_not_used(tmp_path):
    """Reference default (rotary only): the encoder has no table; the MAE head's own one is a pre-training tensor."""
    folder = doctored(PRETRAINED, tmp_path / "m", config={"absolute_positional_embedding_type": None})
    model = TiteModel.from_pretrained(folder)
    assert model.embeddings.position_embeddings is None
    with torch.no_grad():
        assert model(torch.randint(104, 187, (2, 100))).last_hidden_state.shape == (2, 1, 32)


def test_saved_folders_round_trip_exactly(tmp_path):
    require_fixtures()
    model = TITE.from_pretrained(LIGHTNING_IR, device="cpu")
    model.save_pretrained(str(tmp_path / "m"))
    again = TITE.from_pretrained(str(tmp_path / "m"), device="cpu")
    assert again.settings() == model.settings()
    assert json.loads((tmp_path / "m" / "config.json").read_text())["model_type"] == "tite"
    texts = ["what is sparse retrieval?", "dense retrieval encodes the query"]
    torch.testing.assert_close(
        torch.from_numpy(again.encode_docs(texts)), torch.from_numpy(model.encode_docs(texts)), atol=0, rtol=0
    )


# --- settings stored by Lightning IR ----------------------------------------------------------------------------


def test_stored_lengths_markers_and_similarity_are_read_and_overridable(tmp_path):
    stored = {"query_length": 8, "doc_length": 64, "add_marker_tokens": False, "similarity_function": "cosine"}
    folder = doctored(LIGHTNING_IR, tmp_path / "m", config=stored)
    model = TITE.from_pretrained(str(folder), device="cpu")
    assert (model.query_max_length, model.doc_max_length) == (8, 64)
    assert (model.query_marker, model.doc_marker, model.normalize) == (None, None, True)
    vectors = model.encode_queries(["how do neural ranking models encode the long documents of a search engine"])
    assert abs(float((vectors**2).sum()) - 1) < 1e-5
    overridden = TITE.from_pretrained(str(folder), device="cpu", query_max_length=16, query_marker="[QUE]")
    assert (overridden.query_max_length, overridden.query_marker, overridden.doc_marker) == (16, "[QUE]", None)


def test_markers_count_towards_the_length_and_no_special_tokens_are_added():
    require_fixtures()
    model = TITE.from_pretrained(LIGHTNING_IR, device="cpu")
    ids = model.tokenizer([f"[QUE] {'rank ' * 40}"], truncation=True, max_length=model.query_max_length)["input_ids"]
    assert len(ids[0]) == 32 and ids[0][0] == model.tokenizer.convert_tokens_to_ids("[QUE]") == 187
    assert 101 not in ids[0] and 102 not in ids[0]


@pytest.mark.parametrize(
    "stored, message",
    [
        ({"similarity_function": "l2"}, "similarity_function"),
        ({"projection": "linear", "embedding_dim": 16}, "projection"),
        ({"doc_pooling_strategy": "mean"}, "doc_pooling_strategy"),
        ({"sparsification": "relu"}, "sparsification"),
        ({"model_type": "lir-col"}, "lir-col"),
    ],
)
def test_unsupported_lightning_ir_settings_raise(tmp_path, stored, message):
    folder = doctored(LIGHTNING_IR, tmp_path / "m", config=stored)
    with pytest.raises(ValueError, match=f"not supported: .*{message}"):
        TITE.from_pretrained(str(folder), device="cpu")


def test_a_lightning_ir_model_on_another_backbone_is_not_taken_for_tite(tmp_path):
    folder = doctored(LIGHTNING_IR, tmp_path / "m", config={"backbone_model_type": "bert"})
    with pytest.raises(CheckpointError, match="'bert' backbone"):
        TiteModel.from_pretrained(folder)


def test_unregistered_tokenizer_classes_keep_the_stored_template():
    require_fixtures()
    for repo in (PRETRAINED, LIGHTNING_IR):
        tokenizer = load_tite_tokenizer(repo)
        assert tokenizer("zebra")["input_ids"] == [134, 139, 136, 152, 135]  # z ##e ##b ##r ##a, no [CLS]/[SEP]


# --- reference TiteConfig options -------------------------------------------------------------------------------


def test_reference_defaults():
    """The reference ``TiteConfig()`` defaults, so a config that leaves a field out means the same here."""
    config = TiteConfig(num_hidden_layers=2)
    assert config.absolute_positional_embedding_type is None
    assert config.relative_positional_embedding_type == "rotary"
    assert (config.rotary_interleaved, config.norm_location, config.norm_type) == (True, "pre", "rms")
    assert (config.pooling_location, config.hidden_act, config.pad_token_id) == ("intra", "gelu_pytorch_tanh", 0)
    assert (config.pooling_implementation, config.rope_implementation) == ("triton", "eager")
    assert TiteModel(config).embeddings.position_embeddings is None


@pytest.mark.parametrize("value", [None, "none"])
def test_no_absolute_positions_work(value):
    config = TiteConfig(num_hidden_layers=2, hidden_sizes=16, num_attention_heads=2, intermediate_sizes=32,
                        vocab_size=50, absolute_positional_embedding_type=value)  # fmt: skip
    assert config.absolute_positional_embedding_type is None
    model = TiteModel(config).eval()
    assert "embeddings.position_embeddings.weight" not in model.state_dict()
    assert model(torch.randint(1, 50, (2, 7))).last_hidden_state.shape == (2, 7, 16)


@pytest.mark.parametrize(
    "option, message",
    [
        (dict(relative_positional_embedding_type="alibi"), "relative_positional_embedding_type='alibi'"),
        (dict(positional_embedding_type="alibi"), "relative_positional_embedding_type='alibi'"),
        (dict(absolute_positional_embedding_type="sinusoidal"), "absolute_positional_embedding_type"),
        (dict(norm_location="sandwich"), "norm_location"),
        (dict(norm_type="batch"), "norm_type"),
        (dict(pooling_location="late"), "pooling_location"),
        (dict(hidden_act="no-such-activation"), "hidden_act"),
        (dict(pooling_implementation="cuda"), "pooling_implementation"),
        (dict(rope_implementation="cuda"), "rope_implementation"),
    ],
)
def test_options_we_do_not_implement_say_so(option, message):
    with pytest.raises(ValueError, match=f"not supported: {message}"):
        TiteConfig(num_hidden_layers=2, **option)


@pytest.mark.parametrize(
    "option",
    [
        dict(norm_location="qkv"), dict(norm_location="post", norm_type="layer"), dict(hidden_act="swiglu"),
        dict(pooling_implementation="eager", rope_implementation="triton"), dict(positional_embedding_type="rotary"),
        dict(positional_embedding_type="absolute"), dict(relative_positional_embedding_type=None),
        dict(pooling_location="pre"), dict(pooling_location="post"), dict(rotary_interleaved=False),
    ],
)  # fmt: skip
def test_options_we_implement_build_and_run(option):
    config = TiteConfig(num_hidden_layers=2, hidden_sizes=16, num_attention_heads=2, intermediate_sizes=32,
                        vocab_size=50, kernel_sizes=[None, 8], strides=[None, 8], max_position_embeddings=8,
                        **option)  # fmt: skip
    out = TiteModel(config).eval()(torch.randint(1, 50, (2, 8))).last_hidden_state
    assert out.shape == (2, 1, 16) and torch.isfinite(out).all()


def test_an_upscaled_pretraining_checkpoint_loads_with_its_tied_tables(tmp_path):
    """Layout of ``webis/tite-2-late-upscale`` (per-layer widths, embeddings at the last width + downscale): the
    position table and the word embeddings survive only as tied copies in heads; the heads' own (upscale) embedding
    norm is not the encoder's and is ignored."""
    config = TiteConfig(num_hidden_layers=4, hidden_sizes=[16, 16, 32, 32], num_attention_heads=[2, 2, 4, 4],
                        intermediate_sizes=[32, 32, 64, 64], kernel_sizes=[None, 4, 4, 4], strides=[None, 4, 4, 4],
                        max_position_embeddings=64, vocab_size=50, absolute_positional_embedding_type="learned",
                        norm_location="post", norm_type="layer")  # fmt: skip
    torch.manual_seed(0)
    original = TiteModel(config).eval()
    state = {f"tite.{k}": v.clone() for k, v in original.state_dict().items()}
    mae = "heads.enhanced_masked_auto_encoding"
    state[f"{mae}.position_embeddings.weight"] = state.pop("tite.embeddings.position_embeddings.weight")
    state["lm_decoder.weight"] = state.pop("tite.embeddings.word_embeddings.weight")
    state[f"{mae}.embedding_norm.weight"] = torch.randn(16)
    state["heads.bow_auto_encoding.lm_head.dense.weight"] = torch.randn(32, 32)
    (tmp_path / "m").mkdir()
    save_file(state, tmp_path / "m" / "model.safetensors")
    stored = {**config.to_dict(), "architectures": ["TiteForPreTraining"]}
    (tmp_path / "m" / "config.json").write_text(json.dumps(stored))
    loaded = TiteModel.from_pretrained(tmp_path / "m")
    ids = torch.randint(1, 50, (3, 64)) * (torch.arange(64) < torch.tensor([[64], [9], [1]]))
    with torch.no_grad():
        expected = original(ids, (ids > 0).long()).last_hidden_state
        torch.testing.assert_close(loaded(ids, (ids > 0).long()).last_hidden_state, expected, atol=0, rtol=0)


def test_from_bert_takes_a_distilbert_hub_id():
    """``TITE.from_bert`` on DistilBERT (a released DistilBERT MLM layout, by hub id): without pooling it computes
    what DistilBERT computes; by default it pools to one vector."""
    require_fixtures()
    from transformers import AutoModel

    repo = "naver/efficient-splade-V-large-query"
    exact = TITE.from_bert(repo, {"num_pooling_layers": 0, "final_pooling": "none"}, query_marker=None, device="cpu")
    batch = exact.tokenizer(["what is sparse retrieval?"], return_tensors="pt")
    distilbert = AutoModel.from_pretrained(snapshot(repo)).eval()
    with torch.no_grad():
        expected = distilbert(**batch).last_hidden_state
        torch.testing.assert_close(exact.model(**batch).last_hidden_state, expected, atol=1e-5, rtol=0)
    pooled = TITE.from_bert(repo, device="cpu")
    assert pooled.encode_queries(["what is sparse retrieval?"]).shape == (1, pooled.dim)


def test_from_pretrained_options_are_honoured_or_refused():
    """``TiteModel.from_pretrained`` (also reached through ``AutoModel``): config fields override, dtype casts, the
    attention implementation is ignored (kernels are picked by device); options it would not honour raise."""
    require_fixtures()
    from transformers import AutoModel

    model = TiteModel.from_pretrained(PRETRAINED, dropout_prob=0.0, dtype=torch.float64, attn_implementation="eager")
    assert model.config.dropout_prob == 0.0 and model.embeddings.word_embeddings.weight.dtype == torch.float64
    assert type(AutoModel.from_pretrained(PRETRAINED)) is TiteModel
    for option in (dict(revision="v2"), dict(no_such_option=1)):
        with pytest.raises(TypeError):
            TiteModel.from_pretrained(PRETRAINED, **option)
