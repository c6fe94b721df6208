"""experiments/distill_rerankers/gpu.py, the distillation recipe split for a GPU machine without the data: its
torch-only side builds the same models as the recipe and scores as the re-rankers do; ``train`` keeps every finished
model's scores when another fails; ``evaluate`` computes the recipe's statistics from stored scores."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch
from transformers import AutoTokenizer

from experiments.distill_rerankers import carry
from experiments.distill_rerankers import gpu as script
from experiments.distill_rerankers.recipe import build_variant
from pyterrier_tite.models.cross_encoder.pair_scoring import score_by_query
from pyterrier_tite.training.loop import seed_everything
from tests._tiny import save_tiny_bert

VARIANTS = ["mono", "sparse-w4", "sparse-winf", "sparse-w2-sym", "celi-mono", "celi-w1"]


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory) -> str:
    """A 1-layer BERT with the MiniLM vocabulary, saved as a plain start point."""
    return save_tiny_bert(tmp_path_factory.mktemp("tiny_bert"))


PAIRS = pd.DataFrame(
    {
        "qid": ["q1", "q1", "q1", "q2", "q2"],
        "query": ["cheap flights", "cheap flights", "cheap flights", "gene expression", "gene expression"],
        "docno": ["a", "b", "c", "a", "d"],
        "text": [
            "airlines sell cheap flights in spring",
            "a very long document " * 20,
            "nothing",
            "airlines sell cheap flights in spring",
            "gene expression in yeast cells",
        ],
    }
)


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_script_builds_the_recipes_model_and_scores_as_the_reranker(variant, tiny_bert):
    seed_everything(7)
    reranker = build_variant(variant, tiny_bert, device="cpu", dtype=torch.float32)
    seed_everything(7)
    scorer, inputs = script.build(variant, tiny_bert, AutoTokenizer.from_pretrained(tiny_bert))
    expected = reranker.scorer.state_dict()
    got = scorer.state_dict()
    assert sorted(got) == sorted(expected)
    assert all(torch.equal(got[k], expected[k]) for k in got)  # same fresh head from the same seed
    assert inputs.lengths() == reranker.inputs.lengths() and inputs.max_positions == reranker.inputs.max_positions
    assert scorer.is_sparse == reranker.scorer.is_sparse
    if scorer.is_sparse:
        pattern = ("attention_window_size", "query_cls_attention", "query_doc_attention")
        assert [getattr(scorer.config, f) for f in pattern] == [getattr(reranker.scorer.config, f) for f in pattern]
        assert scorer.config.query_doc_attention == variant.endswith("-sym")
    queries = dict(zip(PAIRS["qid"], inputs.queries(PAIRS["query"].tolist()), strict=False))
    scores = score_by_query(
        scorer.eval(), inputs, PAIRS["qid"].to_numpy(), queries, inputs.docs(PAIRS["text"].tolist()), 2, "cpu", "fp32"
    )
    by_pair = reranker.transform(PAIRS).set_index(["qid", "docno"])["score"]
    np.testing.assert_allclose(scores, by_pair.loc[list(zip(PAIRS["qid"], PAIRS["docno"], strict=True))], atol=1e-6)


def tiny_bundle(folder, start: str, datasets: dict[str, pd.DataFrame]) -> str:
    """A bundle of two training queries and ``datasets``' candidates (qid, query, docno, text, score)."""
    texts: dict[str, int] = {}

    def index(values) -> list[int]:
        return [texts.setdefault(str(v), len(texts)) for v in values]

    train = PAIRS.assign(rank=[0, 1, 2, 0, 1], teacher=[3.0, 1.0, 0.0, 2.0, -1.0], label=[1, 0, 0, 1, 0])
    rows = {
        "qid": train["qid"].tolist(), "query": index(train["query"]), "docno": train["docno"].tolist(),
        "text": index(train["text"]), "rank": train["rank"].tolist(), "teacher": train["teacher"].tolist(),
        "label": train["label"].tolist(),
    }  # fmt: skip
    evaluation = {
        name: {
            "qid": frame["qid"].tolist(), "query": index(frame["query"]), "docno": frame["docno"].tolist(),
            "text": index(frame["text"]), "score": frame["score"].tolist(),
        }
        for name, frame in datasets.items()
    }  # fmt: skip
    carry.save_bundle(str(folder), {"sources": "tiny"}, list(texts), rows, evaluation, start)
    return str(folder)


