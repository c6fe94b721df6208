"""SPLADE / Aggretriever fine-tuning: hard-negative data, batches, the losses through the shared loop, teacher
scores (MarginMSE), and a tiny end-to-end run on real text: collection tokenizer -> MLM+FLOPS pretraining ->
SPLADE fine-tuning -> PISA index -> retrieval."""

from __future__ import annotations

import pandas as pd
import pyterrier as pt
import pytest
import torch
from _tiny import bert_config, distilbert_config

from pyterrier_tite.pt.splade import Splade
from pyterrier_tite.training.loop import TrainingArguments
from pyterrier_tite.training.splade import fine_tune_splade
from pyterrier_tite.training.splade_data import (
    ContrastiveBatches,
    Example,
    add_teacher_scores,
    doc_texts,
    hard_negative_examples,
)

TOY = [
    Example("1", "magnetic plasma", "plasma in a magnetic field", ["heat in a plate", "library indexing", "flow"]),
    Example("2", "library indexing", "indexing documents in a library", ["plasma flow", "heat transfer"]),
    Example("3", "heat transfer", "heat transfer between plates", ["magnetic field"]),
]


def training_args(tmp_path, name: str, steps: int, **kw) -> TrainingArguments:
    defaults = dict(learning_rate=2e-3, log_every=0, verbose=False, seed=1, warmup_steps=0)
    return TrainingArguments(output_dir=str(tmp_path / name), max_steps=steps, **{**defaults, **kw})


def mean(values) -> float:
    values = list(values)
    return sum(values) / len(values)


