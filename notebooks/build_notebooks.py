"""Build the notebooks of this folder from their sources and execute them, so they are committed with outputs.

The sources are ``notebooks/src/NN_name.py`` in jupytext's percent format (``# %%`` starts a code cell,
``# %% [markdown]`` a text cell): edit those (or edit a notebook in Jupyter and sync it back with
``jupytext --to py:percent``), then run

    python notebooks/build_notebooks.py                 # every notebook, full sizes
    python notebooks/build_notebooks.py 02 04           # only these
    python notebooks/build_notebooks.py --quick 03      # PYTERRIER_TITE_QUICK=1: small sizes
    python notebooks/build_notebooks.py --figures       # full sizes, and the figures of docs/ (docs/figures/)

Each notebook runs top to bottom in ``notebooks/`` (the kernel ``python3`` of this environment), offline with the
data mirror (``IR_DATASETS_HOME``, default ``../shared/ir_datasets`` beside the checkout). A notebook writes only into
a folder of its own (``runs/notebooks/<name>`` under where it runs) and saves its figures only into the folder
``PYTERRIER_TITE_FIGURES`` names, which ``--figures`` sets to ``docs/figures/``. A notebook whose outputs
hold an error, a traceback or an absolute path of this machine is not written. Needs the ``notebooks`` extra.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import re
import sys
import time

import jupytext
import nbformat
from nbclient import NotebookClient

HERE = pathlib.Path(__file__).resolve().parent
SOURCES = HERE / "src"

#: absolute paths of a machine must not reach committed outputs (the checkout, homes, temp folders)
ABSOLUTE = re.compile(r"(/work/|/root/|/home/|/tmp/|/private/|/Users/|[A-Za-z]:\\\\)")


def problems(nb) -> list[str]:
    """Errors, tracebacks and absolute paths in a notebook's outputs (one line each)."""
    found = []
    for number, cell in enumerate(nb.cells):
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                found.append(f"cell {number}: error {output.get('ename')}: {output.get('evalue')}")
            texts = [output.get("text", "")]
            for mime, value in output.get("data", {}).items():
                if mime.startswith("text/"):
                    texts.append(value if isinstance(value, str) else "".join(value))
            text = "".join(t if isinstance(t, str) else "".join(t) for t in texts)
            if "Traceback (most recent call last)" in text:
                found.append(f"cell {number}: a traceback in the output")
            match = ABSOLUTE.search(text)
            if match:
                start = max(0, match.start() - 40)
                found.append(f"cell {number}: absolute path in the output: ...{text[start : match.end() + 40]!r}")
    return found


def execute(nb, timeout: int = 3600) -> None:
    """Run ``nb`` in place, top to bottom, with ``notebooks/`` as working directory."""
    client = NotebookClient(
        nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(HERE)}}, record_timing=False
    )
    client.execute()


def build(source: pathlib.Path, quick: bool = False, force: bool = False) -> float:
    """Convert one source to ``notebooks/<name>.ipynb``, execute it and write it; seconds taken."""
    nb = jupytext.read(source)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata.pop("jupytext", None)
    if quick:
        os.environ["PYTERRIER_TITE_QUICK"] = "1"
    else:
        os.environ.pop("PYTERRIER_TITE_QUICK", None)
    began = time.perf_counter()
    execute(nb)
    seconds = time.perf_counter() - began
    found = problems(nb)
    if found and force:
        print(f"{source.name}: written despite\n  " + "\n  ".join(found), file=sys.stderr)
    elif found:
        raise SystemExit(f"{source.name}: not written\n  " + "\n  ".join(found))
    target = HERE / f"{source.stem}.ipynb"
    nbformat.write(nb, target)
    print(f"wrote {target.relative_to(HERE.parent)} ({seconds:.0f} s{', quick mode' if quick else ''})", flush=True)
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", help="notebook prefixes or names (default: all)")
    parser.add_argument("--quick", action="store_true", help="PYTERRIER_TITE_QUICK=1 (small sizes)")
    parser.add_argument("--force", action="store_true", help="write the notebook even if its outputs have problems")
    parser.add_argument("--figures", action="store_true", help="save the figures into docs/figures/ (full sizes)")
    args = parser.parse_args(argv)
    if args.figures and args.quick:
        parser.error("--figures draws the figures of docs/ at full size: drop --quick")
    os.environ.pop("PYTERRIER_TITE_FIGURES", None)
    if args.figures:
        os.environ["PYTERRIER_TITE_FIGURES"] = str(HERE.parent / "docs" / "figures")
    if not os.environ.get("IR_DATASETS_HOME") and (HERE.parent.parent / "shared" / "ir_datasets").is_dir():
        os.environ["IR_DATASETS_HOME"] = str(HERE.parent.parent / "shared" / "ir_datasets")
    if not os.environ.get("HF_HOME") and (HERE.parent.parent / "shared" / "hub" / "expected").is_dir():
        os.environ["HF_HOME"] = str(HERE.parent.parent / "shared" / "hub")  # 06 reads the hub-layout fixtures
    sources = sorted(SOURCES.glob("[0-9][0-9]_*.py"))
    if args.names:
        sources = [s for s in sources if any(s.stem.startswith(n) for n in args.names)]
    if not sources:
        print("no notebook source matches", file=sys.stderr)
        return 1
    for source in sources:
        build(source, quick=args.quick, force=args.force)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
