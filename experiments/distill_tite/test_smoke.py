"""The distill-tite study on its tiny config (smoke.toml): the loss terms, batches, cached teacher vectors and texts,
the diagnostics' arithmetic, then the recipe end to end (a tiny 6-layer teacher, three steps from the default
structure, the tables on cranfield and DL19), a resume refused under another structure, ``dense-paired`` on the run's
cached indexes, and the GPU split (bundle, train, unpack, evaluate) on the same teacher."""

from __future__ import annotations

import csv
import json
import os
import shutil

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from experiments.distill_rerankers import carry
from experiments.distill_rerankers import gpu as split
from experiments.distill_tite import diagnostics, gpu, ranking_probes, start_probes
from experiments.distill_tite import vector_distillation as vd
from experiments.distill_tite.recipe import main
from experiments.distill_tite.texts import collect_distillation_texts
from experiments.distill_tite.vector_distillation import (
    DistillationTexts,
    DistillationWeights,
    anchor_kl,
    group_batches,
    query_bank,
    relational_kl,
    teacher_vectors,
    vector_distillation_loss,
)
from tests._tiny import save_tiny_bert

pytestmark = pytest.mark.usefixtures("single_thread")

SMOKE = os.path.join(os.path.dirname(__file__), "smoke.toml")
TEXTS = DistillationTexts(
    texts=["plasma flow in magnetic fields", "magnetic plasma", "libraries index documents", "library indexing",
           "boundary layers over flat plates at high speed", "flat plate boundary layer", "heat transfer"],
    roles=["doc", "query", "doc", "query", "doc", "query", "query"],
    groups=[[0, 1], [2, 3], [4, 5], [6]],
)  # fmt: skip


def check_losses() -> None:
    torch.manual_seed(0)
    teacher = torch.randn(6, 8)
    zero, terms = vector_distillation_loss(teacher * 3.0, teacher, DistillationWeights())  # scale does not matter
    assert float(zero) == pytest.approx(0.0, abs=1e-6) and terms["kl"] == pytest.approx(0.0, abs=1e-6)
    loss, terms = vector_distillation_loss(teacher[torch.tensor([1, 0, 3, 2, 5, 4])], teacher, DistillationWeights())
    assert terms["cosine"] > 0.1 and terms["kl"] > 0.01 and float(loss) == pytest.approx(sum(terms.values()))
    rotation, _ = torch.linalg.qr(torch.randn(8, 8))  # the in-batch KL sees rankings only: a rotation costs nothing
    unit = F.normalize(teacher, dim=-1)
    assert float(relational_kl(F.normalize(teacher @ rotation, dim=-1), unit, 0.05)) < 1e-5
    # the anchor term: both directions of the documents x bank scores; a rotation of the documents alone is a loss
    docs, bank = F.normalize(torch.randn(5, 8), dim=-1), F.normalize(torch.randn(12, 8), dim=-1)
    other = F.normalize(docs + 0.3 * torch.randn(5, 8), dim=-1)
    s, t = other @ bank.T / 0.05, docs @ bank.T / 0.05

    def kl(student_scores, teacher_scores):  # mean over rows of KL(teacher || student)
        p, q = teacher_scores.softmax(-1), student_scores.softmax(-1)
        return float((p * (p.log() - q.log())).sum(-1).mean())

    assert float(anchor_kl(docs, docs, bank, 0.05)) == pytest.approx(0.0, abs=1e-6)
    assert float(anchor_kl(other, docs, bank, 0.05)) == pytest.approx((kl(s, t) + kl(s.T, t.T)) / 2, rel=1e-4)
    assert float(anchor_kl(docs @ rotation, docs, bank, 0.05)) > 0.1
    # it counts the document rows only, and needs its bank
    targets = F.normalize(torch.randn(6, 8), dim=-1)
    bank = F.normalize(torch.randn(10, 8), dim=-1)
    weights, documents = DistillationWeights(anchor=2.0), torch.tensor([0, 2, 4])
    student = targets.clone()
    student[[1, 3]] = torch.randn(2, 8)
    _, terms = vector_distillation_loss(student, targets, weights, anchors=bank, documents=documents)
    assert terms["anchor"] == pytest.approx(0.0, abs=1e-6) and terms["kl"] > 0.01
    with pytest.raises(ValueError, match="bank of query vectors"):
        vector_distillation_loss(student, targets, weights)
    assert "anchor" not in vector_distillation_loss(student, targets, DistillationWeights())[1]
    assert query_bank(TEXTS, torch.randn(len(TEXTS), 8), "cpu").shape == (4, 8)
    with pytest.raises(ValueError, match="documents only"):
        query_bank(DistillationTexts(["a", "b"], ["doc", "doc"], [[0], [1]]), torch.randn(2, 8), "cpu")
    # the cosine term counts only the rows the student encoded (documents-only training)
    learned = torch.tensor([1, 3])
    _, terms = vector_distillation_loss(student, targets, DistillationWeights(), learned)
    unit = F.normalize(student, dim=-1)
    assert terms["cosine"] == pytest.approx(float((1 - (unit[learned] * targets[learned]).sum(-1)).mean()), rel=1e-5)
    # fp32 under the forward's bf16 autocast: bf16 similarity products would round the teacher's target logits too
    exact = vector_distillation_loss(student, targets, weights, anchors=bank, documents=documents)[1]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mixed, mixed_terms = vector_distillation_loss(student, targets, weights, anchors=bank, documents=documents)
    assert mixed.dtype == torch.float32 and mixed_terms == pytest.approx(exact, rel=1e-5, abs=1e-6)


