"""Aggretriever checkpoint layouts (pyserini, castorini dhr, ours, plain MLM) load exactly, or fail naming what does
not fit. Vectors are checked against the reference formula written out here (pyserini's ``BERTAggretrieverEncoder``
arithmetic, one text at a time), for BERT and DistilBERT backbones."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from _hub import require_fixtures, snapshot
from _tiny import bert_config, distilbert_config
from torch import nn
from transformers import BertForMaskedLM, BertTokenizer, DistilBertForMaskedLM

from pyterrier_tite.models.aggretriever.convert import castorini_offset, detect_layout
from pyterrier_tite.models.aggretriever.modeling import load_aggretriever
from pyterrier_tite.models.checkpoint import CheckpointError
from pyterrier_tite.pt.aggretriever import Aggretriever

pytestmark = pytest.mark.usefixtures("single_thread")

FIXTURE = "castorini/aggretriever-cocondenser"
WORDS = "sparse dense retrieval search index query document neural model rank text the a of and is".split()
TEXTS = ["sparse retrieval is search", "the neural model ranks a document of text and a query", "index"]


def write_vocabulary(folder: str) -> BertTokenizer:
    """A bert-base-uncased id layout with 1082 ids (the smallest castorini's d = 640 aggregation accepts)."""
    tokens = ["[PAD]"] + [f"[unused{i}]" for i in range(99)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tokens += [f"[unused{i}]" for i in range(99, 99 + 999 - len(tokens))]
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    tokens += WORDS + letters + [f"##{c}" for c in letters]
    tokens += [f"##w{i}" for i in range(1082 - len(tokens))]
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "vocab.txt"), "w") as f:
        f.write("\n".join(tokens) + "\n")
    tokenizer = BertTokenizer(os.path.join(folder, "vocab.txt"))
    tokenizer.save_pretrained(folder)
    return tokenizer


def redraw(module: nn.Module, seed: int) -> None:
    """Wide random weights, so every tensor visibly changes the vectors (as the hub fixtures do)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in module.named_parameters():
            scale = 0.1 if name.endswith("bias") else 0.2
            base = 1.0 if "LayerNorm.weight" in name or "layer_norm.weight" in name else 0.0
            param.copy_(base + scale * torch.randn(param.shape, generator=generator))


def tiny_mlm(family: str) -> nn.Module:
    if family == "distilbert":
        config = distilbert_config(1082, layers=2, max_position_embeddings=64)
        return DistilBertForMaskedLM(config).eval()
    config = bert_config(1082, layers=2, max_position_embeddings=64)
    return BertForMaskedLM(config).eval()


def reference_vector(mlm, term: nn.Linear, cls: nn.Linear | None, ids: list[int]) -> torch.Tensor:
    """One text, no padding: softmax(logits) * raw term weight, max over non-[CLS] positions, 198 zeros appended,
    rows of 1280, max, then ``p if p > n else -n`` over (even, odd) pairs; ``[cls_proj ; agg]``."""
    with torch.no_grad():
        out = mlm(input_ids=torch.tensor([ids]), output_hidden_states=True)
        hidden = out.hidden_states[-1][0]
        lexical = (torch.softmax(out.logits[0, 1:], dim=-1) * term(hidden[1:])).max(dim=0).values
        rows = F.pad(lexical, (0, 198)).view(-1, 1280).max(dim=0).values
        pos, neg = rows[0::2], rows[1::2]
        agg = torch.where(pos > neg, pos, -neg)
        return agg if cls is None else torch.cat([cls(hidden[0]), agg])


@pytest.mark.parametrize("family", ["bert", "distilbert"])
def test_pyserini_layout_any_backbone(family, tmp_path):
    """pyserini's layout (MLM under ``encoder.``, top-level ``tok_proj`` / ``cls_proj``) for BERT and DistilBERT:
    batched vectors equal the reference formula one text at a time."""
    folder = str(tmp_path / family)
    tokenizer = write_vocabulary(folder)
    torch.manual_seed(0)
    mlm, term, cls = tiny_mlm(family), nn.Linear(16, 1), nn.Linear(16, 128)
    for i, module in enumerate([mlm, term, cls]):
        redraw(module, i)
    mlm.config.architectures = ["DistlBERTAggretrieverEncoder" if family == "distilbert" else "BERTAggretrieverEncoder"]
    mlm.config.output_hidden_states = True
    mlm.config.save_pretrained(folder)
    state = {f"encoder.{k}": v for k, v in mlm.state_dict().items()}
    state.update({f"tok_proj.{k}": v for k, v in term.state_dict().items()})
    state.update({f"cls_proj.{k}": v for k, v in cls.state_dict().items()})
    torch.save(state, os.path.join(folder, "pytorch_model.bin"))

    model = Aggretriever.from_pretrained(folder, device="cpu", batch_size=3)
    assert (model.query_max_length, model.doc_max_length) == (32, 512)
    got = model.encode_docs(TEXTS)
    expected = np.stack([reference_vector(mlm, term, cls, tokenizer(t)["input_ids"]).numpy() for t in TEXTS])
    assert got.shape == (3, 768)
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5)
    assert np.abs(expected[:, 128:]).max() > 1e-3  # the lexical part matters


def dhr_pooler(inputs: int, outputs: int, seed: int, tied: bool = True) -> nn.Module:
    """What castorini/dhr's ``LinearPooler`` saves: ``linear_q`` and ``linear_p`` (the same module when tied)."""
    torch.manual_seed(seed)
    pooler = nn.Module()
    pooler.linear_q = nn.Linear(inputs, outputs)
    pooler.linear_p = pooler.linear_q if tied else nn.Linear(inputs, outputs)
    redraw(pooler, seed)
    return pooler


