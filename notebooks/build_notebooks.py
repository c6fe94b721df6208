"""(Re)build and execute the notebooks of this folder, so they are committed with fresh outputs.

Run: python notebooks/build_notebooks.py   (needs IR_DATASETS_HOME; executes every notebook top to bottom)
"""

from __future__ import annotations

import pathlib

import nbformat
from nbclient import NotebookClient

HERE = pathlib.Path(__file__).resolve().parent

BM25_CELLS = [
    (
        "markdown",
        "# First stages: BM25 through PISA and the TREC DL runs\n\n"
        "Everything loads offline when `IR_DATASETS_HOME` points at a mirror (see the README).",
    ),
    (
        "code",
        "import pyterrier as pt\nimport pyterrier_tite as t\nfrom pyterrier.measures import nDCG, AP, R\n"
        "t.ops.backends()",
    ),
    ("markdown", "BM25 on vaswani and SciFact: the PISA index is built once and cached."),
    (
        "code",
        "rows = []\nfor name in ['vaswani', 'scifact']:\n    ds = t.datasets.get_dataset(name)\n"
        "    res = pt.Experiment([t.bm25(name)], ds.get_topics(), ds.get_qrels(), [nDCG@10, AP, R@100], names=[name])\n"
        "    rows.append(res)\npd = __import__('pandas')\npd.concat(rows)",
    ),
    ("markdown", "TREC DL 2019: the provided BM25 top-100, with passage text, ready for a reranker (`dl19 >> model`)."),
    (
        "code",
        "dl19 = t.trec_dl_bm25('2019')\nds = t.datasets.get_dataset('dl19')\n"
        "dl19(ds.get_topics().head(1))[['qid', 'query', 'docno', 'rank', 'score', 'text']].head(3)",
    ),
]


def build(path: pathlib.Path, cells: list[tuple[str, str]]) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell(src) if kind == "markdown" else nbformat.v4.new_code_cell(src)
        for kind, src in cells
    ]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(HERE)}}).execute()
    nbformat.write(nb, path)
    print(f"wrote {path}")


if __name__ == "__main__":
    build(HERE / "01_first_stages.ipynb", BM25_CELLS)
