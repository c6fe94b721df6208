"""Qrels (``qid, docno, label``) from a TREC qrels file (``qid iteration docno grade``) or an ir_datasets id, read
exactly (ids as written, grades integers); a document judged twice for a query with two grades is refused."""

from __future__ import annotations

import warnings

import pandas as pd

from pyterrier_tite.store.text_files import is_file_argument, line_number, whitespace_table


def load_qrels(source: str) -> pd.DataFrame:
    """``qid, docno, label`` (str ids, int grades) from a TREC qrels file or an ir_datasets id. A document judged
    twice for a query is refused when the grades differ and counted once (with a warning) when they agree."""
    if is_file_argument(source):
        hints = {3: " (is the iteration column missing? e.g. `1 0 doc7 2`)"}
        table = whitespace_table(source, 4, "qrels", "qid iteration docno label", hints)
        bad = ~table[3].str.fullmatch(r"[+-]?\d+")
        if bad.any():
            i = int(bad.to_numpy().argmax())
            line = line_number(source, i)
            raise ValueError(f"{source}, line {line}: label {table.at[i, 3]!r} is not an integer relevance grade")
        qrels = pd.DataFrame({"qid": table[0], "docno": table[2], "label": table[3].astype("int64")})
        return _one_grade_each(qrels, source, from_file=True)
    from pyterrier_tite import datasets

    qrels = datasets.get_dataset(source).get_qrels()
    qrels = qrels.assign(qid=qrels["qid"].astype(str), docno=qrels["docno"].astype(str))
    return _one_grade_each(qrels, source, from_file=False)


def _one_grade_each(qrels: pd.DataFrame, source: str, from_file: bool) -> pd.DataFrame:
    qrels = qrels.reset_index(drop=True)
    repeated = qrels.duplicated(["qid", "docno"], keep="first")
    if not repeated.any():
        return qrels

    def at(i: int) -> str:
        return f"line {line_number(source, i)}" if from_file else f"row {i + 1}"

    pairs = (
        qrels[repeated]
        .reset_index()
        .merge(qrels[~repeated].reset_index(), on=["qid", "docno"], suffixes=("", "_first"))
    )
    clash = pairs[pairs["label"] != pairs["label_first"]].sort_values("index")
    if len(clash):
        row = clash.iloc[0]
        raise ValueError(
            f"{source}, {at(int(row['index']))}: qid {row['qid']!r}, docno {row['docno']!r} is judged {row['label']} "
            f"here and {row['label_first']} at {at(int(row['index_first']))}; a document has one grade per query: "
            "remove one of the lines"
        )
    count = int(repeated.sum())
    i = int(qrels.index[repeated][0])
    warnings.warn(
        f"{source}: {count} duplicate judgement line{'s' if count > 1 else ''} (same grade; each counted once), the "
        f"first at {at(i)}: qid {qrels.at[i, 'qid']!r}, docno {qrels.at[i, 'docno']!r}",
        UserWarning,
        stacklevel=3,
    )
    return qrels[~repeated].reset_index(drop=True)
