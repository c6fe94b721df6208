"""The ``pyterrier-tite`` command. Each module of ``COMMAND_MODULES`` adds its parsers in ``register(subparsers)``,
with ``func`` (parsed arguments -> exit code) as a default; heavy imports stay inside functions so ``--help`` is fast.
Errors a user can fix end as one line ``pyterrier-tite COMMAND: error: ...`` and exit code 2; anything else keeps its
traceback (a bug), and ``PYTERRIER_TITE_DEBUG=1`` shows the traceback of those too."""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
from typing import NoReturn

COMMAND_MODULES = [
    "pyterrier_tite.cli.demo",
    "pyterrier_tite.cli.rerankers",
    "pyterrier_tite.cli.sparse",
    "pyterrier_tite.cli.tite",
    "pyterrier_tite.cli.evaluate",
    "pyterrier_tite.cli.batch",
    "pyterrier_tite.cli.tirex",
    "pyterrier_tite.cli.doctor",
]


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions as written; an option's default shown unless it is a switch, required or already said."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (
            "default" in text
            or default in (None, False, argparse.SUPPRESS)
            or action.required
            or not action.option_strings
        ):
            return text
        return f"{text} (default: %(default)s)"


class Parser(argparse.ArgumentParser):
    """Every command's parser: the old spellings of :func:`~pyterrier_tite.cli.flags.rename` are rewritten to the
    current flag with a note on stderr, so help and errors name one flag; a usage error is one line."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def parse_known_args(self, args=None, namespace=None):
        renamed, args = vars(self).get("renamed", {}), list(sys.argv[1:] if args is None else args)
        for i, arg in enumerate(args[: args.index("--") if "--" in args else None]):
            old, equals, value = arg.partition("=")
            if old in renamed:
                args[i] = renamed[old] + equals + value
                sys.stderr.write(f"{self.prog}: {old} is deprecated and goes in the next release: use {renamed[old]}\n")
        return super().parse_known_args(args, namespace)


def build_parser() -> argparse.ArgumentParser:
    """The command with every sub-command registered, each with :class:`HelpFormatter` and a description."""
    parser = Parser(
        prog="pyterrier-tite", description="Efficient neural IR models for PyTerrier.", formatter_class=HelpFormatter
    )
    from pyterrier_tite.cli.doctor import installed_version

    version = installed_version("pyterrier-tite", missing="unknown (not installed)")
    parser.add_argument("--version", action="version", version=f"%(prog)s {version}")
    commands = parser.add_subparsers(dest="command", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(commands)
    _one_style(commands)
    return parser


def _one_style(commands: argparse._SubParsersAction) -> None:
    helps = {choice.dest: choice.help for choice in commands._choices_actions}
    for name, sub in commands.choices.items():
        sub.formatter_class = HelpFormatter
        if not sub.description:
            sub.description = helps.get(name)
        for action in sub._actions:
            if isinstance(action, argparse._SubParsersAction):
                _one_style(action)


def main(argv: list[str] | None = None) -> int:
    from pyterrier_tite.cpu_allocator import keep_large_blocks

    args = build_parser().parse_args(argv)
    keep_large_blocks()  # a command owns its process: large tensors reuse the heap (see cpu_allocator)
    try:
        code = int(args.func(args) or 0)
        if code == 0:
            record_training(args, sys.argv[1:] if argv is None else argv)
        return code
    except (OSError, ValueError, KeyError) as exc:
        name = getattr(args.func, "command_name", None)  # a batch command: all its input errors are the user's
        message = user_error(exc, bad_input=name is not None)
        if message is None or os.environ.get("PYTERRIER_TITE_DEBUG", "") not in ("", "0"):
            raise
        print(f"pyterrier-tite {name or args.command}: error: {message}", file=sys.stderr)
        return 2


def record_training(args: argparse.Namespace, argv: list[str]) -> None:
    """Write the command line and its data into the card of the model a training command saved (rank 0 only)."""
    folder = getattr(args, "output_dir", None)
    if not folder or os.environ.get("RANK", "0") != "0" or not os.path.isfile(os.path.join(folder, "pt_meta.json")):
        return
    from pyterrier_tite.models.model_card import write_model_card

    command = "pyterrier-tite " + " ".join(argv)
    data = [d for d in (getattr(args, "dataset", None), getattr(args, "queries", None)) if d]
    write_model_card(
        folder,
        training_command=command,
        training_data=data if len(data) > 1 else next(iter(data), None),
        evaluation_data=getattr(args, "evaluation_data", None),  # what checked_training_data let through
    )


def user_error(exc: BaseException, bad_input: bool = False) -> str | None:
    """The one-line message of an error the user can fix (``OSError``, ``CheckpointError``, ``EvaluationDataError``
    and, with ``bad_input``, a batch command's ``ValueError`` / ``KeyError``), or None for a bug."""
    from pyterrier_tite.datasets import EvaluationDataError
    from pyterrier_tite.models.checkpoint import CheckpointError
    from pyterrier_tite.store.pisa_files import CorruptIndexError

    fixable = (OSError, CheckpointError, EvaluationDataError) + ((ValueError, KeyError) if bad_input else ())
    if not isinstance(exc, fixable):
        return None
    message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
    message = re.sub(r"\s*\n\s*", " ", str(message)).strip()  # one line
    if isinstance(exc, CorruptIndexError):
        message += "" if message.endswith("rebuild the index") else "; rebuild the index"
        message += " (pyterrier-tite index --overwrite ...)"
    return message


if __name__ == "__main__":
    sys.exit(main())