def test_train_scores_every_candidate_and_keeps_going_past_a_failed_model(tiny_bert, tmp_path, capsys):
    bundle = tiny_bundle(tmp_path / "bundle", tiny_bert, {"tiny": PAIRS.assign(score=[3.0, 2.0, 1.0, 2.0, 1.0])})
    out = tmp_path / "out"
    script.main(
        ["train", "--bundle", bundle, "--out", str(out), "--workdir", str(tmp_path / "work"), "--device", "cpu",
         "--precision", "fp32", "--models", "sparse-w4,sparse-wrong", "--seeds", "1,2", "--then-models", "mono",
         "--max-steps", "2", "--warmup-steps", "1", "--queries-per-batch", "1", "--negatives", "2"]
    )  # fmt: skip
    printed = capsys.readouterr().out
    assert printed.count("FAILED sparse-wrong") == 2  # an unknown variant fails alone, the others run
    scores = np.load(out / "scores.npz")
    assert sorted(scores.files) == ["mono|1|tiny", "sparse-w4|1|tiny", "sparse-w4|2|tiny"]
    assert all(scores[k].shape == (len(PAIRS),) and np.isfinite(scores[k]).all() for k in scores.files)
    assert not np.array_equal(scores["sparse-w4|1|tiny"], scores["sparse-w4|2|tiny"])  # seeds differ
    summary = json.loads((out / "models.json").read_text())
    assert [(m["variant"], m["seed"], m["steps"]) for m in summary["models"]] == [
        ("sparse-w4", 1, 2), ("sparse-w4", 2, 2), ("mono", 1, 2)
    ]  # fmt: skip
    assert summary["recipe"]["sources"] == "tiny" and summary["recipe"]["max_steps"] == 2


def test_the_start_model_travels_in_fp16_and_trains_in_fp32(tiny_bert, tmp_path):
    bundle = tiny_bundle(tmp_path / "bundle", tiny_bert, {})
    from safetensors.torch import load_file

    original = load_file(f"{tiny_bert}/model.safetensors")
    widened = load_file(f"{carry.widen_start(f'{bundle}/start', str(tmp_path / 'wide'))}/model.safetensors")
    assert sorted(widened) == sorted(original)
    for name, tensor in original.items():
        assert widened[name].dtype == tensor.dtype
        torch.testing.assert_close(widened[name], tensor, rtol=2**-11, atol=1e-7)  # fp16's rounding, no more


