"""Markdown rendering of result frames, so examples and benchmarks print README-ready tables without tabulate."""

from __future__ import annotations

import numbers

import pandas as pd


def markdown_table(frame: pd.DataFrame, floatfmt: str = ".4f") -> str:
    """A GitHub-flavoured Markdown table of ``frame`` (floats formatted with ``floatfmt``, index dropped)."""

    def cell(value) -> str:
        if value is None or (isinstance(value, float) and value != value):
            return "–"
        if isinstance(value, numbers.Real) and not isinstance(value, (bool, numbers.Integral)):
            return format(value, floatfmt)
        return str(value)

    header = "| " + " | ".join(map(str, frame.columns)) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    body = ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([header, rule, *body])
