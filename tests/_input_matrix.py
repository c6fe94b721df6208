"""What the bad-input matrices (``test_bad_inputs.py``, ``test_bad_inputs_values.py``) share: every model loaded from
the released hub layouts, the index builders and retrievers, and the check that a tolerated input gives the clean
input's answer."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
from _hub import require_fixtures
from _tolerance import assert_float_close


def load_models() -> dict:
    """One of every transformer, from the hub fixtures (skips without them)."""
    require_fixtures()
    import pyterrier_tite as t

    cpu = {"device": "cpu"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # MonoCE / CELI start a new score head on these checkpoints
        return {
            "TITE": t.TITE.from_pretrained("webis/tite-2-late-msmarco", **cpu),
            "BertBiEncoder": t.BertBiEncoder.from_pretrained("naver/efficient-splade-V-large-query", **cpu),
            "Aggretriever": t.Aggretriever.from_pretrained("castorini/aggretriever-cocondenser", **cpu),
            "Splade": t.Splade.from_pretrained("naver/splade-cocondenser-ensembledistil", **cpu),
            "SparseCE": t.SparseCE.from_pretrained("webis/sparse-cross-encoder-4-4096", **cpu),
            "MonoCE": t.MonoCE("naver/splade-cocondenser-ensembledistil", **cpu),
            "CELI": t.CELI("webis/sparse-cross-encoder-4-4096", **cpu),
        }


def build_bm25(path, docs, models=None) -> None:
    from pyterrier_tite.store.pisa_build import build_pisa_index

    build_pisa_index(iter(docs), str(path), ["text"])


def bm25_retriever(path, models):
    import pyterrier_tite as t

    return t.bm25("vaswani", path=str(path))  # the dataset names nothing here: the index at `path` exists


def build_splade(path, docs, models) -> None:
    models["Splade"].indexer(str(path), verbose=False).index(iter(docs))


def build_dense(path, docs, models) -> None:
    import pyterrier_dr

    (models["TITE"] >> pyterrier_dr.FlexIndex(str(path), verbose=False)).index(iter(docs))


def assert_same_answer(got: pd.DataFrame, expected: pd.DataFrame, ids_as_str: bool = False) -> None:
    """Same ids and ranks, and scores, vectors and term weights within float tolerance; ``ids_as_str`` compares ids
    as strings (where the input's ids were bytes)."""
    for column in ("qid", "docno", "rank"):
        if column in expected:
            a, b = got[column], expected[column]
            if ids_as_str:
                a, b = a.astype(str), b.astype(str)
            assert a.tolist() == b.tolist(), column
    for column in ("score", "query_vec", "doc_vec"):
        if column in expected:
            assert_float_close(np.stack(got[column].to_numpy()), np.stack(expected[column].to_numpy()))
    for column in ("query_toks", "toks"):
        if column in expected:
            for a, b in zip(got[column], expected[column], strict=True):
                assert a.keys() == b.keys()
                assert_float_close(np.array(list(a.values())), np.array([b[k] for k in a]))
