"""Training never reads evaluation data by accident (issue 80): the queries and qrels of a collection the results are
reported on, or of a test / dev / trec-dl split, are refused by every training command and training function unless
the user says ``--allow-evaluation-data`` (said at run time and in the model card); a bare ID that mixes splits means
its train split. Documents alone (pretraining text) are allowed and said. The refusals end before any model is
loaded or data read."""

from __future__ import annotations

import argparse

import pytest

from pyterrier_tite import datasets
from pyterrier_tite.datasets import EvaluationDataError, check_training_data
from tests._cli import cli_here


@pytest.fixture(autouse=True)
def fresh_notes(monkeypatch):
    """Each note is said once per process: every test starts with none said."""
    monkeypatch.setattr(datasets, "_SAID", set())


EVALUATION = [
    "vaswani", "cranfield", "cranfield-graded", "cisi", "cacm", "scifact", "irds:beir/scifact/test", "2019", "dl20",
    "msmarco-passage/trec-dl-2019/judged", "msmarco-passage/trec-dl-2020", "msmarco-passage/dev/small",
    "msmarco-passage/eval", "msmarco-passage/train/split200-valid", "antique/test", "beir/trec-covid",
    "beir/nfcorpus/dev", "miracl/de/test-b",
]  # fmt: skip
TRAINING = ["scifact-train", "beir/scifact/train", "irds:beir/scifact/train", "msmarco-passage/train",
            "msmarco-passage/train/judged", "antique/train", "wikir/en1k/training"]  # fmt: skip
BARE = {"beir/scifact": "beir/scifact/train", "irds:beir/scifact": "beir/scifact/train",
        "msmarco-passage": "msmarco-passage/train", "beir/nfcorpus": "beir/nfcorpus/train",
        "wikir/en1k": "wikir/en1k/training"}  # fmt: skip


@pytest.mark.parametrize("name", EVALUATION)
def test_the_labels_of_evaluation_data_are_refused_in_one_line_naming_the_flag(name):
    with pytest.raises(EvaluationDataError) as caught:
        check_training_data(name, uses="labels")
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"{name} is evaluation data (")
    assert "--allow-evaluation-data" in message


@pytest.mark.parametrize("name", EVALUATION)
def test_allowed_evaluation_data_is_said_once(name, capsys):
    assert check_training_data(name, uses="labels", allow=True) == name
    assert check_training_data(name, uses="labels", allow=True) == name  # the command, then the library it calls
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "evaluation data" in err and "as allowed" in err


@pytest.mark.parametrize("name", TRAINING)
def test_training_splits_pass_unchanged_and_silently(name, capsys):
    assert check_training_data(name, uses="labels") == name
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("name", sorted(BARE))
def test_a_bare_id_mixing_splits_means_its_train_split_said_in_one_line(name, capsys):
    assert check_training_data(name, uses="labels") == BARE[name]
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"training on {BARE[name]}" in err


@pytest.mark.parametrize("allow", [False, True])
def test_a_bare_id_with_evaluation_splits_and_no_train_split_is_refused_even_when_allowed(allow):
    with pytest.raises(EvaluationDataError, match=r"beir/quora mixes the evaluation splits dev, test .*name one"):
        check_training_data("beir/quora", uses="labels", allow=allow)


@pytest.mark.parametrize("name", ["vaswani", "scifact", "beir/scifact", "msmarco-passage/trec-dl-2019/judged"])
def test_documents_of_evaluation_data_are_allowed_and_said(name, capsys):
    assert check_training_data(name, uses="documents") == name
    err = capsys.readouterr().err
    assert err == "" if datasets.evaluation_reason(name) is None else "documents of" in err and "only" in err


def test_uses_is_checked():
    with pytest.raises(ValueError, match="uses must be one of"):
        check_training_data("scifact-train", uses="queries")


# ------------------------------------------------------------------------------------------------ the commands
NO_MODEL = "/nonexistent/start-model"  # were a model loaded first, the error would name this folder
REFUSED = {
    "train-reranker": ["train-reranker", "--model", NO_MODEL, "--dataset", "vaswani"],
    "train-reranker-dl": ["train-reranker", "--model", NO_MODEL, "--dataset", "2019"],
    "train-splade": ["train-splade", "--model", NO_MODEL, "--dataset", "scifact"],
    "train-splade-fold": ["train-splade", "--model", NO_MODEL, "--dataset", "vaswani", "--hold-out-fold", "1/2"],
    "train-aggretriever": ["train-aggretriever", "--model", NO_MODEL, "--dataset", "scifact"],
    "pretrain-mlm-queries": ["pretrain-mlm", "--model", NO_MODEL, "--dataset", "scifact", "--queries", "scifact"],
}


