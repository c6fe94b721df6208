"""Aggretriever fine-tuning (NLL + 0.5 NLL_agg + 0.5 NLL_cls) through the shared loop, FlexIndex retrieval of the
trained model, and the fine-tuning CLI commands on tiny settings (with resume)."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import torch
from _tiny import bert_config
from transformers import BertForMaskedLM

from pyterrier_tite.models.aggretriever.modeling import AggretrieverEncoder
from pyterrier_tite.pt.aggretriever import Aggretriever
from pyterrier_tite.training.aggretriever import AggretrieverTrainingLoss, fine_tune_aggretriever
from pyterrier_tite.training.loop import TrainingArguments
from pyterrier_tite.training.losses import contrastive_loss
from pyterrier_tite.training.splade_data import ContrastiveBatches, Example
from pyterrier_tite.training.tokenizer import train_wordpiece

TOY = [
    Example("1", "magnetic plasma", "plasma in a magnetic field", ["heat in a plate", "library indexing"]),
    Example("2", "library indexing", "indexing documents in a library", ["plasma flow", "heat transfer"]),
    Example("3", "heat transfer", "heat transfer between plates", ["magnetic field", "library"]),
    Example("4", "boundary layer", "the boundary layer over a wing", ["plasma", "documents"]),
]


@pytest.fixture()
def tiny() -> Aggretriever:
    texts = [t for e in TOY for t in [e.query, e.positive, *e.negatives]]
    tokenizer = train_wordpiece(texts * 3, vocab_size=120, min_frequency=1)
    torch.manual_seed(0)
    config = bert_config(len(tokenizer), max_position_embeddings=32)
    encoder = AggretrieverEncoder(BertForMaskedLM(config), agg_dim=8, cls_dim=4)
    return Aggretriever(encoder, tokenizer, device="cpu", query_max_length=16, doc_max_length=16)


def test_loss_is_nll_plus_half_of_each_part(tiny):
    batch = next(iter(ContrastiveBatches(TOY, batch_size=4, num_negatives=1)(0, 0, 1)))
    tiny.encoder.eval()
    loss, parts = AggretrieverTrainingLoss(tiny)(tiny.encoder, batch, 0)
    with torch.no_grad():
        q = torch.from_numpy(tiny.encode_queries(batch["queries"]))
        d = torch.from_numpy(tiny.encode_docs(batch["docs"]))
    nll, nll_cls, nll_agg = (
        contrastive_loss(q, d),
        contrastive_loss(q[:, :4], d[:, :4]),
        contrastive_loss(q[:, 4:], d[:, 4:]),
    )
    torch.testing.assert_close(loss.detach(), nll + 0.5 * nll_cls + 0.5 * nll_agg, rtol=1e-5, atol=1e-5)
    assert parts["nll_cls"] == pytest.approx(0.5 * nll_cls.item(), rel=1e-4)


def test_fine_tuning_learns_and_the_model_indexes_into_flexindex(tmp_path, tiny):
    import pyterrier_dr

    torch.set_num_threads(1)
    args = TrainingArguments(str(tmp_path / "agg"), max_steps=40, learning_rate=3e-3, verbose=False, log_every=0)
    history = fine_tune_aggretriever(tiny, TOY, args, batch_size=4, num_negatives=1)
    assert sum(h["nll"] for h in history[-5:]) < sum(h["nll"] for h in history[:5]) - 1.0
    reloaded = Aggretriever.from_pretrained(str(tmp_path / "agg"), device="cpu", query_max_length=16)
    docs = pd.DataFrame({"docno": [f"d{i}" for i in range(len(TOY))], "text": [e.positive for e in TOY]})
    index = pyterrier_dr.FlexIndex(str(tmp_path / "index"))
    (reloaded >> index).index(docs.to_dict("records"))
    topics = pd.DataFrame({"qid": [e.qid for e in TOY], "query": [e.query for e in TOY]})
    run = (reloaded.query_encoder() >> index.np_retriever())(topics)
    expected = tiny.encode_queries(topics["query"].tolist()) @ tiny.encode_docs(docs["text"].tolist()).T
    for i, qid in enumerate(topics["qid"]):  # the saved model, through FlexIndex, scores as the trained one
        got = run[run["qid"] == qid].set_index("docno")["score"]
        assert got.reindex(docs["docno"]).to_numpy() == pytest.approx(expected[i], rel=1e-4, abs=1e-4)


def test_fine_tuning_clis_on_tiny_settings_resume(tmp_path, irds_home, tite_cache):
    from pyterrier_tite.cli import main

    mlm = tmp_path / "mlm"
    assert main(["pretrain-mlm", "--dataset", "vaswani", "--output-dir", str(mlm), "--vocab-size", "800",
                 "--max-docs", "150", "--hidden-size", "32", "--layers", "1", "--heads", "2",
                 "--intermediate-size", "64", "--max-length", "32", "--batch-size", "8", "--max-steps", "2",
                 "--quiet"]) == 0  # fmt: skip
    common = ["--dataset", "vaswani", "--model", str(mlm), "--max-queries", "3", "--depth", "10", "--batch-size", "4",
              "--query-max-length", "16", "--doc-max-length", "32", "--quiet", "--save-every", "2",
              "--allow-evaluation-data"]  # fmt: skip
    for command, extra in [("train-splade", []), ("train-aggretriever", ["--agg-dim", "16", "--cls-dim", "8"])]:
        out = tmp_path / command
        assert main([command, *common, *extra, "--output-dir", str(out), "--max-steps", "2"]) == 0
        assert main([command, *common, *extra, "--output-dir", str(out), "--max-steps", "4"]) == 0  # resumes at step 2
        log = [json.loads(line) for line in open(out / "log.jsonl")]
        assert [h["step"] for h in log] == [1, 2, 3, 4]
        assert (out / "pt_meta.json").exists()
    meta = json.load(open(tmp_path / "train-aggretriever" / "aggretriever.json"))
    assert meta == {"agg_dim": 16, "cls_dim": 8, "term_weight_relu": True, "vocab_offset": None,
                    "query_max_length": 16, "doc_max_length": 32}  # fmt: skip
