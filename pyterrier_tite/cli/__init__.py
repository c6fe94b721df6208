"""The ``pyterrier-tite`` command (also ``python -m pyterrier_tite``).

Each sub-command lives in the module that owns its work: a module listed in ``COMMAND_MODULES`` defines
``register(subparsers)``, which adds its parsers and sets ``func`` (called with the parsed arguments, returns the exit
code) as a parser default. Heavy imports stay inside those functions so ``--help`` is fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys

COMMAND_MODULES = [
    "pyterrier_tite.cli.demo",
    "pyterrier_tite.cli.rerankers",
    "pyterrier_tite.cli.sparse",
    "pyterrier_tite.cli.tite",
    "pyterrier_tite.cli.evaluate",
    "pyterrier_tite.cli.batch",
    "pyterrier_tite.cli.tirex",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pyterrier-tite", description="Efficient neural IR models for PyTerrier.")
    commands = parser.add_subparsers(dest="command", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    from pyterrier_tite.cpu_allocator import keep_large_blocks

    args = build_parser().parse_args(argv)
    keep_large_blocks()  # a command owns its process: large tensors reuse the heap (see cpu_allocator)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
