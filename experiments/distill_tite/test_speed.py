"""The speed study (``experiments/distill_tite/speed.py``): its --structures list is parsed strictly, and refused
beside --student."""

from __future__ import annotations

import pytest

from experiments.distill_tite import speed as bench


def test_structures_parse_to_the_students_flags():
    assert bench.parse_structures("4:2, 5:3,0/2/0/2/2/g") == {
        "4:2": {"structure": None, "pooling_layers": 4, "kernel": 2},
        "5:3": {"structure": None, "pooling_layers": 5, "kernel": 3},
        "0/2/0/2/2/g": {"structure": "0/2/0/2/2/g", "pooling_layers": None, "kernel": None},
    }


def test_without_structures_one_student_the_recipes_default_unless_the_late_flags_are_given():
    import argparse

    flags = argparse.Namespace(pooling_layers=None, kernel=None, arrangement=None)
    assert bench.one_structure(flags) == {"default": {"structure": None, "pooling_layers": None, "kernel": None}}
    flags.arrangement = "staggered"  # the late flags' defaults, staggered: not the default structure
    assert bench.one_structure(flags) == {"4:2": {"structure": None, "pooling_layers": 4, "kernel": 2}}
    flags.kernel = 3
    assert bench.one_structure(flags) == {"4:3": {"structure": None, "pooling_layers": 4, "kernel": 3}}
    flags.pooling_layers, flags.kernel = 5, None
    assert bench.one_structure(flags) == {"5:2": {"structure": None, "pooling_layers": 5, "kernel": 2}}


@pytest.mark.parametrize(
    ("spec", "message"),
    [("4-2", "POOLING_LAYERS:KERNEL"), ("4:x", "POOLING_LAYERS:KERNEL"), ("4:2:1", "POOLING_LAYERS:KERNEL"),
     ("", "POOLING_LAYERS:KERNEL"), ("0/1/g", "'1'"), ("0/2/x", "'x'")],
)  # fmt: skip
def test_a_malformed_structure_names_itself(spec, message):
    with pytest.raises(ValueError, match=message):
        bench.parse_structures(spec)


def test_structures_beside_a_trained_student_are_refused(capsys):
    with pytest.raises(SystemExit):
        bench.main(["--student", "some/folder", "--structures", "4:2"])
    assert "pick one" in capsys.readouterr().err


def test_a_student_with_a_query_model_is_timed_with_it_for_queries(tmp_path, irds_home, capsys):
    """A TITE saved with its teacher as query encoder (the distillation recipe's default) is used that way: the
    queries row times the query model, not TITE's own query path."""
    import argparse

    from experiments.distill_tite.recipe import build_student, build_teacher
    from tests._tiny import save_tiny_bert

    teacher_folder = save_tiny_bert(tmp_path / "teacher", layers=6, sentence_transformers=True)
    flags = argparse.Namespace(teacher=teacher_folder, kernel=2, arrangement="late", pooling_layers=4,
                               query_encoder="teacher")  # fmt: skip
    build_student(flags, build_teacher(flags, device="cpu"), device="cpu").save_pretrained(str(tmp_path / "student"))
    argv = ["--teacher", teacher_folder, "--student", str(tmp_path / "student"), "--docs", "4", "--queries", "4",
            "--rounds", "1", "--threads", "1"]  # fmt: skip
    assert bench.main(argv) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| TITE")]
    assert len(rows) == 1 and rows[0].startswith("| TITE (queries: its query model) |")


def test_the_pipeline_path_times_the_bi_encoders_own_encoding(tmp_path):
    """The default path is what a pipeline runs (the bi-encoder's length-sorted ``encode_docs`` at the chosen
    precision); ``--path torch`` keeps the torch-side encoders of the earlier measurements."""
    import argparse

    from experiments.distill_tite.recipe import build_teacher
    from tests._tiny import save_tiny_bert

    flags = argparse.Namespace(teacher=save_tiny_bert(tmp_path / "teacher", layers=2, sentence_transformers=True))
    teacher = build_teacher(flags, device="cpu")
    docs, queries = bench.encoders(teacher, "pipeline", "bf16")
    assert (docs, queries) == (teacher.encode_docs, teacher.encode_queries) and teacher.precision == "bf16"
    docs, queries = bench.encoders(teacher, "torch", "fp32")
    assert (docs, queries) == (teacher.text_encoder.encode_docs, teacher.text_encoder.encode_queries)


def test_the_flop_ratio_follows_where_pooling_starts(tmp_path, irds_home):
    """The table's FLOP column: a student whose only pooling is the last layer's global step saves little of that
    layer; pooling from layer 3 stays below 3x (two layers see every token), pooling from layer 2 goes beyond it,
    and a longer document saves more."""
    import argparse

    from experiments.distill_tite.recipe import build_student, build_teacher
    from tests._tiny import save_tiny_bert

    flags = argparse.Namespace(teacher=save_tiny_bert(tmp_path / "teacher", layers=6, sentence_transformers=True),
                               kernel=2, arrangement="late", query_encoder="tite")  # fmt: skip
    teacher = build_teacher(flags, device="cpu")

    def ratio(pooling_layers: int | str, docs: list[str]) -> float:
        chosen = {"pooling_layers": pooling_layers}
        if isinstance(pooling_layers, str):
            chosen = {"structure": pooling_layers}
        student = build_student(argparse.Namespace(**{**vars(flags), **chosen}), teacher)
        return bench.doc_flop_ratio(teacher, student, docs)

    long_doc = ["retrieval " * 300]
    assert 1.0 < ratio(0, long_doc) < 1.25
    assert 2.0 < ratio(4, long_doc) < 3.0 < ratio(5, long_doc) < 6.0
    assert ratio(4, ["a short text"]) < ratio(4, long_doc)
    # pooling in layer 2 but not 3: between the last four and the last five layers pooling
    assert ratio(4, long_doc) < ratio("0/2/0/2/2/g", long_doc) < ratio(5, long_doc)
