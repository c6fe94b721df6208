"""Write docs/results.md from the studies' data files, so the page cannot drift from the numbers it reports.

Every study is a folder of ``experiments/`` with its configuration (``config.toml`` or ``command.txt``), a
``README.md`` and its results as data (``results.json``, or a plain ``results.csv``); ``experiments/claims.json``
holds the papers' claims with the verdicts. The page is generated: edit the data and rerun

    python experiments/report.py            # writes docs/results.md
    python experiments/report.py --check    # exit 1 when docs/results.md is not what the data gives

Standard library only, so it runs without the package installed.

``results.json`` (written as ``json.dumps(data, ensure_ascii=False, indent=1, sort_keys=True)`` plus a newline)::

    title, order, question, answer     the study's section: its heading, place on the page and one-line answer
    anchors                            old anchors of the page that links elsewhere still point to
    headline                           [{"table": id, "rows": [row ids], "columns": [keys]}]: what the page shows
    findings, tried                    [{"what", "figure", "note", "removed"}]: one line each; "removed" names the
                                       library file (or flag) the result made redundant
    efficiency                         [{"what", "figure", "table"}]: rows of the page's efficiency table
    figures                            [{"file", "what", "notebook"}]: plots under docs/figures/
    tables                             {id: {"title", "section", "date", "machine": {"device", "precision",
                                       "threads"}, "command", "label", "columns", "headers", "format",
                                       "column_formats", "rows": [{"id", "label", "values": {column: cell}, ...}]}}

A cell is a number (formatted by the table's ``format``, then the row's ``format``, then the table's
``column_formats``: ``digits``, ``diff_digits``, ``thousands``, ``unit``), ``null`` (not measured), a string (kept as
written), a list (joined by " / "), or an object: ``{"mean", "std"}``, ``{"diff", "lo", "hi", "p"}`` (a paired
difference, its 95% interval and p-value), ``{"value", "p"}``, ``{"from", "to"}`` or ``{"p"}``, each with an optional
``mark``. A figure (``findings``, ``tried``, ``efficiency``, a claim's ``quotes``) names cells of one study
(``study``, default the entry's own): ``{"table", "cells": [[row, column] or [row, column, table], ...], "groups":
[cells, ...], "against": cells, "style", "digits"}``; "interval" drops p-values and marks, "short" keeps the number
alone. A claim's ``quotes`` must appear in its text as the data gives them, so a changed result cannot leave a stale
claim behind.

Exit status: 0 written (or up to date with ``--check``), 1 stale page, 2 data the page cannot be built from.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import sys
from collections.abc import Iterable
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the command is read by a regular expression instead
    tomllib = None  # type: ignore[assignment]

HERE = os.path.dirname(os.path.abspath(__file__))
MINUS = "\u2212"  # the page's minus sign, as in the tables it replaced
DEFAULT_FORMAT = {"digits": 4, "diff_digits": 3, "thousands": False, "unit": ""}
CLAIMS_TITLE = "The papers' claims, as far as this machine can test them"


class DataError(ValueError):
    """A data file that the page cannot be built from (a missing table, row or column, or a stale quote)."""


# --- numbers ---------------------------------------------------------------------------------------------------------


def fmt_number(x: float | int, digits: int, thousands: bool = False, signed: bool = False) -> str:
    """A fixed number of decimals, rounded half up from the number as written (not from its binary value)."""
    d = Decimal(repr(x)) if isinstance(x, float) else Decimal(x)
    d = d.quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_UP)
    text = f"{abs(d):,.{digits}f}" if thousands else f"{abs(d):.{digits}f}"
    if d.is_signed():
        return MINUS + text
    return "+" + text if signed else text


def fmt_p(p: float | int | str | list) -> str:
    """A p-value as its shortest exact decimal, in powers of ten below a thousandth ('7e-4', '0.02')."""
    if isinstance(p, list):
        return " / ".join(fmt_p(x) for x in p)
    if isinstance(p, str):
        return p
    d = Decimal(repr(p)) if isinstance(p, float) else Decimal(p)
    if d != 0 and abs(d) < Decimal(1).scaleb(-3):
        return f"{d.normalize():e}"
    return repr(p) if isinstance(p, float) else str(p)


def cell_format(table: dict, column: str | None, row: dict | None = None) -> dict:
    """The table's format, then the row's, then the column's (a column of minutes stays in minutes in a row of
    differences)."""
    fmt = {**DEFAULT_FORMAT, **table.get("format", {})}
    if row is not None:
        fmt.update(row.get("format", {}))
    if column is not None:
        fmt.update(table.get("column_formats", {}).get(column, {}))
    return fmt


def fmt_cell(value: Any, fmt: dict, style: str = "full") -> str:
    """One table cell as the page prints it. ``style``: "full"; "interval" drops p-values and marks; "short" keeps
    the number alone (a mean without its std, a difference without its interval)."""
    if value is None:
        return "\u2013"
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        raise DataError(f"a cell cannot be a boolean: {value!r}")
    if isinstance(value, (int, float)):
        return fmt_number(value, fmt["digits"], fmt["thousands"]) + fmt["unit"]
    if isinstance(value, list):
        return " / ".join(fmt_cell(v, fmt, style) for v in value)
    if not isinstance(value, dict):
        raise DataError(f"not a cell: {value!r}")
    full = style == "full"
    if "mean" in value:
        text = fmt_number(value["mean"], fmt["digits"], fmt["thousands"])
        if style != "short":
            text += f" \u00b1 {fmt_number(value['std'], fmt['digits'], fmt['thousands'])}"
        text += fmt["unit"]
    elif "diff" in value:
        digits = fmt["diff_digits"]
        text = fmt_number(value["diff"], digits, signed=True)
        if style != "short" and "lo" in value:
            lo, hi = (fmt_number(value[k], digits, signed=True) for k in ("lo", "hi"))
            text += f" [{lo}, {hi}]"
        if full and "p" in value:
            text += f", p {fmt_p(value['p'])}"
        return text + (value.get("mark", "") if full else "")
    elif "value" in value:
        text = fmt_cell(value["value"], fmt, style)
    elif "from" in value:
        text = f"{fmt_cell(value['from'], fmt, style)} \u2192 {fmt_cell(value['to'], fmt, style)}"
    elif "p" in value:
        text = fmt_p(value["p"])
    else:
        raise DataError(f"not a cell: {value!r}")
    if full and "p" in value and "diff" not in value and ("mean" in value or "value" in value):
        text += f" (p {fmt_p(value['p'])})"
    return text + (value.get("mark", "") if full else "")


# --- data ------------------------------------------------------------------------------------------------------------


def read_json(path: str) -> Any:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def read_command(folder: str) -> str:
    """The study's command: ``command`` of config.toml, else the first line of command.txt."""
    toml_path = os.path.join(folder, "config.toml")
    if os.path.exists(toml_path):
        with open(toml_path, "rb") as f:
            raw = f.read()
        if tomllib is not None:
            return str(tomllib.loads(raw.decode("utf-8")).get("command", ""))
        match = re.search(r'^command\s*=\s*"((?:[^"\\]|\\.)*)"', raw.decode("utf-8"), re.M)
        return json.loads(f'"{match.group(1)}"') if match else ""
    txt_path = os.path.join(folder, "command.txt")
    if os.path.exists(txt_path):
        with open(txt_path, encoding="utf-8") as f:
            lines = [line.strip() for line in f if line.strip() and not line.startswith("#")]
        return lines[0] if lines else ""
    return ""


