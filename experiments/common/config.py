"""``--config FILE`` for the studies: a study's flags, read from a TOML file.

Every study parses its command line with :func:`parse_with_config`::

    parser = argparse.ArgumentParser(prog="python -m experiments.<name>")
    parser.add_argument("--max-steps", type=int, default=2000)
    ...
    args = parse_with_config(parser, argv)

and runs as ``python -m experiments.<name> --config experiments/<name>/config.toml [--flag value ...]``.

The file's table ``[args]`` holds the flags, keyed by their argparse ``dest`` (``max_steps = 2000`` for
``--max-steps``); nothing else in the file is read, so it may carry other keys or tables (``command``,
``description``, ...). A key in ``[args]`` that names no flag is an error naming it. Values stand in for the flags'
defaults, so a flag given on the command line overrides the file. A value is written as the flag would take it: a
string is converted by the flag's ``type`` (as argparse converts a string default), a list stands for a flag that
takes several values (``nargs``) or, for a flag that takes one string, for a comma list (``models = ["a", "b"]`` is
``--models a,b``); a boolean sets a switch (``store_true``/``store_false``). A required flag given in the file is no
longer required on the command line.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser as the package tomli
    import tomli as tomllib

CONFIG_FLAG = "--config"


def _flag_actions(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """dest -> action for every flag or positional the parser fills (not ``--help``, not ``--config``)."""
    return {
        a.dest: a
        for a in parser._actions
        if a.dest not in (argparse.SUPPRESS, "help", "config") and not isinstance(a, argparse._HelpAction)
    }


def read_config(path: str) -> dict[str, Any]:
    """The table ``[args]`` of a TOML file (``{}`` when it has none)."""
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError as exc:
        raise SystemExit(f"{CONFIG_FLAG}: no such file: {path}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise SystemExit(f"{CONFIG_FLAG} {path}: not valid TOML: {exc}") from exc
    table = data.get("args", {})
    if not isinstance(table, dict):
        raise SystemExit(f"{CONFIG_FLAG} {path}: 'args' must be a table ([args]), not {type(table).__name__}")
    return table


def _default_value(action: argparse.Action, key: str, value: Any, path: str) -> Any:
    """A config value as the flag's default, checked against what the flag takes."""
    where = f"{CONFIG_FLAG} {path}: [args] {key}"
    if isinstance(action, argparse._StoreTrueAction | argparse._StoreFalseAction):
        if not isinstance(value, bool):
            raise SystemExit(f"{where} is a switch: give true or false, not {value!r}")
        return value
    takes_many = (action.nargs not in (None, "?") and action.nargs != 1) or isinstance(action, argparse._AppendAction)
    if isinstance(value, list) and not takes_many:
        if not all(isinstance(v, str | int | float) and not isinstance(v, bool) for v in value):
            raise SystemExit(f"{where}: a list stands for a comma list of plain values, not {value!r}")
        value = ",".join(str(v) for v in value)
    convert = action.type if callable(action.type) else None

    def one(v: Any) -> Any:
        if convert is not None and isinstance(v, str):
            try:
                v = convert(v)
            except (TypeError, ValueError, argparse.ArgumentTypeError) as exc:
                raise SystemExit(f"{where}: invalid value {v!r}: {exc}") from exc
        if action.choices is not None and v not in action.choices:
            choices = ", ".join(repr(c) for c in action.choices)
            raise SystemExit(f"{where}: invalid choice {v!r} (choose from {choices})")
        return v

    return [one(v) for v in value] if isinstance(value, list) else one(value)


def parse_with_config(parser: argparse.ArgumentParser, argv: Sequence[str] | None = None) -> argparse.Namespace:
    """``parser.parse_args(argv)`` with ``--config FILE`` (added to the parser when it lacks it): the file's
    ``[args]`` become the defaults, the command line overrides them. ``args.config`` is the path (or None)."""
    if not any(CONFIG_FLAG in a.option_strings for a in parser._actions):
        parser.add_argument(
            CONFIG_FLAG,
            default=None,
            metavar="FILE",
            help="TOML file whose table [args] sets flags by their names with '_' (e.g. max_steps = 2000); "
            "flags on the command line override it",
        )
    pre = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    pre.add_argument(CONFIG_FLAG, default=None)
    known, _ = pre.parse_known_args(argv)
    if known.config:
        actions = _flag_actions(parser)
        table = read_config(known.config)
        unknown = sorted(k for k in table if k not in actions)
        if unknown:
            parser.error(
                f"{CONFIG_FLAG} {known.config}: unknown key(s) in [args]: {', '.join(unknown)} "
                f"(keys are flag names with '_': {', '.join(sorted(actions))})"
            )
        defaults = {}
        for key, value in table.items():
            action = actions[key]
            defaults[key] = _default_value(action, key, value, known.config)
            action.required = False
            if not action.option_strings:  # a positional given in the file may be left off the command line
                action.nargs = "?"
        parser.set_defaults(**defaults)
    args = parser.parse_args(argv)
    if args.config != known.config:  # an abbreviation (--conf) that the parser took but the file was not read
        parser.error(f"spell out {CONFIG_FLAG} FILE")
    return args