def write_dhr(folder: str, mlm: nn.Module, poolers: dict[str, nn.Module]) -> None:
    mlm.save_pretrained(folder)
    for name, pooler in poolers.items():
        torch.save(pooler.state_dict(), os.path.join(folder, f"{name}.pt"))
        tied = pooler.linear_p is pooler.linear_q
        config = {"input_dim": 16, "output_dim": pooler.linear_q.out_features, "tied": tied}
        with open(os.path.join(folder, f"{name}_config.json"), "w") as f:
            json.dump(config, f)


@pytest.mark.parametrize("with_cls", [True, False], ids=["cls128", "no-pooler"])
def test_dhr_layout(with_cls, tmp_path):
    """castorini/dhr's save format: MLM + ``TermWeightTrans.pt`` (+ ``pooler.pt``); tied poolers save both names."""
    folder = str(tmp_path / "dhr")
    tokenizer = write_vocabulary(folder)
    mlm = tiny_mlm("bert")
    redraw(mlm, 5)
    poolers = {"TermWeightTrans": dhr_pooler(16, 1, 6)}
    if with_cls:
        poolers["pooler"] = dhr_pooler(16, 128, 7)
    write_dhr(folder, mlm, poolers)
    assert sorted(torch.load(os.path.join(folder, "pooler.pt" if with_cls else "TermWeightTrans.pt"))) == [
        "linear_p.bias", "linear_p.weight", "linear_q.bias", "linear_q.weight"]  # fmt: skip

    model = Aggretriever.from_pretrained(folder, device="cpu")
    assert (model.query_max_length, model.doc_max_length, model.encoder.cls_dim) == (32, 128, 128 if with_cls else 0)
    cls = poolers["pooler"].linear_q if with_cls else None
    ids = [tokenizer(t)["input_ids"] for t in TEXTS]
    expected = np.stack([reference_vector(mlm, poolers["TermWeightTrans"].linear_q, cls, i).numpy() for i in ids])
    np.testing.assert_allclose(model.encode_queries(TEXTS), expected, rtol=0, atol=1e-5)


def test_dhr_layouts_that_are_two_models_are_refused(tmp_path):
    folder = str(tmp_path / "untied-heads")
    write_vocabulary(folder)
    write_dhr(folder, tiny_mlm("bert"), {"TermWeightTrans": dhr_pooler(16, 1, 1, tied=False)})
    with pytest.raises(CheckpointError, match="not supported: .*TermWeightTrans.pt holds separate query and passage"):
        load_aggretriever(folder)
    os.makedirs(tmp_path / "untied" / "query_model")
    with pytest.raises(CheckpointError, match="not supported: .*untied query and passage encoders"):
        detect_layout(str(tmp_path / "untied"), {})


# -- the hub fixture, doctored ---------------------------------------------------------------------------------------
@pytest.fixture()
def fixture_copy(tmp_path) -> str:
    require_fixtures()
    folder = str(tmp_path / "copy")
    shutil.copytree(snapshot(FIXTURE), folder)
    return folder


def _doctor(folder: str, change) -> None:
    file = os.path.join(folder, "pytorch_model.bin")
    state = torch.load(file, weights_only=True)
    change(state)
    os.chmod(file, 0o644)
    torch.save(state, file)