def read_csv_study(folder: str) -> dict:
    """A study kept as one CSV table: its first column labels the rows, every cell is printed as written."""
    with open(os.path.join(folder, "results.csv"), newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    header, body = rows[0], rows[1:]
    title = os.path.basename(folder)
    readme = os.path.join(folder, "README.md")
    if os.path.exists(readme):
        with open(readme, encoding="utf-8") as f:
            first = f.readline().strip()
        title = first.lstrip("#").strip() or title
    table = {
        "title": title,
        "label": header[0],
        "columns": header[1:],
        "rows": [
            {"id": str(i), "label": row[0], "values": dict(zip(header[1:], row[1:], strict=False))}
            for i, row in enumerate(body)
        ],
    }
    return {"title": title, "tables": {"results": table}, "headline": [{"table": "results"}]}


def load_studies(experiments: str) -> list[tuple[str, dict]]:
    """Every study folder with a results file, in the page's order (``order``, then name)."""
    studies = []
    for name in sorted(os.listdir(experiments)):
        folder = os.path.join(experiments, name)
        if not os.path.isdir(folder) or name.startswith((".", "_")):
            continue
        if os.path.exists(os.path.join(folder, "results.json")):
            data = read_json(os.path.join(folder, "results.json"))
        elif os.path.exists(os.path.join(folder, "results.csv")):
            data = read_csv_study(folder)
        else:
            continue
        data["command"] = read_command(folder)
        studies.append((name, data))
    return sorted(studies, key=lambda item: (item[1].get("order", 0), item[0]))


def find_table(study: dict, name: str, table_id: str) -> dict:
    try:
        return study["tables"][table_id]
    except KeyError:
        raise DataError(f"{name}: no table {table_id!r}") from None


def find_row(table: dict, name: str, row_id: str) -> dict:
    for row in table["rows"]:
        if row["id"] == row_id:
            return row
    raise DataError(f"{name}: table {table.get('title')!r} has no row {row_id!r}")


def cell_text(study: dict, name: str, ref: tuple[str, str, str], style: str = "full", digits: int | None = None) -> str:
    """The cell ``(table, row, column)`` of a study, formatted as its table says (or to ``digits`` decimals)."""
    table_id, row_id, column = ref
    table = find_table(study, name, table_id)
    row = find_row(table, name, row_id)
    if column not in row["values"]:
        raise DataError(f"{name}: row {row_id!r} of {table_id!r} has no column {column!r}")
    fmt = cell_format(table, column, row)
    if digits is not None:
        fmt = {**fmt, "digits": digits, "diff_digits": digits}
    return fmt_cell(row["values"][column], fmt, style)


def figure_text(studies: dict[str, dict], default: str, figure: dict) -> str:
    """A figure of a one-line entry: the named cells joined by ' / ', groups by '; ', the ``against`` cells after
    'vs'."""
    name = figure.get("study", default)
    if name not in studies:
        raise DataError(f"no study {name!r}")
    study = studies[name]

    def join(cells: Iterable[list[str]]) -> str:
        refs = [(cell[2], cell[0], cell[1]) if len(cell) == 3 else (figure["table"], cell[0], cell[1])
                for cell in cells]  # fmt: skip
        return " / ".join(
            cell_text(study, name, ref, figure.get("style", "full"), figure.get("digits")) for ref in refs
        )

    groups = figure.get("groups") or [figure["cells"]]
    text = "; ".join(join(group) for group in groups)
    if figure.get("against"):
        text += " vs " + join(figure["against"])
    return text


# --- the page --------------------------------------------------------------------------------------------------------


def escape(text: str) -> str:
    return text.replace("|", "\\|")


def markdown_table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(escape(h) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(escape(c) for c in row) + " |" for row in rows]
    return lines


def machine_text(table: dict) -> str:
    machine = table.get("machine", {})
    parts = [machine.get("device", "")]
    if machine.get("precision"):
        parts.append(machine["precision"])
    if machine.get("threads"):
        parts.append(f"{machine['threads']} thread" + ("s" if machine["threads"] != 1 else ""))
    return ", ".join(p for p in parts if p)


def headline_lines(name: str, study: dict, headline: dict) -> list[str]:
    table = find_table(study, name, headline["table"])
    columns = headline.get("columns") or table["columns"]
    headers = table.get("headers", {})
    rows = table["rows"]
    if headline.get("rows"):
        rows = [find_row(table, name, row_id) for row_id in headline["rows"]]
    body = [[row["label"]] + [fmt_cell(row["values"].get(c, ""), cell_format(table, c, row)) for c in columns]
            for row in rows]  # fmt: skip
    where = machine_text(table)
    caption = f"*{table['title']}*" + (f" ({where})" if where else "")
    return ["", caption, ""] + markdown_table([table.get("label", "")] + [headers.get(c, c) for c in columns], body)


def claims_lines(claims: dict, studies: dict[str, dict]) -> list[str]:
    """The claims table; each claim's quoted figures must appear in its text as the data gives them."""
    for claim in claims["claims"]:
        for quote in claim.get("quotes", []):
            text = figure_text(studies, quote["study"], quote)
            if text not in claim["result"] + claim["verdict"]:
                raise DataError(f"claims.json: {claim['claim'][:50]!r} quotes {text!r}, which its text lacks")
    rows = [[c["claim"], c["result"], c["verdict"], " · ".join(f"[{s}](../experiments/{s}/)" for s in c["studies"])]
            for c in claims["claims"]]  # fmt: skip
    return [f"## {CLAIMS_TITLE}", "", claims["intro"], ""] + markdown_table(
        ["claim", "result here", "verdict", "data"], rows
    )


def efficiency_lines(studies: dict[str, dict], name: str) -> list[str]:
    """The study's efficiency table: one figure per row, each with the machines it was measured on (those of every
    table its cells come from, once each)."""
    rows = []
    for entry in studies[name].get("efficiency", []):
        source = entry.get("study", name)
        tables = [entry["table"]] + [cell[2] for cell in entry["cells"] if len(cell) > 2]
        machines = dict.fromkeys(machine_text(find_table(studies[source], source, t)) for t in tables)
        rows.append([entry["what"], figure_text(studies, name, entry), " / ".join(machines),
                     f"[{source}](../experiments/{source}/)"])  # fmt: skip
    return [""] + markdown_table(["what", "figure", "machine", "data"], rows) if rows else []


def study_lines(name: str, study: dict, studies: dict[str, dict]) -> list[str]:
    lines = ["", f"## {study['title']}", ""]
    anchors = "".join(f'<a id="{anchor}"></a>' for anchor in study.get("anchors", []))
    command = f" Command: `{study['command']}`." if study.get("command") else ""
    lines.append(f"{anchors}{study.get('question', '')}{command} [README](../experiments/{name}/README.md) · "
                 f"[data](../experiments/{name}/)")  # fmt: skip
    lines += efficiency_lines(studies, name)
    for headline in study.get("headline", []):
        lines += headline_lines(name, study, headline)
    if study.get("answer"):
        lines += ["", study["answer"]]
    bullets = [entry_line(e, studies, name) for e in study.get("findings", [])]
    bullets += [entry_line(e, studies, name, "tried: ") for e in study.get("tried", []) if not e.get("removed")]
    if bullets:
        lines += [""] + bullets
    figures = [f"[{f['what']}]({f['file']}) (`{f['notebook']}`)" for f in study.get("figures", [])]
    if figures:
        lines += ["", "Figures: " + " · ".join(figures) + "."]
    return lines


def entry_line(entry: dict, studies: dict[str, dict], name: str, prefix: str = "") -> str:
    """One line of a study's list: what, its figure from the data, a note, and what the library dropped."""
    text = f"- {prefix}{entry['what']}: {figure_text(studies, name, entry['figure'])}"
    if entry.get("note"):
        text += f" ({entry['note']})"
    if entry.get("removed"):
        text += f"; removed: {entry['removed']}"
    return text


def render(experiments: str) -> str:
    """The whole page from the data under ``experiments``."""
    loaded = load_studies(experiments)
    order = [name for name, _ in loaded]
    studies = dict(loaded)
    claims_path = os.path.join(experiments, "claims.json")
    claims = read_json(claims_path) if os.path.exists(claims_path) else {"claims": []}
    lines = [
        "# Results",
        "",
        "<!-- Generated by `python experiments/report.py` from experiments/*/results.json: do not edit by hand. -->",
        "Generated by `python experiments/report.py` from the studies under [`experiments/`](../experiments): do not "
        "edit this page by hand. Each study's folder holds the configuration it ran, a README with its question and "
        "answer, and its results as data (every table of the study with its runs, seeds, collections, machine and "
        "date); change the data and rerun the script (`--check` fails while this page is stale).",
        "",
        "Studies: " + " · ".join(f"[{studies[n]['title']}](#{slug(studies[n]['title'])})" for n in order) + ".",
        "",
    ]
    if claims["claims"]:
        lines += claims_lines(claims, studies)
    for name in order:
        lines += study_lines(name, studies[name], studies)
    removed = [(name, t) for name in order for t in studies[name].get("tried", []) if t.get("removed")]
    if removed:
        lines += ["", "## Tried and left out of the library", ""]
        lines += [entry_line(t, studies, name) + f" ([{name}](../experiments/{name}/))" for name, t in removed]
    return "\n".join(lines) + "\n"


def slug(title: str) -> str:
    """GitHub's anchor of a heading."""
    text = re.sub(r"[^\w\- ]", "", title.lower().replace("`", ""))
    return text.replace(" ", "-")


#: the longest line the page may have: a table cell longer than this is a lab log, not an answer
MAX_LINE = 1500


def check_line_lengths(text: str) -> None:
    """A page line over :data:`MAX_LINE` characters is data the page cannot be built from: the answer and its key
    figures belong in the table, the history in the study's README."""
    for number, line in enumerate(text.splitlines(), 1):
        if len(line) > MAX_LINE:
            raise DataError(
                f"line {number} of the page has {len(line)} characters (at most {MAX_LINE}): "
                f"{line[:80]}... keep the answer and its key figures; move the history to the study's README"
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--experiments", default=HERE, help="the folder of the studies (default: this script's)")
    parser.add_argument("--output", default=None, help="the page (default: docs/results.md beside experiments/)")
    parser.add_argument("--check", action="store_true", help="exit 1 if the page differs from what the data gives")
    args = parser.parse_args(argv)
    output = args.output or os.path.join(os.path.dirname(os.path.abspath(args.experiments)), "docs", "results.md")
    try:
        text = render(args.experiments)
        check_line_lengths(text)
    except DataError as error:
        print(f"report.py: {error}", file=sys.stderr)
        return 2
    if args.check:
        current = None
        if os.path.exists(output):
            with open(output, encoding="utf-8") as f:
                current = f.read()
        if current != text:
            print(f"{output} is out of date: run `python experiments/report.py`", file=sys.stderr)
            return 1
        return 0
    with open(output, "w", encoding="utf-8") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