def test_the_splade_family_flows_one_way():
    """training/ and models/splade/ of the SPLADE family never import pt/ (nor PyTerrier): retrievers and
    teachers they need are passed in."""
    import subprocess
    import sys

    modules = ["models.splade.tokenization", "models.splade.modeling", "training.splade", "training.splade_data",
               "training.mlm", "training.pseudo_queries"]  # fmt: skip
    code = (
        "import sys\n"
        + "".join(f"import pyterrier_tite.{m}\n" for m in modules)
        + (
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'pyterrier' or "
            "m.startswith(('pyterrier_tite.pt', 'pyterrier_tite.cli'))))"
        )
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    assert done.stdout.strip() == "[]"


# -- data ----------------------------------------------------------------------------------------------------------
def test_batches_layout_and_determinism():
    batches = ContrastiveBatches(TOY, batch_size=2, num_negatives=2, seed=3)
    first = list(batches(0, 0, 1))
    assert [len(b["queries"]) for b in first] == [2, 1]
    for batch in first:
        assert len(batch["docs"]) == 3 * len(batch["queries"]) and batch["teacher"] is None
        for i, query in enumerate(batch["queries"]):
            example = next(e for e in TOY if e.query == query)
            group = batch["docs"][3 * i : 3 * i + 3]
            assert group[0] == example.positive and set(group[1:]) <= set(example.negatives)
    assert first == list(batches(0, 0, 1))
    shards = [q for r in range(2) for b in batches(0, r, 2) for q in b["queries"]]
    assert sorted(shards) == sorted(e.query for e in TOY)
    with pytest.raises(ValueError, match="no training examples"):
        ContrastiveBatches([], batch_size=2)


def test_teacher_scores_reach_the_batches():
    examples = [Example(e.qid, e.query, e.positive, list(e.negatives)) for e in TOY]
    teacher = pt.apply.doc_score(lambda row: float(len(row["text"])))
    add_teacher_scores(examples, teacher, batch_size=4)
    assert examples[0].teacher == {t: float(len(t)) for t in [TOY[0].positive, *TOY[0].negatives]}
    batch = next(iter(ContrastiveBatches(examples, batch_size=3, num_negatives=1)(0, 0, 1)))
    assert batch["teacher"].shape == (3, 2)
    assert batch["teacher"].flatten().tolist() == [float(len(t)) for t in batch["docs"]]


@pytest.mark.slow
def test_hard_negatives_from_bm25_exclude_relevant_documents(irds_home, tite_cache):
    from pyterrier_tite import datasets
    from pyterrier_tite.pt.first_stage import bm25

    negatives = bm25("scifact-train", num_results=20)
    examples = hard_negative_examples("scifact-train", negatives, depth=20, max_queries=15, seed=0)
    assert examples and len({e.qid for e in examples}) <= 15
    qrels = datasets.get_dataset("scifact-train").get_qrels()
    texts = doc_texts("scifact-train")
    for example in examples:
        relevant = {texts[d] for d in qrels[qrels["qid"].astype(str) == example.qid]["docno"].astype(str)}
        assert example.positive in relevant and not relevant & set(example.negatives)
        assert 0 < len(example.negatives) <= 20


# -- the end-to-end run ----------------------------------------------------------------------------------------------
def test_tiny_end_to_end_tokenizer_pretrain_finetune_index_retrieve(tmp_path, irds_home, tite_cache):
    from pyterrier_tite.pt.first_stage import bm25
    from pyterrier_tite.training.mlm import BertSize, pretrain_mlm, pretraining_texts
    from pyterrier_tite.training.tokenizer import train_wordpiece

    torch.set_num_threads(1)
    corpus = pretraining_texts("vaswani", limit=300)
    tokenizer = train_wordpiece(corpus, vocab_size=1500, min_frequency=2)
    size = BertSize(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64, max_position_embeddings=64)
    args = training_args(tmp_path, "mlm", 10, learning_rate=1e-3)
    pretrain_mlm(corpus, tokenizer, args, size=size, objective="mlm+flops", batch_size=16, max_length=48, device="cpu")

    examples = hard_negative_examples("vaswani", bm25("vaswani", num_results=20), depth=20, max_queries=3, seed=0,
                                      allow_evaluation_data=True)  # fmt: skip
    assert examples
    before = Splade.from_pretrained(str(tmp_path / "mlm"), device="cpu", query_max_length=24, doc_max_length=48)
    splade = Splade.from_pretrained(str(tmp_path / "mlm"), device="cpu", query_max_length=24, doc_max_length=48)
    history = fine_tune_splade(
        splade, examples, training_args(tmp_path, "splade", 40), batch_size=8, num_negatives=2, lambda_q=1e-3,
        lambda_d=1e-3, flops_warmup_steps=20,
    )  # fmt: skip
    assert mean(h["contrastive"] for h in history[-8:]) < mean(h["contrastive"] for h in history[:8]) - 0.3
    assert history[0]["flops_q"] == 0.0 and history[-1]["flops_q"] > 0.0

    # index the documents the training queries saw, retrieve those queries through PISA
    docs = sorted({e.positive for e in examples} | {n for e in examples for n in e.negatives})
    frame = pd.DataFrame({"docno": [f"d{i}" for i in range(len(docs))], "text": docs})
    topics = pd.DataFrame({"qid": sorted({e.qid for e in examples})})
    topics["query"] = [next(e.query for e in examples if e.qid == q) for q in topics["qid"]]
    positives = {(e.qid, f"d{docs.index(e.positive)}") for e in examples}

    def mrr(model: Splade, name: str) -> float:
        index = model.indexer(str(tmp_path / name), verbose=False).index(frame.to_dict("records"))
        run = model.retriever(index, num_results=len(docs))(topics)
        assert set(run["qid"]) == set(topics["qid"])
        hits = run[[(q, d) in positives for q, d in zip(run["qid"], run["docno"], strict=True)]]
        return float((1.0 / (hits.groupby("qid")["rank"].min() + 1)).reindex(topics["qid"], fill_value=0).mean())

    trained = Splade.from_pretrained(str(tmp_path / "splade"), device="cpu", query_max_length=24, doc_max_length=48)
    assert mrr(trained, "index_trained") > mrr(before, "index_before")


def test_margin_mse_term_is_used_with_teacher_scores(tmp_path):
    from transformers import BertForMaskedLM

    from pyterrier_tite.models.splade.modeling import SpladeEncoder
    from pyterrier_tite.training.tokenizer import train_wordpiece

    texts = [t for e in TOY for t in [e.query, e.positive, *e.negatives]]
    tokenizer = train_wordpiece(texts * 3, vocab_size=100, min_frequency=1)
    torch.manual_seed(0)
    config = bert_config(len(tokenizer), max_position_embeddings=32)
    splade = Splade(SpladeEncoder(BertForMaskedLM(config)), tokenizer, device="cpu")
    examples = [Example(e.qid, e.query, e.positive, list(e.negatives)) for e in TOY]
    add_teacher_scores(
        examples,
        pt.apply.doc_score(lambda row: 3.0 if row["text"].startswith(("plasma in", "index", "heat t")) else 0.0),
    )  # noqa: E501
    history = fine_tune_splade(splade, examples, training_args(tmp_path, "mmse", 30), batch_size=3, lambda_q=0.0,
                               lambda_d=0.0)  # fmt: skip
    assert all("margin_mse" in h for h in history)
    assert mean(h["margin_mse"] for h in history[-5:]) < mean(h["margin_mse"] for h in history[:5])


def test_a_query_doc_pair_trains_both_sides_and_reloads(tmp_path):
    """efficient-splade layout: queries through one MLM, documents through another; training updates both."""
    from transformers import DistilBertForMaskedLM

    from pyterrier_tite.models.splade.modeling import SpladeEncoder, SpladePair
    from pyterrier_tite.training.tokenizer import train_wordpiece

    texts = [t for e in TOY for t in [e.query, e.positive, *e.negatives]]
    tokenizer = train_wordpiece(texts * 3, vocab_size=100, min_frequency=1)
    torch.manual_seed(0)
    config = distilbert_config(len(tokenizer), max_position_embeddings=32)
    pair = SpladePair(SpladeEncoder(DistilBertForMaskedLM(config)), SpladeEncoder(DistilBertForMaskedLM(config)))
    splade = Splade(pair, tokenizer, device="cpu")
    before = {k: v.clone() for k, v in pair.state_dict().items()}
    examples = [Example(e.qid, e.query, e.positive, list(e.negatives)) for e in TOY]
    fine_tune_splade(splade, examples, training_args(tmp_path, "pair", 3), batch_size=3)
    for role in ("query", "doc"):
        changed = [k for k, v in pair.state_dict().items() if k.startswith(role) and not torch.equal(v, before[k])]
        assert changed, f"the {role} MLM did not train"
    reloaded = Splade.from_pretrained(str(tmp_path / "pair"), device="cpu")
    assert reloaded.is_pair
    for role in ("query", "doc"):
        torch.testing.assert_close(reloaded.encode(texts[:3], 24, role=role), splade.encode(texts[:3], 24, role=role))


# -- pseudo-queries (Inverse Cloze Task) for collections without training queries ------------------------------------
def test_cloze_pair_takes_a_sentence_out_of_its_document():
    import random

    from pyterrier_tite.training.pseudo_queries import cloze_pair

    text = "Plasma flows in a field. Heat moves between the plates. Short. Libraries index their documents well."
    sentences = {"Plasma flows in a field.", "Heat moves between the plates.", "Libraries index their documents well."}
    for seed in range(20):
        query, positive = cloze_pair(text, random.Random(seed), keep=0.0)
        assert query in sentences and query not in positive  # "Short." (< 4 words) is never the query
        assert sorted((positive + " " + query).split()) == sorted(text.split())
    kept = [cloze_pair(text, random.Random(s), keep=1.0) for s in range(5)]
    assert all(q in p for q, p in kept)
    one_sentence = " ".join(f"w{i}" for i in range(30))
    query, positive = cloze_pair(one_sentence, random.Random(0), keep=0.0, span_words=12)
    assert len(query.split()) == 12 and len(positive.split()) == 18 and query not in positive
    assert cloze_pair("too short to split", random.Random(0)) is None


@pytest.mark.slow
def test_pseudo_query_examples_negatives_never_include_the_source_document(irds_home, tite_cache):
    from pyterrier_tite.pt.first_stage import bm25
    from pyterrier_tite.training.pseudo_queries import pseudo_query_examples

    negatives = bm25("cranfield", num_results=20)
    examples = pseudo_query_examples("cranfield", negatives, depth=20, max_docs=40, seed=0)
    texts = doc_texts("cranfield")
    assert 30 <= len(examples) <= 40
    for example in examples:
        source = texts[example.qid.removeprefix("ict-")]
        assert source not in example.negatives and 0 < len(example.negatives) <= 19
        assert example.query in source
    assert examples == pseudo_query_examples("cranfield", negatives, depth=20, max_docs=40, seed=0)