@pytest.mark.parametrize("argv", REFUSED.values(), ids=REFUSED.keys())
def test_training_commands_refuse_evaluation_data_before_loading_anything(argv, tmp_path):
    out = tmp_path / "out"
    result = cli_here(*argv, "--output-dir", str(out))
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"pyterrier-tite {argv[0]}: error: "), result.stderr
    assert "is evaluation data" in lines[0] and "--allow-evaluation-data" in lines[0]
    assert NO_MODEL not in result.stderr and not out.exists()


def test_a_bare_id_is_trained_on_its_train_split_before_the_model_is_loaded(tmp_path):
    result = cli_here("train-splade", "--model", NO_MODEL, "--dataset", "beir/scifact", "--output-dir", str(tmp_path))
    assert result.returncode == 2  # the missing model, after the split was chosen
    note = "note: beir/scifact holds the splits test, train: training on beir/scifact/train"
    assert result.stderr.splitlines()[0] == note


@pytest.mark.parametrize(
    "argv",
    [["train-splade", "--model", NO_MODEL, "--pseudo-queries"], ["train-aggretriever", "--model", NO_MODEL,
     "--pseudo-queries"], ["pretrain", "--model", NO_MODEL], ["pretrain-mlm", "--model", NO_MODEL]],
    ids=["splade-pseudo-queries", "aggretriever-pseudo-queries", "pretrain", "pretrain-mlm"],
)  # fmt: skip
def test_documents_of_an_evaluation_collection_are_said_before_the_model_is_loaded(argv, tmp_path):
    result = cli_here(*argv, "--dataset", "vaswani", "--output-dir", str(tmp_path / "out"))
    assert result.returncode != 0  # the missing start model, after the data was checked
    assert result.stderr.startswith("note: training on the documents of vaswani only, an evaluation collection\n")


def test_every_training_command_with_labels_takes_the_flag():
    from pyterrier_tite.cli import build_parser

    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    for name in ("train-reranker", "train-splade", "train-aggretriever", "pretrain-mlm"):
        flags = {o for a in commands[name]._actions for o in a.option_strings}
        assert "--allow-evaluation-data" in flags, name


def test_tokenizer_training_on_an_evaluation_collection_says_it_uses_its_documents(irds_home, tmp_path):
    result = cli_here("train-tokenizer", "--dataset", "vaswani", "--max-docs", "50", "--vocab-size", "200",
                      "--output-dir", str(tmp_path / "tok"))  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "note: training on the documents of vaswani only, an evaluation collection" in result.stderr


def test_library_training_functions_refuse_evaluation_labels_before_reading_data():
    from pyterrier_tite.training.mlm import pretraining_texts
    from pyterrier_tite.training.splade_data import hard_negative_examples

    def retriever(_topics):
        raise AssertionError("no retrieval before the check")

    with pytest.raises(EvaluationDataError, match="^vaswani is evaluation data"):
        hard_negative_examples("vaswani", retriever)
    with pytest.raises(EvaluationDataError, match="^scifact is evaluation data"):
        pretraining_texts("scifact-train", queries_dataset="scifact")


def test_the_fold_and_the_flag_are_noted_for_the_card():
    from pyterrier_tite.cli.flags import checked_training_data

    args = argparse.Namespace(allow_evaluation_data=True, hold_out_fold="2/3")
    assert checked_training_data(args, "vaswani") == "vaswani"
    assert args.evaluation_data == [
        "vaswani: queries outside fold 2/3 (its fold 2 held out) and qrels, the project reports results on it "
        "(--allow-evaluation-data)"
    ]
    assert checked_training_data(args, "scifact-train") == "scifact-train"  # training data adds no note
    assert len(args.evaluation_data) == 1


@pytest.mark.usefixtures("single_thread")
def test_the_model_card_says_it_was_trained_on_evaluation_data(irds_home, tmp_path):
    from tests._tiny import save_tiny_bert

    start = save_tiny_bert(tmp_path / "start")
    out = tmp_path / "model"
    argv = ["train-reranker", "--model", start, "--dataset", "2020", "--max-queries", "2", "--depth", "10",
            "--max-steps", "1", "--queries-per-batch", "1", "--num-negatives", "2", "--doc-max-length", "16",
            "--threads", "1", "--quiet", "--output-dir", str(out)]  # fmt: skip
    assert cli_here(*argv).returncode == 2  # refused without the flag
    result = cli_here(*argv, "--allow-evaluation-data")
    assert result.returncode == 0, result.stderr
    assert "note: training on the queries of msmarco-passage/trec-dl-2020/judged, evaluation data" in result.stderr
    card = (out / "README.md").read_text()
    assert "**Trained on evaluation data**: msmarco-passage/trec-dl-2020/judged: queries and qrels, the" in card