def test_fixture_missing_or_unused_tensors_are_named(fixture_copy):
    assert detect_layout(fixture_copy, torch.load(os.path.join(fixture_copy, "pytorch_model.bin"))) == "pyserini"
    _doctor(fixture_copy, lambda s: s.pop("encoder.bert.encoder.layer.1.output.dense.weight"))
    with pytest.raises(CheckpointError, match=r"1 tensors missing from the checkpoint: mlm\.bert\.encoder\.layer\.1"):
        Aggretriever.from_pretrained(fixture_copy)
    _doctor(fixture_copy, lambda s: s.update({"encoder.bert.encoder.layer.1.output.dense.weight": torch.zeros(32, 64),
                                               "tok_proj.extra": torch.zeros(1)}))  # fmt: skip
    with pytest.raises(CheckpointError, match=r"1 tensors in the checkpoint but unused: term_weight\.extra"):
        Aggretriever.from_pretrained(fixture_copy)
    _doctor(fixture_copy, lambda s: (s.pop("tok_proj.extra"), s.pop("tok_proj.bias")))
    with pytest.raises(CheckpointError, match=r"missing from the checkpoint: term_weight\.bias"):
        Aggretriever.from_pretrained(fixture_copy)


def test_fixture_tied_copies_that_differ_are_refused(fixture_copy):
    _doctor(fixture_copy, lambda s: s["encoder.cls.predictions.decoder.weight"].add_(1.0))
    with pytest.raises(CheckpointError, match="tied in the model but differ"):
        Aggretriever.from_pretrained(fixture_copy)


def test_fixture_round_trips_through_our_layout(fixture_copy, tmp_path):
    """Loaded from pyserini's layout and saved in ours, the model keeps its settings and vectors."""
    model = Aggretriever.from_pretrained(fixture_copy, device="cpu")
    model.save_pretrained(str(tmp_path / "ours"))
    settings = json.load(open(tmp_path / "ours" / "aggretriever.json"))
    assert settings == {"agg_dim": 640, "cls_dim": 128, "term_weight_relu": False, "vocab_offset": -198,
                        "query_max_length": 32, "doc_max_length": 512}  # fmt: skip
    again = Aggretriever.from_pretrained(str(tmp_path / "ours"), device="cpu")
    np.testing.assert_array_equal(again.encode_docs(TEXTS), model.encode_docs(TEXTS))
    assert again.encoder.settings() == model.encoder.settings()
    with pytest.raises(ValueError, match="trained with cls_dim=128, not 64"):
        load_aggretriever(str(tmp_path / "ours"), cls_dim=64)


def test_plain_mlm_needs_new_heads_and_says_so_once(tmp_path):
    folder = str(tmp_path / "mlm")
    write_vocabulary(folder)
    tiny_mlm("bert").save_pretrained(folder)
    with pytest.raises(CheckpointError, match="pass new_heads=True"):
        Aggretriever.from_pretrained(folder)
    with pytest.warns(UserWarning, match="plain MLM") as caught:
        model = Aggretriever.from_pretrained(folder, new_heads=True, agg_dim=8, cls_dim=4, device="cpu")
    assert len([w for w in caught if "plain MLM" in str(w.message)]) == 1
    assert model.encoder.settings() == {"agg_dim": 8, "cls_dim": 4, "term_weight_relu": True, "vocab_offset": None}


def test_castorini_offset_and_vocabularies_it_cannot_slice(tmp_path):
    """dhr's ``cal_remove_dim`` from 30,522: pad 198 for d = 640 and 768; drop the first 826 ids for d = 512."""
    assert [castorini_offset(2 * d) for d in (640, 768, 512, 128)] == [-198, -198, 826, 58]
    folder = str(tmp_path / "odd")
    write_vocabulary(folder)
    mlm = tiny_mlm("bert")
    mlm.config.save_pretrained(folder)
    state = {f"encoder.{k}": v for k, v in mlm.state_dict().items()}
    state.update({"tok_proj.weight": torch.zeros(1, 16), "tok_proj.bias": torch.zeros(1)})
    state.update({"cls_proj.weight": torch.zeros(128, 16), "cls_proj.bias": torch.zeros(128)})
    torch.save(state, os.path.join(folder, "pytorch_model.bin"))
    with pytest.raises(CheckpointError, match="not supported: .* 1082 vocabulary ids; .* for agg_dim 512"):
        load_aggretriever(folder, agg_dim=512)