def check_batches() -> None:
    groups = [[0, 1], [2], [3, 4], [5, 6], [7]]
    source = group_batches(groups, batch_size=2, seed=3)
    epoch0 = list(source(0, 0, 1))
    assert epoch0 == list(group_batches(groups, 2, 3)(0, 0, 1)) and len(epoch0) == 2  # repeatable; short one dropped
    assert all(set(g) <= set(b) or not set(g) & set(b) for b in epoch0 for g in groups)  # groups stay together
    assert not set(sum(source(0, 0, 2), [])) & set(sum(source(0, 1, 2), []))  # ranks take disjoint shards


def check_teacher_vectors(teacher_folder: str, cache: str) -> None:
    """Cached in shards, in input order; an interrupted run computes the missing shard only; other texts refused."""
    from pyterrier_tite.pt.bert_biencoder import BertBiEncoder

    encoder = BertBiEncoder.from_pretrained(teacher_folder, device="cpu").text_encoder
    vectors = teacher_vectors(encoder, TEXTS, cache, batch_size=2, shard_size=3, verbose=False)
    with torch.inference_mode():
        torch.testing.assert_close(vectors, vd.encode_mixed(encoder, TEXTS.texts, TEXTS.roles, 16), atol=1e-5, rtol=0)
    assert sorted(os.listdir(cache)) == ["shard-00000.pt", "shard-00001.pt", "shard-00002.pt", "texts.json"]
    encoded, real_encode = [], vd.encode_mixed
    vd.encode_mixed = lambda enc, texts, roles, bs: encoded.extend(texts) or real_encode(enc, texts, roles, bs)
    try:
        os.remove(os.path.join(cache, "shard-00002.pt"))
        torch.testing.assert_close(teacher_vectors(encoder, TEXTS, cache, shard_size=3, verbose=False), vectors)
    finally:
        vd.encode_mixed = real_encode
    assert encoded == TEXTS.texts[6:]
    other = DistillationTexts(TEXTS.texts[:-1] + ["something else"], TEXTS.roles, TEXTS.groups)
    with pytest.raises(ValueError, match="other texts"):
        teacher_vectors(encoder, other, cache, verbose=False)


def check_texts() -> None:
    data = collect_distillation_texts(["cranfield"], ["beir/scifact/train"], max_docs=40, max_queries=10)
    assert data.roles.count("doc") == 40 and data.roles.count("query") >= 40  # 10 queries + most docs' sentences
    assert len(set(zip(data.roles, data.texts, strict=True))) == len(data) == sum(len(g) for g in data.groups)
    for group in (g for g in data.groups if len(g) == 2):
        doc, query = (data.texts[i] for i in group)
        assert [data.roles[i] for i in group] == ["doc", "query"] and query in doc


