"""Checks at the PyTerrier boundary, the same in every transformer: frame columns in (the value rules of
:mod:`pyterrier_tite.store.values`), and on the way out a NaN / inf score, vector or term weight refused
(:func:`refuse_non_finite`) before ``add_ranks`` or an index sees it."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd
import pyterrier as pt
import pyterrier_alpha as pta

from pyterrier_tite.pt.schematic import KeyedEquality
from pyterrier_tite.store.values import checked_id, checked_texts
from pyterrier_tite.store.values import one_query_per_qid as one_query_per_qid_of


def text_column(frame: pd.DataFrame, column: str, id_column: str) -> list[str]:
    """The values of a text column, checked (:func:`~pyterrier_tite.store.values.checked_text`), in row order."""
    ids = frame[id_column] if id_column in frame.columns else range(len(frame))
    return checked_texts(frame[column], ids, column, id_column)


def distinct_texts(texts: list[str]) -> tuple[np.ndarray, list[str]]:
    """``(rows, distinct)``: each text once in order of first appearance, and each row's position in it, so a model
    encodes a text once however many rows repeat it (queries of a run; documents re-ranked for several queries)."""
    rows, distinct = pd.factorize(np.asarray(texts, dtype=object))
    return rows, list(distinct)


def one_query_per_qid(frame: pd.DataFrame, query_column: str = "query") -> None:
    """Refuse a frame where a qid carries two different query texts (the rule:
    :func:`pyterrier_tite.store.values.one_query_per_qid`)."""
    if not frame.empty and query_column in frame.columns and "qid" in frame.columns:
        one_query_per_qid_of(frame["qid"], frame[query_column], query_column)


def _row_label(rows, i: int) -> str:
    """``qid 'q1', docno 'd0'`` of row ``i`` of a frame or a list of records (``row 3`` when it has neither)."""
    row = rows.iloc[i] if isinstance(rows, pd.DataFrame) else rows[i]
    ids = [f"{c} {row[c]!r}" for c in ("qid", "docno") if c in row]
    return ", ".join(ids) or f"row {i}"


def _likely_cause(modules: Iterable, precision) -> str:
    """Why a model's outputs are not finite: the first weight holding NaN / inf, else a low-precision overflow."""
    for module in modules:
        for name, tensor in [*module.named_parameters(), *module.named_buffers()]:
            if tensor.is_floating_point() and not bool(tensor.isfinite().all()):
                return (
                    f"its weights hold NaN / inf ({name}): the checkpoint is damaged or its training diverged; "
                    "load a sound checkpoint"
                )
    low = {"fp16": "float16", "bf16": "bfloat16"}.get(str(precision))
    if low:
        return f"{low} inference overflowed: try dtype=torch.float32"
    if modules:
        return "its weights are finite, so the computation overflowed (a checkpoint from unstable float16 training?)"
    return "NaN weights in the checkpoint or an overflow in float16 are the usual causes: try dtype=torch.float32"


def refuse_non_finite(
    values,
    rows: pd.DataFrame | Sequence[dict],
    what: str,
    source: str,
    *,
    index: Sequence[int] | np.ndarray | None = None,
    modules: Iterable = (),
    precision=None,
) -> None:
    """A ``ValueError`` naming the first qid / docno when ``values`` (a model's output per row of ``rows``) hold NaN
    or inf, with the cause found in ``modules``' weights (or ``precision``); without either, the values were given to
    the model, which asks for finite inputs. ``index`` maps each row to its row of ``values``."""
    if not len(values):
        return
    if hasattr(values, "isfinite"):  # a torch tensor, checked where it lies
        values = values.detach()
        bad = ~values.isfinite().reshape(len(values), -1).all(dim=1).cpu().numpy()
    elif isinstance(values, (pd.Series, list, tuple)):  # row by row: a vector column may hold a None or ragged rows
        values = [np.asarray(v, dtype=np.float64) for v in values]
        bad = np.array([not np.isfinite(v).all() for v in values])
    else:  # [N] scores or [N, D] vectors
        values = np.asarray(values, dtype=np.float64)
        bad = ~np.isfinite(values).reshape(len(values), -1).all(axis=1)
    if not bad.any():
        return
    if isinstance(values, list):
        nan = any(np.isnan(values[i]).any() for i in np.flatnonzero(bad))
    else:
        nan = bool((values.isnan() if hasattr(values, "isnan") else np.isnan(values)).any())
    word = "NaN" if nan else "infinite"
    if index is not None:
        bad = bad[np.asarray(index, dtype=np.int64)]
    first = int(np.argmax(bad))
    where = f"for {int(bad.sum())} of {len(bad)} rows (first: {_row_label(rows, first)})"
    modules = list(modules)
    if not modules and precision is None:
        raise ValueError(f"{what} holds {word} {where}; {source} needs finite inputs")
    raise ValueError(f"{source} produced {word} {what} {where}: {_likely_cause(modules, precision)}")


class CheckedQueries(KeyedEquality, pt.Transformer):
    """Checks the ``query`` column before an engine sees it (qids become ``str``, NUL bytes spaces: PISA would fail
    with an opaque ``SystemError``). Stateless, so all instances are equal (``pt.Experiment`` shares prefixes)."""

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        pta.validate.query_frame(inp, extra_columns=["query"])  # names a missing qid / query column
        if inp.empty:
            return inp
        queries = text_column(inp, "query", "qid")
        one_query_per_qid(inp)  # PISA would return both queries' results under the one qid
        return inp.assign(qid=[checked_id(q, "qid") for q in inp["qid"]], query=queries)

    def eq_key(self) -> tuple:
        return ()

    def __repr__(self) -> str:
        return "CheckedQueries()"
