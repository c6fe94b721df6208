"""The ``pyterrier-tite`` command (also ``python -m pyterrier_tite``)."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pyterrier-tite", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    demo = commands.add_parser("demo", help="pt.Experiment on a collection (default: vaswani), printed as a table")
    demo.add_argument("--dataset", default="vaswani", help="ir_datasets ID or alias (vaswani, cranfield, scifact, ...)")

    backends = commands.add_parser("backends", help="list the kernel backends available on this machine")
    del backends

    args = parser.parse_args(argv)
    if args.command == "demo":
        import pandas as pd

        from pyterrier_tite.demo import run_demo

        table = run_demo(args.dataset)
        with pd.option_context("display.width", 200, "display.max_columns", None):
            print(f"\n{args.dataset}:\n{table.to_string(index=False)}")
        return 0
    if args.command == "backends":
        import pyterrier_tite

        for op, names in pyterrier_tite.ops.backends().items():
            print(f"{op}: {', '.join(names)}")
        return 0
    return 1


if __name__ == "__main__":
    sys.exit(main())
