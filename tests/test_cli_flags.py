"""The command line stays a thin product surface: a bounded number of flags, help texts that say what a flag does
(never what it scored), and exactly the product's sub-commands (a study runs from ``experiments/``, not from here)."""

from __future__ import annotations

import argparse
import ast
import pathlib
import re

import pytest

from pyterrier_tite.cli import build_parser

CLI = pathlib.Path(__file__).resolve().parent.parent / "pyterrier_tite" / "cli"
#: the one vocabulary took it from 120 to 113 (shared -k / --depth and --overwrite, old spellings renamed, not defined)
MAX_FLAG_DEFINITIONS = 113
PRODUCT_COMMANDS = {
    "index", "retrieve", "rerank", "evaluate", "tirex", "demo", "backends", "doctor",
    "train-reranker", "train-biencoder", "pretrain", "train-tokenizer", "pretrain-mlm", "train-splade",
    "train-aggretriever",
}  # fmt: skip
TIREX_COMMANDS = {"rerank", "retrieve"}

_MEASURE = r"(?:nDCG|MAP|MRR|AP|R|P|Recall|Precision|Success)(?:@\d+)?"
#: what a result looks like in prose: a measure with its figure, a delta, a p-value, a verdict, a date
SCORE_PATTERNS = {
    "a measure with a figure": rf"\b{_MEASURE}\s*(?:of|=|:|->|→|at|is|was)?\s*[+−±-]?\d*\.\d",
    "a figure with a measure": rf"\d\.\d+\s*(?:points?\s*)?(?:of\s*|in\s*)?\b{_MEASURE}\b(?!\s*\()",
    "a signed decimal (a delta)": r"(?<![\w.])[+−±-]\s?\d*\.\d",
    "a p-value": r"\bp\s*[<=>≤≥]\s*\d",
    "a verdict": r"\b(?:helped|did not help|didn't help|changed nothing|no gain|significant\w*|beats?|outperform\w*)\b",
    "a pointer to the results": r"results\.md|at \d[\d,]* steps|\b(?:one|two|three|\d+) seeds?\b",
    "a date": r"\b(?:19|20)\d\d-[01]\d(?:-[0-3]\d)?\b",
    "a MAP figure": r"\bMAP\b",
}


def score_claims(text: str) -> list[str]:
    """The kinds of result a help text quotes (empty: it only says what the flag does)."""
    return [kind for kind, pattern in SCORE_PATTERNS.items() if re.search(pattern, text)]


def add_argument_calls() -> dict[str, int]:
    """``add_argument(...)`` calls per module of ``pyterrier_tite/cli`` (in the source, so a flag defined once in a
    shared helper counts once)."""
    counts = {}
    for path in sorted(CLI.glob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        counts[path.name] = sum(
            isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument"
            for node in ast.walk(tree)
        )
    return counts


def sub_commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    found = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found.update(action.choices)
    return found


def help_texts(parser: argparse.ArgumentParser, path: str = "pyterrier-tite"):
    """(where, text) for the description of ``parser``, each flag's help and each sub-command's one-line help, all the
    way down."""
    if parser.description:
        yield path, parser.description
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                yield f"{path} {choice.dest} (summary)", choice.help or ""
            for name, sub in action.choices.items():
                yield from help_texts(sub, f"{path} {name}")
        elif action.help and action.help is not argparse.SUPPRESS:
            yield f"{path} {'/'.join(action.option_strings) or action.dest}", action.help


def test_the_cli_defines_at_most_max_flag_definitions():
    counts = add_argument_calls()
    assert sum(counts.values()) <= MAX_FLAG_DEFINITIONS, counts


def test_the_sub_commands_are_the_products():
    commands = sub_commands(build_parser())
    assert set(commands) == PRODUCT_COMMANDS, "a study runs as python -m experiments.<name>, not as a sub-command"
    assert set(sub_commands(commands["tirex"])) == TIREX_COMMANDS


def test_help_texts_say_what_a_flag_does_not_what_it_scored():
    texts = list(help_texts(build_parser()))
    assert len(texts) > 100  # the walk reached every sub-command's flags
    quoting = {where: (text, score_claims(text)) for where, text in texts if score_claims(text)}
    assert not quoting, quoting


def test_every_flag_has_a_help_text():
    missing = []
    for name, sub in sub_commands(build_parser()).items():
        parsers = sub_commands(sub) or {"": sub}
        for sub_name, parser in parsers.items():
            for action in parser._actions:
                if action.option_strings and not action.help and not isinstance(action, argparse._HelpAction):
                    missing.append(f"{name} {sub_name} {'/'.join(action.option_strings)}".replace("  ", " "))
    assert not missing, missing


@pytest.mark.parametrize(
    "bad",
    [
        "window 4 (nDCG@10 0.452 on DL19)",
        "symmetric attention (+0.13 on DL19 at 500 steps)",
        "0.02 nDCG@10 below MiniLM",
        "anchor loss (−0.004 to +0.006)",
        "the per-layer default (p < 0.05 against BM25)",
        "frozen layers: did not help",
        "pseudo-queries helped on cranfield",
        "lambda 1e-2 (MAP level)",
        "the 2025-11-23 runs' setting",
        "beats BM25 on scifact",
        "dropout (0 changed nothing consistently in docs/results.md)",
        "level with the teacher at 500 steps, one seed",
    ],
)
def test_the_score_check_catches_a_planted_result(bad):
    assert score_claims(bad), bad


@pytest.mark.parametrize(
    "good",
    [
        "measures (default 'nDCG@10 AP R@100')",
        "lambda of FLOPS (paper: 1e-3)",
        "share of tokens masked",
        "TREC DL year (2019/2020) or collection alias with qrels",
        "torch device, e.g. cpu, cuda, cuda:1 (default: cuda if any)",
        "seed of the query -> fold assignment",
        "--first-stage bm25 needs --dataset",
        "results per query (default 1000)",
        "comma list of seeds (one model per variant and seed)",
    ],
)
def test_the_score_check_lets_plain_descriptions_through(good):
    assert not score_claims(good), good


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


@pytest.mark.parametrize("command", sorted(c for c in PRODUCT_COMMANDS if c.startswith(("train-", "pretrain"))))
def test_training_never_defaults_to_an_evaluation_collection(command):
    """A training command's data is named by the user or defaults to a training split: never to a collection whose
    results the project reports (training on the evaluation set by default)."""
    from pyterrier_tite.datasets import evaluation_reason

    parser = _subparsers(build_parser())[command]
    data_flags = [a for a in parser._actions if a.dest in ("dataset", "train_data", "topics", "qrels")]
    assert data_flags, f"{command} has no data flag"
    for action in data_flags:
        if action.required or action.default is None:
            continue
        assert not evaluation_reason(action.default), (
            f"{command} {action.option_strings[0]} defaults to the evaluation collection {action.default!r}"
        )


def test_evaluation_collections_are_recognised_by_any_name():
    from pyterrier_tite.datasets import evaluation_reason

    for name in ("2020", "dl19", "vaswani", "scifact", "irds:beir/scifact/test", "msmarco-passage/trec-dl-2020/judged"):
        assert evaluation_reason(name), name
    for name in ("scifact-train", "beir/scifact/train", "msmarco-passage/train", "samples.jsonl"):
        assert not evaluation_reason(name), name