def check_diagnostics(tmp_path) -> None:
    path = tmp_path / "log.jsonl"  # a run killed at step 4, resumed from step 2: the later records count
    records = [{"step": i, "loss": 9.0} for i in (1, 2, 3, 4)] + [{"step": i, "loss": float(i)} for i in (3, 4, 5)]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    summary = diagnostics.log_summary(str(path), first=2, last=3, windows=2)
    assert summary == {"steps": 5, "first_2": {"loss": 9.0}, "last_3": {"loss": 4.0}, "loss_per_2": [9.0, 3.5, 5.0]}
    rng = np.random.default_rng(0)
    teacher = [rng.normal(size=100) for _ in range(5)]
    copy = ranking_probes.ranking_sensitivity([(t, t + 3.0) for t in teacher])  # a common shift changes no ranking
    assert copy["error"] == pytest.approx(0, abs=1e-9) and copy["top_kept"] == 1 and copy["queries"] == 5
    noisy = ranking_probes.ranking_sensitivity([(t, t + rng.normal(scale=0.5, size=100)) for t in teacher])
    assert 0.4 < noisy["error"] < 0.6 and noisy["top_kept"] < 1
    docs = {f"d{i}": f"text  number {i}" for i in range(10)}  # seen: whitespace-normalised as the recipe stores it
    seen, unseen = ranking_probes.split_seen(docs, {f"text number {i}" for i in range(3)}, count=5)
    assert len(seen) == len(unseen) == 3 and not set(seen) & set(unseen)
    from pyterrier_tite.training.biencoder import Sample, save_samples

    save_samples([Sample("q", ["p", "n1", "n2"], [3.0, 1.0, 2.0]), Sample("r", ["p", "n"], [0.5, 1.5])],
                 str(tmp_path / "samples.jsonl"))  # fmt: skip
    assert diagnostics.teacher_margins(str(tmp_path / "samples.jsonl"))["mean_margin"] == round(2.0 / 3, 4)
    assert diagnostics.mean_pairwise_cosine(torch.tensor([[1.0, 0.0], [1.0, 1.0]])) == pytest.approx(2**-0.5)
    vectors, queries = torch.randn(30, 8), torch.randn(5, 8)
    cosines, kept = ranking_probes.group_fidelity(vectors, 2 * vectors, queries)
    assert cosines == pytest.approx([1.0] * 30, abs=1e-6) and kept == [1.0] * 5
    # tite-start's per-layer targets: the teacher's states pooled through the student's windows
    states = [torch.randn(2, 5, 3) for _ in range(3)]  # embeddings + 2 layers; texts of 5 and 3 tokens
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], dtype=torch.bool)
    cu = [torch.tensor(c, dtype=torch.int32) for c in ([0, 5, 8], [0, 5, 8], [0, 3, 5])]
    layer1, layer2 = start_probes.pooled_teacher_targets(states, mask, cu, kernels=[None, 2], strides=[None, 2])
    a, b = states[2][0], states[2][1]
    torch.testing.assert_close(layer1, states[1][mask])
    torch.testing.assert_close(layer2, torch.stack([(a[0] + a[1]) / 2, (a[2] + a[3]) / 2, a[4], (b[0] + b[1]) / 2,
                                                    b[2]]))  # fmt: skip


def run_gpu_split(teacher: str, tmp_path) -> None:
    """The recipe split for a GPU machine: bundle here, train on the CPU, a kept seed unpacked, evaluated."""
    from pyterrier_tite.pt.tite import TITE

    bundle, out = tmp_path / "bundle", tmp_path / "gpu-out"
    gpu.main(["bundle", "--out", str(bundle), "--teacher", teacher, "--collections", "cranfield", "--queries", "none",
              "--max-docs", "16", "--evaluate", "dl19", "--eval-depth", "5"])  # fmt: skip
    gpu.main(["train", "--bundle", str(bundle), "--out", str(out), "--workdir", str(tmp_path / "work"),
              "--device", "cpu", "--precision", "fp32", "--seeds", "1", "--max-steps", "2", "--warmup-steps", "0",
              "--batch-size", "4", "--eval-batch-size", "8", "--speed-docs", "4", "--keep", "1",
              "--keep-dtype", "float32"])  # fmt: skip
    scores = np.load(out / "scores.npz")
    assert sorted(scores.files) == ["teacher|0|dl19", "tite-start|0|dl19", "tite|1|dl19"]
    assert np.abs(scores["teacher|0|dl19"]).max() <= 1 + 1e-5  # normalised vectors: cosine scores
    summary = json.loads((out / "models.json").read_text())
    assert [m["steps"] for m in summary["models"]] == [2] and summary["speed"]["ratio"] > 0
    assert summary["recipe"]["query_encoder"] == "teacher" and summary["recipe"]["anchor_weight"] == 1
    assert set(summary["models"][0]["terms_last50"]) == {"cosine", "kl", "anchor"}
    split.main(["unpack", "--parts", str(out / "tite-seed-1"), "--out", str(tmp_path / "models")])
    tite = TITE.from_pretrained(str(tmp_path / "models" / "tite-seed-1"), device="cpu")
    assert tite.query_model is not None  # the teacher, kept beside it: the scores above took its query vectors
    data = carry.load_bundle(str(bundle))
    rows = data["eval"]["dl19"]
    q = tite.encode_queries([data["texts"][i] for i in rows["query"]])
    d = tite.encode_docs([data["texts"][i] for i in rows["text"]])
    np.testing.assert_allclose((q * d).sum(1), scores["tite|1|dl19"], rtol=1e-4, atol=1e-5)
    split.main(["evaluate", "--bundle", str(bundle), "--scores", str(out / "scores.npz"), "--baseline", "teacher",
                "--csv", str(tmp_path / "gpu.csv")])  # fmt: skip
    table = pd.read_csv(tmp_path / "gpu.csv")
    assert set(table[table["vs"] == "teacher"]["name"]) == {"tite-start", "tite"}