def test_evaluate_reads_scores_into_the_recipes_table(irds_home, tiny_bert, tmp_path, capsys):
    """vaswani's first two queries with their judged docs and a few others: a variant scoring exactly as BM25 ties
    with it, one that ranks the judged docs first beats it."""
    from pyterrier_tite.pt.first_stage import topics_and_qrels

    topics, qrels = topics_and_qrels("vaswani")
    rows = []
    for qid in topics["qid"].iloc[:2]:
        judged = qrels[qrels["qid"] == qid]["docno"].tolist()[:3]
        for rank, docno in enumerate(["1", "2", "3", *judged]):
            rows.append({"qid": qid, "query": "q", "docno": docno, "text": "t", "score": 10.0 - rank})
    candidates = pd.DataFrame(rows)
    bundle = tiny_bundle(tmp_path / "bundle", tiny_bert, {"vaswani": candidates})
    bm25 = candidates["score"].to_numpy(np.float32)
    judged_pairs = set(zip(qrels["qid"], qrels["docno"], strict=True))
    is_judged = [pair in judged_pairs for pair in zip(candidates["qid"], candidates["docno"], strict=True)]
    perfect = np.where(is_judged, 100.0, 0.0).astype(np.float32)
    np.savez(
        tmp_path / "scores.npz", **{"mono|1|vaswani": bm25, "mono|2|vaswani": bm25, "celi-mono|1|vaswani": perfect}
    )
    script.main(
        ["evaluate", "--bundle", bundle, "--scores", str(tmp_path / "scores.npz"), "--csv", str(tmp_path / "t.csv")]
    )
    table = pd.read_csv(tmp_path / "t.csv").set_index(["name", "vs"])
    assert table.loc[("mono", "BM25"), "seeds"] == 2 and table.loc[("mono", "BM25"), "delta"] == 0
    assert table.loc[("celi-mono", "mono"), "delta"] > 0  # CELI is compared with its [CLS] model
    assert table.loc[("celi-mono", "BM25"), "nDCG@10"] > table.loc[("mono", "BM25"), "nDCG@10"]
    # the same variants trained on other data: paired with their counterparts
    np.savez(tmp_path / "other.npz", **{"mono|1|vaswani": perfect, "mono|2|vaswani": perfect})
    script.main(["evaluate", "--bundle", bundle, "--scores", str(tmp_path / "scores.npz"), "--reference",
                 f"ict={tmp_path / 'other.npz'}", "--csv", str(tmp_path / "r.csv")])  # fmt: skip
    table = pd.read_csv(tmp_path / "r.csv").set_index(["name", "vs"])
    assert table.loc[("mono", "mono @ ict"), "delta"] < 0 and table.loc[("mono @ ict", "BM25"), "seeds"] == 2
    np.savez(tmp_path / "short.npz", **{"mono|1|vaswani": bm25[:-1]})
    with pytest.raises(SystemExit, match="another bundle"):
        script.main(["evaluate", "--bundle", bundle, "--scores", str(tmp_path / "short.npz")])


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_kept_model_comes_back_in_parts_and_loads(dtype, tiny_bert, tmp_path, monkeypatch):
    from safetensors.torch import load_file

    from pyterrier_tite.pt.rerankers import CrossEncoderReranker

    monkeypatch.setattr(carry, "PART_BYTES", 2**14)  # several parts from a tiny model
    bundle = tiny_bundle(tmp_path / "bundle", tiny_bert, {"tiny": PAIRS.assign(score=[3.0, 2.0, 1.0, 2.0, 1.0])})
    out = tmp_path / "out"
    script.main(
        ["train", "--bundle", bundle, "--out", str(out), "--workdir", str(tmp_path / "work"), "--device", "cpu",
         "--precision", "fp32", "--models", "celi-w2", "--seeds", "3", "--max-steps", "2", "--warmup-steps", "1",
         "--queries-per-batch", "1", "--negatives", "2", "--keep", "celi-w2:3", "--keep-dtype", dtype]
    )  # fmt: skip
    parts = sorted(out.glob("celi-w2-seed-3.tar.*"))
    assert len(parts) > 1 and all(p.stat().st_size <= 2**14 for p in parts)
    script.main(["unpack", "--parts", str(out / "celi-w2-seed-3"), "--out", str(tmp_path / "models")])
    folder = tmp_path / "models" / "celi-w2-seed-3"
    reranker = CrossEncoderReranker.from_pretrained(str(folder), device="cpu", dtype=torch.float32)
    assert type(reranker).__name__ == "CELI" and reranker.scorer.config.attention_window_size == 2
    weights = load_file(str(folder / "model.safetensors"))
    assert all(w.dtype == torch.float32 for w in weights.values() if w.is_floating_point())
    scores = reranker.transform(PAIRS).set_index(["qid", "docno"])["score"]
    scores = scores.loc[list(zip(PAIRS["qid"], PAIRS["docno"], strict=True))].to_numpy()
    trained = np.load(out / "scores.npz")["celi-w2|3|tiny"]
    if dtype == "float32":
        np.testing.assert_allclose(scores, trained, rtol=1e-5, atol=1e-5)  # the very model that was trained
    else:
        rounded = all(torch.equal(w, w.bfloat16().float()) for w in weights.values() if w.is_floating_point())
        assert rounded and not np.allclose(scores, trained, rtol=0, atol=1e-7)  # bf16 weights: close, not equal
        np.testing.assert_allclose(scores, trained, atol=0.05 * max(1.0, float(np.abs(trained).max())))
    with pytest.raises(SystemExit, match="missing"):
        parts[0].unlink()
        script.main(["unpack", "--parts", str(out / "celi-w2-seed-3"), "--out", str(tmp_path / "again")])
