"""One vocabulary for the whole command line: every sub-command has a description, every option with a default
shows it, the start model is ``--model`` everywhere (older spellings still parse, unlisted), ``-k`` means the same in
``rerank`` and ``tirex rerank``, and ``--version`` answers."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from pyterrier_tite.cli import build_parser

#: flags that named the start model before the one vocabulary (accepted, never listed)
OLD_START_FLAGS = {"--start-point", "--start", "--init"}


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


@pytest.mark.parametrize("command", sorted(PARSERS))
def test_the_start_model_is_model_everywhere(command):
    parser = PARSERS[command]
    listed = {s for a in parser._actions if a.help != argparse.SUPPRESS for s in a.option_strings}
    old = sorted(listed & OLD_START_FLAGS)
    assert not old, f"{command} lists {old}; the start model is --model"
    if command.startswith(("train-", "pretrain")) and command != "train-tokenizer":
        assert "--model" in listed, f"{command} has no --model"


def test_old_spellings_still_parse():
    parser = build_parser()
    assert parser.parse_args(["train-splade", "--dataset", "d", "--init", "x", "--output-dir", "o"]).init == "x"
    assert parser.parse_args(["train-splade", "--dataset", "d", "--model", "x", "--output-dir", "o"]).init == "x"
    args = parser.parse_args(["train-biencoder", "--start-point", "s", "--arch", "mean", "--output-dir", "o"])
    assert (args.start, args.arch) == ("s", "mean")
    assert parser.parse_args(["pretrain", "--dataset", "d", "--output-dir", "o"]).start == "minilm"


def test_k_means_the_same_for_the_same_work():
    assert PARSERS["rerank"].get_default("k") == PARSERS["tirex rerank"].get_default("k") == 100
    assert PARSERS["retrieve"].get_default("k") == PARSERS["tirex retrieve"].get_default("k") == 1000


def test_version():
    done = subprocess.run([sys.executable, "-m", "pyterrier_tite", "--version"], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.startswith("pyterrier-tite ")