@pytest.mark.slow  # 80-90 s on a shared 2-core machine
def test_the_study_runs_end_to_end_on_its_smoke_config(tmp_path, irds_home, tite_cache):
    from pyterrier_tite.pt.tite import TITE

    check_losses()
    check_batches()
    check_texts()
    check_diagnostics(tmp_path)
    teacher = save_tiny_bert(tmp_path / "teacher", layers=6, sentence_transformers=True)
    check_teacher_vectors(teacher, str(tmp_path / "vectors"))
    start = start_probes.tite_start(teacher, ["0:2:intra", "-/2/2/2/2/-:2:intra:mean"], docs=12, queries=4)
    unpooled, pooled = start["0:2:intra"], start["-/2/2/2/2/-:2:intra:mean"]
    assert unpooled["layer_cosine"] == [1.0] * 6 and unpooled["top10_overlap"] == 1.0  # the teacher's own states
    assert len(pooled["layer_cosine"]) == 6 and min(pooled["layer_cosine"]) > 0.9  # near them (random weights)

    out = tmp_path / "run"
    argv = ["--config", SMOKE, "--teacher", teacher, "--output-dir", str(out)]
    assert main(argv) == 0
    distilled = TITE.from_pretrained(str(out), device="cpu")
    assert distilled.text_encoder.model.config.kernel_sizes[:5] == [None, 2, None, 2, 2]  # the default structure
    assert distilled.query_marker is None and distilled.query_model is not None  # the teacher encodes the queries
    assert (out / "query_encoder").is_dir() and len((out / "log.jsonl").read_text().splitlines()) == 3
    rows = list(csv.DictReader(open(out / "results.csv")))
    names = ("BM25", "teacher (teacher)", "TITE, not distilled", "TITE, distilled")
    assert [(r["dataset"], r["name"]) for r in rows] == [(d, n) for d in ("cranfield-graded", "dl19") for n in names]
    assert all(0.0 <= float(r["nDCG@10"]) <= 1.0 for r in rows)
    minutes = {r["name"]: r["train min"] for r in rows}  # only the distilled student was trained here
    assert float(minutes["TITE, distilled"]) >= 0 and minutes["TITE, not distilled"] == minutes["BM25"] == ""
    # pooling has no weights: a resume under another structure would load silently, so it is refused
    with pytest.raises(SystemExit, match=r"its pooling is 0/2/0/2/2/\d+, the flags ask for 0/0/0/2/2/\d+"):
        main([*argv, "--pooling-layers", "3"])
    with pytest.raises(SystemExit, match="it needs --query-encoder teacher"):
        main([*argv, "--documents-only", "--query-encoder", "tite"])

    # dense-paired reads the run's cached indexes and pairs it with a copy of the run (the same scores)
    shutil.copytree(out, tmp_path / "copy", ignore=shutil.ignore_patterns("eval"))
    indexes = sorted(os.listdir(out / "eval"))
    paired = ranking_probes.dense_paired([str(out), str(tmp_path / "copy")], ["cranfield-graded"])
    assert sorted(os.listdir(out / "eval")) == indexes
    ndcg = {r["name"]: float(r["nDCG@10"]) for r in rows if r["dataset"] == "cranfield-graded"}
    assert paired[0]["mean"] == pytest.approx(ndcg["TITE, distilled"], abs=1e-4)
    assert paired[1]["delta"] == 0 and paired[1]["p"] == 1.0

    run_gpu_split(teacher, tmp_path)
